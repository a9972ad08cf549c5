//! The write path for HTTP/2: absorb h2's frames, learn what the server pinned, queue,
//! schedule, and hand the transport one write of a record (several on an unpaced path) at
//! a time.

use bytes::{Bytes, BytesMut};
use tower_priority::PriorityParams;

use crate::absorb::{FrameAssembler, Step, PIECE};
use crate::anticipation::HoldClock;
use crate::config::FlushConfig;
use crate::frame::{self, FrameHeader};
use crate::hpack::{PassiveDecoder, PriorityField};
use crate::memory_budget::BudgetCharge;
use crate::priorities::StreamPriorities;
use crate::scheduler::{Ordering, Scheduler};
use crate::stats::ConnectionStats;

mod chunk;
mod record_writer;
mod split;

pub(crate) use record_writer::Drive;
use record_writer::{Downstream, RecordWriter};

/// Memory accounted for each queued unit (frame or header block) besides its wire bytes:
/// the unit's bookkeeping and its share of per-stream state. With it the byte limits also
/// bound the number of units (at most `hard_limit / UNIT_OVERHEAD`).
pub(crate) const UNIT_OVERHEAD: usize = 128;

/// The server-to-client half of an HTTP/2 connection.
#[derive(Debug)]
pub(crate) struct WritePath {
    assembler: FrameAssembler,
    /// The last piece of a streamed frame is queued: nothing else is admitted until the
    /// queue is empty, so that no unit can come between its pieces.
    streamed_tail: bool,
    hold: HoldClock,
    /// A header block whose CONTINUATIONs are still arriving (boxed: rare, and an idle
    /// connection keeps this field inline).
    open_block: Option<Box<(FrameHeader, BytesMut)>>,
    decoder: PassiveDecoder,
    scheduler: Scheduler,
    settings_sent: bool,
    hold_room: HoldRoom,
    h2_batch: H2Batch,
    writer: RecordWriter,
    /// The connection's account with the shared memory budget, kept in step with the
    /// queue; dropped (and so released) with the connection.
    budget: BudgetCharge,
    /// How often queue memory may be given back (see [`Releases`]).
    releases: Releases,
    stats: ConnectionStats,
}

/// Releases of queue memory on an idle connection in a row, before they are limited: the
/// SETTINGS exchange that opens a connection makes two or three idle points.
const RELEASE_BURST: u8 = 4;

/// After [`RELEASE_BURST`] releases, the next one waits until this long after the last:
/// a busy connection's queue empties after each burst of responses, and allocating the
/// queues again each time cost about 17 allocations a burst (h2load -c 10 -m 10 on a
/// 4 KiB response: 1.65 allocations more per request, 4 %).
const RELEASE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// When an idle connection may give its queue memory back: up to [`RELEASE_BURST`] times
/// in a row, then once [`RELEASE_INTERVAL`] has passed since the last time (which refills
/// the burst). The clock is read only at idle points with something to give back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Releases {
    credit: u8,
    last: Option<std::time::Instant>,
}

impl Default for Releases {
    fn default() -> Self {
        Releases {
            credit: RELEASE_BURST,
            last: None,
        }
    }
}

impl Releases {
    /// True when a release may happen at `now` (and counts it).
    pub(crate) fn take(&mut self, now: std::time::Instant) -> bool {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) >= RELEASE_INTERVAL)
        {
            self.credit = RELEASE_BURST;
        }
        if self.credit == 0 {
            return false;
        }
        self.credit -= 1;
        self.last = Some(now);
        true
    }
}

/// The queue's room for held DATA past the soft limit while DATA is held for an urgent
/// response (see [`HOLD_GRANT`]): granted one step at a time, each on a wake of h2's that
/// was not the wrapper's or with the awaited response's header block, up to the queue's
/// limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct HoldRoom {
    /// Bytes granted past the soft limit (0 once a hold ended).
    granted: usize,
    /// A hold was under way when the room was last looked at.
    in_hold: bool,
    refusal: Refusal,
}

/// Whether h2 may have more frames for the wrapper before it stops writing: it flushes
/// after every frame, and once more, without a write, when its batch is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum H2Batch {
    /// h2 wrote since its last flush.
    Writing,
    /// h2 flushed without writing since: its batch is over.
    Over,
}

/// Where h2 stands with the last frame refused past a limit (what matters during a hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Refusal {
    /// Nothing refused since the last grant.
    #[default]
    None,
    /// A frame was refused; the wrapper may still offer it again within the same poll.
    Refused,
    /// The refusal reached h2 (its write returned `Pending`), which released its stream
    /// state. While DATA is held nothing of the wrapper's wakes h2 before the hold ends, so
    /// h2 offering a frame again means another task woke it: typically the urgent
    /// response's, whose frames now wait in h2 behind the refused one.
    Returned,
}

impl WritePath {
    pub(crate) fn new(config: &FlushConfig, stats: ConnectionStats) -> Self {
        let ordering = if config.reorder {
            Ordering::Rfc9218
        } else {
            Ordering::InOrder
        };
        WritePath {
            assembler: FrameAssembler::default(),
            streamed_tail: false,
            hold: HoldClock::new(),
            open_block: None,
            decoder: PassiveDecoder::new("response", stats.clone()),
            scheduler: Scheduler::new(ordering),
            settings_sent: false,
            hold_room: HoldRoom::default(),
            h2_batch: H2Batch::Over,
            writer: RecordWriter::default(),
            budget: BudgetCharge::new(config.memory_budget.clone(), config.soft_limit),
            releases: Releases::default(),
            stats,
        }
    }

    /// Bytes taken from h2 and not yet handed to the transport.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.scheduler.queued_bytes()
            + self.open_block.as_ref().map_or(0, |open| open.1.len())
            + self.writer.current_remaining()
            + self.writer.unwritten()
    }

    /// The memory the queue accounts for: wire bytes plus [`UNIT_OVERHEAD`] per unit.
    pub(crate) fn queued_memory(&self) -> usize {
        let units = self.scheduler.queued_units()
            + usize::from(self.open_block.is_some())
            + usize::from(self.writer.current.is_some());
        self.queued_bytes() + units * UNIT_OVERHEAD
    }

    /// Publishes the queue's size to the connection's counters and charges the shared
    /// memory budget for it (a frame partly received included): once per write or flush
    /// of h2's.
    fn record_queue_size(&mut self) {
        let memory = self.queued_memory();
        self.stats.set_queued(self.queued_bytes(), memory);
        self.budget.sync(memory + self.assembler.pending_memory());
    }

    /// True while DATA is held for an urgent response (a timer will wake the task).
    pub(crate) fn is_holding(&self) -> bool {
        self.writer.is_holding()
    }

    /// Takes what it may of `buf` (h2's bytes) and returns how much.
    pub(crate) fn absorb(
        &mut self,
        buf: &[u8],
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> usize {
        let mut taken = 0;
        loop {
            if self.assembler.is_streaming() && !self.room_for_piece(config) {
                break;
            }
            match self.assembler.step(&buf[taken..]) {
                Step::NeedInput(n) => {
                    taken += n;
                    break;
                }
                Step::Header(n, header) => {
                    self.close_interrupted_block(&header, priorities);
                    if !self.admit(&header, config, priorities) {
                        // Leave this call's header bytes with h2: if they were the whole
                        // frame (an empty DATA, a SETTINGS ACK) h2 would otherwise count it
                        // as written while it waits here.
                        self.assembler.retreat(n);
                        break;
                    }
                    taken += n;
                    // h2 is not blocked (any more): a later refusal is a new one.
                    self.hold_room.refusal = Refusal::None;
                    if is_streamed(&header, config) {
                        self.assembler.admit_streaming();
                    } else {
                        self.assembler.admit();
                    }
                }
                Step::Frame(n, header, bytes) => {
                    taken += n;
                    let bytes = self.rewrite_first_settings(header, bytes, config);
                    self.collect_unit(header, bytes, config, priorities);
                }
                Step::Piece(n, header, bytes, last) => {
                    taken += n;
                    // END_STREAM belongs to the last piece: only then is the stream done.
                    let flags = if last {
                        header.flags
                    } else {
                        header.flags & !frame::FLAG_END_STREAM
                    };
                    priorities.response_body_started(header.stream_id);
                    self.scheduler
                        .push(FrameHeader { flags, ..header }, bytes, priorities);
                    self.streamed_tail = last;
                }
            }
        }
        self.record_queue_size();
        if taken > 0 {
            self.h2_batch = H2Batch::Writing;
        }
        taken
    }

    /// A streamed frame's next piece fits: nothing but its earlier pieces can be queued.
    fn room_for_piece(&mut self, config: &FlushConfig) -> bool {
        if self.scheduler.queued_units() == 0 {
            return true;
        }
        let queued = self.queued_memory();
        let cost = PIECE + UNIT_OVERHEAD;
        queued + cost <= self.soft_limit(config) && self.budget.admit(queued, cost)
    }

    /// The configured soft limit, or the [blocked soft limit](FlushConfig::blocked_soft_limit)
    /// while the transport is blocked on a path the write budget does not pace (loopback, a
    /// LAN). On a paced path the socket also blocks in normal operation (the budget keeps
    /// about a record unsent, above the kernel's low-water mark), and there the smaller
    /// queue made the lab's `late` critical response slower on the Verizon LTE recording
    /// (two of five runs: 47 -> 57 and 57 -> 99 ms), so a stalled reader on a long path
    /// still gets the whole soft limit. Either shrinks under the memory budget's pressure
    /// (see [`MemoryBudget`](crate::MemoryBudget)).
    fn soft_limit(&self, config: &FlushConfig) -> usize {
        let limit = match self.writer.downstream() {
            Downstream::Blocked if self.writer.is_unpaced() => config
                .blocked_soft_limit
                .map_or(config.soft_limit, |blocked| config.soft_limit.min(blocked)),
            Downstream::Blocked | Downstream::Taking => config.soft_limit,
        };
        self.budget.limit(limit)
    }

    /// True when h2 stopped in the middle of a frame: the assembler holds part of it, which
    /// can never be sent. (A header block left unfinished consists of whole frames: see
    /// [`Self::queue_open_block`].)
    pub(crate) fn has_truncated_frame(&self) -> bool {
        !self.assembler.is_idle()
    }

    /// Queues the open header block (a HEADERS or PUSH_PROMISE without END_HEADERS and the
    /// CONTINUATIONs so far, all whole frames) as it is, in its place: when another frame
    /// interrupts it, and at shutdown, where nothing can finish it any more.
    pub(crate) fn queue_open_block(&mut self, priorities: &mut StreamPriorities) {
        if let Some(open) = self.open_block.take() {
            let (first, block) = *open;
            let _ = observe_response_headers(first, &block, &mut self.decoder, priorities);
            self.scheduler.push(first, block.freeze(), priorities);
        }
    }
}

impl WritePath {
    /// Whether to take the frame `header` announces now: within the queue's limits (see
    /// [`Self::admit_within_limits`]) and, past the connection's floor, within the shared
    /// memory budget. A frame into an empty queue and the rest of a header block already
    /// begun are always taken (as the limits take them): the queue can always make
    /// progress.
    fn admit(
        &mut self,
        header: &FrameHeader,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> bool {
        if !self.admit_within_limits(header, config, priorities) {
            return false;
        }
        let queued = self.queued_memory();
        let forced = queued == 0 || header.kind == frame::CONTINUATION && self.open_block.is_some();
        if forced
            || self
                .budget
                .admit(queued, header.frame_len() + UNIT_OVERHEAD)
        {
            return true;
        }
        if self.hold_room.refusal == Refusal::None {
            self.hold_room.refusal = Refusal::Refused;
        }
        false
    }

    /// Whether the queue's limits take the frame `header` announces now: up to the soft
    /// limit anything, then only what would be sent ahead of the queue, up to the hard
    /// limit; DATA held for an urgent response only within the room granted past the soft
    /// limit. Every limit shrinks under the memory budget's pressure.
    fn admit_within_limits(
        &mut self,
        header: &FrameHeader,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> bool {
        if self.streamed_tail {
            if self.scheduler.queued_units() > 0 {
                return false;
            }
            self.streamed_tail = false;
        }
        let queued = self.queued_memory();
        if is_streamed(header, config) {
            // Written through in pieces, once everything before it is out.
            return queued == 0;
        }
        let cost = header.frame_len() + UNIT_OVERHEAD;
        if queued == 0 || queued + cost <= self.soft_limit(config) {
            return true;
        }
        // The rest of a header block already begun: it cannot leave until complete, so
        // refusing it could never make room. Memory stays bounded by the hard limit plus one
        // header block (whose size the application controls).
        if header.kind == frame::CONTINUATION && self.open_block.is_some() {
            return true;
        }
        let urgency = priorities.effective(header.stream_id).urgency;
        let holding = self.writer.is_holding_for_urgent();
        let held =
            holding && header.kind == frame::DATA && self.writer.holds_back(urgency, priorities);
        let room = self.hold_room(config);
        let limit = self.budget.limit(if held {
            config.soft_limit + room
        } else {
            config.hard_limit.max(config.soft_limit + room)
        });
        if queued + cost > limit {
            // Also outside a hold: h2 may be blocked on this frame when a hold begins (a
            // late urgent request read while the queue is full), and the urgent handler's
            // wake that brings h2 back must count as a comeback then.
            if self.hold_room.refusal == Refusal::None {
                self.hold_room.refusal = Refusal::Refused;
            }
            return false;
        }
        if held {
            return true;
        }
        // Past the soft limit, up to the hard limit, what would be sent ahead of the queue
        // gets in; and so does less urgent DATA while more urgent DATA is queued or its
        // response is expected: refusing it would block h2 on it, and h2 interleaves the
        // streams, so the more urgent stream's frames would wait behind it (after a
        // PRIORITY_UPDATE raised a stream, or a late urgent request, say).
        if header.kind != frame::DATA {
            return true;
        }
        if !config.reorder {
            return false;
        }
        // A more urgent stream is open, or one as urgent whose body has not begun: h2 may
        // have its frames queued behind this one, and refusing this one would keep them
        // there until the queue drained to the soft limit.
        if priorities.more_urgent_open(urgency)
            || priorities.body_awaited(urgency, header.stream_id)
        {
            return true;
        }
        let ahead = self
            .scheduler
            .least_urgent_queued(priorities)
            .is_some_and(|least| urgency < least);
        ahead
            || self
                .scheduler
                .most_urgent_queued(priorities)
                .is_some_and(|most| most < urgency)
    }

    /// How far past the soft limit held DATA may be taken: one more [`HOLD_GRANT`] each time
    /// h2 offers a frame again after a refusal reached it during a hold (see
    /// [`Refusal::Returned`]), and one when the awaited response's header block arrived
    /// (perhaps just before the hold began: a response pinned more urgent re-levels it);
    /// nothing once a hold ended.
    fn hold_room(&mut self, config: &FlushConfig) -> usize {
        let holding = self.writer.is_holding_for_urgent();
        if self.hold_room.in_hold && !holding {
            self.hold_room = HoldRoom::default();
        }
        self.hold_room.in_hold = holding;
        if holding && self.hold_room.refusal == Refusal::Returned {
            self.hold_room.refusal = Refusal::None;
            self.grant(config);
        }
        self.hold_room.granted
    }

    /// One more [`HOLD_GRANT`] of room past the soft limit, up to the queue's limit.
    fn grant(&mut self, config: &FlushConfig) {
        let most = config.queue_limit().saturating_sub(config.soft_limit);
        self.hold_room.granted = (self.hold_room.granted + HOLD_GRANT).min(most);
    }

    /// h2's write is about to return `Pending`: a refused frame has reached h2 (see
    /// [`Refusal::Returned`]; counted when h2 comes back during a hold), and the body gate
    /// learns that h2 cannot write.
    pub(crate) fn refusal_returned(&mut self, priorities: &mut StreamPriorities) {
        if self.hold_room.refusal == Refusal::Refused {
            self.hold_room.refusal = Refusal::Returned;
        }
        priorities.writes_refused();
    }

    /// Appends SETTINGS_NO_RFC7540_PRIORITIES = 1 to h2's first SETTINGS frame (RFC 9218 §2.1),
    /// by rewriting its length rather than injecting a frame h2 would not expect an ACK for.
    fn rewrite_first_settings(
        &mut self,
        header: FrameHeader,
        bytes: Bytes,
        config: &FlushConfig,
    ) -> Bytes {
        if header.kind != frame::SETTINGS
            || header.flags & frame::FLAG_ACK != 0
            || self.settings_sent
        {
            return bytes;
        }
        self.settings_sent = true;
        let already = frame::settings(&bytes[frame::HEADER_LEN..])
            .any(|(id, _)| id == frame::SETTINGS_NO_RFC7540_PRIORITIES);
        if !config.announce_no_rfc7540_priorities || already {
            return bytes;
        }
        let grown = FrameHeader {
            length: header.length + 6,
            ..header
        };
        let mut out = BytesMut::with_capacity(bytes.len() + 6);
        out.extend_from_slice(&grown.encode());
        out.extend_from_slice(&bytes[frame::HEADER_LEN..]);
        out.extend_from_slice(&frame::SETTINGS_NO_RFC7540_PRIORITIES.to_be_bytes());
        out.extend_from_slice(&1u32.to_be_bytes());
        out.freeze()
    }

    /// Groups header blocks into one unit, decodes them, and queues the unit.
    /// h2 writes a header block's frames back to back. Anything else arriving while a block
    /// is open (another frame, a CONTINUATION of another stream) means the writer broke that
    /// rule: queue the unfinished block as it is, in its place, so no byte is lost, nothing
    /// overtakes it, and the queue can still drain.
    fn close_interrupted_block(&mut self, next: &FrameHeader, priorities: &mut StreamPriorities) {
        let continues = |(first, _): &(FrameHeader, BytesMut)| {
            next.kind == frame::CONTINUATION && next.stream_id == first.stream_id
        };
        if self
            .open_block
            .as_deref()
            .is_some_and(|open| !continues(open))
        {
            self.queue_open_block(priorities);
        }
    }

    fn collect_unit(
        &mut self,
        header: FrameHeader,
        bytes: Bytes,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) {
        let open_block = &mut self.open_block;
        let (unit_header, unit) = if header.kind == frame::CONTINUATION {
            match open_block.take() {
                Some(mut open) => {
                    open.1.extend_from_slice(&bytes);
                    if !header.end_headers() {
                        *open_block = Some(open);
                        return;
                    }
                    let (first, block) = *open;
                    (first, block.freeze())
                }
                // h2 never writes a stray CONTINUATION; pass it on untouched.
                None => (header, bytes),
            }
        } else if matches!(header.kind, frame::HEADERS | frame::PUSH_PROMISE)
            && !header.end_headers()
        {
            *open_block = Some(Box::new((header, BytesMut::from(&bytes[..]))));
            return;
        } else {
            (header, bytes)
        };
        if unit_header.is_header_block() {
            let awaited =
                observe_response_headers(unit_header, &unit, &mut self.decoder, priorities);
            if awaited.is_some_and(|urgency| {
                self.scheduler
                    .least_urgent_queued(priorities)
                    .is_some_and(|least| urgency < least)
            }) {
                // Held DATA waits for this response's body, which is next in h2 behind at
                // most a frame of each stream h2 round-robins.
                self.grant(config);
            }
        }
        if unit_header.kind == frame::DATA
            || (unit_header.kind == frame::HEADERS && unit_header.end_stream())
        {
            priorities.response_body_started(unit_header.stream_id);
        }
        self.scheduler.push(unit_header, unit, priorities);
    }
}

/// How much more held DATA the queue takes past the soft limit each time h2 comes back
/// after a refusal while DATA is held for an urgent response, and when h2 writes the
/// awaited response's header block: four 16 KiB frames.
///
/// Held DATA stops at the soft limit: nothing of it leaves during the hold, and taking it
/// on would keep h2's task and the less urgent responses' tasks running at memory speed,
/// on the workers the urgent response's handler waits for (on a busy two-worker runtime
/// the queue used to reach the hard limit before the handler ran). h2 writes one frame at
/// a time with its stream state locked, so the urgent response joins h2's queue only once
/// h2 is blocked on a refused frame, and then behind that frame and one frame of each
/// stream h2 round-robins; its body follows its header block the same way. Granting only
/// on a wake that was not the wrapper's keeps the room for the urgent response's task,
/// however late it runs, instead of spending it on less urgent frames that h2 offers right
/// away.
pub(crate) const HOLD_GRANT: usize = 4 * (16384 + frame::HEADER_LEN + UNIT_OVERHEAD);

/// How far past the hard limit grants may take the queue during one hold: two grants (with
/// a soft limit close to the hard one).
pub(crate) const HOLD_OVERSHOOT: usize = 2 * HOLD_GRANT;

/// Frames up to this size are held whole even when the hard limit is set lower.
const STREAMED_ABOVE: usize = 1024 * 1024;

/// DATA too large to hold whole (over the hard limit, and over 1 MiB: a client may let h2
/// write frames of up to 16 MiB) is written through in pieces.
fn is_streamed(header: &FrameHeader, config: &FlushConfig) -> bool {
    header.kind == frame::DATA
        && header.frame_len() + UNIT_OVERHEAD > config.hard_limit.max(STREAMED_ABOVE)
}

/// Decodes an outgoing header block (keeping the mirrored HPACK state in step) and records
/// what the server pinned in its `priority` response header. When it begins a response whose
/// hold is armed, returns the hold's urgency.
fn observe_response_headers(
    first: FrameHeader,
    unit: &[u8],
    decoder: &mut PassiveDecoder,
    priorities: &mut StreamPriorities,
) -> Option<u8> {
    // A block in one frame (nearly every response's) is decoded where it is; one with
    // CONTINUATIONs is joined first.
    let joined;
    let block = match FrameHeader::parse(unit) {
        Some(h) if h.frame_len() == unit.len() => {
            frame::header_block_fragment(&h, &unit[frame::HEADER_LEN..]).unwrap_or_default()
        }
        _ => {
            joined = join_fragments(unit);
            &joined[..]
        }
    };
    let fields = decoder.head_fields(block);
    if first.kind == frame::HEADERS {
        let (pinned, length) = match fields {
            Some((PriorityField::Value(value), length)) => {
                (Some(PriorityParams::parse(value)), length)
            }
            Some((PriorityField::Absent | PriorityField::TooLong, length)) => (None, length),
            None => (None, None),
        };
        priorities.response_started(first.stream_id, pinned, length)
    } else {
        None
    }
}

/// The header block fragments of a unit's frames (HEADERS or PUSH_PROMISE, then
/// CONTINUATIONs), joined; a frame whose padding is malformed adds nothing.
fn join_fragments(unit: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    let mut rest = unit;
    while let Some(h) = FrameHeader::parse(rest) {
        let Some(payload) = rest.get(frame::HEADER_LEN..h.frame_len()) else {
            break;
        };
        if let Some(fragment) = frame::header_block_fragment(&h, payload) {
            block.extend_from_slice(fragment);
        }
        rest = &rest[h.frame_len()..];
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_come_in_a_burst_then_once_per_interval() {
        let mut r = Releases::default();
        let t0 = std::time::Instant::now();
        for _ in 0..RELEASE_BURST {
            assert!(r.take(t0));
        }
        assert!(
            !r.take(t0),
            "a busy connection does not release after every burst"
        );
        assert!(!r.take(t0 + RELEASE_INTERVAL / 2));
        let later = t0 + RELEASE_INTERVAL;
        assert!(r.take(later), "a quiet interval refills the burst");
        for _ in 1..RELEASE_BURST {
            assert!(r.take(later));
        }
        assert!(!r.take(later));
    }
}
