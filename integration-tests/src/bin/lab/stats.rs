//! The lab's statistics: the spread (median, minimum, maximum) of each figure over the
//! repeats of a cell, and paired differences against [`BASELINE`] formed within each repeat.

use std::collections::BTreeMap;

use integration_tests::workload::{RunResult, Urgencies, Workload};
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
    }
}
