//! The lab's statistics: the spread (median, minimum, maximum) of each figure over the
//! repeats of a cell, and paired differences against [`BASELINE`] formed within each repeat.

use std::collections::BTreeMap;

use integration_tests::workload::{Attribution, PathFigures, RunResult, Urgencies, Workload};
use serde::Serialize;

use crate::args::LabConfig;

/// The name of the baseline case paired differences are computed against.
pub const BASELINE: &str = "stock";

const KIB: f64 = 1024.0;

/// Median, minimum and maximum of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median (the mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sample size.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

/// One line of the main table: the spread of each figure over the repeats of one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryRow {
    /// Workload.
    pub workload: Workload,
    /// Urgencies.
    pub urgencies: Urgencies,
    /// Case name.
    pub case: String,
    /// `critical_first_byte_ms`.
    pub critical_first_byte_ms: Spread,
    /// `critical_complete_ms`.
    pub critical_complete_ms: Spread,
    /// `background_bytes_before_critical`, in KiB.
    pub background_kib_before_critical: Spread,
    /// `fixture_complete_ms`.
    pub fixture_complete_ms: Spread,
    /// `tls_records`.
    pub tls_records: Spread,
    /// `wire_bytes`, in KiB.
    pub wire_kib: Spread,
    /// The median `critical_complete_ms` over the median of the same case and urgencies in
    /// the `alone` workload; `None` when `alone` was not run.
    pub critical_vs_alone: Option<f64>,
    /// `fixture_goodput_mbit`.
    pub fixture_goodput_mbit: Spread,
    /// `bottleneck_share` (with cross traffic only).
    pub bottleneck_share: Option<Spread>,
    /// `link_drops` (tun link only).
    pub link_drops: Option<Spread>,
    /// `server_retransmits` (our servers only).
    pub server_retransmits: Option<Spread>,
}

/// One line of the `--explain` table: where the bytes ahead of the critical response were
/// when the server read the critical request (see `Attribution`), over the repeats of one
/// cell; each `None` where the figure is not known for the cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainRow {
    /// Workload.
    pub workload: Workload,
    /// Urgencies.
    pub urgencies: Urgencies,
    /// Case name.
    pub case: String,
    /// The tun emulator's server-to-client queue, KiB.
    pub link_queue_kib: Option<Spread>,
    /// The wrapper's write queue, KiB.
    pub server_queued_kib: Option<Spread>,
    /// Runs in which rustls held ciphertext, of the runs that report it.
    pub server_tls_buffered_runs: Option<(usize, usize)>,
    /// The kernel's unsent bytes, KiB.
    pub server_notsent_kib: Option<Spread>,
    /// The bytes in flight, KiB.
    pub server_in_flight_kib: Option<Spread>,
    /// What the server sent after reading the request, before the critical response, KiB.
    pub server_sent_after_request_kib: Option<Spread>,
    /// From reading the request to the critical response's first DATA frame, ms.
    pub server_first_data_ms: Option<Spread>,
}

/// One line of the paired table: `case - stock`, computed within each repeat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedRow {
    /// Workload.
    pub workload: Workload,
    /// Urgencies.
    pub urgencies: Urgencies,
    /// Case name (compared with [`BASELINE`]).
    pub case: String,
    /// Difference in `critical_complete_ms`.
    pub critical_complete_ms: Spread,
    /// Difference in `background_bytes_before_critical`, in KiB.
    pub background_kib_before_critical: Spread,
    /// Difference in `fixture_complete_ms`.
    pub fixture_complete_ms: Spread,
    /// Repeats in which the critical response completed sooner than under stock.
    pub critical_sooner: usize,
}

fn cell_results<'a>(
    results: &'a [RunResult],
    workload: Workload,
    urgencies: Urgencies,
    case: &'a str,
) -> impl Iterator<Item = &'a RunResult> + 'a {
    results
        .iter()
        .filter(move |r| r.workload == workload && r.urgencies == urgencies && r.case == case)
}

fn median_complete(
    results: &[RunResult],
    workload: Workload,
    urgencies: Urgencies,
    case: &str,
) -> Option<f64> {
    Spread::of(cell_results(results, workload, urgencies, case).map(|r| r.critical_complete_ms))
        .map(|s| s.median)
}

/// The main table's rows, in the configuration's order (cells without results are left out).
pub fn summarize(config: &LabConfig, results: &[RunResult]) -> Vec<SummaryRow> {
    config
        .cells()
        .into_iter()
        .filter_map(|(case, workload, urgencies)| {
            let runs: Vec<&RunResult> =
                cell_results(results, workload, urgencies, case.name()).collect();
            let spread = |f: &dyn Fn(&RunResult) -> f64| Spread::of(runs.iter().map(|r| f(r)));
            let known = |f: fn(&PathFigures) -> Option<f64>| {
                Spread::of(runs.iter().filter_map(|r| f(&r.path)))
            };
            let alone = median_complete(results, Workload::Alone, urgencies, case.name());
            let critical_complete_ms = spread(&|r| r.critical_complete_ms)?;
            Some(SummaryRow {
                workload,
                urgencies,
                case: case.name().to_string(),
                critical_first_byte_ms: spread(&|r| r.critical_first_byte_ms)?,
                critical_vs_alone: alone
                    .filter(|&a| a > 0.0)
                    .map(|a| critical_complete_ms.median / a),
                critical_complete_ms,
                background_kib_before_critical: spread(&|r| {
                    r.background_bytes_before_critical as f64 / KIB
                })?,
                fixture_complete_ms: spread(&|r| r.fixture_complete_ms)?,
                tls_records: spread(&|r| r.tls_records as f64)?,
                wire_kib: spread(&|r| r.wire_bytes as f64 / KIB)?,
                fixture_goodput_mbit: spread(&|r| r.path.fixture_goodput_mbit)?,
                bottleneck_share: known(|p| p.bottleneck_share),
                link_drops: known(|p| p.link_drops.map(|n| n as f64)),
                server_retransmits: known(|p| p.server_retransmits.map(|n| n as f64)),
            })
        })
        .collect()
}

/// The `--explain` table's rows, in the configuration's order (cells without results are
/// left out).
pub fn explain(config: &LabConfig, results: &[RunResult]) -> Vec<ExplainRow> {
    config
        .cells()
        .into_iter()
        .filter_map(|(case, workload, urgencies)| {
            let runs: Vec<&Attribution> = cell_results(results, workload, urgencies, case.name())
                .map(|r| &r.attribution)
                .collect();
            if runs.is_empty() {
                return None;
            }
            let kib = |f: fn(&Attribution) -> Option<u64>| {
                Spread::of(runs.iter().filter_map(|a| f(a)).map(|b| b as f64 / KIB))
            };
            let buffered: Vec<bool> = runs
                .iter()
                .filter_map(|a| a.server_tls_buffered_at_request)
                .collect();
            Some(ExplainRow {
                workload,
                urgencies,
                case: case.name().to_string(),
                link_queue_kib: kib(|a| a.link_queue_bytes_at_request),
                server_queued_kib: kib(|a| a.server_queued_bytes_at_request),
                server_tls_buffered_runs: (!buffered.is_empty())
                    .then(|| (buffered.iter().filter(|&&b| b).count(), buffered.len())),
                server_notsent_kib: kib(|a| a.server_notsent_bytes_at_request),
                server_in_flight_kib: kib(|a| a.server_in_flight_bytes_at_request),
                server_sent_after_request_kib: kib(|a| a.server_bytes_after_request),
                server_first_data_ms: Spread::of(
                    runs.iter().filter_map(|a| a.server_first_data_ms),
                ),
            })
        })
        .collect()
}

/// Paired differences against [`BASELINE`], formed within each repeat (and, with several
/// clients at once, between the clients of the same index; empty when stock is not among
/// the cases).
pub fn paired(config: &LabConfig, results: &[RunResult]) -> Vec<PairedRow> {
    config
        .cells()
        .into_iter()
        .filter(|(case, _, _)| case.name() != BASELINE)
        .filter_map(|(case, workload, urgencies)| {
            let stock: BTreeMap<(usize, usize), &RunResult> =
                cell_results(results, workload, urgencies, BASELINE)
                    .map(|r| ((r.repeat, r.client), r))
                    .collect();
            let pairs: Vec<(&RunResult, &RunResult)> =
                cell_results(results, workload, urgencies, case.name())
                    .filter_map(|r| stock.get(&(r.repeat, r.client)).map(|s| (r, *s)))
                    .collect();
            let diff =
                |f: &dyn Fn(&RunResult) -> f64| Spread::of(pairs.iter().map(|(r, s)| f(r) - f(s)));
            Some(PairedRow {
                workload,
                urgencies,
                case: case.name().to_string(),
                critical_complete_ms: diff(&|r| r.critical_complete_ms)?,
                background_kib_before_critical: diff(&|r| {
                    r.background_bytes_before_critical as f64 / KIB
                })?,
                fixture_complete_ms: diff(&|r| r.fixture_complete_ms)?,
                critical_sooner: pairs
                    .iter()
                    .filter(|(r, s)| r.critical_complete_ms < s.critical_complete_ms)
                    .count(),
            })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::args::tests::args;

    /// A run of the `explicit` urgencies with the given figures.
    pub(crate) fn result(
        case: &str,
        workload: Workload,
        repeat: usize,
        complete: f64,
        bg: u64,
    ) -> RunResult {
        RunResult {
            case: case.to_string(),
            workload,
            urgencies: Urgencies::Explicit,
            repeat,
            client: 0,
            critical_first_byte_ms: complete - 1.0,
            critical_complete_ms: complete,
            background_bytes_before_critical: bg,
            background_bytes_at_critical_request: 0,
            fixture_complete_ms: 900.0 + complete,
            critical_sent_ms: 40.0,
            tls_records: 258,
            wire_bytes: 2_200_000,
            attribution: Attribution::default(),
            path: PathFigures {
                fixture_goodput_mbit: 18.0 - repeat as f64,
                ..PathFigures::default()
            },
        }
    }

    /// `stock` and `scheduled` in `late` / `explicit`, three repeats.
    pub(crate) fn three_repeats() -> (LabConfig, Vec<RunResult>) {
        let config = LabConfig::from_args(&args(&[
            "--cases",
            "stock,scheduled",
            "--workloads",
            "late",
            "--urgencies",
            "explicit",
            "--seed",
            "1",
        ]))
        .unwrap();
        let mut results = Vec::new();
        for (repeat, (stock, scheduled)) in [(800.0, 30.0), (850.0, 25.0), (700.0, 40.0)]
            .into_iter()
            .enumerate()
        {
            results.push(result("stock", Workload::Late, repeat, stock, 1 << 20));
            results.push(result(
                "scheduled",
                Workload::Late,
                repeat,
                scheduled,
                64 << 10,
            ));
        }
        (config, results)
    }

    #[test]
    fn path_figures_are_medians_of_the_runs_that_have_them() {
        let (config, mut results) = three_repeats();
        for r in results.iter_mut().filter(|r| r.case == "scheduled") {
            r.path.bottleneck_share = Some(0.1 * (r.repeat + 1) as f64);
            r.path.link_drops = Some(10 * r.repeat as u64);
            // Only two of the three runs know their retransmits.
            r.path.server_retransmits = (r.repeat > 0).then_some(r.repeat as u64);
        }
        let rows = summarize(&config, &results);
        let scheduled = &rows[1];
        let share = scheduled.bottleneck_share.unwrap();
        assert_eq!((share.median, share.n), (0.2, 3));
        assert_eq!(scheduled.link_drops.map(|s| s.median), Some(10.0));
        let retransmits = scheduled.server_retransmits.unwrap();
        assert_eq!((retransmits.median, retransmits.n), (1.5, 2));
        assert_eq!(rows[0].bottleneck_share, None);
    }

    #[test]
    fn spreads() {
        let s = Spread::of([3.0, 1.0, 10.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
        let s = Spread::of([3.0, 1.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 10.0, 3));
        assert_eq!(Spread::of([]), None);
    }

    #[test]
    fn medians_and_paired_differences() {
        let (config, results) = three_repeats();
        let rows = summarize(&config, &results);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].case, "stock");
        assert_eq!(rows[0].critical_complete_ms.median, 800.0);
        assert_eq!(rows[1].background_kib_before_critical.median, 64.0);
        let pairs = paired(&config, &results);
        assert_eq!(pairs.len(), 1);
        // Within each repeat: -770, -825, -660.
        assert_eq!(pairs[0].critical_complete_ms.median, -770.0);
        assert_eq!(pairs[0].critical_complete_ms.min, -825.0);
        assert_eq!(pairs[0].critical_complete_ms.max, -660.0);
        assert_eq!(pairs[0].background_kib_before_critical.median, -960.0);
        assert_eq!(pairs[0].critical_sooner, 3);
        assert_eq!(rows[0].critical_vs_alone, None, "alone was not run");
        assert_eq!(rows[0].fixture_goodput_mbit.median, 17.0);
        assert_eq!(rows[0].fixture_goodput_mbit.min, 16.0);
        assert_eq!(rows[0].bottleneck_share, None, "no cross traffic");
        assert_eq!(rows[0].link_drops, None, "relay");
        assert_eq!(rows[0].server_retransmits, None);
    }

    #[test]
    fn several_clients_pair_with_stock_s_client_of_the_same_index() {
        let (config, mut results) = three_repeats();
        // A second client in every run, 100 ms slower than the first.
        let second: Vec<RunResult> = results
            .iter()
            .map(|r| RunResult {
                client: 1,
                critical_complete_ms: r.critical_complete_ms + 100.0,
                ..r.clone()
            })
            .collect();
        results.extend(second);
        let pairs = paired(&config, &results);
        assert_eq!(pairs[0].critical_complete_ms.n, 6, "two pairs per repeat");
        // Client with client: the same differences twice; across clients they would differ.
        assert_eq!(pairs[0].critical_complete_ms.min, -825.0);
        assert_eq!(pairs[0].critical_complete_ms.max, -660.0);
        assert_eq!(summarize(&config, &results)[0].critical_complete_ms.n, 6);
    }

    #[test]
    fn critical_times_as_multiples_of_alone_and_the_explain_rows() {
        let (mut config, mut results) = three_repeats();
        config.workloads.insert(0, Workload::Alone);
        for repeat in 0..3 {
            results.push(result("stock", Workload::Alone, repeat, 40.0, 0));
            let mut alone = result(
                "scheduled",
                Workload::Alone,
                repeat,
                20.0 + repeat as f64,
                0,
            );
            alone.attribution.server_queued_bytes_at_request = Some(0);
            results.push(alone);
        }
        for r in results.iter_mut().filter(|r| r.case == "scheduled") {
            r.attribution.server_tls_buffered_at_request = Some(r.repeat == 1);
            r.attribution.server_bytes_after_request = Some(2048);
            r.attribution.server_first_data_ms = Some(r.repeat as f64);
        }
        let rows = summarize(&config, &results);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].workload, Workload::Alone);
        assert_eq!(rows[0].critical_vs_alone, Some(1.0));
        // Late: stock 800 / 40, scheduled 30 / 21.
        assert_eq!(rows[2].critical_vs_alone, Some(20.0));
        assert_eq!(rows[3].critical_vs_alone, Some(30.0 / 21.0));
        let explained = explain(&config, &results);
        assert_eq!(explained.len(), 4);
        assert_eq!(
            explained[0].server_queued_kib, None,
            "stock keeps no counters"
        );
        assert_eq!(explained[1].server_queued_kib.map(|s| s.median), Some(0.0));
        assert_eq!(explained[3].server_tls_buffered_runs, Some((1, 3)));
        assert_eq!(
            explained[3].server_sent_after_request_kib.map(|s| s.median),
            Some(2.0)
        );
        assert_eq!(explained[3].link_queue_kib, None);
        assert_eq!(
            explained[3].server_first_data_ms.map(|s| (s.median, s.max)),
            Some((1.0, 2.0))
        );
        assert_eq!(explained[0].server_first_data_ms, None);
    }
}
