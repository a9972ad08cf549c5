//! Hostile input against the wrapper's memory bounds: each test reproduces one attack
//! against the in-process server (stock hyper + rustls, and `tls-flush`) and asserts a
//! bound in bytes, counts or CPU time, comparing the wrapper with stock measured in the
//! same process and run, never in wall-clock speed. Every byte of every legitimate response
//! is checked against the body pattern.
//!
//! 1. `hpack_reference_amplification`: the client puts a ~4000-byte `priority` field in the
//!    HPACK dynamic table, then sends 16 KiB header blocks made of ~16,000 one-byte
//!    references to it. A decoder that copies every referenced value holds ~64 MB per
//!    request (h2 itself only clones a refcounted handle). Asserts the live-heap peak the
//!    wrapper adds per attacking connection (one, then eight at once; the smallest of three
//!    rounds, for stock and wrapper alike) is within 256 KiB of stock's, that h2 treats the
//!    connection the same way (431/reset per stream, later request served or not) with and
//!    without the wrapper, and that `priority_values_too_long` counted each request. Fails
//!    when the observer copies or joins the referenced values (peak ~128 MB).
//! 2. `priority_update_flood`: 2400 PRIORITY_UPDATE frames with 16 KiB values for closed,
//!    open and not-yet-open streams, in three rounds. Asserts the same memory bound (on the
//!    round with the smallest peak, for stock and wrapper alike), that every frame is
//!    counted exactly once, that none of those values (all over 1 KiB) is applied or
//!    buffered, and that a 1 MiB download on the same connection is byte-exact afterwards.
//!    Fails when long values are parsed and applied, or when frames go uncounted.
//! 3. `oversized_data_frames_are_not_copied_whole`: the client allows 16 MiB - 1 frames
//!    and large windows, and a response body that is one 8 MiB chunk makes h2 write one
//!    8 MiB DATA frame; the reader pauses 200 ms. Asserts byte-exact and
//!    `queued_memory_high_water <= 1 MiB + 64 KiB`. Fails when the frame is copied whole.
//! 4. `header_only_responses_are_accounted`: a paused reader and 20,000 HEAD requests for
//!    a missing path (404, HEADERS only, ~10-15 wire bytes each), with the queue limits
//!    at 64 KiB / 256 KiB. Asserts `queued_memory_high_water <= 256 KiB + 64 KiB`, that
//!    the live-heap peak the wrapper adds over stock stays within 1.5 MiB, that every
//!    response arrives once the reader resumes, and that a 1 MiB download afterwards is
//!    byte-exact. Fails when tiny units are accounted by their wire bytes only (tens of
//!    thousands of them fit under the limit). (Not behind a paused 1 MiB download: h2
//!    writes frames one at a time, so once the wrapper refuses a DATA frame at the soft
//!    limit, every HEADERS frame waits in h2 behind it and none reaches the wrapper.)
//!
//! The attacks on scheduling (anticipation, clamps, h2c detection) are in
//! `hostile_bounds_scheduling.rs`; what both files need is in `hostile_support`.
//!
//! The tests measure the process (live heap, CPU time), so they run one at a time, each on
//! its own runtime ([`support::run_alone`]).

mod hostile_support;
mod support;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;
use axum::Router;
use hostile_support::{
    app, configured, latest, mib, name, peak_growth, reset_peak, snapshots, start, stock, wrapped,
    PeakAllocator, LIVE, SETTLE,
};
use integration_tests::attack::{
    hpack, kind, read_body, H2Client, H2Options, RawH2, RawLog, RawStream,
};
use integration_tests::client::pattern_sha256;
use integration_tests::server::ServerSetup;
use support::{run_alone, wait_for};
use tls_flush::{ConnectionStats, FlushConfig, Policy, StatsSnapshot};

#[global_allocator]
static GLOBAL: PeakAllocator = PeakAllocator;

/// The wrapper's default hard limit on its write queue.
const HARD_LIMIT: u64 = 1 << 20;
/// What the queue may exceed the hard limit by (one frame piece or header block).
const QUEUE_SLACK: u64 = 64 << 10;
/// Live-heap growth the wrapper may add per attacking connection over stock's.
const PER_CONNECTION_MARGIN: u64 = 256 << 10;

// ---------------------------------------------------------------------------------------
// 1. HPACK reference amplification.
// ---------------------------------------------------------------------------------------

/// Length of the `priority` value put in the dynamic table: its entry (8 + 4000 + 32
/// octets) fits the default 4096-octet table.
const TABLE_VALUE_LEN: usize = 4000;
/// Attack requests per connection, each one 16 KiB header block (h2 0.4.20 closes the
/// connection with ENHANCE_YOUR_CALM once a decoded header list passes 4x its 16 KiB
/// limit, so only the first may reach it; the wrapper reads them all).
const AMPLIFIED_REQUESTS: usize = 4;
/// Rounds of the attack, each on fresh connections and measured on its own.
const AMPLIFIED_ROUNDS: usize = 3;
/// The server's SETTINGS_MAX_FRAME_SIZE (h2's default): one HEADERS frame per block.
const MAX_FRAME_PAYLOAD: usize = 16384;

/// What a stream got back.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Headers {
        first_octet: Option<u8>,
        data: u64,
        pattern_ok: bool,
        ended: bool,
    },
    Reset(u32),
    Nothing,
}

impl From<&RawStream> for Answer {
    fn from(s: &RawStream) -> Self {
        if let Some(code) = s.reset {
            Answer::Reset(code)
        } else if s.header_blocks > 0 {
            Answer::Headers {
                first_octet: s.first_block_octet,
                data: s.data,
                pattern_ok: s.pattern_ok,
                ended: s.ended,
            }
        } else {
            Answer::Nothing
        }
    }
}

fn answer(log: &RawLog, id: u32) -> Answer {
    log.streams.get(&id).map_or(Answer::Nothing, Answer::from)
}

/// The critical response, complete and byte-exact (`0x88`: h2's `:status 200`).
fn served(a: &Answer) -> bool {
    matches!(
        a,
        Answer::Headers {
            first_octet: Some(0x88),
            data: 4096,
            pattern_ok: true,
            ended: true
        }
    )
}

/// How h2 treated one attacking connection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Treatment {
    attacks: Vec<Answer>,
    /// A `GET /critical` sent after the attack.
    after: Answer,
    goaway: Option<(u32, u32)>,
    /// How the connection ended, if it did: `true` for a clean end (close_notify, EOF).
    clean_end: Option<bool>,
}

/// The attack's header blocks: pseudo-headers, then (first block only) the `priority`
/// field entering the dynamic table, then index 62 (that entry) until the block is 16 KiB.
fn amplification_wire(raw: &mut RawH2) -> (Vec<u32>, Vec<u8>) {
    let mut value = b"u=7 ".to_vec();
    value.resize(TABLE_VALUE_LEN, b'x');
    let mut ids = Vec::new();
    let mut wire = Vec::new();
    for i in 0..AMPLIFIED_REQUESTS {
        let mut block = hpack::request("GET", "/critical");
        if i == 0 {
            hpack::literal_indexed_new_name(&mut block, b"priority", &value);
        }
        block.resize(MAX_FRAME_PAYLOAD, 0x80 | 62);
        let (id, frame) = raw.request_frame(&block);
        ids.push(id);
        wire.extend(frame);
    }
    (ids, wire)
}

/// References in the attack's blocks, each decoding to a `TABLE_VALUE_LEN`-octet value.
fn amplified_references() -> usize {
    let pseudo = hpack::request("GET", "/critical").len();
    let literal = 1 + 1 + 8 + 3 + TABLE_VALUE_LEN;
    (MAX_FRAME_PAYLOAD - pseudo) * AMPLIFIED_REQUESTS - literal
}

/// Attacks `conns` connections at once, `AMPLIFIED_ROUNDS` times (fresh connections each
/// round: h2 closes an attacked connection); returns the smallest peak growth of the
/// rounds (buffers that happen to be full at the same moment only add noise) and how h2
/// treated each connection of the first round.
async fn amplification_case(setup: ServerSetup, conns: usize) -> (u64, Vec<Treatment>) {
    let name = name(&setup);
    let server = start(setup, examples::axum_app::router()).await;
    let mut growth = u64::MAX;
    let mut first_round = None;
    for round in 0..AMPLIFIED_ROUNDS {
        let mut raws = Vec::new();
        for _ in 0..conns {
            let mut raw = RawH2::connect(server.addr, &server.certificate, None)
                .await
                .expect("connect");
            let id = raw
                .request("GET", "/critical", None)
                .await
                .expect("warm-up");
            let log = raw.wait_finished(&[id], SETTLE).await;
            assert!(served(&answer(&log, id)), "{name}: warm-up {log:?}");
            raws.push(raw);
        }
        let base = reset_peak();
        let treatments = futures_util::future::join_all(raws.iter_mut().map(|raw| async move {
            let (ids, wire) = amplification_wire(raw);
            raw.send(wire).await.expect("attack");
            let log = raw.wait_finished(&ids, Duration::from_secs(120)).await;
            let attacks = ids.iter().map(|&id| answer(&log, id)).collect();
            // Usable after the attack? (A closed connection answers nothing.)
            let after = match raw.request("GET", "/critical", None).await {
                Ok(id) => answer(&raw.wait_finished(&[id], SETTLE).await, id),
                Err(_) => Answer::Nothing,
            };
            let log = raw.log();
            Treatment {
                attacks,
                after,
                goaway: log.goaway,
                clean_end: log.end.as_ref().map(Result::is_ok),
            }
        }))
        .await;
        let round_growth = peak_growth(base);
        growth = growth.min(round_growth);
        println!(
            "{name}, {conns} connection(s), round {round}: live heap +{:.2} MiB at peak",
            mib(round_growth)
        );
        first_round.get_or_insert(treatments);
    }
    let treatments = first_round.expect("one round");
    let stats = snapshots(&server);
    println!(
        "{name}, {conns} connection(s): live heap +{:.2} MiB at peak ({:.2} MiB per \
         connection); h2's answers {:?}; wrapper counters {:?}",
        mib(growth),
        mib(growth / conns as u64),
        treatments[0],
        stats.first()
    );
    for s in &stats {
        // h2 may close the connection after the first block: it is the one counted for
        // sure.
        assert!(
            s.priority_values_too_long >= 1,
            "{name}: the amplified request is counted in priority_values_too_long: {s:?}"
        );
    }
    (growth, treatments)
}

#[test]
fn hpack_reference_amplification() {
    run_alone(async {
        println!(
            "each connection: {AMPLIFIED_REQUESTS} header blocks of {MAX_FRAME_PAYLOAD} octets \
             with {} references to a {TABLE_VALUE_LEN}-octet `priority` entry ({:.0} MB of \
             decoded values)",
            amplified_references(),
            (amplified_references() * TABLE_VALUE_LEN) as f64 / 1e6
        );
        for conns in [1usize, 8] {
            let (stock_growth, stock_treatment) = amplification_case(stock(), conns).await;
            for policy in [Policy::Scheduled, Policy::EarlyFlush] {
                let (growth, treatment) = amplification_case(wrapped(policy), conns).await;
                let n = conns as u64;
                println!(
                    "{policy}, {conns} connection(s): +{:.2} MiB per connection, stock \
                     +{:.2} MiB",
                    mib(growth / n),
                    mib(stock_growth / n)
                );
                assert!(
                    growth / n <= stock_growth / n + PER_CONNECTION_MARGIN,
                    "{policy}, {conns} connection(s): live heap +{} B per attacking connection, \
                     stock +{} B (margin {PER_CONNECTION_MARGIN} B)",
                    growth / n,
                    stock_growth / n
                );
                assert_eq!(
                    treatment, stock_treatment,
                    "{policy}: h2 treats the attack the same with and without the wrapper"
                );
                for t in &treatment {
                    let closed_by_h2 = t.goaway.is_some() && t.clean_end == Some(true);
                    assert!(
                        served(&t.after) || closed_by_h2,
                        "{policy}: after the attack the connection serves byte-exact, or h2 \
                         closed it cleanly (GOAWAY, close_notify): {t:?}"
                    );
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------------
// 2. PRIORITY_UPDATE flood.
// ---------------------------------------------------------------------------------------

/// PRIORITY_UPDATE frames sent, a third each for closed, open and not-yet-open streams.
const FLOOD_FRAMES: usize = 2400;
/// Their field values: payload 4 + 16380 = 16384, the server's largest frame.
const FLOOD_VALUE_LEN: usize = 16380;
/// Sent in batches of this many frames, each handed to TLS before the next is queued.
const FLOOD_BATCH: usize = 8;
/// The flood is sent in this many rounds, each measured on its own.
const FLOOD_ROUNDS: usize = 3;
/// First stream id named for streams not open yet.
const NOT_YET_OPEN: u32 = 1_000_001;

struct FloodOutcome {
    growth: u64,
    stats: Option<StatsSnapshot>,
}

async fn priority_update_flood_case(setup: ServerSetup) -> FloodOutcome {
    let name = name(&setup);
    let server = start(setup, app()).await;
    let client = H2Client::connect(server.addr, &server.certificate, H2Options::default())
        .await
        .expect("connect");
    let mut closed = Vec::new();
    for _ in 0..4 {
        let r = client.get("/critical", None).await.expect("request");
        closed.push(u32::from(r.stream_id()));
        let body = read_body(r, None).await.expect("closed stream");
        assert_eq!((body.len, body.pattern_ok), (4096, true), "{name}");
    }
    // Open for the whole flood: their responses begin after 5 s.
    let mut open = Vec::new();
    let mut delayed = Vec::new();
    for _ in 0..4 {
        let r = client
            .get("/delay/5000", Some("u=4"))
            .await
            .expect("request");
        open.push(u32::from(r.stream_id()));
        delayed.push(tokio::spawn(read_body(r, None)));
    }
    let mut value = b"u=0 ".to_vec();
    value.resize(FLOOD_VALUE_LEN, b'x');

    // Rounds: the smallest peak of the rounds is what the flood itself costs (noise from
    // buffers that happen to be full at the same moment only adds).
    let per_round = FLOOD_FRAMES / FLOOD_ROUNDS;
    let mut growth = u64::MAX;
    for round in 0..FLOOD_ROUNDS {
        let base = reset_peak();
        for batch in 0..per_round / FLOOD_BATCH {
            for k in 0..FLOOD_BATCH {
                let i = round * per_round + batch * FLOOD_BATCH + k;
                let target = match i % 3 {
                    0 => closed[i / 3 % closed.len()],
                    1 => open[i / 3 % open.len()],
                    _ => NOT_YET_OPEN + 2 * (i / 3) as u32,
                };
                client.priority_update(target, &value);
            }
            assert!(
                client.injected(SETTLE).await,
                "{name}: the flood was written"
            );
        }
        // A request after the flood: once it is answered, the server has read every frame.
        let r = client.get("/critical", None).await.expect("barrier");
        let body = read_body(r, None).await.expect("barrier");
        assert_eq!((body.len, body.pattern_ok), (4096, true), "{name}");
        growth = growth.min(peak_growth(base));
    }
    let stats = latest(&server);

    // The connection still serves: a 1 MiB download, byte-exact, and the open streams.
    let r = client
        .get("/size/1048576", Some("u=3"))
        .await
        .expect("download");
    let body = read_body(r, None).await.expect("download");
    assert_eq!(
        (body.status, body.len, body.pattern_ok),
        (200, 1 << 20, true),
        "{name}: download after the flood"
    );
    assert_eq!(body.sha256, pattern_sha256(1 << 20), "{name}: sha256");
    for d in delayed {
        let body = d.await.expect("join").expect("open stream");
        assert_eq!(
            (body.len, body.pattern_ok),
            (4096, true),
            "{name}: open stream"
        );
    }
    println!(
        "{name}: {FLOOD_FRAMES} PRIORITY_UPDATEs of {FLOOD_VALUE_LEN}-byte values: live heap \
         +{:.2} MiB at peak; counters {stats:?}",
        mib(growth)
    );
    FloodOutcome { growth, stats }
}

#[test]
fn priority_update_flood() {
    run_alone(async {
        let stock = priority_update_flood_case(stock()).await;
        for policy in [Policy::Scheduled, Policy::EarlyFlush] {
            let out = priority_update_flood_case(wrapped(policy)).await;
            println!(
                "{policy}: +{:.2} MiB, stock +{:.2} MiB",
                mib(out.growth),
                mib(stock.growth)
            );
            assert!(
                out.growth <= stock.growth + PER_CONNECTION_MARGIN,
                "{policy}: live heap +{} B, stock +{} B",
                out.growth,
                stock.growth
            );
            let s = out.stats.expect("wrapped");
            let counted = s.priority_updates_applied
                + s.priority_updates_buffered
                + s.priority_updates_ignored
                + s.priority_updates_invalid;
            assert_eq!(
                counted, FLOOD_FRAMES as u64,
                "{policy}: every frame counted once: {s:?}"
            );
            // Every value is longer than 1 KiB: none may change a priority or be kept.
            assert_eq!(
                (s.priority_updates_applied, s.priority_updates_buffered),
                (0, 0),
                "{policy}: over-long values are neither applied nor buffered: {s:?}"
            );
            assert!(
                s.priority_updates_invalid >= (FLOOD_FRAMES as u64) * 2 / 3,
                "{policy}: the values for open and not-yet-open streams are invalid: {s:?}"
            );
            assert!(
                s.bytes_read >= (FLOOD_FRAMES * (9 + 4 + FLOOD_VALUE_LEN)) as u64,
                "{policy}: bytes_read counts the flood: {s:?}"
            );
        }
    });
}

// ---------------------------------------------------------------------------------------
// 3. DATA frames larger than the queue.
// ---------------------------------------------------------------------------------------

const HUGE_BODY: u64 = 8 << 20;

#[test]
fn oversized_data_frames_are_not_copied_whole() {
    run_alone(async {
        // Without body scheduling: it hands h2 bodies in 16 KiB pieces, so h2 would never
        // write a frame larger than the queue; what is tested here is the queue's bound when
        // an application's chunk is that large.
        let config = FlushConfig::for_policy(Policy::Scheduled).schedule_bodies(false);
        let server = start(configured(config), app()).await;
        let client = H2Client::connect(
            server.addr,
            &server.certificate,
            H2Options {
                max_frame_size: (1 << 24) - 1,
                stream_window: 64 << 20,
                connection_window: 64 << 20,
                recv_buffer: None,
            },
        )
        .await
        .expect("connect");
        client.gate.close();
        let r = client
            .get(&format!("/whole/{HUGE_BODY}"), None)
            .await
            .expect("request");
        let reader = tokio::spawn(read_body(r, None));
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.gate.open();
        let body = reader.await.expect("join").expect("body");
        assert_eq!(
            (body.status, body.len, body.pattern_ok),
            (200, HUGE_BODY, true),
            "byte-exact"
        );
        assert_eq!(body.sha256, pattern_sha256(HUGE_BODY));
        let largest = client
            .log()
            .frames
            .iter()
            .filter(|f| f.kind == kind::DATA)
            .map(|f| f.len)
            .max()
            .unwrap_or(0);
        let s = latest(&server).expect("wrapped");
        println!(
            "largest DATA frame {largest} B; queue high water {} B on the wire, {} B \
             accounted; {s:?}",
            s.queued_bytes_high_water, s.queued_memory_high_water
        );
        assert!(
            largest as u64 > HARD_LIMIT + QUEUE_SLACK,
            "h2 wrote a DATA frame larger than the queue's hard limit (else nothing is tested)"
        );
        assert!(
            s.queued_memory_high_water <= HARD_LIMIT + QUEUE_SLACK,
            "a {largest}-byte DATA frame was held whole: {s:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// 4. Header-only responses count as memory.
// ---------------------------------------------------------------------------------------

/// HEAD requests for a missing path; their 404 header blocks are ~10-15 wire bytes each.
const HEAD_REQUESTS: usize = 20_000;
/// Requests written per TLS write.
const HEAD_BATCH: usize = 50;
/// Requests sent and not yet answered by the application, at most: h2 reads requests
/// faster than hyper's tasks answer them, and past 200 open streams it refuses new ones
/// (after 1024 refusals it closes the connection).
const HEAD_OUTSTANDING: u64 = 64;
/// RST_STREAM error code REFUSED_STREAM.
const REFUSED_STREAM: u32 = 0x7;
/// The queue limits for this test: smaller than the defaults so that a few tens of
/// thousands of requests reach them (the accounting is the same at any size).
const HEAD_SOFT_LIMIT: u64 = 64 << 10;
const HEAD_HARD_LIMIT: u64 = 256 << 10;
/// What the wrapper's live heap may exceed stock's by: its queue as accounted (256 KiB,
/// some 1,800 header blocks at 128 + ~17 bytes each), with room for what a queued unit
/// really costs the allocator (~230 bytes measured) and for noise. Accounted by wire bytes
/// only, the same queue holds every one of the ~11,000 header blocks that do not fit in
/// the socket buffers: ~2.5 MiB more than stock.
const HEAD_MEMORY_MARGIN: u64 = 3 << 19;

/// The demo app, counting the responses it returns in `answered`.
fn counted_demo(answered: Arc<AtomicU64>) -> Router {
    examples::axum_app::router().layer(tower::util::MapResponseLayer::new(move |res: Response| {
        answered.fetch_add(1, Relaxed);
        res
    }))
}

struct HeadOutcome {
    growth: u64,
    stats: Option<StatsSnapshot>,
}

async fn header_flood_case(setup: ServerSetup) -> HeadOutcome {
    let name = name(&setup);
    let answered = Arc::new(AtomicU64::new(0));
    let server = start(setup, counted_demo(answered.clone())).await;
    let mut raw = RawH2::connect(server.addr, &server.certificate, Some(64 * 1024))
        .await
        .expect("connect");
    let warm = raw
        .request("GET", "/critical", None)
        .await
        .expect("warm-up");
    let log = raw.wait_finished(&[warm], SETTLE).await;
    assert!(served(&answer(&log, warm)), "{name}: warm-up");
    let stats = server.connection_stats().last().cloned();

    raw.gate().close();
    let base = reset_peak();
    let mut ids = Vec::with_capacity(HEAD_REQUESTS);
    let mut batches = Vec::new();
    let block = hpack::request("HEAD", "/missing");
    for chunk in 0..HEAD_REQUESTS.div_ceil(HEAD_BATCH) {
        let mut wire = Vec::new();
        for _ in 0..HEAD_BATCH.min(HEAD_REQUESTS - chunk * HEAD_BATCH) {
            let (id, f) = raw.request_frame(&block);
            ids.push(id);
            wire.extend(f);
        }
        batches.push(wire);
    }
    // Paced by the application's answers; it stalls once the server stops reading, and
    // runs on when the reader resumes.
    let sender = raw.sender();
    let sent = Arc::new(AtomicU64::new(0));
    let first = answered.load(Relaxed);
    let (counted, sent_so_far) = (answered.clone(), sent.clone());
    // Refused streams never reach the application: once the reader resumes, what the
    // client received paces it.
    let finished = raw.finished_counter();
    let finished_before = finished();
    let writer = tokio::spawn(async move {
        for wire in batches {
            loop {
                let done = (counted.load(Relaxed) - first).max(finished() - finished_before);
                if sent_so_far.load(Relaxed) <= done + HEAD_OUTSTANDING {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            sent_so_far.fetch_add(HEAD_BATCH as u64, Relaxed);
            if sender.send(wire).await.is_err() {
                return;
            }
        }
    });
    // Until the server stops taking requests: the live heap (in 64 KiB steps) and the
    // queue unchanged for a second.
    let mut last = (0, 0);
    let mut stable_since = Instant::now();
    let settled = wait_for(Duration::from_secs(120), || {
        let now = (
            LIVE.load(Relaxed) >> 16,
            stats.as_ref().map_or(0, |s| s.snapshot().queued_bytes),
        );
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
        stable_since.elapsed() >= Duration::from_secs(1)
    })
    .await;
    assert!(settled, "{name}: the server settled");
    let growth = peak_growth(base);
    let at_pause = stats.as_ref().map(ConnectionStats::snapshot);

    raw.gate().open();
    let wrote = tokio::time::timeout(SETTLE, writer).await;
    assert!(
        wrote.is_ok(),
        "{name}: the server stopped answering after the reader resumed: {} requests sent, \
         {} answered, {} streams finished; counters {:?}",
        sent.load(Relaxed),
        answered.load(Relaxed) - first,
        raw.log().finished - finished_before,
        stats.as_ref().map(ConnectionStats::snapshot)
    );
    let log = raw.wait_finished(&ids, Duration::from_secs(120)).await;
    let missing: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|id| !log.streams.get(id).is_some_and(RawStream::finished))
        .collect();
    // Once the wrapper's queue is full h2 keeps reading requests (its responses wait in
    // h2) until it must refuse a stream past its 100 concurrent ones (stock: 200): that
    // refusal waits for the socket too, and h2 stops reading. A client retries refused
    // streams.
    let refused: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|id| log.streams.get(id).and_then(|s| s.reset) == Some(REFUSED_STREAM))
        .collect();
    println!(
        "{name}: {HEAD_REQUESTS} HEAD requests to a paused reader: live heap +{:.2} MiB at \
         peak; counters at the pause {at_pause:?}; {} streams finished, {} refused, goaway \
         {:?}",
        mib(growth),
        log.finished,
        refused.len(),
        log.goaway
    );
    assert!(
        missing.is_empty(),
        "{name}: every response arrived; {} did not, from stream {:?} ({:?})",
        missing.len(),
        missing.first(),
        log.end
    );
    // h2 refuses streams past its 100 (stock: 200) concurrent ones in both cases: its
    // count lags behind the application's answers. Far fewer than the 1024 refusals that close a connection.
    assert!(
        refused.len() <= 256,
        "{name}: {} streams refused",
        refused.len()
    );
    let mut answered_ok = ids.len() - refused.len();
    let mut retry = refused.len();
    for _ in 0..5 {
        if retry == 0 {
            break;
        }
        let mut retried = Vec::new();
        for _ in 0..retry {
            retried.push(raw.request("HEAD", "/missing", None).await.expect("retry"));
        }
        let log = raw.wait_finished(&retried, SETTLE).await;
        retry = retried
            .iter()
            .filter(|id| log.streams.get(id).and_then(|s| s.reset) == Some(REFUSED_STREAM))
            .count();
        answered_ok += retried.len() - retry;
    }
    let log = raw.log();
    let header_only = log
        .streams
        .values()
        .filter(|s| s.ended && s.reset.is_none() && s.header_blocks == 1 && s.data == 0)
        .count();
    assert_eq!(
        (retry, header_only),
        (0, answered_ok),
        "{name}: every HEAD (refused ones retried) got a header-only response"
    );
    let download = raw
        .request("GET", "/size/1048576", None)
        .await
        .expect("download");
    let log = raw.wait_finished(&[download], SETTLE).await;
    let d = log.streams.get(&download).cloned().unwrap_or_default();
    assert_eq!(
        (d.ended, d.data, d.pattern_ok),
        (true, 1 << 20, true),
        "{name}: a download afterwards is byte-exact"
    );
    HeadOutcome {
        growth,
        stats: at_pause,
    }
}

#[test]
fn header_only_responses_are_accounted() {
    run_alone(async {
        let stock = header_flood_case(stock()).await;
        for policy in [Policy::Scheduled, Policy::EarlyFlush] {
            let config = FlushConfig::for_policy(policy)
                .soft_limit(HEAD_SOFT_LIMIT as usize)
                .hard_limit(HEAD_HARD_LIMIT as usize);
            let out = header_flood_case(configured(config)).await;
            let s = out.stats.expect("wrapped");
            println!(
                "{policy}: queue high water {} B on the wire, {} B accounted (hard limit \
                 {HEAD_HARD_LIMIT}); live heap +{:.2} MiB, stock +{:.2} MiB",
                s.queued_bytes_high_water,
                s.queued_memory_high_water,
                mib(out.growth),
                mib(stock.growth)
            );
            assert!(
                s.queued_memory_high_water <= HEAD_HARD_LIMIT + QUEUE_SLACK,
                "{policy}: queue accounted {} B: {s:?}",
                s.queued_memory_high_water
            );
            assert!(
                out.growth <= stock.growth + HEAD_MEMORY_MARGIN,
                "{policy}: live heap +{} B, stock +{} B: queued header blocks cost more \
                 than the queue accounts for",
                out.growth,
                stock.growth
            );
        }
    });
}
