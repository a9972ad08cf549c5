//! The gate's unit tests: shares, holds and wakes, offered chunk by chunk.

use super::*;
use std::task::Wake;

struct Count(std::sync::atomic::AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn waker() -> (Waker, Arc<Count>) {
    let count = Arc::new(Count(0.into()));
    (Waker::from(count.clone()), count)
}

const CHUNK: usize = 16_384;

/// A gate and two bodies on it, registered in this order with these urgencies.
fn two_bodies(first: u8, second: u8) -> (BodyGate, Ticket, Ticket) {
    let gate = BodyGate::default();
    let (first, second) = (gate.register(first, None), gate.register(second, None));
    (gate, first, second)
}

/// Ages the gate's bodies past their opening, as if registered [`WAIT_GRACE`] ago (their
/// source's first read done), for the tests of what follows it.
fn opened(gate: &BodyGate) {
    let past = Instant::now() - WAIT_GRACE;
    for entry in gate.lock().bodies.values_mut() {
        if let Activity::Opening { since } = &mut entry.state {
            *since = past;
        }
    }
}

/// The verdict on a chunk held until `recheck_at`.
fn held(recheck_at: Instant) -> Verdict {
    Verdict::Held { recheck_at }
}

/// Offers a chunk of each body in turn, `rounds` times, and returns how many chunks
/// each sent.
fn race_all(bodies: &[&Ticket], rounds: usize) -> Vec<usize> {
    let (waker, _) = waker();
    let now = Instant::now();
    let mut sent = vec![0; bodies.len()];
    for _ in 0..rounds {
        for (body, sent) in bodies.iter().zip(&mut sent) {
            if body.offer(CHUNK, now, &waker) == Verdict::Pass {
                *sent += 1;
            }
        }
    }
    sent
}

/// [`race_all`] of two bodies.
fn race(urgent: &Ticket, bulk: &Ticket, rounds: usize) -> (usize, usize) {
    let sent = race_all(&[urgent, bulk], rounds);
    (sent[0], sent[1])
}

/// The bytes of `chunks` chunks.
fn length(chunks: usize) -> Option<u64> {
    Some((chunks * CHUNK) as u64)
}

#[test]
fn one_urgency_level_above_the_default_is_worth_sixteen_times_the_bytes() {
    let (_, urgent, bulk) = two_bodies(2, 3);
    let (u, b) = race(&urgent, &bulk, 1700);
    assert_eq!(u, 1700);
    // 16 urgent chunks per bulk chunk, give or take the first.
    assert!((100..=110).contains(&b), "{u} urgent, {b} bulk chunks");
}

#[test]
fn bodies_of_one_urgency_never_hold_each_other() {
    let (_, first, second) = two_bodies(3, 3);
    assert_eq!(race(&first, &second, 100), (100, 100));
}

#[test]
fn within_a_level_below_the_default_the_shortest_body_goes_first() {
    let gate = BodyGate::default();
    let (long, short) = (gate.register(3, length(100)), gate.register(3, length(4)));
    opened(&gate);
    let (waker, wakes) = waker();
    let now = Instant::now();
    // The long one produces alone, then the short one starts: it goes in front.
    assert_eq!(long.offer(CHUNK, now, &waker), Verdict::Pass);
    assert_eq!(race(&short, &long, 4), (4, 0));
    // Done but not yet ended, it still holds the long one; its end lets it through.
    assert!(long.offer(CHUNK, now, &waker).is_held());
    drop(short);
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(long.offer(CHUNK, now, &waker), Verdict::Pass);
}

#[test]
fn a_body_follows_the_client_s_updates_to_its_stream() {
    let gate = BodyGate::default();
    let (bulk, raised) = (Priority::parse("u=5, i"), Priority::parse("u=0"));
    for stream in [1, 3, 5] {
        gate.stream_opened(stream, bulk, None);
    }
    // Stream 5 is raised before its request reaches the service, stream 1 after its
    // body registered; stream 3 is the shorter sibling both were held behind.
    gate.client_updated(5, raised);
    let streams = [bulk; 3].map(|p| gate.claim_stream(p));
    assert_eq!(streams, [Some(1), Some(3), Some(5)]);
    let register = |stream, chunks| {
        gate.register_response(stream, bulk, PriorityParams::default(), length(chunks))
    };
    let (first, second) = (register(streams[0], 100), register(streams[1], 10));
    opened(&gate);
    let (waker, wakes) = waker();
    let now = Instant::now();
    assert_eq!(second.offer(CHUNK, now, &waker), Verdict::Pass);
    assert!(
        first.offer(CHUNK, now, &waker).is_held(),
        "behind a shorter sibling"
    );
    gate.client_updated(1, raised);
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(race(&first, &second, 4), (4, 0), "raised: it goes first");
    drop(first);
    let third = register(streams[2], 100);
    assert_eq!(
        race(&third, &second, 4),
        (4, 0),
        "raised before its request"
    );
    // A server's pin outranks the client's update.
    drop(third);
    gate.stream_opened(7, bulk, None);
    let stream = gate.claim_stream(bulk);
    let pinned = PriorityParams::parse(b"u=6");
    let pinned_body = gate.register_response(stream, bulk, pinned, length(100));
    gate.client_updated(7, raised);
    // Still u=6 against the sibling's u=5: half its share (at u=0 it would take all).
    assert_eq!(race(&second, &pinned_body, 4), (4, 2));
}

#[test]
fn an_idle_gate_gives_its_state_back_and_makes_it_again_when_used() {
    let gate = BodyGate::default();
    let made = |gate: &BodyGate| gate.lock_given_back().is_some();
    assert!(!made(&gate), "nothing is made before the first use");
    let bulk = Priority::parse("u=5");
    gate.stream_opened(1, bulk, None);
    let stream = gate.claim_stream(bulk);
    gate.release_idle();
    assert!(made(&gate), "a stream waits for its body");
    let body = gate.register_response(stream, bulk, PriorityParams::default(), length(10));
    gate.stream_closed(1);
    gate.release_idle();
    assert!(made(&gate), "a body is live");
    gate.writes_refused();
    drop(body);
    gate.release_idle();
    assert!(made(&gate), "h2's writes are refused");
    gate.writes_taken(Instant::now());
    gate.release_idle();
    assert!(!made(&gate), "nothing left to keep");
    // Made again: bodies are held as before.
    let (urgent, bulk) = (gate.register(1, length(100)), gate.register(5, length(100)));
    assert_eq!(race(&urgent, &bulk, 10), (10, 0));
}

#[test]
fn a_longer_body_of_the_level_gets_a_sixteenth_and_equal_ones_go_in_order() {
    let gate = BodyGate::default();
    let (first, second) = (
        gate.register(4, length(1000)),
        gate.register(4, length(1000)),
    );
    let (front, behind) = race(&first, &second, 340);
    assert_eq!(front, 340);
    assert!((19..=22).contains(&behind), "{behind}");
}

/// Above the default urgency bodies go in request order, whatever their length, as the
/// wire sends them: a page's hero image before the images requested after it.
#[test]
fn above_the_default_urgency_bodies_go_in_request_order() {
    let gate = BodyGate::default();
    let (first, second) = (gate.register(2, length(1000)), gate.register(2, length(10)));
    opened(&gate);
    let (front, behind) = race(&first, &second, 160);
    assert_eq!(front, 160);
    assert!((9..=10).contains(&behind), "{behind}");
}

#[test]
fn a_body_of_unknown_length_never_waits_for_its_level() {
    let gate = BodyGate::default();
    let (known, unknown) = (gate.register(3, length(10)), gate.register(3, None));
    opened(&gate);
    assert_eq!(race(&unknown, &known, 10), (10, 10));
    let gate = BodyGate::default();
    let (known, unknown) = (gate.register(1, length(10)), gate.register(1, None));
    assert_eq!(race(&unknown, &known, 10), (10, 10));
}

/// A registered body holds back from its registration, for a read's worth of grace: a
/// page's later image, whose file was read first, must not reach h2 (and the wire) ahead
/// of the stylesheet or the hero image still being read. Its first chunk ends the grace
/// and wakes the bodies it held, its own level's too.
#[test]
fn a_registered_body_holds_back_until_its_first_chunk_or_the_grace() {
    let gate = BodyGate::default();
    let hero = gate.register(2, length(12));
    let (image, script) = (gate.register(2, length(6)), gate.register(3, length(6)));
    let (waker, wakes) = waker();
    let now = Instant::now();
    assert!(
        matches!(image.offer(CHUNK, now, &waker), Verdict::Held { recheck_at } if recheck_at <= now + WAIT_GRACE)
    );
    assert!(script.offer(CHUNK, now, &waker).is_held());
    assert_eq!(hero.offer(CHUNK, now, &waker), Verdict::Pass);
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Producing now, the hero gives the image its sixteenth.
    assert_eq!(race(&hero, &image, 32), (32, 2));
    // A body whose source never produces holds nothing back after the grace.
    let gate = BodyGate::default();
    let (_slow, bulk) = (gate.register(0, length(1)), gate.register(5, length(100)));
    let now = Instant::now();
    assert!(
        matches!(bulk.offer(CHUNK, now, &waker), Verdict::Held { recheck_at } if recheck_at <= now + WAIT_GRACE)
    );
    assert_eq!(
        bulk.offer(CHUNK, now + WAIT_GRACE * 2, &waker),
        Verdict::Pass
    );
}

#[test]
fn a_body_behind_a_shorter_one_holds_no_less_urgent_level_back() {
    // A page's image in front of a download at `u=3`, and its font at `u=4`: the font
    // keeps half the image's share. The download, held, sleeps until woken and its
    // start tag lags; were it counted as producing, it would hold the font back.
    let gate = BodyGate::default();
    let image = gate.register(3, length(1000));
    let download = gate.register(3, length(100_000));
    let font = gate.register(4, None);
    let (waker, _) = waker();
    assert_eq!(image.offer(CHUNK, Instant::now(), &waker), Verdict::Pass);
    assert!(download.offer(CHUNK, Instant::now(), &waker).is_held());
    let (image, font) = race(&image, &font, 100);
    assert_eq!(image, 100);
    assert!((45..=55).contains(&font), "{font}");
}

#[test]
fn a_less_urgent_body_never_holds_a_more_urgent_one() {
    let (gate, bulk, urgent) = two_bodies(5, 0);
    opened(&gate);
    let (waker, _) = waker();
    for _ in 0..100 {
        assert_eq!(bulk.offer(CHUNK, Instant::now(), &waker), Verdict::Pass);
    }
    for _ in 0..100 {
        assert_eq!(urgent.offer(CHUNK, Instant::now(), &waker), Verdict::Pass);
    }
}

#[test]
fn a_body_waiting_on_its_source_holds_nothing_back() {
    let (_, urgent, bulk) = two_bodies(0, 3);
    let (waker, _) = waker();
    let now = Instant::now();
    assert_eq!(urgent.offer(CHUNK, now, &waker), Verdict::Pass);
    assert!(bulk.offer(CHUNK, now, &waker).is_held());
    urgent.waiting(now);
    // A file read's worth of grace, then nothing.
    assert_eq!(bulk.offer(CHUNK, now, &waker), held(now + WAIT_GRACE));
    assert_eq!(bulk.offer(CHUNK, now + WAIT_GRACE, &waker), Verdict::Pass);
}

#[test]
fn a_stalled_body_holds_back_until_it_is_stale() {
    let (_, urgent, bulk) = two_bodies(0, 3);
    let (waker, _) = waker();
    let now = Instant::now();
    assert_eq!(urgent.offer(CHUNK, now, &waker), Verdict::Pass);
    assert_eq!(bulk.offer(CHUNK, now, &waker), held(now + STALE_AFTER));
    // Polled again (h2 took its chunk): it holds back longer.
    let later = now + STALE_AFTER / 2;
    urgent.polled(later);
    assert_eq!(bulk.offer(CHUNK, later, &waker), held(later + STALE_AFTER));
    assert_eq!(
        bulk.offer(CHUNK, later + STALE_AFTER, &waker),
        Verdict::Pass
    );
}

/// While the wrapper refuses h2's writes no body is polled: the front does not go
/// stale meanwhile, and the spell does not count once h2's writes are taken again.
#[test]
fn a_body_does_not_go_stale_while_h2_cannot_write() {
    let (gate, urgent, bulk) = two_bodies(0, 3);
    let (waker, _) = waker();
    let now = Instant::now();
    assert_eq!(urgent.offer(CHUNK, now, &waker), Verdict::Pass);
    gate.writes_refused();
    let later = now + 3 * STALE_AFTER;
    assert_eq!(bulk.offer(CHUNK, later, &waker), held(later + STALE_AFTER));
    gate.writes_taken(later);
    let soon = later + STALE_AFTER / 2;
    assert_eq!(bulk.offer(CHUNK, soon, &waker), held(later + STALE_AFTER));
    assert_eq!(
        bulk.offer(CHUNK, later + STALE_AFTER, &waker),
        Verdict::Pass
    );
}

/// Equal bodies of a level go in request order (by stream), whichever produced
/// first: of a page's equal images, the first in the document is its largest
/// contentful paint.
#[test]
fn equal_bodies_go_in_request_order_whichever_starts_first() {
    let gate = BodyGate::default();
    let image = Priority::parse("i");
    for stream in [15, 17] {
        gate.stream_opened(stream, image, None);
    }
    let streams = [image; 2].map(|p| gate.claim_stream(p));
    let register =
        |stream| gate.register_response(stream, image, PriorityParams::default(), length(100));
    // The second image's file opened first, and it started alone.
    let (second, first) = (register(streams[1]), register(streams[0]));
    opened(&gate);
    let (waker, _) = waker();
    assert_eq!(second.offer(CHUNK, Instant::now(), &waker), Verdict::Pass);
    assert_eq!(race(&first, &second, 32), (32, 2));
}

/// Bodies within a power of four of each other go in request order too: a page's
/// 200 KB hero image, requested before its 100 KB images, goes before them.
#[test]
fn bodies_of_one_length_class_go_in_request_order() {
    let gate = BodyGate::default();
    let image = Priority::parse("i");
    for stream in [15, 17, 19] {
        gate.stream_opened(stream, image, None);
    }
    let streams = [image; 3].map(|p| gate.claim_stream(p));
    let register = |stream, chunks| {
        gate.register_response(stream, image, PriorityParams::default(), length(chunks))
    };
    let (waker, _) = waker();
    // The 100 KB image's file opened first, and it started alone.
    let (image, hero) = (register(streams[1], 6), register(streams[0], 12));
    opened(&gate);
    assert_eq!(image.offer(CHUNK, Instant::now(), &waker), Verdict::Pass);
    assert_eq!(race(&hero, &image, 12), (12, 0));
    // Four times shorter is shorter: a 16 KB body requested last still goes first.
    let small = register(streams[2], 1);
    assert_eq!(race(&small, &hero, 1), (1, 0));
    assert_eq!(length_class(0), 0);
    assert_eq!(length_class(u64::MAX), 31);
}

#[test]
fn ending_or_sending_wakes_the_held_bodies() {
    let (gate, urgent, bulk) = two_bodies(1, 3);
    let (held_waker, wakes) = waker();
    let now = Instant::now();
    assert_eq!(urgent.offer(CHUNK, now, &held_waker), Verdict::Pass);
    assert!(bulk.offer(CHUNK, now, &held_waker).is_held());
    assert_eq!(urgent.offer(CHUNK, now, &held_waker), Verdict::Pass);
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(bulk.offer(CHUNK, now, &held_waker).is_held());
    drop(urgent);
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(bulk.offer(CHUNK, now, &held_waker), Verdict::Pass);
    drop(bulk);
    assert_eq!(gate.live(), 0);
}

#[test]
fn a_body_that_was_idle_cannot_claim_its_idle_time() {
    let (gate, urgent, bulk) = two_bodies(2, 3);
    opened(&gate);
    let (waker, _) = waker();
    // The download sends alone for a while...
    for _ in 0..64 {
        assert_eq!(bulk.offer(CHUNK, Instant::now(), &waker), Verdict::Pass);
    }
    // ...then the urgent body, registered all along, starts producing: it starts at
    // the present, so the download keeps its sixteenth at once (were it charged from
    // its registration, the download would wait for 1,024 urgent chunks).
    let (u, b) = race(&urgent, &bulk, 170);
    assert_eq!(u, 170);
    assert!((9..=12).contains(&b), "{b}");
}
