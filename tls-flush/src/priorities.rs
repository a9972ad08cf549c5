//! What the wrapper knows about each stream's priority: the client's signals (request
//! header, then PRIORITY_UPDATE frames in order) overlaid by what the server pinned in
//! its `priority` response header. Bounded whatever the peer sends:
//!
//! - tracked streams: at most `max_open` entries (about 40 bytes each); further streams get
//!   the default priority;
//! - updates for streams not open yet: at most `max_early_updates` (8 bytes each);
//! - anticipation holds: at most `max_open` armed requests (16 bytes each), and only
//!   complete requests (END_STREAM seen) arm one, once;
//! - streams whose priority changed since the scheduler last looked: at most `max_open`
//!   plus the closes since then, capped at [`MAX_CHANGES`] (past it the scheduler re-reads
//!   every queued stream once);
//! - a PRIORITY_UPDATE's field value is parsed only when it is applied or buffered.

use std::collections::VecDeque;

use foldhash::HashMap;
use std::time::{Duration, Instant};

use tower_priority::{Priority, PriorityParams, PriorityUpdate};

#[cfg(feature = "serve")]
use crate::body_gate::BodyGate;
use crate::stats::ConnectionStats;

/// Bound on the list of changed streams between two looks of the scheduler.
pub(crate) const MAX_CHANGES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// The request is not complete yet, or anticipation is off.
    Idle,
    /// Complete, its response body not begun: less urgent DATA may wait for it.
    Armed(u8),
    /// Its response body began, its bound expired, or it was never eligible.
    Done,
}

#[derive(Debug, Clone, Copy)]
struct StreamEntry {
    client: Priority,
    pinned: PriorityParams,
    /// The response's first header block has been written by h2.
    response_started: bool,
    /// The response's first DATA frame (or a header block ending the stream) has been
    /// written by h2: what an armed hold waits for. Its HEADERS alone are not enough:
    /// DATA chosen between them and the body would still go out ahead of the body.
    body_started: bool,
    hold: Hold,
    /// Its hold was armed again when its HEADERS left: the first of its two deadlines in
    /// the hold queue passes without disarming it.
    rearmed: bool,
    /// Already in the changed list.
    changed: bool,
}

/// Outcome of one PRIORITY_UPDATE, for tests and tracing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateOutcome {
    Applied,
    Buffered,
    Ignored,
    Invalid,
}

/// Which streams' effective priority changed since the scheduler last asked.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    ids: Vec<u32>,
    /// More changes than [`MAX_CHANGES`]: every stream must be re-read.
    overflowed: bool,
}

/// The armed holds of a connection: in a box of their own, made at the first hold and
/// given back once the connection is idle, so that a connection that holds nothing keeps
/// 8 bytes for them instead of 64.
#[derive(Debug, Default)]
struct Holds {
    /// In arming order (so deadlines ascend): stream, urgency, deadline.
    queue: VecDeque<(u32, u8, Instant)>,
    /// Armed holds per urgency.
    armed: [u32; 8],
    /// Small responses whose header block h2 wrote and whose end the wrapper has not sent,
    /// in that order (so ends ascend): stream, urgency, the room its rest takes in bytes,
    /// end of the room kept for it (see [`ROOM_RESERVATION`]).
    under_way: VecDeque<(u32, u8, u32, Instant)>,
}

/// The largest response (by `content-length`) that less urgent bulk keeps window room for:
/// an answer of one TLS record (the browser lab's demo answer is 4 KiB, page-app's API
/// answers 2 KB). A stylesheet or a font (40-60 KB) is a download of its own, which room
/// for a few segments would not speed up, and which would slow the images behind it.
pub(crate) const SMALL_RESPONSE: u64 = 16 * 1024;

/// What a small response's rest takes on the wire beyond its body: a DATA frame header and
/// a TLS record's overhead each for its body and for the frame that may end it.
const RESPONSE_OVERHEAD: u32 = 2 * (9 + 22);

/// How long after a small response's header block less urgent bulk keeps room in the
/// congestion window for the rest of the response. tower-http's `ServeDir` answers with the
/// headers, reads the file, and finds its end one read later (hyper then sends an empty DATA
/// frame that ends the stream): in the browser lab's demo page the 4 KiB critical body
/// followed its headers 0.5 to 9 ms later (24 ms at most in 20 loads, under Chromium's CPU
/// load), and in 5 of 9 loads where its request came with the downloads' their records had
/// filled the window meanwhile, so that the body, or the frame ending it, came a round trip
/// late. The room costs the download a few segments of the window, not the idle link a
/// hold costs, so it is kept longer than a hold's bound.
pub(crate) const ROOM_RESERVATION: Duration = Duration::from_millis(25);

/// Per-connection table of stream priorities.
#[derive(Debug)]
pub(crate) struct StreamPriorities {
    open: HashMap<u32, StreamEntry>,
    /// Updates that arrived before their stream opened (RFC 9218 §7.1 allows this).
    early_updates: VecDeque<(u32, Priority)>,
    max_early_updates: usize,
    max_open: usize,
    /// Highest client-initiated stream id seen: lower ids not in `open` are closed.
    highest_client_stream: u32,
    /// The armed holds: made at the first one, given back at idle (see [`Holds`]).
    holds: Option<Box<Holds>>,
    anticipate: Option<Duration>,
    changes: Changes,
    /// The most urgent request completed since [`take_completed`](Self::take_completed) last
    /// looked (of equally urgent ones, the latest): stream and urgency.
    completed: Option<(u32, u8)>,
    /// The connection's body gate, told which streams open, change and close, so that it
    /// follows the client's updates at the source too.
    #[cfg(feature = "serve")]
    gate: Option<BodyGate>,
    /// The wrapper refused h2's last write (its queue is full), as the gate was told.
    #[cfg(feature = "serve")]
    refusing_writes: bool,
    stats: ConnectionStats,
}

impl StreamPriorities {
    pub(crate) fn new(
        max_early_updates: usize,
        max_open: usize,
        anticipate: Option<Duration>,
        stats: ConnectionStats,
    ) -> Self {
        StreamPriorities {
            open: HashMap::default(),
            early_updates: VecDeque::new(),
            max_early_updates,
            max_open,
            highest_client_stream: 0,
            holds: None,
            anticipate,
            changes: Changes::default(),
            completed: None,
            #[cfg(feature = "serve")]
            gate: None,
            #[cfg(feature = "serve")]
            refusing_writes: false,
            stats,
        }
    }

    /// Tells `gate` of every stream that opens, changes and closes from now on.
    #[cfg(feature = "serve")]
    pub(crate) fn follow_bodies(&mut self, gate: BodyGate) {
        self.gate = Some(gate);
    }

    /// The wrapper refused h2's write: its queue is full. The gate is told once per spell
    /// (see [`BodyGate::writes_refused`]).
    pub(crate) fn writes_refused(&mut self) {
        #[cfg(feature = "serve")]
        if let Some(gate) = self.gate.as_ref().filter(|_| !self.refusing_writes) {
            self.refusing_writes = true;
            gate.writes_refused();
        }
    }

    /// The wrapper took h2's write: a spell of refusals, if any, is over.
    pub(crate) fn writes_taken(&mut self) {
        #[cfg(feature = "serve")]
        if let Some(gate) = self.gate.as_ref().filter(|_| self.refusing_writes) {
            self.refusing_writes = false;
            gate.writes_taken(tokio::time::Instant::now());
        }
    }

    /// A request header block opened `stream_id` with the given client signal.
    pub(crate) fn open_request(&mut self, stream_id: u32, client: Priority) {
        if stream_id == 0 || stream_id.is_multiple_of(2) {
            return;
        }
        if stream_id <= self.highest_client_stream {
            // Trailers or a reused id: the stream is known or closed; the request
            // header of an open stream was already applied.
            return;
        }
        self.highest_client_stream = stream_id;
        #[cfg(feature = "serve")]
        if let Some(gate) = &self.gate {
            let early = self.early_updates.iter().find(|(id, _)| *id == stream_id);
            gate.stream_opened(stream_id, client, early.map(|&(_, p)| p));
        }
        if self.open.len() >= self.max_open {
            // h2 enforces its own concurrency limit; this bound only protects our memory.
            return;
        }
        let mut entry = StreamEntry {
            client,
            pinned: PriorityParams::default(),
            response_started: false,
            body_started: false,
            hold: Hold::Idle,
            rearmed: false,
            changed: false,
        };
        // Updates sent before the request apply in arrival order, after the header.
        self.early_updates.retain(|&(id, p)| {
            if id == stream_id {
                entry.client = p;
                false
            } else {
                true
            }
        });
        self.open.insert(stream_id, entry);
    }

    /// The client finished sending `stream_id`'s request (END_STREAM): from now on, and
    /// for at most the anticipation bound, less urgent DATA may wait for its response.
    /// Each request arms at most one hold.
    pub(crate) fn request_complete(&mut self, stream_id: u32) {
        if let Some(entry) = self.open.get(&stream_id) {
            let urgency = entry.pinned.apply_to(entry.client).urgency.min(7);
            if self.completed.is_none_or(|(_, before)| urgency <= before) {
                self.completed = Some((stream_id, urgency));
            }
        }
        let Some(bound) = self.anticipate else {
            return;
        };
        let now = crate::clock::now();
        self.prune_holds(now);
        let Some(entry) = self.open.get_mut(&stream_id) else {
            return;
        };
        let urgency = entry.pinned.apply_to(entry.client).urgency.min(7);
        let eligible = entry.hold == Hold::Idle
            && !entry.body_started
            && urgency < 7
            && self.holds.as_ref().map_or(0, |h| h.queue.len()) < self.max_open;
        if !eligible {
            entry.hold = Hold::Done;
            return;
        }
        entry.hold = Hold::Armed(urgency);
        let holds = self.holds.get_or_insert_with(Box::default);
        holds.armed[usize::from(urgency)] += 1;
        holds.queue.push_back((stream_id, urgency, now + bound));
    }

    /// The most urgent request completed since the last call (of equally urgent ones, the
    /// latest), with its urgency.
    pub(crate) fn take_completed(&mut self) -> Option<(u32, u8)> {
        self.completed.take()
    }

    /// Applies one PRIORITY_UPDATE payload received on `frame_stream_id`.
    pub(crate) fn apply_update(&mut self, frame_stream_id: u32, payload: &[u8]) -> UpdateOutcome {
        let outcome = self.classify_update(frame_stream_id, payload);
        match outcome {
            UpdateOutcome::Applied => self.stats.add_update_applied(1),
            UpdateOutcome::Buffered => self.stats.add_update_buffered(1),
            UpdateOutcome::Ignored => self.stats.add_update_ignored(1),
            UpdateOutcome::Invalid => self.stats.add_update_invalid(1),
        }
        tracing::trace!(
            frame_stream_id,
            ?outcome,
            len = payload.len(),
            "PRIORITY_UPDATE"
        );
        outcome
    }

    fn classify_update(&mut self, frame_stream_id: u32, payload: &[u8]) -> UpdateOutcome {
        // RFC 9218 §7.1: PRIORITY_UPDATE is sent on stream 0 in HTTP/2.
        if frame_stream_id != 0 {
            return UpdateOutcome::Invalid;
        }
        // Short payload, stream id 0, non-ASCII value: all malformed (§7.1). The value
        // itself is parsed below, only where it is used.
        let Ok((id, _)) = PriorityUpdate::split(payload) else {
            return UpdateOutcome::Invalid;
        };
        let parse =
            || PriorityUpdate::parse(payload).map_or_else(|_| Priority::default(), |u| u.priority);
        if let Some(entry) = self.open.get_mut(&id) {
            entry.client = parse();
            #[cfg(feature = "serve")]
            if let Some(gate) = &self.gate {
                gate.client_updated(id, entry.client);
            }
            Self::relevel_hold(&mut self.holds, entry);
            Self::mark_changed(&mut self.changes, id, entry);
            return UpdateOutcome::Applied;
        }
        if id.is_multiple_of(2) || id <= self.highest_client_stream {
            // Server-initiated (hyper never pushes) or already closed.
            return UpdateOutcome::Ignored;
        }
        if let Some(slot) = self.early_updates.iter_mut().find(|(i, _)| *i == id) {
            slot.1 = parse();
            return UpdateOutcome::Buffered;
        }
        if self.early_updates.len() >= self.max_early_updates {
            return UpdateOutcome::Ignored;
        }
        self.early_updates.push_back((id, parse()));
        UpdateOutcome::Buffered
    }

    /// h2 wrote the first response header block of `stream_id`, with this `priority`
    /// response header (if any): what the server pinned; and this `content-length`, where
    /// known (a small response gets room in the window, see [`ROOM_RESERVATION`]). Returns
    /// the urgency of the stream's hold when one is armed (after the pin): less urgent DATA
    /// waits for this response's body.
    pub(crate) fn response_started(
        &mut self,
        stream_id: u32,
        pinned: Option<PriorityParams>,
        length: Option<u64>,
    ) -> Option<u8> {
        let entry = self.open.get_mut(&stream_id)?;
        if entry.response_started {
            return None;
        }
        entry.response_started = true;
        if let Some(p) = pinned {
            let before = entry.pinned.apply_to(entry.client);
            entry.pinned = p;
            if p.apply_to(entry.client) != before {
                Self::relevel_hold(&mut self.holds, entry);
                Self::mark_changed(&mut self.changes, stream_id, entry);
            }
        }
        let now = crate::clock::now();
        let small = length.filter(|&n| n > 0 && n <= SMALL_RESPONSE);
        if let (Some(_), Some(n)) = (self.anticipate, small) {
            let urgency = entry.pinned.apply_to(entry.client).urgency.min(7);
            let room = n as u32 + RESPONSE_OVERHEAD;
            let holds = self.holds.get_or_insert_with(Box::default);
            Self::prune_under_way(holds, now);
            if urgency < 7 && holds.under_way.len() < self.max_open {
                holds
                    .under_way
                    .push_back((stream_id, urgency, room, now + ROOM_RESERVATION));
            }
        }
        let Hold::Armed(urgency) = entry.hold else {
            return None;
        };
        // Its body may still be a file read away (tower-http's `ServeDir` answers with the
        // headers, then reads): the bound starts again for it. In the browser lab's demo
        // page the 4 KiB critical body left 3.5 ms after its headers, just after a hold
        // armed at the request had expired, behind a full window of the download's bytes:
        // one round trip late.
        if let (Some(bound), Some(holds)) = (self.anticipate, self.holds.as_mut()) {
            if !entry.rearmed && holds.queue.len() < self.max_open {
                entry.rearmed = true;
                holds.queue.push_back((stream_id, urgency, now + bound));
            }
        }
        Some(urgency)
    }

    /// h2 wrote the first DATA frame of `stream_id`'s response, or a header block that ends
    /// it: a hold armed for it ends.
    pub(crate) fn response_body_started(&mut self, stream_id: u32) {
        if let Some(entry) = self.open.get_mut(&stream_id) {
            if !entry.body_started {
                entry.body_started = true;
                Self::disarm(&mut self.holds, entry);
            }
        }
    }

    /// The stream is finished (response ended, or reset in either direction).
    pub(crate) fn close(&mut self, stream_id: u32) {
        #[cfg(feature = "serve")]
        if let Some(gate) = &self.gate {
            gate.stream_closed(stream_id);
        }
        if let Some(mut entry) = self.open.remove(&stream_id) {
            Self::disarm(&mut self.holds, &mut entry);
            // Its queued frames (if any) fall back to the default priority: a change only
            // when that is not the priority they are queued at already.
            if entry.pinned.apply_to(entry.client) == Priority::default() {
                return;
            }
            if self.changes.ids.len() < MAX_CHANGES {
                self.changes.ids.push(stream_id);
            } else {
                self.changes.overflowed = true;
            }
        }
    }

    fn mark_changed(changes: &mut Changes, stream_id: u32, entry: &mut StreamEntry) {
        if entry.changed {
            return;
        }
        if changes.ids.len() < MAX_CHANGES {
            entry.changed = true;
            changes.ids.push(stream_id);
        } else {
            changes.overflowed = true;
        }
    }

    /// An armed hold follows its stream's priority: a response pinned more urgent (or a
    /// PRIORITY_UPDATE) makes DATA between the two urgencies wait for it too.
    /// An armed entry's hold counts at its new urgency (an armed entry has its `holds`).
    fn relevel_hold(holds: &mut Option<Box<Holds>>, entry: &mut StreamEntry) {
        if let (Hold::Armed(u), Some(holds)) = (entry.hold, holds) {
            let now = entry.pinned.apply_to(entry.client).urgency.min(7);
            holds.armed[usize::from(u)] -= 1;
            holds.armed[usize::from(now)] += 1;
            entry.hold = Hold::Armed(now);
        }
    }

    fn disarm(holds: &mut Option<Box<Holds>>, entry: &mut StreamEntry) {
        if let (Hold::Armed(u), Some(holds)) = (entry.hold, holds) {
            holds.armed[usize::from(u)] -= 1;
        }
        entry.hold = Hold::Done;
    }

    /// The armed holds in arming order.
    fn hold_queue(&self) -> impl Iterator<Item = &(u32, u8, Instant)> {
        self.holds.iter().flat_map(|h| h.queue.iter())
    }

    /// Streams whose effective priority changed since the last call, each once; `true`
    /// with them when the list overflowed and every stream must be re-read.
    pub(crate) fn take_changes(&mut self, out: &mut Vec<u32>) -> bool {
        out.clear();
        if self.changes.ids.is_empty() && !self.changes.overflowed {
            return false;
        }
        out.append(&mut self.changes.ids);
        for id in out.iter() {
            if let Some(entry) = self.open.get_mut(id) {
                entry.changed = false;
            }
        }
        if std::mem::take(&mut self.changes.overflowed) {
            for entry in self.open.values_mut() {
                entry.changed = false;
            }
            return true;
        }
        false
    }

    /// The effective priority of `stream_id`: client signals overlaid by server pins.
    pub(crate) fn effective(&self, stream_id: u32) -> Priority {
        self.open
            .get(&stream_id)
            .map(|e| e.pinned.apply_to(e.client))
            .unwrap_or_default()
    }

    /// While a complete request more urgent than `urgency` waits for its response (armed
    /// less than the anticipation bound ago), the instant at which to look again: DATA of
    /// that urgency should wait until then (or until that response begins).
    pub(crate) fn hold_deadline(&mut self, urgency: u8, now: Instant) -> Option<Instant> {
        self.prune_holds(now);
        self.may_hold(urgency)
            .then(|| self.hold_queue().next().map(|h| h.2))
            .flatten()
    }

    /// True while a request more urgent than `urgency` may still hold DATA (its hold may
    /// have expired since): without one, nothing needs the clock.
    pub(crate) fn may_hold(&self, urgency: u8) -> bool {
        self.holds.as_ref().is_some_and(|h| {
            h.armed
                .iter()
                .take(usize::from(urgency.min(8)))
                .any(|&n| n > 0)
        })
    }

    /// True while a complete request as urgent as `urgency` or more has an armed hold and no
    /// response header block yet: before the connection's first DATA, DATA of `urgency`
    /// waits for it too, since the application may pin that response more urgent (the
    /// requests of a page load often arrive together, all at the default urgency). At most
    /// `max_open` holds are looked at.
    pub(crate) fn may_hold_first_data(&self, urgency: u8) -> bool {
        self.hold_queue()
            .any(|&(id, _, _)| self.awaits_first_response(id, urgency))
    }

    /// The deadline of the first hold [`may_hold_first_data`](Self::may_hold_first_data)
    /// looks for.
    pub(crate) fn first_data_deadline(&mut self, urgency: u8, now: Instant) -> Option<Instant> {
        self.prune_holds(now);
        self.hold_queue()
            .find(|&&(id, _, _)| self.awaits_first_response(id, urgency))
            .map(|h| h.2)
    }

    fn awaits_first_response(&self, id: u32, urgency: u8) -> bool {
        self.open.get(&id).is_some_and(|e| {
            !e.response_started && matches!(e.hold, Hold::Armed(u) if u <= urgency)
        })
    }

    /// True while a stream more urgent than `urgency` is open (its response not finished):
    /// h2 may be about to write its frames. At most `max_open` entries are looked at.
    pub(crate) fn more_urgent_open(&self, urgency: u8) -> bool {
        urgency > 0
            && self
                .open
                .values()
                .any(|e| e.pinned.apply_to(e.client).urgency < urgency)
    }

    /// The window room, in bytes, that bulk DATA of `urgency` leaves for the small
    /// responses more urgent than it that are under way (header block written, end not
    /// sent), each for at most [`ROOM_RESERVATION`] after its header block. At most
    /// `max_open` responses are looked at.
    pub(crate) fn room_reserved(&mut self, urgency: u8, now: Instant) -> usize {
        let Some(holds) = self.holds.as_mut() else {
            return 0;
        };
        Self::prune_under_way(holds, now);
        holds
            .under_way
            .iter()
            .filter(|&&(id, u, _, _)| u < urgency && self.open.contains_key(&id))
            .map(|&(_, _, room, _)| room as usize)
            .sum()
    }

    /// Drops the responses whose room is no longer kept (ends ascend, so from the front);
    /// one that ended sooner stays until then, and counts for nothing meanwhile.
    fn prune_under_way(holds: &mut Holds, now: Instant) {
        while holds
            .under_way
            .front()
            .is_some_and(|&(_, _, _, until)| until <= now)
        {
            holds.under_way.pop_front();
        }
    }

    /// True while another stream as urgent as `urgency` or more is open and its response
    /// body has not begun: h2 may be about to write it (a short one would go ahead of
    /// `stream`'s). At most `max_open` entries are looked at.
    pub(crate) fn body_awaited(&self, urgency: u8, stream: u32) -> bool {
        self.open.iter().any(|(&id, e)| {
            id != stream && !e.body_started && e.pinned.apply_to(e.client).urgency <= urgency
        })
    }

    /// Drops expired and finished holds from the front (deadlines ascend).
    fn prune_holds(&mut self, now: Instant) {
        while let Some((id, _, deadline)) =
            self.holds.as_ref().and_then(|h| h.queue.front().copied())
        {
            let entry = self.open.get_mut(&id);
            let armed = entry
                .as_ref()
                .is_some_and(|e| matches!(e.hold, Hold::Armed(_)));
            if armed && deadline > now {
                return;
            }
            if let Some(entry) = entry {
                if entry.rearmed && armed {
                    // Its later deadline, further back in the queue, still holds.
                    entry.rearmed = false;
                } else {
                    Self::disarm(&mut self.holds, entry);
                }
            }
            if let Some(holds) = &mut self.holds {
                holds.queue.pop_front();
            }
        }
    }

    /// Streams whose request was seen and that are not closed.
    pub(crate) fn open_streams(&self) -> usize {
        self.open.len()
    }

    /// With no stream open (an idle connection): gives back the memory the table grew to
    /// while streams were open, and the body gate's state if it has nothing to keep.
    /// Updates for streams not open yet are kept.
    pub(crate) fn release_idle(&mut self) {
        if !self.open.is_empty() {
            return;
        }
        self.open.shrink_to_fit();
        if self.holds.as_ref().is_some_and(|h| h.queue.is_empty()) {
            // No stream is open: nothing is armed either.
            self.holds = None;
        }
        if self.early_updates.is_empty() {
            self.early_updates.shrink_to_fit();
        }
        if self.changes.ids.is_empty() {
            self.changes.ids.shrink_to_fit();
        }
        #[cfg(feature = "serve")]
        if let Some(gate) = &self.gate {
            gate.release_idle();
        }
    }

    #[cfg(test)]
    pub(crate) fn early_updates(&self) -> usize {
        self.early_updates.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(id: u32, value: &str) -> Vec<u8> {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(value.as_bytes());
        p
    }

    fn table() -> StreamPriorities {
        StreamPriorities::new(
            4,
            100,
            Some(Duration::from_millis(5)),
            ConnectionStats::default(),
        )
    }

    #[test]
    fn update_applies_to_open_stream_and_pins_win() {
        let mut t = table();
        t.open_request(1, Priority::parse("u=5, i"));
        assert_eq!(t.effective(1), Priority::parse("u=5, i"));
        assert_eq!(t.apply_update(0, &update(1, "u=0")), UpdateOutcome::Applied);
        assert_eq!(t.effective(1).urgency, 0);
        t.response_started(1, Some(PriorityParams::parse(b"u=2")), None);
        assert_eq!(
            t.effective(1),
            Priority {
                urgency: 2,
                incremental: false
            }
        );
    }

    #[test]
    fn early_update_is_buffered_then_applied_and_bounded() {
        let mut t = table();
        assert_eq!(
            t.apply_update(0, &update(3, "u=1")),
            UpdateOutcome::Buffered
        );
        t.open_request(3, Priority::parse("u=6"));
        assert_eq!(t.effective(3).urgency, 1);
        assert_eq!(t.early_updates(), 0);
        for id in [5, 7, 9, 11] {
            assert_eq!(
                t.apply_update(0, &update(id, "u=1")),
                UpdateOutcome::Buffered
            );
        }
        assert_eq!(
            t.apply_update(0, &update(13, "u=1")),
            UpdateOutcome::Ignored
        );
        // Re-updating a buffered stream replaces its entry instead of growing the queue.
        assert_eq!(
            t.apply_update(0, &update(5, "u=2")),
            UpdateOutcome::Buffered
        );
        assert_eq!(t.early_updates(), 4);
    }

    #[test]
    fn closed_and_invalid_updates() {
        let mut t = table();
        t.open_request(1, Priority::default());
        t.close(1);
        assert_eq!(t.apply_update(0, &update(1, "u=0")), UpdateOutcome::Ignored);
        assert_eq!(t.apply_update(0, &[0, 0, 1]), UpdateOutcome::Invalid);
        assert_eq!(t.apply_update(0, &update(0, "u=0")), UpdateOutcome::Invalid);
        assert_eq!(
            t.apply_update(0, &[0, 0, 0, 5, 0xff]),
            UpdateOutcome::Invalid
        );
        assert_eq!(t.apply_update(1, &update(5, "u=0")), UpdateOutcome::Invalid);
        let s = t.stats.snapshot();
        assert_eq!(
            (s.priority_updates_ignored, s.priority_updates_invalid),
            (1, 4)
        );
    }

    #[test]
    fn holds_arm_on_complete_requests_once_and_end_with_the_response_or_the_bound() {
        let mut t = table();
        t.open_request(1, Priority::parse("u=5, i"));
        t.open_request(3, Priority::parse("u=0"));
        let now = Instant::now();
        assert_eq!(
            t.hold_deadline(5, now),
            None,
            "request 3 is not complete yet"
        );
        t.request_complete(3);
        let deadline = t.hold_deadline(5, now).expect("armed");
        assert!(deadline > now && deadline <= Instant::now() + Duration::from_millis(5));
        assert_eq!(
            t.hold_deadline(0, now),
            None,
            "nothing is more urgent than u=0"
        );
        assert_eq!(t.hold_deadline(5, deadline), None, "the bound expired");
        // Expired holds are gone for good: completing again does not re-arm.
        t.request_complete(3);
        assert_eq!(t.hold_deadline(5, now), None);
        t.open_request(5, Priority::parse("u=1"));
        t.request_complete(5);
        assert!(t.hold_deadline(5, Instant::now()).is_some());
        t.response_started(5, None, None);
        assert!(
            t.hold_deadline(5, Instant::now()).is_some(),
            "the response's HEADERS alone do not end the hold"
        );
        t.response_body_started(5);
        assert_eq!(t.hold_deadline(5, Instant::now()), None);
        // The most urgent of the completed requests, ties going to the latest.
        assert_eq!(t.take_completed(), Some((3, 0)));
        assert_eq!(t.take_completed(), None);
        let holds = t.holds.as_ref().expect("armed above");
        assert_eq!(holds.armed, [0; 8]);
        assert!(holds.queue.is_empty());
        // Idle: the holds' box is given back, and made again at the next hold.
        t.close(1);
        t.close(3);
        t.close(5);
        t.release_idle();
        assert!(t.holds.is_none());
    }

    #[test]
    fn a_hold_follows_a_response_pinned_more_urgent() {
        let mut t = table();
        t.open_request(1, Priority::parse("u=3"));
        t.open_request(3, Priority::parse("u=3"));
        t.request_complete(1);
        t.request_complete(3);
        let now = Instant::now();
        assert_eq!(
            t.hold_deadline(3, now),
            None,
            "equal urgencies hold nothing"
        );
        assert!(t.body_awaited(3, 1), "stream 3's body has not begun");
        // The application pins stream 3's response to u=0 (its HEADERS).
        t.response_started(3, Some(tower_priority::PriorityParams::parse(b"u=0")), None);
        assert!(
            t.hold_deadline(3, now).is_some(),
            "u=3 DATA now waits for the u=0 body"
        );
        t.response_body_started(3);
        assert_eq!(t.hold_deadline(3, now), None);
        assert!(!t.body_awaited(3, 1));
        let armed = t.holds.as_ref().map(|h| h.armed).unwrap_or_default();
        assert!(armed.iter().all(|&n| n <= 1), "{armed:?}");
        // A PRIORITY_UPDATE moves an armed hold too.
        t.open_request(5, Priority::parse("u=6"));
        t.request_complete(5);
        assert_eq!(t.hold_deadline(3, now), None);
        t.apply_update(0, &update(5, "u=1"));
        assert!(t.hold_deadline(3, now).is_some());
        let armed = t.holds.as_ref().map(|h| h.armed).unwrap_or_default();
        assert_eq!((armed[1], armed[6]), (1, 0));
    }

    #[test]
    fn a_hold_gets_its_bound_again_when_the_response_headers_leave() {
        let bound = Duration::from_millis(50);
        let mut t = StreamPriorities::new(4, 3, Some(bound), ConnectionStats::default());
        t.open_request(1, Priority::parse("u=1"));
        let armed_at = crate::clock::now();
        t.request_complete(1);
        std::thread::sleep(bound / 2);
        let headers_at = crate::clock::now();
        assert_eq!(t.response_started(1, None, None), Some(1));
        // Past the request's bound, the headers' still holds; past that, nothing.
        let after_first = armed_at + bound + Duration::from_millis(5);
        assert!(after_first < headers_at + bound);
        assert!(t.hold_deadline(3, after_first).is_some());
        let after_second = headers_at + bound + Duration::from_millis(10);
        assert_eq!(t.hold_deadline(3, after_second), None);
        assert_eq!(t.holds.as_ref().map(|h| h.armed[1]), Some(0));
        // Once only: a response's HEADERS start it again at most once.
        assert_eq!(t.response_started(1, None, None), None);
    }

    #[test]
    fn room_is_reserved_after_a_small_response_header_block_until_it_ends_or_the_reservation_does()
    {
        let anticipate = Some(Duration::from_millis(5));
        let mut t = StreamPriorities::new(4, 4, anticipate, ConnectionStats::default());
        for id in [1, 3, 5] {
            t.open_request(id, Priority::parse("u=1"));
        }
        let now = crate::clock::now();
        assert_eq!(t.room_reserved(3, now), 0, "no header block yet");
        t.response_started(1, None, Some(4000));
        t.response_started(5, None, Some(SMALL_RESPONSE + 1));
        let headers_at = crate::clock::now();
        let room = 4000 + RESPONSE_OVERHEAD as usize;
        assert_eq!(
            t.room_reserved(3, headers_at),
            room,
            "u=3 bulk leaves room, not for 5"
        );
        assert_eq!(
            t.room_reserved(1, headers_at),
            0,
            "equally urgent DATA does not"
        );
        t.response_body_started(1);
        assert_eq!(
            t.room_reserved(3, headers_at),
            room,
            "its end is still to come"
        );
        t.close(1);
        assert_eq!(t.room_reserved(3, headers_at), 0, "it ended");
        t.response_started(3, None, Some(100));
        let after = crate::clock::now() + ROOM_RESERVATION;
        assert_eq!(t.room_reserved(3, after), 0, "the reservation ended");
        // Without anticipation nothing is reserved.
        let mut t = StreamPriorities::new(4, 4, None, ConnectionStats::default());
        t.open_request(1, Priority::parse("u=0"));
        t.response_started(1, None, Some(100));
        assert_eq!(t.room_reserved(7, crate::clock::now()), 0);
    }

    #[test]
    fn holds_are_bounded_and_off_without_anticipation() {
        let mut t = StreamPriorities::new(4, 3, None, ConnectionStats::default());
        t.open_request(1, Priority::parse("u=0"));
        t.request_complete(1);
        assert_eq!(t.hold_deadline(7, Instant::now()), None);
        let mut t = StreamPriorities::new(
            4,
            3,
            Some(Duration::from_secs(60)),
            ConnectionStats::default(),
        );
        for id in (1..200).step_by(2) {
            t.open_request(id, Priority::parse("u=0"));
            t.request_complete(id);
            t.close(id.saturating_sub(2));
        }
        assert!(t.hold_queue().count() <= 3);
    }

    #[test]
    fn changes_are_listed_once_and_bounded() {
        let mut t = table();
        t.open_request(1, Priority::parse("u=5"));
        t.open_request(3, Priority::parse("u=5"));
        for _ in 0..10 {
            t.apply_update(0, &update(1, "u=0"));
        }
        t.response_started(3, Some(PriorityParams::parse(b"u=1")), None);
        t.response_started(3, Some(PriorityParams::parse(b"u=2")), None);
        let mut out = Vec::new();
        assert!(!t.take_changes(&mut out));
        assert_eq!(out, vec![1, 3]);
        assert!(!t.take_changes(&mut out));
        assert!(out.is_empty());
        // A stream at the default priority closes without a change: its frames are queued
        // at the default already.
        t.open_request(5, Priority::default());
        t.close(5);
        assert!(!t.take_changes(&mut out));
        assert!(out.is_empty());
        // Closes of streams opened and reset in a loop overflow into one full re-read.
        for id in (7..2 * MAX_CHANGES as u32 + 20).step_by(2) {
            t.open_request(id, Priority::parse("u=5"));
            t.close(id);
        }
        assert!(t.changes.ids.len() <= MAX_CHANGES);
        assert!(t.take_changes(&mut out));
    }

    #[test]
    fn updates_for_closed_streams_are_not_parsed_but_malformed_ones_still_count() {
        let mut t = table();
        t.open_request(1, Priority::default());
        t.close(1);
        let long = format!("u=1, {}", "x=1, ".repeat(200));
        assert_eq!(t.apply_update(0, &update(1, &long)), UpdateOutcome::Ignored);
        assert_eq!(
            t.apply_update(0, &[0, 0, 0, 1, 0xff]),
            UpdateOutcome::Invalid
        );
    }

    #[test]
    fn open_streams_are_bounded() {
        let mut t = StreamPriorities::new(4, 2, None, ConnectionStats::default());
        for id in [1, 3, 5] {
            t.open_request(id, Priority::default());
        }
        assert_eq!(t.open_streams(), 2);
    }
}
