//! What the lab prints and writes: the Markdown tables of medians and paired differences,
//! and the JSON (configuration, every run, the tables' rows).

use std::fmt::Write as _;

use examples::responses::{BG_LEN, CRITICAL_LEN, CRITICAL_PATH, FIXTURE_BG_PATHS};
use integration_tests::peers::INSTALL_HINT;
use integration_tests::workload::{Case, RunResult, Urgencies, Workload, LATE_THRESHOLD};

use crate::args::{LabConfig, LinkMode};
use crate::outcome::{completed, failures, render_failures, RunOutcome};
use crate::stats::{explain, paired, summarize, ExplainRow, Spread, BASELINE};

/// `median [min, max]` with `decimals` decimals, with a sign when `signed`.
pub fn show(spread: &Spread, decimals: usize, signed: bool) -> String {
    let f = |x: f64| {
        if signed {
            format!("{x:+.decimals$}")
        } else {
            format!("{x:.decimals$}")
        }
    };
    format!(
        "{} [{}, {}]",
        f(spread.median),
        f(spread.min),
        f(spread.max)
    )
}

/// A Markdown table with padded columns; the first `text_columns` are left-aligned, the
/// others right-aligned.
pub fn markdown(headers: &[&str], rows: &[Vec<String>], text_columns: usize) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = String>| {
        let mut s = String::from("|");
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            if i < text_columns {
                let _ = write!(s, " {cell}{} |", " ".repeat(pad));
            } else {
                let _ = write!(s, " {}{cell} |", " ".repeat(pad));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(&mut headers.iter().map(|h| h.to_string()));
    out += &line(&mut widths.iter().enumerate().map(|(i, w)| {
        if i < text_columns {
            format!(":{}", "-".repeat(w - 1))
        } else {
            format!("{}:", "-".repeat(w - 1))
        }
    }));
    for row in rows {
        out += &line(&mut row.iter().cloned());
    }
    out
}

/// A Markdown table with a line per cell: the cell's labels (workload, urgencies, case),
/// then the `figures` of its row under `headers`.
fn cell_table<R, const N: usize>(
    rows: &[R],
    headers: [&str; N],
    figures: impl Fn(&R) -> (Workload, Urgencies, &str, [String; N]),
) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (workload, urgencies, case, figures) = figures(r);
            [
                workload.to_string(),
                urgencies.to_string(),
                case.to_string(),
            ]
            .into_iter()
            .chain(figures)
            .collect()
        })
        .collect();
    let headers: Vec<&str> = ["workload", "urgencies", "case"]
        .into_iter()
        .chain(headers)
        .collect();
    markdown(&headers, &rows, 3)
}

/// A median critical time as a multiple of `alone`'s (`-` when `alone` was not run).
pub fn times_alone(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"))
}

/// [`show`], `-` when unknown.
fn show_known(spread: &Option<Spread>, decimals: usize) -> String {
    spread
        .as_ref()
        .map_or_else(|| "-".to_string(), |s| show(s, decimals, false))
}

/// A spread's median in KiB, `-` when unknown.
pub fn median_kib(spread: Option<Spread>) -> String {
    spread.map_or_else(|| "-".to_string(), |s| format!("{:.1}", s.median))
}

/// The `--explain` table: where the bytes ahead of the critical response were when the
/// server read the critical request (medians).
fn render_explain(rows: &[ExplainRow]) -> String {
    let mut out = String::from(
        "\nWhere the bytes ahead of the critical response were when the server read the \
         critical request (medians, KiB; `-`: not known for this case or link): the link's \
         server-to-client queue (tun only), and in our server (tls-flush cases only) the \
         wrapper's queue, runs in which rustls held ciphertext, the kernel's unsent bytes, \
         the bytes in flight, what the server sent after reading the request before the \
         critical response's first DATA frame, and how long after the read that frame came \
         (ms, median and max).\n\n",
    );
    out += &cell_table(
        rows,
        [
            "link queue",
            "wrapper queue",
            "rustls held",
            "kernel unsent",
            "in flight",
            "sent after read",
            "first DATA after read ms",
        ],
        |r| {
            (
                r.workload,
                r.urgencies,
                &r.case,
                [
                    median_kib(r.link_queue_kib),
                    median_kib(r.server_queued_kib),
                    r.server_tls_buffered_runs
                        .map_or_else(|| "-".to_string(), |(n, of)| format!("{n}/{of}")),
                    median_kib(r.server_notsent_kib),
                    median_kib(r.server_in_flight_kib),
                    median_kib(r.server_sent_after_request_kib),
                    r.server_first_data_ms.map_or_else(
                        || "-".to_string(),
                        |s| format!("{:.1} [{:.1}]", s.median, s.max),
                    ),
                ],
            )
        },
    );
    out
}

/// The lab's report: the link, the main table (over the completed runs) with the runs that
/// did not complete under it, the paired differences, and with `--explain` the
/// attribution table.
pub fn render_report(config: &LabConfig, outcomes: &[RunOutcome]) -> String {
    let results = completed(outcomes);
    let mut out = render_tables(config, &results, outcomes);
    if config.explain {
        out += &render_explain(&explain(config, &results));
    }
    out
}

/// The link, the main table, the runs that did not complete and the paired differences.
fn render_tables(config: &LabConfig, results: &[RunResult], outcomes: &[RunOutcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", config.describe_link());
    let _ = writeln!(
        out,
        "{} repeats, seed {}, order randomized within each repeat; {}. \
         Median [min, max]; critical times from the moment the critical request left the \
         client, fixture from connection start; goodput: body bytes from the first request \
         to the last body byte.\n",
        config.repeats,
        config.seed,
        match outcomes.len() - results.len() {
            0 => format!("{} runs", outcomes.len()),
            failed => format!("{} runs, {failed} did not complete", outcomes.len()),
        }
    );
    if let Some(note) = skipped_note(config) {
        out += &note;
        out += "\n";
    }
    out += &cell_table(
        &summarize(config, results),
        [
            "critical first byte ms",
            "critical complete ms",
            "x alone",
            "background KiB before critical",
            "fixture complete ms",
            "TLS records",
            "goodput Mbit/s",
            "bottleneck share",
            "link drops",
            "server retransmits",
        ],
        |r| {
            (
                r.workload,
                r.urgencies,
                &r.case,
                [
                    show(&r.critical_first_byte_ms, 1, false),
                    show(&r.critical_complete_ms, 1, false),
                    times_alone(r.critical_vs_alone),
                    show(&r.background_kib_before_critical, 0, false),
                    show(&r.fixture_complete_ms, 1, false),
                    show(&r.tls_records, 0, false),
                    show(&r.fixture_goodput_mbit, 1, false),
                    show_known(&r.bottleneck_share, 2),
                    show_known(&r.link_drops, 0),
                    show_known(&r.server_retransmits, 0),
                ],
            )
        },
    );
    out += &render_failures(&failures(config, outcomes));

    let pairs = paired(config, results);
    if pairs.is_empty() {
        let _ = writeln!(
            out,
            "\n(no paired differences: they need `{BASELINE}` and another case)"
        );
        return out;
    }
    let _ = writeln!(
        out,
        "\nPaired differences against {BASELINE} (case minus {BASELINE} within each repeat): \
         median [min, max]\n"
    );
    out += &cell_table(
        &pairs,
        [
            "Δ critical complete ms",
            "sooner",
            "Δ background KiB before critical",
            "Δ fixture complete ms",
        ],
        |r| {
            (
                r.workload,
                r.urgencies,
                &r.case,
                [
                    show(&r.critical_complete_ms, 1, true),
                    format!("{}/{}", r.critical_sooner, r.critical_complete_ms.n),
                    show(&r.background_kib_before_critical, 0, true),
                    show(&r.fixture_complete_ms, 1, true),
                ],
            )
        },
    );
    out
}

/// The configuration as JSON (the `config` key of the lab's JSON output).
pub fn config_json(config: &LabConfig) -> serde_json::Value {
    serde_json::json!({
        "repeats": config.repeats,
        "seed": config.seed,
        "cases": config.cases.iter().map(Case::name).collect::<Vec<_>>(),
        "skipped": config.skipped.iter().map(|m| serde_json::json!({
            "case": m.kind.name(),
            "reason": m.to_string(),
        })).collect::<Vec<_>>(),
        "workloads": config.workloads,
        "urgencies": config.urgencies,
        "link": match config.link_mode {
            LinkMode::Relay => serde_json::json!({
                "mode": config.link_mode,
                "rtt_ms": config.link.rtt.as_secs_f64() * 1e3,
                "one_way_delay_ms": config.link.one_way_delay().as_secs_f64() * 1e3,
                "rate_mbit": config.link.rate_mbit,
                "queue_bytes": config.link.queue_limit(),
                "description": config.link.describe(),
            }),
            LinkMode::Tun => serde_json::json!({
                "mode": config.link_mode,
                "rtt_ms": config.tun.rtt.as_secs_f64() * 1e3,
                "one_way_delay_ms": config.tun.one_way_delay().as_secs_f64() * 1e3,
                "rate_mbit": config.tun.rate_mbit,
                "queue_packets": config.tun.queue_packets,
                "mtu": config.tun.mtu,
                "cc": config.tun.cc,
                "cross_flows": config.tun.cross_flows,
                "clients": config.tun.clients,
                "impairments": crate::impairments::to_json(&config.tun),
                "description": config.tun.describe(),
            }),
        },
        "fixture": {
            "background": FIXTURE_BG_PATHS,
            "background_bytes": BG_LEN,
            "critical": CRITICAL_PATH,
            "critical_bytes": CRITICAL_LEN,
            "late_threshold_bytes": LATE_THRESHOLD,
        },
    })
}

/// The lab's JSON: `{"config": ..., "results": [...], "summary": [...], "paired": [...],
/// "explain": [...], "failed": [...]}`: every run in `results` (`completed` false with an
/// `error` for one that failed or timed out), the statistics over the completed ones, and
/// per cell the runs that did not complete.
pub fn to_json(config: &LabConfig, outcomes: &[RunOutcome]) -> serde_json::Value {
    let results = completed(outcomes);
    serde_json::json!({
        "config": config_json(config),
        "results": outcomes.iter().map(RunOutcome::to_json).collect::<Vec<_>>(),
        "summary": summarize(config, &results),
        "paired": paired(config, &results),
        "explain": explain(config, &results),
        "failed": failures(config, outcomes),
    })
}

/// The line naming the peers skipped because they are not installed, if any.
pub fn skipped_note(config: &LabConfig) -> Option<String> {
    if config.skipped.is_empty() {
        return None;
    }
    let names: Vec<&str> = config.skipped.iter().map(|m| m.kind.name()).collect();
    Some(format!(
        "Skipped, not installed ({INSTALL_HINT}): {}.\n",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::three_repeats;

    fn outcomes(results: Vec<RunResult>) -> Vec<RunOutcome> {
        results
            .into_iter()
            .map(|r| RunOutcome::Completed(Box::new(r)))
            .collect()
    }

    #[test]
    fn report_has_medians_and_paired_differences() {
        let (config, results) = three_repeats();
        let results = outcomes(results);
        let report = render_report(&config, &results);
        assert!(report.starts_with(&config.link.describe()), "{report}");
        assert!(
            report.contains("| late     | explicit  | scheduled |"),
            "{report}"
        );
        assert!(report.contains("-770.0 [-825.0, -660.0]"), "{report}");
        assert!(report.contains(" 3/3 |"), "{report}");
        let json = to_json(&config, &results);
        let first = &json["results"][0];
        for key in [
            "case",
            "workload",
            "urgencies",
            "repeat",
            "critical_first_byte_ms",
            "critical_complete_ms",
            "background_bytes_before_critical",
            "fixture_complete_ms",
            "tls_records",
            "fixture_goodput_mbit",
            "fixture_transfer_ms",
        ] {
            assert!(!first[key].is_null(), "{key} in {first}");
        }
        for key in [
            "bottleneck_share",
            "cross_bytes",
            "link_drops",
            "server_retransmits",
        ] {
            assert!(
                first[key].is_null(),
                "relay, no cross traffic: {key} in {first}"
            );
        }
        assert_eq!(first["completed"], true);
        // Goodput, share, drops, retransmits: the relay has no drops, and no case here
        // reports retransmits.
        let stock = report
            .lines()
            .find(|l| l.starts_with("| late     | explicit  | stock "))
            .expect("stock's row");
        let cells: Vec<&str> = stock.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells[9..], ["17.0 [16.0, 18.0]", "-", "-", "-"], "{report}");
        assert_eq!(first["workload"], "late");
        assert_eq!(json["config"]["link"]["mode"], "relay");
        assert_eq!(json["config"]["fixture"]["background"][1], "/bg/2");
        assert_eq!(json["summary"][0]["critical_complete_ms"]["median"], 800.0);
        assert_eq!(json["paired"][0]["critical_sooner"], 3);
    }

    #[test]
    fn without_stock_there_are_no_paired_differences() {
        let (mut config, mut results) = three_repeats();
        config.cases.retain(|c| c.name() != BASELINE);
        results.retain(|r| r.case != BASELINE);
        let report = render_report(&config, &outcomes(results));
        assert!(
            report.contains("(no paired differences: they need `stock` and another case)"),
            "{report}"
        );
    }
}
