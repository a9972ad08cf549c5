//! Hostile input and teardown: a peer that floods PRIORITY_UPDATE frames, opens every
//! stream it may and stops reading; clients that reset streams while their DATA is queued,
//! vanish mid-transfer, or half-close. Assertions are on the wrapper's counters, on what
//! reaches the client and on counts (live connections, tokio tasks, allocations), never on
//! wall-clock times; RSS growth is printed and bounded.
//!
//! - memory, under every policy: PRIORITY_UPDATE flood for idle streams + the server's
//!   maximum of concurrent 1 MiB streams + a reader that stops: the queue stays under the
//!   hard limit (and did build up), the early update table under its bound, every update
//!   counted once, RSS growth under 64 MiB; then the streams read to the end are byte-exact
//!   and the queue drains;
//! - teardown, under every policy and stock: resets while DATA is queued (the connection
//!   keeps serving byte-exact, the queue drains), a connection dropped mid-transfer (the
//!   server serves new connections), and a client half-close right after its requests and
//!   mid-transfer (the server's SETTINGS arrive, the DATA read before the close is there,
//!   every body is a byte-exact prefix, the TLS close is clean); each time live connections
//!   and tokio tasks return to their baseline;
//! - the passive HPACK decoders' cost per request, against stock (a regression test);
//! - a regression test for a lost wake-up in the wrapper's write path; and, not asserted,
//!   h2 dropping a half-closed client's responses (see the note after the half-close test).
//!
//! The tests measure the process (RSS, tokio tasks, allocations, panics), so they run one
//! at a time, each on its own runtime ([`support::run_alone`], which also fails a test in
//! which any task panicked).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use integration_tests::attack::{self, frame, hpack, read_frame, tls_h2, PREFACE};
use integration_tests::client::pattern_byte;
use integration_tests::server::ServerSetup;
use integration_tests::tap::Tap;
use integration_tests::{ReadGate, TestServer};
use support::{alive_tasks, client as tap_client, rss_kib, run_alone as run, wait_for};
use tls_flush::{FlushConfig, Policy, StatsSnapshot};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The wrapper's default hard limit on queued bytes (`FlushConfig`).
const HARD_LIMIT: u64 = 1 << 20;
/// The wrapper's default soft limit under `policy` (`FlushConfig::for_policy`): `scheduled`
/// absorbs 256 KiB; the in-order presets hold about two frames, as they cannot reorder.
fn soft_limit(policy: &str) -> u64 {
    if policy == Policy::Scheduled.name() {
        256 << 10
    } else {
        36 << 10
    }
}
/// What the wrapper queues for a reader that stopped, on loopback: two full records.
const STALLED_QUEUE: u64 = 2 * 16384;
/// PRIORITY_UPDATE frames the wrapper keeps for streams not open yet (default).
const MAX_EARLY_UPDATES: u64 = 128;
/// The largest frame hyper's h2 writes: 16 KiB payload (the client's SETTINGS_MAX_FRAME_SIZE
/// and h2's default) plus the 9-byte header.
const MAX_FRAME: u64 = 16384 + 9;
/// `/bg/{name}` responses.
const BG_LEN: u64 = 1 << 20;
/// How long a teardown may take to show in the counts before the test fails.
const SETTLE: Duration = Duration::from_secs(10);

/// Counts heap allocations (for the HPACK cost check); otherwise the system allocator.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// The counters of the server's latest wrapped connection (`None` for stock).
fn latest(server: &TestServer) -> Option<StatsSnapshot> {
    server.connection_stats().last().map(|s| s.snapshot())
}

/// After a teardown: no connection task left and the runtime back to its task baseline.
async fn assert_settled(server: &TestServer, baseline: usize, what: &str) {
    let settled = wait_for(SETTLE, || {
        server.live_connections() == 0 && alive_tasks() <= baseline
    })
    .await;
    assert!(
        settled,
        "{what}: {} live connections and {} tasks (baseline {baseline}) after {SETTLE:?}",
        server.live_connections(),
        alive_tasks()
    );
    assert_eq!(
        alive_tasks(),
        baseline,
        "{what}: tasks back to the baseline"
    );
}

/// Starts the demo server once the runtime is idle (the previous server's tasks, aborted
/// when it was dropped, are gone), and returns it with the runtime's task count then: the
/// baseline every teardown must return to.
async fn start_server(setup: ServerSetup) -> (TestServer, usize) {
    assert!(
        wait_for(SETTLE, || alive_tasks() == 0).await,
        "{} tasks left over from the previous server",
        alive_tasks()
    );
    let server = TestServer::demo(setup).await.expect("server");
    let baseline = alive_tasks();
    (server, baseline)
}

/// A TLS connection (ALPN h2) whose socket reads go through a [`ReadGate`], without the
/// h2 client on top: the tests own the stream and can drop or half-close it.
async fn raw_tls(
    server: &TestServer,
    gate: ReadGate,
    recv_buffer: Option<usize>,
) -> TlsStream<Tap<TcpStream>> {
    tls_h2(
        server.addr,
        &server.certificate,
        gate,
        Default::default(),
        recv_buffer,
    )
    .await
    .expect("tls handshake")
}

/// An h2 client over [`raw_tls`], its connection driven by a task the test can abort.
async fn h2_client(
    server: &TestServer,
    gate: ReadGate,
    recv_buffer: Option<usize>,
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let tls = raw_tls(server, gate, recv_buffer).await;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, Bytes>(tls)
        .await
        .expect("h2 handshake");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (send, task)
}

fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("https://localhost{path}"))
        .body(())
        .expect("request")
}

/// SETTINGS_MAX_CONCURRENT_STREAMS the demo server announces, as an h2 client sees it
/// after one exchange (`tls_flush::H2_MAX_CONCURRENT_STREAMS`, 100; stock: hyper's 200).
async fn server_max_concurrent_streams(server: &TestServer) -> usize {
    let (send, task) = h2_client(server, ReadGate::default(), None).await;
    let mut ready = send.ready().await.expect("ready");
    let (response, _) = ready.send_request(get("/critical"), true).expect("send");
    let body = attack::read_body(response, None).await.expect("probe");
    assert_eq!((body.status, body.len, body.pattern_ok), (200, 4096, true));
    let max = ready.current_max_send_streams();
    drop(ready);
    task.await.expect("probe connection task");
    max
}

// ---------------------------------------------------------------------------------------
// 1. Memory per connection stays bounded whatever the peer sends.
// ---------------------------------------------------------------------------------------

/// PRIORITY_UPDATE frames for idle streams the flood sends.
const FLOOD: u64 = 20_000;
/// First idle stream id the flood names (odd, client-initiated, never opened).
const FLOOD_FIRST_ID: u32 = 1_000_001;
/// Bound on the test process's RSS growth; see the test for the budget.
const RSS_GROWTH_BOUND_KIB: u64 = 64 << 10;

#[test]
fn memory_stays_bounded_under_update_flood_and_a_stalled_reader() {
    run(async {
        for policy in Policy::ALL {
            memory_bounded(policy).await;
        }
    });
}

async fn memory_bounded(policy: Policy) {
    let name = policy.name();
    let (server, baseline) = start_server(ServerSetup::with_policy(policy)).await;
    // The wrapped test server announces `H2_MAX_CONCURRENT_STREAMS` (100), stock hyper 200.
    let max_streams = server_max_concurrent_streams(&server).await;
    assert!(max_streams > 0, "{name}: the server allows streams");
    assert_settled(&server, baseline, &format!("{name}: probe")).await;

    let client = tap_client(&server, None).await;
    // One exchange first: the server's SETTINGS are in and the connection's counters exist.
    let warm = client.get("/critical", None).await.expect("warm-up");
    assert_eq!((warm.len, warm.pattern_ok), (4096, true));
    let stats = server.connection_stats().last().expect("wrapped").clone();
    // RSS before: memory freed by earlier work in this process (other tests, the previous
    // policy) may be reused, which hides growth but never inflates it.
    let (rss_before, _) = rss_kib();

    // Stop reading, then flood and open every stream the server allows.
    client.gate().close();
    for i in 0..FLOOD as u32 {
        client.send_priority_update(FLOOD_FIRST_ID + 2 * i, "u=0");
    }
    // Urgencies fall from 7 to 0 as the streams open: under `scheduled`, DATA that h2 offers
    // past the soft limit is admitted (up to the hard limit) when it is more urgent than
    // everything queued. (h2 offers one frame at a time in its own order, and a refused
    // frame holds up the ones behind it, so in practice the queue stays near the soft
    // limit; the bound asserted is the hard one.)
    let mut pending = Vec::with_capacity(max_streams);
    for i in 0..max_streams {
        let urgency = 7 - i * 8 / max_streams;
        let p = client
            .start(&format!("/bg/{i}"), Some(&format!("u={urgency}")))
            .await
            .expect("request");
        pending.push(p);
    }

    // Wait until every update was read and the queue stops growing: the high-water mark
    // and the bytes handed to TLS unchanged for a full second.
    let mut peak_rss = rss_before;
    let mut last = (u64::MAX, u64::MAX);
    let mut stable_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = stats.snapshot();
        peak_rss = peak_rss.max(rss_kib().0);
        let seen = s.priority_updates_buffered + s.priority_updates_ignored;
        let now = (s.queued_bytes_high_water, s.bytes_written);
        if now != last {
            last = now;
            stable_since = Instant::now();
        } else if seen >= FLOOD && stable_since.elapsed() >= Duration::from_secs(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: the queue did not settle: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = stats.snapshot();
    let (rss_peak_now, hwm) = rss_kib();
    peak_rss = peak_rss.max(rss_peak_now);
    let growth = peak_rss.saturating_sub(rss_before);
    println!(
        "{name}: {max_streams} streams (the server's max) x 1 MiB, {FLOOD} idle-stream \
         updates, reader stopped: queued {} B (high water {} B, hard limit {HARD_LIMIT}), \
         written {} B, updates buffered {} ignored {} applied {} invalid {}; \
         RSS {rss_before} KiB -> peak {peak_rss} KiB (+{growth} KiB), VmHWM {hwm} KiB",
        s.queued_bytes,
        s.queued_bytes_high_water,
        s.bytes_written,
        s.priority_updates_buffered,
        s.priority_updates_ignored,
        s.priority_updates_applied,
        s.priority_updates_invalid,
    );

    // The wrapper admits a frame only while the queue stays under its limit: the hard
    // limit, plus a few frames while DATA is held for an urgent response (`queue_limit`);
    // the one exception is the rest of a header block already begun (CONTINUATION), and
    // hyper's response header blocks here fit in one HEADERS frame. So: the queue limit +
    // one max-size frame, with nothing else as margin.
    let queue_limit = FlushConfig::for_policy(policy).queue_limit() as u64;
    assert!(
        s.queued_bytes_high_water <= queue_limit + MAX_FRAME,
        "{name}: queue high water {} > {queue_limit} + one frame",
        s.queued_bytes_high_water,
    );
    // One whole frame: on loopback a blocked transport leaves every preset the blocked
    // soft limit (two records, STALLED_QUEUE), and a run on a loaded machine sometimes
    // catches a queue holding one frame of it (16,993 bytes once for an in-order preset;
    // 65,581 for scheduled, whose queue had filled before the transport counted as
    // blocked in other runs).
    let built = (soft_limit(name) / 2).min(MAX_FRAME);
    assert!(
        s.queued_bytes_high_water >= built,
        "{name}: the stalled reader did build a queue (high water {})",
        s.queued_bytes_high_water
    );
    assert!(
        s.priority_updates_buffered <= MAX_EARLY_UPDATES,
        "{name}: {} early updates kept",
        s.priority_updates_buffered
    );
    assert_eq!(
        s.priority_updates_buffered + s.priority_updates_ignored,
        FLOOD,
        "{name}: every update counted once"
    );
    assert_eq!(
        (s.priority_updates_applied, s.priority_updates_invalid),
        (0, 0),
        "{name}: no flood update names an open stream, none is malformed"
    );
    // Budget: the wrapper's queue (<= 1 MiB + a frame), the early-update table (128
    // entries), rustls' buffers, and h2's per-stream state for 200 streams. h2's own send
    // buffers are bounded by the client's connection window (16 MiB), below hyper's
    // max_send_buf_size (400 KiB) x 200 streams; the demo's bodies are slices of a static
    // buffer, so what h2 holds costs little memory. 64 MiB leaves room for allocator slack.
    assert!(
        growth < RSS_GROWTH_BOUND_KIB,
        "{name}: RSS grew {growth} KiB with a stalled reader"
    );

    // Resume. One stream in eight (every urgency class, queued DATA included) is read to
    // the end, byte-exact; the others are reset (dropping a response before its end makes
    // the h2 client send RST_STREAM) while their DATA may still be queued.
    client.gate().open();
    let mut kept = Vec::new();
    for (i, p) in pending.into_iter().enumerate() {
        if i % 8 == 0 {
            kept.push((i, p));
        }
    }
    let results = futures_util::future::join_all(
        kept.into_iter()
            .map(|(i, p)| async move { (i, p.finish().await) }),
    )
    .await;
    for (i, r) in results {
        r.map_err(|e| e.to_string())
            .and_then(|r| r.check_pattern(BG_LEN))
            .unwrap_or_else(|e| panic!("{name}: /bg/{i}: {e}"));
    }
    let big = client.get("/size/1048576", None).await.expect("after");
    assert_eq!((big.len, big.pattern_ok), (1 << 20, true), "{name}");
    let after = client.get("/critical", Some("u=0")).await.expect("after");
    assert_eq!((after.len, after.pattern_ok), (4096, true));
    assert!(
        wait_for(SETTLE, || stats.snapshot().queued_bytes == 0).await,
        "{name}: queue drained"
    );
    drop(client);
    assert_settled(&server, baseline, &format!("{name}: memory test")).await;
}

// ---------------------------------------------------------------------------------------
// 2. Teardown.
// ---------------------------------------------------------------------------------------

/// Waits until the server's wrapper has built a queue of at least `high_water` bytes for a
/// stalled reader and still holds DATA (for stock, which has no counters, a short pause
/// instead; nothing is asserted on it). Only "still holds some": after a large drain the
/// wrapper may not take h2's next frame until the socket is writable again (see
/// `wrapper_takes_frames_again_once_it_made_room`), so the queue need not refill.
async fn wait_for_queue(server: &TestServer, name: &str, high_water: u64) {
    if server.connection_stats().is_empty() {
        tokio::time::sleep(Duration::from_millis(300)).await;
        return;
    }
    // At most half the policy's soft limit (the in-order presets hold little), and at most
    // two records: behind a blocked transport on loopback the wrapper queues no more than
    // that (its blocked soft limit) and leaves the rest with h2.
    let high_water = high_water.min(soft_limit(name) / 2).min(STALLED_QUEUE);
    let queued = wait_for(SETTLE, || {
        latest(server)
            .is_some_and(|s| s.queued_bytes > 0 && s.queued_bytes_high_water >= high_water)
    })
    .await;
    assert!(
        queued,
        "{name}: DATA queued in the wrapper: {:?}",
        latest(server)
    );
}

#[test]
fn teardown_reset_streams_while_their_data_is_queued() {
    run(async {
        for (name, setup) in ServerSetup::all() {
            let (server, baseline) = start_server(setup).await;
            let client = tap_client(&server, Some(64 * 1024)).await;
            let warm = client.get("/critical", None).await.expect("warm-up");
            assert_eq!((warm.len, warm.pattern_ok), (4096, true));

            client.gate().close();
            let mut pending = Vec::new();
            for i in 0..16 {
                pending.push(client.start(&format!("/bg/r{i}"), None).await.expect("req"));
            }
            wait_for_queue(&server, name, 64 * 1024).await;
            let queued = latest(&server).map_or(0, |s| s.queued_bytes);
            let reset: Vec<u32> = pending.iter().map(|p| p.stream_id()).collect();
            // Nothing was read since the gate closed: every frame logged from here on
            // arrives after the resets.
            let from = client.log().frames.len();
            // Dropping a response before its end makes the h2 client send RST_STREAM(CANCEL).
            drop(pending);
            client.gate().open();

            // The connection keeps serving, byte-exact.
            for n in [4096u64, 100_000, 1 << 20] {
                client
                    .get(&format!("/size/{n}"), None)
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.check_pattern(n))
                    .unwrap_or_else(|e| panic!("{name}: /size/{n} after resets: {e}"));
            }
            if let Some(stats) = server.connection_stats().last().cloned() {
                assert!(
                    wait_for(SETTLE, || stats.snapshot().queued_bytes == 0).await,
                    "{name}: the queue drains after the resets: {:?}",
                    stats.snapshot()
                );
            }
            let after_reset: usize = client.log().frames[from..]
                .iter()
                .filter(|f| f.kind == 0 && reset.contains(&f.stream_id))
                .map(|f| f.len)
                .sum();
            println!(
                "{name}: reset 16 streams with {queued} B queued in the wrapper; {after_reset} \
                 B of their DATA still arrived; connection kept serving; stats {:?}",
                latest(&server)
            );
            drop(client);
            assert_settled(&server, baseline, &format!("{name}: reset")).await;
        }
    });
}

#[test]
fn teardown_connection_dropped_mid_transfer() {
    run(async {
        for (name, setup) in ServerSetup::all() {
            let (server, baseline) = start_server(setup).await;
            let gate = ReadGate::default();
            // Read 200 KB of the transfer, then stop: mid-transfer at the same point each run.
            gate.close_after(200_000);
            let (send, conn) = h2_client(&server, gate.clone(), Some(64 * 1024)).await;
            let mut responses = Vec::new();
            for i in 0..8 {
                let mut ready = send.clone().ready().await.expect("ready");
                let (r, _) = ready
                    .send_request(get(&format!("/bg/d{i}")), true)
                    .expect("send");
                responses.push(r);
            }
            assert!(
                wait_for(SETTLE, || gate.is_shut()).await,
                "{name}: the reader read its 200 kB and stopped"
            );
            wait_for_queue(&server, name, 64 * 1024).await;
            let queued = latest(&server).map_or(0, |s| s.queued_bytes);
            // Abort the connection's task: the TLS stream and the socket are dropped at once,
            // with unread bytes in the receive buffer (the kernel answers with a reset).
            conn.abort();
            let _ = conn.await;
            drop((send, responses));
            println!("{name}: dropped the connection with {queued} B queued in the wrapper");
            assert_settled(&server, baseline, &format!("{name}: dropped connection")).await;

            // The server still serves new connections.
            let client = tap_client(&server, None).await;
            let r = client.get("/size/100000", None).await.expect("after drop");
            assert_eq!((r.len, r.pattern_ok), (100_000, true), "{name}");
            drop(client);
            assert_settled(&server, baseline, &format!("{name}: after drop")).await;
        }
    });
}

// --- half-close: a frame-level client over TLS, which shuts its write side down. ---

#[derive(Debug, Default, Clone)]
struct Received {
    headers: bool,
    len: u64,
    pattern_ok: bool,
    ended: bool,
}

/// How the read side of a [`half_close`] ended, and what arrived per stream.
#[derive(Debug)]
struct HalfCloseOutcome {
    /// The server's SETTINGS frame (not an ACK) arrived.
    settings: bool,
    streams: Vec<Received>,
    /// RST_STREAM and GOAWAY frames received.
    resets: usize,
    goaway: Option<u32>,
    /// `Ok` for a clean end (TLS close_notify, then EOF at a frame boundary).
    end: Result<(), String>,
}

/// Sends `paths` as requests on streams 1, 3, 5, ... over a TLS connection whose reads go
/// through `gate`, calls `before_close` (to let the test stall the reader and wait for a
/// queue), half-closes (TLS close_notify, then TCP FIN on the write side), opens the gate,
/// and reads frames until the server closes.
async fn half_close<F: std::future::Future<Output = ()>>(
    server: &TestServer,
    paths: &[&str],
    gate: ReadGate,
    before_close: F,
) -> HalfCloseOutcome {
    let tls = raw_tls(server, gate.clone(), Some(64 * 1024)).await;
    let (mut rd, mut wr) = tokio::io::split(tls);
    let mut out = PREFACE.to_vec();
    // SETTINGS_ENABLE_PUSH = 0, SETTINGS_INITIAL_WINDOW_SIZE = 4 MiB; connection window
    // 16 MiB: the server never waits for a WINDOW_UPDATE, which this client cannot send
    // once it has half-closed.
    let mut settings = Vec::new();
    settings.extend_from_slice(&2u16.to_be_bytes());
    settings.extend_from_slice(&0u32.to_be_bytes());
    settings.extend_from_slice(&4u16.to_be_bytes());
    settings.extend_from_slice(&(4u32 << 20).to_be_bytes());
    out.extend(frame(0x4, 0, 0, &settings));
    out.extend(frame(0x8, 0, 0, &(16u32 << 20).to_be_bytes()));
    for (i, path) in paths.iter().enumerate() {
        out.extend(frame(
            0x1,
            0x5,
            1 + 2 * i as u32,
            &hpack::request("GET", path),
        ));
    }
    wr.write_all(&out).await.expect("requests");
    wr.flush().await.expect("flush");

    let n = paths.len();
    let reader = tokio::spawn(async move {
        let mut outcome = HalfCloseOutcome {
            streams: vec![
                Received {
                    pattern_ok: true,
                    ..Received::default()
                };
                n
            ],
            settings: false,
            resets: 0,
            goaway: None,
            end: Ok(()),
        };
        let mut payload = Vec::new();
        outcome.end = loop {
            let (kind, flags, id) = match read_frame(&mut rd, &mut payload).await {
                Ok(Some(h)) => h,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            };
            let len = payload.len();
            let slot = (id % 2 == 1)
                .then(|| outcome.streams.get_mut((id as usize - 1) / 2))
                .flatten();
            match (kind, slot) {
                (0x0, Some(r)) => {
                    for (i, b) in payload.iter().enumerate() {
                        r.pattern_ok &= *b == pattern_byte(r.len + i as u64);
                    }
                    r.len += len as u64;
                    r.ended |= flags & 0x1 != 0;
                }
                (0x1, Some(r)) => {
                    r.headers = true;
                    r.ended |= flags & 0x1 != 0;
                }
                (0x4, _) if id == 0 && flags & 0x1 == 0 => outcome.settings = true,
                (0x3, _) => outcome.resets += 1,
                (0x7, _) => {
                    outcome.goaway = payload
                        .get(4..8)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                }
                _ => {}
            }
        };
        outcome
    });
    before_close.await;
    wr.shutdown().await.expect("half-close");
    gate.open();
    reader.await.expect("reader")
}

/// What every half-close must show: the server's SETTINGS, at least `min_data` bytes of
/// DATA, a clean end (TLS close_notify, then EOF at a frame boundary), and only byte-exact
/// prefixes of the `lens`-byte responses. (Complete responses cannot be required: see the
/// note after `teardown_half_close`.)
fn check_half_close(
    name: &str,
    what: &str,
    outcome: &HalfCloseOutcome,
    lens: &[u64],
    min_data: u64,
) {
    assert!(outcome.settings, "{name}: {what}: the server's SETTINGS");
    assert_eq!(outcome.end, Ok(()), "{name}: {what}: clean end");
    let data: u64 = outcome.streams.iter().map(|r| r.len).sum();
    assert!(
        data >= min_data,
        "{name}: {what}: {data} bytes of DATA, at least {min_data} expected"
    );
    for (r, &len) in outcome.streams.iter().zip(lens) {
        assert!(r.pattern_ok, "{name}: {what}: body bytes exact: {r:?}");
        assert!(r.len <= len, "{name}: {what}: no extra bytes: {r:?}");
        assert!(
            !r.ended || r.len == len,
            "{name}: {what}: ended means complete: {r:?}"
        );
        assert!(
            r.headers || r.len == 0,
            "{name}: {what}: DATA after HEADERS: {r:?}"
        );
    }
}

const HALF_CLOSE_PATHS: [&str; 3] = ["/critical", "/size/300000", "/bg/h"];
const HALF_CLOSE_LENS: [u64; 3] = [4096, 300_000, BG_LEN];

#[test]
fn teardown_half_close() {
    run(async {
        for (name, setup) in ServerSetup::all() {
            let (server, baseline) = start_server(setup).await;

            // Right after the requests.
            let outcome =
                half_close(&server, &HALF_CLOSE_PATHS, ReadGate::default(), async {}).await;
            println!("{name}: half-close after the requests: {outcome:?}");
            // The half-close may reach h2 before any response begins: only the server's
            // SETTINGS and the clean close are certain.
            check_half_close(name, "after the requests", &outcome, &HALF_CLOSE_LENS, 0);
            assert_settled(&server, baseline, &format!("{name}: half-close")).await;

            // Mid-transfer: the reader stalls after 100 kB, DATA queues up, then the client
            // half-closes and reads on.
            let gate = ReadGate::default();
            gate.close_after(100_000);
            let outcome = half_close(&server, &HALF_CLOSE_PATHS, gate.clone(), async {
                assert!(
                    wait_for(SETTLE, || gate.is_shut()).await,
                    "{name}: the reader read its 100 kB and stalled"
                );
                wait_for_queue(&server, name, 64 * 1024).await;
            })
            .await;
            println!("{name}: half-close mid-transfer: {outcome:?}");
            // The gate let 100 kB of TLS through before the half-close (a few kB of it the
            // handshake): the DATA read until then must be there.
            check_half_close(name, "mid-transfer", &outcome, &HALF_CLOSE_LENS, 64 * 1024);
            assert_settled(
                &server,
                baseline,
                &format!("{name}: half-close mid-transfer"),
            )
            .await;
        }
    });
}

// Not asserted: complete responses after a client half-close. RFC 9113 §8.1 lets a client
// close its side once its requests are sent; h2 0.4.20 instead treats the end of the read side
// as the end of the connection (`proto/connection.rs`: `None => streams.recv_eof(..)`, every
// stream fails with BrokenPipe), stock hyper included (2 of 30 runs completed). The tests above
// assert what the wrapper controls: a clean TLS close and byte-exact prefixes.

// ---------------------------------------------------------------------------------------
// Cost of the passive HPACK observers.
// ---------------------------------------------------------------------------------------

/// Heap allocations per request over one connection, client and server together. h2 (like
/// nghttp2) never indexes `:path` or `content-length` values, so every request and every
/// response header block carries a Huffman-coded literal, as with real clients.
async fn allocations_per_request(setup: ServerSetup) -> u64 {
    const N: u64 = 200;
    let (server, _) = start_server(setup).await;
    let client = tap_client(&server, None).await;
    for i in 0..10 {
        client
            .get(&format!("/size/{i}"), None)
            .await
            .expect("warm-up");
    }
    let before = ALLOCATIONS.load(Relaxed);
    for i in 0..N {
        let n = 1000 + i;
        let r = client
            .get(&format!("/size/{n}"), Some("u=2"))
            .await
            .expect("request");
        assert_eq!((r.len, r.pattern_ok), (n, true));
    }
    (ALLOCATIONS.load(Relaxed) - before) / N
}

/// What the wrapper may add per request (frame buffers, header-block reassembly, the
/// priority table). One Huffman-coded string through loona-hpack alone is 64.
const WRAPPER_ALLOCATIONS_PER_REQUEST: u64 = 32;

/// The soak (scripts/soak.sh) showed the wrapped server at ~0.5x stock's requests/s with
/// loona-hpack as the passive decoder; `perf` put ~45% of its CPU in loona-hpack's Huffman
/// decoding: `decode_string` builds a fresh decoder, a HashMap of 26 HashMaps filled with
/// all 257 codes, for every Huffman-coded string, then does one SipHash lookup per input
/// bit (64 allocations and ~19 µs in release for a 10-character `:path`). Measured here
/// with it: 188 allocations per request wrapped vs 53 stock. Commit bf7f9b5 replaced it
/// with the crate's own decoder (61-64 vs 53); this keeps it that way.
#[test]
fn hpack_observers_cost_little_per_request() {
    run(async {
        let stock = allocations_per_request(ServerSetup::default()).await;
        for policy in Policy::ALL {
            let wrapped = allocations_per_request(ServerSetup::with_policy(policy)).await;
            println!(
                "{}: {wrapped} allocations per request, stock {stock}",
                policy.name()
            );
            assert!(
                wrapped <= stock + WRAPPER_ALLOCATIONS_PER_REQUEST,
                "{}: {wrapped} allocations per request, stock {stock}",
                policy.name()
            );
        }
    });
}

// ---------------------------------------------------------------------------------------
// A lost wakeup in the wrapper's write path (found by the teardown tests under load).
// ---------------------------------------------------------------------------------------

/// A socket that takes `budget` more bytes, then is full until the test grants more.
#[derive(Clone, Default)]
struct BudgetedSocket(Arc<Mutex<usize>>);

impl BudgetedSocket {
    fn grant(&self, bytes: usize) {
        *self.0.lock().expect("budget") += bytes;
    }
}

impl tokio::io::AsyncRead for BudgetedSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Pending
    }
}

impl tokio::io::AsyncWrite for BudgetedSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        // A real socket would keep the waker and wake it when the peer reads; this peer
        // never reads again on its own, so there is nothing to wake.
        let mut budget = self.0.lock().expect("budget");
        if *budget == 0 {
            return Poll::Pending;
        }
        let n = (*budget).min(buf.len());
        *budget -= n;
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl tls_flush::Transport for BudgetedSocket {
    fn alpn_protocol(&self) -> Option<&[u8]> {
        Some(b"h2")
    }
    fn poll_write_ready(&self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if *self.0.lock().expect("budget") > 0 {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

/// Counts wake-ups.
#[derive(Default)]
struct WakeCounter(AtomicU64);

impl std::task::Wake for WakeCounter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// h2 hands the wrapper DATA frames while the socket is full, until one is refused at the
/// soft limit. Then the socket takes 200 KiB, all in one poll (a reader that drained its
/// buffer at once), and fills again. In that poll the wrapper must take the refused frame
/// once it has made room, not answer `Pending` and leave h2 holding it until the socket
/// drains (regression: seen end to end as a server queue stuck at ~49 KB with h2 holding the
/// rest of eight 1 MiB responses until the client sent a new request).
#[test]
fn wrapper_takes_frames_again_once_it_made_room() {
    run(async { frames_again_once_room_is_made() });
}

fn frames_again_once_room_is_made() {
    for policy in Policy::ALL {
        let name = policy.name();
        let socket = BudgetedSocket::default();
        let mut stream =
            tls_flush::FlushStream::new(socket.clone(), tls_flush::FlushConfig::for_policy(policy));
        let stats = stream.stats();
        let counter = Arc::new(WakeCounter::default());
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut write = |stream: &mut tls_flush::FlushStream<BudgetedSocket>, bytes: &[u8]| {
            Pin::new(stream).poll_write(&mut cx, bytes)
        };

        // h2's SETTINGS, then 16 KiB DATA frames on stream 1 until one is refused.
        assert!(matches!(
            write(&mut stream, &frame(0x4, 0, 0, &[])),
            Poll::Ready(Ok(9))
        ));
        let data = frame(0x0, 0, 1, &[7u8; 16384]);
        let mut at = 0;
        let mut frames = 0;
        loop {
            match write(&mut stream, &data[at..]) {
                Poll::Ready(Ok(n)) => {
                    assert!(n > 0, "{name}: zero-length write");
                    at += n;
                    if at == data.len() {
                        at = 0;
                        frames += 1;
                    }
                }
                Poll::Ready(Err(e)) => panic!("{name}: {e}"),
                Poll::Pending => break,
            }
            assert!(frames < 1000, "{name}: the wrapper never refused a frame");
        }
        let refused_at = stats.snapshot().queued_bytes;
        assert!(
            refused_at + data.len() as u64 > soft_limit(name),
            "{name}: refused at the soft limit ({refused_at} B queued)"
        );

        // The socket takes 200 KiB; h2, woken, offers the refused frame again.
        let granted = 200 * 1024;
        socket.grant(granted);
        let wakes_before = counter.0.load(Relaxed);
        let outcome = write(&mut stream, &data[at..]);
        let after = stats.snapshot().queued_bytes;
        println!(
            "{name}: queued {refused_at} B at the refusal, {after} B after the socket took \
             {granted} B; poll_write {outcome:?}; wakes {}",
            counter.0.load(Relaxed) - wakes_before
        );
        assert!(
            after + (data.len() - at) as u64 <= soft_limit(name),
            "{name}: the drain made room for the frame"
        );
        assert!(
            matches!(outcome, Poll::Ready(Ok(n)) if n > 0)
                || counter.0.load(Relaxed) > wakes_before,
            "{name}: poll_write answered Pending with room for the frame and no wake-up \
             pending ({after} B queued): h2 would stall"
        );
    }
}
