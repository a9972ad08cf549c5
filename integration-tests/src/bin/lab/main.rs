//! `lab`: runs the experiment (two 1 MiB background downloads and a 4 KiB critical response
//! on one HTTP/2 connection, the critical request sent with the others or late, with equal
//! or explicit RFC 9218 urgencies) against every server case behind an emulated link, a
//! number of times in a seeded random order, and prints medians and paired differences
//! against stock; `--json` and `--svg` write the runs and a chart. See `--help`.
//!
//! ```text
//! cargo run --release -p integration-tests --bin lab -- --repeats 30 --json lab.json --svg lab.svg
//! ```
//!
//! Real peer servers (`integration_tests::peers`: `nginx`, `nginx-4k`, `nghttpd`, `h2o`,
//! `apache`) run beside ours when named in `--cases` (`scripts/install-peers.sh` installs
//! them); a peer that is not installed is skipped with one line on stderr.
//!
//! `--link tun` (root only) runs every case through the kernel-faithful link of
//! `integration_tests::tun` instead of the loopback relay: the server in one network
//! namespace, the client in another, kernel TCP with `--cc cubic|bbr` end to end.
//!
//! | file | what it holds |
//! |---|---|
//! | `main.rs` | the entry point and the loop over the runs |
//! | `args.rs` | the flags (clap), the configuration they make, the cells and the run order |
//! | `first_request.rs` | `--workloads first-request` and `connection-rate`: runs, tables, JSON |
//! | `pages.rs` | `--workloads page-article,page-app,page-busy,page-demo` (Chromium): plan, runs, tables, JSON |
//! | `outcome.rs` | every run, completed or not: failed runs, their count per cell |
//! | `stats.rs` | medians, spreads and paired differences against stock |
//! | `report.rs` | the Markdown tables and the JSON |
//! | `svg.rs` | the chart (plotters) |

mod args;
mod first_request;
mod impairments;
mod outcome;
mod pages;
mod report;
mod stats;
mod svg;
mod trace;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use integration_tests::tun;
use integration_tests::workload::{run_once, run_tun_clients, run_tun_traced, Case, RunResult};
use integration_tests::BoxError;

use crate::args::{LabArgs, LabConfig, LinkMode, Planned};
use crate::outcome::{completed, RunOutcome};
use crate::report::{render_report, to_json};
use crate::svg::write_svg;

#[tokio::main]
async fn main() -> ExitCode {
    let args = LabArgs::parse();
    // Diagnostics of the in-process servers on stderr, e.g. RUST_LOG=tls_flush=trace for
    // every write-budget decision; nothing unless asked for.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("RUST_LOG"))
        .with_writer(std::io::stderr)
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lab: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the configuration the flags ask for, prints the report to stdout (a progress bar on
/// stderr) and writes the JSON and SVG files asked for.
async fn run(args: LabArgs) -> Result<(), BoxError> {
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
    if let Some(plan) = config.first_request.clone() {
        return run_first_request(&config, &plan, args.json.as_deref()).await;
    }
    if let Some(plan) = config.pages.clone() {
        let (json, svg) = (args.json.as_deref(), args.svg.as_deref());
        return pages::run_and_report(&config, &plan, json, svg).await;
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
    let mut traces = Vec::new();
    let outcomes = run_lab(&config, &progress, &mut traces).await;
    progress.finish_and_clear();
    let results = completed(&outcomes);
    let elapsed = started.elapsed();
    print!("{}", render_report(&config, &outcomes));
    if !traces.is_empty() {
        println!(
            "\nPacket traces (the record carrying the critical response's last byte: its \
             packets' spread at the server; straddled when over half an RTT):\n"
        );
        for line in &traces {
            println!("- {line}");
        }
    }
    println!(
        "\n{} runs in {:.1} s",
        outcomes.len(),
        elapsed.as_secs_f64()
    );
    if let Some(path) = &args.json {
        let mut json = to_json(&config, &outcomes);
        json["config"]["elapsed_s"] = elapsed.as_secs_f64().into();
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        write_svg(path, &config, &results).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    match outcomes.len() - results.len() {
        0 => Ok(()),
        failed if results.is_empty() => Err(format!("all {failed} runs failed").into()),
        failed => {
            eprintln!(
                "lab: {failed} of {} runs did not complete (listed under the table)",
                outcomes.len()
            );
            Ok(())
        }
    }
}

/// `--workloads first-request` / `connection-rate`: runs the plan, prints its tables and
/// writes the JSON asked for.
async fn run_first_request(
    config: &LabConfig,
    plan: &args::FirstRequestPlan,
    json: Option<&std::path::Path>,
) -> Result<(), BoxError> {
    if plan.servers.is_empty() {
        return Err("nothing to run: no server asked for is installed".into());
    }
    eprintln!(
        "lab: first-request, seed {}, link: {}",
        config.seed,
        config.describe_link()
    );
    let started = Instant::now();
    let runs = first_request::run(config, plan).await?;
    let elapsed = started.elapsed();
    print!("{}", first_request::render(config, plan, &runs));
    println!(
        "\n{} runs in {:.1} s",
        runs.runs.len() + runs.rates.len(),
        elapsed.as_secs_f64()
    );
    if let Some(path) = json {
        let mut json = first_request::to_json(config, plan, &runs);
        json["config"]["elapsed_s"] = elapsed.as_secs_f64().into();
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    Ok(())
}

/// Runs the whole schedule, one run at a time (each with a fresh server, link and
/// connection), advancing `progress`. A run that fails or times out is kept with its error
/// (and printed above the progress bar), and the lab goes on. Traced runs (`--trace`) each
/// add a line to `traces`.
async fn run_lab(
    config: &LabConfig,
    progress: &ProgressBar,
    traces: &mut Vec<String>,
) -> Vec<RunOutcome> {
    let plan = config.schedule();
    progress.set_length(plan.len() as u64);
    let mut results = Vec::with_capacity(plan.len());
    for (index, p) in plan.into_iter().enumerate() {
        progress.set_message(format!(
            "repeat {}/{}: {} / {} / {}",
            p.repeat + 1,
            config.repeats,
            p.case,
            p.workload,
            p.urgencies
        ));
        let trace_dir = config
            .trace
            .as_ref()
            .filter(|(_, runs)| index < *runs)
            .map(|(dir, _)| dir);
        // One result per client (one client but with `--clients`).
        let runs = match config.link_mode {
            LinkMode::Relay => {
                vec![run_once(&p.case, p.workload, p.urgencies, &config.link).await]
            }
            LinkMode::Tun if config.tun.clients > 1 => {
                let tun = config.tun_for_repeat(p.repeat);
                match run_tun_clients(&p.case, p.workload, p.urgencies, &tun).await {
                    Ok(clients) => clients,
                    // What every client needed failed: each of them did not complete.
                    Err(e) => {
                        let error = e.to_string();
                        (0..tun.clients)
                            .map(|_| Err(error.clone().into()))
                            .collect()
                    }
                }
            }
            LinkMode::Tun => {
                // The repeat's impairment seed and trace start, from --seed and the repeat.
                let mut tun = config.tun_for_repeat(p.repeat);
                if trace_dir.is_some() {
                    tun.trace_packets = TRACE_PACKETS;
                }
                let run = run_tun_traced(&p.case, p.workload, p.urgencies, &tun)
                    .await
                    .and_then(|mut run| {
                        run.result.repeat = p.repeat;
                        if let Some(dir) = trace_dir {
                            traces.push(write_trace_line(dir, index, &run, config)?);
                        }
                        Ok(run.result)
                    });
                vec![run]
            }
        };
        for (client, run) in runs.into_iter().enumerate() {
            results.push(report_outcome(progress, &p, client, run));
        }
        progress.inc(1);
    }
    results
}

/// The outcome of client `client` of the planned run `p`; a failure is printed above the
/// progress bar.
fn report_outcome(
    progress: &ProgressBar,
    p: &Planned,
    client: usize,
    run: Result<RunResult, BoxError>,
) -> RunOutcome {
    let outcome = RunOutcome::of(p, client, run);
    if let RunOutcome::Failed(failed) = &outcome {
        progress.println(format!(
            "lab: repeat {} did not complete: {}",
            p.repeat + 1,
            failed.error
        ));
    }
    outcome
}

/// Packets recorded per traced run (the first ones; a run of the fixture at 20 Mbit/s
/// takes about 3,000).
const TRACE_PACKETS: usize = 200_000;

/// Writes a traced run's CSV and describes it in one line.
fn write_trace_line(
    dir: &std::path::Path,
    index: usize,
    run: &integration_tests::workload::TunRun,
    config: &LabConfig,
) -> Result<String, BoxError> {
    let path = trace::write_trace(dir, index, run)?;
    let r = &run.result;
    let critical = match trace::critical_record(run, config.tun.rtt) {
        Some(c) => format!(
            "record {} ({} bytes) in {} packets over {:.1} ms{}",
            c.record,
            c.wire_len,
            c.packets,
            c.spread_ms,
            if c.straddled { ", straddled" } else { "" }
        ),
        None => "critical record not found".to_string(),
    };
    Ok(format!(
        "{} / {} / {} / repeat {}: {} packets, {}; {}",
        r.case,
        r.workload,
        r.urgencies,
        r.repeat + 1,
        run.trace.len(),
        critical,
        path.display()
    ))
}
