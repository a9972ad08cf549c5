//! Scheduling at the source: one connection's response bodies are read in urgency order, by
//! weight, before h2 sees their bytes.
//!
//! Why: h2 writes its streams' buffered DATA round-robin, one frame per stream per turn, and
//! the wrapper cannot skip a frame h2 offers (refusing it blocks h2's whole write loop). Once
//! the wrapper's queue is at its limit, each stream therefore leaves at the rate h2 offers its
//! frames: behind a long download, a page's hero image got one frame in every turn of a dozen
//! streams, whatever its urgency (measured in the browser lab's `page-busy`: the wire order
//! was h2's, and `early-flush`, which reorders nothing, was as fast as `scheduled`). Holding a
//! less urgent body's next chunk while a more urgent body of the same connection is producing
//! keeps its bytes out of h2, so h2's turns go to what matters; the wrapper still orders what
//! h2 has already buffered.
//!
//! The share is start-time fair queueing (Goyal et al., SIGCOMM 1996) over the bodies, by
//! bytes, with the weights of the wire scheduler ([`cost_bits`]: 16x per level above the
//! default urgency, 2x from it down), so a less urgent body slows down but never stops while
//! a more urgent one produces (a font sent at `u=4` must not wait for a whole `u=3`
//! download).
//!
//! Invariants:
//! - A body is only ever delayed, never reordered or altered: its frames pass in order and
//!   whole (the gate holds at most one chunk per body, which hyper would have held anyway).
//! - Bodies of the same urgency never hold each other back; a body holds back only less
//!   urgent ones, and only while it is *producing*: its source's last answer was data and
//!   hyper polled it within [`STALE_AFTER`], or its source answered `Pending` less than
//!   [`WAIT_GRACE`] ago (a file read). A body waiting on its application (a server-sent event
//!   stream between events) or stalled by the peer's flow control holds nothing back for
//!   longer than that.
//! - Memory: one small entry per live response body of the connection (bounded by h2's
//!   concurrent streams), removed when the body ends or is dropped.
//!
//! [`cost_bits`]: crate::scheduler::cost_bits

mod body;
mod service;

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use foldhash::HashMap;
use tokio::time::Instant;

pub(crate) use body::GATE_PIECE;
pub(crate) use service::GatedService;

use crate::scheduler::cost_bits;

/// How long a producing body may go without being polled before it stops holding less
/// urgent bodies back: hyper polls a body each time h2 took its previous chunk, which at
/// 20 Mbit/s is every few milliseconds; a body not polled for this long is stalled (the
/// peer's window is closed) or its share of a slow link is tiny, and holding others back
/// for it would only idle the link.
pub(crate) const STALE_AFTER: Duration = Duration::from_millis(50);

/// How long a body whose source answered `Pending` still holds less urgent bodies back:
/// tower-http's `ServeDir` reads each chunk of a file on tokio's blocking pool, which from
/// the page cache takes well under this; without the grace, every chunk of an urgent file
/// would let a less urgent chunk through.
pub(crate) const WAIT_GRACE: Duration = Duration::from_millis(5);

/// What a producing body is assumed to send next when a less urgent one asks to pass: one
/// default-sized HTTP/2 DATA frame (RFC 9113 §6.5.2, SETTINGS_MAX_FRAME_SIZE's initial
/// value).
const NEXT_CHUNK_ESTIMATE: u128 = 16_384;

/// The byte cost, in virtual time, of `urgency`: the wire scheduler's ([`cost_bits`]), so a
/// body of urgency `u` gets 16x the share of one at `u + 1` above the default urgency, 2x
/// from it down.
fn cost_per_byte(urgency: u8) -> u128 {
    1u128 << cost_bits(urgency)
}

/// One connection's gate, shared by the [`GatedService`] that registers the bodies and by
/// the bodies themselves.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyGate {
    shares: Arc<Mutex<Shares>>,
}

/// The fair-queueing state of one connection's live bodies.
#[derive(Debug, Default)]
struct Shares {
    bodies: HashMap<u64, Entry>,
    next_id: u64,
    /// The start tag of the latest chunk let through: where a body that begins (or
    /// resumes after waiting on its source) starts, so it cannot claim time it was idle.
    virtual_time: u128,
}

#[derive(Debug)]
struct Entry {
    urgency: u8,
    /// Start tag of this body's next chunk: the finish tag of its last chunk let through,
    /// moved up to the virtual time when it comes back from not producing.
    start: u128,
    state: Activity,
    last_polled: Instant,
    /// Set while the body is held: woken when what holds it may have changed.
    waker: Option<Waker>,
}

/// Whether a body competes for the connection right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    /// It has not produced yet: holds nothing back.
    Idle,
    /// Its source answered with data: holds less urgent bodies back while polled recently.
    Producing,
    /// Its source answered `Pending` at this instant, after producing: holds less urgent
    /// bodies back for [`WAIT_GRACE`].
    Waiting { since: Instant },
}

impl Entry {
    /// Until when this body holds less urgent ones back, if it does at all.
    fn holds_until(&self) -> Option<Instant> {
        match self.state {
            Activity::Idle => None,
            Activity::Producing => Some(self.last_polled + STALE_AFTER),
            Activity::Waiting { since } => Some(since + WAIT_GRACE),
        }
    }
}

/// Whether a chunk may pass now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Send it; its cost has been charged.
    Pass,
    /// Held behind a more urgent body; ask again when woken, or at the latest at this
    /// instant (when the bodies holding it become stale).
    Held { recheck_at: Instant },
}

impl Verdict {
    #[cfg(test)]
    fn is_held(self) -> bool {
        matches!(self, Verdict::Held { .. })
    }
}

impl BodyGate {
    fn lock(&self) -> MutexGuard<'_, Shares> {
        // A panic while holding the lock leaves consistent tags (every update is a few
        // assignments): keep serving rather than poisoning the connection.
        self.shares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a new response body of `urgency`.
    pub(crate) fn register(&self, urgency: u8) -> Ticket {
        let mut shares = self.lock();
        let id = shares.next_id;
        shares.next_id += 1;
        let virtual_time = shares.virtual_time;
        shares.bodies.insert(
            id,
            Entry {
                urgency,
                start: virtual_time,
                state: Activity::Idle,
                last_polled: Instant::now(),
                waker: None,
            },
        );
        Ticket {
            gate: self.clone(),
            id,
        }
    }

    /// The number of live bodies (for tests).
    #[cfg(test)]
    fn live(&self) -> usize {
        self.lock().bodies.len()
    }
}

/// One body's place at the gate; dropping it removes the body (and wakes the bodies it may
/// have held).
#[derive(Debug)]
pub(crate) struct Ticket {
    gate: BodyGate,
    id: u64,
}

impl Ticket {
    /// hyper polled the body and got a frame that is not shared out (trailers, an empty
    /// DATA frame): it is not stalled. ([`offer`](Self::offer) and
    /// [`waiting`](Self::waiting) record the poll themselves.)
    pub(crate) fn polled(&self, now: Instant) {
        if let Some(entry) = self.gate.lock().bodies.get_mut(&self.id) {
            entry.last_polled = now;
        }
    }

    /// The body's source answered `Pending`: after [`WAIT_GRACE`] it holds nothing back
    /// until it has data again. The bodies it holds are woken to recheck their deadline.
    pub(crate) fn waiting(&self, now: Instant) {
        let mut shares = self.gate.lock();
        let Some(entry) = shares.bodies.get_mut(&self.id) else {
            return;
        };
        entry.last_polled = now;
        if entry.state != Activity::Producing {
            return;
        }
        entry.state = Activity::Waiting { since: now };
        let urgency = entry.urgency;
        wake_less_urgent(shares, urgency);
    }

    /// The body has a chunk of `len` bytes: charge it and pass, or hold it (registering
    /// `waker`).
    pub(crate) fn offer(&self, len: usize, now: Instant, waker: &Waker) -> Verdict {
        let mut shares = self.gate.lock();
        let virtual_time = shares.virtual_time;
        let Some(entry) = shares.bodies.get_mut(&self.id) else {
            return Verdict::Pass;
        };
        if entry.state != Activity::Producing {
            // Back from its source: it cannot claim the time it had nothing to send.
            entry.state = Activity::Producing;
            entry.start = entry.start.max(virtual_time);
        }
        entry.last_polled = now;
        let (urgency, start) = (entry.urgency, entry.start);
        let finish = start + len as u128 * cost_per_byte(urgency);
        let mut recheck_at: Option<Instant> = None;
        for (id, other) in &shares.bodies {
            if *id == self.id || other.urgency >= urgency {
                continue;
            }
            let Some(stale_at) = other.holds_until().filter(|at| *at > now) else {
                continue;
            };
            let next_finish = other.start + NEXT_CHUNK_ESTIMATE * cost_per_byte(other.urgency);
            if next_finish < finish {
                recheck_at = Some(recheck_at.map_or(stale_at, |at| at.min(stale_at)));
            }
        }
        let entry = shares.bodies.get_mut(&self.id).expect("looked up above");
        if let Some(recheck_at) = recheck_at {
            if !entry.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                entry.waker = Some(waker.clone());
            }
            return Verdict::Held { recheck_at };
        }
        entry.start = finish;
        entry.waker = None;
        shares.virtual_time = shares.virtual_time.max(start);
        // What this body was charged moves it back in line: less urgent bodies held behind
        // it may pass now.
        wake_less_urgent(shares, urgency);
        Verdict::Pass
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut shares = self.gate.lock();
        let Some(entry) = shares.bodies.remove(&self.id) else {
            return;
        };
        wake_less_urgent(shares, entry.urgency);
    }
}

/// Wakes the held bodies less urgent than `urgency` (the only ones a body of `urgency` can
/// hold), after releasing the lock.
fn wake_less_urgent(mut shares: MutexGuard<'_, Shares>, urgency: u8) {
    let wakers: Vec<Waker> = shares
        .bodies
        .values_mut()
        .filter(|entry| entry.urgency > urgency)
        .filter_map(|entry| entry.waker.take())
        .collect();
    drop(shares);
    wakers.into_iter().for_each(Waker::wake);
}

#[cfg(test)]
mod tests {
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
        let (first, second) = (gate.register(first), gate.register(second));
        (gate, first, second)
    }

    /// The verdict on a chunk held until `recheck_at`.
    fn held(recheck_at: Instant) -> Verdict {
        Verdict::Held { recheck_at }
    }

    /// Offers chunks of both bodies alternately for as long as either may send, `rounds`
    /// times, and returns how many chunks each sent.
    fn race(urgent: &Ticket, bulk: &Ticket, rounds: usize) -> (usize, usize) {
        let (waker, _) = waker();
        let now = Instant::now();
        let (mut sent_urgent, mut sent_bulk) = (0, 0);
        for _ in 0..rounds {
            if urgent.offer(CHUNK, now, &waker) == Verdict::Pass {
                sent_urgent += 1;
            }
            if bulk.offer(CHUNK, now, &waker) == Verdict::Pass {
                sent_bulk += 1;
            }
        }
        (sent_urgent, sent_bulk)
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
    fn a_less_urgent_body_never_holds_a_more_urgent_one() {
        let (_, bulk, urgent) = two_bodies(5, 0);
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
        let (_, urgent, bulk) = two_bodies(2, 3);
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
}
