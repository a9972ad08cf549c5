//! tls-flush end to end: the demo app under real hyper, over real rustls and sockets, with
//! a real h2 client whose taps see TLS records and HTTP/2 frames. Assertions are on bytes,
//! records and frame order, never on wall-clock times.

mod support;

use std::time::Duration;

use integration_tests::server::ServerSetup;
use integration_tests::{TapClient, TestServer};
use support::{client, median};
use tls_flush::Policy;

const DATA: u8 = 0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_streams_arrive_byte_exact_under_every_policy() {
    let sizes: Vec<u64> = (0..50u64)
        .map(|i| {
            [
                0,
                1,
                100,
                4096,
                16383,
                16384,
                16385,
                100_000,
                300_000,
                1 << 20,
            ][i as usize % 10]
                + i
        })
        .collect();
    for (name, setup) in ServerSetup::all() {
        let server = TestServer::demo(setup).await.expect("server");
        let client = client(&server, None).await;
        let mut pending = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let priority = format!("u={}{}", i % 8, if i % 3 == 0 { ", i" } else { "" });
            pending.push((
                n,
                client
                    .start(&format!("/size/{n}"), Some(&priority))
                    .await
                    .expect("send"),
            ));
        }
        let results = futures_util::future::join_all(
            pending
                .into_iter()
                .map(|(n, p)| async move { (n, p.finish().await) }),
        )
        .await;
        for (n, result) in results {
            result
                .map_err(|e| e.to_string())
                .and_then(|response| response.check_pattern(n))
                .unwrap_or_else(|e| panic!("{name}: /size/{n}: {e}"));
        }
        for stats in server.connection_stats() {
            let s = stats.snapshot();
            assert_eq!(s.queued_bytes, 0, "{name}: everything left the queues");
            assert!(s.records_written > 0, "{name}: counters move");
        }
    }
}

/// Background DATA bytes received after the critical request was sent and before the
/// critical response's last DATA frame.
fn background_before_critical(
    client: &TapClient,
    log_index_at_send: usize,
    critical: u32,
    background: &[u32],
) -> usize {
    let frames = client.log().frames;
    let end = frames
        .iter()
        .rposition(|f| f.kind == DATA && f.stream_id == critical)
        .expect("critical DATA seen");
    frames[log_index_at_send..end]
        .iter()
        .filter(|f| f.kind == DATA && background.contains(&f.stream_id))
        .map(|f| f.len)
        .sum()
}

/// The `late` workload (the critical request sent once background data is arriving) with a
/// reader that stops reading while the critical request is sent: everything already handed
/// downstream is ahead of the critical response.
async fn late_critical_with_slow_reader(setup: ServerSetup) -> usize {
    let server = TestServer::demo(setup).await.expect("server");
    let client = client(&server, Some(64 * 1024)).await;
    // Read 96 KiB more, then stop reading: the pause starts at the same point every run.
    client.gate().close_after(96 * 1024);
    // The stream to be raised is the longer one: at its first urgency, the body gate
    // sends the shorter one first, so only a gate that follows the update lets it ahead.
    let raised_path = format!("/size/{RAISED_LEN}");
    let bg1 = client
        .start(&raised_path, Some("u=5, i"))
        .await
        .expect("bg1");
    let bg2 = client.start("/bg/2", Some("u=5, i")).await.expect("bg2");
    let background = [bg1.stream_id(), bg2.stream_id()];
    let bg = tokio::spawn(async move { (bg1.finish().await, bg2.finish().await) });
    client
        .wait_for_data(&background, 32 * 1024, Duration::from_secs(10))
        .await
        .expect("background started");
    client.gate().close();
    let index = client.log().frames.len();
    let critical = client
        .start("/critical", Some("u=0"))
        .await
        .expect("critical");
    let critical_id = critical.stream_id();
    // Let the server fill every buffer it is willing to fill, then read slowly (3.2 MB/s), so
    // that what decides the order is where bytes wait, not how fast loopback drains them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = client
        .read_slowly(16 * 1024, Duration::from_millis(5), critical.finish())
        .await
        .expect("critical response");
    assert_eq!((response.len, response.pattern_ok), (4096, true));
    let (r1, r2) = bg.await.expect("join");
    for (r, len) in [(r1.expect("bg1"), RAISED_LEN), (r2.expect("bg2"), 1 << 20)] {
        assert_eq!((r.len, r.pattern_ok), (len, true));
    }
    background_before_critical(&client, index, critical_id, &background)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_urgent_request_overtakes_queued_background_under_scheduled() {
    // Medians of three: on a loaded 2-core machine single runs vary.
    let mut stock = Vec::new();
    let mut scheduled = Vec::new();
    for _ in 0..3 {
        stock.push(late_critical_with_slow_reader(ServerSetup::default()).await);
        scheduled.push(
            late_critical_with_slow_reader(ServerSetup::with_policy(Policy::Scheduled)).await,
        );
    }
    let (stock_median, scheduled_median) = (median(&mut stock), median(&mut scheduled));
    println!("background bytes before critical: stock {stock:?}, scheduled {scheduled:?}");
    assert!(
        scheduled_median * 3 < stock_median,
        "scheduled let {scheduled_median} background bytes ahead of the critical response \
         (median), stock {stock_median}"
    );
}

/// TLS application-data records the server sent for one 1 MiB response.
async fn records_for_one_mebibyte(setup: ServerSetup) -> usize {
    let server = TestServer::demo(setup).await.expect("server");
    let client = client(&server, None).await;
    // Let the handshake's records (tickets, SETTINGS) pass, then count from here.
    client.get("/size/1", None).await.expect("warm-up");
    let before = client.log().records.len();
    let response = client.get("/size/1048576", None).await.expect("1 MiB");
    assert_eq!((response.len, response.pattern_ok), (1 << 20, true));
    client.log().records[before..]
        .iter()
        .filter(|r| r.content_type == 23)
        .count()
}

/// The median of three connections' [`records_for_one_mebibyte`]: a connection on which h2
/// pauses more often than usual (flow control, the task scheduler) seals more short records,
/// and one such run should not decide the comparison.
async fn median_records_for_one_mebibyte(setup: ServerSetup) -> usize {
    let mut runs = Vec::with_capacity(3);
    for _ in 0..3 {
        runs.push(records_for_one_mebibyte(setup.clone()).await);
    }
    runs.sort_unstable();
    runs[1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_packs_a_mebibyte_into_at_most_0_6x_the_stock_records() {
    let stock = median_records_for_one_mebibyte(ServerSetup::default()).await;
    let stock_4k = records_for_one_mebibyte(ServerSetup {
        record_size: Some(4096),
        ..ServerSetup::default()
    })
    .await;
    println!("records per MiB: stock {stock}, stock-4k {stock_4k}");
    assert!(
        stock >= 128,
        "stock writes a record per frame plus a 9-byte one: {stock}"
    );
    for policy in Policy::ALL {
        let records = median_records_for_one_mebibyte(ServerSetup::with_policy(policy)).await;
        println!("records per MiB: {policy} {records}");
        // `dynamic` starts with four small records by design (1368, 2736, 4096 and 8192
        // bytes over the first 16 KiB); they are not packing failures.
        let ramp = if policy == Policy::Dynamic { 4 } else { 0 };
        assert!(
            records * 10 <= stock * 6 + ramp * 10,
            "{policy}: {records} vs stock {stock}"
        );
    }
}

/// Where the critical response sat in the TLS records of one connection.
struct CriticalRecords {
    /// Bytes of the record carrying the critical DATA frame's last byte that follow it.
    after_data: u64,
    /// The record carrying the critical HEADERS ends with them or with the critical DATA.
    headers_alone: bool,
    /// Records on the connection, and the plaintext bytes they carried.
    records: usize,
    bytes: u64,
}

/// A background download fills every layer while the reader is paused, then `/critical`
/// (pinned `u=0`) is requested and the reader resumes: a background record is being built
/// when the urgent response arrives.
async fn critical_among_background(setup: ServerSetup) -> CriticalRecords {
    let server = TestServer::demo(setup).await.expect("server");
    let client = client(&server, Some(64 * 1024)).await;
    client.gate().close_after(64 * 1024);
    let bg1 = client.start("/bg/1", Some("u=5, i")).await.expect("bg1");
    let id1 = bg1.stream_id();
    client
        .wait_for_data(&[id1], 32 * 1024, Duration::from_secs(10))
        .await
        .expect("background started");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let critical = client.start("/critical", None).await.expect("critical");
    let critical_id = critical.stream_id();
    // The critical response must be queued behind the background before the reader
    // resumes: wait until the wrapper's queue stops changing.
    settle(&server).await;
    client.gate().open();
    let response = critical.finish().await.expect("critical");
    assert_eq!((response.len, response.pattern_ok), (4096, true));
    let bg = bg1.finish().await.expect("bg1");
    assert_eq!((bg.len, bg.pattern_ok), (1 << 20, true));
    let log = client.log();
    let spans = client.record_spans();
    let record_of = |offset: u64| {
        spans
            .iter()
            .copied()
            .find(|&(start, end)| start < offset && offset <= end)
            .expect("a record carries every byte")
    };
    let frame = |kind: u8| {
        log.frames
            .iter()
            .find(|f| f.kind == kind && f.stream_id == critical_id && (kind != DATA || f.len > 0))
            .expect("critical frame")
            .end_offset
    };
    let (headers_end, data_end) = (frame(1), frame(DATA));
    let headers_record = record_of(headers_end);
    CriticalRecords {
        after_data: record_of(data_end).1 - data_end,
        headers_alone: headers_record.1 == headers_end || headers_record.1 == data_end,
        records: spans.len(),
        bytes: spans.last().map_or(0, |s| s.1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urgent_small_response_ends_its_record_and_headers_are_not_buried() {
    let scheduled = critical_among_background(ServerSetup::with_policy(Policy::Scheduled)).await;
    // The control: without the cut, a background record in progress takes the bytes after
    // the critical DATA. Whether a record is in progress at that moment depends on timing
    // (a loaded machine may have drained the queue), so try a few times.
    let mut no_cut = None;
    for _ in 0..6 {
        let run = critical_among_background(ServerSetup {
            config: Some(tls_flush::FlushConfig::for_policy(Policy::Scheduled).urgent_cut(None)),
            ..ServerSetup::default()
        })
        .await;
        let reproduced = run.after_data > 0;
        no_cut = Some(run);
        if reproduced {
            break;
        }
    }
    let no_cut = no_cut.expect("at least one run");
    let stock = critical_among_background(ServerSetup::default()).await;
    for (name, r) in [
        ("scheduled", &scheduled),
        ("no cut", &no_cut),
        ("stock", &stock),
    ] {
        println!(
            "{name}: {} bytes after the critical DATA in its record; HEADERS alone {}; \
             {} records for {} bytes",
            r.after_data, r.headers_alone, r.records, r.bytes
        );
    }
    // The situation the cut exists for: packed records, and without the cut the urgent
    // frame shares its record with the background bytes that follow it.
    assert!(
        no_cut.after_data > 0,
        "without the cut, background bytes follow the critical DATA in its record"
    );
    assert_eq!(
        scheduled.after_data, 0,
        "the urgent DATA frame ends its record"
    );
    assert!(
        scheduled.headers_alone,
        "the critical HEADERS end their record, or share it only with their own DATA"
    );
    // Against stock in the same process: stock also ends the frame's record (it writes
    // every frame as records of its own), at the cost of about twice the records (ours
    // 0.52x stock's on an idle machine, 0.61x in CI with the other tests running: a
    // loaded machine drains the queue sooner and packs fewer frames per record).
    assert!(
        scheduled.records * 4 <= stock.records * 3,
        "records: scheduled {} against stock's {}",
        scheduled.records,
        stock.records
    );
}

/// What happened after a PRIORITY_UPDATE raised background stream 1 to `u=0` while the
/// reader paused.
struct AfterUpdate {
    /// Longest run of consecutive stream-1 DATA frames received after the update.
    longest_run: usize,
    /// Stream-1 DATA frames received after the update.
    raised_frames: usize,
    /// Stream 2's DATA bytes received after the update and before stream 1 finished.
    other_bytes: usize,
    /// Server counters: updates applied, DATA frames moved ahead after the update.
    applied: Option<u64>,
    reordered: Option<u64>,
}

/// Waits until the wrapper's queue stopped changing for 100 ms (300 ms at least).
async fn settle(server: &TestServer) {
    let queued = || {
        server
            .connection_stats()
            .first()
            .map(|s| s.snapshot().queued_bytes)
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut last = queued();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = queued();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Length of the stream the client raises (the other one has 1 MiB).
const RAISED_LEN: u64 = 1_310_720;

async fn raised_stream_after_update(setup: ServerSetup) -> AfterUpdate {
    let server = TestServer::demo(setup).await.expect("server");
    let client = client(&server, Some(64 * 1024)).await;
    client.gate().close_after(96 * 1024);
    // The stream to be raised is the longer one: at its first urgency, the body gate
    // sends the shorter one first, so only a gate that follows the update lets it ahead.
    let raised_path = format!("/size/{RAISED_LEN}");
    let bg1 = client
        .start(&raised_path, Some("u=5, i"))
        .await
        .expect("bg1");
    let bg2 = client.start("/bg/2", Some("u=5, i")).await.expect("bg2");
    let (id1, id2) = (bg1.stream_id(), bg2.stream_id());
    let done = tokio::spawn(async move { (bg1.finish().await, bg2.finish().await) });
    client
        .wait_for_data(&[id1, id2], 32 * 1024, Duration::from_secs(10))
        .await
        .expect("background started");
    client.gate().close();
    let index = client.log().frames.len();
    let reordered_before = server
        .connection_stats()
        .first()
        .map(|s| s.snapshot().data_frames_reordered);
    client.send_priority_update(id1, "u=0");
    // Let every layer fill up while the reader is paused (the wrapper's queue settles, or
    // the kernel's buffers do without it), then read as fast as possible.
    settle(&server).await;
    client.gate().open();
    let (r1, r2) = done.await.expect("join");
    for (r, len) in [(r1.expect("bg1"), RAISED_LEN), (r2.expect("bg2"), 1 << 20)] {
        assert_eq!((r.len, r.pattern_ok), (len, true));
    }
    let frames = client.log().frames;
    let data: Vec<_> = frames[index..]
        .iter()
        .filter(|f| f.kind == DATA && f.len > 0)
        .collect();
    let mut longest = 0;
    let mut run = 0;
    for f in &data {
        run = if f.stream_id == id1 { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let end = data.iter().rposition(|f| f.stream_id == id1).unwrap_or(0);
    let other = data[..end]
        .iter()
        .filter(|f| f.stream_id == id2)
        .map(|f| f.len)
        .sum();
    let snapshot = server.connection_stats().first().map(|s| s.snapshot());
    AfterUpdate {
        longest_run: longest,
        raised_frames: data.iter().filter(|f| f.stream_id == id1).count(),
        other_bytes: other,
        applied: snapshot.map(|s| s.priority_updates_applied),
        reordered: snapshot
            .zip(reordered_before)
            .map(|(s, before)| s.data_frames_reordered - before),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_update_moves_a_live_background_stream_ahead() {
    // Five runs of each, alternating, compared by their medians (the interleaving of h2's
    // frames below the wrapper varies from run to run).
    let mut stock = Vec::new();
    let mut scheduled = Vec::new();
    for _ in 0..5 {
        stock.push(raised_stream_after_update(ServerSetup::default()).await);
        scheduled
            .push(raised_stream_after_update(ServerSetup::with_policy(Policy::Scheduled)).await);
    }
    let other_bytes = |runs: &[AfterUpdate]| {
        let mut v: Vec<usize> = runs.iter().map(|r| r.other_bytes).collect();
        median(&mut v)
    };
    for (s, st) in scheduled.iter().zip(&stock) {
        println!(
            "after PRIORITY_UPDATE u=0: longest run of the raised stream {} frames (stock {}); \
             other stream's bytes before it finished {} (stock {}); frames the wrapper moved \
             ahead {:?} (the rest of the move happens at the source: the body gate)",
            s.longest_run, st.longest_run, s.other_bytes, st.other_bytes, s.reordered
        );
    }
    for run in &scheduled {
        assert_eq!(
            run.applied,
            Some(1),
            "the update was applied to the live stream"
        );
    }
    // On the wire: the raised stream's frames that the wrapper held arrive back to back, the
    // longest run holding at least half of the raised stream's frames after the update
    // (typically 54-60 of ~61). Stock is printed but not compared: whether h2's round robin
    // happens to give it one long run depends on which stream's window opens first, so its
    // longest run ranges from 3 to 64 frames between runs of the same test.
    let back_to_back = scheduled
        .iter()
        .filter(|r| 2 * r.longest_run >= r.raised_frames)
        .count();
    let longest_run = |runs: &[AfterUpdate]| {
        let mut v: Vec<usize> = runs.iter().map(|r| r.longest_run).collect();
        median(&mut v)
    };
    println!(
        "medians: longest run {} (stock {}); other stream's bytes {} (stock {})",
        longest_run(&scheduled),
        longest_run(&stock),
        other_bytes(&scheduled),
        other_bytes(&stock)
    );
    assert!(
        back_to_back >= 3,
        "the raised stream's frames arrived back to back in only {back_to_back} of 5 runs: \
         longest runs {:?} of {:?} frames",
        scheduled.iter().map(|r| r.longest_run).collect::<Vec<_>>(),
        scheduled
            .iter()
            .map(|r| r.raised_frames)
            .collect::<Vec<_>>()
    );
    // And the other stream's bytes that still came before the raised stream finished: at
    // most half of stock's (typically 0-160 KB against stock's 800-1050 KB). The wrapper
    // takes the other stream's frames into its queue instead of blocking h2 on them, and
    // h2 holds less above it (128 KiB per stream instead of hyper's 400 KiB).
    let (o, ost) = (other_bytes(&scheduled), other_bytes(&stock));
    assert!(
        2 * o <= ost,
        "the other stream's bytes before the raised one finished: median {o} against stock's {ost}"
    );
}

/// The download the client raises in [`other_bytes_after_raising_the_longer`] (within the
/// client's stream window, so that flow control never stalls it)...
const LONGER: u64 = 3584 << 10;
/// ...and the shorter one of the same urgency.
const SHORTER: u64 = 3 << 20;

/// Two downloads of one urgency with known lengths, read as fast as they come; once 256 KiB
/// have arrived the client raises the longer one to `u=0`. Returns the shorter one's DATA
/// bytes that arrived after the update and before the raised one ended, retrying a run in
/// which the raised one ended before the update was sent: on loopback the downloads take
/// milliseconds, and on a loaded machine (CI) the test's task may not run again before
/// they are over (the update then measures nothing).
async fn other_bytes_after_raising_the_longer(setup: impl Fn() -> ServerSetup) -> usize {
    const ATTEMPTS: usize = 5;
    for _ in 0..ATTEMPTS {
        if let Some(bytes) = raise_the_longer_once(setup()).await {
            return bytes;
        }
    }
    panic!("the raised download ended before its update was sent in {ATTEMPTS} runs");
}

/// One run of [`other_bytes_after_raising_the_longer`]: `None` when the raised download
/// ended before the update was sent.
async fn raise_the_longer_once(setup: ServerSetup) -> Option<usize> {
    let server = TestServer::demo(setup).await.expect("server");
    let client = client(&server, None).await;
    let (longer, shorter) = (format!("/size/{LONGER}"), format!("/size/{SHORTER}"));
    let raised = client.start(&longer, Some("u=5")).await.expect("longer");
    let other = client.start(&shorter, Some("u=5")).await.expect("shorter");
    let (raised_id, other_id) = (raised.stream_id(), other.stream_id());
    let done = tokio::spawn(async move { (raised.finish().await, other.finish().await) });
    client
        .wait_for_data(&[raised_id, other_id], 256 << 10, Duration::from_secs(10))
        .await
        .expect("both started");
    let index = client.log().frames.len();
    client.send_priority_update(raised_id, "u=0");
    let (r1, r2) = done.await.expect("join");
    for (r, len) in [(r1.expect("raised"), LONGER), (r2.expect("other"), SHORTER)] {
        assert_eq!((r.len, r.pattern_ok), (len, true));
    }
    let raised_after_update = client.log().frames[index..]
        .iter()
        .any(|f| f.kind == DATA && f.stream_id == raised_id);
    // The raised download plays the critical response, the other one the background.
    raised_after_update.then(|| background_before_critical(&client, index, raised_id, &[other_id]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_update_raises_a_longer_download_over_its_shorter_sibling_at_the_source() {
    // At one urgency the body gate sends the shorter body first; raised, the longer one
    // must go first at the source too, not only in the wrapper's queue (which would hold
    // little of it). Five runs of each, compared by their medians.
    let (mut stock, mut scheduled) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        stock.push(other_bytes_after_raising_the_longer(ServerSetup::default).await);
        let setup = || ServerSetup::with_policy(Policy::Scheduled);
        scheduled.push(other_bytes_after_raising_the_longer(setup).await);
    }
    println!(
        "the shorter download's bytes after the update, before the raised one ended: \
         scheduled {scheduled:?}, stock {stock:?}"
    );
    let (ours, theirs) = (median(&mut scheduled), median(&mut stock));
    // Stock's round robin finishes the shorter one first: most of its 3 MiB (measured
    // medians 1.9-2.7 MiB; the gate without the update 2.7-2.9 MiB).
    assert!(
        theirs > SHORTER as usize / 3,
        "stock sent only {theirs} bytes"
    );
    // Ours: what was below the gate when the update came (h2's buffers, the wrapper's
    // queue, the socket) and the shorter one's share at u=5 against u=0. On loopback the
    // update leaves when the test's task next looks (every millisecond, at gigabytes per
    // second), so how much was below the gate varies with the machine: measured medians
    // 100-250 KiB once, 0.6-0.9 MiB later (stock's 1.8-2.4 MiB in the same runs). Hence
    // against stock's, not against a fixed size: at most two thirds of it (the gate
    // without the update sends more than stock, 2.7-2.9 MiB).
    assert!(
        3 * ours <= 2 * theirs,
        "scheduled sent {ours} bytes of the shorter download before the raised one ended, \
         stock {theirs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_for_finished_streams_and_malformed_updates_are_counted_and_harmless() {
    let server = TestServer::demo(ServerSetup::with_policy(Policy::Scheduled))
        .await
        .expect("server");
    let client = client(&server, None).await;
    let first = client.get("/critical", None).await.expect("first");
    // A finished stream: ignored.
    client.send_priority_update(first.stream_id, "u=7");
    // Malformed: short payload, prioritized stream 0, non-ASCII value, sent on a stream.
    client.send_raw_frame(0x10, 0, 0, &[0, 0, 1]);
    client.send_raw_frame(0x10, 0, 0, b"\0\0\0\0u=1");
    client.send_raw_frame(0x10, 0, 0, b"\0\0\0\x09u=\xff");
    client.send_raw_frame(0x10, 0, 1, b"\0\0\0\x09u=1");
    // An update for a stream not yet open is kept for it.
    client.send_priority_update(first.stream_id + 2, "u=1");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let snapshot = loop {
        let s = server.connection_stats()[0].snapshot();
        if s.priority_updates_invalid + s.priority_updates_ignored + s.priority_updates_buffered
            >= 6
        {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "updates not seen: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(snapshot.priority_updates_ignored, 1, "{snapshot:?}");
    assert_eq!(snapshot.priority_updates_invalid, 4, "{snapshot:?}");
    assert_eq!(snapshot.priority_updates_buffered, 1, "{snapshot:?}");
    assert_eq!(snapshot.priority_updates_applied, 0, "{snapshot:?}");
    // The connection keeps serving.
    let again = client.get("/size/70000", None).await.expect("after");
    assert_eq!((again.len, again.pattern_ok), (70000, true));
}

/// The record tap under the client's TLS sees exactly the records the server wrote: the
/// wrapper's own count of records handed to rustls equals the application-data records the
/// tap parsed from the ciphertext (the test servers send no session tickets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_tap_counts_what_rustls_wrote() {
    for record_size in [None, Some(4096)] {
        let server = TestServer::demo(ServerSetup {
            record_size,
            ..ServerSetup::with_policy(Policy::Scheduled)
        })
        .await
        .expect("server");
        let client = client(&server, None).await;
        for path in ["/size/1", "/critical", "/size/300000", "/bg/x"] {
            let r = client.get(path, None).await.expect("response");
            assert!(r.pattern_ok, "{path}");
        }
        let written = server.connection_stats()[0].snapshot().records_written;
        let tapped = client.record_spans().len() as u64;
        println!(
            "records: wrapper wrote {written}, tap saw {tapped} (record size {record_size:?})"
        );
        assert_eq!(tapped, written, "record size {record_size:?}");
    }
}
