//! The fault-injecting transport: [`FaultyTransport`] answers every `poll_write`,
//! `poll_flush` and `poll_shutdown` following a schedule of [`Step`]s (`Pending` after
//! waking the task, partial writes of any size, a socket that fills until the driver plays
//! the reactor), can hold accepted bytes until flushed (reporting `has_buffered_output()` or
//! not), fail a chosen write, and supplies the client's bytes to `poll_read` in planned
//! chunks. Its state, [`Wire`], is shared with the driver ([`crate::Harness`]) and the test,
//! which can block it for as long as it likes ([`crate::Harness::set_blocked`]), inspect
//! what it accepted and flushed, and record the order of writes and flushes ([`Event`]).
//!
//! Every transport call is counted: one poll of the wrapper making [`LIVELOCK_CALLS`] calls
//! without the transport making progress panics as a livelock instead of hanging.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tls_flush::Transport;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One wrapper poll making this many transport calls without progress is a livelock.
pub const LIVELOCK_CALLS: usize = 100_000;

/// What the transport does on its next `poll_write` / `poll_flush` / `poll_shutdown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `Pending`, after waking the task.
    Pending,
    /// Accepts up to this many bytes (a write) or flushes up to this many (a flush).
    Accept(usize),
    /// The socket fills: this call and every later write, flush, shutdown and
    /// `poll_write_ready` are `Pending` (the waker kept, not woken) until the driver
    /// unblocks it at the end of its poll, as the reactor would once the socket drains.
    Block,
    /// Like `Block`, but `poll_write_ready` keeps saying `Ready` (stale readiness).
    BlockStale,
}

/// Whether accepted bytes are held until flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffering {
    /// Every accepted byte is on the "socket" at once.
    Off,
    /// Accepted bytes wait for `poll_flush`; `has_buffered_output()` says so (like rustls).
    Reported,
    /// Accepted bytes wait for `poll_flush`, but `has_buffered_output()` is left at the
    /// trait's default `false` (like a user's buffered transport).
    Silent,
}

/// How the transport hands the client's bytes to `poll_read`.
#[derive(Clone, Debug, Default)]
pub struct ReadPlan {
    /// Chunk sizes, cycled; `0` means `Pending` (after waking the task). Empty: as much as
    /// fits.
    pub chunks: Vec<usize>,
    /// At the end of the client's bytes: `true` for EOF (`Ready` with nothing), else
    /// `Pending` (after waking the task).
    pub eof: bool,
}

/// A transport call, as recorded when [`Wire::record_events`] is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `accepted[from..to]` was taken by one `poll_write`.
    Write { from: usize, to: usize },
    /// A `poll_flush` returned `Ready` with `accepted[..flushed]` on the socket (one with
    /// nothing written since the last flush is not recorded).
    Flush { flushed: usize },
}

impl Event {
    /// The bytes one write took; `None` for a flush.
    pub fn written(&self) -> Option<usize> {
        match *self {
            Event::Write { from, to } => Some(to - from),
            Event::Flush { .. } => None,
        }
    }
}

/// The transport's state, shared with the driver and the test while the `FlushStream` owns
/// the transport.
#[derive(Debug)]
pub struct Wire {
    schedule: Vec<Step>,
    cursor: usize,
    /// Set by the test ([`crate::Harness::set_blocked`]) and kept until it clears it: every
    /// write, flush and shutdown is `Pending` (after waking the task), and so is
    /// `poll_write_ready` (registering the waker) unless `stale_readiness`.
    pub blocked: bool,
    /// While `blocked`, `poll_write_ready` still says `Ready`: the socket filled after its
    /// readiness was reported, so the wrapper builds a record and only the write is `Pending`.
    pub stale_readiness: bool,
    /// Set by a [`Step::Block`] or [`Step::BlockStale`] until the driver's poll ends: every
    /// call keeps the waker and is `Pending` (`poll_write_ready` too, unless stale).
    socket_full: bool,
    socket_full_stale: bool,
    /// The waker a blocked call kept: woken by the driver at the end of its poll when the
    /// schedule blocked, by the test when it unblocks.
    ready_waker: Option<Waker>,
    buffering: Buffering,
    /// Fail the write call with this index (counting from 0) with `BrokenPipe`.
    pub fail_write_at: Option<usize>,
    write_calls: usize,
    /// The injected write failure happened.
    pub failed: bool,
    /// Every byte accepted by `poll_write`, in order.
    pub accepted: Vec<u8>,
    /// `accepted[..flushed]` has reached the socket.
    pub flushed: usize,
    /// Bytes the client sends, supplied through `poll_read`.
    client: Vec<u8>,
    /// Report ALPN `h2`, as a TLS stream that negotiated HTTP/2 does (the default); without
    /// it the wrapper decides from the first bytes (plain TCP).
    pub alpn_h2: bool,
    read_pos: usize,
    pub read_plan: ReadPlan,
    read_cursor: usize,
    pub shut_down: bool,
    /// Record every write and flush in `events`.
    pub record_events: bool,
    pub events: Vec<Event>,
    /// Transport calls since the driver began the current poll or the transport last made
    /// progress (see [`Wire::tick`]), and the progress value they were counted against.
    calls_without_progress: Cell<usize>,
    progress_mark: Cell<usize>,
    /// Report a congestion window through `Transport::path_state` (see [`SimulatedPath`]).
    pub path: Option<SimulatedPath>,
    /// Bytes of `accepted` the simulated path has acknowledged.
    acked: usize,
    /// Times the wrapper asked for the kernel's pacing (`Transport::enable_pacing`).
    pub pacing_requests: u32,
    /// How the schedule's (and the write plan's) sizes are used.
    pub sizes: Sizes,
    accept_calls: usize,
}

/// How the sizes a fault schedule or a write plan gives are used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sizes {
    /// As given (the property tests).
    #[default]
    AsGiven,
    /// At least `2^(calls / SIZE_DOUBLING_CALLS)` bytes for the call with that index (the
    /// fuzz runners): 1-byte steps over a 200 KB case otherwise take 200,000 calls (600 ms
    /// with coverage instrumentation, against 2 ms for a typical case), while the first
    /// calls' tiny steps still cross the first frames at every offset.
    GrowingFloor,
}

/// Calls per doubling of [`Sizes::GrowingFloor`]'s floor: 256 calls of 1 byte, then of 2,
/// and so on reach 200 KB within 2,600 calls.
pub const SIZE_DOUBLING_CALLS: usize = 256;

impl Sizes {
    /// The size call number `call` uses for a planned `size`.
    pub fn apply(self, size: usize, call: usize) -> usize {
        match self {
            Sizes::AsGiven => size,
            Sizes::GrowingFloor => size.max(1 << (call / SIZE_DOUBLING_CALLS).min(24)),
        }
    }
}

/// A TCP path the transport reports through `Transport::path_state`: every byte accepted is
/// in flight (up to the window, the rest unsent) until acknowledged, and each read of the
/// state acknowledges `acked_per_read` bytes, so that a wrapper waiting for room (without a
/// Tokio timer it re-polls itself) always gets it after a bounded number of polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimulatedPath {
    /// Congestion window, in segments.
    pub cwnd: u32,
    /// Payload bytes per segment.
    pub mss: u32,
    /// Minimum RTT reported (under 1 ms the wrapper does not pace).
    pub min_rtt: std::time::Duration,
    /// Delivery rate reported, bytes per second (0: none measured yet).
    pub delivery_rate: u64,
    /// Slow start threshold reported, in segments (0: still in the initial slow start).
    pub ssthresh: u32,
    /// Bytes acknowledged at each read of the state.
    pub acked_per_read: usize,
    /// Segments retransmitted over the connection's life reported (the wrapper asks the
    /// kernel to pace only once one was).
    pub retransmits: u32,
}

impl SimulatedPath {
    /// A 20 ms path of `cwnd` 1448-byte segments in congestion avoidance (1 MB/s
    /// measured), nothing acknowledged until the test says so (`acked_per_read`): the
    /// window fills with the first records.
    pub fn full_window(cwnd: u32) -> Self {
        SimulatedPath {
            cwnd,
            mss: 1448,
            min_rtt: std::time::Duration::from_millis(20),
            delivery_rate: 1_000_000,
            ssthresh: 2,
            acked_per_read: 0,
            retransmits: 0,
        }
    }
}

impl Wire {
    /// A transport following `schedule` (cycled; an accepting step is appended when it has
    /// none), reporting ALPN `h2`, that supplies `client` to `poll_read`.
    pub fn new(mut schedule: Vec<Step>, buffering: Buffering, client: Vec<u8>) -> Self {
        if !schedule
            .iter()
            .any(|s| matches!(s, Step::Accept(n) if *n > 0))
        {
            schedule.push(Step::Accept(usize::MAX));
        }
        Wire {
            schedule,
            cursor: 0,
            blocked: false,
            stale_readiness: false,
            socket_full: false,
            socket_full_stale: false,
            ready_waker: None,
            buffering,
            fail_write_at: None,
            write_calls: 0,
            failed: false,
            accepted: Vec::new(),
            flushed: 0,
            client,
            alpn_h2: true,
            read_pos: 0,
            read_plan: ReadPlan::default(),
            read_cursor: 0,
            shut_down: false,
            record_events: false,
            events: Vec::new(),
            calls_without_progress: Cell::new(0),
            progress_mark: Cell::new(0),
            path: None,
            acked: 0,
            pacing_requests: 0,
            sizes: Sizes::AsGiven,
            accept_calls: 0,
        }
    }

    /// A transport that accepts everything at once.
    pub fn open(buffering: Buffering, client: Vec<u8>) -> Self {
        Wire::new(vec![Step::Accept(usize::MAX)], buffering, client)
    }

    /// Counts one transport call; panics on a livelock (one poll of the wrapper making
    /// [`LIVELOCK_CALLS`] calls without the transport making progress: the wrapper is
    /// spinning and the poll would never return).
    fn tick(&self, call: &str) {
        let now = self.progress();
        if now != self.progress_mark.get() {
            self.progress_mark.set(now);
            self.calls_without_progress.set(0);
        }
        let n = self.calls_without_progress.get() + 1;
        self.calls_without_progress.set(n);
        assert!(
            n < LIVELOCK_CALLS,
            "livelock: one poll of the wrapper made {n} transport calls (the last one \
             {call}) without the transport making progress; the poll never returns"
        );
    }

    /// Called by the driver before each poll of the wrapper.
    pub(crate) fn begin_poll(&mut self) {
        self.ready_waker = None;
        self.calls_without_progress.set(0);
    }

    /// Called by the driver after each poll: whether a blocked call kept the waker, and the
    /// waker to wake now if the schedule filled the socket (the driver plays the reactor
    /// and unblocks it at once). A test's block stays, with its waker.
    pub(crate) fn end_poll(&mut self) -> (bool, Option<Waker>) {
        let parked = self.ready_waker.is_some();
        if !self.socket_full {
            return (parked, None);
        }
        self.socket_full = false;
        self.socket_full_stale = false;
        (parked, self.ready_waker.take())
    }

    /// Blocks or unblocks the transport for the test; unblocking returns the waker that a
    /// call registered meanwhile.
    pub(crate) fn set_blocked(&mut self, blocked: bool) -> Option<Waker> {
        self.blocked = blocked;
        if blocked {
            None
        } else {
            self.ready_waker.take()
        }
    }

    /// Whether a call registered the waker for write readiness while blocked.
    pub fn waits_for_readiness(&self) -> bool {
        self.ready_waker.is_some()
    }

    /// Blocked: keeps the waker and says `Pending`.
    fn park(&mut self, cx: &mut Context<'_>) {
        self.ready_waker = Some(cx.waker().clone());
    }

    /// The next step: `Some(n)` to accept `n`, `None` for `Pending` (waker handled).
    fn next(&mut self, cx: &mut Context<'_>) -> Option<usize> {
        if self.socket_full {
            self.park(cx);
            return None;
        }
        let step = if self.blocked {
            Step::Pending
        } else {
            let step = self.schedule[self.cursor % self.schedule.len()];
            self.cursor += 1;
            step
        };
        match step {
            Step::Accept(n) if n > 0 => {
                self.accept_calls += 1;
                Some(self.sizes.apply(n, self.accept_calls - 1))
            }
            Step::Block | Step::BlockStale => {
                self.socket_full = true;
                self.socket_full_stale = step == Step::BlockStale;
                self.park(cx);
                None
            }
            _ => {
                cx.waker().wake_by_ref();
                None
            }
        }
    }

    /// Bytes written according to the event log, and the last flushed offset.
    pub fn event_summary(&self) -> (usize, Option<usize>) {
        let mut written = 0;
        let mut last_flush = None;
        for e in &self.events {
            match *e {
                Event::Write { from, to } => written += to - from,
                Event::Flush { flushed } => last_flush = Some(flushed),
            }
        }
        (written, last_flush)
    }

    pub fn client_remaining(&self) -> usize {
        self.client.len() - self.read_pos
    }

    /// Grows whenever the transport makes progress.
    pub(crate) fn progress(&self) -> usize {
        self.accepted.len() + self.flushed + self.read_pos + usize::from(self.shut_down)
    }

    /// One flush step; `Ready` once everything accepted is on the socket. With nothing to
    /// flush it is `Ready` at once without using a step, as TCP and rustls are. (Consuming a
    /// step there would let a cyclic schedule lock-step with a caller making a fixed number
    /// of calls per poll, e.g. `[Pending, Accept]` against flush-then-shutdown, which no
    /// real socket does.)
    fn poll_flush_step(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tick("poll_flush");
        if self.flushed < self.accepted.len() {
            let Some(n) = self.next(cx) else {
                return Poll::Pending;
            };
            self.flushed += n.min(self.accepted.len() - self.flushed);
            if self.flushed < self.accepted.len() {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let event = Event::Flush {
            flushed: self.flushed,
        };
        // A flush with nothing written since the last one (or since the start) tells nothing.
        let vacuous = match self.events.last() {
            None => self.flushed == 0,
            Some(last) => *last == event,
        };
        if self.record_events && !vacuous {
            self.events.push(event);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_read_client(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.client_remaining() == 0 {
            if self.read_plan.eof {
                return Poll::Ready(Ok(()));
            }
            // The client has nothing more to say for now.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let chunk = if self.read_plan.chunks.is_empty() {
            usize::MAX
        } else {
            let c = self.read_plan.chunks[self.read_cursor % self.read_plan.chunks.len()];
            self.read_cursor += 1;
            c
        };
        if chunk == 0 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = self.client_remaining().min(buf.remaining()).min(chunk);
        let from = self.read_pos;
        buf.put_slice(&self.client[from..from + n]);
        self.read_pos += n;
        Poll::Ready(Ok(()))
    }

    fn poll_write_step(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.tick("poll_write");
        if self.shut_down {
            return Poll::Ready(Err(io::Error::other("write after shutdown")));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let call = self.write_calls;
        self.write_calls += 1;
        if self.fail_write_at == Some(call) {
            self.failed = true;
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let Some(n) = self.next(cx) else {
            return Poll::Pending;
        };
        let n = n.min(buf.len());
        let from = self.accepted.len();
        self.accepted.extend_from_slice(&buf[..n]);
        if self.buffering == Buffering::Off {
            self.flushed = self.accepted.len();
        }
        if self.record_events {
            self.events.push(Event::Write { from, to: from + n });
        }
        Poll::Ready(Ok(n))
    }
}

/// A fault-injecting transport: see [`Wire`].
#[derive(Debug)]
pub struct FaultyTransport {
    wire: Rc<RefCell<Wire>>,
}

impl FaultyTransport {
    pub fn new(wire: Rc<RefCell<Wire>>) -> Self {
        FaultyTransport { wire }
    }
}

impl AsyncRead for FaultyTransport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.wire.borrow_mut().poll_read_client(cx, buf)
    }
}

impl AsyncWrite for FaultyTransport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.wire.borrow_mut().poll_write_step(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.wire.borrow_mut().poll_flush_step(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.wire.borrow_mut();
        std::task::ready!(w.poll_flush_step(cx))?;
        // Closing takes a step of its own (it may be Pending, like sending close_notify).
        if w.next(cx).is_none() {
            return Poll::Pending;
        }
        w.shut_down = true;
        Poll::Ready(Ok(()))
    }
}

impl Wire {
    /// The state of [`Wire::path`] now, acknowledging `acked_per_read` more bytes first.
    fn path_state(&mut self) -> Option<tls_flush::PathState> {
        let path = self.path?;
        self.acked = (self.acked + path.acked_per_read).min(self.accepted.len());
        let outstanding = self.accepted.len() - self.acked;
        let mss = path.mss.max(1) as usize;
        let window = path.cwnd as usize * mss;
        let in_flight = outstanding.min(window);
        Some(tls_flush::PathState {
            cwnd: path.cwnd,
            unacked: in_flight.div_ceil(mss) as u32,
            mss: path.mss,
            notsent: (outstanding - in_flight) as u32,
            min_rtt: path.min_rtt,
            delivery_rate: path.delivery_rate,
            ssthresh: path.ssthresh,
            // The in-memory wire has no queue of its own: the RTT is the minimum.
            srtt: path.min_rtt,
            retransmits: path.retransmits,
            ..tls_flush::PathState::default()
        })
    }
}

impl Transport for FaultyTransport {
    fn path_state(&self) -> Option<tls_flush::PathState> {
        self.wire.borrow_mut().path_state()
    }

    fn enable_pacing(&self) -> io::Result<()> {
        self.wire.borrow_mut().pacing_requests += 1;
        Ok(())
    }

    fn alpn_protocol(&self) -> Option<&[u8]> {
        self.wire.borrow().alpn_h2.then_some(b"h2")
    }

    fn has_buffered_output(&self) -> bool {
        let w = self.wire.borrow();
        w.tick("has_buffered_output");
        w.buffering == Buffering::Reported && w.flushed < w.accepted.len()
    }

    /// `Pending` while blocked (the waker is kept and woken on unblocking), unless the
    /// readiness is stale; `Ready` otherwise.
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.wire.borrow_mut();
        w.tick("poll_write_ready");
        if (w.socket_full && !w.socket_full_stale) || (w.blocked && !w.stale_readiness) {
            w.park(cx);
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_floor_bounds_the_calls_of_tiny_steps() {
        let calls_for = |sizes: Sizes, total: usize| {
            let (mut done, mut calls) = (0, 0);
            while done < total {
                done += sizes.apply(1, calls);
                calls += 1;
            }
            calls
        };
        assert_eq!(calls_for(Sizes::AsGiven, 200_000), 200_000);
        assert!(calls_for(Sizes::GrowingFloor, 200_000) <= 2_600);
        // The first calls keep the step the case chose.
        assert_eq!(Sizes::GrowingFloor.apply(1, SIZE_DOUBLING_CALLS - 1), 1);
        assert_eq!(Sizes::GrowingFloor.apply(3, SIZE_DOUBLING_CALLS), 3);
        assert_eq!(Sizes::GrowingFloor.apply(usize::MAX, 1 << 20), usize::MAX);
    }
}
