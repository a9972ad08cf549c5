//! The write budget from recorded `TCP_INFO` values: a 20 ms, 20 Mbit/s path (MSS 1448,
//! delivery rate 2.5 MB/s once measured) and loopback.

use super::*;

const RECORD: usize = 16384;
const MSS: u32 = 1448;
/// A full record of bulk DATA with nothing unsent: eleven segments on the wire, the most
/// that fit in `RECORD` (see `segment_aligned`).
const BULK_RECORD: usize = 11 * MSS as usize - RECORD_OVERHEAD;
/// A bulk record while the cap holds once the rate stopped growing: a quarter of the
/// 50,000-byte BDP (12,500 bytes), eight whole segments.
const CAPPED_RECORD: usize = 8 * MSS as usize - RECORD_OVERHEAD;

/// The allowance for a full bulk record (not urgent) with a full record queued.
fn bulk_record(budget: &mut WriteBudget, path: &PathState, now: Instant) -> Allowance {
    budget.allowance(path, RECORD, RECORD, false, 0, now)
}

fn path(cwnd: u32, unacked: u32, notsent: u32, delivery_rate: u64) -> PathState {
    PathState {
        cwnd,
        unacked,
        mss: MSS,
        notsent,
        min_rtt: Duration::from_millis(20),
        delivery_rate,
        ssthresh: 0,
        srtt: Duration::ZERO,
        retransmits: 0,
        ..PathState::default()
    }
}

#[test]
fn loopback_and_unknown_paths_are_not_limited() {
    let mut budget = WriteBudget::default();
    let loopback = PathState {
        cwnd: 10,
        unacked: 10,
        mss: 65483,
        notsent: 4_000_000,
        min_rtt: Duration::from_micros(30),
        delivery_rate: 5_000_000_000,
        ssthresh: 0,
        srtt: Duration::ZERO,
        retransmits: 0,
        ..PathState::default()
    };
    let now = Instant::now();
    assert_eq!(
        bulk_record(&mut budget, &loopback, now),
        Allowance::Record(RECORD)
    );
    assert!(
        budget.is_unpaced(),
        "loopback takes writes of several records"
    );
    bulk_record(&mut budget, &path(10, 0, 0, 0), now);
    assert!(!budget.is_unpaced(), "a 20 ms path is paced");
    assert_eq!(
        bulk_record(&mut budget, &PathState::default(), now),
        Allowance::Record(RECORD)
    );
}

#[test]
fn an_unpaced_path_is_read_again_only_every_so_many_records() {
    let mut budget = WriteBudget::default();
    assert!(budget.needs_read(), "nothing known yet");
    let lan = PathState {
        min_rtt: Duration::from_micros(200),
        ..path(10, 0, 0, 0)
    };
    bulk_record(&mut budget, &lan, Instant::now());
    for _ in 0..UNPACED_REREAD {
        assert!(!budget.needs_read());
    }
    assert!(budget.needs_read());
    // A paced path is read before every record.
    bulk_record(&mut budget, &path(10, 0, 0, 0), Instant::now());
    assert!(budget.needs_read());
    assert!(budget.needs_read());
}

#[test]
fn the_first_flight_gets_records_that_fit_the_initial_window() {
    let mut budget = WriteBudget::default();
    // Right after the handshake: 10 segments, nothing in flight, no rate sample yet.
    let a = bulk_record(&mut budget, &path(10, 0, 0, 0), Instant::now());
    assert_eq!(a, Allowance::Record(10 * 1448 - RECORD_OVERHEAD));
    // Window used up: one segment's record keeps the ACK clock going, no more.
    let a = bulk_record(&mut budget, &path(10, 10, 0, 0), Instant::now());
    assert_eq!(a, Allowance::Record(1448 - RECORD_OVERHEAD));
    // ... and nothing while a segment is already waiting unsent: in a small window the
    // kernel keeps no more than that record.
    let a = bulk_record(&mut budget, &path(10, 10, 1448, 0), Instant::now());
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
}

#[test]
fn in_congestion_avoidance_bulk_records_hold_half_a_small_window() {
    let mut budget = WriteBudget::default();
    let now = Instant::now();
    // Slow start ended at 20 segments; all of them in flight, one freed by an ACK.
    let avoidance = PathState {
        ssthresh: 20,
        ..path(20, 19, 0, 0)
    };
    assert!(!avoidance.in_slow_start());
    assert_eq!(
        bulk_record(&mut budget, &avoidance, now),
        Allowance::Record(10 * 1448 - RECORD_OVERHEAD),
        "bulk: half the window, not the one segment free now"
    );
    assert_eq!(
        budget.allowance(&avoidance, RECORD, RECORD, true, 0, now),
        Allowance::Record(1448 - RECORD_OVERHEAD),
        "urgent bytes still end inside what TCP can send now"
    );
    // That record waits unsent until ACKs free room; no second one on top of it.
    let after = PathState {
        notsent: 10 * 1448 - 1448,
        ..avoidance
    };
    let a = bulk_record(&mut budget, &after, now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // A window of a few large segments (a loopback peer with a small receive buffer: MSS
    // 12,288) is acknowledged in one go, not spread over the round trip.
    let few_segments = PathState {
        cwnd: 4,
        unacked: 4,
        mss: 12_288,
        ssthresh: 2,
        ..avoidance
    };
    assert_eq!(
        bulk_record(&mut budget, &few_segments, now),
        Allowance::Record(12_288 - RECORD_OVERHEAD),
        "one segment's record, not half the window"
    );
    // In slow start (below the threshold) each record is what the window can send now.
    let slow_start = PathState {
        ssthresh: 40,
        ..avoidance
    };
    assert_eq!(
        bulk_record(&mut budget, &slow_start, now),
        Allowance::Record(1448 - RECORD_OVERHEAD)
    );
}

#[test]
fn an_early_low_rate_sample_does_not_stretch_the_window_wait() {
    let mut budget = WriteBudget::default();
    // The first rate sample measured the handshake (200 kB/s); the initial window is full
    // and a segment waits unsent. ACKs free about a window per round trip (724 kB/s), so
    // the record waits about the time one segment takes at that rate, not at the sample's.
    let Allowance::Wait(wait) =
        bulk_record(&mut budget, &path(10, 10, 1448, 200_000), Instant::now())
    else {
        panic!("a full window with a segment unsent must wait");
    };
    assert!(
        wait >= Duration::from_millis(1) && wait <= Duration::from_millis(3),
        "{wait:?}"
    );
}

#[test]
fn in_startup_a_lagging_rate_does_not_stretch_the_pipe_wait() {
    let mut budget = WriteBudget::default();
    budget.set_congestion(CongestionControl::LossBased);
    // Second round trip of slow start: the window has grown to 20 segments, but the only
    // rate sample (50 kB/s) measured the handshake, so the pipe's cap (2 x 1,000 bytes +
    // a record + the timer's slack) is below what is in flight. Waiting for 50 kB/s to
    // drain the excess would idle the link for a whole round trip; in startup the wait
    // follows what the window can free instead.
    let Allowance::Wait(wait) = bulk_record(&mut budget, &path(20, 10, 0, 50_000), Instant::now())
    else {
        panic!("over the pipe's cap must wait");
    };
    // 10,454 bytes over the cap at 20 x 1448 bytes per 20 ms: about 7 ms, not 20.
    assert!(wait <= Duration::from_millis(8), "{wait:?}");
}

#[test]
fn the_kernel_holds_about_one_record_beyond_the_window() {
    let mut budget = WriteBudget::default();
    let now = Instant::now();
    // 200-segment window, 190 in flight: 14,480 bytes sendable now; the window frees
    // 2 x 2 ms of 200 x 1448 bytes per 20 ms (57,920 bytes) during a timer wait.
    let beyond = 14_480 + 57_920;
    assert_eq!(
        bulk_record(&mut budget, &path(200, 190, 0, 0), now),
        Allowance::Record(BULK_RECORD)
    );
    assert_eq!(
        bulk_record(&mut budget, &path(200, 190, beyond, 0), now),
        Allowance::Record(BULK_RECORD),
        "exactly one record beyond the window and its refill"
    );
    let a = bulk_record(&mut budget, &path(200, 190, beyond + 6000, 0), now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // A short record (less queued) needs less room.
    assert_eq!(
        budget.allowance(
            &path(200, 190, beyond + 6000, 0),
            RECORD,
            4096,
            false,
            0,
            now
        ),
        Allowance::Record(segment_aligned(
            RECORD,
            beyond as usize + 6000,
            MSS as usize
        ))
    );
}

#[test]
fn a_bulk_record_leaves_the_reserved_room_free_and_nothing_unsent() {
    let mut budget = WriteBudget::default();
    let now = Instant::now();
    let reserve = 4 * MSS as usize;
    // 200-segment window, 190 in flight: ten segments sendable now, four of them kept.
    assert_eq!(
        budget.allowance(&path(200, 190, 0, 0), RECORD, RECORD, false, reserve, now),
        Allowance::Record(6 * MSS as usize - RECORD_OVERHEAD),
        "what the window sends now beyond the reserve, not a record beyond the window"
    );
    // Six segments already unsent: nothing beyond the reserve, the record waits for ACKs.
    let a = budget.allowance(
        &path(200, 190, 6 * MSS, 0),
        RECORD,
        RECORD,
        false,
        reserve,
        now,
    );
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // The awaited body itself is urgent and never waits.
    assert_eq!(
        budget.allowance(&path(200, 200, 0, 0), RECORD, 4096, true, 0, now),
        Allowance::Record(RECORD)
    );
}

#[test]
fn in_flight_stays_near_the_bandwidth_delay_product() {
    let mut budget = WriteBudget::default();
    let t0 = Instant::now();
    let rate = 2_500_000; // 20 Mbit/s: BDP 50,000 bytes at 20 ms
                          // cubic's window has grown to 400 segments; 60 are in flight: under 2 x BDP.
    assert_eq!(
        bulk_record(&mut budget, &path(400, 60, 0, rate), t0),
        Allowance::Record(BULK_RECORD)
    );
    // 90 in flight (130,320 bytes) > 2 x BDP + a record - RECORD: wait, about the time the
    // excess takes to drain, at least 1 ms.
    let Allowance::Wait(wait) = bulk_record(&mut budget, &path(400, 90, 0, rate), t0) else {
        panic!("over twice the BDP in flight must wait");
    };
    assert!(wait >= Duration::from_millis(1) && wait <= Duration::from_millis(20));
    // Urgent bytes never wait.
    assert_eq!(
        budget.allowance(&path(400, 90, 0, rate), RECORD, 4096, true, 0, t0),
        Allowance::Record(RECORD)
    );
    // Three round trips without the rate growing by a quarter: the cap drops to 1.25 x BDP.
    for round in 1..=3 {
        let now = t0 + Duration::from_millis(21 * round);
        bulk_record(&mut budget, &path(400, 10, 0, rate), now);
    }
    // Records are now a quarter of the BDP at most, so that what the cap lets us queue
    // beyond it stays small.
    let now = t0 + Duration::from_millis(100);
    assert_eq!(
        bulk_record(&mut budget, &path(400, 40, 0, rate), now),
        Allowance::Record(CAPPED_RECORD)
    );
    let a = bulk_record(&mut budget, &path(400, 50, 0, rate), now);
    assert!(
        matches!(a, Allowance::Wait(_)),
        "72,400 in flight > 1.25 x 50,000 + a record - a record: {a:?}"
    );
}

#[test]
fn a_model_based_congestion_control_is_not_capped_a_second_time() {
    let rate = 2_500_000;
    // 90 segments in flight, over twice the 50,000-byte BDP: cubic's window waits ...
    let over = path(400, 90, 0, rate);
    let mut cubic = WriteBudget::default();
    cubic.set_congestion(CongestionControl::LossBased);
    let a = bulk_record(&mut cubic, &over, Instant::now());
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // ... BBR's does not: it paces to its own model of the path, and the cap would only
    // slow its startup (which grows faster than twice per round).
    let mut bbr = WriteBudget::default();
    bbr.set_congestion(CongestionControl::ModelBased);
    assert_eq!(
        bulk_record(&mut bbr, &over, Instant::now()),
        Allowance::Record(BULK_RECORD)
    );
    // The kernel's share still holds: about one record beyond what the window can send
    // and what it frees during a timer wait (115,840 bytes).
    let a = bulk_record(&mut bbr, &path(400, 400, 120_000, rate), Instant::now());
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
}

#[test]
fn a_fast_path_keeps_what_drains_during_a_timer_wait() {
    // 5 ms, 100 Mbit/s: BDP 62,500 bytes; the rate flat for three rounds (cap 1.25 x BDP).
    let rate = 12_500_000;
    let fast = |cwnd, unacked| PathState {
        min_rtt: Duration::from_millis(5),
        ..path(cwnd, unacked, 0, rate)
    };
    let mut budget = WriteBudget::default();
    budget.set_congestion(CongestionControl::LossBased);
    let t0 = Instant::now();
    for round in 0..=4 {
        let now = t0 + Duration::from_millis(6 * round);
        bulk_record(&mut budget, &fast(400, 10), now);
    }
    // 60 segments (86,880 bytes) in flight: over 1.25 x BDP, but a timer wait of up to
    // 2 ms drains 25,000 bytes, more than the 0.25 x BDP above it; a record (a quarter of
    // the BDP: ten segments) still goes.
    let now = t0 + Duration::from_millis(30);
    assert_eq!(
        bulk_record(&mut budget, &fast(400, 60), now),
        Allowance::Record(10 * MSS as usize - RECORD_OVERHEAD)
    );
    // Past that slack as well: wait.
    let a = bulk_record(&mut budget, &fast(400, 80), now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
}

#[test]
fn a_growing_rate_keeps_the_startup_gain() {
    let mut budget = WriteBudget::default();
    let t0 = Instant::now();
    for round in 0..6u32 {
        let now = t0 + Duration::from_millis(21 * u64::from(round));
        let rate = 500_000u64 << round; // doubling every round
        bulk_record(&mut budget, &path(400, 10, 0, rate), now);
    }
    assert_eq!(budget.flat_rounds, 0);
}

/// A path with a smoothed RTT: 20 Mbit/s measured, the window well open and past its
/// initial slow start, `unacked` segments in flight.
fn queued(unacked: u32, srtt_ms: u64) -> PathState {
    PathState {
        srtt: Duration::from_millis(srtt_ms),
        ssthresh: 300,
        ..path(400, unacked, 0, 2_500_000)
    }
}

/// A budget past its startup (gain 1.25) with a 20 Mbit/s rate, at `t0 + 200 ms` (the
/// queue of its startup had a round trip to drain).
fn steady_budget(t0: Instant) -> (WriteBudget, Instant) {
    steady_budget_with_srtt(t0, 20)
}

/// The same, on a path whose smoothed RTT was `srtt_ms` while little was in flight.
fn steady_budget_with_srtt(t0: Instant, srtt_ms: u64) -> (WriteBudget, Instant) {
    let mut budget = WriteBudget::default();
    budget.set_congestion(CongestionControl::LossBased);
    for round in 0..=3 {
        let now = t0 + Duration::from_millis(21 * round);
        bulk_record(&mut budget, &queued(10, srtt_ms), now);
    }
    (budget, t0 + Duration::from_millis(200))
}

#[test]
fn a_jittery_path_sizes_the_cap_on_its_lowest_smoothed_rtt() {
    let t0 = Instant::now();
    // Jitter: a minimum RTT of 20 ms (one lucky packet), but 30 ms smoothed with little in
    // flight. 50 segments in flight and an srtt of 36 ms under load: on the minimum the
    // cap (1.25 x 50,000 bytes) would hold the record back; on the path's 30 ms (BDP
    // 75,000 bytes) it goes, and no foreign queue is declared for it.
    let (mut jittery, now) = steady_budget_with_srtt(t0, 30);
    assert_eq!(
        bulk_record(&mut jittery, &queued(50, 36), now),
        Allowance::Record(BULK_RECORD)
    );
    assert_eq!(jittery.cap_lifts(), 0);
    let (mut clean, now) = steady_budget(t0);
    let a = bulk_record(&mut clean, &queued(50, 36), now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // The jittery path's cap still holds past 1.25 x its own BDP (and a record).
    let a = bulk_record(&mut jittery, &queued(75, 36), now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
}

#[test]
fn a_queue_our_own_cap_explains_keeps_the_cap() {
    let t0 = Instant::now();
    let (mut budget, now) = steady_budget(t0);
    // 50 segments in flight (72,400 bytes) is over 1.25 x BDP + a record: with an RTT
    // that the cap itself explains (1.25 x 20 ms, and a little noise), the bytes wait.
    for srtt in [20, 25, 30, 36] {
        let a = bulk_record(&mut budget, &queued(50, srtt), now);
        assert!(matches!(a, Allowance::Wait(_)), "srtt {srtt} ms: {a:?}");
    }
    assert_eq!(budget.cap_lifts(), 0);
}

#[test]
fn a_queue_another_flow_fills_lifts_the_cap() {
    let t0 = Instant::now();
    let (mut budget, now) = steady_budget(t0);
    // The same bytes in flight, but the RTT is 3 x the minimum: far more queue than the
    // cap lets us build (1.25 x), so another flow's. Holding back would only give it our
    // share: the record goes.
    assert_eq!(
        bulk_record(&mut budget, &queued(50, 60), now),
        Allowance::Record(CAPPED_RECORD)
    );
    assert_eq!(budget.cap_lifts(), 1);
    // Without the cap, only the congestion window limits, as for stock: far more in flight
    // is fine while the queue stands.
    let later = now + Duration::from_secs(1);
    assert_eq!(
        bulk_record(&mut budget, &queued(300, 60), later),
        Allowance::Record(BULK_RECORD)
    );
    assert_eq!(budget.cap_lifts(), 1, "one lift per episode");
}

#[test]
fn the_cap_returns_when_the_foreign_queue_is_gone() {
    let t0 = Instant::now();
    let (mut budget, now) = steady_budget(t0);
    bulk_record(&mut budget, &queued(50, 60), now);
    assert_eq!(budget.cap_lifts(), 1);
    // The other flow left and its queue drained: the RTT is back within what the cap
    // explains, and the cap holds again at once.
    let later = now + Duration::from_millis(500);
    let a = bulk_record(&mut budget, &queued(50, 22), later);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    assert_eq!(budget.cap_lifts(), 1);
}

#[test]
fn at_a_low_rate_a_foreign_queue_is_told_by_what_our_own_records_explain() {
    // Behind a competitor's 1,000-packet queue: a minimum RTT of 170 ms, our share
    // 175 kB/s (BDP 29,750 bytes), the rate flat. Records beyond the cap are a quarter of
    // the BDP (five segments), so our own bytes explain at most 1.25 x 170 ms + 44 ms,
    // and with 10 ms of noise a smoothed RTT of 275 ms is another flow's queue (half the
    // minimum RTT of noise and a 16 KiB record put the line at 300 ms).
    let rate = 175_000;
    let behind = |unacked, srtt_ms| PathState {
        min_rtt: Duration::from_millis(170),
        srtt: Duration::from_millis(srtt_ms),
        ssthresh: 30,
        ..path(60, unacked, 0, rate)
    };
    let t0 = Instant::now();
    let mut budget = WriteBudget::default();
    budget.set_congestion(CongestionControl::LossBased);
    for round in 0..=3 {
        bulk_record(
            &mut budget,
            &behind(10, 170),
            t0 + Duration::from_millis(171 * round),
        );
    }
    let now = t0 + Duration::from_secs(1);
    let capped = 5 * MSS as usize - RECORD_OVERHEAD;
    // 30 segments (43,440 bytes) are over the cap and its record: with 255 ms, what our
    // own bytes explain, they wait ...
    let a = bulk_record(&mut budget, &behind(30, 255), now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    assert_eq!(budget.cap_lifts(), 0);
    // ... with 275 ms the queue is not ours.
    assert_eq!(
        bulk_record(&mut budget, &behind(30, 275), now),
        Allowance::Record(capped)
    );
    assert_eq!(budget.cap_lifts(), 1);
}

#[test]
fn the_queue_of_the_startup_gain_drains_before_the_steady_gain_judges() {
    // Startup (gain 2) let 45 ms of our own queue stand on the 20 ms path; the rate is
    // flat, and at 63 ms the third flat round drops the gain to 1.25, whose line (about
    // 39 ms) that queue is above. It is ours: no lift for a round trip (45 + 20 ms) ...
    let t0 = Instant::now();
    let mut budget = WriteBudget::default();
    budget.set_congestion(CongestionControl::LossBased);
    bulk_record(&mut budget, &queued(10, 20), t0);
    for round in 1..=3 {
        let now = t0 + Duration::from_millis(21 * round);
        bulk_record(&mut budget, &queued(60, 45), now);
    }
    assert_eq!(budget.gain(), STEADY_GAIN);
    let a = bulk_record(
        &mut budget,
        &queued(60, 45),
        t0 + Duration::from_millis(120),
    );
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    assert_eq!(budget.cap_lifts(), 0);
    // ... after which a queue that did not drain is another flow's.
    bulk_record(
        &mut budget,
        &queued(60, 45),
        t0 + Duration::from_millis(130),
    );
    assert_eq!(budget.cap_lifts(), 1);
}

#[test]
fn the_initial_slow_start_never_lifts_the_cap() {
    let t0 = Instant::now();
    let (mut budget, now) = steady_budget(t0);
    budget.slow_start = SlowStart::Initial;
    // Slow start's own queue on a slower link: the RTT triples, and the cap holds.
    let slow_start = PathState {
        ssthresh: 0,
        ..queued(50, 60)
    };
    let a = bulk_record(&mut budget, &slow_start, now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    assert_eq!(budget.cap_lifts(), 0);
    // Once it ended, its queue gets a round trip (60 + 20 ms) to drain ...
    let a = bulk_record(
        &mut budget,
        &queued(50, 60),
        now + Duration::from_millis(10),
    );
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    assert_eq!(budget.cap_lifts(), 0);
    // ... and after it the same RTT is another flow's queue.
    bulk_record(
        &mut budget,
        &queued(50, 60),
        now + Duration::from_millis(91),
    );
    assert_eq!(budget.cap_lifts(), 1);
}

#[test]
fn a_lifted_cap_is_tested_again_after_the_retest_interval() {
    let t0 = Instant::now();
    let (mut budget, now) = steady_budget(t0);
    bulk_record(&mut budget, &queued(50, 60), now);
    // Ten seconds on, the RTT is still high: the budget restrains again, and gives its own
    // queue (if it is its own) a round trip plus the minimum to drain before judging.
    let retest = now + SHARED_QUEUE_RETEST;
    let a = bulk_record(&mut budget, &queued(50, 60), retest);
    assert!(
        matches!(a, Allowance::Wait(_)),
        "restraint while testing: {a:?}"
    );
    let a = bulk_record(
        &mut budget,
        &queued(50, 60),
        retest + Duration::from_millis(70),
    );
    assert!(matches!(a, Allowance::Wait(_)), "still draining: {a:?}");
    // Still high after 60 + 20 ms of restraint: not ours, the cap lifts again.
    assert_eq!(
        bulk_record(
            &mut budget,
            &queued(50, 60),
            retest + Duration::from_millis(81)
        ),
        Allowance::Record(CAPPED_RECORD)
    );
    assert_eq!(budget.cap_lifts(), 2);
}

#[test]
fn a_model_based_congestion_control_never_lifts_what_it_never_capped() {
    let t0 = Instant::now();
    let mut budget = WriteBudget::default();
    budget.set_congestion(CongestionControl::ModelBased);
    assert_eq!(
        bulk_record(&mut budget, &queued(50, 60), t0),
        Allowance::Record(BULK_RECORD)
    );
    assert_eq!(budget.cap_lifts(), 0);
}

#[test]
fn in_congestion_avoidance_the_next_record_goes_before_the_kernel_runs_dry() {
    let mut budget = WriteBudget::default();
    let now = Instant::now();
    // 20 segments, all in flight, in congestion avoidance; ACKs free 20 x 1448 bytes per
    // 20 ms, 2,896 in the timer's 2 ms of slack. With a segment still unsent the next
    // half-window record goes now: waiting for an empty kernel would leave TCP idle until
    // the timer fired.
    let one_unsent = PathState {
        ssthresh: 20,
        ..path(20, 20, 1448, 0)
    };
    assert_eq!(
        bulk_record(&mut budget, &one_unsent, now),
        Allowance::Record(10 * 1448 - RECORD_OVERHEAD)
    );
    // More than the slack unsent: wait.
    let three_unsent = PathState {
        notsent: 3 * 1448,
        ..one_unsent
    };
    let a = bulk_record(&mut budget, &three_unsent, now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // In slow start the kernel keeps no more than the record that fits the window.
    let slow_start = PathState {
        ssthresh: 0,
        ..one_unsent
    };
    let a = bulk_record(&mut budget, &slow_start, now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
}

#[test]
fn the_kernel_is_asked_to_pace_once_past_slow_start_and_a_drop_on_a_paced_path_under_a_loss_based_control(
) {
    let now = Instant::now();
    let mut cubic = WriteBudget::default();
    cubic.set_congestion(CongestionControl::LossBased);
    bulk_record(&mut cubic, &path(10, 0, 0, 0), now);
    assert!(
        !cubic.take_pacing_request(),
        "not in the initial slow start"
    );
    let congestion_avoidance = PathState {
        ssthresh: 10,
        ..path(10, 0, 0, 0)
    };
    bulk_record(&mut cubic, &congestion_avoidance, now);
    assert!(
        !cubic.take_pacing_request(),
        "not on a path that has dropped nothing"
    );
    let after_a_drop = PathState {
        retransmits: 1,
        ..congestion_avoidance
    };
    bulk_record(&mut cubic, &after_a_drop, now);
    assert!(cubic.take_pacing_request());
    bulk_record(&mut cubic, &congestion_avoidance, now);
    assert!(!cubic.take_pacing_request(), "once per connection");

    let mut bbr = WriteBudget::default();
    bbr.set_congestion(CongestionControl::ModelBased);
    bulk_record(&mut bbr, &path(10, 0, 0, 0), now);
    assert!(!bbr.take_pacing_request(), "BBR paces by itself");

    let mut loopback = WriteBudget::default();
    let fast = PathState {
        min_rtt: Duration::from_micros(30),
        ..path(10, 0, 0, 0)
    };
    bulk_record(&mut loopback, &fast, now);
    assert!(
        !loopback.take_pacing_request(),
        "an unpaced path needs no pacing"
    );
}

#[test]
fn in_loss_recovery_the_cap_counts_what_is_in_the_network() {
    let t0 = Instant::now();
    let (mut budget, now) = steady_budget(t0);
    // 80 segments unacknowledged (115,840 bytes), over 1.25 x BDP: with all of them in the
    // network the record waits ...
    let a = bulk_record(&mut budget, &queued(80, 22), now);
    assert!(matches!(a, Allowance::Wait(_)), "{a:?}");
    // ... but after a burst of losses 50 of them are SACKed and 12 lost, 2 of those
    // retransmitted: 20 are in the network, and TCP needs new data to keep its ACK clock
    // (and its loss detection) going.
    let recovering = PathState {
        sacked: 50,
        lost: 12,
        retransmitting: 2,
        ..queued(80, 22)
    };
    assert_eq!(recovering.in_flight_segments(), 20);
    assert_eq!(
        bulk_record(&mut budget, &recovering, now),
        Allowance::Record(CAPPED_RECORD)
    );
}

#[test]
fn a_connection_s_first_64_kib_go_in_records_of_one_segment_on_a_paced_path() {
    let now = Instant::now();
    let mut budget = WriteBudget::default();
    let opening = path(10, 0, 0, 0);
    let Allowance::Record(record) = budget.allowance(&opening, RECORD, RECORD, true, 0, now) else {
        panic!("an urgent record never waits");
    };
    assert!(record > MSS as usize, "the window's room: {record}");
    let segment = MSS as usize - RECORD_OVERHEAD;
    assert_eq!(budget.opening_record(&opening, 0, record), segment);
    assert_eq!(
        budget.opening_record(&opening, SEGMENT_RECORDS_UNTIL - 1, record),
        segment
    );
    assert_eq!(
        budget.opening_record(&opening, SEGMENT_RECORDS_UNTIL, record),
        record
    );
    // A smaller record stays as it is.
    assert_eq!(budget.opening_record(&opening, 0, 100), 100);
    // On loopback a record's segments arrive together: nothing changes.
    let loopback = PathState {
        mss: 65483,
        min_rtt: Duration::from_micros(30),
        ..path(10, 0, 0, 0)
    };
    let mut budget = WriteBudget::default();
    budget.allowance(&loopback, RECORD, RECORD, true, 0, now);
    let small_mss = PathState {
        mss: MSS,
        ..loopback
    };
    assert_eq!(budget.opening_record(&small_mss, 0, RECORD), RECORD);
}

#[test]
fn bulk_records_end_the_kernels_unsent_bytes_on_a_segment_boundary() {
    let mss = MSS as usize;
    // Nothing unsent: eleven whole segments of a 16 KiB record.
    assert_eq!(segment_aligned(RECORD, 0, mss), 11 * mss - RECORD_OVERHEAD);
    // A partial segment waits in the kernel: the record fills it, then whole segments.
    let aligned = segment_aligned(RECORD, 478, mss);
    assert_eq!((478 + aligned + RECORD_OVERHEAD) % mss, 0);
    assert!(aligned <= RECORD && aligned > RECORD - mss);
    // A one-segment record after a partial one: only the partial one's rest.
    assert_eq!(
        segment_aligned(mss - RECORD_OVERHEAD, 478, mss),
        mss - 478 - RECORD_OVERHEAD
    );
    // Aligning would keep less than half of the record: left as it is.
    assert_eq!(segment_aligned(1000, 1400, mss), 1000);
    assert_eq!(segment_aligned(100, 0, mss), 100);
}

#[test]
fn where_the_kernel_paces_slowly_it_keeps_its_pacer_s_next_bytes_not_the_window_s_room() {
    let now = Instant::now();
    // Behind a deep competitor's queue (the lab's 1,000-packet one): 28 segments, 11 in
    // flight, a 200 ms smoothed RTT, a segment dropped; cubic paces at 240 kB/s.
    let behind_a_queue = PathState {
        ssthresh: 20,
        srtt: Duration::from_millis(200),
        pacing_rate: 240_000,
        retransmits: 1,
        ..path(28, 11, 0, 0)
    };
    let mut unpaced = WriteBudget::default();
    unpaced.set_congestion(CongestionControl::LossBased);
    let Allowance::Record(before) = bulk_record(&mut unpaced, &behind_a_queue, now) else {
        panic!("the window's room is free");
    };
    assert!(before > 10_000, "the window's room, unpaced: {before}");

    let mut paced = WriteBudget::default();
    paced.set_congestion(CongestionControl::LossBased);
    bulk_record(&mut paced, &behind_a_queue, now);
    assert!(paced.take_pacing_request());
    // 20 ms at 240 kB/s is 4,800 bytes; four segments at least: 5,792 bytes per record...
    let a = bulk_record(&mut paced, &behind_a_queue, now);
    assert!(matches!(a, Allowance::Record(n) if n <= 4 * 1448), "{a:?}");
    // ...and the next only once the kernel holds less than that.
    let queued = PathState {
        notsent: 6_000,
        ..behind_a_queue
    };
    let a = bulk_record(&mut paced, &queued, now);
    assert!(
        matches!(a, Allowance::Wait(w) if w >= Duration::from_millis(1)),
        "{a:?}"
    );
    // A socket that refused pacing sends the window's room as before.
    paced.pacing_refused();
    assert_eq!(
        bulk_record(&mut paced, &behind_a_queue, now),
        Allowance::Record(before)
    );
    // At the lab's 20 Mbit/s (3 MB/s paced) the bound is above a full record.
    let mut fast = WriteBudget::default();
    fast.set_congestion(CongestionControl::LossBased);
    let clean = PathState {
        pacing_rate: 3_000_000,
        ..behind_a_queue
    };
    bulk_record(&mut fast, &clean, now);
    assert!(fast.take_pacing_request());
    assert_eq!(
        bulk_record(&mut fast, &clean, now),
        Allowance::Record(before)
    );
}
