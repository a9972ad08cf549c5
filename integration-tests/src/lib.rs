//! The measuring harness: an HTTP/2 client over rustls with taps under TLS (records) and
//! above TLS (frames), body verification, and in-process servers under test.
//!
//! The link emulator, the workloads and the `lab` binary come with their own issue.
#![deny(missing_docs)]

pub mod client;
pub mod server;
pub mod tap;

pub use client::{ClientOptions, PendingResponse, Response, TapClient, Trust};
pub use server::TestServer;
pub use tap::{FrameEvent, Injector, ReadGate, RecordEvent, TapLog};
