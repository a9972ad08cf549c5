//! One page load: a fresh browser and profile (cold cache, no connection), the page
//! navigated in a tab whose requests are recorded, then the instrumentation's report read
//! once the page says it is done.
//!
//! Invariants: [`load_page`] runs on a thread of its own (which may enter a network
//! namespace) with a current-thread runtime; every wait is bounded by the load's timeout,
//! and a timeout is an error naming what was missing; the browser is killed and its
//! profile removed before `load_page` returns, whatever happened.

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::network::DisableParams as NetworkDisableParams;
use chromiumoxide::cdp::browser_protocol::page::NavigateParams;
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::{Browser, Page as Tab};
use rustls::pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::chromium::{Chromium, Launch};
use super::html::BUSY_DOWNLOAD;
use super::network::{NetworkLog, WatchedTab};
use super::report::{LabReport, PageLoad, RequestSeen};
use super::site::{Page, BUSY_HEAD_START};
use crate::BoxError;

/// How often the driver asks the page whether it is done: often enough not to add to the
/// measured times (which the page takes itself), rarely enough to cost nothing.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A load's default time limit, browser start included: generous for a 20 MiB page-busy
/// download over a slow emulated link.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The expression that is true once the instrumentation published its report.
const DONE: &str = "!!(window.__lab && window.__lab.done)";

/// The expression that gives the report as JSON.
const REPORT: &str = "JSON.stringify(window.__lab)";

/// How to load a page.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Run the browser (and this load's DevTools session) inside the network namespace of
    /// this name (as made by `ip netns add`); `None`: the caller's.
    pub namespace: Option<String>,
    /// Time limit of the whole load, from the browser's start to the report.
    pub timeout: Duration,
    /// Certificates of the servers, which the browser then treats as valid: without it,
    /// Chromium loads the pages (certificate errors are ignored) but caches nothing, and
    /// the instrumentation cannot read resources back from its cache.
    pub trusted_certificates: Vec<CertificateDer<'static>>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            namespace: None,
            timeout: DEFAULT_TIMEOUT,
            trusted_certificates: Vec::new(),
        }
    }
}

/// Loads `page` from `origin` (e.g. `https://10.0.0.1:4433`) in a fresh headless Chromium
/// and returns what it measured; blocks until done (on its own thread and runtime).
/// `Err` when the load could not be measured at all (no browser, no report, timeout);
/// problems of the page itself are in [`PageLoad::errors`].
pub fn load_page(options: &LoadOptions, page: Page, origin: &str) -> Result<PageLoad, BoxError> {
    let options = options.clone();
    let origin = origin.trim_end_matches('/').to_owned();
    let thread = std::thread::Builder::new()
        .name(format!("lab-{page}"))
        .spawn(move || -> Result<PageLoad, BoxError> {
            if let Some(name) = &options.namespace {
                crate::tun::enter_namespace(name)?;
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(load(&options, page, &origin))
        })?;
    thread
        .join()
        .map_err(|_| format!("{page}: the page load's thread panicked"))?
}

/// The load on the current runtime: browser up, page measured, browser down.
async fn load(options: &LoadOptions, page: Page, origin: &str) -> Result<PageLoad, BoxError> {
    let deadline = Deadline::after(options.timeout);
    let launch = Launch {
        namespace: options.namespace.clone(),
        ..Launch::default()
    }
    .trusting(&options.trusted_certificates)?;
    let chromium = Chromium::launch(&launch, deadline.at).await?;
    let measured = measure_in(chromium.browser(), page, origin, &deadline).await;
    chromium.shutdown().await;
    measured.map_err(|e| format!("{page} from {origin}: {e}").into())
}

/// The measurement in a running `browser`, with a network log of its own.
async fn measure_in(
    browser: &Browser,
    page: Page,
    origin: &str,
    deadline: &Deadline,
) -> Result<PageLoad, BoxError> {
    let connecting = NetworkLog::connect(browser.websocket_address());
    let network = deadline
        .bound("the network log's DevTools connection", connecting)
        .await?;
    let session = Session {
        browser,
        network: &network,
        origin,
        deadline,
    };
    match page {
        Page::Busy => session.measure_busy().await,
        Page::Article | Page::App | Page::Demo => session.measure(page).await,
    }
}

/// What a measurement works with.
struct Session<'a> {
    browser: &'a Browser,
    network: &'a NetworkLog,
    origin: &'a str,
    deadline: &'a Deadline,
}

impl Session<'_> {
    /// page-article, page-app and page-demo: one tab.
    async fn measure(&self, page: Page) -> Result<PageLoad, BoxError> {
        let tab = self.open_tab().await?;
        self.navigate(&tab, page.measured()).await?;
        let report = tab.report(self.deadline).await?;
        PageLoad::new(page, report, self.requests(&tab).await)
    }

    /// page-busy: the download's page in a first tab; once [`BUSY_HEAD_START`] of the
    /// download arrived, the article in a second tab of the same browser (same profile, so
    /// the same HTTP/2 connection), measured; then the first tab's report.
    async fn measure_busy(&self) -> Result<PageLoad, BoxError> {
        let download = self.open_tab().await?;
        self.navigate(&download, Page::Busy.entry()).await?;
        let what = format!("{BUSY_HEAD_START} bytes of {BUSY_DOWNLOAD} in the first tab");
        download
            .wait_until(&head_start(), &what, self.deadline)
            .await?;

        let article = self.open_tab().await?;
        self.navigate(&article, Page::Busy.measured()).await?;
        let report = article.report(self.deadline).await?;
        let download_report = download.report(self.deadline).await?;
        let mut load = PageLoad::new(Page::Busy, report, self.requests(&article).await)?;
        load.add_download_tab(download_report, self.requests(&download).await);
        Ok(load)
    }

    /// A new blank tab in the browser's default context, watched by the network log.
    async fn open_tab(&self) -> Result<BrowserTab, BoxError> {
        let deadline = self.deadline;
        let tab = deadline
            .bound("a new tab", self.browser.new_page("about:blank"))
            .await?;
        // The log's own session records the tab's requests; chromiumoxide's would only
        // receive the same events again (and fail to parse some).
        let disable = tab.execute(NetworkDisableParams::default());
        deadline
            .bound("disabling chromiumoxide's network events", disable)
            .await?;
        let target = tab.target_id().inner().clone();
        let watched = deadline
            .bound("watching the tab's requests", self.network.watch(&target))
            .await?;
        Ok(BrowserTab { tab, watched })
    }

    async fn navigate(&self, tab: &BrowserTab, path: &str) -> Result<(), BoxError> {
        tab.navigate(&format!("{}{path}", self.origin), self.deadline)
            .await
    }

    /// `tab`'s requests, once their last events arrived, and the DevTools events about
    /// them that did not parse (errors of the load).
    async fn requests(&self, tab: &BrowserTab) -> (Vec<RequestSeen>, Vec<String>) {
        self.network.settle(&tab.watched, self.deadline.at).await;
        self.network.requests(&tab.watched)
    }
}

/// The expression that is true once [`BUSY_HEAD_START`] bytes of the download arrived (or
/// the page is done, e.g. because the download failed).
fn head_start() -> String {
    format!(
        "(() => {{ const page = window.__labPage; \
         const received = page ? page.progress[{BUSY_DOWNLOAD:?}] || 0 : 0; \
         return received >= {BUSY_HEAD_START} || {DONE}; }})()"
    )
}

/// The load's deadline and the timeout it came from (for error messages).
struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    fn after(timeout: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + timeout,
            timeout,
        }
    }

    /// `future`'s output, or an error naming `what` was missing at the deadline.
    async fn bound<T, E>(
        &self,
        what: &str,
        future: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, BoxError>
    where
        E: Into<BoxError>,
    {
        match tokio::time::timeout_at(self.at, future).await {
            Ok(result) => result.map_err(|e| format!("{what}: {}", e.into()).into()),
            Err(_) => Err(self.expired(what)),
        }
    }

    fn expired(&self, what: &str) -> BoxError {
        format!("timed out after {:?} waiting for {what}", self.timeout).into()
    }
}

/// A tab and its session on the network log.
struct BrowserTab {
    tab: Tab,
    watched: WatchedTab,
}

impl BrowserTab {
    /// Navigates to `url`; returns once the navigation committed.
    async fn navigate(&self, url: &str, deadline: &Deadline) -> Result<(), BoxError> {
        let what = format!("navigating to {url}");
        let navigated = deadline
            .bound(&what, self.tab.execute(NavigateParams::new(url)))
            .await?;
        match &navigated.result.error_text {
            Some(error) => Err(format!("{what}: {error}").into()),
            None => Ok(()),
        }
    }

    /// The value of the JavaScript `expression` in the tab's page.
    async fn evaluate<T: DeserializeOwned>(
        &self,
        expression: &str,
        deadline: &Deadline,
    ) -> Result<T, BoxError> {
        let params = EvaluateParams::builder()
            .expression(expression)
            .return_by_value(true)
            .build()?;
        let evaluated = deadline
            .bound("evaluating in the page", self.tab.execute(params))
            .await?;
        if let Some(exception) = &evaluated.result.exception_details {
            return Err(format!("`{expression}` threw: {}", exception.text).into());
        }
        let value = evaluated.result.result.value.clone().unwrap_or_default();
        Ok(serde_json::from_value(value)?)
    }

    /// Polls `condition` every [`POLL_INTERVAL`] until it is true; `what` names it in the
    /// error at the deadline.
    async fn wait_until(
        &self,
        condition: &str,
        what: &str,
        deadline: &Deadline,
    ) -> Result<(), BoxError> {
        let waiting = |e| format!("waiting for {what}: {e}");
        while !self
            .evaluate::<bool>(condition, deadline)
            .await
            .map_err(waiting)?
        {
            if Instant::now() + POLL_INTERVAL >= deadline.at {
                return Err(deadline.expired(what));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        Ok(())
    }

    /// The instrumentation's report, once the page published it.
    async fn report(&self, deadline: &Deadline) -> Result<LabReport, BoxError> {
        self.wait_until(DONE, "the page's report (window.__lab.done)", deadline)
            .await?;
        let json: String = self.evaluate(REPORT, deadline).await?;
        let report: LabReport = serde_json::from_str(&json)
            .map_err(|e| format!("the page's report does not parse ({e}): {json}"))?;
        if !report.done {
            return Err(format!("the page's report is not done: {json}").into());
        }
        Ok(report)
    }
}
