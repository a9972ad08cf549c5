//! The lab's own loop, end to end: the `lab` binary on a tiny configuration (one repeat, the
//! `late` workload with explicit urgencies, `stock` and `scheduled`, a fast relay link),
//! whose JSON must parse and agree with the tables it printed: the same cells in the same
//! order, the same medians, minimums and maximums, the same paired differences.

use std::process::Command;

use serde_json::Value;

/// The cells of the Markdown table that starts at the line `header` of `report`, one
/// vector per row (the header and the alignment row left out).
fn table(report: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = report.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "no table `{header}` in:\n{report}");
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

/// `median [min, max]` of a spread in the JSON, as the table prints it.
fn spread(value: &Value, decimals: usize, signed: bool) -> String {
    let f = |key: &str| {
        let x = value[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {value}"));
        if signed {
            format!("{x:+.decimals$}")
        } else {
            format!("{x:.decimals$}")
        }
    };
    format!("{} [{}, {}]", f("median"), f("min"), f("max"))
}

fn text(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a string: {value}"))
        .to_string()
}

#[test]
fn lab_json_agrees_with_its_tables() {
    let json_path = std::env::temp_dir().join(format!("lab-test-{}.json", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_lab"))
        .args([
            "--repeats",
            "1",
            "--workloads",
            "late",
            "--urgencies",
            "explicit",
            "--cases",
            "stock,scheduled",
            "--rtt-ms",
            "5",
            "--rate-mbit",
            "200",
            "--seed",
            "7",
            "--json",
        ])
        .arg(&json_path)
        .output()
        .expect("the lab runs");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{}\n{report}\n{stderr}",
        output.status
    );
    let json = std::fs::read_to_string(&json_path).expect("the JSON file");
    std::fs::remove_file(&json_path).ok();
    let json: Value = serde_json::from_str(&json).expect("the JSON parses");
    println!("{report}");

    // The configuration asked for, and every run.
    let config = &json["config"];
    assert_eq!(config["repeats"], 1);
    assert_eq!(config["seed"], 7);
    assert_eq!(config["cases"], serde_json::json!(["stock", "scheduled"]));
    assert_eq!(config["link"]["mode"], "relay");
    assert_eq!(
        report.lines().next(),
        config["link"]["description"].as_str(),
        "the report starts with the link"
    );
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert!(
        report.contains("\n2 runs in "),
        "the run count in:\n{report}"
    );
    for r in results {
        assert_eq!(
            (r["workload"].as_str(), r["urgencies"].as_str()),
            (Some("late"), Some("explicit"))
        );
        assert_eq!(r["repeat"], 0);
    }

    // The main table: one row per summary row, same cells.
    let (main_part, paired_part) = report
        .split_once("\nPaired differences against stock")
        .unwrap_or_else(|| panic!("no paired differences in:\n{report}"));
    let rows = table(main_part, "| workload ");
    let summary = json["summary"].as_array().expect("summary");
    assert_eq!(rows.len(), summary.len(), "{report}");
    assert_eq!(summary.len(), 2);
    for (row, s) in rows.iter().zip(summary) {
        let expected = vec![
            text(&s["workload"]),
            text(&s["urgencies"]),
            text(&s["case"]),
            spread(&s["critical_first_byte_ms"], 1, false),
            spread(&s["critical_complete_ms"], 1, false),
            spread(&s["background_kib_before_critical"], 0, false),
            spread(&s["fixture_complete_ms"], 1, false),
            spread(&s["tls_records"], 0, false),
        ];
        assert_eq!(row, &expected, "table row against the JSON summary");
    }
    let cases: Vec<&str> = rows.iter().map(|r| r[2].as_str()).collect();
    assert_eq!(cases, ["stock", "scheduled"]);
    // With one repeat, each median is that run's figure.
    for (s, case) in summary.iter().zip(["stock", "scheduled"]) {
        let run = results
            .iter()
            .find(|r| r["case"] == case)
            .unwrap_or_else(|| panic!("a run of {case}"));
        for figure in [
            "critical_first_byte_ms",
            "critical_complete_ms",
            "fixture_complete_ms",
            "tls_records",
        ] {
            assert_eq!(
                s[figure]["median"].as_f64(),
                run[figure].as_f64(),
                "{case}: {figure}"
            );
        }
    }

    // The paired table: scheduled minus stock.
    let rows = table(paired_part, "| workload ");
    let pairs = json["paired"].as_array().expect("paired");
    assert_eq!(rows.len(), pairs.len(), "{report}");
    assert_eq!(pairs.len(), 1);
    for (row, p) in rows.iter().zip(pairs) {
        let expected = vec![
            text(&p["workload"]),
            text(&p["urgencies"]),
            text(&p["case"]),
            spread(&p["critical_complete_ms"], 1, true),
            format!(
                "{}/{}",
                p["critical_sooner"], p["critical_complete_ms"]["n"]
            ),
            spread(&p["background_kib_before_critical"], 0, true),
            spread(&p["fixture_complete_ms"], 1, true),
        ];
        assert_eq!(row, &expected, "paired row against the JSON");
    }
}
