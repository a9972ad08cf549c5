//! The measuring harness: an HTTP/2 client over rustls with taps under TLS (records) and
//! above TLS (frames), body verification, and in-process servers under test.
//!
//! [`link`] emulates a slow path on loopback and [`tun`] a kernel-faithful one between two
//! network namespaces (root only); [`peers`] starts real servers (nginx, nghttpd, h2o,
//! Apache) serving the same fixture; [`workload`] runs the experiment (two 1 MiB background
//! downloads and a 4 KiB critical response on one HTTP/2 connection) against any of them
//! and measures it. The `lab` binary (`src/bin/lab/`) runs every case side by side and
//! prints the tables.
#![deny(missing_docs)]

pub mod attack;
pub mod client;
pub mod first_request;
pub mod link;
pub mod pages;
pub mod peers;
pub mod server;
pub mod site_server;
pub mod tap;
pub mod tun;
pub mod workload;

pub use client::{ClientOptions, PendingResponse, Response, TapClient, Trust};
pub use server::TestServer;
pub use tap::{FrameEvent, Injector, ReadGate, RecordEvent, TapLog};

/// The boxed error type of the harness's fallible functions.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
