//! Where records end and how they are written. An urgent small DATA frame ends its record
//! (the early cut), which is flushed at once even through a transport that buffers without
//! saying so, and urgent responses ready together share one cut (on an unpaced path, also
//! those of h2's next batch); the connection's first flight waits for the first DATA to
//! share its record; on
//! a path the write budget does not pace, bulk DATA leaves in writes of four full records,
//! also across h2's flush after every frame; behind a full window the rest of a bulk frame
//! begun does not wait ahead of a more urgent one, and the empty frame that ends a response
//! does not wait at all.

use std::time::Duration;

use tls_flush::{FlushConfig, Policy};
use tls_flush_testkit::{
    client_with_requests, comparable_preset, data, delivered, encode_all, parse_frames, positions,
    response_headers, settings_frame, started, Buffering, Event, Frame, Harness, SimulatedPath,
    Wire, ACK, END_STREAM, HEADER_LEN, MAX_RECORD,
};

/// A transport that records every write and flush (`buffering` as given), the client
/// sending `requests`.
fn recording_wire(buffering: Buffering, requests: &[(u32, Option<&str>)]) -> Wire {
    let mut w = Wire::open(buffering, client_with_requests(requests));
    w.record_events = true;
    w
}

/// `policy` over a [`recording_wire`], having read `requests`.
fn recording(policy: Policy, buffering: Buffering, requests: &[(u32, Option<&str>)]) -> Harness {
    started(
        comparable_preset(policy),
        recording_wire(buffering, requests),
    )
}

/// [`recording`] `scheduled` after one `u=3` request (stream 1), on a path with a wide
/// window (10,000 segments, acknowledged at once) and minimum RTT `min_rtt`: under a
/// millisecond the write budget does not pace it.
fn recording_on_path(min_rtt: Duration) -> Harness {
    recording_on_path_with(
        min_rtt,
        &[(1, Some("u=3"))],
        comparable_preset(Policy::Scheduled),
    )
}

/// [`recording_on_path`] with `config`, after `requests`.
fn recording_on_path_with(
    min_rtt: Duration,
    requests: &[(u32, Option<&str>)],
    config: FlushConfig,
) -> Harness {
    let mut w = recording_wire(Buffering::Off, requests);
    w.path = Some(SimulatedPath {
        cwnd: 10_000,
        mss: 65_483,
        min_rtt,
        delivery_rate: 0,
        // Past slow start and a drop (the kernel is asked to pace only then).
        ssthresh: 10_000,
        acked_per_read: 1 << 30,
        retransmits: 1,
    });
    started(config, w)
}

/// `policy` without anticipation (a bulk frame begins although a more urgent request was
/// read) over a [`recording_wire`] behind a full window of `cwnd` segments, nothing
/// acknowledged until the test lets ACKs come back, having read `requests`.
fn recording_behind_full_window(
    policy: Policy,
    requests: &[(u32, Option<&str>)],
    cwnd: u32,
) -> Harness {
    let mut w = recording_wire(Buffering::Off, requests);
    w.path = Some(SimulatedPath::full_window(cwnd));
    started(comparable_preset(policy).anticipate(None), w)
}

/// An urgent small DATA frame ends its record, and the record is flushed at once, here with
/// a transport that reports its buffered output (as rustls does).
#[test]
fn urgent_small_data_ends_its_record_and_is_flushed() {
    let mut h = recording(
        Policy::EarlyFlush,
        Buffering::Reported,
        &[(1, Some("u=0")), (3, None)],
    );
    h.write_all(&settings_frame(0, &[]).encode()).unwrap();
    h.flush().unwrap();
    let burst = encode_all(&[
        response_headers(1),
        data(1, 0, 100, true),
        response_headers(3),
        data(3, 0, 100, false),
    ]);
    h.write_all(&burst).unwrap();
    // SETTINGS (empty), then the record cut right after stream 1's DATA.
    let urgent_end = HEADER_LEN + (HEADER_LEN + 1) + (HEADER_LEN + 100);
    let w = h.wire.borrow();
    assert_eq!(
        w.accepted.len(),
        urgent_end,
        "the record must end right after the urgent DATA frame, the rest waits for more"
    );
    assert_eq!(
        w.flushed,
        w.accepted.len(),
        "the urgent record was not flushed"
    );
    assert_eq!(w.event_summary(), (urgent_end, Some(urgent_end)));
    drop(w);
    assert_eq!(h.stats().early_cuts, 1);
    h.settle().unwrap();
    h.shutdown().unwrap();
    assert_eq!(h.output().len(), HEADER_LEN + burst.len());
}

/// On an unpaced path (loopback, a LAN) an urgent response's record waits for h2's flush
/// and a few more turns, for the urgent responses h2 writes next to share it and its flush
/// (one system call instead of one per response); on a paced path it is cut and flushed as
/// soon as h2 writes it.
#[test]
fn urgent_responses_of_successive_h2_batches_share_a_write_on_an_unpaced_path() {
    let requests = [(1, Some("u=0")), (3, Some("u=0"))];
    let response = |stream| encode_all(&[response_headers(stream), data(stream, 0, 100, true)]);
    let one = HEADER_LEN + 1 + HEADER_LEN + 100;
    for (min_rtt, waits) in [
        (Duration::from_micros(30), true),
        (Duration::from_millis(20), false),
    ] {
        // No anticipation: the first DATA does not wait for the other urgent response.
        let config = comparable_preset(Policy::Scheduled).anticipate(None);
        let mut h = recording_on_path_with(min_rtt, &requests, config);
        h.write_all(&settings_frame(0, &[]).encode()).unwrap();
        h.settle().unwrap();
        let settings = h.wire.borrow().accepted.len();
        h.write_all(&response(1)).unwrap();
        h.flush().unwrap();
        {
            let w = h.wire.borrow();
            let expected = if waits { settings } else { settings + one };
            assert_eq!(
                w.accepted.len(),
                expected,
                "min RTT {min_rtt:?}: after the first: {:?}",
                w.events
            );
            assert_eq!(w.flushed, w.accepted.len(), "min RTT {min_rtt:?}");
        }
        // h2's next batch, in a turn the record waited for; then the turns it may still
        // wait, each a flush that woke the task: four turns in all (the first above), so
        // the fourth flush from here writes it.
        h.write_all(&response(3)).unwrap();
        let mut flushes = 0;
        while h.wire.borrow().accepted.len() < settings + 2 * one {
            assert!(
                flushes < 4,
                "min RTT {min_rtt:?}: still waiting after {flushes} flushes"
            );
            h.flush().unwrap();
            flushes += 1;
        }
        h.settle().unwrap();
        let w = h.wire.borrow();
        assert_eq!(w.accepted.len(), settings + 2 * one, "min RTT {min_rtt:?}");
        assert_eq!(w.flushed, w.accepted.len(), "min RTT {min_rtt:?}: flushed");
        let writes: Vec<usize> = w.events.iter().filter_map(Event::written).collect();
        let last = *writes.last().unwrap();
        let expected = if waits { 2 * one } else { one };
        assert_eq!(last, expected, "min RTT {min_rtt:?}: {writes:?}");
        drop(w);
        let cuts = if waits { 1 } else { 2 };
        assert_eq!(h.stats().early_cuts, cuts, "min RTT {min_rtt:?}");
    }
}

/// Urgent responses ready in the same turn share one record and one flush: the cut comes
/// right after the last of them, and the less urgent response's DATA is not in it (its
/// header block is: header blocks leave in HPACK order, as without the batch).
#[test]
fn urgent_responses_ready_together_share_one_cut() {
    let mut h = recording(
        Policy::Scheduled,
        Buffering::Silent,
        &[(1, Some("u=0")), (3, Some("u=0")), (5, Some("u=5"))],
    );
    h.write_all(&settings_frame(0, &[]).encode()).unwrap();
    h.settle().unwrap();
    let before = h.wire.borrow().events.len();
    let burst = encode_all(&[
        response_headers(1),
        data(1, 0, 100, true),
        response_headers(3),
        data(3, 0, 100, true),
        response_headers(5),
        data(5, 0, 100, false),
    ]);
    h.write_all(&burst).unwrap();
    let end = HEADER_LEN + 3 * (HEADER_LEN + 1) + 2 * (HEADER_LEN + 100);
    let w = h.wire.borrow();
    assert_eq!(
        w.events[before..],
        [
            Event::Write {
                from: HEADER_LEN,
                to: end
            },
            Event::Flush { flushed: end }
        ],
        "one record, flushed once, must hold both urgent responses and end right after \
         the second; transport events: {:?}",
        w.events
    );
    // The record's last frame is stream 3's DATA (type 0, stream id 3).
    let last = &w.accepted[end - (HEADER_LEN + 100)..];
    assert_eq!((last[3], &last[5..9]), (0, &3u32.to_be_bytes()[..]));
    drop(w);
    assert_eq!(
        h.stats().early_cuts,
        1,
        "one cut for the batch, not one per response"
    );
    h.settle().unwrap();
    h.shutdown().unwrap();
    assert_eq!(h.output().len(), HEADER_LEN + burst.len());
}

/// The urgent cut flushes the record it ends after writing it, also through a transport
/// that buffers without saying so (`has_buffered_output` left at the trait's default), where
/// nothing else would flush it: the transport sees the cut record written, then a flush
/// covering all of it, within the write that completed the urgent frame.
#[test]
fn urgent_cut_record_is_flushed_after_it_is_written() {
    let mut h = recording(Policy::EarlyFlush, Buffering::Silent, &[(1, Some("u=0"))]);
    h.write_all(&settings_frame(0, &[]).encode()).unwrap();
    // The lone SETTINGS waits a moment for DATA to share its record (first flight), then
    // goes on its own.
    h.settle().unwrap();
    let settings_events = vec![
        Event::Write {
            from: 0,
            to: HEADER_LEN,
        },
        Event::Flush {
            flushed: HEADER_LEN,
        },
    ];
    assert_eq!(h.wire.borrow().events, settings_events);
    h.write_all(&encode_all(&[response_headers(1), data(1, 0, 100, true)]))
        .unwrap();
    assert_eq!(h.stats().early_cuts, 1);
    let w = h.wire.borrow();
    let end = 3 * HEADER_LEN + 1 + 100;
    assert_eq!(w.accepted.len(), end);
    assert_eq!(
        w.events[settings_events.len()..],
        [
            Event::Write {
                from: HEADER_LEN,
                to: end
            },
            Event::Flush { flushed: end }
        ],
        "the cut record must be written, then flushed; transport events: {:?}",
        w.events
    );
}

/// The connection's first record: the server's SETTINGS, its ACK and a header block wait
/// for the first DATA and leave with it in one write (one segment of the initial window,
/// not three), while a lone SETTINGS still goes once the short wait is over.
#[test]
fn the_first_flight_shares_one_record_with_the_first_data() {
    for policy in [Policy::EarlyFlush, Policy::Scheduled] {
        let mut h = recording(policy, Buffering::Silent, &[(1, Some("u=3"))]);
        h.write_all(&settings_frame(0, &[]).encode()).unwrap();
        h.flush().unwrap();
        h.write_all(&settings_frame(ACK, &[]).encode()).unwrap();
        h.flush().unwrap();
        h.write_all(&encode_all(&[response_headers(1)])).unwrap();
        h.flush().unwrap();
        assert!(
            h.wire.borrow().accepted.is_empty(),
            "{policy:?}: control frames went before any DATA"
        );
        h.write_all(&encode_all(&[data(1, 0, 3000, false)]))
            .unwrap();
        h.flush().unwrap();
        h.settle().unwrap();
        let w = h.wire.borrow();
        let first = match w.events.first() {
            Some(Event::Write { from: 0, to }) => *to,
            other => panic!("{policy:?}: {other:?}"),
        };
        assert!(
            first >= 3 * HEADER_LEN + 1 + HEADER_LEN + 3000,
            "{policy:?}: the first write took {first} bytes"
        );
    }
    // Nothing follows: the SETTINGS goes on its own once the wait is over.
    let w = Wire::open(Buffering::Silent, client_with_requests(&[]));
    let mut h = started(comparable_preset(Policy::Scheduled), w);
    h.write_all(&settings_frame(0, &[]).encode()).unwrap();
    h.settle().unwrap();
    assert_eq!(h.wire.borrow().accepted.len(), HEADER_LEN);
}

/// h2 flushes after every frame it writes: on an unpaced path bulk DATA still leaves in
/// writes of four full records, each flush right after a write waiting (the task woken)
/// while fewer are queued; the flush that follows no write (h2's batch is over) writes
/// the rest.
#[test]
fn an_unpaced_path_packs_wide_writes_across_h2s_per_frame_flushes() {
    let mut h = recording_on_path(Duration::from_micros(30));
    let mut input = vec![settings_frame(0, &[]), response_headers(1)];
    h.write_all(&encode_all(&input)).unwrap();
    h.flush().unwrap();
    h.settle().unwrap();
    // Nine full frames and a short last one: two writes of four records, then the rest.
    let body: Vec<Frame> = (0..10)
        .map(|i| data(1, i, if i == 9 { 100 } else { 16384 }, i == 9))
        .collect();
    let writes_before = h.wire.borrow().events.len();
    for frame in &body {
        h.write_all(&frame.encode()).unwrap();
        h.flush().unwrap();
    }
    let sizes = |h: &Harness| -> Vec<usize> {
        h.wire.borrow().events[writes_before..]
            .iter()
            .filter_map(Event::written)
            .collect()
    };
    assert_eq!(
        sizes(&h),
        [4 * MAX_RECORD, 4 * MAX_RECORD],
        "while h2 writes"
    );
    // h2's batch is over: its next flush comes without a write.
    h.settle().unwrap();
    let after = sizes(&h);
    assert!(after.len() > 2 && after.len() <= 4, "{after:?}");
    input.extend(body);
    let (_, perm) = delivered(&mut h, &input);
    assert_eq!(perm.len(), input.len());
}

/// Bulk DATA on a path the write budget does not pace (loopback, a LAN: minimum RTT under a
/// millisecond) leaves in writes of four full records, one system call for four; on a
/// paced path, even with a wide window, every write is one record, and the kernel is
/// asked once to pace the socket.
#[test]
fn an_unpaced_path_takes_writes_of_four_records() {
    for (min_rtt, want, pacing_requests) in [
        (Duration::from_micros(30), 4 * MAX_RECORD, 0),
        (Duration::from_millis(20), MAX_RECORD, 1),
    ] {
        let mut h = recording_on_path(min_rtt);
        let mut input = vec![settings_frame(0, &[]), response_headers(1)];
        input.extend((0..12).map(|i| data(1, i, 16384, i == 11)));
        h.write_all(&encode_all(&input)).unwrap();
        let (_, perm) = delivered(&mut h, &input);
        assert_eq!(perm.len(), input.len());
        let w = h.wire.borrow();
        let largest = w.events.iter().filter_map(Event::written).max();
        assert_eq!(largest, Some(want), "min RTT {min_rtt:?}: {:?}", w.events);
        assert_eq!(w.pacing_requests, pacing_requests, "min RTT {min_rtt:?}");
    }
}

/// Behind a full window, a bulk DATA frame that does not fit the record the write budget
/// allows is split where the record ends, and an urgent response queued meanwhile goes
/// ahead of its rest: nothing can go between the bytes of one frame, and behind a
/// competitor's queue the rest of a 16 KiB frame paced by the ACK clock held a `late`
/// critical response two round trips. `early-flush`, which reorders nothing, sends the whole
/// frame first. Every frame arrives whole once the parts are joined.
#[test]
fn an_urgent_response_overtakes_the_rest_of_a_bulk_frame_split_at_the_record_end() {
    for (policy, overtakes) in [(Policy::Scheduled, true), (Policy::EarlyFlush, false)] {
        let requests = [(1, Some("u=5, i")), (3, Some("u=0"))];
        let mut h = recording_behind_full_window(policy, &requests, 4);
        let mut input = vec![settings_frame(0, &[]), response_headers(1)];
        input.push(data(1, 0, 16384, true));
        h.write_all(&encode_all(&input)).unwrap();
        h.flush().unwrap();
        let urgent = [response_headers(3), data(3, 0, 100, true)];
        h.write_all(&encode_all(&urgent)).unwrap();
        h.flush().unwrap();
        input.extend(urgent);
        let out = parse_frames(&h.output()).unwrap();
        let urgent_at = positions(&out, |f| f.stream() == 3 && f.is_data());
        let bulk_parts = positions(&out, |f| f.stream() == 1 && f.is_data());
        if overtakes {
            assert_eq!(
                urgent_at.len(),
                1,
                "{policy:?}: the urgent response is out: {out:?}"
            );
            let ahead: usize = bulk_parts.iter().map(|&p| out[p].payload.len()).sum();
            assert!(
                ahead < 16384 && bulk_parts.iter().all(|&p| out[p].flags & END_STREAM == 0),
                "{policy:?}: only parts of the bulk frame went ahead: {out:?}"
            );
        } else {
            assert!(
                bulk_parts.first() < urgent_at.first() && out[bulk_parts[0]].payload.len() == 16384,
                "{policy:?}: the whole bulk frame goes first: {out:?}"
            );
        }
        // ACKs come back: everything leaves.
        h.acknowledge_everything();
        let (out, _) = delivered(&mut h, &input);
        assert!(out
            .iter()
            .any(|f| f.stream() == 1 && f.payload.len() == 16384));
    }
}

/// Behind a full window, the empty DATA frame that ends a response (what hyper sends after
/// a streamed body: tower-http's `ServeDir` finds a file's end one read after its last
/// bytes) is not bulk the write budget holds back: the client waits for it to finish the
/// response, and nothing waits behind its nine bytes. In the browser lab a page's `u=1`
/// API answer had its bytes on the wire and its end a round trip later, once the window
/// had room after a background download's records.
#[test]
fn a_response_end_does_not_wait_for_the_window() {
    let requests = [(1, Some("u=2")), (3, Some("u=5, i"))];
    let mut h = recording_behind_full_window(Policy::Scheduled, &requests, 4);
    // The answer's bytes fit the window; a download fills the rest, and more waits.
    let mut input = vec![
        settings_frame(0, &[]),
        response_headers(1),
        data(1, 0, 2000, false),
    ];
    input.extend([response_headers(3), data(3, 0, 16384, false)]);
    h.write_all(&encode_all(&input)).unwrap();
    h.flush().unwrap();
    let end = data(1, 1, 0, true);
    h.write_all(&encode_all(std::slice::from_ref(&end)))
        .unwrap();
    h.flush().unwrap();
    input.push(end);
    let out = parse_frames(&h.output()).unwrap();
    let download: usize = out
        .iter()
        .filter(|f| f.stream() == 3 && f.is_data())
        .map(|f| f.payload.len())
        .sum();
    assert!(download < 16384, "the window is full: {out:?}");
    assert!(
        out.iter()
            .any(|f| f.stream() == 1 && f.is_data() && f.flags & END_STREAM != 0),
        "the answer's end left before the window had room: {out:?}"
    );
    h.acknowledge_everything();
    delivered(&mut h, &input);
}

/// In a connection's first round trip of bulk a download leaves room in the window for a
/// more urgent answer asked for just after it (a browser asks for a page's resources in
/// bursts as it parses): the answer leaves whole while nothing is acknowledged, where
/// the download's first flight would otherwise have filled the window and left the
/// answer a round trip for ACKs. `early-flush` (no write budget, as stock) writes the whole
/// download first.
#[test]
fn a_first_download_leaves_room_for_an_answer_asked_for_after_it() {
    let requests = [(1, Some("u=3, i")), (3, Some("u=1"))];
    let mut input = vec![settings_frame(0, &[]), response_headers(1)];
    input.extend((0..4).map(|i| data(1, i, 16384, false)));
    let answer = [response_headers(3), data(3, 0, 4096, true)];
    let window = 10;
    for policy in [Policy::Scheduled, Policy::EarlyFlush] {
        let mut h = recording_behind_full_window(policy, &requests, window);
        h.write_all(&encode_all(&input)).unwrap();
        h.flush().unwrap();
        h.write_all(&encode_all(&answer)).unwrap();
        h.flush().unwrap();
        let out = parse_frames(&h.output()).unwrap();
        let download: usize = out
            .iter()
            .filter(|f| f.stream() == 1 && f.is_data())
            .map(|f| f.payload.len())
            .sum();
        let answer_left = out
            .iter()
            .any(|f| f.stream() == 3 && f.is_data() && f.flags & END_STREAM != 0);
        if policy == Policy::Scheduled {
            assert!(answer_left, "the answer waited for the window: {out:?}");
            assert!(
                download < (window as usize - 3) * 1448,
                "the download's first flight kept no room: {download} bytes"
            );
        } else {
            assert!(
                download >= 4 * 16384,
                "early-flush writes the download whole"
            );
        }
        h.acknowledge_everything();
        let mut all = input.clone();
        all.extend(answer.iter().cloned());
        delivered(&mut h, &all);
    }
}

/// On a paced path a response that ends ends its record before a less urgent stream's DATA:
/// the client decrypts a record only once all of it has arrived, so a download's bytes
/// after the answer's end would delay the answer by their wire time (in the browser lab the
/// demo's `u=1` answer at the head of a 14 KiB record with a `u=3` download took 1-10 ms
/// from its first byte to its end, where a record of its own takes 2). `early-flush`
/// (records as full as h2's frames allow, as stock) lets the download join the answer's
/// record.
#[test]
fn an_answer_that_ends_ends_its_record_before_a_less_urgent_download() {
    for (policy, own_record) in [(Policy::Scheduled, true), (Policy::EarlyFlush, false)] {
        let requests = [(1, Some("u=3, i")), (3, Some("u=1"))];
        let mut h = recording_behind_full_window(policy, &requests, 40);
        let input = vec![
            settings_frame(0, &[]),
            response_headers(1),
            response_headers(3),
            data(3, 0, 4096, true),
            data(1, 0, 16384, false),
            data(1, 1, 16384, true),
        ];
        h.write_all(&encode_all(&input)).unwrap();
        h.flush().unwrap();
        h.acknowledge_everything();
        let (out, _) = delivered(&mut h, &input);
        let answer = positions(&out, |f| f.stream() == 3 && f.is_data())[0];
        // On the wire, as written: a record's end splits a DATA frame in two.
        let wire = tls_flush_testkit::parse_frames(&h.output()).unwrap();
        let answer_last = *positions(&wire, |f| f.stream() == 3 && f.is_data())
            .last()
            .unwrap();
        let answer_end: usize = wire[..=answer_last]
            .iter()
            .map(|f| HEADER_LEN + f.payload.len())
            .sum();
        assert!(
            out[answer + 1..]
                .iter()
                .any(|f| f.stream() == 1 && f.is_data()),
            "{policy:?}: the download follows the answer: {out:?}"
        );
        let write_ends_there = h
            .wire
            .borrow()
            .events
            .iter()
            .any(|e| matches!(*e, Event::Write { to, .. } if to == answer_end));
        assert_eq!(
            write_ends_there,
            own_record,
            "{policy:?}: a write (a record) ends at the answer's end: {:?}",
            h.wire.borrow().events
        );
    }
}
