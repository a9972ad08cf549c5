//! Orders absorbed frames for the wire.
//!
//! Only DATA frames of different streams change order. Everything else keeps the
//! invariants h2 relies on:
//! - a stream's frames keep their order (HEADERS, DATA, trailers, RST_STREAM);
//! - header blocks keep their relative order across streams (HPACK state) and each
//!   leaves as one unit (HEADERS + CONTINUATIONs, contiguous);
//! - SETTINGS (and SETTINGS ACK) is a barrier: what was queued before it goes first,
//!   what was queued after it goes after;
//! - connection-level control frames (PING, WINDOW_UPDATE, GOAWAY) go ahead of DATA.
//!
//! DATA follows RFC 9218 §10 within an urgency (non-incremental responses one at a time,
//! lowest stream id first; incremental ones one at a time too above the default urgency,
//! and from it down in the order h2 wrote them, which is the order the body gate let them
//! through, or h2's own round-robin: see [`incremental_key`]), and the urgencies share the
//! link by weight, sixteen times the next less urgent one above the default urgency and
//! twice from it down ([`shares`]), so that a long download never starves a less urgent
//! response.
//!
//! Barriers are modelled as epochs: frames queued between two SETTINGS frames form an
//! epoch, only the oldest epoch is served, and its closing SETTINGS leaves last.
//!
//! Cost: choosing the next unit does not depend on how many streams or units are queued.
//! The served epoch keeps an index of its streams' head units (control heads by sequence,
//! DATA heads by urgency, incremental flag and stream id or sequence, DATA heads by
//! sequence), updated when a head changes and when a stream's priority changes
//! ([`StreamPriorities`] lists those). Later epochs are indexed when they become the
//! served one, once.

use std::collections::{BTreeSet, VecDeque};

use foldhash::HashMap;

use bytes::Bytes;
use tower_priority::Priority;

use crate::frame::{self, FrameHeader};
use crate::priorities::StreamPriorities;

mod shares;

#[cfg(feature = "serve")]
pub(crate) use shares::cost_bits;
use shares::UrgencyShares;
pub(crate) use shares::DEFAULT_URGENCY;

/// One schedulable unit: a frame, or a whole header block (HEADERS + CONTINUATIONs).
#[derive(Debug, Clone)]
pub(crate) struct QueuedFrame {
    /// Header of the first frame of the unit.
    pub(crate) header: FrameHeader,
    /// The unit's wire bytes, frame headers included.
    pub(crate) bytes: Bytes,
    /// Order in which h2 wrote it.
    pub(crate) seq: u64,
    /// The unit ends the stream (END_STREAM on its frame, or RST_STREAM).
    pub(crate) ends_stream: bool,
}

impl QueuedFrame {
    pub(crate) fn is_data(&self) -> bool {
        self.header.kind == frame::DATA
    }

    /// DATA with bytes to carry: not an empty frame that only ends its stream (what
    /// hyper sends after a streamed body, `ServeDir`'s files included). Nothing waits
    /// for such a frame, while a response waits for it to end.
    fn carries_data(&self) -> bool {
        self.is_data() && !(self.ends_stream && self.header.length == 0)
    }
}

/// How frames are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ordering {
    /// As h2 wrote them.
    InOrder,
    /// RFC 9218 §10 for DATA, invariants above for everything else.
    Rfc9218,
}

/// What [`Scheduler::pop`] reports besides the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Popped {
    /// A DATA frame written earlier by h2 is still queued behind this one.
    pub(crate) overtook: bool,
}

/// Where a stream's head unit sits in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Not indexed (the epoch is not served yet).
    None,
    /// A header block: eligible only in its turn (`header_order`).
    HeaderBlock,
    /// Another non-DATA frame (RST_STREAM, a stream's WINDOW_UPDATE, ...), by sequence.
    Control(u64),
    /// DATA, at this priority, by sequence.
    Data(Priority, u64),
}

#[derive(Debug)]
struct StreamQueue {
    frames: VecDeque<QueuedFrame>,
    /// The priority the stream is indexed under.
    priority: Priority,
    /// Queued DATA units.
    data_units: usize,
    head: Head,
}

/// The served epoch's index of stream heads.
#[derive(Debug, Default)]
struct Index {
    control: BTreeSet<(u64, u32)>,
    /// Per urgency: non-incremental DATA heads by stream id, then incremental ones by
    /// [`incremental_key`] and stream id.
    sequential: [BTreeSet<u32>; 8],
    incremental: [BTreeSet<(u64, u32)>; 8],
    data_by_seq: BTreeSet<(u64, u32)>,
}

impl Index {
    /// The urgency levels with DATA heads, as bits (bit `u`: urgency `u`).
    fn waiting_levels(&self) -> u8 {
        (0..8)
            .filter(|&u| !self.sequential[u].is_empty() || !self.incremental[u].is_empty())
            .fold(0, |bits, u| bits | 1 << u)
    }
}

#[derive(Debug, Default)]
struct Epoch {
    conn: VecDeque<QueuedFrame>,
    streams: HashMap<u32, StreamQueue>,
    /// Queued header blocks, oldest first: sequence number and stream.
    header_order: VecDeque<(u64, u32)>,
    /// Queued DATA units per urgency (exact for the served epoch, as of push elsewhere).
    data_per_urgency: [usize; 8],
    index: Index,
    indexed: bool,
    /// The SETTINGS frame that closes this epoch; `None` for the newest epoch.
    barrier: Option<QueuedFrame>,
}

/// Where an incremental stream's DATA head sorts within its urgency (then by stream id).
///
/// Above the default urgency: first by stream id, one response at a time. A page's first
/// images come at `u=2, i` from Chromium, and the first (the hero, the LCP element) done
/// first beats all of them done late (browser lab, article: LCP 344 ms against 472
/// round-robin).
///
/// From the default urgency down: in the order h2 wrote the heads (by stream id, the
/// page's images waited for a 4 MB fetch it had started first: `load` 2.3x stock's), so the
/// wire keeps the order the body gate let the bodies through in (shortest first, see
/// [`body_gate`](crate::body_gate)); without the gate, h2's own round-robin of its streams'
/// buffers still shares the link frame by frame. Round-robin here undid the gate: a page's
/// first 2 MB image ended at the gate with a queue's worth of it (256 KiB) still here, which
/// then shared the link with the next image (browser lab, app: LCP 1932 ms against
/// Apache's 1708, which sends one image at a time; 1784 with this order and the gate's
/// request order and staleness fixes).
fn incremental_key(level: usize, seq: u64) -> u64 {
    if level < usize::from(DEFAULT_URGENCY) {
        0
    } else {
        seq
    }
}

/// Stream `id`'s queue in `streams`, a new one (from `spare` where there is one) at the
/// stream's priority now if it has none.
fn stream_queue<'a>(
    streams: &'a mut HashMap<u32, StreamQueue>,
    spare: &mut Vec<VecDeque<QueuedFrame>>,
    id: u32,
    priorities: &StreamPriorities,
) -> &'a mut StreamQueue {
    streams.entry(id).or_insert_with(|| StreamQueue {
        frames: spare.pop().unwrap_or_default(),
        priority: priorities.effective(id),
        data_units: 0,
        head: Head::None,
    })
}

fn level(p: Priority) -> usize {
    usize::from(p.urgency.min(7))
}

impl Epoch {
    /// The epoch being served, indexed from the start.
    fn served() -> Epoch {
        Epoch {
            indexed: true,
            ..Epoch::default()
        }
    }

    fn is_drained(&self) -> bool {
        self.conn.is_empty() && self.streams.is_empty()
    }

    fn unindex(&mut self, id: u32) {
        let Some(q) = self.streams.get_mut(&id) else {
            return;
        };
        match std::mem::replace(&mut q.head, Head::None) {
            Head::None | Head::HeaderBlock => {}
            Head::Control(seq) => {
                self.index.control.remove(&(seq, id));
            }
            Head::Data(p, seq) => {
                let level = level(p);
                if p.incremental {
                    self.index.incremental[level].remove(&(incremental_key(level, seq), id));
                } else {
                    self.index.sequential[level].remove(&id);
                }
                self.index.data_by_seq.remove(&(seq, id));
            }
        }
    }

    fn reindex(&mut self, id: u32) {
        self.unindex(id);
        let Some(q) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(front) = q.frames.front() else {
            return;
        };
        // A response's end with no bytes (an empty DATA frame with END_STREAM, which hyper
        // sends after a body whose end it learns one read late) goes with the control
        // frames: nothing of its stream is queued before it, and the client waits for
        // its nine bytes to finish the response. Sorted as DATA it could wait behind a
        // less urgent download the write budget was holding back.
        q.head = if front.carries_data() {
            let level = level(q.priority);
            if q.priority.incremental {
                let key = incremental_key(level, front.seq);
                self.index.incremental[level].insert((key, id));
            } else {
                self.index.sequential[level].insert(id);
            }
            self.index.data_by_seq.insert((front.seq, id));
            Head::Data(q.priority, front.seq)
        } else if front.header.is_header_block() {
            Head::HeaderBlock
        } else {
            self.index.control.insert((front.seq, id));
            Head::Control(front.seq)
        };
    }

    /// Moves `id` to `priority` (its DATA counts and its place in the index).
    fn reprioritize(&mut self, id: u32, priority: Priority) {
        let Some(q) = self.streams.get_mut(&id) else {
            return;
        };
        if q.priority == priority {
            return;
        }
        self.data_per_urgency[level(q.priority)] -= q.data_units;
        self.data_per_urgency[level(priority)] += q.data_units;
        q.priority = priority;
        if self.indexed {
            self.reindex(id);
        }
    }

    /// Makes this the served epoch: reads every stream's current priority and indexes it.
    fn build_index(&mut self, priorities: &StreamPriorities) {
        self.indexed = true;
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            let p = priorities.effective(id);
            if let Some(q) = self.streams.get_mut(&id) {
                q.head = Head::None;
                self.data_per_urgency[level(q.priority)] -= q.data_units;
                self.data_per_urgency[level(p)] += q.data_units;
                q.priority = p;
            }
            self.reindex(id);
        }
    }
}

/// The frame queues of one connection, allocated by the first push and given back whole
/// once nothing is queued on an idle connection ([`release_idle`](Self::release_idle)):
/// an idle connection keeps 16 bytes of them instead of 256 plus the served epoch (664).
#[derive(Debug)]
pub(crate) struct Scheduler {
    ordering: Ordering,
    queues: Option<Box<Queues>>,
}

impl Scheduler {
    pub(crate) fn new(ordering: Ordering) -> Self {
        Scheduler {
            ordering,
            queues: None,
        }
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        self.queues.as_ref().map_or(0, |q| q.queued_bytes)
    }

    /// Units queued (frames, header blocks).
    pub(crate) fn queued_units(&self) -> usize {
        self.queues.as_ref().map_or(0, |q| q.queued_units)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.as_ref().is_none_or(|q| q.is_empty())
    }

    /// Queues a unit h2 wrote, at the priority `priorities` gives its stream now.
    pub(crate) fn push(
        &mut self,
        header: FrameHeader,
        bytes: Bytes,
        priorities: &mut StreamPriorities,
    ) {
        let ordering = self.ordering;
        self.queues
            .get_or_insert_with(|| Box::new(Queues::new(ordering)))
            .push(header, bytes, priorities);
    }

    /// Gives the queues back (the served epoch, the queues' and the stream map's
    /// capacity, the spare stream queues, the round-robin cursors and urgency shares,
    /// which start afresh as on a new connection) once nothing is queued; for an idle
    /// connection. The next [`push`](Self::push) allocates them again.
    pub(crate) fn release_idle(&mut self) {
        if self.queued_units() == 0 {
            self.queues = None;
        }
    }

    /// True while the queues are allocated (see [`release_idle`](Self::release_idle)).
    pub(crate) fn is_allocated(&self) -> bool {
        self.queues.is_some()
    }

    /// True when a DATA frame of `stream_id` is queued where it can go next (at the head of
    /// its stream in the oldest epoch, or anywhere in the in-order queue).
    pub(crate) fn has_data_ready(&self, stream_id: u32) -> bool {
        self.queues
            .as_ref()
            .is_some_and(|q| q.has_data_ready(stream_id))
    }

    /// The least urgent priority among queued DATA (for admission); `None` in order, where
    /// nothing is admitted ahead of the queue.
    pub(crate) fn least_urgent_queued(&mut self, priorities: &mut StreamPriorities) -> Option<u8> {
        self.queues.as_mut()?.least_urgent_queued(priorities)
    }

    /// The most urgent priority among queued DATA (for admission); `None` in order.
    pub(crate) fn most_urgent_queued(&mut self, priorities: &mut StreamPriorities) -> Option<u8> {
        self.queues.as_mut()?.most_urgent_queued(priorities)
    }

    /// DATA of `urgency` and less urgent waits for the write budget (`None`: no DATA
    /// does), until the next call: meanwhile those levels take no turn of the urgencies'
    /// shares while a more urgent level has DATA queued, which goes next instead (see
    /// [`shares`]). A level that cannot send would otherwise keep a more urgent one
    /// waiting for nothing.
    pub(crate) fn budget_holds(&mut self, urgency: Option<u8>) {
        if let Some(q) = self.queues.as_mut() {
            q.budget_held = urgency.map_or(0, |u| 0xff << u.min(7));
        }
    }

    /// Takes the next unit to put on the wire.
    pub(crate) fn pop(
        &mut self,
        priorities: &mut StreamPriorities,
    ) -> Option<(QueuedFrame, Popped)> {
        self.queues.as_mut()?.pop(priorities)
    }

    /// The stream of the unit `pop` would return next (0 for a connection frame); `None`
    /// when nothing can go next.
    pub(crate) fn next_stream_id(&mut self, priorities: &mut StreamPriorities) -> Option<u32> {
        self.queues.as_mut()?.next_stream_id(priorities)
    }

    /// Puts the rest of a DATA frame [`pop`](Self::pop) just returned back where it was, at
    /// the head of its stream, and refunds its urgency's share what the pop charged for the
    /// rest: it goes out as if it had never left. Call it before anything else is popped.
    pub(crate) fn requeue_front(&mut self, rest: QueuedFrame, priorities: &mut StreamPriorities) {
        debug_assert!(rest.is_data());
        let ordering = self.ordering;
        self.queues
            .get_or_insert_with(|| Box::new(Queues::new(ordering)))
            .requeue_front(rest, priorities);
    }

    /// The urgency of the DATA frame `pop` would return next, if the next unit is DATA
    /// with bytes to carry (an empty frame that ends its stream is not: no budget or hold
    /// should make a response's end wait, 9 bytes, for a round trip).
    pub(crate) fn next_data_urgency(&mut self, priorities: &mut StreamPriorities) -> Option<u8> {
        self.queues.as_mut()?.next_data_urgency(priorities)
    }
}

/// The frame queues of one connection, once allocated (see [`Scheduler`]).
#[derive(Debug)]
struct Queues {
    ordering: Ordering,
    fifo: VecDeque<QueuedFrame>,
    epochs: VecDeque<Epoch>,
    /// How the urgencies share the link (see [`UrgencyShares`]).
    shares: UrgencyShares,
    /// The levels whose DATA waits for the write budget (bit `u`: urgency `u`; see
    /// [`Scheduler::budget_holds`]).
    budget_held: u8,
    queued_bytes: usize,
    queued_units: usize,
    next_seq: u64,
    /// Scratch list for [`StreamPriorities::take_changes`].
    changed: Vec<u32>,
    /// Emptied stream queues, kept for the next streams (a queue per response otherwise
    /// costs an allocation and a free per request).
    spare: Vec<VecDeque<QueuedFrame>>,
}

/// Emptied stream queues kept for reuse, at most.
const SPARE_QUEUES: usize = 16;

impl Queues {
    fn new(ordering: Ordering) -> Self {
        Queues {
            ordering,
            fifo: VecDeque::new(),
            // The served epoch is allocated by the first push.
            epochs: VecDeque::new(),
            shares: UrgencyShares::default(),
            budget_held: 0,
            queued_bytes: 0,
            queued_units: 0,
            next_seq: 0,
            changed: Vec::new(),
            spare: Vec::new(),
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.queued_bytes == 0
            && self.queued_units == 0
            && self.fifo.is_empty()
            && self
                .epochs
                .iter()
                .all(|e| e.is_drained() && e.barrier.is_none())
    }

    /// Queues a unit h2 wrote, at the priority `priorities` gives its stream now.
    fn push(&mut self, header: FrameHeader, bytes: Bytes, priorities: &mut StreamPriorities) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued_bytes += bytes.len();
        self.queued_units += 1;
        let ends_stream = header.end_stream() || header.kind == frame::RST_STREAM;
        let unit = QueuedFrame {
            header,
            bytes,
            seq,
            ends_stream,
        };
        if self.ordering == Ordering::InOrder {
            self.fifo.push_back(unit);
            return;
        }
        self.sync(priorities);
        self.open_served_epoch();
        let epoch = self
            .epochs
            .back_mut()
            .expect("there is always an open epoch");
        if header.kind == frame::SETTINGS {
            epoch.barrier = Some(unit);
            // One epoch more, not the four a growing deque takes (2.6 KiB; barriers are
            // rare, and the room is given back once the barrier leaves).
            self.epochs.reserve_exact(1);
            self.epochs.push_back(Epoch::default());
            return;
        }
        if header.stream_id == 0 {
            epoch.conn.push_back(unit);
            return;
        }
        let id = header.stream_id;
        if header.is_header_block() {
            epoch.header_order.push_back((seq, id));
        }
        let is_data = unit.is_data();
        let q = stream_queue(&mut epoch.streams, &mut self.spare, id, priorities);
        let was_empty = q.frames.is_empty();
        q.frames.push_back(unit);
        if is_data {
            q.data_units += 1;
            epoch.data_per_urgency[level(q.priority)] += 1;
        }
        if was_empty && epoch.indexed {
            epoch.reindex(id);
        }
    }

    /// Applies the priority changes `priorities` lists to the served epoch's index.
    fn sync(&mut self, priorities: &mut StreamPriorities) {
        let mut changed = std::mem::take(&mut self.changed);
        let all = priorities.take_changes(&mut changed);
        if let Some(epoch) = self.epochs.front_mut() {
            if all {
                let ids: Vec<u32> = epoch.streams.keys().copied().collect();
                changed.extend(ids);
            }
            for &id in &changed {
                epoch.reprioritize(id, priorities.effective(id));
            }
        }
        self.changed = changed;
    }

    /// True when a DATA frame of `stream_id` is queued where it can go next (at the head of
    /// its stream in the oldest epoch, or anywhere in the in-order queue).
    fn has_data_ready(&self, stream_id: u32) -> bool {
        match self.ordering {
            Ordering::InOrder => self
                .fifo
                .front()
                .is_some_and(|f| f.is_data() && f.header.stream_id == stream_id),
            Ordering::Rfc9218 => self
                .epochs
                .front()
                .and_then(|e| e.streams.get(&stream_id))
                .and_then(|q| q.frames.front())
                .is_some_and(QueuedFrame::is_data),
        }
    }

    /// The least urgent priority among queued DATA (for admission); `None` in order, where
    /// nothing is admitted ahead of the queue.
    fn least_urgent_queued(&mut self, priorities: &mut StreamPriorities) -> Option<u8> {
        if self.ordering == Ordering::InOrder {
            return None;
        }
        self.sync(priorities);
        (0..8u8).rev().find(|&u| {
            self.epochs
                .iter()
                .any(|e| e.data_per_urgency[usize::from(u)] > 0)
        })
    }

    /// The most urgent priority among queued DATA (for admission); `None` in order.
    fn most_urgent_queued(&mut self, priorities: &mut StreamPriorities) -> Option<u8> {
        if self.ordering == Ordering::InOrder {
            return None;
        }
        self.sync(priorities);
        (0..8u8).find(|&u| {
            self.epochs
                .iter()
                .any(|e| e.data_per_urgency[usize::from(u)] > 0)
        })
    }

    /// Takes the next unit to put on the wire.
    fn pop(&mut self, priorities: &mut StreamPriorities) -> Option<(QueuedFrame, Popped)> {
        let popped = match self.ordering {
            Ordering::InOrder => self
                .fifo
                .pop_front()
                .map(|f| (f, Popped { overtook: false })),
            Ordering::Rfc9218 => {
                self.sync(priorities);
                self.pop_rfc9218(priorities)
            }
        }?;
        self.queued_bytes -= popped.0.bytes.len();
        self.queued_units -= 1;
        Some(popped)
    }

    fn pop_rfc9218(&mut self, priorities: &StreamPriorities) -> Option<(QueuedFrame, Popped)> {
        let not_reordered = Popped { overtook: false };
        let epoch = self.epochs.front_mut()?;
        if epoch.is_drained() {
            // The epoch's barrier leaves last; the newest epoch has none and waits.
            epoch.barrier.as_ref()?;
            let barrier = self.epochs.pop_front().and_then(|e| e.barrier);
            match self.epochs.front_mut() {
                Some(next) => next.build_index(priorities),
                None => self.epochs.push_back(Epoch::served()),
            }
            // Back to one epoch, as on an idle connection: give back the room the barrier
            // made (four epochs' worth, about 2.5 KiB per connection otherwise kept for
            // good after the first SETTINGS exchange).
            if self.epochs.len() == 1 {
                self.epochs.shrink_to_fit();
            }
            return barrier.map(|b| (b, not_reordered));
        }
        if let Some(unit) = epoch.conn.pop_front() {
            return Some((unit, not_reordered));
        }
        let chosen = Self::next_stream(epoch, &self.shares, self.budget_held)?;
        let waiting = epoch.index.waiting_levels();
        let oldest_data = epoch.index.data_by_seq.first().map(|&(seq, _)| seq);
        let q = epoch
            .streams
            .get_mut(&chosen)
            .expect("chosen stream has a queue");
        let unit = q.frames.pop_front().expect("chosen stream has a frame");
        if unit.is_data() {
            q.data_units -= 1;
            epoch.data_per_urgency[level(q.priority)] -= 1;
            let length = unit.bytes.len().saturating_sub(frame::HEADER_LEN);
            self.shares
                .served(waiting, level(q.priority), length as u64);
        }
        if q.frames.is_empty() {
            epoch.unindex(chosen);
            if let Some(drained) = epoch.streams.remove(&chosen) {
                // Kept only while small: a queue that once held many frames gives its
                // memory back.
                if self.spare.len() < SPARE_QUEUES && drained.frames.capacity() <= 16 {
                    self.spare.push(drained.frames);
                }
            }
        } else {
            epoch.reindex(chosen);
        }
        if unit.header.is_header_block() {
            epoch.header_order.pop_front();
        }
        let overtook = unit.is_data() && oldest_data.is_some_and(|s| s < unit.seq);
        Some((unit, Popped { overtook }))
    }

    /// Before the first push (and the first requeue): the served epoch.
    fn open_served_epoch(&mut self) {
        if self.epochs.is_empty() {
            self.epochs.reserve_exact(1);
            self.epochs.push_back(Epoch::served());
        }
    }

    /// See [`Scheduler::requeue_front`].
    fn requeue_front(&mut self, rest: QueuedFrame, priorities: &mut StreamPriorities) {
        self.queued_bytes += rest.bytes.len();
        self.queued_units += 1;
        if self.ordering == Ordering::InOrder {
            self.fifo.push_front(rest);
            return;
        }
        self.sync(priorities);
        let id = rest.header.stream_id;
        let length = rest.bytes.len().saturating_sub(frame::HEADER_LEN) as u64;
        self.open_served_epoch();
        let epoch = self
            .epochs
            .front_mut()
            .expect("there is always a served epoch");
        // The stream's queue may have gone with the popped frame.
        let q = stream_queue(&mut epoch.streams, &mut self.spare, id, priorities);
        q.frames.push_front(rest);
        q.data_units += 1;
        let level = level(q.priority);
        epoch.data_per_urgency[level] += 1;
        epoch.reindex(id);
        self.shares.refund(level, length);
    }

    /// The stream of the unit `pop` would return next (0 for a connection frame); `None`
    /// when nothing can go next.
    fn next_stream_id(&mut self, priorities: &mut StreamPriorities) -> Option<u32> {
        match self.ordering {
            Ordering::InOrder => self.fifo.front().map(|f| f.header.stream_id),
            Ordering::Rfc9218 => {
                self.sync(priorities);
                let epoch = self.epochs.front()?;
                if !epoch.conn.is_empty() {
                    return Some(0);
                }
                // A drained epoch's barrier goes next: not a stream's unit to batch with.
                if epoch.is_drained() {
                    return None;
                }
                Self::next_stream(epoch, &self.shares, self.budget_held)
            }
        }
    }

    /// The urgency of the DATA frame `pop` would return next, if the next unit is DATA.
    fn next_data_urgency(&mut self, priorities: &mut StreamPriorities) -> Option<u8> {
        let id = self.next_stream_id(priorities)?;
        match self.ordering {
            Ordering::InOrder => {
                self.fifo.front().filter(|f| f.carries_data())?;
                Some(priorities.effective(id).urgency)
            }
            Ordering::Rfc9218 => {
                // A connection frame (stream 0) has no queue of its own: not DATA.
                let q = self.epochs.front()?.streams.get(&id)?;
                q.frames.front().filter(|f| f.carries_data())?;
                Some(q.priority.urgency)
            }
        }
    }

    /// The stream whose head unit goes next in the served `epoch` (stream-0 frames aside).
    fn next_stream(epoch: &Epoch, shares: &UrgencyShares, budget_held: u8) -> Option<u32> {
        // Non-DATA heads go first, oldest first; a header block only in its turn.
        let header_turn = epoch.header_order.front().copied().filter(|&(seq, id)| {
            epoch.streams[&id]
                .frames
                .front()
                .is_some_and(|f| f.seq == seq)
        });
        let control = epoch.index.control.first().copied();
        match (header_turn, control) {
            (Some(h), Some(c)) => Some(if h.0 < c.0 { h.1 } else { c.1 }),
            (Some((_, id)), None) | (None, Some((_, id))) => Some(id),
            (None, None) => Self::choose_data(epoch, shares, budget_held),
        }
    }

    /// Picks the stream whose DATA goes next (RFC 9218 §10).
    fn choose_data(epoch: &Epoch, shares: &UrgencyShares, budget_held: u8) -> Option<u32> {
        // A header block waiting behind its own stream's DATA (trailers) blocks every later
        // header block: that stream inherits the highest priority until it is through.
        if let Some(&(_, id)) = epoch.header_order.front() {
            if epoch.streams[&id]
                .frames
                .front()
                .is_some_and(QueuedFrame::is_data)
            {
                return Some(id);
            }
        }
        let index = &epoch.index;
        let waiting = index.waiting_levels();
        // Levels the write budget holds take no turn while another level can go.
        let free = waiting & !budget_held;
        let urgency = shares.next(if free != 0 { free } else { waiting })?;
        // Non-incremental responses one at a time, lowest stream id first.
        if let Some(&id) = index.sequential[urgency].first() {
            return Some(id);
        }
        // Incremental ones by `incremental_key`: see there.
        index.incremental[urgency].first().map(|&(_, id)| id)
    }
}

#[cfg(test)]
mod tests;
