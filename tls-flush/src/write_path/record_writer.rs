//! The record writer: builds record-sized writes from scheduled units and hands them to the
//! transport, one at a time.
//!
//! Invariants:
//! - nothing new is handed to the transport while it still holds unsent ciphertext, and a
//!   record that ends right after an urgent frame is flushed before anything else;
//! - the next unit is chosen only when the socket can take bytes (late binding), so a
//!   frame arriving meanwhile still competes;
//! - a short record waits at most one turn of the task scheduler for the next frame
//!   (cork), only when the caller flushes ([`Drive::Flush`]), and never when it holds a
//!   unit of an urgent stream, except on an unpaced path (loopback, a LAN) a record that
//!   ends right after an urgent response with nothing else queued: it waits for h2's flush
//!   and at most [`UNPACED_URGENT_TURNS`] turns, and only urgent units may join it
//!   ([`Filled::UrgentShort`]);
//! - DATA held for an urgent response (anticipation) waits on the hold clock's timer;
//!   meanwhile held DATA stops at the soft limit, and each time h2 offers a refused frame
//!   again after another task woke it (and when the awaited response's header block
//!   arrives), the queue takes a few frames more, so that h2 is not blocked on a frame
//!   ahead of the urgent response (see [`super::HOLD_GRANT`]);
//!   [`Drive::Drain`] holds nothing;
//! - a record starts only within the write budget ([`crate::path`]): bulk DATA waits on a
//!   timer while TCP still holds enough, and the record is no longer than a small
//!   congestion window can send at once;
//! - the connection's first record waits (at most [`FIRST_FLIGHT_WAIT`], on a timer) while
//!   it holds only control frames and header blocks, so that they share a segment with the
//!   first DATA instead of spending packets of the initial congestion window on their own;
//!   the first DATA frame, a header block that ends its stream, or a record cut for an
//!   urgent response ends that wait;
//! - what precedes the connection's first DATA frame in its record (the first response's
//!   head) is a record of its own, sent in the same write (see
//!   [`Transport::seal_record_ahead`]);
//! - where the write budget sized the record, DATA of a stream that is not urgent ends with
//!   the record: a frame that does not fit is split there ([`super::split`]), and its rest
//!   is scheduled again.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Buf;

use super::chunk::Chunk;
use super::split;
use super::{H2Batch, WritePath};
use crate::config::{FlushConfig, RecordSizing};
use crate::frame;
use crate::path::{PathState, WriteBudget};
use crate::priorities::StreamPriorities;
use crate::scheduler::{Popped, QueuedFrame};
use crate::timer::Timer;
use crate::transport::Transport;

mod pacing;

/// How long the connection's first record may wait for DATA to share it with (see the
/// module invariants): the server's SETTINGS, its ACK and the first header blocks are
/// written within a fraction of a millisecond of the first DATA when the response is ready.
pub(crate) const FIRST_FLIGHT_WAIT: Duration = Duration::from_millis(2);

/// How many turns of the task scheduler a record that ends right after an urgent response
/// may wait on an unpaced path, for more urgent responses to share it and its flush (see
/// [`Filled::UrgentShort`]). Under h2load (`-m 10`, 4 KiB `u=0` responses, loopback,
/// `scripts/scale.sh`, 5 rounds against stock in one session) one turn gave 1.10x, 1.14x and
/// 0.95x stock's requests per second at 10, 100 and 1,000 connections, and a mean time per
/// request of 1.00x, 0.96x and 1.23x; four gave 1.35x, 1.35x and 1.17x, and 0.80x, 0.81x
/// and 0.95x: the longer a busy server waits, the more responses share each system call, and
/// it is busy that a turn is long. An idle server's turn takes microseconds.
const UNPACED_URGENT_TURNS: u8 = 4;

/// Where the connection's first record stands (see [`FIRST_FLIGHT_WAIT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstFlight {
    /// Nothing written and no DATA queued yet.
    Open,
    /// A short record of control frames waits for DATA until then.
    Waiting(Instant),
    /// Records are written as usual.
    Over,
}

/// What the caller of [`WritePath::drive`] wants done now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drive {
    /// Write full records; a short one waits for more frames (h2 is writing).
    Write,
    /// Write everything complete and flush the transport; a short record without urgent
    /// bytes may wait one turn for the next frame (h2 flushes after each batch of writes).
    Flush,
    /// Like `Flush`, without waiting: h2 is blocked on the wrapper, so nothing else will
    /// fill the short record.
    Push,
    /// Everything, DATA held for anticipation included (shutdown).
    Drain,
}

impl Drive {
    fn flushes(self) -> bool {
        self != Drive::Write
    }
}

/// Where the record being built or written stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting units into the chunk. `urgent`: it holds a unit of an urgent stream, so
    /// it never waits for the next frame; `waited`: it already did, once.
    Building { urgent: bool, waited: bool },
    /// The chunk is complete; `written` bytes of it are with the transport. `cut`: it ends
    /// right after an urgent frame, so the transport is flushed once it is written.
    Writing { written: usize, cut: bool },
    /// A cut record was written: flush it through before anything else.
    Flushing,
}

/// The record being built or written, and what the next one depends on.
#[derive(Debug)]
pub(super) struct RecordWriter {
    chunk: Chunk,
    state: State,
    /// Less urgent DATA is held until then for an urgent response about to be written.
    hold_until: Option<Instant>,
    /// The unit whose bytes are being copied into chunks, how far, and what it is.
    pub(super) current: Option<(QueuedFrame, usize, UnitClass)>,
    /// The chunk holds bulk DATA bytes.
    holds_bulk: bool,
    sent_since_idle: u64,
    last_write: Option<Instant>,
    budget: WriteBudget,
    /// The next record's size as the write budget allows (`None`: the record target).
    record_cap: Option<usize>,
    /// What bulk DATA may join the record after the units it starts with (see
    /// [`WritePath::bulk_room_left`]).
    bulk_room: BulkRoom,
    /// When the opening room ends (set by the connection's first bulk record; see
    /// [`OPENING_ROOM`](pacing::OPENING_ROOM)).
    opening_ends: Option<Instant>,
    /// Full records the next write holds: more than one only on an unpaced path, when no
    /// stream more urgent than the bulk DATA it starts with is open (see
    /// [`UNPACED_WRITE_RECORDS`](crate::path::UNPACED_WRITE_RECORDS)).
    write_records: usize,
    /// Bulk DATA waits until then for TCP to send what it holds.
    paced_until: Option<Instant>,
    pace_timer: Timer,
    first_flight: FirstFlight,
    /// Some DATA (or a response without any) was put into a record on this connection.
    data_begun: bool,
    /// The chunk ends right after an urgent response on an unpaced path and waits for
    /// more urgent responses to share it (see [`Filled::UrgentShort`]): only units of
    /// urgent streams may join it, and anything else is cut off.
    urgent_end: bool,
    /// Times the record being built has waited (a turn of the task scheduler, or the first
    /// flight's timer): at most [`UNPACED_URGENT_TURNS`] in all.
    turns_waited: u8,
    downstream: Downstream,
}

/// What bulk DATA may join a record after the units it starts with.
#[derive(Debug, Clone, Copy)]
enum BulkRoom {
    /// No limit but the record's: it starts with bulk DATA, or the path is not paced, or
    /// no room is kept for a more urgent response.
    Unlimited,
    /// It starts with anything but bulk DATA: the first bulk unit to join asks the write
    /// budget, which looked at this path before the record.
    Ask(PathState),
    /// Bulk DATA bytes it may still take, as the budget allowed.
    Left(usize),
}

/// Whether the transport took the last bytes the writer offered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Downstream {
    /// It took them, or it is ready for more (or nothing was offered yet).
    #[default]
    Taking,
    /// It returned `Pending` and has not been ready since: the socket is full (a client
    /// that stopped reading, or one slower than the server), and the queue admits less (see
    /// [`FlushConfig::blocked_soft_limit`](crate::FlushConfig::blocked_soft_limit)).
    Blocked,
}

impl Default for RecordWriter {
    fn default() -> Self {
        RecordWriter {
            chunk: Chunk::default(),
            state: RecordWriter::fresh(),
            hold_until: None,
            current: None,
            holds_bulk: false,
            sent_since_idle: 0,
            last_write: None,
            budget: WriteBudget::default(),
            record_cap: None,
            bulk_room: BulkRoom::Unlimited,
            opening_ends: None,
            write_records: 1,
            paced_until: None,
            pace_timer: Timer::default(),
            first_flight: FirstFlight::Open,
            data_begun: false,
            urgent_end: false,
            turns_waited: 0,
            downstream: Downstream::Taking,
        }
    }
}

impl RecordWriter {
    /// Bytes of the chunk not yet with the transport.
    pub(super) fn unwritten(&self) -> usize {
        match self.state {
            State::Writing { written, .. } => self.chunk.len() - written,
            _ => self.chunk.len(),
        }
    }

    /// Bytes of the unit being copied into chunks that are not copied yet.
    pub(super) fn current_remaining(&self) -> usize {
        self.current
            .as_ref()
            .map_or(0, |(f, at, _)| f.bytes.len() - at)
    }

    /// True while bytes wait on a timer: DATA held for an urgent response or paced, or the
    /// first record waiting for DATA.
    pub(super) fn is_holding(&self) -> bool {
        self.hold_until.is_some()
            || self.paced_until.is_some()
            || matches!(self.first_flight, FirstFlight::Waiting(_))
    }

    /// True while less urgent DATA is held for an urgent response.
    pub(super) fn is_holding_for_urgent(&self) -> bool {
        self.hold_until.is_some()
    }

    /// True until the connection's first DATA goes into a record: until then DATA also
    /// waits for responses as urgent (see [`StreamPriorities::may_hold_first_data`]).
    fn before_first_data(&self) -> bool {
        !self.data_begun
    }

    /// True while DATA of `urgency` may wait for a response that has not begun: a more
    /// urgent one, or before the connection's first DATA, one as urgent. What a hold keeps
    /// back, and what the queue takes only up to the soft limit during one.
    pub(super) fn holds_back(&self, urgency: u8, priorities: &StreamPriorities) -> bool {
        priorities.may_hold(urgency)
            || self.before_first_data() && priorities.may_hold_first_data(urgency)
    }

    fn seal(&mut self, cut: bool) {
        self.state = State::Writing { written: 0, cut };
        self.urgent_end = false;
        self.turns_waited = 0;
    }

    /// The record was written whole: account it and start the next. `timed`: the idle
    /// gap before the next record matters (dynamic record sizes).
    fn finish(&mut self, cut: bool, timed: bool) -> usize {
        let len = self.chunk.len();
        self.first_flight = FirstFlight::Over;
        self.sent_since_idle += len as u64;
        if timed {
            self.last_write = Some(crate::clock::now());
        }
        self.chunk.clear();
        self.holds_bulk = false;
        self.state = if cut { State::Flushing } else { Self::fresh() };
        len
    }

    /// True when the write budget's last read found the path unpaced (loopback, a LAN).
    pub(super) fn is_unpaced(&self) -> bool {
        self.budget.is_unpaced()
    }

    /// Whether the transport took the last bytes offered to it.
    pub(super) fn downstream(&self) -> Downstream {
        self.downstream
    }

    /// True while the chunk's buffers or the pace timer hold memory.
    pub(super) fn holds_memory(&self) -> bool {
        self.chunk.holds_memory() || self.pace_timer.is_allocated()
    }

    /// On an idle connection (nothing queued, nothing waiting on a timer): gives back the
    /// chunk's buffers and drops the pace timer, which may still be armed for a wait that
    /// ended early (the first record's, when DATA came) and otherwise keeps its allocation
    /// for good.
    pub(super) fn release_idle(&mut self) {
        if self.is_holding() || self.current.is_some() {
            return;
        }
        self.chunk.release();
        self.pace_timer.cancel();
    }

    /// The record being built waits (once more).
    fn mark_waited(&mut self) {
        self.turns_waited = self.turns_waited.saturating_add(1);
        if let State::Building { urgent, .. } = self.state {
            self.state = State::Building {
                urgent,
                waited: true,
            };
        }
    }

    fn fresh() -> State {
        State::Building {
            urgent: false,
            waited: false,
        }
    }
}

/// What a queued unit is to the record writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnitClass {
    /// DATA of a stream that goes on, less urgent than the [urgent cut](FlushConfig::urgent_cut):
    /// what the write budget may hold back.
    Bulk,
    /// Any unit of a stream as urgent as the urgent cut: its record never waits.
    Urgent,
    /// Control frames, header blocks and the last DATA of less urgent streams.
    Other,
}

/// What filling the chunk ended on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filled {
    /// The chunk reached the record target, or the queue is empty.
    AsFarAsPossible,
    /// An urgent unit just completed: the record must end here.
    Cut,
    /// An urgent DATA frame is next: the record ends before it, so that the urgent frame
    /// starts a record of its own and does not wait for a less urgent record's tail.
    BeforeUrgent,
    /// Less urgent DATA is next, after DATA of a more urgent response: the record ends, so
    /// that a response that ended is whole at the client without the less urgent tail,
    /// and the less urgent DATA asks the write budget for a record of its own, which keeps
    /// window room for the end of one still going (see
    /// [`WritePath::ends_before_less_urgent`]).
    BeforeLessUrgent,
    /// Bulk DATA is next, after the record's first units, and the write budget allows it
    /// nothing now: the record ends without it (it must not wait for it as a short one).
    BulkWaits,
    /// Less urgent DATA is next and held for an urgent response.
    Held,
    /// An urgent response ended the chunk on an unpaced path and nothing is queued: the
    /// record may wait for h2's flush, then up to [`UNPACED_URGENT_TURNS`] turns of the task
    /// scheduler, for more urgent responses to share it and its flush (a cut and a flush per
    /// 4 KiB response cost a system call each: 19 us of server CPU per request under h2load
    /// against 13 without cuts). A turn costs microseconds there; on a paced path the cut is
    /// immediate.
    UrgentShort,
}

impl WritePath {
    /// Moves queued bytes to the transport as `mode` asks. Returns `Ready(Ok)` when nothing
    /// more can be done now: everything complete reached the transport (and, unless
    /// [`Drive::Write`], was flushed), a short bulk record waits one turn (the task was
    /// woken), DATA is held (the hold's timer will wake the task), or with `Write`, only a
    /// short record is left.
    pub(crate) fn drive<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
    ) -> Poll<io::Result<()>> {
        let result = self.drive_inner(cx, io, config, priorities, mode);
        self.record_queue_size();
        if mode.flushes() {
            self.h2_batch = H2Batch::Over;
            self.release_when_idle(priorities);
        }
        result
    }

    fn drive_inner<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
    ) -> Poll<io::Result<()>> {
        loop {
            // Keep the downstream shallow: nothing new while the TLS layer still holds
            // ciphertext, and a cut record is pushed through before anything else.
            if io.has_buffered_output() || self.writer.state == State::Flushing {
                ready!(self.blocks(Pin::new(&mut *io).poll_flush(cx)))?;
                if self.writer.state == State::Flushing {
                    self.writer.state = RecordWriter::fresh();
                }
            }
            if let State::Writing { .. } = self.writer.state {
                ready!(self.write_record(cx, io, config))?;
                continue;
            }
            if self.writer.current.is_some() || self.scheduler.queued_bytes() > 0 {
                // Decide what goes next only when the socket can take it, so that a frame
                // arriving meanwhile still competes.
                ready!(self.blocks(io.poll_write_ready(cx)))?;
                if self.paced(cx, io, config, priorities, mode) {
                    return Poll::Ready(Ok(()));
                }
            }
            let head_ahead = !self.writer.data_begun && io.seals_records_ahead();
            match self.fill_chunk(config, priorities, mode, head_ahead) {
                Filled::Held => {
                    let until = self.writer.hold_until.expect("a hold has an end");
                    // The urgent response's HEADERS (a write from h2) or the timer ends it.
                    if self.hold.poll_until(cx, until).is_ready() {
                        continue;
                    }
                    if mode.flushes() && !self.writer.chunk.is_empty() {
                        self.writer.seal(false);
                        continue;
                    }
                    return Poll::Ready(Ok(()));
                }
                Filled::Cut => self.seal_cut(),
                Filled::BeforeUrgent | Filled::BeforeLessUrgent | Filled::BulkWaits => {
                    self.writer.seal(false)
                }
                Filled::UrgentShort => match mode {
                    // h2 flushes after its batch.
                    Drive::Write => return Poll::Ready(Ok(())),
                    Drive::Flush
                        if config.cork && self.writer.turns_waited < UNPACED_URGENT_TURNS =>
                    {
                        self.writer.mark_waited();
                        cx.waker().wake_by_ref();
                        return Pin::new(&mut *io).poll_flush(cx);
                    }
                    _ => self.seal_cut(),
                },
                Filled::AsFarAsPossible
                    if self.writer.chunk.record_len() >= self.target(config) =>
                {
                    self.writer.seal(false);
                }
                Filled::AsFarAsPossible => {
                    if let Some(done) = self.short_record(cx, io, config, mode) {
                        return done;
                    }
                }
            }
        }
    }

    /// Ends the record right after an urgent frame; it is flushed once written.
    fn seal_cut(&mut self) {
        self.stats.add_early_cut(1);
        tracing::trace!(
            len = self.writer.chunk.len(),
            "record cut after an urgent frame"
        );
        self.writer.seal(true);
    }

    /// At the end of h2's batch: once nothing is queued or held and no stream is open (an
    /// idle connection, or one between pages), gives back what the queues, the record
    /// writer and the priority table grew to, and drops the pace timer: an idle connection
    /// holds no queue memory and no timer. Not while a stream is open, and at a limited
    /// rate ([`Releases`](super::Releases)): a busy connection's queue empties between
    /// h2's batches and after each burst of responses, and would allocate its queues again
    /// each time.
    fn release_when_idle(&mut self, priorities: &mut StreamPriorities) {
        if self.queued_memory() != 0
            || self.writer.is_holding()
            || !self.assembler.is_idle()
            || priorities.open_streams() != 0
            || !(self.scheduler.is_allocated() || self.writer.holds_memory())
            || !self.releases.take(crate::clock::now())
        {
            return;
        }
        self.scheduler.release_idle();
        self.writer.release_idle();
        priorities.release_idle();
    }

    /// Passes a transport's `poll` on, noting whether it is blocked (`Pending`) or can take
    /// bytes again.
    fn blocks<R>(&mut self, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        self.writer.downstream = match poll {
            Poll::Pending => Downstream::Blocked,
            Poll::Ready(_) => Downstream::Taking,
        };
        poll
    }

    /// Writes the sealed chunk; `Ready(Ok)` once all of it is with the transport.
    fn write_record<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        config: &FlushConfig,
    ) -> Poll<io::Result<()>> {
        let State::Writing { written, cut } = self.writer.state else {
            return Poll::Ready(Ok(()));
        };
        let wrote = self.writer.chunk.poll_write_from(cx, io, written);
        let n = ready!(self.blocks(wrote))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        let w = &mut self.writer;
        if written + n < w.chunk.len() {
            w.state = State::Writing {
                written: written + n,
                cut,
            };
            return Poll::Ready(Ok(()));
        }
        let timed = matches!(config.record_sizing, RecordSizing::Dynamic { .. });
        let records = w.chunk.records(config.tls_record_payload);
        let len = w.finish(cut, timed);
        self.stats.add_bytes(len as u64);
        self.stats.add_records(records as u64);
        Poll::Ready(Ok(()))
    }

    /// The queue is drained into a chunk shorter than a record: leave it for more frames
    /// (`Write`), let bulk wait one turn (`Flush`, with cork), or seal it now. `None` when
    /// it was sealed and the loop goes on to write it.
    fn short_record<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        config: &FlushConfig,
        mode: Drive,
    ) -> Option<Poll<io::Result<()>>> {
        if self.writer.chunk.is_empty() || !mode.flushes() {
            if !mode.flushes() {
                return Some(Poll::Ready(Ok(())));
            }
            return Some(Pin::new(&mut *io).poll_flush(cx));
        }
        if self.first_flight_waits(cx, config, mode) {
            return Some(Poll::Ready(Ok(())));
        }
        // A record without urgent bytes waits one turn of the task scheduler: the tasks of
        // other responses usually hand h2 their frames in that time, so records stay full
        // and several small responses share one record and one system call. Bounded: one
        // turn per record.
        if let State::Building {
            urgent: false,
            waited: false,
        } = self.writer.state
        {
            if mode == Drive::Flush && config.pack_records && config.cork {
                self.writer.mark_waited();
                cx.waker().wake_by_ref();
                return Some(Pin::new(&mut *io).poll_flush(cx));
            }
        }
        self.writer.seal(false);
        None
    }

    /// True while the connection's first record, control frames and header blocks only,
    /// waits for DATA (the timer will wake the task).
    fn first_flight_waits(
        &mut self,
        cx: &mut Context<'_>,
        config: &FlushConfig,
        mode: Drive,
    ) -> bool {
        let w = &mut self.writer;
        let until = match w.first_flight {
            FirstFlight::Over => return false,
            _ if mode == Drive::Drain || !config.pack_records || !config.cork => {
                w.first_flight = FirstFlight::Over;
                return false;
            }
            FirstFlight::Open => crate::clock::now() + FIRST_FLIGHT_WAIT,
            FirstFlight::Waiting(until) => until,
        };
        if w.pace_timer.poll_until(cx, until).is_ready() {
            w.first_flight = FirstFlight::Over;
            // It waited already: no cork on top.
            w.mark_waited();
            return false;
        }
        w.first_flight = FirstFlight::Waiting(until);
        true
    }

    /// True when the chunk holds bulk bytes and the next unit is urgent DATA.
    fn urgent_data_next(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> bool {
        let Some(cut) = config.urgent_cut else {
            return false;
        };
        self.writer.holds_bulk
            && self
                .scheduler
                .next_data_urgency(priorities)
                .is_some_and(|u| u <= cut.max_urgency)
    }

    /// Copies scheduled bytes into the chunk, up to the record target. `head_ahead`: what
    /// precedes the connection's first DATA frame becomes a record of its own.
    fn fill_chunk(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
        head_ahead: bool,
    ) -> Filled {
        if self.writer.chunk.is_empty() {
            self.reset_after_idle(config);
        }
        let target = self.target(config);
        // Set once an urgent response ended in the chunk and the next unit is urgent too:
        // the cut then comes after the batch (see `batches_next_urgent`).
        let mut cut_after_batch = false;
        if std::mem::take(&mut self.writer.urgent_end) {
            if let Some(short) = self.after_urgent(config, priorities, mode) {
                return short;
            }
            cut_after_batch = true;
        }
        let ends = |cut_after_batch: bool, filled: Filled| {
            if cut_after_batch {
                Filled::Cut
            } else {
                filled
            }
        };
        while self.writer.chunk.record_len() < target {
            // A DATA frame counts as reordered when it is complete ahead of older DATA: once
            // its last bytes go into a record (the rest of a split frame is popped again).
            let mut overtook = false;
            let (mut frame, at, class) = match self.writer.current.take() {
                Some(current) => current,
                None => {
                    // Unpacked: one frame per write, as h2 wrote them.
                    if !config.pack_records && !self.writer.chunk.is_empty() {
                        return Filled::AsFarAsPossible;
                    }
                    if self.hold_for_urgent(config, priorities, mode) {
                        return ends(cut_after_batch, Filled::Held);
                    }
                    if self.urgent_data_next(config, priorities) {
                        return ends(cut_after_batch, Filled::BeforeUrgent);
                    }
                    match self.next_unit(config, priorities) {
                        Some((next, popped)) => {
                            overtook = popped.overtook;
                            next
                        }
                        None => return ends(cut_after_batch, Filled::AsFarAsPossible),
                    }
                }
            };
            // Bulk DATA after a record's first units (a download's HEADERS) takes only
            // what the write budget allows bulk now: the HEADERS' allowance is not the bulk's.
            let target = match self.bulk_room_left(&frame, class, config, priorities) {
                Some(0) => {
                    self.put_back(frame, at, class, priorities);
                    return ends(cut_after_batch, Filled::BulkWaits);
                }
                Some(room) => target.min(self.writer.chunk.record_len() + room),
                None => target,
            };
            if at == 0 && class != UnitClass::Urgent && self.splits_at_record_end() {
                let room = target - self.writer.chunk.record_len();
                if frame.bytes.len() > room && split::is_splittable(&frame) {
                    match split::split_data(frame, room) {
                        Ok((head, rest)) => {
                            self.scheduler.requeue_front(rest, priorities);
                            frame = head;
                            overtook = false;
                        }
                        Err(whole) if !self.writer.chunk.is_empty() => {
                            // Too little room left to split: the record ends before it.
                            self.scheduler.requeue_front(whole, priorities);
                            return ends(cut_after_batch, Filled::AsFarAsPossible);
                        }
                        Err(whole) => frame = whole,
                    }
                }
            }
            if overtook {
                self.stats.add_reordered(1);
            }
            if at == 0 && frame.is_data() {
                self.stats
                    .data_started(frame.header.stream_id, self.writer.chunk.len());
                if head_ahead && config.pack_records {
                    // The head travels in a record of its own, in the same write: the
                    // client reads the first response's head (status, Link preloads)
                    // without waiting for the DATA's record to arrive whole.
                    self.writer.chunk.end_record_ahead();
                }
            }
            if at == 0 && (frame.is_data() || frame.ends_stream) {
                // DATA to share the first record with, or a response without any.
                self.writer.first_flight = FirstFlight::Over;
                self.writer.data_begun = true;
            }
            let w = &mut self.writer;
            w.holds_bulk |= class == UnitClass::Bulk;
            if let State::Building { urgent, waited } = w.state {
                w.state = State::Building {
                    urgent: urgent || class == UnitClass::Urgent,
                    waited,
                };
            }
            let len = frame.bytes.len();
            let n = (target - w.chunk.record_len()).min(len - at);
            if let (UnitClass::Bulk, BulkRoom::Left(room)) = (class, &mut w.bulk_room) {
                *room = room.saturating_sub(n);
            }
            if at + n < len {
                w.chunk.push(frame.bytes.slice(at..at + n));
                w.current = Some((frame, at + n, class));
                return ends(cut_after_batch, Filled::AsFarAsPossible);
            }
            // The unit's last bytes move into the chunk: a slice would be a second
            // reference to the unit's buffer, which costs an allocation (bytes' shared
            // header) for a buffer not shared before: two per urgent response.
            let mut rest = std::mem::take(&mut frame.bytes);
            rest.advance(at);
            w.chunk.push(rest);
            let urgent = self.ends_record(config, priorities, &frame);
            // Judged before the stream closes, while its urgency is still known.
            let before_less_urgent = !urgent && self.ends_before_less_urgent(priorities, &frame);
            if frame.ends_stream {
                priorities.close(frame.header.stream_id);
            }
            if urgent {
                if let Some(short) = self.after_urgent(config, priorities, mode) {
                    return short;
                }
                cut_after_batch = true;
            } else if before_less_urgent {
                return ends(cut_after_batch, Filled::BeforeLessUrgent);
            }
        }
        ends(cut_after_batch, Filled::AsFarAsPossible)
    }

    /// After an urgent response's last frame: `None` when the next unit joins the record
    /// (see [`batches_next_urgent`](Self::batches_next_urgent)); otherwise how the record
    /// ends: cut now, or, on an unpaced path with nothing queued, waiting as
    /// [`Filled::UrgentShort`] for urgent units only.
    fn after_urgent(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
    ) -> Option<Filled> {
        if self.batches_next_urgent(config, priorities) {
            return None;
        }
        // Nothing is being copied here: the urgent unit that ended the chunk was whole.
        let waits = matches!(mode, Drive::Write | Drive::Flush)
            && self.writer.budget.is_unpaced()
            && self.scheduler.queued_units() == 0;
        if waits {
            self.writer.urgent_end = true;
            return Some(Filled::UrgentShort);
        }
        Some(Filled::Cut)
    }

    /// After an urgent response's last frame: true when the next unit belongs to an urgent
    /// stream too and the record has room for it, so that urgent responses ready in the
    /// same turn share one record and one flush (a cut and a flush per 4 KiB response cost
    /// 10-17% of request throughput under h2load). Where the path paces, the batch stops at
    /// the urgent cut's payload size, so the first response's record waits at most that
    /// many bytes' wire time for the others; on an unpaced path (loopback, a LAN) it fills
    /// the record. Nothing less urgent joins: the cut still follows the batch's last
    /// urgent frame.
    fn batches_next_urgent(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> bool {
        let Some(cut) = config.urgent_cut else {
            return false;
        };
        let room = if self.writer.budget.is_unpaced() {
            self.target(config)
        } else {
            cut.max_payload
        };
        self.writer.chunk.record_len() < room
            && self
                .scheduler
                .next_stream_id(priorities)
                .is_some_and(|stream| is_urgent_stream(config, priorities, stream))
    }

    /// Dynamic record sizes start small again after an idle gap.
    fn reset_after_idle(&mut self, config: &FlushConfig) {
        let w = &mut self.writer;
        if let (RecordSizing::Dynamic { idle_reset }, Some(last)) =
            (config.record_sizing, w.last_write)
        {
            if last.elapsed() >= idle_reset {
                w.sent_since_idle = 0;
            }
        }
    }

    /// True while the next DATA must wait for a more urgent response (anticipation).
    fn hold_for_urgent(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
    ) -> bool {
        if !config.reorder || config.anticipate.is_none() {
            return false;
        }
        let first = self.writer.before_first_data();
        let next = match mode {
            Drive::Drain => None,
            _ => self
                .scheduler
                .next_data_urgency(priorities)
                .filter(|&u| self.writer.holds_back(u, priorities)),
        };
        if next.is_none() && !self.hold.is_holding() {
            self.writer.hold_until = None;
            return false;
        }
        let now = crate::clock::now();
        let wanted = next.and_then(|u| {
            priorities.hold_deadline(u, now).or_else(|| {
                first
                    .then(|| priorities.first_data_deadline(u, now))
                    .flatten()
            })
        });
        self.writer.hold_until =
            self.hold
                .update(wanted, now, config.anticipation_budget, &self.stats);
        self.writer.hold_until.is_some()
    }

    /// True when DATA that does not fit the record is split where it ends: the write budget
    /// sized the record on a paced path. Elsewhere records are full or wide, and nothing
    /// waits behind a frame's rest for long.
    fn splits_at_record_end(&self) -> bool {
        self.writer.record_cap.is_some() && !self.writer.budget.is_unpaced()
    }

    /// Pops the next unit: the unit, from its first byte, and what it is; and what the pop
    /// reported.
    fn next_unit(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> Option<((QueuedFrame, usize, UnitClass), Popped)> {
        let (frame, popped) = self.scheduler.pop(priorities)?;
        let class = if is_urgent_stream(config, priorities, frame.header.stream_id) {
            UnitClass::Urgent
        } else if frame.is_data() && !frame.ends_stream {
            UnitClass::Bulk
        } else {
            UnitClass::Other
        };
        Some(((frame, 0, class), popped))
    }

    /// True when the record must end right after `frame`: an urgent small DATA frame, or an
    /// urgent response's HEADERS whose DATA is not queued yet (they must not wait in a
    /// record filled up with less urgent bytes).
    fn ends_record(
        &self,
        config: &FlushConfig,
        priorities: &StreamPriorities,
        frame: &QueuedFrame,
    ) -> bool {
        let stream = frame.header.stream_id;
        config.urgent_cut.is_some_and(|cut| {
            let urgent_stream = is_urgent_stream(config, priorities, stream);
            if frame.is_data() {
                frame.header.length as usize <= cut.max_payload && urgent_stream
            } else {
                frame.header.kind == frame::HEADERS
                    && urgent_stream
                    && !self.scheduler.has_data_ready(stream)
            }
        })
    }
}

/// True when `stream` (not the connection) is as urgent as the [urgent
/// cut](FlushConfig::urgent_cut): its units never wait in a record.
fn is_urgent_stream(config: &FlushConfig, priorities: &StreamPriorities, stream: u32) -> bool {
    stream != 0
        && config
            .urgent_cut
            .is_some_and(|cut| priorities.effective(stream).urgency <= cut.max_urgency)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ConnectionStats;
    use crate::test_io::LimitedSink;

    /// A server's first SETTINGS frame (one setting).
    const SETTINGS: [u8; 15] = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];

    fn flush(
        w: &mut WritePath,
        io: &mut LimitedSink,
        config: &FlushConfig,
        p: &mut StreamPriorities,
    ) -> Poll<io::Result<()>> {
        let waker = std::task::Waker::noop();
        w.drive(&mut Context::from_waker(waker), io, config, p, Drive::Flush)
    }

    #[tokio::test]
    async fn an_idle_connection_keeps_no_timer_and_no_queue_memory() {
        let config = FlushConfig::default();
        let stats = ConnectionStats::default();
        let mut w = WritePath::new(&config, stats.clone());
        let mut p = StreamPriorities::new(8, 100, None, stats);
        let mut io = LimitedSink::default();
        assert_eq!(w.absorb(&SETTINGS, &config, &mut p), SETTINGS.len());
        assert!(flush(&mut w, &mut io, &config, &mut p).is_ready());
        // The first record waits for DATA on the pace timer (FIRST_FLIGHT_WAIT).
        assert!(io.out.is_empty());
        assert!(w.writer.pace_timer.is_allocated());
        tokio::time::sleep(FIRST_FLIGHT_WAIT * 2).await;
        assert!(flush(&mut w, &mut io, &config, &mut p).is_ready());
        assert_eq!(
            io.out.len(),
            SETTINGS.len() + 6,
            "SETTINGS with one setting more"
        );
        assert_eq!(w.queued_memory(), 0);
        assert!(
            !w.writer.pace_timer.is_allocated(),
            "no timer on an idle connection"
        );
        assert_eq!(w.scheduler.queued_units(), 0);
        assert!(!w.scheduler.is_allocated(), "the queues were given back");
        // And the next response is queued and written as before.
        let headers = [0, 0, 1, 1, 5, 0, 0, 0, 1, 0x88];
        p.open_request(1, tower_priority::Priority::default());
        assert_eq!(w.absorb(&headers, &config, &mut p), headers.len());
        // (The first flush lets the short record wait one turn for more frames: cork.)
        assert!(flush(&mut w, &mut io, &config, &mut p).is_ready());
        assert!(flush(&mut w, &mut io, &config, &mut p).is_ready());
        assert!(io.out.ends_with(&headers));
    }
}
