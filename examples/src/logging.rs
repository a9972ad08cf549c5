//! `tracing` output for the example servers: to stderr, filtered by `RUST_LOG`
//! (default `info`), so that stdout carries only the `listening on ...` line.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs a `tracing` subscriber writing to stderr with an env filter (`RUST_LOG`,
/// default `info`). Does nothing if a global subscriber is already set.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
