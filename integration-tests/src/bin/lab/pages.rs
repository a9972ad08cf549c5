//! `--workloads page-article,page-app,page-busy,page-demo`: the lab's pages loaded in headless
//! Chromium from every case's server through the link ([`integration_tests::pages`]): the
//! plan the flags ask for ([`page_plan`]), the runs ([`run`]); the statistics in
//! `figures` ([`summarize`], paired differences, the `priority` headers Chromium sent),
//! the tables, the JSON and the chart in `render` ([`render()`], [`to_json`],
//! [`write_svg`]).
//!
//! Invariants:
//! - the site is generated once per lab run into a temporary directory, which is removed
//!   at the end, also when the lab fails;
//! - every repeat runs every (case, page) cell once, in a random order drawn from the seed;
//! - a run that failed (nothing measured, or a load that is not complete and byte-exact)
//!   is kept with its error, listed under its page's table and in the JSON, and left out
//!   of the statistics; the lab goes on with the next run;
//! - a paired difference pairs a case's load with stock's load of the same page in the
//!   same repeat (the same link conditions with `--link tun`'s seeded impairments).

mod figures;
mod render;

use std::path::Path;
use std::time::Instant;

use integration_tests::pages::{
    chromium_version, generate_site, page_timeout, run_page_relay, run_page_tun, Page, PageLoad,
    Site,
};
use integration_tests::workload::Case;
use integration_tests::BoxError;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::args::{LabArgs, LabConfig, LinkMode, WorkloadArg};

pub use figures::summarize;
pub use render::{render, to_json, write_svg};

/// `--cases` of the page workloads when none are given: stock (the baseline), the two
/// `tls-flush` policies a site would deploy, and the peers that serve a site as shipped
/// (nginx-4k, a record-size variant, and our stock-4k and dynamic are left out to keep the
/// default run short). Peers that are not installed are skipped.
pub const DEFAULT_CASES: [&str; 7] = [
    "stock",
    "early-flush",
    "scheduled",
    "nginx",
    "nghttpd",
    "h2o",
    "apache",
];

/// What `--workloads page-*` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePlan {
    /// The pages, in the order asked for, each once.
    pub pages: Vec<Page>,
}

/// The page plan the flags ask for, if `--workloads` names a page; the page workloads run
/// on their own, so any other workload with them is an error, and so are the flags of the
/// priority workloads' reports (`--explain`, `--trace`).
pub fn page_plan(args: &LabArgs) -> Result<Option<PagePlan>, BoxError> {
    let mut pages = Vec::new();
    for workload in &args.workloads {
        if let WorkloadArg::Page(page) = workload {
            if !pages.contains(page) {
                pages.push(*page);
            }
        }
    }
    if pages.is_empty() {
        return Ok(None);
    }
    let other = args
        .workloads
        .iter()
        .find(|w| !matches!(w, WorkloadArg::Page(_)));
    if let Some(other) = other {
        return Err(format!(
            "the page workloads (page-article, page-app, page-busy, page-demo) run on their \
             own: `{}` \
             cannot run with them; run the priority workloads (alone, simultaneous, late) \
             and first-request or connection-rate in another lab invocation",
            workload_name(other)
        )
        .into());
    }
    if args.explain || args.trace.is_some() {
        return Err("--explain and --trace apply to the priority workloads only".into());
    }
    Ok(Some(PagePlan { pages }))
}

/// Lowers the niceness of every thread of the lab (the link emulator, the in-process
/// servers, and, since threads and processes inherit it, the peers and the browser it
/// starts later) by [`LAB_NICENESS_BOOST`]: with the browser itself
/// [`BROWSER_NICENESS`](integration_tests::pages::BROWSER_NICENESS) steps nicer, the
/// browser's rendering no longer takes the two cores from the link and the servers, which
/// on a real link are other machines. Every case gets the same. Needs root (as the tun
/// link does).
fn favour_the_lab_over_the_browser() -> Result<(), BoxError> {
    let tasks = std::fs::read_dir("/proc/self/task")
        .map_err(|e| format!("listing the lab's threads: {e}"))?;
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().parse::<i32>().ok();
        let Some(pid) = tid.and_then(rustix::process::Pid::from_raw) else {
            continue;
        };
        rustix::process::setpriority_process(Some(pid), -LAB_NICENESS_BOOST)
            .map_err(|e| format!("raising the lab's priority: {e}"))?;
    }
    Ok(())
}

/// How many steps of niceness the lab's threads gain for the page workloads.
const LAB_NICENESS_BOOST: i32 = 5;

/// The name of `workload` on the command line.
fn workload_name(workload: &WorkloadArg) -> &'static str {
    match workload {
        WorkloadArg::Priority(w) => w.name(),
        WorkloadArg::FirstRequest => "first-request",
        WorkloadArg::ConnectionRate => "connection-rate",
        WorkloadArg::Page(page) => page.name(),
    }
}

/// Refuses an external server among the page workloads' `cases`: it serves the priority
/// fixture, not the lab's generated site.
pub fn check_cases(cases: &[Case]) -> Result<(), BoxError> {
    match cases.iter().find(|c| matches!(c, Case::External { .. })) {
        Some(external) => Err(format!(
            "the page workloads cannot measure `{external}`: an external server does not \
             serve the lab's generated site (use our cases or the peers)"
        )
        .into()),
        None => Ok(()),
    }
}

/// One run of the plan: its cell, and what it measured or why it failed.
#[derive(Debug, Clone)]
pub struct PageOutcome {
    /// The page.
    pub page: Page,
    /// The case's name.
    pub case: String,
    /// Which repeat.
    pub repeat: usize,
    /// The load, or the run's error (which names the case and the page).
    pub result: Result<MeasuredLoad, String>,
}

impl PageOutcome {
    /// The load, if the run completed.
    fn measured(&self) -> Option<&MeasuredLoad> {
        self.result.as_ref().ok()
    }
}

/// A complete, byte-exact load and what the link saw meanwhile.
#[derive(Debug, Clone)]
pub struct MeasuredLoad {
    /// The load.
    pub load: PageLoad,
    /// `--link tun`: packets the link's server-to-client direction dropped meanwhile.
    pub link_drops: Option<u64>,
    /// `--link tun --cross`: bytes the cross traffic's sink received meanwhile.
    pub cross_bytes: Option<u64>,
}

/// A generated site in a temporary directory of this lab run, removed when dropped.
struct TempSite(Site);

impl TempSite {
    fn generate() -> Result<TempSite, BoxError> {
        let dir = std::env::temp_dir().join(format!("lab-site-{}", std::process::id()));
        match generate_site(&dir) {
            Ok(site) => Ok(TempSite(site)),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!("generating the site in {}: {e}", dir.display()).into())
            }
        }
    }
}

impl Drop for TempSite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0.dir);
    }
}

/// Runs the plan on a freshly generated site, prints the report and writes the JSON and
/// SVG asked for; an error only when nothing could run or no run completed.
pub async fn run_and_report(
    config: &LabConfig,
    plan: &PagePlan,
    json: Option<&Path>,
    svg: Option<&Path>,
) -> Result<(), BoxError> {
    if config.cases.is_empty() {
        return Err("nothing to run: no case asked for is installed".into());
    }
    let chromium = chromium_version()?;
    if config.link_mode == LinkMode::Tun {
        favour_the_lab_over_the_browser()?;
    }
    let site = TempSite::generate()?;
    eprintln!(
        "lab: {} page loads ({} pages x {} cases x {} repeats), seed {}, link: {}; {chromium}",
        plan.pages.len() * config.cases.len() * config.repeats,
        plan.pages.len(),
        config.cases.len(),
        config.repeats,
        config.seed,
        config.describe_link()
    );
    let started = Instant::now();
    let outcomes = run(config, plan, &site.0).await;
    let elapsed = started.elapsed();
    print!("{}", render(config, plan, &chromium, &outcomes));
    println!(
        "\n{} runs in {:.1} s",
        outcomes.len(),
        elapsed.as_secs_f64()
    );
    if let Some(path) = json {
        let mut json = to_json(config, plan, &chromium, &outcomes);
        json["config"]["elapsed_s"] = elapsed.as_secs_f64().into();
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    if let Some(path) = svg {
        write_svg(path, config, plan, &summarize(config, plan, &outcomes))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("lab: wrote {}", path.display());
    }
    some_completed(&outcomes)
}

/// `Ok` when some runs completed (with a line on stderr for those that did not).
fn some_completed(outcomes: &[PageOutcome]) -> Result<(), BoxError> {
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    match failed {
        0 => Ok(()),
        n if n == outcomes.len() => Err(format!("all {n} runs failed").into()),
        n => {
            eprintln!(
                "lab: {n} of {} runs did not complete (listed under the tables)",
                outcomes.len()
            );
            Ok(())
        }
    }
}

/// The runs in the order they happen: repeat by repeat, every (case, page) cell once per
/// repeat, in a random order drawn from the seed.
pub fn schedule(config: &LabConfig, plan: &PagePlan) -> Vec<(usize, Case, Page)> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut runs = Vec::new();
    for repeat in 0..config.repeats {
        let mut cells: Vec<(Case, Page)> = plan
            .pages
            .iter()
            .flat_map(|&page| config.cases.iter().map(move |case| (case.clone(), page)))
            .collect();
        cells.shuffle(&mut rng);
        runs.extend(cells.into_iter().map(|(case, page)| (repeat, case, page)));
    }
    runs
}

/// Runs the whole schedule, one load at a time, each with a fresh server, link and
/// browser; a run that fails is kept with its error (and printed on stderr).
pub async fn run(config: &LabConfig, plan: &PagePlan, site: &Site) -> Vec<PageOutcome> {
    let schedule = schedule(config, plan);
    let mut outcomes = Vec::with_capacity(schedule.len());
    for (index, (repeat, case, page)) in schedule.iter().enumerate() {
        eprintln!(
            "lab: {}/{} repeat {}: {case} / {page}",
            index + 1,
            schedule.len(),
            repeat + 1
        );
        let result = run_one(config, site, case, *page, *repeat)
            .await
            .map_err(|e| e.to_string());
        if let Err(e) = &result {
            eprintln!(
                "lab: repeat {} did not complete: {}",
                repeat + 1,
                one_line(e)
            );
        }
        outcomes.push(PageOutcome {
            page: *page,
            case: case.name().to_string(),
            repeat: *repeat,
            result,
        });
    }
    outcomes
}

/// One load of `page` from `case` through the configured link (`repeat`'s, on tun).
async fn run_one(
    config: &LabConfig,
    site: &Site,
    case: &Case,
    page: Page,
    repeat: usize,
) -> Result<MeasuredLoad, BoxError> {
    match config.link_mode {
        LinkMode::Relay => {
            let link = &config.link;
            let timeout = page_timeout(site, page, link.rate_mbit, link.rtt, 0);
            let load = run_page_relay(case, page, site, link, timeout).await?;
            Ok(MeasuredLoad {
                load,
                link_drops: None,
                cross_bytes: None,
            })
        }
        LinkMode::Tun => {
            let tun = config.tun_for_repeat(repeat);
            // A rate trace replaces the downstream rate: time the transfer at its mean.
            let rate_mbit = tun
                .rate_trace
                .as_ref()
                .map_or(tun.rate_mbit, |t| t.downstream.mean_rate_mbit());
            let timeout = page_timeout(site, page, rate_mbit, tun.rtt, tun.cross_flows);
            let run = run_page_tun(case, page, site, &tun, timeout).await?;
            Ok(MeasuredLoad {
                load: run.load,
                link_drops: Some(run.link_drops),
                cross_bytes: run.cross_bytes,
            })
        }
    }
}

/// An error of several lines (an incomplete load lists its problems, one a line, after a
/// line ending in a colon) as one: lines joined by `; `, or by a space after a colon.
fn one_line(error: &str) -> String {
    let mut out = String::new();
    for line in error.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match out.chars().last() {
            None => {}
            Some(':') => out.push(' '),
            Some(_) => out.push_str("; "),
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::tests::args;
    use clap::Parser;

    fn config(extra: &[&str]) -> Result<LabConfig, BoxError> {
        LabConfig::from_args(&args(extra))
    }

    #[test]
    fn page_workloads_run_alone_with_their_default_cases() {
        let config = config(&[
            "--workloads",
            "page-article,page-app,page-busy,page-demo,page-app",
        ])
        .unwrap();
        let plan = config.pages.clone().unwrap();
        assert_eq!(plan.pages, Page::ALL);
        let cases: Vec<&str> = config.cases.iter().map(Case::name).collect();
        assert_eq!(cases, DEFAULT_CASES);
        assert!(config.workloads.is_empty() && config.urgencies.is_empty());
        assert!(config.first_request.is_none());
        assert_eq!(schedule(&config, &plan).len(), 4 * 7 * 10);

        let config = config_with_cases("stock,scheduled");
        assert_eq!(config.pages.unwrap().pages, [Page::App]);
        assert_eq!(config.cases, [Case::Stock, Case::Scheduled]);
        // Priority runs have no page plan.
        assert!(config_default().pages.is_none());
    }

    fn config_with_cases(cases: &str) -> LabConfig {
        config(&["--workloads", "page-app", "--cases", cases, "--seed", "3"]).unwrap()
    }

    fn config_default() -> LabConfig {
        config(&[]).unwrap()
    }

    #[test]
    fn page_workloads_refuse_other_workloads_and_external_servers() {
        for (mix, named) in [
            ("page-app,late", "late"),
            ("alone,page-busy", "alone"),
            ("page-article,first-request", "first-request"),
        ] {
            let err = config(&["--workloads", mix]).unwrap_err().to_string();
            assert!(err.contains("run on their own"), "{err}");
            assert!(err.contains(&format!("`{named}`")), "{err}");
        }
        let err = config(&[
            "--workloads",
            "page-app",
            "--cases",
            "stock,mine@127.0.0.1:8443",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("cannot measure `mine`"), "{err}");
        for flags in [
            &["--workloads", "page-app", "--explain"][..],
            &[
                "--workloads",
                "page-app",
                "--link",
                "tun",
                "--trace",
                "/tmp/t",
            ],
            &["--workloads", "page-app", "--cross", "1"],
        ] {
            assert!(config(flags).is_err(), "{flags:?}");
        }
        let tun = config(&["--workloads", "page-app", "--link", "tun", "--cross", "1"]).unwrap();
        assert_eq!(tun.tun.cross_flows, 1);
        let err = LabArgs::try_parse_from(["lab", "--workloads", "page-nope"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("page-article, page-app, page-busy, page-demo"),
            "{err}"
        );
    }

    #[test]
    fn the_order_is_random_within_each_repeat_and_fixed_by_the_seed() {
        let config = config(&["--workloads", "page-app,page-article", "--repeats", "4"]).unwrap();
        let plan = config.pages.clone().unwrap();
        let runs = schedule(&config, &plan);
        assert_eq!(runs, schedule(&config, &plan));
        for repeat in 0..4 {
            let cells = runs.iter().filter(|(r, _, _)| *r == repeat).count();
            assert_eq!(cells, 14);
        }
        let in_order: Vec<(Case, Page)> = plan
            .pages
            .iter()
            .flat_map(|&p| config.cases.iter().map(move |c| (c.clone(), p)))
            .collect();
        let first: Vec<(Case, Page)> = runs[..14].iter().map(|(_, c, p)| (c.clone(), *p)).collect();
        assert_ne!(first, in_order);
    }
}
