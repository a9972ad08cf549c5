//! The measuring harness: an HTTP/2 client over rustls with taps under TLS (records) and
//! above TLS (frames), body verification, and in-process servers under test.
//!
//! [`link`] emulates a slow path, [`workload`] runs the seed workloads, and [`lab`] measures
//! cases side by side (the `lab` binary).
#![deny(missing_docs)]

pub mod attack;
pub mod client;
pub mod lab;
pub mod link;
pub mod peers;
pub mod server;
pub mod tap;
pub mod tun;
pub mod workload;

pub use client::{ClientOptions, PendingResponse, Response, TapClient, Trust};
pub use server::TestServer;
pub use tap::{FrameEvent, Injector, ReadGate, RecordEvent, TapLog};

/// The boxed error type of the harness's fallible functions.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
