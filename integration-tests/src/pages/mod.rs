//! The browser lab's measuring half: generated web pages ([`generate_site`]) and a driver
//! that loads one in a fresh headless Chromium over the DevTools protocol ([`load_page`])
//! and reports what a site owner reads: First and Largest Contentful Paint,
//! `DOMContentLoaded`, `load`, and per-resource timings ([`PageLoad`]).
//!
//! The pages ([`Page`]) are static files, served by any static file server from the site
//! directory: page-article (text, a render-blocking stylesheet, a web font, a hero image
//! that is the LCP element, images below the fold, async scripts, and a bulk video fetch
//! sharing the connection), page-app (a large script, large images, and small API answers
//! that are the critical responses), page-busy (the article loaded while the same
//! HTTP/2 connection carries a 20 MiB download started by another tab), and page-demo (the
//! example server's demo page: two 1 MiB background downloads and one 4 KiB critical
//! answer fetched at once; measured by the critical answer's time and the background's
//! end, without paint timings).
//!
//! A load measures one cold page view: a new browser with an empty profile (no cache, no
//! connection), the page's document navigated to, and the in-page instrumentation
//! (`instrument.js`, inlined at the top of every document) timing the paints, the
//! navigation and the resources; the driver records every request Chromium made, with the
//! `priority` header it actually sent.
//!
//! Invariants:
//! - every file's bytes are a pure function of its path: every server serves the same
//!   bytes, and [`PageLoad::check`] compares what the page received (length and SHA-256 of
//!   every resource, hashed in the page) with the manifest ([`Site`]);
//! - the page never loses its report: failures land in [`PageLoad::errors`];
//! - a load never waits past its timeout and always kills its browser.

mod chromium;
mod content;
mod devtools;
mod html;
mod load;
mod network;
mod png;
mod report;
mod runner;
mod site;

pub use chromium::{chromium_version, BROWSER_NICENESS, CHROMIUM};
pub use load::{load_page, LoadOptions};
pub use report::{LoadedResource, PageLoad, RequestSeen, ResourceTiming, H2};
pub use runner::{page_timeout, run_page_relay, run_page_tun, PageRun};
pub use site::{generate_site, Page, Site, SiteFile, BUSY_HEAD_START};
