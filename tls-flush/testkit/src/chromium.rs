//! Headless Chromium's command line, shared by the browser test of the examples
//! (`examples/tests/browser.rs`) and the lab's page loads (`integration-tests`), so that
//! both browsers run alike.

/// The flags every test browser runs with, besides its headless mode and what it is driven
/// by: no sandbox (the tests and the lab may run as root), no GPU, no QUIC (our servers
/// speak TCP only), none of the browser's own background traffic (first-run pages,
/// component updates, sync), and certificates not checked (the servers' are self-signed).
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--ignore-certificate-errors",
];
