//! The record writer and the write budget: whether bulk DATA waits before a record starts
//! (a timer wakes the task), how long the next write may be (a record capped as a small
//! congestion window can send at once, or on an unpaced path several full records), and
//! what counts as bulk.

use std::task::Context;
use std::time::{Duration, Instant};

use super::{BulkRoom, Drive, UnitClass};
use crate::config::FlushConfig;
use crate::path::{Allowance, CongestionControl, PathState, WriteBudget, UNPACED_WRITE_RECORDS};
use crate::priorities::StreamPriorities;
use crate::scheduler::{QueuedFrame, DEFAULT_URGENCY};
use crate::transport::Transport;
use crate::write_path::{H2Batch, WritePath, UNIT_OVERHEAD};

impl WritePath {
    /// The size of the next write: a record, as small as the write budget allows, or on an
    /// unpaced path several full records.
    pub(super) fn target(&self, config: &FlushConfig) -> usize {
        let target = config.record_target(self.writer.sent_since_idle);
        match self.writer.record_cap {
            Some(cap) => target.min(cap),
            None => target * self.writer.write_records,
        }
    }

    /// Before a record starts: asks the write budget. True when bulk DATA must wait (the
    /// timer will wake the task); otherwise the next record's size is capped as allowed.
    pub(super) fn paced<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &T,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
    ) -> bool {
        if !self.writer.chunk.is_empty() {
            return false;
        }
        self.writer.record_cap = None;
        self.writer.bulk_room = BulkRoom::Unlimited;
        self.writer.paced_until = None;
        self.scheduler.budget_holds(None);
        if self.waits_for_wide_write(cx, config, priorities, mode) {
            return true;
        }
        if !config.write_budget || mode == Drive::Drain || !self.writer.budget.needs_read() {
            return false;
        }
        let Some(state) = io.path_state() else {
            return false;
        };
        if !self.writer.budget.knows_congestion() {
            let cc = io
                .congestion_control()
                .unwrap_or(CongestionControl::LossBased);
            self.writer.budget.set_congestion(cc);
        }
        self.stats.add_tcp_info_read(1);
        // The budget's margin is a full record even while dynamic sizes are still ramping:
        // a smaller one would leave TCP idle between timer ticks. `target` applies the
        // ramp on top of the cap.
        let target = config.record_target(u64::MAX);
        let available = self.queued_to_write();
        let now = crate::clock::now();
        let (bulk, reserve, allowance) =
            self.next_allowance(&state, target, available, config, priorities, now);
        let urgent = bulk.is_none();
        // A record that starts with anything but bulk DATA may go on with bulk DATA:
        // what the budget allows that DATA is asked when it joins (see `bulk_room_for`).
        if urgent {
            self.writer.bulk_room = BulkRoom::Ask(state);
        }
        if self.writer.budget.take_pacing_request() {
            let result = io.enable_pacing();
            tracing::debug!(?result, "kernel pacing");
            if result.is_err() {
                self.writer.budget.pacing_refused();
            }
        }
        tracing::trace!(
            cwnd = state.cwnd,
            unacked = state.unacked,
            notsent = state.notsent,
            lost = state.lost,
            retransmitting = state.retransmitting,
            min_rtt_us = state.min_rtt.as_micros() as u64,
            srtt_us = state.srtt.as_micros() as u64,
            delivery_rate = state.delivery_rate,
            pacing_rate = state.pacing_rate,
            gain = self.writer.budget.gain(),
            cap_lifts = self.writer.budget.cap_lifts(),
            available,
            urgent,
            reserve,
            ?allowance,
            "write budget"
        );
        match allowance {
            Allowance::Record(n) => {
                // The read may have found the path unpaced (or paced) anew.
                self.writer.write_records = records_per_write(self.wide_write(config, priorities));
                if self.writer.write_records == 1 {
                    let sent = self.writer.sent_since_idle;
                    self.writer.record_cap =
                        Some(self.writer.budget.opening_record(&state, sent, n));
                }
                false
            }
            Allowance::Wait(wait) => {
                // The opening room is given back when its hold ends: look again then.
                let wait = match self.writer.opening_ends {
                    Some(end) if now < end => wait.min(end - now),
                    _ => wait,
                };
                let until = now + wait;
                self.stats.add_budget_wait(1);
                if self.writer.pace_timer.poll_until(cx, until).is_ready() {
                    // Too short to sleep on: go on, with a segment's record, and ask again
                    // after it. Not a full record: the budget said wait, and a 16 KiB record
                    // past the window held the browser lab's 4 KiB demo answer, which joined
                    // it, for a round trip (the client decrypts a record only once it is whole).
                    self.writer.record_cap = Some(WriteBudget::smallest_record(&state));
                    return false;
                }
                self.writer.paced_until = Some(until);
                true
            }
        }
    }

    /// Sets how many full records the next write holds (see [`Self::wide_write`]). True
    /// when bulk DATA waits instead: a wide write is due, fewer than
    /// [`UNPACED_WRITE_RECORDS`] full records are queued, and h2 may have more frames (it
    /// is writing, or flushing right after a write: h2 flushes after every frame, and once
    /// more, without a write, when its batch is over). Writing each record as it fills
    /// costs a system call and, the socket being kept shallow, a loopback segment per
    /// record. Bounded: a flush after a write wakes the task, whose next poll ends the
    /// batch.
    pub(super) fn waits_for_wide_write(
        &mut self,
        cx: &mut Context<'_>,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        mode: Drive,
    ) -> bool {
        let wide = if mode == Drive::Drain {
            None
        } else {
            self.wide_write(config, priorities)
        };
        self.writer.write_records = records_per_write(wide);
        // Waiting needs room for a wide write and the frame after it below the soft limit:
        // past it h2's frames are refused, and the writes that follow end in short records.
        let room = (UNPACED_WRITE_RECORDS + 1) * (config.record_target(u64::MAX) + UNIT_OVERHEAD);
        if wide.is_none_or(|records| records >= UNPACED_WRITE_RECORDS) || config.soft_limit < room {
            return false;
        }
        match (mode, self.h2_batch) {
            (Drive::Write, _) => true,
            (Drive::Flush, H2Batch::Writing) => {
                cx.waker().wake_by_ref();
                true
            }
            _ => false,
        }
    }

    /// The full records queued, when the next write may hold several: the write budget
    /// found the path unpaced and the write starts with bulk DATA that no open stream is
    /// more urgent than (an urgent response due soon must not find several records ahead
    /// of it). Only as many as are queued whole go in one write, so that a write never
    /// ends in a short record a full one would have packed. `None`: one record per write.
    pub(super) fn wide_write(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> Option<usize> {
        if !config.write_budget || !self.writer.budget.is_unpaced() {
            return None;
        }
        let urgency = match &self.writer.current {
            Some((frame, _, UnitClass::Bulk)) => {
                priorities.effective(frame.header.stream_id).urgency
            }
            Some(_) => return None,
            None => match self.scheduler.next_data_urgency(priorities) {
                Some(u) if is_bulk_urgency(config, u) => u,
                _ => return None,
            },
        };
        if priorities.more_urgent_open(urgency) {
            return None;
        }
        let available = self.queued_to_write();
        let record = config.record_target(self.writer.sent_since_idle);
        Some(available / record)
    }

    /// Bytes queued for the next records: the scheduler's, and the rest of the unit being
    /// copied into chunks.
    fn queued_to_write(&self) -> usize {
        self.scheduler.queued_bytes() + self.writer.current_remaining()
    }

    /// The window room bulk DATA of `urgency` leaves free for more urgent responses under
    /// way, and at the start of the connection's first bulk for one yet to be asked for
    /// (see [`OPENING_ROOM`]); none without reordering, or on an unpaced path.
    fn room_for_more_urgent(
        &mut self,
        urgency: u8,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        state: &PathState,
        now: Instant,
    ) -> usize {
        if !config.reorder || self.writer.budget.is_unpaced() {
            return 0;
        }
        let mss = state.mss as usize;
        let opening_ends = *self
            .writer
            .opening_ends
            .get_or_insert(now + OPENING_HOLD.min(state.min_rtt / 2));
        let opening = if urgency >= DEFAULT_URGENCY && now < opening_ends {
            whole_segments(OPENING_ROOM, mss)
        } else {
            0
        };
        reserved_room(urgency, priorities, mss, now).max(opening)
    }

    /// The write budget's allowance for the next record, with the urgency of the bulk DATA
    /// it starts with (`None`: anything else) and the window room that DATA leaves. Where
    /// bulk must wait and more urgent DATA is queued, that DATA goes next, whatever the
    /// urgencies' shares say (see the scheduler's
    /// [`budget_holds`](crate::scheduler::Scheduler::budget_holds)), and the budget is asked
    /// for it: in the browser lab's demo page the `u=1` answer's first segment left, then
    /// the `u=3` download's share turn came, which waited for the room kept for that very
    /// answer, and the answer's rest waited with it, a round trip (3-5 loads of 20).
    fn next_allowance(
        &mut self,
        state: &PathState,
        target: usize,
        available: usize,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
        now: Instant,
    ) -> (Option<u8>, usize, Allowance) {
        let mut bulk = self.next_bulk_urgency(config, priorities);
        loop {
            let reserve = bulk.map_or(0, |urgency| {
                self.room_for_more_urgent(urgency, config, priorities, state, now)
            });
            let allowance = self.ask_budget(state, target, available, bulk.is_none(), reserve, now);
            let Some(held) = bulk.filter(|_| matches!(allowance, Allowance::Wait(_))) else {
                return (bulk, reserve, allowance);
            };
            self.scheduler.budget_holds(Some(held));
            let next = self.next_bulk_urgency(config, priorities);
            // Each turn asks for a more urgent level, or ends.
            if next.is_some_and(|urgency| urgency >= held) {
                return (bulk, reserve, allowance);
            }
            bulk = next;
        }
    }

    /// The write budget's allowance (see [`WriteBudget::allowance`]), its cap lifts
    /// counted.
    fn ask_budget(
        &mut self,
        state: &PathState,
        target: usize,
        available: usize,
        urgent: bool,
        reserve: usize,
        now: Instant,
    ) -> Allowance {
        let lifts = self.writer.budget.cap_lifts();
        let allowance = self
            .writer
            .budget
            .allowance(state, target, available, urgent, reserve, now);
        self.stats
            .add_budget_cap_lifts(self.writer.budget.cap_lifts() - lifts);
        allowance
    }

    /// What bulk DATA of `urgency` may join a record begun with other units (a download's
    /// HEADERS, a more urgent response's end), the budget having seen `state` before the
    /// record: where room is kept for a more urgent response, what the write budget allows
    /// a bulk record of that urgency, less what the record holds already; elsewhere no
    /// limit but the record's, as on an unpaced path (the first DATA of the most urgent
    /// response open would otherwise wait a timer's round).
    fn bulk_room_for(
        &mut self,
        state: &PathState,
        urgency: u8,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> BulkRoom {
        let now = crate::clock::now();
        let reserve = self.room_for_more_urgent(urgency, config, priorities, state, now);
        if reserve == 0 {
            return BulkRoom::Unlimited;
        }
        let target = config.record_target(u64::MAX);
        let available = self.queued_to_write();
        let allowed = match self.ask_budget(state, target, available, false, reserve, now) {
            Allowance::Record(n) => n,
            Allowance::Wait(_) => 0,
        };
        BulkRoom::Left(allowed.saturating_sub(self.writer.chunk.record_len()))
    }

    /// The bulk DATA bytes the record may still take before `frame`, a unit of `class`,
    /// where the record began with other units (`None`: no limit but the record's). The
    /// first bulk unit to join asks the write budget (see
    /// [`bulk_room_for`](Self::bulk_room_for)); the ones after it share what is left.
    pub(super) fn bulk_room_left(
        &mut self,
        frame: &QueuedFrame,
        class: UnitClass,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> Option<usize> {
        if class != UnitClass::Bulk || self.writer.chunk.is_empty() {
            return None;
        }
        if let BulkRoom::Ask(state) = self.writer.bulk_room {
            let urgency = priorities.effective(frame.header.stream_id).urgency;
            self.writer.bulk_room = self.bulk_room_for(&state, urgency, config, priorities);
        }
        match self.writer.bulk_room {
            BulkRoom::Left(room) => Some(room),
            BulkRoom::Unlimited | BulkRoom::Ask(_) => None,
        }
    }

    /// Gives a unit back for a later record: a frame not begun to the scheduler, the rest
    /// of one begun to the writer.
    pub(super) fn put_back(
        &mut self,
        frame: QueuedFrame,
        at: usize,
        class: UnitClass,
        priorities: &mut StreamPriorities,
    ) {
        if at == 0 {
            self.scheduler.requeue_front(frame, priorities);
        } else {
            self.writer.current = Some((frame, at, class));
        }
    }

    /// True when the record ends after `frame`, DATA of a response, because the next unit
    /// is a less urgent stream's, on a path the write budget paces. Where the response
    /// goes on, its DATA would otherwise fill the window with the allowance of the more
    /// urgent one and leave the response's last frame (h2 often sends END_STREAM in an
    /// empty frame of its own) unsent in the kernel for a round trip (the browser lab's
    /// demo answer: 4 KiB from its first byte to its end in 14-20 ms, where the link takes
    /// 2). Where it ended, the client decrypts a record only once all of it has arrived:
    /// a download's DATA after the end delayed it by the rest of the record (the demo
    /// answer's 4 KiB at the head of a 14 KiB record, in 8 loads of 20: 1-10 ms between
    /// its first byte and its end, where a record of its own takes 2).
    pub(super) fn ends_before_less_urgent(
        &mut self,
        priorities: &mut StreamPriorities,
        frame: &QueuedFrame,
    ) -> bool {
        let stream = frame.header.stream_id;
        if !frame.is_data() || !self.splits_at_record_end() {
            return false;
        }
        let urgency = priorities.effective(stream).urgency;
        self.scheduler
            .next_stream_id(priorities)
            .is_some_and(|next| next != stream && priorities.effective(next).urgency > urgency)
    }

    /// The urgency of the bulk DATA the next record starts with (what the write budget may
    /// make wait), `None` when the next unit is not bulk: one look at the scheduler serves
    /// both the budget's question and the room it keeps. The rest of a bulk frame already
    /// begun counts as bulk only while what is queued after it is bulk of its urgency or
    /// less: once something more urgent is queued, that rest is all that stands between it
    /// and the wire (a frame cannot be cut short), and waiting on the budget would only
    /// delay it (behind a competitor's deep queue, records of two segments paced by the ACK
    /// clock held a 16 KiB frame's rest, and the urgent response after it, for 200 ms; in
    /// the browser lab a download's 2 KB rest waited for the window room kept for the demo
    /// answer queued behind it, and held that answer for a round trip).
    fn next_bulk_urgency(
        &mut self,
        config: &FlushConfig,
        priorities: &mut StreamPriorities,
    ) -> Option<u8> {
        let queued_bulk = |this: &mut Self, priorities: &mut StreamPriorities| {
            this.scheduler
                .next_data_urgency(priorities)
                .filter(|&u| is_bulk_urgency(config, u))
        };
        match &self.writer.current {
            Some((frame, _, UnitClass::Bulk)) => {
                let urgency = priorities.effective(frame.header.stream_id).urgency;
                let rest_is_bulk = self.scheduler.queued_units() == 0
                    || queued_bulk(self, priorities).is_some_and(|next| next >= urgency);
                rest_is_bulk.then_some(urgency)
            }
            Some(_) => None,
            None => queued_bulk(self, priorities),
        }
    }
}

/// The window room a bulk record of `urgency` leaves free, in whole segments, for the
/// small more urgent responses under way (see [`StreamPriorities::room_reserved`]), at
/// most [`MAX_RESERVED_ROOM`], and a segment more for the end of the first: h2 often ends
/// a response with an empty DATA frame written after the body (tower-http's `ServeDir`
/// reads the end of the file after its last bytes), and that record needs a segment of
/// its own once the body's last one has left (the browser lab's demo answer: its body
/// filled the three segments kept for it, and its end waited a round trip for a fourth).
fn reserved_room(
    urgency: u8,
    priorities: &mut StreamPriorities,
    mss: usize,
    now: Instant,
) -> usize {
    let room = priorities
        .room_reserved(urgency, now)
        .min(MAX_RESERVED_ROOM);
    if room == 0 {
        return 0;
    }
    whole_segments(room, mss) + mss
}

/// `bytes` rounded up to whole segments of `mss`.
fn whole_segments(bytes: usize, mss: usize) -> usize {
    bytes.div_ceil(mss.max(1)) * mss
}

/// The most window room bulk leaves for small responses under way, however many: room for
/// the first of them to come (the browser lab's demo answer, 4 KiB, takes three segments).
/// With room for each of page-app's ten 2 KB API answers, the images left up to 21 KB of
/// the window unused, and the answers took longer (a median of 100 ms against 86, 10 loads).
const MAX_RESERVED_ROOM: usize = 6 * 1024;

/// The window room bulk DATA at the default urgency or less (downloads, images below the
/// fold) keeps free at the start of the connection's first bulk, for a more urgent request
/// not received yet: a browser asks for a page's resources as it parses, in bursts a few
/// milliseconds long, and the first download's initial window left no room for what
/// followed it. The browser lab's demo page, 20 loads: Chromium sent the critical answer's
/// request 1.5-8 ms after the first download's in most loads, and the answer took a median
/// of 42 ms without the room (45-50 in those loads), 33 with it. As much as is kept for
/// responses under way.
pub(super) const OPENING_ROOM: usize = MAX_RESERVED_ROOM;

/// How long the opening room is kept, at most (and at most half the minimum RTT): the
/// window grows in slow start only by what it acknowledges, so room kept for the whole
/// first round trip cost the lab's download 1.2% of its goodput on the clean 20 ms link
/// (0.987-0.989x stock's); kept 3, 5 or 10 ms, 0.998-1.000x. Chromium sends a page's
/// requests up to 9 ms apart (the browser lab's demo page: the answer's request 0-9 ms
/// after the first download's). The demo, two runs of 20 loads per setting, alternated:
/// kept 5 ms (at most a quarter of the minimum RTT), the answer came a round trip late in
/// 4 and 5 loads of 20 (medians 32.1 and 34.8 ms); kept 10 ms, in 1 and 0 (31.1 and 34.1
/// ms; most of the rest of the spread is the answer's body a round trip behind its
/// headers, in 3-5 loads of 20 either way); the downloads ended 5-7 ms later than stock's
/// against 12-18. Kept 5 ms for a while, since with 10 `late` behind the 200-packet
/// competitor took a second round trip in 9 runs of 20; those runs all started at one
/// moment of the competitor's cycle (see the lab's `CROSS_PHASE_SPREAD`), and with the
/// moment drawn, 10 repeats x 2 seeds, 10 ms and 5 ms give the same (medians 274.5 and
/// 275 ms against 277.5 and 281).
const OPENING_HOLD: Duration = Duration::from_millis(10);

/// Full records in the next write, from [`WritePath::wide_write`]'s count.
fn records_per_write(wide: Option<usize>) -> usize {
    wide.map_or(1, |records| records.clamp(1, UNPACED_WRITE_RECORDS))
}

/// True when DATA of `urgency` is bulk: less urgent than the urgent cut (all of it without
/// one).
fn is_bulk_urgency(config: &FlushConfig, urgency: u8) -> bool {
    config
        .urgent_cut
        .is_none_or(|cut| urgency > cut.max_urgency)
}
