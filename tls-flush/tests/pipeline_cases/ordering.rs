//! What the scheduler sends first. Under `scheduled`, frames absorbed while the transport was
//! blocked before h2's first write compete once it opens (late binding): control frames and
//! urgent DATA overtake bulk DATA, header blocks keep h2's order, and only a record already
//! built on a stale write readiness is bound early. The in-order policies keep h2's order
//! exactly under the same start.

use tls_flush::{Policy, StatsSnapshot};
use tls_flush_testkit::{
    absorb_frame, check_header_blocks, check_in_order, check_settings_barriers,
    client_with_requests, comparable_preset, data, delivered, match_frames, parse_frames,
    pinned_response_headers, positions, response_headers, settings_frame, started, Buffering,
    Frame, Harness, Wire, HEADERS, MAX_RECORD, PING, WINDOW_UPDATE,
};

/// What a property (8) case delivered: h2's input, the output frames, each output frame's
/// index in the input, and the counters after shutdown.
struct Outcome {
    input: Vec<Frame>,
    out: Vec<Frame>,
    perm: Vec<usize>,
    stats: StatsSnapshot,
}

/// What h2 writes in the property (8) cases, in this order: SETTINGS, the two `u=5, i`
/// responses (streams 1 and 3: HEADERS, four 16 KiB DATA frames each, round-robin), a PING
/// and a WINDOW_UPDATE after their first two rounds, and the `u=0` response (stream 5: HEADERS
/// and two 1000-byte DATA frames) begun midway.
fn late_binding_input() -> Vec<Frame> {
    let big = 16384;
    vec![
        settings_frame(0, &[(3, 100), (4, 1 << 20)]),
        response_headers(1),
        response_headers(3),
        data(1, 0, big, false),
        data(3, 0, big, false),
        data(1, 1, big, false),
        data(3, 1, big, false),
        Frame::new(PING, 0, 0, [7; 8]),
        Frame::new(WINDOW_UPDATE, 0, 0, 65535u32.to_be_bytes()),
        response_headers(5),
        data(5, 0, 1000, false),
        data(1, 2, big, false),
        data(3, 2, big, false),
        data(5, 1, 1000, true),
        data(1, 3, big, true),
        data(3, 3, big, true),
    ]
}

/// Property (8) setup: the client asked for streams 1 and 3 at `u=5, i` and stream 5 at
/// `u=0` (read before any write); the transport is blocked before h2's first write and every
/// frame is absorbed while it accepts nothing; then it opens (waking the task) and the
/// stream is flushed and shut down. With `stale_readiness` the blocked transport still says
/// it is writable, so the wrapper builds the first record at once (it cannot be sent); then
/// anticipation is off, or it would hold stream 1's DATA back from that record for as long
/// as stream 5's response has not begun and its request is less than 5 ms old.
fn absorbed_while_blocked(stale_readiness: bool) -> Result<Outcome, String> {
    let client =
        client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=5, i")), (5, Some("u=0"))]);
    let mut config = comparable_preset(Policy::Scheduled);
    if stale_readiness {
        config = config.anticipate(None);
    }
    let mut h = Harness::new(config, Wire::open(Buffering::Off, client));
    h.read_all_client()?;
    h.wire.borrow_mut().stale_readiness = stale_readiness;
    h.set_blocked(true);
    let input = late_binding_input();
    for f in &input {
        absorb_frame(&mut h, f)?;
    }
    check_held_while_blocked(&h, stale_readiness)?;
    h.set_blocked(false);
    h.settle()?;
    h.shutdown()?;
    let out = parse_frames(&h.output())?;
    let perm = match_frames(&input, &out)?;
    check_header_blocks(&out, &perm)?;
    check_settings_barriers(&out, &perm)?;
    Ok(Outcome {
        input,
        out,
        perm,
        stats: h.stats(),
    })
}

/// While blocked, the transport accepted nothing, and the wrapper waited for write readiness
/// exactly when the readiness was not stale (a stale one says `Ready`, so it built a record).
fn check_held_while_blocked(h: &Harness, stale_readiness: bool) -> Result<(), String> {
    if !h.output().is_empty() {
        return Err("the blocked transport accepted bytes".into());
    }
    let waiting_for_readiness = h.wire.borrow().waits_for_readiness();
    if waiting_for_readiness == stale_readiness {
        return Err(format!(
            "the last write {} for write readiness",
            if stale_readiness {
                "waited (the readiness said Ready)"
            } else {
                "did not wait"
            }
        ));
    }
    Ok(())
}

impl Outcome {
    /// What both property (8) tests require besides their order: header blocks in h2's
    /// order, the overtaking counted, every frame delivered and nothing left queued.
    fn assert_reordered_and_delivered(&self) {
        let blocks: Vec<u32> = self
            .out
            .iter()
            .filter(|f| f.kind == HEADERS)
            .map(|f| f.stream())
            .collect();
        assert_eq!(blocks, vec![1, 3, 5]);
        let stats = &self.stats;
        assert!(stats.data_frames_reordered > 0, "{stats:?}");
        assert_eq!(stats.queued_bytes, 0);
        assert_eq!(
            stats.bytes_written,
            self.input.iter().map(Frame::wire_len).sum::<usize>() as u64
        );
        assert_eq!(self.perm.len(), self.input.len());
    }

    /// Asserts that every PING and WINDOW_UPDATE left before each DATA frame at `data`
    /// (output positions, ascending, not empty: the first one bounds them all).
    fn assert_control_before(&self, data: &[usize]) {
        let out = &self.out;
        let first_data = data[0];
        for p in positions(out, |f| matches!(f.kind, PING | WINDOW_UPDATE)) {
            assert!(
                p < first_data,
                "{:?} output at #{p}, after {:?} at #{first_data}; output order: {out:?}",
                out[p],
                out[first_data]
            );
        }
    }

    /// Asserts that all of the `u=0` stream's DATA (stream 5) left before each `u=5, i` DATA
    /// frame at `bulk` (output positions, ascending, not empty).
    fn assert_urgent_before(&self, bulk: &[usize]) {
        let out = &self.out;
        let last_urgent = *positions(out, |f| f.is_data() && f.stream() == 5)
            .last()
            .unwrap();
        let first_bulk = bulk[0];
        assert!(
            last_urgent < first_bulk,
            "u=0 DATA output at #{last_urgent} after u=5 DATA at #{first_bulk}; output order: {out:?}"
        );
    }
}

/// Property (8), late binding: the transport was blocked before h2's first write, so the
/// wrapper, waiting for write readiness, built no record; once it is writable every frame
/// absorbed meanwhile competes. PING and WINDOW_UPDATE leave before all DATA, the `u=0`
/// stream's DATA before all `u=5, i` DATA, header blocks keep their order, and
/// `data_frames_reordered` counts the overtaking.
#[test]
fn scheduled_sends_control_and_urgent_data_first_when_all_frames_were_absorbed() {
    let o = absorbed_while_blocked(false).unwrap();
    let out = &o.out;
    o.assert_control_before(&positions(out, Frame::is_data));
    o.assert_urgent_before(&positions(out, |f| f.is_data() && f.stream() != 5));
    o.assert_reordered_and_delivered();
}

/// Property (8) when the readiness went stale: the transport said it was writable when h2
/// first wrote, so the first record (SETTINGS, both HEADERS and the start of stream 1's first
/// DATA frame) was built in arrival order and is stuck; only that record is bound early.
/// Beyond it (its straddling DATA frame's tail necessarily follows), PING and WINDOW_UPDATE
/// leave before every other DATA frame, and the `u=0` DATA before every other `u=5, i` DATA.
#[test]
fn scheduled_binds_late_beyond_a_record_built_on_stale_readiness() {
    let o = absorbed_while_blocked(true).unwrap();
    let out = &o.out;
    let data = positions(out, Frame::is_data);
    let straddler = data[0];
    assert_eq!(
        (out[straddler].stream(), out[straddler].payload.len()),
        (1, 16384)
    );
    let committed: usize = out[..=straddler].iter().map(Frame::wire_len).sum();
    assert!(
        committed - out[straddler].wire_len() < MAX_RECORD && committed > MAX_RECORD,
        "the first DATA frame must straddle the first record: {out:?}"
    );
    // Beyond the stuck record, everything competed.
    let rest = &data[1..];
    o.assert_control_before(rest);
    let bulk_after: Vec<usize> = rest
        .iter()
        .copied()
        .filter(|&d| out[d].stream() != 5)
        .collect();
    o.assert_urgent_before(&bulk_after);
    o.assert_reordered_and_delivered();
}

/// The in-order policies under the same blocked start keep h2's order exactly.
#[test]
fn in_order_policies_keep_h2_order_when_all_frames_were_absorbed() {
    for policy in [Policy::EarlyFlush, Policy::Dynamic] {
        let client = client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=0"))]);
        let mut h = started(
            comparable_preset(policy),
            Wire::open(Buffering::Reported, client),
        );
        h.set_blocked(true);
        let input = vec![
            settings_frame(0, &[]),
            response_headers(1),
            data(1, 0, 16384, false),
            Frame::new(PING, 0, 0, [1; 8]),
            pinned_response_headers(3, "u=0"),
            data(3, 0, 500, true),
            data(1, 1, 16384, true),
        ];
        for f in &input {
            absorb_frame(&mut h, f).unwrap();
        }
        h.set_blocked(false);
        let (out, perm) = delivered(&mut h, &input);
        check_in_order(&out, &perm).unwrap();
        assert_eq!(h.stats().data_frames_reordered, 0);
    }
}
