//! Test support for `tls-flush`, shared by its tests (`tests/pipeline_props.rs`,
//! `tests/pipeline_cases/`, `tests/fuzz_regressions.rs`, the tests on real sockets), its
//! benchmarks and the
//! cargo-fuzz targets in `fuzz/` (which depend on this crate by path), so that the fuzzers,
//! the property tests and the corpus replay in CI run exactly the same machinery and checks.
//! Not published.
//!
//! Without features it depends only on `std`, tokio's I/O traits and the public APIs of
//! `tls-flush` and `tower-priority`, so it builds on stable (the tests) and on nightly with
//! sanitizer flags (the fuzz crate) alike; the `h2-client` feature adds `h2` for the tests
//! that talk to real servers, and the `tls` feature rustls, tokio-rustls and rcgen for the
//! tests (and the benchmark) that set up TLS.
//!
//! | module | what it holds |
//! |---|---|
//! | [`frame`] | the HTTP/2 frame model, parsing, and frame builders |
//! | [`hpack`] | HPACK integers, literals and the request/response blocks the tests send |
//! | [`transport`] | the fault-injecting transport ([`FaultyTransport`], [`Wire`]) |
//! | [`sink`] | [`Sink`], a trivial transport for benchmarks (open or gated) |
//! | [`driver`] | [`Harness`], which polls a `FlushStream` by hand as an executor would |
//! | [`checks`] | the invariants checked on the recorded output and on the counters |
//! | [`observe`] | [`poll_read_observed`], a read that hands the new bytes to a callback |
//! | [`alloc`] | [`CountingAlloc`], a counting global allocator for the memory bounds |
//! | [`chromium`] | [`CHROMIUM_FLAGS`], the flags of the browser tests' headless Chromium |
//! | [`knobs`] | [`Knobs`], a write case's `FlushConfig` |
//! | [`input`] | [`Input`], the hand-written fuzz input decoder |
//! | [`cases`] | the building blocks of the deterministic pipeline cases |
//! | [`write_case`], [`frame_gen`] | the `write_pipeline` case and its decoder |
//! | [`write_run`] | writing as h2 does, flushing, shutting down, checking the delivery |
//! | [`read_case`] | the `read_observer` case and its decoder |
//! | [`observer_model`](mod@observer_model) | the reference model of the read observer's counters |
//! | [`read_run`] | running a `read_observer` case |
//! | [`parsers`] | the `priority_parse` and `priority_update_parse` targets |
//! | `h2_client` (feature `h2-client`) | an h2 test client's handshake, body readers and timeouts |
//! | `tls` (feature `tls`) | a fresh certificate, rustls configurations, a loopback listener, a client handshake |
//!
//! Entry points of the fuzz targets: [`run_write_pipeline`], [`run_read_observer`],
//! [`run_priority_parse`] and [`run_priority_update_parse`] return `Err(description)` when
//! an invariant is violated (the targets panic with it) and panic themselves only where the
//! wrapper panicked or livelocked.

pub mod alloc;
pub mod cases;
pub mod checks;
pub mod chromium;
pub mod driver;
pub mod frame;
pub mod frame_gen;
#[cfg(feature = "h2-client")]
pub mod h2_client;
pub mod hpack;
pub mod input;
pub mod knobs;
pub mod observe;
pub mod observer_model;
pub mod parsers;
pub mod read_case;
pub mod read_run;
pub mod sink;
#[cfg(feature = "tls")]
pub mod tls;
pub mod transport;
pub mod write_case;
pub mod write_run;

pub use alloc::CountingAlloc;
pub use cases::{
    absorb_frame, blocked_scheduled, comparable_preset, delivered, positions, started, took_all,
};
pub use checks::{
    check_control_not_overtaken, check_counters, check_first_settings_grew, check_header_blocks,
    check_header_blocks_to_end, check_in_order, check_settings_barriers, expected_frames,
    follows_header_grammar, inverted_data_frames, largest_header_unit, match_frames,
    merge_split_data, unfinished_block_at_end, CounterBounds, OutputEnd,
};
pub use chromium::CHROMIUM_FLAGS;
pub use driver::{Harness, Stream};
pub use frame::*;
pub use hpack::{hpack_int, hpack_string, literal, request_block, response_block};
pub use input::Input;
pub use knobs::Knobs;
pub use observe::poll_read_observed;
pub use observer_model::{observer_model, ObserverModel};
pub use parsers::{run_priority_parse, run_priority_update_parse};
pub use read_case::{decode_read_case, Preface, ReadCase, ServerWrite};
pub use read_run::{run_read_case, run_read_observer};
pub use sink::Sink;
pub use transport::{
    Buffering, Event, FaultyTransport, ReadPlan, SimulatedPath, Sizes, Step, Wire,
    SIZE_DOUBLING_CALLS,
};
pub use write_case::{decode_write_case, Shape, WriteCase};
pub use write_run::{
    check_delivery, check_ordering, finish, locate, run_write_case, run_write_pipeline, split,
    write_call, write_input, Finished, OrderChecks, WriteOp, Written,
};
