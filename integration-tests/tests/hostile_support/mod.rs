//! What `hostile_bounds_memory.rs` and `hostile_bounds_scheduling.rs` share: a live-heap
//! counting allocator (each test binary declares it with `#[global_allocator]`; it is not
//! in `support`, whose other users have allocators of their own), and the servers the tests
//! start.
//!
//! Each of those files says `mod support; mod hostile_support;`. Neither uses every item,
//! hence `allow(dead_code)`.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http_body_util::Full;
use integration_tests::server::ServerSetup;
use integration_tests::TestServer;
use tls_flush::{ConnectionStats, FlushConfig, Policy, StatsSnapshot};
use tower_priority::PriorityLayer;

use crate::support::{alive_tasks, wait_for};

/// How long anything may take to settle before a test fails.
pub const SETTLE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Live heap: bytes allocated and not freed, and the peak since the last reset.
// ---------------------------------------------------------------------------------------

pub struct PeakAllocator;

pub static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes as u64, Relaxed) + bytes as u64;
    PEAK.fetch_max(live, Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes as u64, Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only
// observe sizes.
unsafe impl GlobalAlloc for PeakAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }
}

/// Starts a measurement: the peak restarts from the live heap now, which is returned.
pub fn reset_peak() -> u64 {
    let live = LIVE.load(Relaxed);
    PEAK.store(live, Relaxed);
    live
}

/// How far the live heap rose above `base` since [`reset_peak`] returned it.
pub fn peak_growth(base: u64) -> u64 {
    PEAK.load(Relaxed).saturating_sub(base)
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

// ---------------------------------------------------------------------------------------
// Servers.
// ---------------------------------------------------------------------------------------

pub fn stock() -> ServerSetup {
    ServerSetup::default()
}

pub fn wrapped(policy: Policy) -> ServerSetup {
    ServerSetup::with_policy(policy)
}

pub fn configured(config: FlushConfig) -> ServerSetup {
    ServerSetup {
        policy: Some(config.policy()),
        config: Some(config),
        ..ServerSetup::default()
    }
}

pub fn name(setup: &ServerSetup) -> &'static str {
    setup.policy.map_or("stock", Policy::name)
}

/// Starts `router` once the previous server's tasks are gone (so that their memory is
/// not freed in the middle of a measurement).
pub async fn start(setup: ServerSetup, router: Router) -> TestServer {
    assert!(
        wait_for(SETTLE, || alive_tasks() == 0).await,
        "{} tasks left over from the previous server",
        alive_tasks()
    );
    TestServer::start(setup, router).await.expect("server")
}

pub fn snapshots(server: &TestServer) -> Vec<StatsSnapshot> {
    server
        .connection_stats()
        .iter()
        .map(ConnectionStats::snapshot)
        .collect()
}

pub fn latest(server: &TestServer) -> Option<StatsSnapshot> {
    server.connection_stats().last().map(|s| s.snapshot())
}

/// The demo app's routes the tests use, plus `/delay/{ms}` (the 4096-byte critical body
/// after `ms` milliseconds, `ms <= 10000`: a response slow to begin) and `/whole/{n}` (`n`
/// pattern bytes as one body chunk, so that h2 writes DATA frames as large as the client
/// allows; `/size/{n}` streams 16 KiB chunks and never makes h2 write a frame above that).
pub fn app() -> Router {
    use examples::responses::{pattern_response, size_response, BG_LEN, CRITICAL_LEN, MAX_SIZE};
    async fn delay(Path(ms): Path<u64>) -> Response {
        tokio::time::sleep(Duration::from_millis(ms.min(10_000))).await;
        pattern_response(CRITICAL_LEN).into_response()
    }
    async fn whole(Path(n): Path<u64>) -> Response {
        let n = n.min(MAX_SIZE) as usize;
        let mut res = http::Response::new(Full::new(integration_tests::attack::pattern_bytes(n)));
        res.headers_mut()
            .insert(http::header::CONTENT_LENGTH, n.into());
        res.into_response()
    }
    Router::new()
        .route(
            "/critical",
            get(|| async { pattern_response(CRITICAL_LEN).into_response() })
                .layer(PriorityLayer::new().urgency(0)),
        )
        .route(
            "/bg/{name}",
            get(|| async { pattern_response(BG_LEN).into_response() }),
        )
        .route(
            "/size/{n}",
            get(|Path(n): Path<String>| async move { size_response(&n).into_response() }),
        )
        .route("/delay/{ms}", get(delay))
        .route("/whole/{n}", get(whole))
        .layer(PriorityLayer::new())
}
