//! The page workloads' statistics: the figures of a load ([`Figure`]), their spread per
//! (page, case) over the completed loads ([`summarize`]), the paired differences against
//! [`BASELINE`] within each repeat ([`paired`]), and the `priority` headers Chromium sent
//! ([`priority_headers`]).
//!
//! Invariants: failed runs count in a row's `runs` and nowhere else; a figure a page does
//! not have is `None`, never zero.

use std::collections::BTreeMap;

use integration_tests::pages::{Page, PageLoad};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::{MeasuredLoad, PageOutcome, PagePlan};
use crate::args::LabConfig;
use crate::stats::{Spread, BASELINE};

/// A figure of a page load, in milliseconds from the start of the measured document's
/// navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// Largest Contentful Paint.
    Lcp,
    /// First Contentful Paint.
    Fcp,
    /// `DOMContentLoaded`.
    Dcl,
    /// `load`.
    Load,
    /// The render-blocking stylesheet's `responseEnd` (article, busy).
    CssEnd,
    /// The hero image's `responseEnd` (article, busy).
    HeroEnd,
    /// The median API answer's time (app; demo: its one critical answer's).
    Api,
    /// The later end (`responseEnd`) of the background downloads (demo).
    BulkEnd,
}

impl Figure {
    /// Every figure, in the order of the JSON.
    pub const ALL: [Figure; 8] = [
        Figure::Lcp,
        Figure::Fcp,
        Figure::Dcl,
        Figure::Load,
        Figure::CssEnd,
        Figure::HeroEnd,
        Figure::Api,
        Figure::BulkEnd,
    ];

    /// Its key in the JSON, the name of [`PageLoad`]'s field.
    pub fn key(self) -> &'static str {
        match self {
            Figure::Lcp => "lcp_ms",
            Figure::Fcp => "fcp_ms",
            Figure::Dcl => "dcl_ms",
            Figure::Load => "load_ms",
            Figure::CssEnd => "css_end_ms",
            Figure::HeroEnd => "hero_end_ms",
            Figure::Api => "api_ms",
            Figure::BulkEnd => "bulk_end_ms",
        }
    }

    /// Its name in the tables' headers.
    pub fn label(self) -> &'static str {
        match self {
            Figure::Lcp => "LCP",
            Figure::Fcp => "FCP",
            Figure::Dcl => "DCL",
            Figure::Load => "load",
            Figure::CssEnd => "CSS end",
            Figure::HeroEnd => "hero end",
            Figure::Api => "API",
            Figure::BulkEnd => "bulk end",
        }
    }

    /// Its value in `load`; `None` where the page has none.
    pub fn of(self, load: &PageLoad) -> Option<f64> {
        match self {
            Figure::Lcp => load.lcp_ms,
            Figure::Fcp => load.fcp_ms,
            Figure::Dcl => Some(load.dcl_ms),
            Figure::Load => Some(load.load_ms),
            Figure::CssEnd => load.css_end_ms,
            Figure::HeroEnd => load.hero_end_ms,
            Figure::Api => load.api_ms,
            Figure::BulkEnd => load.bulk_end_ms,
        }
    }

    /// The figures `page`'s table shows: the paints (where the page has them), `load`, its
    /// critical resources, and page-demo's background end.
    pub fn shown(page: Page) -> &'static [Figure] {
        match page {
            Page::Article | Page::Busy => &[
                Figure::Lcp,
                Figure::Fcp,
                Figure::Load,
                Figure::CssEnd,
                Figure::HeroEnd,
            ],
            Page::App => &[Figure::Lcp, Figure::Fcp, Figure::Load, Figure::Api],
            Page::Demo => &[Figure::Load, Figure::Api, Figure::BulkEnd],
        }
    }

    /// The figures of `page`'s paired differences against stock: the paints (where the
    /// page has them), `load`, its critical response (the hero image, the API answers,
    /// page-demo's critical answer), and page-demo's background end.
    pub fn compared(page: Page) -> &'static [Figure] {
        match page {
            Page::Article | Page::Busy => {
                &[Figure::Lcp, Figure::Fcp, Figure::Load, Figure::HeroEnd]
            }
            Page::App => &[Figure::Lcp, Figure::Fcp, Figure::Load, Figure::Api],
            Page::Demo => &[Figure::Load, Figure::Api, Figure::BulkEnd],
        }
    }
}

/// One value per [`Figure`], serialized as a map from [`Figure::key`].
#[derive(Debug, Clone, PartialEq)]
pub struct PerFigure<T>([T; Figure::ALL.len()]);

impl<T> PerFigure<T> {
    /// The value of each figure from `f`.
    fn from_fn(f: impl FnMut(Figure) -> T) -> PerFigure<T> {
        PerFigure(Figure::ALL.map(f))
    }

    /// The value of `figure`.
    pub fn get(&self, figure: Figure) -> &T {
        let index = Figure::ALL.iter().position(|&f| f == figure);
        &self.0[index.expect("every figure is in Figure::ALL")]
    }
}

impl<T: Serialize> Serialize for PerFigure<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(Figure::ALL.len()))?;
        for (figure, value) in Figure::ALL.iter().zip(&self.0) {
            map.serialize_entry(figure.key(), value)?;
        }
        map.end()
    }
}

/// One row of a page's table: the spread of each figure over a case's completed loads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PageRow {
    /// The page.
    pub page: Page,
    /// The case's name.
    pub case: String,
    /// Runs that completed.
    pub completed: usize,
    /// Runs, completed or not.
    pub runs: usize,
    /// Each figure's spread; `None` where the page has none (or no run completed).
    pub figures: PerFigure<Option<Spread>>,
    /// `--link tun`: the link's drops per load.
    pub link_drops: Option<Spread>,
    /// The median LCP over stock's (same page).
    pub lcp_x_stock: Option<f64>,
    /// The median `load` over stock's (same page).
    pub load_x_stock: Option<f64>,
}

/// One row of a page's paired table: `case - stock` within each repeat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PagePairedRow {
    /// The page.
    pub page: Page,
    /// The case's name (compared with [`BASELINE`]).
    pub case: String,
    /// Repeats in which both the case and stock completed a load.
    pub pairs: usize,
    /// The differences' spread per figure; `None` where the page has none.
    pub difference: PerFigure<Option<Spread>>,
    /// Repeats in which the case was sooner than stock, per figure.
    pub sooner: PerFigure<Option<usize>>,
}

/// The runs of (`page`, `case`).
fn cell<'a>(
    outcomes: &'a [PageOutcome],
    page: Page,
    case: &'a str,
) -> impl Iterator<Item = &'a PageOutcome> + 'a {
    outcomes
        .iter()
        .filter(move |o| o.page == page && o.case == case)
}

/// The tables' rows, page by page in the plan's order, cases in the configuration's
/// (cells without runs left out).
pub fn summarize(config: &LabConfig, plan: &PagePlan, outcomes: &[PageOutcome]) -> Vec<PageRow> {
    let mut rows = Vec::new();
    for &page in &plan.pages {
        for case in &config.cases {
            let runs: Vec<&PageOutcome> = cell(outcomes, page, case.name()).collect();
            if runs.is_empty() {
                continue;
            }
            let loads: Vec<&MeasuredLoad> = runs.iter().filter_map(|o| o.measured()).collect();
            rows.push(PageRow {
                page,
                case: case.name().to_string(),
                completed: loads.len(),
                runs: runs.len(),
                figures: PerFigure::from_fn(|f| {
                    Spread::of(loads.iter().filter_map(|m| f.of(&m.load)))
                }),
                link_drops: Spread::of(loads.iter().filter_map(|m| m.link_drops.map(|d| d as f64))),
                lcp_x_stock: None,
                load_x_stock: None,
            });
        }
    }
    let medians: Vec<(Page, Option<f64>, Option<f64>)> = rows
        .iter()
        .filter(|r| r.case == BASELINE)
        .map(|r| (r.page, median(r, Figure::Lcp), median(r, Figure::Load)))
        .collect();
    for row in &mut rows {
        if let Some(&(_, lcp, load)) = medians.iter().find(|(p, _, _)| *p == row.page) {
            row.lcp_x_stock = ratio(median(row, Figure::Lcp), lcp);
            row.load_x_stock = ratio(median(row, Figure::Load), load);
        }
    }
    rows
}

fn median(row: &PageRow, figure: Figure) -> Option<f64> {
    row.figures.get(figure).map(|s| s.median)
}

fn ratio(value: Option<f64>, baseline: Option<f64>) -> Option<f64> {
    match (value, baseline) {
        (Some(v), Some(b)) if b > 0.0 => Some(v / b),
        _ => None,
    }
}

/// Paired differences against [`BASELINE`] within each repeat, page by page (empty when
/// stock is not among the cases; a case without a pair is left out).
pub fn paired(config: &LabConfig, plan: &PagePlan, outcomes: &[PageOutcome]) -> Vec<PagePairedRow> {
    let mut rows = Vec::new();
    for &page in &plan.pages {
        let stock: BTreeMap<usize, &PageLoad> = cell(outcomes, page, BASELINE)
            .filter_map(|o| Some((o.repeat, &o.measured()?.load)))
            .collect();
        for case in config.cases.iter().filter(|c| c.name() != BASELINE) {
            let pairs: Vec<(&PageLoad, &PageLoad)> = cell(outcomes, page, case.name())
                .filter_map(|o| Some((&o.measured()?.load, *stock.get(&o.repeat)?)))
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let differences = |f: Figure| -> Vec<f64> {
                pairs
                    .iter()
                    .filter_map(|(load, stock)| Some(f.of(load)? - f.of(stock)?))
                    .collect()
            };
            rows.push(PagePairedRow {
                page,
                case: case.name().to_string(),
                pairs: pairs.len(),
                difference: PerFigure::from_fn(|f| Spread::of(differences(f))),
                sooner: PerFigure::from_fn(|f| {
                    let d = differences(f);
                    (!d.is_empty()).then(|| d.iter().filter(|&&x| x < 0.0).count())
                }),
            });
        }
    }
    rows
}

/// The `priority` request header Chromium sent for one kind of request of a page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriorityHeader {
    /// The page.
    pub page: Page,
    /// The case whose load it came from (the first completed load of the page).
    pub case: String,
    /// CDP's resource type (`Document`, `Stylesheet`, ...).
    pub resource_type: String,
    /// Chromium's own priority for it (`VeryHigh` ... `VeryLow`).
    pub chromium_priority: String,
    /// The `priority` header; `None` when Chromium sent none.
    pub header: Option<String>,
    /// The first such request's path.
    pub example_path: String,
    /// How many requests of the load had this type, priority and header.
    pub requests: usize,
}

/// Per page, from its first completed load (in run order), the `priority` headers Chromium
/// sent: one entry per (resource type, Chromium's priority, header), in issue order.
pub fn priority_headers(plan: &PagePlan, outcomes: &[PageOutcome]) -> Vec<PriorityHeader> {
    let mut headers: Vec<PriorityHeader> = Vec::new();
    for &page in &plan.pages {
        let first = outcomes
            .iter()
            .filter(|o| o.page == page)
            .find_map(|o| Some((o, o.measured()?)));
        let Some((outcome, measured)) = first else {
            continue;
        };
        let start = headers.len();
        for request in measured.load.network_requests() {
            let same = headers[start..].iter_mut().find(|h| {
                h.resource_type == request.resource_type
                    && h.chromium_priority == request.initial_priority
                    && h.header == request.priority
            });
            match same {
                Some(header) => header.requests += 1,
                None => headers.push(PriorityHeader {
                    page,
                    case: outcome.case.clone(),
                    resource_type: request.resource_type.clone(),
                    chromium_priority: request.initial_priority.clone(),
                    header: request.priority.clone(),
                    example_path: request.path.clone(),
                    requests: 1,
                }),
            }
        }
    }
    headers
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::args::tests::args;
    use integration_tests::pages::RequestSeen;

    /// A synthetic load of `page` with the given LCP (page-demo, which has none: the same
    /// figures without the paints); the other figures follow from it.
    fn load(page: Page, lcp: f64) -> PageLoad {
        let article = matches!(page, Page::Article | Page::Busy);
        let api = matches!(page, Page::App | Page::Demo);
        let paints = page.measures_paints();
        PageLoad {
            page,
            fcp_ms: paints.then_some(lcp / 2.0),
            lcp_ms: paints.then_some(lcp),
            lcp_path: article.then(|| "/article/hero.png".to_string()),
            dcl_ms: lcp / 4.0,
            load_ms: lcp * 2.0,
            css_end_ms: article.then_some(lcp / 8.0),
            hero_end_ms: article.then_some(lcp - 10.0),
            api_ms: api.then_some(lcp / 10.0),
            api_answers_ms: if api { vec![lcp / 10.0] } else { Vec::new() },
            bulk_end_ms: (page == Page::Demo).then_some(lcp * 3.0),
            timings: Vec::new(),
            resources: Vec::new(),
            requests: vec![request("/article/index.html", "Document", "u=0, i")],
            shared_connection: None,
            errors: Vec::new(),
        }
    }

    fn request(path: &str, resource_type: &str, priority: &str) -> RequestSeen {
        RequestSeen {
            path: path.into(),
            resource_type: resource_type.into(),
            initial_priority: "VeryHigh".into(),
            priority: Some(priority.into()),
            protocol: Some("h2".into()),
            connection_id: Some(1),
            status: Some(200),
            from_cache: false,
            failure: None,
        }
    }

    /// The lab's configuration and page plan for page-demo, stock and scheduled.
    pub(crate) fn demo_config(repeats: usize) -> (LabConfig, PagePlan) {
        let repeats = repeats.to_string();
        let config = LabConfig::from_args(&args(&[
            "--workloads",
            "page-demo",
            "--cases",
            "stock,scheduled",
            "--repeats",
            &repeats,
        ]))
        .unwrap();
        let plan = config.pages.clone().unwrap();
        (config, plan)
    }

    pub(crate) fn completed(page: Page, case: &str, repeat: usize, lcp: f64) -> PageOutcome {
        PageOutcome {
            page,
            case: case.into(),
            repeat,
            result: Ok(MeasuredLoad {
                load: load(page, lcp),
                link_drops: None,
                cross_bytes: None,
            }),
        }
    }

    /// stock and scheduled, article and app, three repeats; scheduled's article LCP is
    /// sooner in two repeats; scheduled's app load of repeat 2 failed.
    pub(crate) fn three_repeats() -> (LabConfig, PagePlan, Vec<PageOutcome>) {
        let config = LabConfig::from_args(&args(&[
            "--workloads",
            "page-article,page-app",
            "--cases",
            "stock,scheduled",
            "--repeats",
            "3",
            "--seed",
            "1",
        ]))
        .unwrap();
        let plan = config.pages.clone().unwrap();
        let mut outcomes = Vec::new();
        for (repeat, (stock, scheduled)) in [(800.0, 500.0), (850.0, 900.0), (700.0, 400.0)]
            .into_iter()
            .enumerate()
        {
            outcomes.push(completed(Page::Article, "stock", repeat, stock));
            outcomes.push(completed(Page::Article, "scheduled", repeat, scheduled));
            outcomes.push(completed(Page::App, "stock", repeat, stock));
            if repeat == 1 {
                outcomes.push(PageOutcome {
                    page: Page::App,
                    case: "scheduled".into(),
                    repeat,
                    result: Err("scheduled/page-app: incomplete load: page-app:\n\
                                 /app/api/3.json: not received"
                        .into()),
                });
            } else {
                outcomes.push(completed(Page::App, "scheduled", repeat, scheduled));
            }
        }
        (config, plan, outcomes)
    }

    #[test]
    fn rows_pair_within_repeats_and_leave_failed_runs_out() {
        let (config, plan, outcomes) = three_repeats();
        let rows = summarize(&config, &plan, &outcomes);
        assert_eq!(rows.len(), 4);
        let article = &rows[1];
        assert_eq!(
            (article.page, article.case.as_str()),
            (Page::Article, "scheduled")
        );
        let lcp = article.figures.get(Figure::Lcp).unwrap();
        assert_eq!(
            (lcp.median, lcp.min, lcp.max, lcp.n),
            (500.0, 400.0, 900.0, 3)
        );
        assert_eq!(article.lcp_x_stock, Some(500.0 / 800.0));
        assert_eq!(article.load_x_stock, Some(1000.0 / 1600.0));
        assert_eq!(*article.figures.get(Figure::Api), None);
        let app = &rows[3];
        assert_eq!((app.completed, app.runs), (2, 3));
        assert_eq!(app.figures.get(Figure::Api).unwrap().median, 45.0);
        assert_eq!(*app.figures.get(Figure::HeroEnd), None);

        let pairs = paired(&config, &plan, &outcomes);
        assert_eq!(pairs.len(), 2);
        // Article LCP within each repeat: -300, +50, -300.
        let lcp = pairs[0].difference.get(Figure::Lcp).unwrap();
        assert_eq!((lcp.median, lcp.min, lcp.max), (-300.0, -300.0, 50.0));
        assert_eq!(*pairs[0].sooner.get(Figure::Lcp), Some(2));
        assert_eq!(*pairs[0].sooner.get(Figure::Api), None);
        assert_eq!(pairs[1].pairs, 2, "the failed run has no pair");
    }

    #[test]
    fn demo_rows_have_the_critical_answer_and_the_background_end_without_paints() {
        let (config, plan) = demo_config(2);
        let outcomes = vec![
            completed(Page::Demo, "stock", 0, 1000.0),
            completed(Page::Demo, "scheduled", 0, 600.0),
            completed(Page::Demo, "stock", 1, 1200.0),
            completed(Page::Demo, "scheduled", 1, 1300.0),
        ];
        let rows = summarize(&config, &plan, &outcomes);
        let scheduled = &rows[1];
        assert_eq!(scheduled.figures.get(Figure::Api).unwrap().median, 95.0);
        assert_eq!(
            scheduled.figures.get(Figure::BulkEnd).unwrap().median,
            2850.0
        );
        assert_eq!(*scheduled.figures.get(Figure::Lcp), None);
        assert_eq!(scheduled.lcp_x_stock, None);
        assert_eq!(scheduled.load_x_stock, Some(1900.0 / 2200.0));
        let pairs = paired(&config, &plan, &outcomes);
        // Critical answer within each repeat: -40, +10.
        let api = pairs[0].difference.get(Figure::Api).unwrap();
        assert_eq!((api.min, api.max), (-40.0, 10.0));
        assert_eq!(*pairs[0].sooner.get(Figure::BulkEnd), Some(1));
        assert_eq!(*pairs[0].sooner.get(Figure::Lcp), None);
    }
}
