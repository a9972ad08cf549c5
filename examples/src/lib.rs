//! Shared pieces of the example servers (`--example axum` and `--example hyper`).
//!
//! Both servers expose the same routes and the same command line; only the routing differs
//! (axum's `Router` against a hand-written tower service). Everything else lives here:
//!
//! - [`cli`]: the command line ([`Args`]; `--policy` is `stock` or a [`tls_flush::Policy`]);
//! - [`tls`]: the rustls server configuration (ring provider, ALPN `h2` + `http/1.1`,
//!   a generated self-signed certificate unless `--cert/--key` are given);
//! - [`body`]: the deterministic body pattern and its lazy streaming body ([`PatternBody`]);
//! - [`responses`]: the routes' constants and response builders, shared by both servers;
//! - [`server`]: the accept loop ([`serve`], [`run`]) with TLS per connection, HTTP/1.1 and
//!   HTTP/2 through `hyper_util`'s auto builder, and graceful shutdown on SIGINT/SIGTERM;
//! - [`logging`]: `tracing` to stderr, so stdout's first line stays clean;
//! - [`axum_app`] and [`hyper_app`]: the demo app as an axum `Router` and as a plain
//!   tower service, used by the example binaries and by the integration tests.
//!
//! The examples `axum_serve`, `axum_server` and `hyper_loop` show the wrapper in the three
//! usual ways of serving axum over rustls (`axum::serve` with `tls_flush::FlushListener`,
//! axum-server with `tls_flush::FlushAcceptor`, a hand-written hyper-util loop); they add
//! `GET /stats` ([`responses::stats_response`]: the connection's counters) to the routes.

#![warn(missing_docs)]

pub mod axum_app;
pub mod body;
pub mod cli;
pub mod hyper_app;
pub mod logging;
pub mod responses;
pub mod server;
pub mod tls;

pub use body::{pattern_byte, PatternBody, CHUNK_SIZE};
pub use cli::Args;
pub use server::{
    bind, exit_code, flush_config, run, serve, serve_with_shutdown, Bound, ShutdownSignal,
};

/// The boxed error type used across the example servers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The workspace README's code blocks, compiled as doctests so they stay in sync.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
