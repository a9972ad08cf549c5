//! `--workloads first-request` and `--workloads connection-rate`: the runs, their tables
//! (medians and spreads over the repeats) and their JSON.

use std::fmt::Write as _;

use integration_tests::first_request::{
    connection_rate, connection_rate_tun, run_relay, run_tun, ClientCase, Connection,
    FirstRequestResult, FirstRequestServer, RateResult,
};
use integration_tests::BoxError;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::args::{FirstRequestPlan, LabConfig, LinkMode};
use crate::report::config_json;
use crate::stats::Spread;

/// Everything the first-request workloads measured.
#[derive(Debug, Default)]
pub struct FirstRequestRuns {
    /// Every first-request run.
    pub runs: Vec<FirstRequestResult>,
    /// Every connection-rate run.
    pub rates: Vec<RateResult>,
}

/// Runs the plan: every repeat, each (case, server, connection) once in a random order
/// drawn from the seed, then the connection-rate runs the same way.
pub async fn run(
    config: &LabConfig,
    plan: &FirstRequestPlan,
) -> Result<FirstRequestRuns, BoxError> {
    let mut out = FirstRequestRuns::default();
    let mut rng = StdRng::seed_from_u64(config.seed);
    let total = config.repeats
        * plan.cases.len()
        * plan.servers.len()
        * (usize::from(plan.first_request) * Connection::ALL.len()
            + usize::from(plan.connection_rate.is_some()));
    let mut done = 0;
    for repeat in 0..config.repeats {
        let mut cells = Vec::new();
        for &server in &plan.servers {
            for &case in &plan.cases {
                if plan.first_request {
                    cells.extend(Connection::ALL.map(|c| (case, server, Some(c))));
                }
                if plan.connection_rate.is_some() {
                    cells.push((case, server, None));
                }
            }
        }
        cells.shuffle(&mut rng);
        for (case, server, connection) in cells {
            done += 1;
            eprintln!(
                "lab: {done}/{total} repeat {}: {case} / {server} / {}",
                repeat + 1,
                connection.map_or("connection-rate", Connection::name)
            );
            let outcome = match connection {
                Some(connection) => first_request_run(config, case, server, connection)
                    .await
                    .map(|mut r| {
                        r.repeat = repeat;
                        out.runs.push(r);
                    }),
                None => rate_run(config, plan, case, server).await.map(|mut r| {
                    r.repeat = repeat;
                    out.rates.push(r);
                }),
            };
            if let Err(e) = outcome {
                return Err(format!("repeat {}: {e}", repeat + 1).into());
            }
        }
    }
    Ok(out)
}

async fn first_request_run(
    config: &LabConfig,
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
) -> Result<FirstRequestResult, BoxError> {
    match config.link_mode {
        LinkMode::Relay => run_relay(case, server, connection, &config.link).await,
        LinkMode::Tun => run_tun(case, server, connection, &config.tun).await,
    }
}

async fn rate_run(
    config: &LabConfig,
    plan: &FirstRequestPlan,
    case: ClientCase,
    server: FirstRequestServer,
) -> Result<RateResult, BoxError> {
    let duration = plan.connection_rate.expect("a rate run is planned");
    match config.link_mode {
        LinkMode::Relay => connection_rate(case, server, duration, &config.link).await,
        LinkMode::Tun => connection_rate_tun(case, server, duration, &config.tun).await,
    }
}

/// One row of the first-request table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FirstRequestRow {
    /// Server name.
    pub server: String,
    /// `fresh` or `resumed` (asked for).
    pub connection: Connection,
    /// Client case.
    pub case: String,
    /// Runs whose handshake resumed, of `runs`.
    pub resumed_runs: usize,
    /// Runs.
    pub runs: usize,
    /// `first_flight_records`.
    pub first_flight_records: Option<Spread>,
    /// `first_flight_segments` (tun only).
    pub first_flight_segments: Option<Spread>,
    /// `client_records`.
    pub client_records: Option<Spread>,
    /// `first_response_ms`.
    pub first_response_ms: Option<Spread>,
    /// Median `first_response_ms` minus stock-client's, same server and connection.
    pub first_response_vs_stock_ms: Option<f64>,
    /// `response_complete_ms`: the whole 4 KiB body, which is what a page waits for (a
    /// server that sends the response head in a record of its own shows its first byte
    /// earlier, not its body).
    pub response_complete_ms: Option<Spread>,
}

/// One row of the connection-rate table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RateRow {
    /// Server name.
    pub server: String,
    /// Client case.
    pub case: String,
    /// Connections per second.
    pub connections_per_s: Option<Spread>,
    /// Median connections per second over stock-client's, same server.
    pub ratio_to_stock: Option<f64>,
    /// Resumed connections, of `connections`, over every repeat.
    pub resumed_connections: usize,
    /// Connections over every repeat.
    pub connections: usize,
}

fn spread_of<T>(items: &[&T], f: impl Fn(&T) -> Option<f64>) -> Option<Spread> {
    Spread::of(items.iter().filter_map(|r| f(r)))
}

/// The first-request table's rows, in the plan's order.
pub fn first_request_rows(
    plan: &FirstRequestPlan,
    runs: &[FirstRequestResult],
) -> Vec<FirstRequestRow> {
    let mut rows = Vec::new();
    for server in &plan.servers {
        for connection in Connection::ALL {
            let cell = |case: ClientCase| -> Vec<&FirstRequestResult> {
                runs.iter()
                    .filter(|r| {
                        r.server == server.name()
                            && r.connection == connection
                            && r.case == case.name()
                    })
                    .collect()
            };
            let stock = spread_of(&cell(ClientCase::StockClient), |r| {
                Some(r.first_response_ms)
            });
            for &case in &plan.cases {
                let cell = cell(case);
                if cell.is_empty() {
                    continue;
                }
                let first = spread_of(&cell, |r| Some(r.first_response_ms));
                rows.push(FirstRequestRow {
                    server: server.name().to_string(),
                    connection,
                    case: case.name().to_string(),
                    resumed_runs: cell.iter().filter(|r| r.resumed).count(),
                    runs: cell.len(),
                    first_flight_records: spread_of(&cell, |r| Some(r.first_flight_records as f64)),
                    first_flight_segments: spread_of(&cell, |r| {
                        r.first_flight_segments.map(|s| s as f64)
                    }),
                    client_records: spread_of(&cell, |r| Some(r.client_records as f64)),
                    first_response_ms: first,
                    first_response_vs_stock_ms: match (first, stock) {
                        (Some(f), Some(s)) => Some(f.median - s.median),
                        _ => None,
                    },
                    response_complete_ms: spread_of(&cell, |r| Some(r.response_complete_ms)),
                });
            }
        }
    }
    rows
}

/// The connection-rate table's rows, in the plan's order.
pub fn rate_rows(plan: &FirstRequestPlan, rates: &[RateResult]) -> Vec<RateRow> {
    let mut rows = Vec::new();
    for server in &plan.servers {
        let cell = |case: ClientCase| -> Vec<&RateResult> {
            rates
                .iter()
                .filter(|r| r.server == server.name() && r.case == case.name())
                .collect()
        };
        let stock = spread_of(&cell(ClientCase::StockClient), |r| {
            Some(r.connections_per_s)
        });
        for &case in &plan.cases {
            let cell = cell(case);
            if cell.is_empty() {
                continue;
            }
            let rate = spread_of(&cell, |r| Some(r.connections_per_s));
            rows.push(RateRow {
                server: server.name().to_string(),
                case: case.name().to_string(),
                connections_per_s: rate,
                ratio_to_stock: match (rate, stock) {
                    (Some(r), Some(s)) if s.median > 0.0 => Some(r.median / s.median),
                    _ => None,
                },
                resumed_connections: cell.iter().map(|r| r.resumed_connections).sum(),
                connections: cell.iter().map(|r| r.connections).sum(),
            });
        }
    }
    rows
}

fn show(spread: Option<Spread>, decimals: usize) -> String {
    match spread {
        Some(s) if s.min == s.max => format!("{:.decimals$}", s.median),
        Some(s) => format!(
            "{:.decimals$} [{:.decimals$}, {:.decimals$}]",
            s.median, s.min, s.max
        ),
        None => "-".into(),
    }
}

/// The tables, as Markdown.
pub fn render(config: &LabConfig, plan: &FirstRequestPlan, runs: &FirstRequestRuns) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", config.describe_link());
    if plan.first_request {
        let _ = writeln!(
            out,
            "First request: GET /critical (4096 bytes) on a new connection, {} repeats; \
             median [min, max]; records and segments are the client's first flight (TLS \
             records with application data, and the TCP segments carrying them) before the \
             first response byte arrived; first response byte and response complete from \
             connect start.\n",
            config.repeats
        );
        let _ = writeln!(
            out,
            "| server | connection | case | resumed | first-flight records | first-flight \
             segments | all client records | first response (ms) | vs stock-client (ms) | \
             response complete (ms) |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
        for row in first_request_rows(plan, &runs.runs) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
                row.server,
                row.connection,
                row.case,
                row.resumed_runs,
                row.runs,
                show(row.first_flight_records, 0),
                show(row.first_flight_segments, 0),
                show(row.client_records, 0),
                show(row.first_response_ms, 1),
                row.first_response_vs_stock_ms
                    .map_or("-".into(), |d| format!("{d:+.1}")),
                show(row.response_complete_ms, 1),
            );
        }
    }
    if let Some(duration) = plan.connection_rate {
        let _ = writeln!(
            out,
            "\nConnection rate: one client, one connection after the other (TCP, TLS, HTTP/2, \
             GET /critical, close) for {:.1} s per run, {} repeats; median [min, max].\n",
            duration.as_secs_f64(),
            config.repeats
        );
        let _ = writeln!(
            out,
            "| server | case | connections/s | x stock-client | resumed |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|");
        for row in rate_rows(plan, &runs.rates) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {}/{} |",
                row.server,
                row.case,
                show(row.connections_per_s, 1),
                row.ratio_to_stock.map_or("-".into(), |r| format!("{r:.2}")),
                row.resumed_connections,
                row.connections,
            );
        }
    }
    if let Some(note) = crate::report::skipped_note(config) {
        out += "\n";
        out += &note;
    }
    out
}

/// The JSON: `{"config", "first_request": [runs], "first_request_summary",
/// "connection_rate": [runs], "connection_rate_summary"}`.
pub fn to_json(
    config: &LabConfig,
    plan: &FirstRequestPlan,
    runs: &FirstRequestRuns,
) -> serde_json::Value {
    let mut json_config = config_json(config);
    json_config["client_cases"] = serde_json::json!(plan.cases);
    json_config["servers"] = plan
        .servers
        .iter()
        .map(|s| s.name())
        .collect::<Vec<_>>()
        .into();
    json_config["connection_rate_s"] = plan.connection_rate.map(|d| d.as_secs_f64()).into();
    serde_json::json!({
        "config": json_config,
        "first_request": runs.runs,
        "first_request_summary": first_request_rows(plan, &runs.runs),
        "connection_rate": runs.rates,
        "connection_rate_summary": rate_rows(plan, &runs.rates),
    })
}
