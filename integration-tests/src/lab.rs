//! The lab: runs every (case, workload, urgencies) cell of seed 000 a number of times behind
//! the link emulator, in a seeded random order within each repeat, and reports medians,
//! paired differences against `stock`, JSON and an SVG chart. The `lab` binary is a thin
//! shell around [`main`]:
//!
//! ```text
//! cargo run --release -p integration-tests --bin lab -- --repeats 30 --json lab.json --svg lab.svg
//! ```
//!
//! Real peer servers ([`crate::peers`]: `nginx`, `nginx-4k`, `nghttpd`, `h2o`, `apache`) run
//! beside ours when named in `--cases` (`scripts/install-peers.sh` installs them); a peer that
//! is not installed is skipped with one line on stderr ([`LabConfig::skip_missing_peers`]).
//!
//! `--link tun` (root only) runs every case through the kernel-faithful link of
//! [`crate::tun`] instead of the loopback relay: the server in one network namespace, the
//! client in another, kernel TCP with `--cc cubic|bbr` end to end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

use crate::link::LinkConfig;
use crate::peers::NotInstalled;
use crate::tun::{self, CongestionControl, TunConfig};
use crate::workload::{run_once, run_tun, Case, RunResult, Urgencies, Workload};
use crate::BoxError;

/// The name of the baseline case paired differences are computed against.
pub const BASELINE: &str = "stock";

/// Which link the runs go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkMode {
    /// The embedded loopback relay ([`crate::link::RelayLink`]).
    Relay,
    /// The kernel-faithful link between two network namespaces ([`crate::tun::TunLink`],
    /// root only).
    Tun,
}

impl LinkMode {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Relay => "relay",
            LinkMode::Tun => "tun",
        }
    }
}

fn parse_link(s: &str) -> Result<LinkMode, String> {
    match s {
        "relay" => Ok(LinkMode::Relay),
        "tun" => Ok(LinkMode::Tun),
        other => Err(format!(
            "unknown link `{other}` (known: relay, the embedded loopback relay; tun, the \
             kernel-faithful link between two network namespaces, root only)"
        )),
    }
}

/// Command-line flags of the `lab` binary.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "lab",
    about = "Reproduces seed 000: a 4 KiB critical response against two 1 MiB background \
             responses on one HTTP/2 connection, for each server case, behind an emulated link",
    after_help = "The table goes to stdout, the progress bar to stderr. Times are from the moment \
                  the critical request left the client (fixture completion: from connection \
                  start).\n\n\
                  Peers: the real servers nginx, nginx-4k (ssl_buffer_size 4k), nghttpd \
                  (--no-rfc7540-pri: RFC 9218 scheduling), h2o and apache (event MPM, \
                  mod_http2) run only when named in --cases, e.g. \
                  --cases stock,scheduled,nginx,nginx-4k,nghttpd,h2o,apache; \
                  scripts/install-peers.sh installs them (Debian packages). Each run starts a \
                  fresh one from a configuration written to a temporary directory. A peer \
                  that is not installed is skipped with one line on stderr; the default \
                  cases are ours only, so the default run needs no peer."
)]
pub struct LabArgs {
    /// Runs of every (case, workload, urgencies) cell.
    #[arg(long, default_value_t = 10)]
    pub repeats: usize,
    /// Cases, comma-separated: stock, stock-4k, early-flush, dynamic, scheduled; the peers
    /// nginx, nginx-4k, nghttpd, h2o, apache (skipped when not installed; see below); or
    /// NAME@HOST:PORT for an external server serving the same fixture. The default is ours
    /// only.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "stock,stock-4k,early-flush,dynamic,scheduled"
    )]
    pub cases: Vec<Case>,
    /// Workloads, comma-separated: simultaneous, late.
    #[arg(long, value_delimiter = ',', default_value = "simultaneous,late")]
    pub workloads: Vec<Workload>,
    /// Urgencies, comma-separated: equal (all u=3), explicit (critical u=0, background u=5, i).
    #[arg(long, value_delimiter = ',', default_value = "equal,explicit")]
    pub urgencies: Vec<Urgencies>,
    /// The link: `relay` (the embedded loopback relay, rootless) or `tun` (root only: the
    /// server and the client in two network namespaces joined by a TUN-based packet
    /// emulator, kernel TCP end to end).
    #[arg(long, default_value = "relay", value_parser = parse_link)]
    pub link: LinkMode,
    /// TCP congestion control of both namespaces of `--link tun`: cubic or bbr [default:
    /// cubic].
    #[arg(long)]
    pub cc: Option<CongestionControl>,
    /// Round-trip time of the link in milliseconds [default: the link's, 20].
    #[arg(long)]
    pub rtt_ms: Option<f64>,
    /// Rate of the link in Mbit/s, each direction [default: the link's, 20].
    #[arg(long)]
    pub rate_mbit: Option<f64>,
    /// Queue of the relay link in bytes, each direction [default: one bandwidth-delay
    /// product].
    #[arg(long)]
    pub queue_bytes: Option<usize>,
    /// Queue of the tun link in packets, each direction; tail drop when full [default: 1000,
    /// like netem's limit].
    #[arg(long)]
    pub queue_packets: Option<usize>,
    /// Seed of the random order within each repeat [default: a random one, printed].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Writes `{"config": ..., "results": [...]}` (plus the summary) to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draws the median critical completion times as grouped bars to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// What the lab runs.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Runs of every cell.
    pub repeats: usize,
    /// Servers under test; [`BASELINE`] among them enables paired differences.
    pub cases: Vec<Case>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Urgency sets.
    pub urgencies: Vec<Urgencies>,
    /// Link mode.
    pub link_mode: LinkMode,
    /// Link parameters (of the relay; the tun link takes its RTT and rate).
    pub link: LinkConfig,
    /// The tun link's parameters (used with [`LinkMode::Tun`]).
    pub tun: TunConfig,
    /// Seed of the order within each repeat.
    pub seed: u64,
    /// Peer cases asked for but left out because they are not installed (by
    /// [`skip_missing_peers`](Self::skip_missing_peers)).
    pub skipped: Vec<NotInstalled>,
}

impl LabConfig {
    /// The configuration the flags ask for (checks them).
    pub fn from_args(args: &LabArgs) -> Result<LabConfig, BoxError> {
        if args.repeats == 0 {
            return Err("--repeats must be at least 1".into());
        }
        let mut link = LinkConfig::default();
        if let Some(rtt) = args.rtt_ms {
            if !rtt.is_finite() || rtt < 0.0 {
                return Err(format!("--rtt-ms must be a non-negative number, not {rtt}").into());
            }
            link.rtt = Duration::from_secs_f64(rtt / 1e3);
        }
        if let Some(rate) = args.rate_mbit {
            if !rate.is_finite() || rate <= 0.0 {
                return Err(format!("--rate-mbit must be a positive number, not {rate}").into());
            }
            link.rate_mbit = rate;
        }
        if let Some(queue) = args.queue_bytes {
            if queue == 0 {
                return Err("--queue-bytes must be at least 1".into());
            }
            link.queue_bytes = Some(queue);
        }
        let mut tun = TunConfig::from_link(&link);
        match args.link {
            LinkMode::Relay => {
                if args.cc.is_some() {
                    return Err(
                        "--cc applies to --link tun only: the relay link's TCP runs \
                                over loopback, where congestion control does not act"
                            .into(),
                    );
                }
                if args.queue_packets.is_some() {
                    return Err(
                        "--queue-packets applies to --link tun only (the relay's queue is \
                         --queue-bytes)"
                            .into(),
                    );
                }
            }
            LinkMode::Tun => {
                if args.queue_bytes.is_some() {
                    return Err(
                        "--queue-bytes applies to --link relay only (the tun link's queue \
                         counts packets: --queue-packets)"
                            .into(),
                    );
                }
                if let Some(packets) = args.queue_packets {
                    if packets == 0 {
                        return Err("--queue-packets must be at least 1".into());
                    }
                    tun.queue_packets = packets;
                }
                tun.cc = args.cc.unwrap_or_default();
            }
        }
        let cases = dedup(&args.cases, Case::clone);
        if let Some(dup) = cases.iter().enumerate().find_map(|(i, c)| {
            cases[..i]
                .iter()
                .any(|d| d.name() == c.name())
                .then(|| c.name())
        }) {
            return Err(format!("two different cases are named `{dup}`").into());
        }
        let config = LabConfig {
            repeats: args.repeats,
            cases,
            workloads: dedup(&args.workloads, |w| *w),
            urgencies: dedup(&args.urgencies, |u| *u),
            link_mode: args.link,
            link,
            tun,
            seed: args
                .seed
                .unwrap_or_else(|| u64::from(rand::random::<u32>())),
            skipped: Vec::new(),
        };
        if config.cells().is_empty() {
            return Err(
                "nothing to run: --cases, --workloads and --urgencies may not be empty".into(),
            );
        }
        Ok(config)
    }

    /// Leaves out the peer cases whose server is not installed here, remembers them in
    /// [`skipped`](Self::skipped) and returns them (the lab prints one line for each, and
    /// stops when no case is left).
    pub fn skip_missing_peers(&mut self) -> &[NotInstalled] {
        let mut kept = Vec::new();
        for case in std::mem::take(&mut self.cases) {
            match case.peer().map(|kind| kind.binary()) {
                Some(Err(missing)) => self.skipped.push(missing),
                _ => kept.push(case),
            }
        }
        self.cases = kept;
        &self.skipped
    }

    /// Every (case, workload, urgencies) cell, in table order.
    pub fn cells(&self) -> Vec<(Case, Workload, Urgencies)> {
        let mut cells = Vec::new();
        for &workload in &self.workloads {
            for &urgencies in &self.urgencies {
                for case in &self.cases {
                    cells.push((case.clone(), workload, urgencies));
                }
            }
        }
        cells
    }

    /// The runs in the order they happen: repeat by repeat, every cell once per repeat, in a
    /// random order drawn from [`seed`](Self::seed).
    pub fn schedule(&self) -> Vec<Planned> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut plan = Vec::new();
        for repeat in 0..self.repeats {
            let mut cells = self.cells();
            cells.shuffle(&mut rng);
            plan.extend(
                cells
                    .into_iter()
                    .map(|(case, workload, urgencies)| Planned {
                        repeat,
                        case,
                        workload,
                        urgencies,
                    }),
            );
        }
        plan
    }

    /// The link's one-line description (the first line of the report).
    pub fn describe_link(&self) -> String {
        match self.link_mode {
            LinkMode::Relay => self.link.describe(),
            LinkMode::Tun => self.tun.describe(),
        }
    }

    /// The configuration as JSON (the `config` key of the lab's JSON output).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "repeats": self.repeats,
            "seed": self.seed,
            "cases": self.cases.iter().map(Case::name).collect::<Vec<_>>(),
            "skipped": self.skipped.iter().map(|m| serde_json::json!({
                "case": m.kind.name(),
                "reason": m.to_string(),
            })).collect::<Vec<_>>(),
            "workloads": self.workloads,
            "urgencies": self.urgencies,
            "link": match self.link_mode {
                LinkMode::Relay => serde_json::json!({
                    "mode": self.link_mode,
                    "rtt_ms": self.link.rtt.as_secs_f64() * 1e3,
                    "one_way_delay_ms": self.link.one_way_delay().as_secs_f64() * 1e3,
                    "rate_mbit": self.link.rate_mbit,
                    "queue_bytes": self.link.queue_limit(),
                    "description": self.link.describe(),
                }),
                LinkMode::Tun => serde_json::json!({
                    "mode": self.link_mode,
                    "rtt_ms": self.tun.rtt.as_secs_f64() * 1e3,
                    "one_way_delay_ms": self.tun.one_way_delay().as_secs_f64() * 1e3,
                    "rate_mbit": self.tun.rate_mbit,
                    "queue_packets": self.tun.queue_packets,
                    "mtu": self.tun.mtu,
                    "cc": self.tun.cc,
                    "description": self.tun.describe(),
                }),
            },
            "fixture": {
                "background": ["/bg/1", "/bg/2"],
                "background_bytes": crate::workload::BACKGROUND_LEN,
                "critical": "/critical",
                "critical_bytes": crate::workload::CRITICAL_LEN,
                "late_threshold_bytes": crate::workload::LATE_THRESHOLD,
            },
        })
    }
}

fn dedup<T: Clone, K: PartialEq>(items: &[T], key: impl Fn(&T) -> K) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in items {
        if !out.iter().any(|o| key(o) == key(item)) {
            out.push(item.clone());
        }
    }
    out
}

/// One planned run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Which repeat.
    pub repeat: usize,
    /// The server under test.
    pub case: Case,
    /// The workload.
    pub workload: Workload,
    /// The urgencies.
    pub urgencies: Urgencies,
}

/// Runs the whole schedule, one run at a time (each with a fresh server, link and
/// connection), advancing `progress`. The first failed run stops the lab with its error.
pub async fn run_lab(
    config: &LabConfig,
    progress: &ProgressBar,
) -> Result<Vec<RunResult>, BoxError> {
    let plan = config.schedule();
    progress.set_length(plan.len() as u64);
    let mut results = Vec::with_capacity(plan.len());
    for p in plan {
        progress.set_message(format!(
            "repeat {}/{}: {} / {} / {}",
            p.repeat + 1,
            config.repeats,
            p.case,
            p.workload,
            p.urgencies
        ));
        let run = match config.link_mode {
            LinkMode::Relay => run_once(&p.case, p.workload, p.urgencies, &config.link).await,
            LinkMode::Tun => run_tun(&p.case, p.workload, p.urgencies, &config.tun).await,
        };
        let mut result = run.map_err(|e| format!("repeat {}: {e}", p.repeat + 1))?;
        result.repeat = p.repeat;
        results.push(result);
        progress.inc(1);
    }
    Ok(results)
}

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
    ///
    /// ```
    /// use integration_tests::lab::Spread;
    /// let s = Spread::of([3.0, 1.0, 10.0, 2.0]).unwrap();
    /// assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
    /// ```
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

    fn show(&self, decimals: usize, signed: bool) -> String {
        let f = |x: f64| {
            if signed {
                format!("{x:+.decimals$}")
            } else {
                format!("{x:.decimals$}")
            }
        };
        format!("{} [{}, {}]", f(self.median), f(self.min), f(self.max))
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

const KIB: f64 = 1024.0;

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

/// The main table's rows, in the configuration's order (cells without results are left out).
pub fn summarize(config: &LabConfig, results: &[RunResult]) -> Vec<SummaryRow> {
    config
        .cells()
        .into_iter()
        .filter_map(|(case, workload, urgencies)| {
            let runs: Vec<&RunResult> =
                cell_results(results, workload, urgencies, case.name()).collect();
            let spread = |f: &dyn Fn(&RunResult) -> f64| Spread::of(runs.iter().map(|r| f(r)));
            Some(SummaryRow {
                workload,
                urgencies,
                case: case.name().to_string(),
                critical_first_byte_ms: spread(&|r| r.critical_first_byte_ms)?,
                critical_complete_ms: spread(&|r| r.critical_complete_ms)?,
                background_kib_before_critical: spread(&|r| {
                    r.background_bytes_before_critical as f64 / KIB
                })?,
                fixture_complete_ms: spread(&|r| r.fixture_complete_ms)?,
                tls_records: spread(&|r| r.tls_records as f64)?,
                wire_kib: spread(&|r| r.wire_bytes as f64 / KIB)?,
            })
        })
        .collect()
}

/// Paired differences against [`BASELINE`], formed within each repeat (empty when stock is
/// not among the cases).
pub fn paired(config: &LabConfig, results: &[RunResult]) -> Vec<PairedRow> {
    config
        .cells()
        .into_iter()
        .filter(|(case, _, _)| case.name() != BASELINE)
        .filter_map(|(case, workload, urgencies)| {
            let stock: BTreeMap<usize, &RunResult> =
                cell_results(results, workload, urgencies, BASELINE)
                    .map(|r| (r.repeat, r))
                    .collect();
            let pairs: Vec<(&RunResult, &RunResult)> =
                cell_results(results, workload, urgencies, case.name())
                    .filter_map(|r| stock.get(&r.repeat).map(|s| (r, *s)))
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

/// A Markdown table with padded columns; the first `text_columns` are left-aligned, the
/// others right-aligned.
fn markdown(headers: &[&str], rows: &[Vec<String>], text_columns: usize) -> String {
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

/// The lab's report: the link, the main table and the paired differences.
pub fn render_report(config: &LabConfig, results: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", config.describe_link());
    let _ = writeln!(
        out,
        "{} repeats, seed {}, order randomized within each repeat; {} runs. \
         Median [min, max]; critical times from the moment the critical request left the \
         client, fixture from connection start.\n",
        config.repeats,
        config.seed,
        results.len()
    );
    if !config.skipped.is_empty() {
        let _ = writeln!(
            out,
            "Skipped, not installed ({}): {}.\n",
            crate::peers::INSTALL_HINT,
            config
                .skipped
                .iter()
                .map(|m| m.kind.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let rows: Vec<Vec<String>> = summarize(config, results)
        .iter()
        .map(|r| {
            vec![
                r.workload.to_string(),
                r.urgencies.to_string(),
                r.case.clone(),
                r.critical_first_byte_ms.show(1, false),
                r.critical_complete_ms.show(1, false),
                r.background_kib_before_critical.show(0, false),
                r.fixture_complete_ms.show(1, false),
                r.tls_records.show(0, false),
            ]
        })
        .collect();
    out += &markdown(
        &[
            "workload",
            "urgencies",
            "case",
            "critical first byte ms",
            "critical complete ms",
            "background KiB before critical",
            "fixture complete ms",
            "TLS records",
        ],
        &rows,
        3,
    );
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
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|r| {
            vec![
                r.workload.to_string(),
                r.urgencies.to_string(),
                r.case.clone(),
                r.critical_complete_ms.show(1, true),
                format!("{}/{}", r.critical_sooner, r.critical_complete_ms.n),
                r.background_kib_before_critical.show(0, true),
                r.fixture_complete_ms.show(1, true),
            ]
        })
        .collect();
    out += &markdown(
        &[
            "workload",
            "urgencies",
            "case",
            "Δ critical complete ms",
            "sooner",
            "Δ background KiB before critical",
            "Δ fixture complete ms",
        ],
        &rows,
        3,
    );
    out
}

/// The lab's JSON: `{"config": ..., "results": [...], "summary": [...], "paired": [...]}`.
pub fn to_json(config: &LabConfig, results: &[RunResult]) -> serde_json::Value {
    serde_json::json!({
        "config": config.to_json(),
        "results": results,
        "summary": summarize(config, results),
        "paired": paired(config, results),
    })
}

/// Bar colours, one per case in order (enough for our five cases and the five peers).
const COLORS: [(u8, u8, u8); 12] = [
    (120, 120, 120),
    (190, 170, 140),
    (66, 133, 244),
    (244, 160, 0),
    (15, 157, 88),
    (171, 71, 188),
    (219, 68, 55),
    (0, 172, 193),
    (124, 179, 66),
    (121, 85, 72),
    (236, 64, 122),
    (40, 53, 147),
];

/// Draws the median `critical_complete_ms` of every cell as grouped bars (one group per
/// workload and urgencies, one bar per case, whiskers from min to max) into an SVG file.
pub fn write_svg(path: &Path, config: &LabConfig, results: &[RunResult]) -> Result<(), BoxError> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    let rows = summarize(config, results);
    let mut groups: Vec<(Workload, Urgencies)> = Vec::new();
    for r in &rows {
        if !groups.contains(&(r.workload, r.urgencies)) {
            groups.push((r.workload, r.urgencies));
        }
    }
    let cases: Vec<&str> = config.cases.iter().map(Case::name).collect();
    let color = |ci: usize| {
        let (r, g, b) = COLORS[ci % COLORS.len()];
        RGBColor(r, g, b)
    };
    let width = (260 + groups.len() * cases.len() * 48).max(900) as u32;
    let root = SVGBackend::new(path, (width, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    // Title and legend above the plot, so neither ever covers a bar.
    let (header, body) = root.split_vertically(84);
    header.draw(&Text::new(
        "Critical 4 KiB response: first complete DATA frame, median per case (whiskers: min-max)",
        (width as i32 / 2, 12),
        TextStyle::from(("sans-serif", 21).into_font()).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    let legend_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let item_width = |name: &str| 22 + name.chars().count() as i32 * 8 + 28;
    let legend_width: i32 = cases.iter().map(|c| item_width(c)).sum();
    let mut x = (width as i32 - legend_width).max(0) / 2;
    for (ci, case) in cases.iter().enumerate() {
        header.draw(&Rectangle::new([(x, 52), (x + 16, 68)], color(ci).filled()))?;
        header.draw(&Text::new(
            case.to_string(),
            (x + 22, 60),
            legend_style.clone(),
        ))?;
        x += item_width(case);
    }
    let top = rows
        .iter()
        .map(|r| r.critical_complete_ms.max)
        .fold(1.0, f64::max)
        * 1.08;
    let mut chart = ChartBuilder::on(&body)
        .margin(16)
        .margin_top(8)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..groups.len().max(1) as f64, 0f64..top)?;
    let x_desc = format!(
        "workload / urgencies   ({}; {} repeats, seed {})",
        config.describe_link(),
        config.repeats,
        config.seed
    );
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(12)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .y_desc("ms from the critical request")
        .x_desc(x_desc)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 14))
        .draw()?;
    let slot = 0.8 / cases.len().max(1) as f64;
    let value_style =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (ci, case) in cases.iter().enumerate() {
        let bars: Vec<(f64, Spread)> = groups
            .iter()
            .enumerate()
            .filter_map(|(gi, &(w, u))| {
                rows.iter()
                    .find(|row| row.workload == w && row.urgencies == u && row.case == *case)
                    .map(|row| (gi as f64 + 0.1 + ci as f64 * slot, row.critical_complete_ms))
            })
            .collect();
        chart.draw_series(bars.iter().map(|&(x, s)| {
            Rectangle::new(
                [(x + slot * 0.08, 0.0), (x + slot * 0.92, s.median)],
                color(ci).filled(),
            )
        }))?;
        chart.draw_series(bars.iter().map(|&(x, s)| {
            PathElement::new(
                vec![(x + slot / 2.0, s.min), (x + slot / 2.0, s.max)],
                BLACK.stroke_width(1),
            )
        }))?;
        chart.draw_series(bars.iter().map(|&(x, s)| {
            Text::new(
                format!("{:.0}", s.median),
                (x + slot / 2.0, s.max.max(s.median) + top * 0.005),
                value_style.clone(),
            )
        }))?;
    }
    let group_style =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (gi, (w, u)) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(gi as f64 + 0.5, 0.0));
        root.draw(&Text::new(
            format!("{w} / {u}"),
            (px, py + 10),
            group_style.clone(),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// The `lab` binary: runs the configuration the flags ask for, prints the report to stdout
/// (a progress bar on stderr) and writes the JSON and SVG files asked for.
pub async fn main(args: LabArgs) -> Result<(), BoxError> {
    let mut config = LabConfig::from_args(&args)?;
    if config.link_mode == LinkMode::Tun {
        if !tun::is_root() {
            return Err(format!(
                "--link tun cannot run: {}, and the lab is not running as root; run it as root \
                 (e.g. with sudo), or use --link relay (rootless)",
                tun::NEEDS_ROOT
            )
            .into());
        }
        if let Some(external) = config
            .cases
            .iter()
            .find(|c| matches!(c, Case::External { .. }))
        {
            return Err(format!(
                "--link tun cannot measure `{external}`: an external server is outside the \
                 link's network namespaces (use --link relay)"
            )
            .into());
        }
    }
    for missing in config.skip_missing_peers() {
        eprintln!("lab: skipping case `{}`: {missing}", missing.kind.name());
    }
    if config.cases.is_empty() {
        return Err("nothing to run: no case asked for is installed".into());
    }
    let plan_len = config.cells().len() * config.repeats;
    eprintln!(
        "lab: {plan_len} runs ({} cells x {} repeats), seed {}, link: {}",
        config.cells().len(),
        config.repeats,
        config.seed,
        config.describe_link()
    );
    let progress = ProgressBar::new(plan_len as u64);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} (eta {eta}) {msg}")?
            .progress_chars("=> "),
    );
    progress.enable_steady_tick(Duration::from_millis(200));
    let started = Instant::now();
    let results = run_lab(&config, &progress).await;
    progress.finish_and_clear();
    let results = results?;
    let elapsed = started.elapsed();
    print!("{}", render_report(&config, &results));
    println!("\n{} runs in {:.1} s", results.len(), elapsed.as_secs_f64());
    if let Some(path) = &args.json {
        let mut json = to_json(&config, &results);
        json["config"]["elapsed_s"] = elapsed.as_secs_f64().into();
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        write_svg(path, &config, &results).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> LabArgs {
        LabArgs::try_parse_from(std::iter::once("lab").chain(extra.iter().copied()))
            .expect("flags parse")
    }

    fn result(case: &str, workload: Workload, repeat: usize, complete: f64, bg: u64) -> RunResult {
        RunResult {
            case: case.to_string(),
            workload,
            urgencies: Urgencies::Explicit,
            repeat,
            critical_first_byte_ms: complete - 1.0,
            critical_complete_ms: complete,
            background_bytes_before_critical: bg,
            background_bytes_at_critical_request: 0,
            fixture_complete_ms: 900.0 + complete,
            critical_sent_ms: 40.0,
            tls_records: 258,
            wire_bytes: 2_200_000,
        }
    }

    #[test]
    fn defaults_cover_every_cell() {
        let config = LabConfig::from_args(&args(&["--seed", "7"])).unwrap();
        assert_eq!(config.repeats, 10);
        assert_eq!(config.cells().len(), 20);
        assert_eq!(config.link.rtt, LinkConfig::default().rtt);
        let plan = config.schedule();
        assert_eq!(plan.len(), 200);
        for repeat in 0..10 {
            let mut cells: Vec<_> = plan
                .iter()
                .filter(|p| p.repeat == repeat)
                .map(|p| (p.case.clone(), p.workload, p.urgencies))
                .collect();
            assert_eq!(cells.len(), 20);
            cells.sort_by_key(|(c, w, u)| (c.name().to_string(), *w, *u));
            cells.dedup();
            assert_eq!(cells.len(), 20, "every cell once per repeat");
        }
        assert_eq!(plan, config.schedule(), "the seed fixes the order");
        let other = LabConfig::from_args(&args(&["--seed", "8"])).unwrap();
        assert_ne!(plan, other.schedule());
        let first: Vec<_> = plan[..20].iter().map(|p| p.case.clone()).collect();
        assert_ne!(
            first,
            config.cells().into_iter().map(|c| c.0).collect::<Vec<_>>()
        );
    }

    #[test]
    fn flags_are_checked() {
        let a = args(&[
            "--cases",
            "scheduled,stock",
            "--workloads",
            "late",
            "--urgencies",
            "explicit",
            "--rtt-ms",
            "5",
            "--rate-mbit",
            "200",
            "--queue-bytes",
            "65536",
            "--repeats",
            "3",
        ]);
        let config = LabConfig::from_args(&a).unwrap();
        assert_eq!(config.cases, vec![Case::Scheduled, Case::Stock]);
        assert_eq!(config.link.rtt, Duration::from_millis(5));
        assert_eq!(config.link.rate_mbit, 200.0);
        assert_eq!(config.link.queue_limit(), 65536);
        assert_eq!(config.schedule().len(), 6);
        let err = LabArgs::try_parse_from(["lab", "--link", "netem"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown link `netem`"), "{err}");
        assert_eq!(config.link_mode, LinkMode::Relay);
        assert!(report_first_line(&config).starts_with("relay link: 5 ms RTT"));
        let err = LabArgs::try_parse_from(["lab", "--cases", "stock,fast"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown case `fast`"), "{err}");
        assert!(LabConfig::from_args(&args(&["--repeats", "0"])).is_err());
        assert!(LabConfig::from_args(&args(&["--rate-mbit", "0"])).is_err());
    }

    fn report_first_line(config: &LabConfig) -> String {
        render_report(config, &[])
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn tun_link_flags() {
        let config = LabConfig::from_args(&args(&["--link", "tun"])).unwrap();
        assert_eq!(config.link_mode, LinkMode::Tun);
        assert_eq!(config.tun, TunConfig::default());
        assert_eq!(
            report_first_line(&config),
            "tun link: 20 ms RTT, 20 Mbit/s each way, queue 1000 packets, MTU 1500, cc cubic; \
             two network namespaces, kernel TCP end to end"
        );
        let config = LabConfig::from_args(&args(&[
            "--link",
            "tun",
            "--cc",
            "bbr",
            "--rtt-ms",
            "40",
            "--rate-mbit",
            "10",
            "--queue-packets",
            "100",
        ]))
        .unwrap();
        assert_eq!(config.tun.cc, CongestionControl::Bbr);
        assert_eq!(config.tun.rtt, Duration::from_millis(40));
        assert_eq!(config.tun.rate_mbit, 10.0);
        assert_eq!(config.tun.queue_packets, 100);
        let json = config.to_json();
        assert_eq!(json["link"]["mode"], "tun");
        assert_eq!(json["link"]["cc"], "bbr");
        assert_eq!(json["link"]["queue_packets"], 100);
        assert!(report_first_line(&config).contains("queue 100 packets, MTU 1500, cc bbr"));
        let err = LabArgs::try_parse_from(["lab", "--link", "tun", "--cc", "reno"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("known: cubic, bbr"), "{err}");
        for bad in [
            &["--cc", "bbr"][..],
            &["--queue-packets", "10"],
            &["--link", "tun", "--queue-bytes", "1000"],
            &["--link", "tun", "--queue-packets", "0"],
        ] {
            assert!(LabConfig::from_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn peers_are_cases_and_missing_ones_are_skipped() {
        use crate::peers::PeerKind;
        let a = args(&[
            "--cases",
            "stock,nginx,nginx-4k,nghttpd,h2o,apache",
            "--seed",
            "3",
        ]);
        let mut config = LabConfig::from_args(&a).unwrap();
        assert_eq!(config.cases[1..], Case::PEERS);
        let asked = config.cases.len();
        let skipped: Vec<PeerKind> = config.skip_missing_peers().iter().map(|m| m.kind).collect();
        assert_eq!(config.cases.len() + skipped.len(), asked);
        assert!(skipped.iter().all(|k| !k.is_installed()));
        assert!(config
            .cases
            .iter()
            .filter_map(Case::peer)
            .all(PeerKind::is_installed));
        assert_eq!(config.cases[0], Case::Stock, "ours are never skipped");
        // What a skipped peer looks like in the report and the JSON.
        config.skipped = vec![NotInstalled {
            kind: PeerKind::H2o,
            detail: "no `h2o` in PATH".into(),
        }];
        let report = render_report(&config, &[]);
        assert!(
            report.contains("Skipped, not installed (run scripts/install-peers.sh): h2o."),
            "{report}"
        );
        let json = config.to_json();
        assert_eq!(json["skipped"][0]["case"], "h2o");
        assert!(json["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("h2o not installed: run scripts/install-peers.sh"));
        // The default run is ours only: it needs no peer.
        let default = LabConfig::from_args(&args(&[])).unwrap();
        assert!(default.cases.iter().all(|c| c.peer().is_none()));
    }

    #[test]
    fn report_has_medians_and_paired_differences() {
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
        let report = render_report(&config, &results);
        assert!(report.starts_with(&config.link.describe()), "{report}");
        assert!(
            report.contains("| late     | explicit  | scheduled |"),
            "{report}"
        );
        assert!(report.contains("-770.0 [-825.0, -660.0]"), "{report}");
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
        ] {
            assert!(!first[key].is_null(), "{key} in {first}");
        }
        assert_eq!(first["workload"], "late");
        assert_eq!(json["config"]["link"]["mode"], "relay");
        let svg = std::env::temp_dir().join(format!("lab-test-{}.svg", std::process::id()));
        write_svg(&svg, &config, &results).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        std::fs::remove_file(&svg).ok();
        assert!(text.contains("first complete DATA frame"));
        assert!(text.contains("late / explicit"));
        assert!(text.contains("scheduled"));
    }
}
