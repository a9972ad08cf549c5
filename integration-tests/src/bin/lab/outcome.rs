//! Every run of the lab, completed or not. A run that fails or times out (`run_limit`) is
//! kept with its error, counted per cell and reported under the table, and left out of the
//! statistics; the lab goes on with the next run.

use std::fmt::Write as _;

use integration_tests::workload::{RunResult, Urgencies, Workload};
use integration_tests::BoxError;
use serde::Serialize;

use crate::args::{LabConfig, Planned};

/// A run that did not complete: its cell, its repeat and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedRun {
    /// Case name.
    pub case: String,
    /// Workload.
    pub workload: Workload,
    /// Urgencies.
    pub urgencies: Urgencies,
    /// Which repeat.
    pub repeat: usize,
    /// Which of the run's clients (0 but with `--clients`).
    pub client: usize,
    /// Why it did not complete (a timeout reads `no result within ...`).
    pub error: String,
}

/// One run of the schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// Its figures (every body checked byte for byte).
    Completed(Box<RunResult>),
    /// Its error.
    Failed(FailedRun),
}

impl RunOutcome {
    /// The outcome of the planned run `p` for its `client`, labelled with its repeat.
    pub fn of(p: &Planned, client: usize, run: Result<RunResult, BoxError>) -> RunOutcome {
        match run {
            Ok(mut result) => {
                result.repeat = p.repeat;
                result.client = client;
                RunOutcome::Completed(Box::new(result))
            }
            Err(e) => RunOutcome::Failed(FailedRun {
                case: p.case.name().to_string(),
                workload: p.workload,
                urgencies: p.urgencies,
                repeat: p.repeat,
                client,
                error: e.to_string(),
            }),
        }
    }

    /// The entry of the JSON's `results`: the run's figures or its error, with
    /// `completed`.
    pub fn to_json(&self) -> serde_json::Value {
        let (json, completed) = match self {
            RunOutcome::Completed(r) => (serde_json::to_value(r), true),
            RunOutcome::Failed(f) => (serde_json::to_value(f), false),
        };
        let mut json = json.unwrap_or_default();
        if let Some(map) = json.as_object_mut() {
            map.insert("completed".into(), completed.into());
        }
        json
    }
}

/// The completed runs' figures, in the order they ran.
pub fn completed(outcomes: &[RunOutcome]) -> Vec<RunResult> {
    outcomes
        .iter()
        .filter_map(|o| match o {
            RunOutcome::Completed(r) => Some(RunResult::clone(r)),
            RunOutcome::Failed(_) => None,
        })
        .collect()
}

/// The runs of one cell that did not complete.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellFailures {
    /// Workload.
    pub workload: Workload,
    /// Urgencies.
    pub urgencies: Urgencies,
    /// Case name.
    pub case: String,
    /// Runs that failed or timed out.
    pub failed: usize,
    /// Runs of the cell, completed or not.
    pub runs: usize,
    /// Each failed run: its repeat and error.
    pub errors: Vec<(usize, String)>,
}

/// The cells with runs that did not complete, in the configuration's order.
pub fn failures(config: &LabConfig, outcomes: &[RunOutcome]) -> Vec<CellFailures> {
    config
        .cells()
        .into_iter()
        .filter_map(|(case, workload, urgencies)| {
            let in_cell = |c: &str, w: Workload, u: Urgencies| {
                c == case.name() && w == workload && u == urgencies
            };
            let mut runs = 0;
            let mut errors = Vec::new();
            for outcome in outcomes {
                match outcome {
                    RunOutcome::Completed(r) if in_cell(&r.case, r.workload, r.urgencies) => {
                        runs += 1;
                    }
                    RunOutcome::Failed(f) if in_cell(&f.case, f.workload, f.urgencies) => {
                        runs += 1;
                        errors.push((f.repeat, f.error.clone()));
                    }
                    _ => {}
                }
            }
            (!errors.is_empty()).then(|| CellFailures {
                workload,
                urgencies,
                case: case.name().to_string(),
                failed: errors.len(),
                runs,
                errors,
            })
        })
        .collect()
}

/// The lines under the table: per cell with runs that did not complete, how many of how
/// many, and each one's error; empty when every run completed.
pub fn render_failures(failures: &[CellFailures]) -> String {
    let mut out = String::new();
    if failures.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nRuns that did not complete (left out of the medians and the paired differences):\n"
    );
    for f in failures {
        let _ = writeln!(
            out,
            "- {} / {} / {}: timed out / failed: {} of {}",
            f.workload, f.urgencies, f.case, f.failed, f.runs
        );
        for (repeat, error) in &f.errors {
            let _ = writeln!(out, "  - repeat {}: {error}", repeat + 1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{render_report, to_json};
    use crate::stats::tests::three_repeats;

    /// `three_repeats` with scheduled's second repeat timed out and stock's third failed.
    fn with_failures() -> (LabConfig, Vec<RunOutcome>) {
        let (config, results) = three_repeats();
        let outcomes = results
            .into_iter()
            .map(|r| {
                let failed = match (r.case.as_str(), r.repeat) {
                    ("scheduled", 1) => Some("scheduled/late/explicit: no result within 61s"),
                    ("stock", 2) => Some("stock/late/explicit: connecting: reset"),
                    _ => None,
                };
                let p = Planned {
                    repeat: r.repeat,
                    case: r.case.parse().unwrap(),
                    workload: r.workload,
                    urgencies: r.urgencies,
                };
                RunOutcome::of(&p, 0, failed.map_or(Ok(r), |e| Err(e.into())))
            })
            .collect();
        (config, outcomes)
    }

    #[test]
    fn failed_runs_are_counted_reported_and_left_out() {
        let (config, outcomes) = with_failures();
        assert_eq!(completed(&outcomes).len(), 4);
        let cells = failures(&config, &outcomes);
        assert_eq!(cells.len(), 2);
        assert_eq!(
            (cells[0].case.as_str(), cells[0].failed, cells[0].runs),
            ("stock", 1, 3)
        );
        assert_eq!(cells[1].errors[0].0, 1, "scheduled's second repeat");
        let report = render_report(&config, &outcomes);
        assert!(
            report.contains("- late / explicit / scheduled: timed out / failed: 1 of 3\n"),
            "{report}"
        );
        assert!(report.contains("  - repeat 2: scheduled/late/explicit: no result within 61s"));
        assert!(report.contains("; 6 runs, 2 did not complete."), "{report}");
        let json = to_json(&config, &outcomes);
        let results = json["results"].as_array().unwrap();
        assert_eq!(results.len(), 6, "every run is in the JSON");
        let failed: Vec<_> = results.iter().filter(|r| r["completed"] == false).collect();
        assert_eq!(failed.len(), 2);
        // In the order they ran: scheduled's second repeat, then stock's third.
        assert_eq!(failed[1]["case"], "stock");
        assert_eq!(failed[1]["error"], "stock/late/explicit: connecting: reset");
        assert_eq!(failed[1]["repeat"], 2);
        assert_eq!(failed[0]["repeat"], 1);
        assert!(failed[1]["critical_complete_ms"].is_null());
        assert!(results
            .iter()
            .filter(|r| r["completed"] == true)
            .all(|r| r["critical_complete_ms"].is_f64()));
        // Medians over the completed runs only: stock 800 and 850, scheduled 30 and 40.
        let summary = &json["summary"];
        assert_eq!(summary[0]["critical_complete_ms"]["n"], 2);
        assert_eq!(summary[0]["critical_complete_ms"]["median"], 825.0);
        assert_eq!(summary[1]["critical_complete_ms"]["median"], 35.0);
        // Pairs need both runs of a repeat: only the first.
        assert_eq!(json["paired"][0]["critical_complete_ms"]["n"], 1);
        assert_eq!(json["failed"][1]["failed"], 1);
        assert_eq!(json["failed"][1]["runs"], 3);
    }

    #[test]
    fn without_failures_nothing_is_said() {
        let (config, results) = three_repeats();
        let outcomes: Vec<RunOutcome> = results
            .into_iter()
            .map(|r| RunOutcome::Completed(Box::new(r)))
            .collect();
        assert!(failures(&config, &outcomes).is_empty());
        let report = render_report(&config, &outcomes);
        assert!(!report.contains("did not complete"), "{report}");
        let json = to_json(&config, &outcomes);
        assert!(json["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["completed"] == true));
        assert_eq!(json["failed"], serde_json::json!([]));
    }
}
