//! The page workloads' report: the Markdown tables ([`render`]), the JSON ([`to_json`]) and
//! the chart ([`write_svg`]).
//!
//! Invariants: the tables and the JSON come from the same rows ([`summarize`],
//! [`paired`]); a run's error appears on one line under its page's table and whole in the
//! JSON.

use std::fmt::Write as _;
use std::path::Path;

use integration_tests::pages::Page;
use integration_tests::BoxError;
use serde_json::{json, Value};

use super::figures::{
    paired, priority_headers, summarize, Figure, PagePairedRow, PageRow, PriorityHeader,
};
use super::{one_line, PageOutcome, PagePlan};
use crate::args::LabConfig;
use crate::report::{config_json, markdown, show};
use crate::stats::{Spread, BASELINE};
use crate::svg::{draw_grouped_bars, GroupedBars};

/// What `page` holds, for its table's caption.
fn describe(page: Page) -> &'static str {
    match page {
        Page::Article => {
            "an article: a render-blocking stylesheet, a web font, the hero image (the LCP \
             element), twelve images below the fold, two async scripts and a 4 MiB video \
             fetched by the page"
        }
        Page::App => {
            "a single-page app: a 1.5 MiB script starting three 2 MiB images, then ten small \
             API answers (the critical responses)"
        }
        Page::Busy => {
            "the article in a second tab while the same HTTP/2 connection carries a 20 MiB \
             download started by the first"
        }
        Page::Demo => {
            "the example server's demo page: two 1 MiB background downloads (low priority) \
             and one 4 KiB critical answer (high priority) fetched at once; API is the \
             critical answer's time, bulk end the background's end; no paint timings"
        }
    }
}

/// The report: the link, the runs, the `priority` headers Chromium sent, then per page its
/// table, its failed runs and its paired differences against stock.
pub fn render(
    config: &LabConfig,
    plan: &PagePlan,
    chromium: &str,
    outcomes: &[PageOutcome],
) -> String {
    let mut out = String::new();
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    let _ = writeln!(out, "{}", config.describe_link());
    let _ = writeln!(
        out,
        "{chromium}, a fresh browser, server and link per load; {} repeats, seed {}, order \
         randomized within each repeat; {} runs{}.",
        config.repeats,
        config.seed,
        outcomes.len(),
        match failed {
            0 => String::new(),
            n => format!(", {n} did not complete"),
        }
    );
    out += &render_priority_headers(&priority_headers(plan, outcomes));
    let rows = summarize(config, plan, outcomes);
    let pairs = paired(config, plan, outcomes);
    for &page in &plan.pages {
        out += &render_page(page, &rows, outcomes);
        out += &render_paired(page, &pairs);
    }
    if let Some(note) = crate::report::skipped_note(config) {
        out += "\n";
        out += &note;
    }
    out
}

/// The `priority` headers table.
fn render_priority_headers(headers: &[PriorityHeader]) -> String {
    if headers.is_empty() {
        return "\n(no completed load: no `priority` headers to show)\n".to_string();
    }
    let mut out = String::from(
        "\n`priority` request headers Chromium sent (RFC 9218), from the first completed load \
         of each page: per resource type and Chromium's own priority, the header, an example \
         and how many requests of the load had them.\n\n",
    );
    let rows: Vec<Vec<String>> = headers
        .iter()
        .map(|h| {
            vec![
                h.page.to_string(),
                h.resource_type.clone(),
                h.chromium_priority.clone(),
                h.header.as_deref().unwrap_or("(none)").to_string(),
                h.example_path.clone(),
                h.case.clone(),
                h.requests.to_string(),
            ]
        })
        .collect();
    let headers = [
        "page",
        "resource type",
        "Chromium priority",
        "priority header",
        "example",
        "from case",
        "requests",
    ];
    out += &markdown(&headers, &rows, 6);
    out
}

/// `page`'s table and the runs of it that did not complete.
fn render_page(page: Page, rows: &[PageRow], outcomes: &[PageOutcome]) -> String {
    let mut out = format!(
        "\n{page}: {}. Median [min, max] over the completed loads, ms from the start of the \
         measured document's navigation; `x stock`: the median over stock's.\n\n",
        describe(page)
    );
    let shown = Figure::shown(page);
    // `LCP x stock` only where the page has an LCP.
    let paints = shown.contains(&Figure::Lcp);
    let mut headers = vec!["case".to_string(), "loads".to_string()];
    headers.extend(shown.iter().map(|f| format!("{} ms", f.label())));
    if paints {
        headers.push("LCP x stock".to_string());
    }
    headers.extend(["load x stock", "link drops"].map(String::from));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .filter(|r| r.page == page)
        .map(|r| {
            let mut cells = vec![r.case.clone(), format!("{}/{}", r.completed, r.runs)];
            cells.extend(
                shown
                    .iter()
                    .map(|&f| spread_or_dash(r.figures.get(f), 0, false)),
            );
            if paints {
                cells.push(ratio_or_dash(r.lcp_x_stock));
            }
            cells.push(ratio_or_dash(r.load_x_stock));
            cells.push(spread_or_dash(&r.link_drops, 0, false));
            cells
        })
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    out += &markdown(&headers, &cells, 1);
    let failed: Vec<&PageOutcome> = outcomes
        .iter()
        .filter(|o| o.page == page && o.result.is_err())
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nRuns that did not complete:\n");
        for outcome in failed {
            let error = outcome.result.as_ref().err().map_or("", String::as_str);
            let _ = writeln!(
                out,
                "- {} repeat {}: {}",
                outcome.case,
                outcome.repeat + 1,
                one_line(error)
            );
        }
    }
    out
}

/// `page`'s paired differences against stock.
fn render_paired(page: Page, pairs: &[PagePairedRow]) -> String {
    let rows: Vec<&PagePairedRow> = pairs.iter().filter(|p| p.page == page).collect();
    if rows.is_empty() {
        return format!(
            "\n(no paired differences for {page}: they need completed loads of `{BASELINE}` \
             and another case in the same repeat)\n"
        );
    }
    let mut out = format!(
        "\nPaired differences against {BASELINE}, {page} (case minus {BASELINE} within each \
         repeat, ms): median [min, max]; `sooner`: repeats in which the case was sooner, of \
         the pairs.\n\n"
    );
    let compared = Figure::compared(page);
    let mut headers = vec!["case".to_string()];
    for &figure in compared {
        headers.push(format!("Δ {} ms", figure.label()));
        headers.push(format!("{} sooner", figure.label()));
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![r.case.clone()];
            for &figure in compared {
                cells.push(spread_or_dash(r.difference.get(figure), 0, true));
                cells.push(match (r.sooner.get(figure), r.difference.get(figure)) {
                    (Some(sooner), Some(d)) => format!("{sooner}/{}", d.n),
                    _ => "-".to_string(),
                });
            }
            cells
        })
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    out += &markdown(&headers, &cells, 1);
    out
}

/// [`show`], `-` when unknown.
fn spread_or_dash(spread: &Option<Spread>, decimals: usize, signed: bool) -> String {
    spread
        .as_ref()
        .map_or_else(|| "-".to_string(), |s| show(s, decimals, signed))
}

fn ratio_or_dash(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"))
}

/// The JSON: `{"config": the lab's configuration with the pages and Chromium's version,
/// "results": every run, "summary": the tables' rows, "paired": the paired rows,
/// "priority_headers": the headers Chromium sent}`.
pub fn to_json(
    config: &LabConfig,
    plan: &PagePlan,
    chromium: &str,
    outcomes: &[PageOutcome],
) -> Value {
    let mut json_config = config_json(config);
    json_config["workloads"] = plan
        .pages
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .into();
    json_config["chromium"] = chromium.into();
    if let Some(map) = json_config.as_object_mut() {
        // The priority workloads' own: they do not apply to pages.
        map.remove("urgencies");
        map.remove("fixture");
    }
    json!({
        "config": json_config,
        "results": outcomes.iter().map(run_json).collect::<Vec<_>>(),
        "summary": summarize(config, plan, outcomes),
        "paired": paired(config, plan, outcomes),
        "priority_headers": priority_headers(plan, outcomes),
    })
}

/// One run in the JSON: its cell, `completed`, and its figures (null where the page has
/// none) or its `error`.
fn run_json(outcome: &PageOutcome) -> Value {
    let mut json = json!({
        "workload": outcome.page,
        "case": outcome.case,
        "repeat": outcome.repeat,
        "completed": outcome.result.is_ok(),
    });
    match &outcome.result {
        Ok(measured) => {
            for figure in Figure::ALL {
                json[figure.key()] = figure.of(&measured.load).into();
            }
            json["lcp_path"] = measured.load.lcp_path.clone().into();
            json["api_answers_ms"] = measured.load.api_answers_ms.clone().into();
            json["timings"] = serde_json::to_value(&measured.load.timings).unwrap_or_default();
            json["link_drops"] = measured.link_drops.into();
            json["cross_bytes"] = measured.cross_bytes.into();
        }
        Err(error) => json["error"] = error.as_str().into(),
    }
    json
}

/// Draws the median LCP of every (page, case) as grouped bars (one group per page with an
/// LCP, one bar per case, whiskers from min to max) into an SVG file; page-demo, which has
/// no paint timings, is not in it.
pub fn write_svg(
    path: &Path,
    config: &LabConfig,
    plan: &PagePlan,
    rows: &[PageRow],
) -> Result<(), BoxError> {
    let cases: Vec<String> = config.cases.iter().map(|c| c.name().to_string()).collect();
    let pages: Vec<Page> = plan
        .pages
        .iter()
        .copied()
        .filter(|&p| Figure::shown(p).contains(&Figure::Lcp))
        .collect();
    let bars = rows
        .iter()
        .filter_map(|row| {
            let group = pages.iter().position(|&p| p == row.page)?;
            let series = cases.iter().position(|c| *c == row.case)?;
            Some((group, series, (*row.figures.get(Figure::Lcp))?))
        })
        .collect();
    draw_grouped_bars(
        path,
        &GroupedBars {
            title: "Largest Contentful Paint, median per case (whiskers: min-max)".into(),
            y_desc: "ms from the start of the navigation".into(),
            x_desc: format!(
                "page   ({}; {} repeats, seed {})",
                config.describe_link(),
                config.repeats,
                config.seed
            ),
            groups: pages.iter().map(|p| p.to_string()).collect(),
            series: cases,
            bars,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::figures::tests::{completed, demo_config, three_repeats};

    #[test]
    fn report_has_the_headers_the_tables_and_the_failures() {
        let (config, plan, outcomes) = three_repeats();
        let report = render(&config, &plan, "Chromium 1.2.3", &outcomes);
        assert!(report.starts_with(&config.describe_link()), "{report}");
        assert!(report.contains("12 runs, 1 did not complete"), "{report}");
        assert!(
            report.contains("| page-article | Document      | VeryHigh          | u=0, i "),
            "{report}"
        );
        let article = report.split("\npage-app: ").next().unwrap_or_default();
        assert!(
            article.contains("|         LCP ms |         FCP ms |           load ms |    CSS end ms |    hero end ms | LCP x stock | load x stock | link drops |"),
            "{report}"
        );
        assert!(report.contains("|      API ms | LCP x stock |"), "{report}");
        assert!(
            report.contains("| scheduled |   3/3 | 500 [400, 900] "),
            "{report}"
        );
        assert!(report.contains("|        0.62 |"), "LCP x stock: {report}");
        assert!(
            report.contains(
                "- scheduled repeat 2: scheduled/page-app: incomplete load: \
                             page-app: /app/api/3.json: not received"
            ),
            "{report}"
        );
        assert!(report.contains(" Δ API ms | API sooner |"), "{report}");
        assert!(
            report.contains("| -300 [-300, +50] |        2/3 |"),
            "{report}"
        );
    }

    #[test]
    fn json_has_every_run_with_its_figures_or_its_error() {
        let (config, plan, outcomes) = three_repeats();
        let json = to_json(&config, &plan, "Chromium 1.2.3", &outcomes);
        assert_eq!(json["config"]["chromium"], "Chromium 1.2.3");
        assert_eq!(json["config"]["workloads"][1], "page-app");
        assert!(json["config"]["fixture"].is_null());
        let results = json["results"].as_array().unwrap();
        assert_eq!(results.len(), 12);
        let article = &results[0];
        assert_eq!(article["workload"], "page-article");
        assert_eq!(
            (article["case"].as_str(), article["repeat"].as_u64()),
            (Some("stock"), Some(0))
        );
        assert_eq!(article["completed"], true);
        for key in [
            "fcp_ms",
            "lcp_ms",
            "dcl_ms",
            "load_ms",
            "css_end_ms",
            "hero_end_ms",
        ] {
            assert!(article[key].is_f64(), "{key} in {article}");
        }
        assert!(article["api_ms"].is_null() && article["link_drops"].is_null());
        assert!(article["bulk_end_ms"].is_null(), "{article}");
        let failed = results.iter().find(|r| r["completed"] == false).unwrap();
        assert!(failed["error"].as_str().unwrap().contains("not received"));
        assert_eq!(json["summary"][1]["figures"]["lcp_ms"]["median"], 500.0);
        assert_eq!(json["paired"][0]["sooner"]["lcp_ms"], 2);
        assert_eq!(json["priority_headers"][0]["header"], "u=0, i");
    }

    #[test]
    fn demo_shows_its_critical_answer_and_background_end() {
        let (config, plan) = demo_config(1);
        let outcomes = vec![
            completed(Page::Demo, "stock", 0, 1000.0),
            completed(Page::Demo, "scheduled", 0, 600.0),
        ];
        let report = render(&config, &plan, "Chromium 1.2.3", &outcomes);
        assert!(
            report.contains("| case      | loads |           load ms |         API ms |       bulk end ms | load x stock | link drops |"),
            "{report}"
        );
        assert!(
            report.contains(
                "| scheduled |   1/1 | 1200 [1200, 1200] |    60 [60, 60] | 1800 [1800, 1800] |         0.60 |"
            ),
            "{report}"
        );
        assert!(
            report.contains(" Δ bulk end ms | bulk end sooner |"),
            "{report}"
        );
        assert!(!report.contains("LCP"), "{report}");
        let json = to_json(&config, &plan, "Chromium 1.2.3", &outcomes);
        let run = &json["results"][1];
        assert_eq!(run["workload"], "page-demo");
        assert_eq!(
            (run["api_ms"].as_f64(), run["bulk_end_ms"].as_f64()),
            (Some(60.0), Some(1800.0))
        );
        assert_eq!(run["api_answers_ms"], serde_json::json!([60.0]));
        assert!(run["lcp_ms"].is_null() && run["fcp_ms"].is_null(), "{run}");
        assert_eq!(
            json["summary"][1]["figures"]["bulk_end_ms"]["median"],
            1800.0
        );
    }

    #[test]
    fn chart_has_a_group_per_page() {
        let (config, plan, outcomes) = three_repeats();
        let svg = std::env::temp_dir().join(format!("lab-pages-{}.svg", std::process::id()));
        write_svg(&svg, &config, &plan, &summarize(&config, &plan, &outcomes)).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        std::fs::remove_file(&svg).ok();
        assert!(text.contains("Largest Contentful Paint"));
        assert!(text.contains("page-article") && text.contains("page-app"));
        assert!(text.contains("scheduled"));
    }
}
