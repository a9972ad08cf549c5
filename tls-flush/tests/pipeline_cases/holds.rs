//! Anticipation (`scheduled`): DATA is held while a more urgent request's response (or,
//! before the connection's first DATA, an equally urgent one's) has not begun, at most the
//! bound after the request arrived; shutdown delivers what is held. A hold never leaves h2
//! stuck behind a refused frame: held DATA stops at the soft limit, and room past it is
//! granted, a few frames at a time up to the queue's limit, when h2 comes back with a
//! refused frame and when the awaited response's header block arrives.

use std::task::Poll;
use std::time::{Duration, Instant};

use tls_flush::{FlushConfig, Policy};
use tls_flush_testkit::{
    absorb_frame, blocked_scheduled, check_header_blocks, client_with_requests, comparable_preset,
    data, delivered, encode_all, literal, match_frames, parse_frames, pinned_response_headers,
    positions, response_block, response_headers, settings_frame, started, took_all, Buffering,
    Frame, Harness, SimulatedPath, Wire, DATA, END_HEADERS, HEADERS, HEADER_LEN,
};

/// An anticipation bound no test reaches: whatever is held stays held until the test
/// changes something, however slowly the test runs.
const FAR_BOUND: Duration = Duration::from_secs(600);

/// `scheduled` (the announcement off) anticipating up to [`FAR_BOUND`].
fn anticipating() -> FlushConfig {
    comparable_preset(Policy::Scheduled).anticipate(Some(FAR_BOUND))
}

/// `scheduled` with a 16 KiB soft limit and `hard`, after reading a background request
/// (`u=5`, stream 1) and an urgent one (`u=0`, stream 3): DATA is held for the urgent
/// response (the hold's bound is out of reach). Also returns the queue limit.
fn holding_for_urgent(hard: usize) -> (Harness, usize) {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    let config = anticipating().soft_limit(16 * 1024).hard_limit(hard);
    let limit = config.queue_limit();
    (started(config, Wire::open(Buffering::Off, client)), limit)
}

/// Stream 1's whole response as h2 writes it first: SETTINGS, HEADERS and one 8000-byte DATA
/// frame ending the stream; and the length of what may leave while that DATA is held.
fn bulk_response() -> ([Frame; 3], usize) {
    let start = [
        settings_frame(0, &[]),
        response_headers(1),
        data(1, 0, 8000, true),
    ];
    let head_len = start[0].wire_len() + start[1].wire_len();
    (start, head_len)
}

/// [`anticipating`] over a transport reporting its buffered output, after reading `client`
/// (stream 1 and a stream 3 it must wait for), with the [`bulk_response`] written and its
/// DATA checked to be held.
fn bulk_held_for_stream_3(client: Vec<u8>) -> (Harness, [Frame; 3]) {
    let (start, head_len) = bulk_response();
    let mut h = started(anticipating(), Wire::open(Buffering::Reported, client));
    h.write_all(&encode_all(&start)).unwrap();
    assert_data_held(&mut h, head_len, "stream 1's DATA must wait");
    (h, start)
}

/// Writes stream 3's response (`headers`, then 100 bytes of DATA ending it) after the held
/// `start`, and checks the delivery: header blocks in h2's order, and stream 3's DATA before
/// the held DATA of stream 1.
fn urgent_response_leaves_first(h: &mut Harness, start: &[Frame], headers: Frame) {
    let urgent = [headers, data(3, 0, 100, true)];
    h.write_all(&encode_all(&urgent)).unwrap();
    let input: Vec<Frame> = start.iter().chain(&urgent).cloned().collect();
    let (out, perm) = delivered(h, &input);
    check_header_blocks(&out, &perm).unwrap();
    let order: Vec<(u8, u32)> = out.iter().map(|f| (f.kind, f.stream())).collect();
    assert_eq!(order[2..], [(HEADERS, 3), (DATA, 3), (DATA, 1)], "{out:?}");
}

/// Offers `frame` in one `poll_write` after another, each expected to take it whole, until
/// one returns `Pending` (the frame refused); returns how many were taken.
fn offer_until_refused(h: &mut Harness, frame: &[u8]) -> usize {
    let mut taken = 0;
    while let Poll::Ready(written) = h.offer(frame).unwrap() {
        assert_eq!(written.unwrap(), frame.len());
        taken += 1;
        assert!(taken < 1000, "the queue never refuses");
    }
    taken
}

/// Flushes three times, expecting nothing past the first `head_len` bytes to leave (DATA
/// held for a response) and each flush to ask to be polled again.
fn assert_data_held(h: &mut Harness, head_len: usize, what: &str) {
    for _ in 0..3 {
        h.flush().unwrap();
        assert!(
            h.last_poll_woke,
            "a flush holding DATA must ask to be polled again"
        );
        assert_eq!(h.output().len(), head_len, "{what}");
    }
}

/// Anticipation (`scheduled`): while a request more urgent than the next DATA has been read
/// and its response has not begun, that DATA waits, the wrapper asking to be polled again
/// meanwhile, and it waits at most the bound after the request arrived.
///
/// The client asked for stream 1 at `u=5` and stream 3 at `u=0`; h2 writes stream 1's
/// response first. With a bound far away, stream 1's DATA stays queued across flushes (each
/// asks to be polled again) until stream 3's HEADERS arrive, and stream 3's DATA leaves
/// first. With a short bound and no response for stream 3, stream 1's DATA leaves once the
/// bound has passed.
#[test]
fn scheduled_anticipation_holds_bulk_data_until_the_urgent_response_begins_or_the_bound() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);

    // Held until the urgent response begins.
    let (mut h, start) = bulk_held_for_stream_3(client.clone());
    assert_eq!(h.stats().anticipation_holds, 1);
    urgent_response_leaves_first(&mut h, &start, response_headers(3));
    assert!(h.stats().data_frames_reordered > 0);

    // Held at most the bound.
    let (start, head_len) = bulk_response();
    let bound = Duration::from_millis(50);
    let mut h = Harness::new(
        comparable_preset(Policy::Scheduled).anticipate(Some(bound)),
        Wire::open(Buffering::Off, client),
    );
    let read_at = Instant::now();
    h.read_all_client().unwrap();
    h.write_all(&encode_all(&start)).unwrap();
    h.flush().unwrap();
    if read_at.elapsed() < bound {
        assert_eq!(h.output().len(), head_len, "stream 1's DATA must wait");
        assert!(h.last_poll_woke);
    }
    std::thread::sleep(bound.saturating_sub(read_at.elapsed()));
    h.settle().unwrap();
    assert_eq!(h.output(), encode_all(&start), "the bound has passed");
    h.shutdown().unwrap();
}

/// `poll_shutdown` delivers everything h2 wrote, also while anticipation holds DATA back for
/// an urgent response that will never begin (h2 closes the connection without answering it).
///
/// Regression: `poll_shutdown` once shut the transport down while anticipation still held
/// DATA; it now drains with anticipation off.
#[test]
fn shutdown_delivers_data_held_for_an_urgent_response() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    let mut h = started(anticipating(), Wire::open(Buffering::Off, client));
    let (input, _) = bulk_response();
    h.write_all(&encode_all(&input)).unwrap();
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    assert_eq!(
        h.stats().queued_bytes,
        0,
        "poll_shutdown returned Ready with bytes queued; output: {out:?}"
    );
    match_frames(&input, &out).unwrap();
}

/// Anticipation does not block h2 on the frame before the urgent response: while DATA is
/// held for an urgent response, a frame refused at the soft limit is taken once h2 comes
/// back, and so are up to four 16 KiB frames each time, past the hard limit if need be
/// (h2 writes one frame at a time with its stream state locked, so the urgent response
/// joins h2's queue only once h2 is blocked, behind the refused frame and at most a frame
/// of each stream it round-robins); nothing held leaves before the urgent response. Past
/// the queue's limit, and without a hold past the hard limit, the limit holds.
///
/// Regression: on the relay link a hold (5 ms) filled the queue to the hard limit with
/// background DATA; h2, blocked on the next background frame, could not hand over the
/// critical response until the bound passed, and then 64-96 KiB of background left first
/// (worst `simultaneous` run 2.7x the floor).
#[test]
fn a_hold_takes_a_few_frames_past_the_hard_limit_so_h2_is_not_blocked() {
    let hard = 40 * 1024;
    let (mut h, limit) = holding_for_urgent(hard);
    assert!(limit >= hard + 4 * (16384 + HEADER_LEN));
    let head = [settings_frame(0, &[]), response_headers(1)];
    // 10 x 8,009 bytes: past the hard limit, within the overshoot.
    let bulk: Vec<Frame> = (0..10).map(|_| data(1, 0, 8000, false)).collect();
    h.write_all(&encode_all(&head)).unwrap();
    h.write_all(&encode_all(&bulk)).unwrap();
    h.flush().unwrap();
    let stats = h.stats();
    assert!(
        stats.queued_memory_high_water > hard as u64
            && stats.queued_memory_high_water <= limit as u64,
        "{stats:?}"
    );
    let out = parse_frames(&h.output()).unwrap();
    assert!(
        out.iter().all(|f| f.kind != DATA),
        "held DATA stays held: {out:?}"
    );
    let urgent = [response_headers(3), data(3, 0, 100, true)];
    h.write_all(&encode_all(&urgent)).unwrap();
    let input: Vec<Frame> = head.iter().chain(&bulk).chain(&urgent).cloned().collect();
    let (out, perm) = delivered(&mut h, &input);
    check_header_blocks(&out, &perm).unwrap();
    let data_streams: Vec<u32> = out
        .iter()
        .filter(|f| f.kind == DATA)
        .map(Frame::stream)
        .collect();
    assert_eq!(data_streams[0], 3, "the urgent DATA leaves first: {out:?}");

    // Without a hold the hard limit holds: h2's next frame is refused while the
    // transport is blocked.
    let mut h = blocked_scheduled(client_with_requests(&[(1, Some("u=5"))]), 16 * 1024, hard);
    h.write_all(&encode_all(&head)).unwrap();
    let mut taken = 0;
    for frame in &bulk {
        let bytes = frame.encode();
        if !took_all(&h.offer(&bytes).unwrap(), bytes.len()) {
            break;
        }
        taken += 1;
    }
    assert!(taken < bulk.len(), "{taken} frames taken");
    assert!(h.stats().queued_memory_high_water <= hard as u64);
}

/// Before the connection's first DATA, DATA also waits (up to the anticipation bound) for
/// complete requests as urgent whose responses have not begun: the application may pin one
/// more urgent, as a page's critical resource is, while the requests of a page load often
/// arrive together at the default urgency.
///
/// The client asked for streams 1 and 3, both without a priority (`u=3`); h2 writes stream
/// 1's response first. Stream 1's DATA stays queued across flushes until stream 3's header
/// block arrives, pinned `u=0`, and stream 3's DATA leaves first.
///
/// Regression: on the relay link with all requests at `u=3` (the lab's `equal`
/// urgencies), the critical handler ran up to 3 ms after the requests were read, while
/// background DATA went out in 64 KiB writes; its response, pinned `u=0`, then waited
/// behind them: about one `simultaneous` run in four took 2.5-4.2x the floor.
#[test]
fn before_the_first_data_equally_urgent_responses_are_awaited() {
    let client = client_with_requests(&[(1, None), (3, None)]);
    let (mut h, start) = bulk_held_for_stream_3(client);
    urgent_response_leaves_first(&mut h, &start, pinned_response_headers(3, "u=0"));
}

/// During a hold, held DATA stops at the soft limit; room past it is granted only when h2
/// offers a refused frame again after its write returned `Pending` (so another task woke
/// it, typically the urgent response's), a few frames per grant, up to `queue_limit`:
/// never on the call that refused it, so h2 cannot spend the room on background frames
/// before the urgent response's task has run.
///
/// Regression: the room used to open half a millisecond after the first refusal, whoever
/// polled; h2 spent it on background frames at once while the critical handler had not
/// run yet (two busy workers), and about one relay `simultaneous` run in 30 took 1.5-5x
/// the floor. And held DATA used to fill the queue to the hard limit before any grant:
/// h2's task and the background responses' tasks ran on at memory speed meanwhile, the
/// critical handler's task waited for a worker, and the grants ran out before it came.
#[test]
fn a_hold_grants_room_past_the_soft_limit_only_when_h2_comes_back() {
    let hard = 40 * 1024;
    let (mut h, limit) = holding_for_urgent(hard);
    let limit = limit as u64;
    h.write_all(&encode_all(&[settings_frame(0, &[]), response_headers(1)]))
        .unwrap();
    let frame = data(1, 0, 8000, false).encode();
    assert!(offer_until_refused(&mut h, &frame) > 0);
    assert!(h.stats().queued_memory_high_water <= 16 * 1024);
    let mut grants = Vec::new();
    loop {
        let taken = offer_until_refused(&mut h, &frame);
        if taken == 0 {
            break;
        }
        grants.push(taken);
        assert!(grants.len() < 10, "grants never end: {grants:?}");
    }
    let high = h.stats().queued_memory_high_water;
    // The last grant is cut at the queue's limit.
    assert!(
        grants.len() >= 2 && grants[..grants.len() - 1].iter().all(|&n| n >= 4),
        "{grants:?}"
    );
    assert!(
        high > hard as u64 && high <= limit && high + frame.len() as u64 + 128 > limit,
        "high water {high}, hard limit {hard}, queue limit {limit}, grants {grants:?}"
    );
}

/// A frame refused at the soft limit before a hold began counts: when an urgent request
/// arrives while h2 is blocked on it, h2's coming back with it (woken by the urgent
/// handler) is granted room, so the urgent frames h2 queued behind it get in before the
/// hold's bound.
///
/// Regression: the refusal was marked only during a hold, so a late urgent request read
/// while h2 was blocked earned no room: on the tun link (`late`, explicit urgencies, cubic)
/// the critical response's first DATA reached a record 11.9 ms after the request was read
/// (median of 30; 1.3 ms with the refusal marked).
#[test]
fn a_frame_refused_before_the_hold_began_is_taken_when_h2_comes_back() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    let background_only = client_with_requests(&[(1, Some("u=5"))]).len();
    let config = anticipating().soft_limit(16 * 1024).hard_limit(16 * 1024);
    let mut h = Harness::new(config, Wire::open(Buffering::Off, client));
    let mut read = 0;
    while read < background_only {
        read += h.read(background_only - read).unwrap().len();
    }
    // The response is under way (the connection's first flight is over).
    let head = [
        settings_frame(0, &[]),
        response_headers(1),
        data(1, 0, 100, false),
    ];
    h.write_all(&encode_all(&head)).unwrap();
    h.settle().unwrap();
    h.set_blocked(true);
    // Three fit under the limits (both 16 KiB), with room to spare.
    let frame = data(1, 0, 5000, false).encode();
    assert_eq!(offer_until_refused(&mut h, &frame), 3);
    // The urgent request arrives; the transport drains again, the held DATA stays.
    h.read_all_client().unwrap();
    h.set_blocked(false);
    h.flush().unwrap();
    let written = h.offer(&frame).unwrap();
    assert!(
        took_all(&written, frame.len()),
        "the refused frame is taken once h2 comes back during the hold: {written:?}"
    );
}

/// During a hold, the awaited response's header block opens one more grant by itself: its
/// body follows it in h2, behind at most a frame of each stream h2 round-robins, and no
/// other task will wake h2 for it (the handler wrote the header block and the body in one
/// go, and its wake was spent on the header block).
#[test]
fn the_awaited_response_header_block_grants_room_for_its_body() {
    let hard = 40 * 1024;
    let (mut h, _) = holding_for_urgent(hard);
    h.write_all(&encode_all(&[settings_frame(0, &[]), response_headers(1)]))
        .unwrap();
    let frame = data(1, 0, 8000, false).encode();
    assert!(offer_until_refused(&mut h, &frame) > 0);
    // h2 comes back with the urgent response's header block: one grant for coming back,
    // one for the header block.
    absorb_frame(&mut h, &response_headers(3)).unwrap();
    let taken = offer_until_refused(&mut h, &frame);
    assert!(
        taken >= 12,
        "{taken} frames of 8 KiB taken after the header block: two grants expected"
    );
}

/// Once a small urgent response's header block is out (its `content-length` says how
/// small) and its body is not (tower-http's `ServeDir` answers with the headers, then reads
/// the file), a download keeps room in the congestion window for the rest of that response,
/// after the hold has ended: the body and the frame that ends it, written later, fit what
/// TCP can send at once, with no download bytes unsent ahead of them. The policies that do
/// not reorder hand TCP the window and a record beyond it, as stock hands it everything, so
/// the body waits behind the window.
///
/// Regression: in the browser lab's demo page the critical 4 KiB body followed its
/// headers by 0.5 to 24 ms; in 5 of 9 loads where its request came with the downloads',
/// their records had filled the window meanwhile, and the body came a round trip late.
#[test]
fn a_download_leaves_window_room_for_an_urgent_body_after_its_headers() {
    // Twelve segments in congestion avoidance, nothing acknowledged until the test says so.
    let path = SimulatedPath::full_window(12);
    let window = 12 * 1448;
    // How long the room is kept after the header block (the wrapper's 25 ms, less slack
    // for a slow test run).
    let reservation = Duration::from_millis(20);
    // An urgent answer under a background download, and Chromium's `fetch()` (`u=1`)
    // under a download at the default urgency, which the budget holds at the connection's
    // start (the opening room) while the answer's one-segment records leave.
    let cases = Policy::ALL
        .into_iter()
        .flat_map(|policy| [(policy, "u=5, i", "u=0"), (policy, "u=3, i", "u=1")]);
    for (policy, download_priority, answer_priority) in cases {
        let client =
            client_with_requests(&[(1, Some(download_priority)), (3, Some(answer_priority))]);
        let mut wire = Wire::open(Buffering::Off, client);
        wire.path = Some(path);
        let config = comparable_preset(policy).anticipate(Some(Duration::from_millis(1)));
        let mut h = started(config, wire);
        // Stream 3's header block says 4,000 bytes follow (`ServeDir` sets it).
        let mut block = response_block(None, 0);
        literal(&mut block, false, b"content-length", b"4000");
        let mut input = vec![
            settings_frame(0, &[]),
            response_headers(1),
            Frame::new(HEADERS, END_HEADERS, 3, block),
        ];
        h.write_all(&encode_all(&input)).unwrap();
        let headers_at = Instant::now();
        // The holds (armed at the request and again at the header block) pass.
        std::thread::sleep(Duration::from_millis(3));
        let download: Vec<Frame> = (0..4).map(|i| data(1, i, 16384, false)).collect();
        h.write_all(&encode_all(&download)).unwrap();
        h.flush().unwrap();
        // The body, more of the download, then the empty frame that ends the body (what
        // hyper sends once `ServeDir` finds the file's end).
        let rest = [
            data(3, 0, 4000, false),
            data(1, 4, 16384, false),
            data(3, 1, 0, true),
        ];
        for frame in &rest {
            h.write_all(&frame.encode()).unwrap();
            h.flush().unwrap();
        }
        let in_time = headers_at.elapsed() < reservation;
        input.extend(download);
        input.extend(rest);
        let output = h.output();
        let out = parse_frames(&output).unwrap();
        let body_at = positions(&out, |f| f.stream() == 3 && f.is_data());
        let body_end: usize = out[..=*body_at.last().unwrap()]
            .iter()
            .map(Frame::wire_len)
            .sum();
        let ahead: usize = out[..body_at[0]]
            .iter()
            .filter(|f| f.stream() == 1 && f.is_data())
            .map(|f| f.payload.len())
            .sum();
        if policy == Policy::Scheduled {
            if in_time {
                assert!(
                    body_end <= window && ahead > 0,
                    "{answer_priority}: the body fits the window ({body_end} of {window} \
                     bytes) and the download kept the rest ({ahead} bytes): {out:?}"
                );
            }
        } else {
            assert!(
                body_end > window,
                "{policy:?}, {answer_priority}: the body waits behind the download: {out:?}"
            );
        }
        // ACKs come back: everything leaves, once and in order.
        h.acknowledge_everything();
        delivered(&mut h, &input);
    }
}
