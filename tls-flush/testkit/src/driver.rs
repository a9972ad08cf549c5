//! The polling driver: [`Harness`] owns a `FlushStream` over a [`FaultyTransport`] and polls
//! it by hand, as an executor polling h2's task would. Every `Pending` must come with a
//! wake-up (the task woken, or a waker kept by the blocked transport), else the driver
//! reports that the task would hang; a pipeline that keeps asking to be polled without the
//! transport making progress for [`MAX_PENDING_POLLS`] polls and a stall time is reported
//! as stuck. When the schedule fills the socket ([`crate::Step::Block`]) the driver plays the
//! reactor and wakes the kept waker at the end of the poll; a block set by the test
//! ([`Harness::set_blocked`]) lasts until the test lifts it.
//!
//! Two families of calls: `write`, `write_all`, `flush`, `settle`, `shutdown` turn an I/O
//! error into the `Err` of a violated expectation; `write_io`, `write_all_io`, `flush_io`,
//! `settle_io`, `shutdown_io` hand it back (`Ok(Err(e))`) for cases that inject failures.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tls_flush::{FlushConfig, FlushStream, StatsSnapshot};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::transport::{FaultyTransport, Wire};

/// The driver's clock: the wrapper's. Fuzz builds (`--cfg fuzzing`) move it forward by
/// their `TICK` whenever a poll only waited for time to pass, so holds and waits cost
/// polls, not real time; elsewhere it is the real clock.
mod clock {
    use std::time::Instant;

    /// How far a poll that only waited moves a fuzz build's clock: the wrapper's waits are
    /// whole milliseconds (holds of 5 ms, a first flight's 2 ms).
    #[cfg(fuzzing)]
    pub const TICK: std::time::Duration = std::time::Duration::from_millis(1);

    #[cfg(fuzzing)]
    pub fn now() -> Instant {
        tls_flush::fuzz_clock::now()
    }

    #[cfg(fuzzing)]
    pub fn waited() {
        tls_flush::fuzz_clock::advance(TICK);
    }

    #[cfg(not(fuzzing))]
    pub fn now() -> Instant {
        Instant::now()
    }

    #[cfg(not(fuzzing))]
    pub fn waited() {}
}

/// Polls without progress on the transport (bytes accepted, flushed or read), lasting at
/// least the stall time, before a pipeline is declared stuck. Schedules accept within a
/// few dozen transport calls; the wall-clock part lets `scheduled`'s anticipation (DATA
/// held, re-polling, for up to 5 ms) run out.
pub const MAX_PENDING_POLLS: usize = 10_000;
/// The stall time of [`Harness::new`] (the property tests).
pub const STALL_TIME: Duration = Duration::from_millis(200);
/// The stall time of the fuzz runners, which want many cases per second.
pub const FUZZ_STALL_TIME: Duration = Duration::from_millis(50);

/// Counts wake-ups, so that a `Pending` nobody will wake up for is caught.
#[derive(Debug, Default)]
struct WakeCounter(AtomicUsize);

impl Wake for WakeCounter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// The wrapper under test.
pub type Stream = FlushStream<FaultyTransport>;

/// Counts polls without transport progress, to tell a stuck pipeline from one that waits
/// (re-polling itself) for a bounded time.
pub struct Stall {
    progress: usize,
    pub polls: usize,
    pub since: Instant,
    time: Duration,
}

impl Stall {
    pub fn new(wire: &RefCell<Wire>, time: Duration) -> Self {
        Stall {
            progress: wire.borrow().progress(),
            polls: 0,
            since: clock::now(),
            time,
        }
    }

    /// Counts one poll; true once polls have made no progress for too long.
    pub fn stuck(&mut self, wire: &RefCell<Wire>) -> bool {
        let now = wire.borrow().progress();
        if now != self.progress {
            *self = Stall::new(wire, self.time);
            return false;
        }
        self.polls += 1;
        self.polls >= MAX_PENDING_POLLS && clock::now() - self.since >= self.time
    }
}

/// Drives a `FlushStream` over a [`FaultyTransport`] by hand; see the module docs.
pub struct Harness {
    pub stream: Stream,
    pub wire: Rc<RefCell<Wire>>,
    wakes: Arc<WakeCounter>,
    waker: Waker,
    stall_time: Duration,
    /// The last poll woke the task (rather than only registering for write readiness).
    pub last_poll_woke: bool,
    /// The last poll asked to be polled again: it woke the task or a blocked transport
    /// kept the waker.
    pub last_poll_again: bool,
    /// The driver woke the waker kept by a transport whose schedule filled the socket.
    last_poll_reactor: bool,
}

impl Harness {
    pub fn new(config: FlushConfig, wire: Wire) -> Self {
        let wire = Rc::new(RefCell::new(wire));
        let stream = FlushStream::new(FaultyTransport::new(Rc::clone(&wire)), config);
        let wakes = Arc::new(WakeCounter::default());
        let waker = Waker::from(Arc::clone(&wakes));
        Harness {
            stream,
            wire,
            wakes,
            waker,
            stall_time: STALL_TIME,
            last_poll_woke: false,
            last_poll_again: false,
            last_poll_reactor: false,
        }
    }

    /// ACKs come back: a [`SimulatedPath`](crate::SimulatedPath), if the wire has one, acknowledges
    /// whatever is in flight at each read of its state from now on.
    pub fn acknowledge_everything(&mut self) {
        if let Some(path) = self.wire.borrow_mut().path.as_mut() {
            path.acked_per_read = 1 << 30;
        }
    }

    /// The same driver with another stall time.
    pub fn with_stall_time(mut self, time: Duration) -> Self {
        self.stall_time = time;
        self
    }

    /// A stall detector with this driver's stall time.
    pub fn stall(&self) -> Stall {
        Stall::new(&self.wire, self.stall_time)
    }

    /// Polls once. A `Pending` must come with a wake-up: the task was woken, or the blocked
    /// transport holds the waker for when it becomes writable; else a real executor would
    /// never poll again.
    pub fn poll_once<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(Pin<&mut Stream>, &mut Context<'_>) -> Poll<T>,
    ) -> Result<Poll<T>, String> {
        let mut cx = Context::from_waker(&self.waker);
        self.wire.borrow_mut().begin_poll();
        let before = self.wakes.0.load(Relaxed);
        let progress = self.wire.borrow().progress();
        let result = f(Pin::new(&mut self.stream), &mut cx);
        let woke = self.wakes.0.load(Relaxed) != before;
        if result.is_pending() && woke && self.wire.borrow().progress() == progress {
            // Only waiting for time to pass (no runtime times the wait here).
            clock::waited();
        }
        let (parked, reactor) = self.wire.borrow_mut().end_poll();
        self.last_poll_woke = woke;
        self.last_poll_again = woke || parked;
        self.last_poll_reactor = reactor.is_some();
        if result.is_pending() && !woke && !parked {
            let queued = self.stats().queued_bytes;
            return Err(format!(
                "{what} returned Pending without a wake-up registered ({queued} bytes queued \
                 in the wrapper): the task would hang"
            ));
        }
        if let Some(waker) = reactor {
            waker.wake();
        }
        Ok(result)
    }

    /// One `poll_write` of `bytes`, not retried: how a case sees whether the wrapper takes a
    /// frame or refuses it (`Pending`, which must still come with a wake-up).
    pub fn offer(&mut self, bytes: &[u8]) -> Result<Poll<io::Result<usize>>, String> {
        self.poll_once("poll_write", |s, cx| s.poll_write(cx, bytes))
    }

    /// Polls until `Ready`, as an executor woken by the transport would.
    fn poll_ready<T>(
        &mut self,
        what: &str,
        mut f: impl FnMut(Pin<&mut Stream>, &mut Context<'_>) -> Poll<T>,
    ) -> Result<T, String> {
        let mut stall = self.stall();
        loop {
            if let Poll::Ready(v) = self.poll_once(what, &mut f)? {
                return Ok(v);
            }
            if !self.last_poll_woke && !self.last_poll_reactor {
                return Err(format!(
                    "{what} is Pending until the blocked transport becomes writable, and \
                     nothing here unblocks it"
                ));
            }
            if stall.stuck(&self.wire) {
                return Err(format!(
                    "{what}: still Pending after {} polls and {:?} without progress although \
                     the transport keeps accepting",
                    stall.polls,
                    clock::now() - stall.since
                ));
            }
        }
    }

    /// One write call (vectored when given several slices), retried while `Pending`; an
    /// I/O error is handed back.
    pub fn write_io(&mut self, bufs: &[&[u8]]) -> Result<io::Result<usize>, String> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let result = if bufs.len() == 1 {
            self.poll_ready("poll_write", |s, cx| s.poll_write(cx, bufs[0]))?
        } else {
            let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
            self.poll_ready("poll_write_vectored", |s, cx| {
                s.poll_write_vectored(cx, &slices)
            })?
        };
        if let Ok(n) = result {
            if n > total {
                return Err(format!("write of {total} bytes claims {n} were written"));
            }
            if n == 0 && total > 0 {
                return Err(format!(
                    "write of {total} bytes returned Ready(Ok(0)) (h2 would fail with \
                     WriteZero)"
                ));
            }
        }
        Ok(result)
    }

    /// [`Harness::write_io`], an I/O error being a violation.
    pub fn write(&mut self, bufs: &[&[u8]]) -> Result<usize, String> {
        self.write_io(bufs)?
            .map_err(|e| format!("write failed: {e}"))
    }

    /// Writes all of `bytes` with plain `poll_write`, re-offering the rest.
    pub fn write_all_io(&mut self, mut bytes: &[u8]) -> Result<io::Result<()>, String> {
        while !bytes.is_empty() {
            match self.write_io(&[bytes])? {
                Ok(n) => bytes = &bytes[n..],
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    /// [`Harness::write_all_io`], an I/O error being a violation.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.write_all_io(bytes)?
            .map_err(|e| format!("write failed: {e}"))
    }

    /// One flush, as h2 makes it after writing. In HTTP/2 mode this is `Ready` at once even
    /// when the transport is `Pending` or a short record is held: it promises nothing about
    /// the output.
    pub fn flush_io(&mut self) -> Result<io::Result<()>, String> {
        self.poll_ready("poll_flush", |s, cx| s.poll_flush(cx))
    }

    /// [`Harness::flush_io`], an I/O error being a violation.
    pub fn flush(&mut self) -> Result<(), String> {
        self.flush_io()?.map_err(|e| format!("flush failed: {e}"))
    }

    /// Polls `poll_flush` the way an executor polls h2's task, which flushes on every poll:
    /// again whenever the last poll asked for it (a record held for a turn, a transport that
    /// was `Pending`), until a poll returns `Ready(Ok)` without asking for another.
    pub fn settle_io(&mut self) -> Result<io::Result<()>, String> {
        if self.wire.borrow().blocked {
            return Err("settle: the transport is blocked".into());
        }
        let mut stall = self.stall();
        loop {
            match self.poll_once("poll_flush", |s, cx| s.poll_flush(cx))? {
                Poll::Ready(Err(e)) => return Ok(Err(e)),
                Poll::Ready(Ok(())) if !self.last_poll_again => return Ok(Ok(())),
                _ => {}
            }
            if stall.stuck(&self.wire) {
                return Err(format!(
                    "poll_flush keeps asking to be polled again: {} polls and {:?} without \
                     progress",
                    stall.polls,
                    clock::now() - stall.since
                ));
            }
        }
    }

    /// [`Harness::settle_io`], an I/O error being a violation.
    pub fn settle(&mut self) -> Result<(), String> {
        self.settle_io()?.map_err(|e| format!("flush failed: {e}"))
    }

    pub fn shutdown_io(&mut self) -> Result<io::Result<()>, String> {
        self.poll_ready("poll_shutdown", |s, cx| s.poll_shutdown(cx))
    }

    /// [`Harness::shutdown_io`], an I/O error being a violation.
    pub fn shutdown(&mut self) -> Result<(), String> {
        self.shutdown_io()?
            .map_err(|e| format!("shutdown failed: {e}"))
    }

    /// One read of at most `max` bytes into a buffer already holding `prefill` bytes;
    /// returns the new bytes, after checking the prefilled ones were left alone. `None`
    /// when the read was `Pending`.
    pub fn read_once(&mut self, max: usize, prefill: usize) -> Result<Option<Vec<u8>>, String> {
        let mut buf = vec![0; prefill + max];
        Ok(self
            .read_into(&mut buf, prefill)?
            .map(|range| buf[range].to_vec()))
    }

    /// One read into `buf` (which it overwrites), of which the first `prefill` bytes count
    /// as already filled; returns the range of the new bytes, after checking the prefilled
    /// ones were left alone. `None` when the read was `Pending`. Allocates nothing itself.
    pub fn read_into(
        &mut self,
        buf: &mut [u8],
        prefill: usize,
    ) -> Result<Option<std::ops::Range<usize>>, String> {
        buf.fill(0xa5);
        let polled = self.poll_once("poll_read", |s, cx| {
            let mut rb = ReadBuf::new(buf);
            rb.advance(prefill);
            s.poll_read(cx, &mut rb).map_ok(|()| rb.filled().len())
        })?;
        match polled {
            Poll::Pending => Ok(None),
            Poll::Ready(Err(e)) => Err(format!("read failed: {e}")),
            Poll::Ready(Ok(filled)) => {
                if filled < prefill || filled > buf.len() {
                    return Err(format!(
                        "poll_read left {filled} bytes filled in a buffer of {} with {prefill} \
                         already filled",
                        buf.len()
                    ));
                }
                if buf[..prefill].iter().any(|&b| b != 0xa5) {
                    return Err("poll_read changed bytes already in the buffer".into());
                }
                Ok(Some(prefill..filled))
            }
        }
    }

    /// Reads at most `max` of the client's bytes through the wrapper, polling through
    /// `Pending`s.
    pub fn read(&mut self, max: usize) -> Result<Vec<u8>, String> {
        let mut stall = self.stall();
        loop {
            if max == 0 || self.wire.borrow().client_remaining() == 0 {
                return Ok(Vec::new());
            }
            if let Some(bytes) = self.read_once(max, 0)? {
                return Ok(bytes);
            }
            if stall.stuck(&self.wire) {
                return Err("poll_read stays Pending with client bytes left".into());
            }
        }
    }

    pub fn read_all_client(&mut self) -> Result<Vec<u8>, String> {
        let mut got = Vec::new();
        while self.wire.borrow().client_remaining() > 0 {
            got.extend(self.read(4096)?);
        }
        Ok(got)
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stream.stats().snapshot()
    }

    pub fn is_http2(&self) -> bool {
        self.stream.is_http2()
    }

    /// Blocks or unblocks the transport; unblocking wakes a waker registered for write
    /// readiness, as the reactor would.
    pub fn set_blocked(&self, blocked: bool) {
        let waker = self.wire.borrow_mut().set_blocked(blocked);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Every byte the transport accepted so far.
    pub fn output(&self) -> Vec<u8> {
        self.wire.borrow().accepted.clone()
    }
}
