//! The browser lab's pages in headless Chromium, from our server stock and wrapped
//! (`scheduled`), on loopback: each page loads completely (every file of the site it
//! should fetch arrives whole, over HTTP/2, with no error, with paint timings where the
//! page measures them), the article's hero image is its Largest Contentful Paint,
//! page-busy's article shares the download's connection, page-demo times its critical
//! answer and its background's end, and the `priority` header the driver reports for each
//! request (from the DevTools protocol) is the one the server received.
//!
//! The report goes to stderr (it shows in `cargo test` output even when the test passes):
//! the `priority` request headers Chromium sent per resource (once), and each load's FCP,
//! LCP, DOMContentLoaded, load, API times and page-demo's background end.
//!
//! Needs Debian's `chromium` on `PATH` (`scripts/install-test-tools.sh` installs it): the
//! test fails without it rather than skipping.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use integration_tests::pages::{
    chromium_version, generate_site, load_page, LoadOptions, Page, PageLoad, Site,
};
use integration_tests::server::ServerSetup;
use integration_tests::TestServer;
use tower::util::MapRequestLayer;

/// Bound of one page load on loopback, browser start included (a load takes 1 to 3 s).
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// A generated site in a fresh temporary directory, removed when dropped.
struct TempSite {
    site: Site,
}

impl TempSite {
    fn generate() -> TempSite {
        let dir: PathBuf =
            std::env::temp_dir().join(format!("pages-test-site-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let site = generate_site(&dir).unwrap_or_else(|e| panic!("generating the site: {e}"));
        TempSite { site }
    }
}

impl Drop for TempSite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.site.dir);
    }
}

/// The `priority` header of every request the server received, in order: (path, value).
type Received = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// The site as a user of our server serves it ([`integration_tests::site_server::site_router`]);
/// outermost, a layer that records each request's `priority` header in `received`.
fn site_router(site: &Site, received: Received) -> Router {
    integration_tests::site_server::site_router(&site.dir).layer(MapRequestLayer::new(
        move |request: Request| {
            let priority = request
                .headers()
                .get("priority")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let path = request.uri().path().to_owned();
            received.lock().unwrap().push((path, priority));
            request
        },
    ))
}

/// Asserts that the driver reported every request the server received, each with the
/// `priority` header the server received.
fn assert_headers_reached_the_server(setup: &str, load: &PageLoad, received: &Received) {
    let received = std::mem::take(&mut *received.lock().unwrap());
    for (path, _) in &received {
        assert!(
            load.network_requests().any(|r| r.path == *path),
            "{setup} {}: the server received a request for {path} the driver did not report",
            load.page
        );
    }
    for request in load.network_requests() {
        let at_server: Vec<_> = received
            .iter()
            .filter(|(p, _)| *p == request.path)
            .collect();
        assert_eq!(
            at_server.len(),
            1,
            "{setup} {}: {} requests for {} at the server",
            load.page,
            at_server.len(),
            request.path
        );
        assert_eq!(
            at_server[0].1, request.priority,
            "{setup} {} {}: the server received another priority header than CDP reported",
            load.page, request.path
        );
    }
}

/// Loads `page` from `server` on a blocking thread (the driver owns its thread).
async fn load(server: &TestServer, page: Page) -> PageLoad {
    let options = LoadOptions {
        timeout: LOAD_TIMEOUT,
        trusted_certificates: vec![server.certificate.clone()],
        ..LoadOptions::default()
    };
    let origin = format!("https://127.0.0.1:{}", server.addr.port());
    tokio::task::spawn_blocking(move || load_page(&options, page, &origin))
        .await
        .expect("the load's thread")
        .unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// One line of figures for a load.
fn figures(setup: &str, load: &PageLoad) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
    format!(
        "  {setup:<9} {:<12} fcp {:>5} lcp {:>5} ({}) dcl {:>5.0} load {:>5.0} css {:>5} hero {:>5} api {:>5} bulk-end {:>5} shared-connection {:?}\n",
        load.page.name(),
        ms(load.fcp_ms),
        ms(load.lcp_ms),
        load.lcp_path.as_deref().unwrap_or("text"),
        load.dcl_ms,
        load.load_ms,
        ms(load.css_end_ms),
        ms(load.hero_end_ms),
        ms(load.api_ms),
        ms(load.bulk_end_ms),
        load.shared_connection,
    )
}

/// The `priority` header Chromium sent for each request of `load` that went to the
/// network, with its resource type and Chromium's own priority.
fn priority_headers(load: &PageLoad) -> String {
    let mut out = String::new();
    for request in load.network_requests() {
        let _ = writeln!(
            out,
            "  {:<12} {:<24} {:<10} {:<8} priority={}",
            load.page.name(),
            request.path,
            request.resource_type,
            request.initial_priority,
            request.priority.as_deref().unwrap_or("(none)"),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_loads_every_page_from_stock_and_scheduled() {
    let started = Instant::now();
    let version = chromium_version().unwrap_or_else(|e| panic!("{e}"));
    let site = TempSite::generate();
    let setups = [
        ("stock", ServerSetup::default()),
        (
            "scheduled",
            ServerSetup::with_policy(tls_flush::Policy::Scheduled),
        ),
    ];
    let mut report = format!("{version}: the lab's pages on loopback\n");
    let mut headers = String::new();
    for (name, setup) in setups {
        let received = Received::default();
        let server = TestServer::start(setup, site_router(&site.site, received.clone()))
            .await
            .unwrap_or_else(|e| panic!("starting the {name} server: {e}"));
        for page in Page::ALL {
            let load = load(&server, page).await;
            report.push_str(&figures(name, &load));
            if name == "stock" {
                headers.push_str(&priority_headers(&load));
            }
            load.check(&site.site)
                .unwrap_or_else(|problems| panic!("{name} {problems}\n{report}{headers}"));
            if matches!(page, Page::Article | Page::Busy) {
                assert_eq!(
                    load.lcp_path.as_deref(),
                    Some("/article/hero.png"),
                    "{name} {page}: the hero is not the LCP element"
                );
            }
            if page == Page::Demo {
                // One critical answer timed, the background's end, no paint timings.
                assert_eq!(load.api_answers_ms.len(), 1, "{name} {page}");
                let bulk_end = load.bulk_end_ms.unwrap_or_default();
                assert!(bulk_end > 0.0, "{name} {page}: bulk end {bulk_end}");
                assert!(
                    load.fcp_ms.is_none() && load.lcp_ms.is_none(),
                    "{name} {page}"
                );
            }
            assert_headers_reached_the_server(name, &load, &received);
        }
    }
    let _ = write!(
        report,
        "priority request headers (path, CDP type, Chromium's priority, header):\n{headers}\
         took {:.1} s\n",
        started.elapsed().as_secs_f64()
    );
    // Straight to the process's stderr: these values are the point of the test.
    let _ = std::io::stderr().lock().write_all(report.as_bytes());
}
