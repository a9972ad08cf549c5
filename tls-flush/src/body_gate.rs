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
//! and puts small ones ahead of long downloads. Above the default urgency bodies go in request
//! order, as the wire scheduler sends them (one response at a time, in stream order): a
//! later body passes one piece for every [`SIBLING_SHARE`] of the earlier one's. Why: h2
//! takes every chunk a body offers and writes its streams' frames round-robin, so an
//! article's five `u=2` images, let through together, reached the wire interleaved as soon
//! as the wrapper's queue was full, and the hero image, the page's largest contentful
//! paint, ended with the second (browser lab, `page-article`). Bodies of unknown length
//! (streams, server-sent events) neither wait for nor hold back their level.
//!
//! A body holds back as soon as it is registered, before its first chunk: for at most
//! [`WAIT_GRACE`], while its source reads (`ServeDir` opens and reads the file on tokio's
//! blocking pool). Why: the first body whose read returned went first, and a page's images
//! often beat its stylesheet and hero image to it (16 KB of the second image went ahead of
//! both, 6.5 ms at 20 Mbit/s, in 2 of 3 traced loads).
//!
//! A body's urgency is its request's, moved by the client's PRIORITY_UPDATE frames for its
//! stream and overlaid by the server's pin, as the wire scheduler sees it ([`streams`] says
//! how the gate learns which stream a body answers).
//!
//! Invariants:
//! - A body is only ever delayed, never reordered or altered: its frames pass in order and
//!   whole (the gate holds at most one chunk per body, which hyper would have held anyway).
//! - Bodies of the same urgency hold each other back only by length (at or below the
//!   default urgency) or request order (above it) as above (a body of unknown length never
//!   waits for its level); otherwise a body holds back only less urgent ones. Either only
//!   while it is *producing*: its source's last answer was data and hyper polled it within
//!   [`STALE_AFTER`], or it was registered or its source answered `Pending` less than
//!   [`WAIT_GRACE`] ago (a file read). A body waiting
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

/// How many pieces the front body of a level (the shortest, or above the default urgency
/// the one requested first) passes for each piece of a body behind it: the same sixteenth
/// a level above the default gives the next one ([`cost_bits`]), so a long download behind
/// a page's images still moves, at a rate that costs the images little (a 100 KB image
/// takes a sixteenth longer).
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
    /// Its last offer was held behind a body of its level that goes before it (shorter, or
    /// above the default urgency requested first): it is not using the link, so it holds
    /// no other level back (its start tag lags while it waits).
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
    /// Registered at this instant, it has not produced yet (its source's first read):
    /// holds back as [`Activity::Waiting`] does, but its level's later bodies get no turn
    /// meanwhile (they would go first on the wire).
    Opening { since: Instant },
    /// Its source answered with data: holds less urgent bodies back while polled recently.
    Producing,
    /// Its source answered `Pending` at this instant, after producing: holds less urgent
    /// bodies back for [`WAIT_GRACE`].
    Waiting { since: Instant },
}

impl Entry {
    /// Whether this body (`id`) goes before `other` (`other_id`) of its own urgency:
    /// both lengths known, and above the default urgency requested first (see
    /// [`request_order`](Self::request_order)), at or below it a shorter [`length_class`]
    /// (or the same, requested first).
    fn goes_before(&self, id: u64, other: &Entry, other_id: u64) -> bool {
        if self.urgency != other.urgency {
            return false;
        }
        match (self.length, other.length) {
            (Some(_), Some(_)) if self.urgency < DEFAULT_URGENCY => {
                self.request_order(id) < other.request_order(other_id)
            }
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
            Activity::Opening { since } => Some(since + WAIT_GRACE),
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
        let opening = matches!(entry.state, Activity::Opening { .. });
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
        // it may pass now, and its level's too where it held them back while opening.
        let level = if opening { Level::AndItsOwn } else { level };
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
        let now = Instant::now();
        self.bodies.insert(
            id,
            Entry {
                urgency,
                stream,
                pinned,
                length,
                behind_sibling: false,
                start: self.virtual_time,
                state: Activity::Opening { since: now },
                last_polled: now,
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
                // One that has not produced yet gives no turns: what passed now would
                // reach the wire before its first chunk.
                if matches!(other.state, Activity::Opening { .. }) {
                    by_level = earliest(by_level, stale_at);
                } else {
                    by_sibling = earliest(by_sibling, stale_at);
                }
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
mod tests;
