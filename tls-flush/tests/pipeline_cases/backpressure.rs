//! Admission at the soft limit. Past it, `scheduled` still takes bulk DATA while a more
//! urgent stream is open (refusing it would block that stream's frames behind it in h2) and
//! refuses it otherwise; a refused write takes nothing (were any of it reported written, h2
//! would consider the frame sent while it waits in the wrapper) and is taken, whole, in the
//! poll in which the queue drains or on h2's retry after a flush.

use std::task::Poll;

use tls_flush::Policy;
use tls_flush_testkit::{
    absorb_frame, blocked_scheduled, check_header_blocks, check_in_order, client_with_requests,
    comparable_preset, data, delivered, match_frames, parse_frames, positions, response_headers,
    settings_frame, started, took_all, Buffering, Frame, Harness, Wire, HEADER_LEN,
};

/// Past the soft limit, `scheduled` admits bulk DATA while a more urgent stream is open (h2
/// interleaves streams, so refusing it would block the urgent stream's frames behind it in
/// h2), admits the urgent DATA, and, the transport having been blocked before the first
/// write, sends all urgent DATA before any bulk DATA. Without a more urgent stream open,
/// bulk DATA past the soft limit is refused (`bulk_is_refused_past_the_soft_limit`).
#[test]
fn scheduled_admits_more_urgent_data_past_the_soft_limit() {
    let client = client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=0"))]);
    let (soft, hard) = (40 * 1024, 128 * 1024);
    let mut h = blocked_scheduled(client, soft, hard);
    let mut input = vec![
        settings_frame(0, &[]),
        response_headers(1),
        response_headers(3),
    ];
    for f in &input {
        absorb_frame(&mut h, f).unwrap();
    }
    // Bulk DATA up to the soft limit (each queued frame also counts 128 bytes of overhead).
    let mut k = 0;
    while h.stats().queued_bytes as usize + 128 * (input.len() + 1) + 4009 <= soft {
        let f = data(1, k, 4000, false);
        absorb_frame(&mut h, &f).unwrap();
        input.push(f);
        k += 1;
    }
    // Bulk DATA is admitted past it while the u=0 stream is open ...
    let early = data(1, k, 4000, false);
    absorb_frame(&mut h, &early).expect("bulk DATA refused while a more urgent stream is open");
    input.push(early);
    k += 1;
    // ... urgent DATA is admitted past it ...
    for j in 0..3 {
        let f = data(3, j, 4000, j == 2);
        absorb_frame(&mut h, &f).unwrap();
        input.push(f);
    }
    let queued = h.stats().queued_bytes;
    assert!(queued as usize > soft);
    // ... and bulk DATA again, while urgent DATA is queued, up to the hard limit.
    let bulk = data(1, k, 4000, true);
    absorb_frame(&mut h, &bulk).expect("bulk DATA refused while urgent DATA is queued");
    assert_eq!(h.stats().queued_bytes, queued + bulk.wire_len() as u64);
    input.push(bulk);
    h.set_blocked(false);
    let (out, perm) = delivered(&mut h, &input);
    check_header_blocks(&out, &perm).unwrap();
    let last_urgent = *positions(&out, |f| f.is_data() && f.stream() == 3)
        .last()
        .unwrap();
    let first_bulk = positions(&out, |f| f.is_data() && f.stream() == 1)[0];
    assert!(last_urgent < first_bulk, "{out:?}");
    let s = h.stats();
    assert!(s.data_frames_reordered > 0);
    assert!(s.queued_bytes_high_water as usize <= hard);
}

/// Past the soft limit, with no stream more urgent than the queued bulk open, `scheduled`
/// refuses more bulk DATA: the write is `Pending` and nothing of it is taken.
#[test]
fn bulk_is_refused_past_the_soft_limit() {
    let client = client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=5, i"))]);
    let soft = 40 * 1024;
    let mut h = blocked_scheduled(client, soft, 128 * 1024);
    absorb_frame(&mut h, &response_headers(1)).unwrap();
    let mut k = 0;
    while h.stats().queued_bytes as usize + 128 * (k + 2) + 4009 <= soft {
        absorb_frame(&mut h, &data(1, k, 4000, false)).unwrap();
        k += 1;
    }
    let next = data(3, 0, 4000, false).encode();
    let refused = h.offer(&next).unwrap();
    assert!(refused.is_pending(), "bulk DATA admitted: {refused:?}");
}

/// In-order policy with a soft limit of `soft` bytes (hard 32 KiB), one request: SETTINGS,
/// the response's HEADERS and DATA frames of 4000 and `second` bytes, each absorbed at once.
/// The harness and the frames written so far.
fn one_response_absorbed(soft: usize, second: usize) -> (Harness, Vec<Frame>) {
    let client = client_with_requests(&[(1, None)]);
    let mut h = started(
        comparable_preset(Policy::EarlyFlush)
            .soft_limit(soft)
            .hard_limit(32 * 1024),
        Wire::open(Buffering::Off, client),
    );
    let input = vec![
        settings_frame(0, &[]),
        response_headers(1),
        data(1, 0, 4000, false),
        data(1, 1, second, false),
    ];
    for f in &input {
        absorb_frame(&mut h, f).unwrap();
    }
    (h, input)
}

/// A write refused over the soft limit is `Pending` (nothing of it taken) while the queue
/// cannot drain, and is taken in the poll in which the queue drains completely.
///
/// In-order policy, 8 KiB soft limit: 8 KiB of DATA sit in the record being built. The next
/// DATA frame is refused; the wrapper pushes the short record out, the transport is blocked,
/// so the write is `Pending`. Once the transport is writable the next poll writes the record,
/// finds the queue empty, admits the frame and reports all of it written.
///
/// Regression: `poll_write_h2` once measured progress after its first drive, so a queue
/// drained in that poll looked like no progress and the write returned `Pending` with no
/// wake-up (the old "write path made no progress" case).
#[test]
fn refused_write_is_taken_in_the_poll_in_which_the_queue_drains() {
    let (mut h, mut input) = one_response_absorbed(8 * 1024, 4000);
    assert!(
        h.output().is_empty(),
        "a partial record waits for more frames"
    );
    let queued = h.stats().queued_bytes;
    assert_eq!(queued, 8037);
    h.set_blocked(true);
    let refused = data(1, 2, 4000, true);
    let bytes = refused.encode();
    input.push(refused);
    for _ in 0..2 {
        let poll = h.offer(&bytes).unwrap();
        assert!(poll.is_pending(), "{poll:?}");
        assert!(h.output().is_empty());
        assert_eq!(
            h.stats().queued_bytes,
            queued,
            "nothing of the frame is taken"
        );
    }
    // The transport becomes writable and takes everything: the frame is taken in that poll.
    h.set_blocked(false);
    let taken = h.offer(&bytes).unwrap();
    assert!(took_all(&taken, bytes.len()), "{taken:?}");
    assert_eq!(h.output().len(), queued as usize);
    let (out, perm) = delivered(&mut h, &input);
    check_in_order(&out, &perm).unwrap();
}

/// A zero-length frame refused at the limit stays with the writer and is delivered.
///
/// 8187 bytes wait in the record being built, 133 below the soft limit of 8 KiB + 128 (the
/// overhead the queue counts for one frame), so the empty frame's 9 + 128 do not fit. h2 writes the empty END_STREAM DATA frame while the transport is blocked: it is
/// refused, and the write is `Pending` with none of its 9 bytes taken (were they reported
/// written, h2 would consider the frame sent while it waits in the wrapper, and drop it at
/// shutdown). h2's flush returns `Ready` without anything reaching the transport. When the
/// transport is writable, a flush drains the queue, h2's retry is taken and the frame
/// reaches the wire. (Retrying before that flush hits the lost wake-up of
/// `refused_write_is_taken_in_the_poll_in_which_the_queue_drains`.)
#[test]
fn refused_zero_length_frame_stays_with_the_writer_and_is_delivered_on_retry() {
    // 19 + 4009 + 4159 = 8187 bytes wait in the record being built: just under the limit.
    let (mut h, mut input) = one_response_absorbed(8 * 1024 + 128, 4150);
    assert_eq!(h.stats().queued_bytes, 8187);
    h.set_blocked(true);
    let end = data(1, 2, 0, true);
    let bytes = end.encode();
    input.push(end);
    let refused = h.offer(&bytes).unwrap();
    assert!(refused.is_pending(), "{refused:?}");
    assert_eq!(h.stats().queued_bytes, 8187);
    // h2's flush is Ready although the transport is Pending: nothing reached it.
    h.flush().unwrap();
    assert!(h.output().is_empty());
    h.set_blocked(false);
    h.settle().unwrap();
    assert_eq!(h.output().len(), 8187);
    let retried = h.offer(&bytes).unwrap();
    assert!(
        matches!(retried, Poll::Ready(Ok(HEADER_LEN))),
        "{retried:?}"
    );
    h.settle().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    assert_eq!(
        out.last(),
        input.last(),
        "the settled flush must deliver the END_STREAM frame: {out:?}"
    );
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_in_order(&out, &perm).unwrap();
}
