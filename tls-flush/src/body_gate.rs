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
//! Within one urgency at or below the default (`u=3` to `u=7`), bodies whose length is known
//! (`Content-Length`) go shortest first: the body with the fewest bytes, counted in powers
//! of four (of one [`length_class`], the one requested first, see [`Entry::request_order`]),
//! goes in front, and a longer one passes one piece for every [`SIBLING_SHARE`] of the
//! front's, so it slows down but never stops. Why: Chromium fetches a page's later images,
//! its async scripts and its `fetch()`es at `u=3` (the images with `i`); shared equally,
//! three 2 MB images of an app all ended together, and with them its largest contentful
//! paint (browser lab, `page-app`: 1.08x stock's, where nginx and h2o finish one first);
//! in stream order, an article's images waited for a 4 MB fetch it had started first
//! (`load` 2.3x stock's). Shortest first finishes the most responses soonest
//! and puts small ones ahead of long downloads. Above the default urgency the wire scheduler
//! already sends one response at a time, in stream order, and bodies of unknown length
//! (streams, server-sent events) neither wait for nor hold back their level.
//!
//! A body's urgency is its request's, moved by the client's PRIORITY_UPDATE frames for its
//! stream and overlaid by the server's pin, as the wire scheduler sees it ([`streams`] says
//! how the gate learns which stream a body answers).
//!
//! Invariants:
//! - A body is only ever delayed, never reordered or altered: its frames pass in order and
//!   whole (the gate holds at most one chunk per body, which hyper would have held anyway).
//! - Bodies of the same urgency hold each other back only by length as above (a body of
//!   unknown length, or above the default urgency, never waits for its level); otherwise a
//!   body holds back only less urgent ones. Either only while it is *producing*: its
//!   source's last answer was data and hyper polled it within [`STALE_AFTER`], or its
//!   source answered `Pending` less than [`WAIT_GRACE`] ago (a file read). A body waiting
//!   on its application (a server-sent event stream between events) or stalled by the
//!   peer's flow control holds nothing back for longer than that.
//! - Memory: one small entry per live response body of the connection (bounded by h2's
//!   concurrent streams), removed when the body ends or is dropped; a few bytes per stream
//!   between its request's HEADERS and its body's registration, bounded by
//!   [`MAX_UNREGISTERED_STREAMS`](streams::MAX_UNREGISTERED_STREAMS).
//!
//! [`cost_bits`]: crate::scheduler::cost_bits

mod body;
mod service;
mod streams;

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use foldhash::HashMap;
use tokio::time::Instant;
use tower_priority::{Priority, PriorityParams};

pub(crate) use body::{GatedBody, GATE_PIECE};
pub(crate) use service::GatedFuture;

use crate::scheduler::{cost_bits, DEFAULT_URGENCY};

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

/// How many pieces the front body of a level (the shortest) passes for each piece
/// of a longer body of its level: the same sixteenth a level above the default gives the
/// next one ([`cost_bits`]), so a long download behind a page's images still moves, at a
/// rate that costs the images little (a 100 KB image takes a sixteenth longer).
const SIBLING_SHARE: u32 = 16;

/// The byte cost, in virtual time, of `urgency`: the wire scheduler's ([`cost_bits`]), so a
/// body of urgency `u` gets 16x the share of one at `u + 1` above the default urgency, 2x
/// from it down.
fn cost_per_byte(urgency: u8) -> u128 {
    1u128 << cost_bits(urgency)
}

/// One connection's gate, shared by the [`GatedFuture`]s that register the bodies and by
/// the bodies themselves.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyGate {
    /// Made at the first use and given back at the connection's idle points while no body
    /// is live and no stream waits for one (see [`BodyGate::release_idle`]): an idle
    /// connection keeps 32 bytes for its gate instead of 256.
    shares: Arc<Mutex<Option<Box<Shares>>>>,
}

/// The gate's state, locked (and made, if it was given back).
struct Locked<'a>(MutexGuard<'a, Option<Box<Shares>>>);

impl std::ops::Deref for Locked<'_> {
    type Target = Shares;

    fn deref(&self) -> &Shares {
        self.0.as_deref().expect("BodyGate::lock makes the shares")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Shares {
        self.0.get_or_insert_with(Box::default)
    }
}

/// The fair-queueing state of one connection's live bodies.
#[derive(Debug, Default)]
struct Shares {
    bodies: HashMap<u64, Entry>,
    next_id: u64,
    /// The start tag of the latest chunk let through: where a body that begins (or
    /// resumes after waiting on its source) starts, so it cannot claim time it was idle.
    virtual_time: u128,
    /// Per urgency, the pieces front bodies passed since a body behind one last passed.
    front_run: [u32; 8],
    /// The streams whose bodies are to come, for the client's updates to them.
    streams: streams::Streams,
    /// The live body answering each stream known to the gate.
    by_stream: HashMap<u32, u64>,
    /// Whether the wrapper takes h2's writes (see [`BodyGate::writes_refused`]).
    h2_writes: H2Writes,
}

/// Whether the wrapper takes h2's writes: while it refuses them, hyper polls no body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum H2Writes {
    #[default]
    Taken,
    Refused,
}

#[derive(Debug)]
struct Entry {
    urgency: u8,
    /// The HTTP/2 stream it answers, where the gate knows it.
    stream: Option<u32>,
    /// What the server pinned in the response's `priority` header: it overlays the
    /// client's updates.
    pinned: PriorityParams,
    /// Its length in bytes, where known. Its whole length, not what it has left: with
    /// what was left, of a page's three equal images the one whose first read returned
    /// first took the lead for good (browser lab, app: the third in one load of four, and
    /// the page's largest contentful paint, the first, came 0.9 s later).
    length: Option<u64>,
    /// Its last offer was held behind a shorter body of its level: it is not using the
    /// link, so it holds no other level back (its start tag lags while it waits).
    behind_sibling: bool,
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
    /// Whether this body (`id`) goes before `other` (`other_id`) of its own urgency:
    /// both lengths known, at or below the default urgency, a shorter [`length_class`] (or
    /// the same, requested first: see [`request_order`](Self::request_order)).
    fn goes_before(&self, id: u64, other: &Entry, other_id: u64) -> bool {
        if self.urgency != other.urgency || self.urgency < DEFAULT_URGENCY {
            return false;
        }
        match (self.length, other.length) {
            (Some(mine), Some(theirs)) => {
                (length_class(mine), self.request_order(id))
                    < (length_class(theirs), other.request_order(other_id))
            }
            _ => false,
        }
    }

    /// Where this body (`id`) comes among equals: by stream id where the gate knows its
    /// stream, ahead of those it does not know, which come in registration order (a total
    /// order, so no bodies hold each other back in a circle). A page requests its images
    /// in document order, and the first in it is the page's largest contentful paint among
    /// equals; registration follows when each file was opened.
    fn request_order(&self, id: u64) -> (bool, u64) {
        match self.stream {
            Some(stream) => (false, u64::from(stream)),
            None => (true, id),
        }
    }

    /// Until when this body holds less urgent ones back, if it does at all, as of `now`
    /// with the wrapper taking or refusing h2's `writes`.
    fn holds_until(&self, writes: H2Writes, now: Instant) -> Option<Instant> {
        match self.state {
            Activity::Idle => None,
            // Not polled because h2 cannot write: not stale.
            Activity::Producing if writes == H2Writes::Refused => Some(now + STALE_AFTER),
            Activity::Producing => Some(self.last_polled + STALE_AFTER),
            Activity::Waiting { since } => Some(since + WAIT_GRACE),
        }
    }
}

/// A body's length class: the power of four its length is in. Lengths of one class count
/// as equally short, and go in request order. Why: Chromium sends an article's hero image
/// (200 KB, the page's largest contentful paint) at `u=2` when it has raised it before the
/// request, and otherwise at `u=3` beside the page's twelve 100 KB images; with strictly
/// the fewest bytes first the hero went behind all twelve (browser lab, page-busy with 1%
/// loss: in 5 of 10 loads, its LCP 4-5 s instead of 0.5-1). Across classes the shorter
/// still goes first: the images before a 4 MB video, page-app's 1.5 MB script and 2 MB
/// images before a 20 MB download.
fn length_class(length: u64) -> u32 {
    length.checked_ilog2().unwrap_or(0) / 2
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
    fn lock(&self) -> Locked<'_> {
        let mut shares = self.lock_given_back();
        shares.get_or_insert_with(Box::default);
        Locked(shares)
    }

    fn lock_given_back(&self) -> MutexGuard<'_, Option<Box<Shares>>> {
        // A panic while holding the lock leaves consistent tags (every update is a few
        // assignments): keep serving rather than poisoning the connection.
        self.shares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// At an idle point of the connection: gives the gate's state back if no body is live,
    /// no stream waits for its body and h2's writes are taken (a new body starts from
    /// fresh tags, as the first one did).
    pub(crate) fn release_idle(&self) {
        let mut shares = self.lock_given_back();
        if shares.as_deref().is_some_and(Shares::is_idle) {
            *shares = None;
        }
    }

    /// The wrapper refuses h2's writes (its queue is full): h2 polls no body until it
    /// takes them again, so a producing body does not go stale meanwhile. Why: while a more
    /// urgent response was awaited, DATA was held and the queue stayed full for 50-100 ms;
    /// the front image of a page then counted as stalled and the images behind it passed
    /// 64 KB each (browser lab, app).
    pub(crate) fn writes_refused(&self) {
        self.lock().h2_writes = H2Writes::Refused;
    }

    /// The wrapper takes h2's writes again: the spell it refused them does not count
    /// toward a producing body's staleness.
    pub(crate) fn writes_taken(&self, now: Instant) {
        let mut shares = self.lock();
        shares.h2_writes = H2Writes::Taken;
        for entry in shares.bodies.values_mut() {
            if entry.state == Activity::Producing {
                entry.last_polled = entry.last_polled.max(now);
            }
        }
    }

    /// The wrapper saw `stream`'s request HEADERS, with `header` in its `priority` field
    /// and `update` sent before them (see [`streams`]).
    pub(crate) fn stream_opened(&self, stream: u32, header: Priority, update: Option<Priority>) {
        self.lock().streams.opened(stream, header, update);
    }

    /// The stream of the request the service is called with now, whose `priority` header
    /// is `header`, where the gate can tell.
    pub(crate) fn claim_stream(&self, header: Priority) -> Option<u32> {
        self.lock().streams.claim(header)
    }

    /// The client's PRIORITY_UPDATE set `stream`'s priority to `client`: its body (live,
    /// or to come) moves to the urgency the server's pin leaves, and the bodies that
    /// change concerns are woken.
    pub(crate) fn client_updated(&self, stream: u32, client: Priority) {
        let mut shares = self.lock();
        if shares.streams.update(stream, client) {
            return;
        }
        let Some(&id) = shares.by_stream.get(&stream) else {
            return;
        };
        let virtual_time = shares.virtual_time;
        let Some(entry) = shares.bodies.get_mut(&id) else {
            return;
        };
        let (before, urgency) = (entry.urgency, entry.pinned.apply_to(client).urgency.min(7));
        if urgency == before {
            return;
        }
        // A body joining another level cannot claim time it did not use there.
        entry.urgency = urgency;
        entry.behind_sibling = false;
        entry.start = entry.start.max(virtual_time);
        wake_held(shares, before.min(urgency), Level::AndItsOwn);
    }

    /// `stream` is over (its response ended, or either side reset it).
    pub(crate) fn stream_closed(&self, stream: u32) {
        self.lock().streams.closed(stream);
    }

    /// Registers the response body of `stream` (where [`claim_stream`](Self::claim_stream)
    /// told it), whose request asked for `requested` and whose response pinned `pinned`,
    /// of `length` bytes where known. The client's latest update to the stream replaces
    /// `requested`.
    pub(crate) fn register_response(
        &self,
        stream: Option<u32>,
        requested: Priority,
        pinned: PriorityParams,
        length: Option<u64>,
    ) -> Ticket {
        let mut shares = self.lock();
        let client = stream
            .and_then(|s| shares.streams.register(s))
            .unwrap_or(requested);
        let urgency = pinned.apply_to(client).urgency.min(7);
        let id = shares.insert(urgency, length, stream, pinned);
        tracing::trace!(id, ?stream, urgency, ?length, "body registered");
        Ticket {
            gate: self.clone(),
            id,
        }
    }

    /// Registers a new response body of `urgency` and, where known, `length` in bytes,
    /// of no known stream.
    #[cfg(test)]
    fn register(&self, urgency: u8, length: Option<u64>) -> Ticket {
        let requested = Priority {
            urgency,
            incremental: false,
        };
        self.register_response(None, requested, PriorityParams::default(), length)
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
        wake_held(shares, urgency, Level::AndItsOwn);
    }

    /// The body has a chunk of `len` bytes: charge it and pass, or hold it (registering
    /// `waker`).
    pub(crate) fn offer(&self, len: usize, now: Instant, waker: &Waker) -> Verdict {
        let mut shares = self.gate.lock();
        let virtual_time = shares.virtual_time;
        let Some(entry) = shares.bodies.get_mut(&self.id) else {
            return Verdict::Pass;
        };
        if entry.state != Activity::Producing || entry.behind_sibling {
            // Back from its source, or from behind a shorter body: it cannot claim the
            // time it did not use the link.
            entry.state = Activity::Producing;
            entry.start = entry.start.max(virtual_time);
        }
        entry.last_polled = now;
        let urgency = entry.urgency;
        let finish = entry.start + len as u128 * cost_per_byte(urgency);
        let (held_by_level, held_by_sibling) = shares.holders(self.id, finish, now);
        let turn = held_by_sibling.is_some()
            && held_by_level.is_none()
            && shares.front_run[usize::from(urgency)] >= SIBLING_SHARE;
        let recheck_at = match (held_by_level, held_by_sibling) {
            _ if turn => None,
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let entry = shares.bodies.get_mut(&self.id).expect("looked up above");
        if let Some(recheck_at) = recheck_at {
            tracing::trace!(
                id = self.id,
                stream = ?entry.stream,
                urgency,
                by_level = held_by_level.is_some(),
                by_sibling = held_by_sibling.is_some(),
                "body held"
            );
            entry.behind_sibling = held_by_sibling.is_some();
            if !entry.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                entry.waker = Some(waker.clone());
            }
            return Verdict::Held { recheck_at };
        }
        let start = entry.start;
        entry.start = finish;
        entry.behind_sibling = false;
        entry.waker = None;
        shares.virtual_time = shares.virtual_time.max(start);
        let front_run = &mut shares.front_run[usize::from(urgency)];
        let level = if turn {
            *front_run = 0;
            Level::LessUrgent
        } else {
            *front_run = front_run.saturating_add(1);
            // The bodies behind it get their turn now.
            if *front_run == SIBLING_SHARE {
                Level::AndItsOwn
            } else {
                Level::LessUrgent
            }
        };
        // What this body was charged moves it back in line: less urgent bodies held behind
        // it may pass now.
        wake_held(shares, urgency, level);
        Verdict::Pass
    }
}

impl Shares {
    /// Nothing to keep: no live body, no stream waiting for one, h2's writes taken.
    fn is_idle(&self) -> bool {
        self.bodies.is_empty()
            && self.by_stream.is_empty()
            && self.streams.is_empty()
            && self.h2_writes == H2Writes::Taken
    }

    fn insert(
        &mut self,
        urgency: u8,
        length: Option<u64>,
        stream: Option<u32>,
        pinned: PriorityParams,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.bodies.insert(
            id,
            Entry {
                urgency,
                stream,
                pinned,
                length,
                behind_sibling: false,
                start: self.virtual_time,
                state: Activity::Idle,
                last_polled: Instant::now(),
                waker: None,
            },
        );
        if let Some(stream) = stream {
            self.by_stream.insert(stream, id);
        }
        id
    }

    /// Until when the body `id`, whose next chunk would finish at `finish`, is held: by a
    /// producing more urgent body whose next chunk finishes first (fair queueing by
    /// weight), and by a producing body of its level that goes before it.
    fn holders(&self, id: u64, finish: u128, now: Instant) -> (Option<Instant>, Option<Instant>) {
        let mine = &self.bodies[&id];
        let (mut by_level, mut by_sibling) = (None::<Instant>, None::<Instant>);
        let earliest = |at: Option<Instant>, stale_at: Instant| {
            Some(at.map_or(stale_at, |at| at.min(stale_at)))
        };
        for (&other_id, other) in &self.bodies {
            if other_id == id {
                continue;
            }
            let holds_until = other.holds_until(self.h2_writes, now);
            let Some(stale_at) = holds_until.filter(|at| *at > now) else {
                continue;
            };
            if other.urgency < mine.urgency {
                let next_finish = other.start + NEXT_CHUNK_ESTIMATE * cost_per_byte(other.urgency);
                if !other.behind_sibling && next_finish < finish {
                    by_level = earliest(by_level, stale_at);
                }
            } else if other.goes_before(other_id, mine, id) {
                by_sibling = earliest(by_sibling, stale_at);
            }
        }
        (by_level, by_sibling)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut shares = self.gate.lock();
        let Some(entry) = shares.bodies.remove(&self.id) else {
            return;
        };
        if let Some(stream) = entry.stream {
            shares.by_stream.remove(&stream);
        }
        wake_held(shares, entry.urgency, Level::AndItsOwn);
    }
}

/// Which held bodies a change of one body of some urgency concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The less urgent ones (its charge moved it back in line).
    LessUrgent,
    /// Those of its own urgency too (it stopped, ended, or gave the bodies behind it their
    /// turn).
    AndItsOwn,
}

/// Wakes the held bodies that `level` says a change of a body of `urgency` concerns (the
/// only ones it can hold), after releasing the lock.
fn wake_held(mut shares: Locked<'_>, urgency: u8, level: Level) {
    let wakers: Vec<Waker> = shares
        .bodies
        .values_mut()
        .filter(|entry| match level {
            Level::LessUrgent => entry.urgency > urgency,
            Level::AndItsOwn => entry.urgency >= urgency,
        })
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
        let (first, second) = (gate.register(first, None), gate.register(second, None));
        (gate, first, second)
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
        let third = register(streams[2], 100);
        assert_eq!(
            race(&third, &second, 4),
            (4, 0),
            "raised before its request"
        );
        // A server's pin outranks the client's update.
        drop((first, third));
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

    #[test]
    fn above_the_default_urgency_or_of_unknown_length_no_body_waits_for_its_level() {
        let gate = BodyGate::default();
        let (first, second) = (gate.register(2, length(1000)), gate.register(2, length(10)));
        assert_eq!(race(&first, &second, 10), (10, 10));
        let gate = BodyGate::default();
        let (known, unknown) = (gate.register(3, length(10)), gate.register(3, None));
        assert_eq!(race(&unknown, &known, 10), (10, 10));
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
