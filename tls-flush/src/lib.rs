//! Makes RFC 9218 HTTP priorities reach the wire for hyper and h2 servers over rustls.
//!
//! h2 round-robins DATA frames and ignores the `priority` header; once bytes are handed to
//! rustls and the kernel they can no longer be reordered. [`FlushStream`] sits between
//! hyper and the TLS stream and:
//!
//! - observes the client's frames on the way in (without changing them) to learn each
//!   stream's `priority` header and PRIORITY_UPDATE frames;
//! - absorbs h2's frames on the way out into bounded per-stream queues, learns what the
//!   server pinned in its `priority` response header (see `tower_priority::PriorityLayer`),
//!   and orders DATA by RFC 9218 §10 while keeping every ordering h2 relies on;
//! - writes full TLS records for bulk data, ends a record right after an urgent small DATA
//!   frame and flushes it at once, and keeps rustls and the kernel shallow so that priority
//!   still decides: `TCP_NOTSENT_LOWAT`, and each write sized from `TCP_INFO` to what TCP
//!   can send soon, with the bytes in flight kept near the path's bandwidth-delay product
//!   (see [`PathState`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use tls_flush::{FlushConfig, Policy};
//!
//! # async fn run(tls_config: Arc<rustls::ServerConfig>) -> std::io::Result<()> {
//! let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
//! let acceptor = tokio_rustls::TlsAcceptor::from(tls_config);
//! tls_flush::serve(listener, acceptor, FlushConfig::for_policy(Policy::Scheduled), app).await
//! # }
//! ```
#![deny(missing_docs)]

mod absorb;
#[cfg(any(feature = "serve", feature = "axum"))]
mod accept;
#[cfg(feature = "axum-server")]
mod acceptor;
mod anticipation;
#[cfg(feature = "serve")]
mod body_gate;
#[cfg(feature = "client")]
pub mod client;
mod clock;
mod config;
#[cfg(feature = "serve")]
mod early_data;
mod frame;
#[cfg(feature = "serve")]
mod half_rtt;
mod hpack;
#[cfg(feature = "axum")]
mod listener;
mod memory_budget;
#[cfg(feature = "metrics")]
pub mod metrics;
mod path;
mod priorities;
mod read_observer;
mod scheduler;
#[cfg(feature = "serve")]
mod serve;
mod socket;
mod stats;
mod stream;
#[cfg(test)]
mod test_io;
#[cfg(any(feature = "serve", feature = "axum", feature = "client"))]
mod timeout;
mod timer;
mod transport;
mod write_path;

#[cfg(feature = "axum-server")]
pub use acceptor::{FlushAcceptor, FlushAcceptorFuture};
#[cfg(all(feature = "axum-server", feature = "serve"))]
pub use acceptor::{HalfRttTlsAcceptor, HalfRttTlsFuture};
#[cfg(fuzzing)]
#[doc(hidden)]
pub use clock::fuzz_clock;
pub use config::{FlushConfig, Policy, RecordSizing, UnknownPolicy, UrgentCut, MAX_RECORD_PAYLOAD};
#[cfg(feature = "serve")]
pub use early_data::{
    EarlyData, EarlyDataStream, EarlyRequests, MarkEarly, TooEarly, TooEarlyFuture, TooEarlyLayer,
};
#[cfg(feature = "serve")]
pub use half_rtt::{
    EarlyDataMode, EarlyDataRefusal, HalfRttAcceptor, HalfRttStream, DEFAULT_MAX_EARLY_DATA_SIZE,
    SESSION_ENTRY_BYTES,
};
/// The HPACK decoder's internals, for `benches/hpack.rs` only (feature `bench-internals`).
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use hpack::bench as hpack_bench;
#[cfg(feature = "axum")]
pub use listener::{ConnectionInfo, FlushListener};
#[cfg(all(feature = "axum", feature = "serve"))]
pub use listener::{HalfRttMakeFuture, HalfRttMakeService};
pub use memory_budget::{MemoryBudget, BUDGET_FLOOR};
pub use path::{CongestionControl, PathState, MIN_PACED_RTT};
#[cfg(feature = "serve")]
pub use serve::{
    serve, serve_connection, serve_half_rtt_connection, HttpService, Serve, StreamTasks,
    H2_MAX_CONCURRENT_STREAMS,
};
pub use stats::{ConnectionStats, RequestArrival, StatsSnapshot};
pub use stream::FlushStream;
pub use transport::Transport;

/// The crate README's code block, compiled as a doctest so it stays in sync.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
