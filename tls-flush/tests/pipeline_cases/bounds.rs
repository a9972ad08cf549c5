//! The hard limit as a bound on memory, and a blocked transport's smaller soft limit. What
//! is queued stays within the hard limit plus one header block: a header block, once begun, is taken whole and counted while it is open
//! (refusing a CONTINUATION could never make room), so one larger than the limit still gets
//! through; a DATA frame larger than the limit is never held whole but written through in
//! pieces, nothing else coming between them.

use std::task::Poll;
use std::time::Duration;

use tls_flush::Policy;
use tls_flush_testkit::{
    blocked_scheduled, check_control_not_overtaken, check_header_blocks, client_with_requests,
    comparable_preset, data, delivered, encode_all, header_block, match_frames, parse_frames,
    response_block, response_headers, settings_frame, started, Buffering, Frame, Harness,
    SimulatedPath, Step, Wire,
};

/// Writes `frames` one `poll_write` at a time into a blocked transport until the wrapper
/// refuses (returns `Pending`); returns how many frames, and bytes of the refused one, it took.
fn absorb_until_refused(h: &mut Harness, frames: &[Frame]) -> (usize, usize) {
    for (i, f) in frames.iter().enumerate() {
        let bytes = f.encode();
        let mut taken = 0;
        while taken < bytes.len() {
            match h.offer(&bytes[taken..]).unwrap() {
                Poll::Ready(Ok(n)) => taken += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => return (i, taken),
            }
        }
    }
    (frames.len(), 0)
}

/// The hard limit bounds what is queued, header blocks counted: with the transport blocked,
/// a 28 KiB header block written as 1 KiB frames on top of 8 KiB of queued DATA is taken
/// whole once begun (it cannot leave until complete, so refusing a CONTINUATION could never
/// make room), `queued_bytes` counts it while it is open, and the DATA frame after it is
/// refused because the queue is past the hard limit. Once the transport drains, everything
/// is delivered; the high-water mark stays within the hard limit plus one header block.
#[test]
fn hard_limit_counts_an_unfinished_header_block() {
    // The soft limit leaves room for the per-frame overhead of the first DATA frames.
    let (soft, hard) = (8 * 1024 + 512, 32 * 1024);
    let client = client_with_requests(&[(1, None), (3, None)]);
    let mut h = blocked_scheduled(client, soft, hard);
    let mut input = vec![
        settings_frame(0, &[]),
        response_headers(1),
        data(1, 0, 4000, false),
        data(1, 1, 4000, false),
    ];
    let block = response_block(None, 28 * 1024);
    let parts = block.len().div_ceil(1000);
    input.extend(header_block(3, &block, parts, false));
    input.push(data(3, 0, 10, true));
    input.push(data(1, 2, 10, true));
    let block_len: usize = input[4..4 + parts].iter().map(Frame::wire_len).sum();
    assert!(block_len < hard && 8037 + block_len > hard);

    let (done, partial) = absorb_until_refused(&mut h, &input);
    let s = h.stats();
    assert_eq!(
        (done, partial),
        (4 + parts, 0),
        "the whole block is taken, the DATA after it refused ({done} frames taken)"
    );
    let taken: usize = input[..done].iter().map(Frame::wire_len).sum();
    assert_eq!(
        s.queued_bytes as usize, taken,
        "queued_bytes counts the block"
    );
    assert!(taken > hard, "{taken}");

    h.set_blocked(false);
    h.write_all(&encode_all(&input[done..])).unwrap();
    let (out, perm) = delivered(&mut h, &input);
    check_header_blocks(&out, &perm).unwrap();
    let s = h.stats();
    assert!(
        s.queued_bytes_high_water as usize <= hard + block_len,
        "queued_bytes_high_water = {} > hard limit {hard} + block {block_len}",
        s.queued_bytes_high_water
    );
}

/// A transport that takes nothing (a client that stopped reading) on a path the write
/// budget does not pace (loopback, a LAN) gets a few records queued, not the soft limit:
/// with 256 KiB configured, a 640 KiB download is refused once about 32 KiB wait (the
/// default blocked soft limit), and h2 keeps the rest; with the blocked soft limit off, the
/// queue fills to the soft limit. Once the transport takes bytes again, every byte is
/// delivered, in order.
#[test]
fn a_blocked_transport_queues_a_few_records_not_the_soft_limit() {
    const BLOCKED_SOFT_LIMIT: usize = 32 * 1024;
    const FRAME: usize = 16 * 1024 + 9;
    let soft = 256 * 1024;
    for blocked in [Some(BLOCKED_SOFT_LIMIT), None] {
        let mut wire = Wire::open(Buffering::Off, client_with_requests(&[(1, None)]));
        wire.path = Some(SimulatedPath {
            cwnd: 10_000,
            mss: 65_483,
            min_rtt: Duration::from_micros(50),
            delivery_rate: 0,
            ssthresh: 0,
            acked_per_read: 1 << 30,
            retransmits: 0,
        });
        let mut config = comparable_preset(Policy::Scheduled)
            .soft_limit(soft)
            .hard_limit(1 << 20);
        if blocked.is_none() {
            config = config.blocked_soft_limit(None);
        }
        let mut h = started(config, wire);
        let mut input = vec![settings_frame(0, &[]), response_headers(1)];
        input.extend((0..40).map(|i| data(1, i, 16 * 1024, i == 39)));
        // The download starts while the client reads, then the client stops.
        let first: usize = input[..3].iter().map(Frame::wire_len).sum();
        h.write_all(&encode_all(&input[..3])).unwrap();
        h.flush().unwrap();
        h.set_blocked(true);

        let (done, partial) = absorb_until_refused(&mut h, &input[3..]);
        let taken: usize = input[3..3 + done]
            .iter()
            .map(Frame::wire_len)
            .sum::<usize>()
            + partial;
        assert!(3 + done < input.len(), "the whole download was taken");
        let queued = h.stats().queued_bytes as usize;
        match blocked {
            Some(limit) => assert!(
                queued <= limit + FRAME,
                "{queued} bytes queued behind a blocked transport (soft limit {soft})"
            ),
            None => assert!(
                queued + FRAME >= soft,
                "{queued} bytes queued with the blocked soft limit off (soft limit {soft})"
            ),
        }

        h.set_blocked(false);
        let all = encode_all(&input);
        h.write_all(&all[first + taken..]).unwrap();
        delivered(&mut h, &input);
    }
}

/// A header block larger than the hard limit must still get through (h2 writes a block's
/// frames back to back and cannot do otherwise; the response headers are the server's).
///
/// Regression: admission once refused a CONTINUATION when only the open block was queued,
/// which could never drain: h2's task slept forever. A block already begun is now taken whole,
/// bounding the queue by the hard limit plus one header block.
#[test]
fn header_block_larger_than_the_hard_limit_is_delivered() {
    let mut h = started(
        comparable_preset(Policy::Scheduled)
            .soft_limit(1024)
            .hard_limit(4096),
        Wire::open(Buffering::Off, client_with_requests(&[(1, None)])),
    );
    let block = response_block(None, 5000);
    let mut input = vec![settings_frame(0, &[])];
    input.extend(header_block(1, &block, 6, false));
    input.push(data(1, 0, 10, true));
    // A hang is an error from `write_all` (Pending without a wake-up); a spin would panic
    // there (the harness counts transport calls per poll).
    h.write_all(&encode_all(&input)).unwrap();
    let (out, perm) = delivered(&mut h, &input);
    check_header_blocks(&out, &perm).unwrap();
}

/// A DATA frame larger than the hard limit and than 1 MiB (a client may allow frames of up
/// to 16 MiB) is never held whole: it is written through in pieces once everything before
/// it is out, and nothing else comes between its pieces. The queue's accounted memory stays
/// within the hard limit plus a piece, under every policy, with partial and refused writes.
#[test]
fn frames_larger_than_the_hard_limit_are_written_through_in_pieces() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    for policy in Policy::ALL {
        let mut h = started(
            comparable_preset(policy),
            Wire::new(
                vec![Step::Accept(7000), Step::Pending, Step::Accept(usize::MAX)],
                Buffering::Off,
                client.clone(),
            ),
        );
        let input = vec![
            settings_frame(0, &[]),
            response_headers(1),
            data(1, 0, 3 << 20, false),
            response_headers(3),
            data(3, 0, 100, true),
            data(1, 1, (2 << 20) + 5, true),
        ];
        let bytes = encode_all(&input);
        for chunk in bytes.chunks(50_000) {
            h.write_all(chunk).unwrap();
            h.flush().unwrap();
        }
        h.settle().unwrap();
        let out = parse_frames(&h.output()).unwrap();
        let perm = match_frames(&input, &out).unwrap();
        check_header_blocks(&out, &perm).unwrap();
        check_control_not_overtaken(&out, &perm).unwrap();
        let s = h.stats();
        assert_eq!(s.queued_bytes, 0, "{policy}");
        assert!(
            s.queued_memory_high_water <= (1 << 20) + 2 * (16384 + 128),
            "{policy}: {} bytes accounted at the peak",
            s.queued_memory_high_water
        );
        assert!(s.queued_bytes_high_water < 1 << 20, "{policy}");
    }
}
