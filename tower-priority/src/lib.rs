//! [RFC 9218] Extensible Prioritization Scheme for HTTP: the [`Priority`] type, lenient
//! parsing of the `priority` header field and of HTTP/2 `PRIORITY_UPDATE` payloads, and a
//! [tower] layer, [`PriorityLayer`], that applies per-route server policies.
//!
//! # Parsing client signals
//!
//! ```
//! use tower_priority::Priority;
//!
//! let p = Priority::parse("u=5, i");
//! assert_eq!(p, Priority { urgency: 5, incremental: true });
//! assert_eq!(p.to_string(), "u=5, i");
//!
//! // Malformed input never fails: RFC 9218 §4 says to fall back to the defaults.
//! assert_eq!(Priority::parse("u=9, ;;"), Priority::default());
//! ```
//!
//! # Server policy in axum
//!
//! ```
//! use axum::{routing::get, Extension, Router};
//! use tower_priority::{Priority, PriorityLayer};
//!
//! async fn critical(Extension(p): Extension<Priority>) -> String {
//!     format!("served at {p}")
//! }
//!
//! let app: Router = Router::new()
//!     // This route is always urgent: the response carries `priority: u=0`.
//!     .route("/critical", get(critical).layer(PriorityLayer::new().urgency(0)))
//!     // Everything follows the client's signals, kept within u=1..=7.
//!     .layer(PriorityLayer::new().clamp_urgency(1, 7));
//! ```
//!
//! [RFC 9218]: https://www.rfc-editor.org/rfc/rfc9218
//! [tower]: https://docs.rs/tower
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod future;
mod layer;
mod params;
mod policy;
mod priority;
mod service;
mod update;

pub use future::ResponseFuture;
pub use layer::PriorityLayer;
pub use params::{PriorityParams, URGENCY_RANGE_MEMBER};
pub use priority::Priority;
pub use service::PriorityService;
pub use update::{PriorityUpdate, PriorityUpdateError};

// Keeps the README's examples compiling and passing.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
