//! What one page load measured ([`PageLoad`]) and the check that it loaded the whole page
//! ([`PageLoad::check`]).
//!
//! Invariants: times are milliseconds from the start of the measured document's
//! navigation (the page's `performance.timeOrigin`); a load keeps every error the page,
//! the DevTools events or the requests reported; checking never panics on what the browser
//! sent, it lists the problems.

use serde::{Deserialize, Serialize};

use super::html::{ARTICLE_ENTRY, BUSY_DOWNLOAD};
use super::site::{Page, Site};
use crate::BoxError;

/// The HTTP/2 ALPN protocol id, as Resource Timing's `nextHopProtocol` and CDP's
/// `response.protocol` spell it.
pub const H2: &str = "h2";

/// One resource the page received, as the page's instrumentation read and hashed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedResource {
    /// URL path.
    pub path: String,
    /// Length of the body in bytes.
    pub len: u64,
    /// SHA-256 of the body, lowercase hex.
    pub sha256: String,
    /// Resource Timing's `nextHopProtocol` of its load (`h2` over HTTP/2).
    pub protocol: String,
}

/// One request of the page as Chromium reported it over the DevTools protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestSeen {
    /// URL path (no query).
    pub path: String,
    /// CDP's resource type (`Document`, `Stylesheet`, `Image`, `Script`, `Font`, `Fetch`).
    pub resource_type: String,
    /// Chromium's own priority for it when it was issued (`VeryHigh` ... `VeryLow`).
    pub initial_priority: String,
    /// The `priority` request header Chromium sent (RFC 9218), `None` when it sent none.
    pub priority: Option<String>,
    /// The response's protocol (`h2`), `None` without a response.
    pub protocol: Option<String>,
    /// Chromium's id of the connection the response came on.
    pub connection_id: Option<u64>,
    /// The response's status.
    pub status: Option<u16>,
    /// Whether it was answered from the cache (the instrumentation's read-backs are).
    pub from_cache: bool,
    /// Why it failed, if it did.
    pub failure: Option<String>,
}

/// One resource's first load as the page's Resource Timing saw it (milliseconds from the
/// navigation's start): where a slow load's time went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceTiming {
    /// URL path.
    pub path: String,
    /// `startTime`: when the page asked for it.
    pub start_ms: f64,
    /// `requestStart`: when the request was sent (after queueing in the browser).
    pub request_ms: f64,
    /// `responseStart`: its first response byte.
    pub first_byte_ms: f64,
    /// `responseEnd`: its last byte.
    pub end_ms: f64,
}

/// The report the instrumentation publishes as `window.__lab` (see `instrument.js`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct LabReport {
    pub(crate) done: bool,
    pub(crate) fcp_ms: Option<f64>,
    pub(crate) lcp_ms: Option<f64>,
    pub(crate) lcp_url: Option<String>,
    pub(crate) dcl_ms: Option<f64>,
    pub(crate) load_ms: Option<f64>,
    pub(crate) css_end_ms: Option<f64>,
    pub(crate) hero_end_ms: Option<f64>,
    #[serde(default)]
    pub(crate) api_ms: Vec<f64>,
    #[serde(default)]
    pub(crate) bulk_end_ms: Option<f64>,
    #[serde(default)]
    pub(crate) timings: Vec<ResourceTiming>,
    #[serde(default)]
    pub(crate) resources: Vec<LoadedResource>,
    #[serde(default)]
    pub(crate) errors: Vec<String>,
}

/// One load of a page in a fresh headless Chromium: what a site owner reads. Times are
/// milliseconds from the start of the measured document's navigation.
#[derive(Debug, Clone, Serialize)]
pub struct PageLoad {
    /// The page loaded.
    pub page: Page,
    /// First Contentful Paint; `None` when Chromium reported none (an error too).
    pub fcp_ms: Option<f64>,
    /// Largest Contentful Paint (the last candidate); `None` when Chromium reported none.
    pub lcp_ms: Option<f64>,
    /// URL path of the LCP element's image; `None` when it was text (or no LCP).
    pub lcp_path: Option<String>,
    /// `DOMContentLoaded` (Navigation Timing's `domContentLoadedEventStart`).
    pub dcl_ms: f64,
    /// `load` (Navigation Timing's `loadEventStart`).
    pub load_ms: f64,
    /// `responseEnd` of the render-blocking stylesheet; `None` on a page without one.
    pub css_end_ms: Option<f64>,
    /// `responseEnd` of the hero image; `None` on a page without one.
    pub hero_end_ms: Option<f64>,
    /// Median over the API answers of `fetchStart` to `responseEnd` (the time the app
    /// waited for each, browser queueing included); `None` on a page without API calls.
    pub api_ms: Option<f64>,
    /// The same per API answer, in fetch order.
    pub api_answers_ms: Vec<f64>,
    /// The later `responseEnd` of the background downloads whose end the page measures
    /// (page-demo's two); `None` on the other pages.
    pub bulk_end_ms: Option<f64>,
    /// The measured document's Navigation Timing (its `requestStart` is when TCP and TLS
    /// were ready), then its resources' Resource Timing, in start order.
    pub timings: Vec<ResourceTiming>,
    /// Every resource received, with its length and hash (page-busy: both tabs').
    pub resources: Vec<LoadedResource>,
    /// Every request Chromium reported (page-busy: both tabs'), in issue order.
    pub requests: Vec<RequestSeen>,
    /// page-busy: whether the article's document came over the connection that carried
    /// the download (CDP connection ids); `None` for other pages or when either is unknown.
    pub shared_connection: Option<bool>,
    /// Everything that went wrong: failed or non-200 fetches, unreadable resources,
    /// missing timings, failed requests.
    pub errors: Vec<String>,
}

impl PageLoad {
    /// The load of `page` from the measured tab's `report` and the `requests` seen.
    /// `requests` also holds the DevTools events about them that did not parse.
    pub(crate) fn new(
        page: Page,
        report: LabReport,
        (requests, unparsed): (Vec<RequestSeen>, Vec<String>),
    ) -> Result<PageLoad, BoxError> {
        let (Some(dcl_ms), Some(load_ms)) = (report.dcl_ms, report.load_ms) else {
            return Err(format!(
                "{page}: the page's report has no DOMContentLoaded or load time; its errors: {:?}",
                report.errors
            )
            .into());
        };
        let mut errors = report.errors;
        errors.extend(unparsed);
        errors.extend(requests.iter().filter_map(request_error));
        Ok(PageLoad {
            page,
            fcp_ms: report.fcp_ms,
            lcp_ms: report.lcp_ms,
            lcp_path: report.lcp_url,
            dcl_ms,
            load_ms,
            css_end_ms: report.css_end_ms,
            hero_end_ms: report.hero_end_ms,
            api_ms: median(&report.api_ms),
            api_answers_ms: report.api_ms,
            bulk_end_ms: report.bulk_end_ms,
            timings: report.timings,
            resources: report.resources,
            requests,
            shared_connection: None,
            errors,
        })
    }

    /// Adds page-busy's first tab (the download's): its resources, requests and errors,
    /// and whether the two tabs shared the connection.
    pub(crate) fn add_download_tab(
        &mut self,
        report: LabReport,
        (requests, unparsed): (Vec<RequestSeen>, Vec<String>),
    ) {
        self.errors.extend(
            report
                .errors
                .into_iter()
                .chain(unparsed)
                .map(|e| format!("download tab: {e}")),
        );
        self.errors.extend(
            requests
                .iter()
                .filter_map(request_error)
                .map(|e| format!("download tab: {e}")),
        );
        self.resources.extend(report.resources);
        let download = network_connection(&requests, BUSY_DOWNLOAD);
        let article = network_connection(&self.requests, ARTICLE_ENTRY);
        self.shared_connection = download.zip(article).map(|(a, b)| a == b);
        self.requests.splice(0..0, requests);
    }

    /// Checks that the load fetched every file of `page` from `site` whole (length and
    /// SHA-256 as in the manifest) over HTTP/2, with no error and with paint timings (on
    /// the pages that measure them, [`Page::measures_paints`]), for page-busy over the
    /// download's connection, and for page-demo with the critical answer's time and the
    /// background's end; the problems, one a line, otherwise.
    pub fn check(&self, site: &Site) -> Result<(), String> {
        let mut problems: Vec<String> = self.errors.iter().map(|e| format!("error: {e}")).collect();
        if self.page.measures_paints() && (self.fcp_ms.is_none() || self.lcp_ms.is_none()) {
            problems.push("no FCP or LCP".to_owned());
        }
        if self.page == Page::Demo && (self.api_ms.is_none() || self.bulk_end_ms.is_none()) {
            problems.push("no critical answer time or background end".to_owned());
        }
        for file in site.files_of(self.page) {
            problems.extend(self.file_problem(&file.path, file.len, &file.sha256));
        }
        if self.page == Page::Busy && self.shared_connection != Some(true) {
            problems.push(format!(
                "the article did not share the download's connection ({:?})",
                self.shared_connection
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("{}:\n{}", self.page, problems.join("\n")))
        }
    }

    /// What is wrong with the load of the file at `path`, if anything.
    fn file_problem(&self, path: &str, len: u64, sha256: &str) -> Option<String> {
        let Some(resource) = self.resources.iter().find(|r| r.path == path) else {
            return Some(format!("{path}: not received"));
        };
        if resource.len != len || resource.sha256 != sha256 {
            return Some(format!(
                "{path}: received {} bytes with SHA-256 {}, the site has {len} bytes with {sha256}",
                resource.len, resource.sha256
            ));
        }
        if resource.protocol != H2 {
            return Some(format!("{path}: loaded over {:?}", resource.protocol));
        }
        let over_network = self
            .requests
            .iter()
            .find(|r| r.path == path && !r.from_cache);
        match over_network.and_then(|r| r.protocol.as_deref()) {
            Some(H2) => None,
            other => Some(format!("{path}: Chromium reported protocol {other:?}")),
        }
    }

    /// The requests that went to the network (not the instrumentation's read-backs).
    pub fn network_requests(&self) -> impl Iterator<Item = &RequestSeen> {
        self.requests.iter().filter(|r| !r.from_cache)
    }
}

/// The connection id of the network request for `path`.
fn network_connection(requests: &[RequestSeen], path: &str) -> Option<u64> {
    requests
        .iter()
        .find(|r| r.path == path && !r.from_cache)
        .and_then(|r| r.connection_id)
}

/// An error for a request that failed or was answered with a status other than 200.
fn request_error(request: &RequestSeen) -> Option<String> {
    if let Some(failure) = &request.failure {
        return Some(format!("request for {} failed: {failure}", request.path));
    }
    match request.status {
        Some(200) | None => None,
        Some(status) => Some(format!("request for {}: status {status}", request.path)),
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` for none.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[mid]),
        _ => Some((sorted[mid - 1] + sorted[mid]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn report_without_load_time_is_an_error_naming_the_page_errors() {
        let report: LabReport =
            serde_json::from_str(r#"{"done": true, "errors": ["instrumentation: boom"]}"#).unwrap();
        let err = PageLoad::new(Page::Article, report, (Vec::new(), Vec::new())).unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }
}
