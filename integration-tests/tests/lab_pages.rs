//! The lab's page workloads end to end: the `lab` binary loads page-app and page-demo in
//! headless Chromium from `stock` and `scheduled` (one repeat, the relay link), and its JSON
//! must hold the four runs, completed, with every figure of a page load (null where the
//! page has none), and agree with each page's table.
//!
//! Needs Debian's `chromium` on `PATH` (`scripts/install-test-tools.sh` installs it): the
//! test fails without it rather than skipping.

mod support;

/// The figures every completed run carries as numbers on page-app.
const APP_FIGURES: [&str; 5] = ["fcp_ms", "lcp_ms", "dcl_ms", "load_ms", "api_ms"];

/// The figures page-app does not have: null in its runs.
const APP_NULL: [&str; 3] = ["css_end_ms", "hero_end_ms", "bulk_end_ms"];

/// The figures every completed run carries as numbers on page-demo: the critical answer's
/// time (`api_ms`) and the background's end (`bulk_end_ms`).
const DEMO_FIGURES: [&str; 4] = ["dcl_ms", "load_ms", "api_ms", "bulk_end_ms"];

/// The figures page-demo does not have (no paint timings): null in its runs.
const DEMO_NULL: [&str; 4] = ["fcp_ms", "lcp_ms", "css_end_ms", "hero_end_ms"];

/// The header of a page's table (the paired tables' second column is not `loads`).
const TABLE: &str = "| case      | loads |";

#[test]
fn lab_loads_page_app_and_page_demo_from_stock_and_scheduled() {
    let json_path = std::env::temp_dir().join(format!("lab-pages-{}.json", std::process::id()));
    let (report, json) = support::run_lab(
        &[
            "--workloads",
            "page-app,page-demo",
            "--cases",
            "stock,scheduled",
            "--repeats",
            "1",
            "--link",
            "relay",
            "--seed",
            "7",
        ],
        &json_path,
    );
    let config = &json["config"];
    assert_eq!(
        config["workloads"],
        serde_json::json!(["page-app", "page-demo"])
    );
    assert_eq!(config["cases"], serde_json::json!(["stock", "scheduled"]));
    assert!(
        config["chromium"]
            .as_str()
            .is_some_and(|v| v.starts_with("Chromium")),
        "{config}"
    );
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "{json}");
    for run in results {
        assert_eq!(run["completed"], true, "{run}");
        assert_eq!(run["repeat"], 0);
        let (numbers, nulls): (&[&str], &[&str]) = match run["workload"].as_str() {
            Some("page-app") => (&APP_FIGURES, &APP_NULL),
            Some("page-demo") => (&DEMO_FIGURES, &DEMO_NULL),
            other => panic!("workload {other:?}: {run}"),
        };
        for key in numbers {
            assert!(run[key].as_f64().is_some_and(|ms| ms > 0.0), "{key}: {run}");
        }
        for key in nulls.iter().chain(&["link_drops", "error"]) {
            assert!(run[key].is_null(), "{key}: {run}");
        }
    }
    let runs_of = |page: &str| -> Vec<&serde_json::Value> {
        results.iter().filter(|r| r["workload"] == page).collect()
    };
    for page in ["page-app", "page-demo"] {
        let cases: Vec<&str> = runs_of(page)
            .iter()
            .filter_map(|r| r["case"].as_str())
            .collect();
        assert!(
            cases.contains(&"stock") && cases.contains(&"scheduled"),
            "{page}: {cases:?}"
        );
    }
    let demo = runs_of("page-demo");
    for run in &demo {
        // One critical answer: its time is the median.
        assert_eq!(run["api_answers_ms"], serde_json::json!([run["api_ms"]]));
    }

    // Each page's table: one row per case, its figures the run's (one repeat: min = max).
    let one = |ms: f64| format!("{ms:.0} [{ms:.0}, {ms:.0}]");
    let (app_report, demo_report) = report
        .split_once("\npage-demo: ")
        .unwrap_or_else(|| panic!("no page-demo table: {report}"));
    let app_rows = support::markdown_table(app_report, TABLE);
    assert_eq!(app_rows.len(), 2, "{report}");
    for row in app_rows {
        let run = runs_of("page-app")
            .into_iter()
            .find(|r| r["case"] == row[0].as_str())
            .unwrap_or_else(|| panic!("a page-app run of {}", row[0]));
        assert_eq!(row[1], "1/1");
        assert_eq!(
            row[2],
            one(run["lcp_ms"].as_f64().expect("LCP")),
            "{report}"
        );
    }
    // page-demo's columns: case, loads, load, API (the critical answer), bulk end.
    let demo_rows = support::markdown_table(demo_report, TABLE);
    assert_eq!(demo_rows.len(), 2, "{report}");
    for row in demo_rows {
        let run = demo
            .iter()
            .find(|r| r["case"] == row[0].as_str())
            .unwrap_or_else(|| panic!("a page-demo run of {}", row[0]));
        assert_eq!(row[1], "1/1");
        assert_eq!(
            row[3],
            one(run["api_ms"].as_f64().expect("API")),
            "{report}"
        );
        let bulk_end = run["bulk_end_ms"].as_f64().expect("bulk end");
        assert_eq!(row[4], one(bulk_end), "{report}");
    }
    assert!(
        report.contains("`priority` request headers Chromium sent"),
        "{report}"
    );
}
