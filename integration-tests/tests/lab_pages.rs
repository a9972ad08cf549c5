//! The lab's page workloads end to end: the `lab` binary loads page-app in headless
//! Chromium from `stock` and `scheduled` (one repeat, the relay link), and its JSON must
//! hold both runs, completed, with every figure of a page load (null where page-app has
//! none), and agree with the page's table.
//!
//! Needs Debian's `chromium` on `PATH` (`scripts/install-test-tools.sh` installs it): the
//! test fails without it rather than skipping.

mod support;

/// The figures every completed run carries as numbers on page-app.
const APP_FIGURES: [&str; 5] = ["fcp_ms", "lcp_ms", "dcl_ms", "load_ms", "api_ms"];

/// The figures page-app does not have: null in its runs.
const ARTICLE_ONLY: [&str; 2] = ["css_end_ms", "hero_end_ms"];

#[test]
fn lab_loads_page_app_from_stock_and_scheduled() {
    let json_path = std::env::temp_dir().join(format!("lab-pages-{}.json", std::process::id()));
    let (report, json) = support::run_lab(
        &[
            "--workloads",
            "page-app",
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
    assert_eq!(config["workloads"], serde_json::json!(["page-app"]));
    assert_eq!(config["cases"], serde_json::json!(["stock", "scheduled"]));
    assert!(
        config["chromium"]
            .as_str()
            .is_some_and(|v| v.starts_with("Chromium")),
        "{config}"
    );
    let results = json["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{json}");
    for run in results {
        assert_eq!(run["completed"], true, "{run}");
        assert_eq!(run["workload"], "page-app");
        assert_eq!(run["repeat"], 0);
        for key in APP_FIGURES {
            assert!(run[key].as_f64().is_some_and(|ms| ms > 0.0), "{key}: {run}");
        }
        for key in ARTICLE_ONLY.into_iter().chain(["link_drops", "error"]) {
            assert!(run[key].is_null(), "{key}: {run}");
        }
    }
    let cases: Vec<&str> = results.iter().filter_map(|r| r["case"].as_str()).collect();
    assert!(
        cases.contains(&"stock") && cases.contains(&"scheduled"),
        "{cases:?}"
    );

    // The page's table: one row per case, its LCP the run's (one repeat: min = max).
    let rows = support::markdown_table(&report, "| case      | loads |");
    assert_eq!(rows.len(), 2, "{report}");
    for row in rows {
        let run = results
            .iter()
            .find(|r| r["case"] == row[0].as_str())
            .unwrap_or_else(|| panic!("a run of {}", row[0]));
        let lcp = run["lcp_ms"].as_f64().expect("LCP");
        assert_eq!(row[1], "1/1");
        assert_eq!(row[2], format!("{lcp:.0} [{lcp:.0}, {lcp:.0}]"), "{report}");
    }
    assert!(
        report.contains("`priority` request headers Chromium sent"),
        "{report}"
    );
}
