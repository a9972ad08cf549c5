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
    // page-app's columns: case, loads, LCP; page-demo's: case, loads, load, API (the
    // critical answer), bulk end.
    /// A table column and the run's figure it shows.
    type Column<'a> = (usize, &'a str);
    let tables: [(&str, &str, &[Column]); 2] = [
        (app_report, "page-app", &[(2, "lcp_ms")]),
        (
            demo_report,
            "page-demo",
            &[(3, "api_ms"), (4, "bulk_end_ms")],
        ),
    ];
    for (table, page, columns) in tables {
        let rows = support::markdown_table(table, TABLE);
        assert_eq!(rows.len(), 2, "{report}");
        for row in rows {
            let run = runs_of(page)
                .into_iter()
                .find(|r| r["case"] == row[0].as_str())
                .unwrap_or_else(|| panic!("a {page} run of {}", row[0]));
            assert_eq!(row[1], "1/1");
            for &(column, key) in columns {
                let ms = run[key].as_f64().unwrap_or_else(|| panic!("{key}: {run}"));
                assert_eq!(row[column], one(ms), "{report}");
            }
        }
    }
    assert!(
        report.contains("`priority` request headers Chromium sent"),
        "{report}"
    );
}
