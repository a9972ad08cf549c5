//! Property tests for the HTTP/2 write pipeline of `tls-flush` under backpressure
//! (DESIGN.md, "tls-flush: the write path"; issue 3).
//!
//! A fault-injecting transport ([`FaultyTransport`]) answers every `poll_write`, `poll_flush`
//! and `poll_shutdown` with `Pending` (waking the task itself) or with a partial write of an
//! arbitrary size, following a generated schedule, and records every byte it accepts. It can
//! also hold accepted bytes until flushed (reporting `has_buffered_output()`), and it supplies
//! the client's bytes through `poll_read` (preface, requests carrying a `priority` header,
//! PRIORITY_UPDATE frames) so that the scheduler has different urgencies to act on. A test
//! can block it: writes, flushes and shutdown are then `Pending`, and so is
//! `Transport::poll_write_ready`, which registers the waker and is woken when the test
//! unblocks the transport (or, to model a readiness that went stale, keeps saying `Ready`).
//!
//! A generator produces h2-like server output over many streams: SETTINGS first, then header
//! blocks (HEADERS + CONTINUATIONs), DATA, trailers or RST_STREAM per stream, interleaved
//! with PING, WINDOW_UPDATE, SETTINGS and SETTINGS ACK on stream 0. It is written to
//! [`FlushStream`] the way h2 writes: random-sized (vectored) writes that split frames
//! anywhere, re-offering what was not taken (a refused frame is `Pending`, or a short count,
//! and h2 offers it again), with flushes at random points, then a final flush polled the way
//! an executor polls h2's task (again whenever it asked to be woken) and `poll_shutdown`
//! until it is ready. The recorded output is then checked frame by frame.
//!
//! In HTTP/2 mode `poll_flush` returns `Ready` even while the transport is `Pending` (the
//! frames stay queued in the wrapper) and may hold a short record of bulk DATA for one turn
//! (`FlushConfig::cork`), so a single flush promises nothing about the output. The tests
//! only rely on: a flush that returns `Ready` *without* asking to be polled again has
//! delivered every complete frame it holds; `poll_shutdown` delivers everything.
//!
//! Every `Pending` must come with a wake-up (the task woken, or a waker kept by the blocked
//! transport), or the test fails: the task would hang. Every transport call is counted; a
//! wrapper poll that makes 100 000 transport calls without the transport making progress is
//! reported as a livelock (a panic) instead of hanging.
//!
//! `scheduled` anticipates: DATA waits, the wrapper re-polling itself, for up to 5 ms while a
//! more urgent request's response has not begun. The generated scenarios read the client's
//! requests lazily, so this happens; the stuck-pipeline detection allows for it, and tests that
//! check what a single flush delivers turn it off.
//!
//! Tests named after a fixed bug say so in their documentation (`Regression:`).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use proptest::collection::vec;
use proptest::prelude::*;
use tls_flush::{FlushConfig, FlushStream, Policy, StatsSnapshot, Transport};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

// ---------------------------------------------------------------------------------------
// HTTP/2 frames
// ---------------------------------------------------------------------------------------

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const PRIORITY_UPDATE: u8 = 0x10;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

const HEADER_LEN: usize = 9;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_NO_RFC7540_PRIORITIES = 1, as `FlushConfig` appends it by default.
const NO_RFC7540_PRIORITIES: [u8; 6] = [0, 9, 0, 0, 0, 1];
/// `FlushConfig`'s documented default hard limit (1 MiB).
const DEFAULT_HARD_LIMIT: usize = 1024 * 1024;
const MAX_RECORD: usize = 16384;
/// Consecutive `Pending`s without any progress on the transport (bytes accepted, flushed
/// or read), lasting at least [`STALL_TIME`], before a test declares the pipeline stuck. The
/// generated schedules accept within at most ~40 transport calls; the wall-clock part lets
/// `scheduled`'s anticipation (DATA held, re-polling, for up to 5 ms) run out.
const MAX_PENDING_POLLS: usize = 10_000;
const STALL_TIME: Duration = Duration::from_millis(200);
/// Transport calls within one poll of the wrapper, without the transport making progress,
/// after which the wrapper is declared to spin (a poll that never returns).
const LIVELOCK_CALLS: usize = 100_000;

/// One HTTP/2 frame, with its payload.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Frame {
    stream: u32,
    kind: u8,
    flags: u8,
    payload: Vec<u8>,
}

impl Frame {
    fn new(kind: u8, flags: u8, stream: u32, payload: impl Into<Vec<u8>>) -> Self {
        Frame {
            stream,
            kind,
            flags,
            payload: payload.into(),
        }
    }

    fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        let len = u32::try_from(self.payload.len()).expect("small frame");
        assert!(len < 1 << 24, "frame payload too long");
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.extend_from_slice(&self.payload);
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.wire_len());
        self.encode_into(&mut out);
        out
    }

    fn starts_header_block(&self) -> bool {
        matches!(self.kind, HEADERS | PUSH_PROMISE)
    }

    fn end_headers(&self) -> bool {
        self.flags & END_HEADERS != 0
    }

    fn is_data(&self) -> bool {
        self.kind == DATA
    }

    fn is_settings(&self) -> bool {
        self.kind == SETTINGS
    }
}

/// Frames are printed without their payloads, so that failures stay readable.
impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DATA => "DATA",
            HEADERS => "HEADERS",
            RST_STREAM => "RST_STREAM",
            SETTINGS => "SETTINGS",
            PUSH_PROMISE => "PUSH_PROMISE",
            PING => "PING",
            WINDOW_UPDATE => "WINDOW_UPDATE",
            CONTINUATION => "CONTINUATION",
            PRIORITY_UPDATE => "PRIORITY_UPDATE",
            _ => "UNKNOWN",
        };
        write!(
            f,
            "{kind}(s={}, flags={:#x}, len={})",
            self.stream,
            self.flags,
            self.payload.len()
        )
    }
}

/// The wire size of the largest header block (HEADERS/PUSH_PROMISE + CONTINUATIONs).
fn largest_header_block(frames: &[Frame]) -> usize {
    let mut largest = 0;
    let mut current = 0;
    for f in frames {
        if f.starts_header_block() || (f.kind == CONTINUATION && current > 0) {
            current += f.wire_len();
            if f.end_headers() {
                largest = largest.max(current);
                current = 0;
            }
        }
    }
    largest
}

fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frames.iter().map(Frame::wire_len).sum());
    for f in frames {
        f.encode_into(&mut out);
    }
    out
}

/// Parses `bytes` as a sequence of whole frames; anything left over is an error.
fn parse_frames(bytes: &[u8]) -> Result<Vec<Frame>, String> {
    let mut frames = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.len() < HEADER_LEN {
            return Err(format!(
                "output ends with a partial frame header ({} bytes) after {} whole frames",
                rest.len(),
                frames.len()
            ));
        }
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < HEADER_LEN + len {
            return Err(format!(
                "output ends inside a frame (header says {len} payload bytes, {} present) \
                 after {} whole frames",
                rest.len() - HEADER_LEN,
                frames.len()
            ));
        }
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        frames.push(Frame::new(
            rest[3],
            rest[4],
            stream,
            &rest[HEADER_LEN..HEADER_LEN + len],
        ));
        rest = &rest[HEADER_LEN + len..];
    }
    Ok(frames)
}

// ---------------------------------------------------------------------------------------
// HPACK (just what we need: static-table indices and literals without indexing)
// ---------------------------------------------------------------------------------------

/// An HPACK string literal without Huffman coding (RFC 7541 §5.2): 7-bit prefix length.
fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    let mut len = s.len();
    if len < 127 {
        out.push(len as u8);
    } else {
        out.push(0x7f);
        len -= 127;
        while len >= 128 {
            out.push((len % 128) as u8 | 0x80);
            len /= 128;
        }
        out.push(len as u8);
    }
    out.extend_from_slice(s);
}

/// A literal header field without indexing, with a literal name (RFC 7541 §6.2.2).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    hpack_string(out, name);
    hpack_string(out, value);
}

/// A request header block: `:method GET`, `:scheme https`, `:path /`, optional `priority`.
fn request_block(priority: Option<&str>) -> Vec<u8> {
    let mut block = vec![0x82, 0x87, 0x84];
    if let Some(p) = priority {
        literal(&mut block, b"priority", p.as_bytes());
    }
    block
}

/// A response header block: `:status 200`, optional `priority`, optional padding header.
fn response_block(priority: Option<&str>, pad: usize) -> Vec<u8> {
    let mut block = vec![0x88];
    if let Some(p) = priority {
        literal(&mut block, b"priority", p.as_bytes());
    }
    if pad > 0 {
        literal(&mut block, b"x-pad", &vec![b'p'; pad]);
    }
    block
}

/// A header block split into `parts` frames: HEADERS then CONTINUATIONs, END_HEADERS on the
/// last one.
fn header_block(stream: u32, block: &[u8], parts: usize, end_stream: bool) -> Vec<Frame> {
    let parts = parts.max(1);
    (0..parts)
        .map(|i| {
            let piece = &block[i * block.len() / parts..(i + 1) * block.len() / parts];
            let mut flags = if i + 1 == parts { END_HEADERS } else { 0 };
            if i == 0 {
                if end_stream {
                    flags |= END_STREAM;
                }
                Frame::new(HEADERS, flags, stream, piece)
            } else {
                Frame::new(CONTINUATION, flags, stream, piece)
            }
        })
        .collect()
}

fn settings_frame(flags: u8, list: &[(u16, u32)]) -> Frame {
    let mut payload = Vec::new();
    for (id, value) in list {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    Frame::new(SETTINGS, flags, 0, payload)
}

fn priority_update(stream: u32, value: &str) -> Frame {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend_from_slice(value.as_bytes());
    Frame::new(PRIORITY_UPDATE, 0, 0, payload)
}

/// Distinctive DATA content: differs per stream, per frame and per offset.
fn data_payload(stream: u32, frame_index: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| ((stream as usize * 131 + frame_index * 17 + j) % 251) as u8)
        .collect()
}

fn data(stream: u32, frame_index: usize, len: usize, end_stream: bool) -> Frame {
    let flags = if end_stream { END_STREAM } else { 0 };
    Frame::new(DATA, flags, stream, data_payload(stream, frame_index, len))
}

fn stream_id(index: usize) -> u32 {
    2 * index as u32 + 1
}

// ---------------------------------------------------------------------------------------
// The fault-injecting transport
// ---------------------------------------------------------------------------------------

/// What the transport does on its next `poll_write` / `poll_flush` / `poll_shutdown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Returns `Pending` after waking the task.
    Pending,
    /// Accepts up to this many bytes (a write) or flushes up to this many (a flush).
    Accept(usize),
}

/// Whether accepted bytes are held until flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buffering {
    /// Every accepted byte is on the "socket" at once.
    Off,
    /// Accepted bytes wait for `poll_flush`; `has_buffered_output()` says so (like rustls).
    Reported,
    /// Accepted bytes wait for `poll_flush`, but `has_buffered_output()` is left at the
    /// trait's default `false` (like a user's buffered transport).
    Silent,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    /// `accepted[from..to]` was taken by one `poll_write`.
    Write { from: usize, to: usize },
    /// A `poll_flush` returned `Ready` with `accepted[..flushed]` on the socket.
    Flush { flushed: usize },
}

/// The transport's state, shared with the test so it can be steered and inspected while
/// the `FlushStream` owns the transport.
#[derive(Debug)]
struct Wire {
    schedule: Vec<Step>,
    cursor: usize,
    /// While set, every write, flush and shutdown is `Pending`, and so is
    /// `poll_write_ready` (unless `stale_readiness`).
    blocked: bool,
    /// While blocked, `poll_write_ready` still says `Ready`: the socket filled after its
    /// readiness was reported, so the wrapper builds a record and only the write is `Pending`.
    stale_readiness: bool,
    /// The waker `poll_write_ready` registered while blocked; woken when unblocked.
    ready_waker: Option<Waker>,
    buffering: Buffering,
    /// Every byte accepted by `poll_write`, in order.
    accepted: Vec<u8>,
    /// `accepted[..flushed]` has reached the socket.
    flushed: usize,
    /// Bytes the client sends, supplied through `poll_read`.
    client: Vec<u8>,
    read_pos: usize,
    shut_down: bool,
    record_events: bool,
    events: Vec<Event>,
    /// Transport calls since the harness began the current poll or the transport last made
    /// progress (see [`Wire::tick`]), and the progress value they were counted against.
    calls_without_progress: Cell<usize>,
    progress_mark: Cell<usize>,
}

impl Wire {
    fn new(schedule: Vec<Step>, buffering: Buffering, client: Vec<u8>) -> Self {
        assert!(
            schedule
                .iter()
                .any(|s| matches!(s, Step::Accept(n) if *n > 0)),
            "a schedule must eventually accept"
        );
        Wire {
            schedule,
            cursor: 0,
            blocked: false,
            stale_readiness: false,
            ready_waker: None,
            buffering,
            accepted: Vec::new(),
            flushed: 0,
            client,
            read_pos: 0,
            shut_down: false,
            record_events: false,
            events: Vec::new(),
            calls_without_progress: Cell::new(0),
            progress_mark: Cell::new(0),
        }
    }

    /// Counts one transport call. Panics when one poll of the wrapper makes
    /// [`LIVELOCK_CALLS`] calls without the transport making progress: the wrapper is
    /// spinning and the poll would never return (a real executor thread would hang).
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

    /// A transport that accepts everything at once.
    fn open(buffering: Buffering, client: Vec<u8>) -> Self {
        Wire::new(vec![Step::Accept(usize::MAX)], buffering, client)
    }

    /// The next step, or `None` (after waking the task) for `Pending`.
    fn next(&mut self, cx: &mut Context<'_>) -> Option<usize> {
        let step = if self.blocked {
            Step::Pending
        } else {
            let step = self.schedule[self.cursor % self.schedule.len()];
            self.cursor += 1;
            step
        };
        match step {
            Step::Accept(n) if n > 0 => Some(n),
            _ => {
                cx.waker().wake_by_ref();
                None
            }
        }
    }

    /// Bytes written according to the event log, and the last flushed offset.
    fn event_summary(&self) -> (usize, Option<usize>) {
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

    fn client_remaining(&self) -> usize {
        self.client.len() - self.read_pos
    }

    /// Grows whenever the transport makes progress.
    fn progress(&self) -> usize {
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
        if self.record_events {
            self.events.push(Event::Flush {
                flushed: self.flushed,
            });
        }
        Poll::Ready(Ok(()))
    }
}

/// A fault-injecting transport: see [`Wire`].
#[derive(Debug)]
struct FaultyTransport {
    wire: Rc<RefCell<Wire>>,
}

impl AsyncRead for FaultyTransport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut w = self.wire.borrow_mut();
        let n = w.client_remaining().min(buf.remaining());
        if n == 0 && buf.remaining() > 0 {
            // The client has nothing more to say for now.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let from = w.read_pos;
        buf.put_slice(&w.client[from..from + n]);
        w.read_pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for FaultyTransport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.wire.borrow_mut();
        w.tick("poll_write");
        if w.shut_down {
            return Poll::Ready(Err(io::Error::other("write after shutdown")));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let Some(n) = w.next(cx) else {
            return Poll::Pending;
        };
        let n = n.min(buf.len());
        let from = w.accepted.len();
        w.accepted.extend_from_slice(&buf[..n]);
        if w.buffering == Buffering::Off {
            w.flushed = w.accepted.len();
        }
        if w.record_events {
            w.events.push(Event::Write { from, to: from + n });
        }
        Poll::Ready(Ok(n))
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

impl Transport for FaultyTransport {
    /// It stands for a TLS stream that negotiated HTTP/2.
    fn alpn_protocol(&self) -> Option<&[u8]> {
        Some(b"h2")
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
        if w.blocked && !w.stale_readiness {
            w.ready_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

// ---------------------------------------------------------------------------------------
// Driving a FlushStream by hand
// ---------------------------------------------------------------------------------------

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

type Stream = FlushStream<FaultyTransport>;

/// Counts polls without progress on the transport, to tell a stuck pipeline from one that
/// waits (re-polling) for a bounded time.
struct Stall {
    progress: usize,
    polls: usize,
    since: Instant,
}

impl Stall {
    fn new(wire: &RefCell<Wire>) -> Self {
        Stall {
            progress: wire.borrow().progress(),
            polls: 0,
            since: Instant::now(),
        }
    }

    /// Counts one poll; true once polls have made no progress for too long.
    fn stuck(&mut self, wire: &RefCell<Wire>) -> bool {
        let now = wire.borrow().progress();
        if now != self.progress {
            *self = Stall::new(wire);
            return false;
        }
        self.polls += 1;
        self.polls >= MAX_PENDING_POLLS && self.since.elapsed() >= STALL_TIME
    }
}

struct Harness {
    stream: Stream,
    wire: Rc<RefCell<Wire>>,
    wakes: Arc<WakeCounter>,
    waker: Waker,
    /// The last poll woke the task (rather than only registering for write readiness).
    last_poll_woke: bool,
}

impl Harness {
    fn new(config: FlushConfig, wire: Wire) -> Self {
        let wire = Rc::new(RefCell::new(wire));
        let stream = FlushStream::new(
            FaultyTransport {
                wire: Rc::clone(&wire),
            },
            config,
        );
        let wakes = Arc::new(WakeCounter::default());
        let waker = Waker::from(Arc::clone(&wakes));
        Harness {
            stream,
            wire,
            wakes,
            waker,
            last_poll_woke: false,
        }
    }

    /// Polls once. A `Pending` must come with a wake-up: the task was woken, or the blocked
    /// transport holds the waker for when it becomes writable; else a real executor would
    /// never poll again.
    fn poll_once<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(Pin<&mut Stream>, &mut Context<'_>) -> Poll<T>,
    ) -> Result<Poll<T>, String> {
        let mut cx = Context::from_waker(&self.waker);
        {
            let mut w = self.wire.borrow_mut();
            w.ready_waker = None;
            w.calls_without_progress.set(0);
        }
        let before = self.wakes.0.load(Relaxed);
        let result = f(Pin::new(&mut self.stream), &mut cx);
        self.last_poll_woke = self.wakes.0.load(Relaxed) != before;
        let waits_for_readiness = self.wire.borrow().ready_waker.is_some();
        if result.is_pending() && !self.last_poll_woke && !waits_for_readiness {
            let queued = self.stats().queued_bytes;
            return Err(format!(
                "{what} returned Pending without a wake-up registered ({queued} bytes queued \
                 in the wrapper): the task would hang"
            ));
        }
        Ok(result)
    }

    /// Polls until `Ready`, as an executor woken by the transport would.
    fn poll_ready<T>(
        &mut self,
        what: &str,
        mut f: impl FnMut(Pin<&mut Stream>, &mut Context<'_>) -> Poll<T>,
    ) -> Result<T, String> {
        let mut stall = Stall::new(&self.wire);
        loop {
            if let Poll::Ready(v) = self.poll_once(what, &mut f)? {
                return Ok(v);
            }
            if !self.last_poll_woke {
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
                    stall.since.elapsed()
                ));
            }
        }
    }

    /// One write call (vectored when given several slices), retried while `Pending`.
    fn write(&mut self, bufs: &[&[u8]]) -> Result<usize, String> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let result = if bufs.len() == 1 {
            self.poll_ready("poll_write", |s, cx| s.poll_write(cx, bufs[0]))?
        } else {
            let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
            self.poll_ready("poll_write_vectored", |s, cx| {
                s.poll_write_vectored(cx, &slices)
            })?
        };
        let n = result.map_err(|e| format!("write failed: {e}"))?;
        if n > total {
            return Err(format!("write of {total} bytes claims {n} were written"));
        }
        if n == 0 && total > 0 {
            return Err(format!(
                "write of {total} bytes returned Ready(Ok(0)) (h2 would fail with WriteZero)"
            ));
        }
        Ok(n)
    }

    /// Writes all of `bytes` with plain `poll_write`, re-offering the rest.
    fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            let n = self.write(&[bytes])?;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// One flush, as h2 makes it after writing. In HTTP/2 mode this is `Ready` at once even
    /// when the transport is `Pending` or a short record is held: it promises nothing about
    /// the output.
    fn flush(&mut self) -> Result<(), String> {
        self.poll_ready("poll_flush", |s, cx| s.poll_flush(cx))?
            .map_err(|e| format!("flush failed: {e}"))
    }

    /// Polls `poll_flush` the way an executor polls h2's task, which flushes on every poll:
    /// again whenever the last poll woke the task (a record held for a turn, a transport that
    /// was `Pending`), until a poll returns `Ready(Ok)` without asking for another. Returns
    /// the number of polls.
    fn settle(&mut self) -> Result<usize, String> {
        if self.wire.borrow().blocked {
            return Err("settle: the transport is blocked".into());
        }
        let mut polls = 0;
        let mut stall = Stall::new(&self.wire);
        loop {
            polls += 1;
            match self.poll_once("poll_flush", |s, cx| s.poll_flush(cx))? {
                Poll::Ready(Err(e)) => return Err(format!("flush failed: {e}")),
                Poll::Ready(Ok(())) if !self.last_poll_woke => return Ok(polls),
                _ => {}
            }
            if stall.stuck(&self.wire) {
                return Err(format!(
                    "poll_flush keeps asking to be polled again: {} polls and {:?} without \
                     progress",
                    stall.polls,
                    stall.since.elapsed()
                ));
            }
        }
    }

    fn shutdown(&mut self) -> Result<(), String> {
        self.poll_ready("poll_shutdown", |s, cx| s.poll_shutdown(cx))?
            .map_err(|e| format!("shutdown failed: {e}"))
    }

    /// Reads at most `max` of the client's bytes through the wrapper.
    fn read(&mut self, max: usize) -> Result<Vec<u8>, String> {
        if max == 0 || self.wire.borrow().client_remaining() == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0; max];
        let n = self
            .poll_ready("poll_read", |s, cx| {
                let mut rb = ReadBuf::new(&mut buf);
                s.poll_read(cx, &mut rb).map_ok(|()| rb.filled().len())
            })?
            .map_err(|e| format!("read failed: {e}"))?;
        buf.truncate(n);
        Ok(buf)
    }

    fn read_all_client(&mut self) -> Result<Vec<u8>, String> {
        let mut got = Vec::new();
        while self.wire.borrow().client_remaining() > 0 {
            got.extend(self.read(4096)?);
        }
        Ok(got)
    }

    fn stats(&self) -> StatsSnapshot {
        self.stream.stats().snapshot()
    }

    /// Blocks or unblocks the transport; unblocking wakes a waker registered for write
    /// readiness, as the reactor would.
    fn set_blocked(&self, blocked: bool) {
        let waker = {
            let mut w = self.wire.borrow_mut();
            w.blocked = blocked;
            if blocked {
                None
            } else {
                w.ready_waker.take()
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn output(&self) -> Vec<u8> {
        self.wire.borrow().accepted.clone()
    }
}

// ---------------------------------------------------------------------------------------
// Checks on the recorded output
// ---------------------------------------------------------------------------------------

/// What the wrapper must put on the wire for `input`: the same frames, in an order the
/// invariants allow, with SETTINGS_NO_RFC7540_PRIORITIES appended to the first non-ACK
/// SETTINGS when announcing and that frame does not carry it yet.
fn expected_frames(input: &[Frame], announce: bool) -> Vec<Frame> {
    let mut out = input.to_vec();
    if announce {
        if let Some(first) = out
            .iter_mut()
            .find(|f| f.is_settings() && f.flags & ACK == 0)
        {
            let already = first
                .payload
                .chunks_exact(6)
                .any(|s| u16::from_be_bytes([s[0], s[1]]) == 9);
            if !already {
                first.payload.extend_from_slice(&NO_RFC7540_PRIORITIES);
            }
        }
    }
    out
}

/// Properties (1)-(2): maps each output frame to its index in `expected`, checking that
/// every stream's frames (stream 0 included) come out in exactly the written order with
/// identical bytes, that nothing is lost or duplicated, and that the multisets agree.
fn match_frames(expected: &[Frame], out: &[Frame]) -> Result<Vec<usize>, String> {
    let mut by_stream: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, f) in expected.iter().enumerate() {
        by_stream.entry(f.stream).or_default().push(i);
    }
    let mut cursor: HashMap<u32, usize> = HashMap::new();
    let mut perm = Vec::with_capacity(out.len());
    for (pos, f) in out.iter().enumerate() {
        let Some(list) = by_stream.get(&f.stream) else {
            return Err(format!(
                "output frame #{pos} {f:?} is on a stream never written"
            ));
        };
        let k = cursor.entry(f.stream).or_default();
        let Some(&idx) = list.get(*k) else {
            return Err(format!(
                "output frame #{pos} {f:?} is extra: stream {} had only {} frames \
                 (duplicated bytes?)",
                f.stream,
                list.len()
            ));
        };
        if expected[idx] != *f {
            let same_bytes_elsewhere = list.iter().any(|&j| expected[j] == *f);
            return Err(format!(
                "stream {}: its frame #{} should be {:?} (written as frame #{idx}) but output \
                 frame #{pos} is {f:?}{}",
                f.stream,
                *k,
                expected[idx],
                if same_bytes_elsewhere {
                    " (a frame of this stream out of order)"
                } else {
                    " (bytes differ from every frame of this stream)"
                }
            ));
        }
        *k += 1;
        perm.push(idx);
    }
    for (stream, list) in &by_stream {
        let got = cursor.get(stream).copied().unwrap_or(0);
        if got != list.len() {
            return Err(format!(
                "stream {stream}: {} frames written, {got} output; first lost: {:?}",
                list.len(),
                expected[list[got]]
            ));
        }
    }
    let mut a: Vec<&Frame> = expected.iter().collect();
    let mut b: Vec<&Frame> = out.iter().collect();
    a.sort();
    b.sort();
    if a != b {
        return Err("the multisets of written and output frames differ".into());
    }
    Ok(perm)
}

/// Property (3): header blocks are contiguous and keep their relative order across streams.
fn check_header_blocks(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let mut open: Option<u32> = None;
    let mut last_block: Option<usize> = None;
    for (pos, f) in out.iter().enumerate() {
        if let Some(stream) = open {
            if f.kind != CONTINUATION || f.stream != stream {
                return Err(format!(
                    "output frame #{pos} {f:?} sits inside the header block of stream {stream}"
                ));
            }
            if f.end_headers() {
                open = None;
            }
            continue;
        }
        if f.kind == CONTINUATION {
            return Err(format!(
                "output frame #{pos} {f:?} is a CONTINUATION outside any header block"
            ));
        }
        if f.starts_header_block() {
            if let Some(prev) = last_block {
                if perm[pos] < prev {
                    return Err(format!(
                        "header block {f:?} (written as frame #{}) was output after a header \
                         block written later (frame #{prev}): HPACK order broken",
                        perm[pos]
                    ));
                }
            }
            last_block = Some(perm[pos]);
            if !f.end_headers() {
                open = Some(f.stream);
            }
        }
    }
    match open {
        Some(stream) => Err(format!(
            "the output ends inside the header block of stream {stream}"
        )),
        None => Ok(()),
    }
}

/// Property (4): SETTINGS (ACK or not) is a barrier: everything written before it is output
/// before it, everything written after it is output after it.
fn check_settings_barriers(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let n = perm.len();
    let mut suffix_min = vec![usize::MAX; n + 1];
    for p in (0..n).rev() {
        suffix_min[p] = suffix_min[p + 1].min(perm[p]);
    }
    let mut prefix_max: Option<usize> = None;
    for (p, f) in out.iter().enumerate() {
        if f.is_settings() {
            if prefix_max.is_some_and(|m| m > perm[p]) {
                return Err(format!(
                    "{f:?} (written as frame #{}) was overtaken by frame #{} written after it",
                    perm[p],
                    prefix_max.unwrap_or_default()
                ));
            }
            if suffix_min[p + 1] < perm[p] {
                return Err(format!(
                    "{f:?} (written as frame #{}) went out before frame #{} written ahead of it",
                    perm[p],
                    suffix_min[p + 1]
                ));
            }
        }
        prefix_max = Some(prefix_max.map_or(perm[p], |m| m.max(perm[p])));
    }
    Ok(())
}

/// Connection-level control frames are never stuck behind DATA: no DATA frame written after
/// a stream-0 frame is output before it.
fn check_control_not_overtaken(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    for (p, f) in out.iter().enumerate() {
        if f.stream != 0 {
            continue;
        }
        if let Some(q) = (0..p).find(|&q| out[q].is_data() && perm[q] > perm[p]) {
            return Err(format!(
                "control frame {f:?} (written as frame #{}) was output after {:?} written \
                 later (frame #{})",
                perm[p], out[q], perm[q]
            ));
        }
    }
    Ok(())
}

/// Property (5): in-order policies output exactly the written order.
fn check_in_order(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    match perm.iter().enumerate().find(|&(p, &i)| p != i) {
        Some((p, &i)) => Err(format!(
            "output frame #{p} {:?} was written as frame #{i}: an in-order policy reordered",
            out[p]
        )),
        None => Ok(()),
    }
}

/// DATA frames output ahead of a DATA frame written before them.
fn inverted_data_frames(out: &[Frame], perm: &[usize]) -> usize {
    let mut later_min = usize::MAX;
    let mut inverted = 0;
    for p in (0..out.len()).rev() {
        if out[p].is_data() {
            if later_min < perm[p] {
                inverted += 1;
            }
            later_min = later_min.min(perm[p]);
        }
    }
    inverted
}

// ---------------------------------------------------------------------------------------
// Generated scenarios
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum End {
    /// The last DATA frame (or the HEADERS, without DATA) carries END_STREAM.
    Finish,
    /// Trailers (HEADERS with END_STREAM, split into `parts` frames) after the DATA.
    Trailers { parts: usize },
    /// RST_STREAM instead of finishing.
    Reset,
}

#[derive(Clone, Debug)]
struct StreamSpec {
    request_priority: Option<&'static str>,
    response_priority: Option<&'static str>,
    /// Length of an `x-pad` response header, to make header blocks of various sizes.
    pad: usize,
    header_parts: usize,
    data: Vec<usize>,
    end: End,
}

#[derive(Clone, Debug)]
enum Control {
    Ping { ack: bool, seed: u8 },
    WindowUpdate(u32),
    SettingsAck,
    Settings(Vec<(u16, u32)>),
}

#[derive(Clone, Debug)]
struct Update {
    stream_index: usize,
    value: &'static str,
    /// Sent before the request of the stream with this index (so possibly early).
    before_request: usize,
    malformed: bool,
}

#[derive(Clone, Debug)]
struct WriteOp {
    /// Bytes offered by this write call (fewer at the end).
    size: usize,
    /// Number of slices of a vectored write (1: plain `poll_write`).
    slices: usize,
    split_seed: u64,
    flush_after: bool,
    /// Client bytes read before this write.
    read_before: usize,
}

#[derive(Clone, Debug)]
struct Scenario {
    first_settings: Vec<(u16, u32)>,
    streams: Vec<StreamSpec>,
    controls: Vec<Control>,
    picks: Vec<u16>,
    updates: Vec<Update>,
    read_first: usize,
    plan: Vec<WriteOp>,
    schedule: Vec<Step>,
    buffering: Buffering,
}

fn priority_value() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "u=0", "u=1", "u=2, i", "u=3", "u=5, i", "u=6, i", "u=7", "i",
    ])
}

fn data_len() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0..64usize, 3 => 0..4096usize, 2 => 0..20000usize]
}

fn stream_spec() -> impl Strategy<Value = StreamSpec> {
    (
        prop::option::weighted(0.8, priority_value()),
        prop::option::weighted(0.3, priority_value()),
        prop_oneof![6 => Just(0usize), 3 => 0..200usize, 1 => 0..3000usize],
        1..=4usize,
        vec(data_len(), 0..5),
        prop_oneof![
            6 => Just(End::Finish),
            2 => (1..=2usize).prop_map(|parts| End::Trailers { parts }),
            2 => Just(End::Reset),
        ],
    )
        .prop_map(
            |(request_priority, response_priority, pad, header_parts, data, end)| StreamSpec {
                request_priority,
                response_priority,
                pad,
                header_parts,
                data,
                end,
            },
        )
}

fn settings_list() -> impl Strategy<Value = Vec<(u16, u32)>> {
    vec((1..=6u16, any::<u32>()), 0..4)
}

fn control() -> impl Strategy<Value = Control> {
    prop_oneof![
        3 => (any::<bool>(), any::<u8>()).prop_map(|(ack, seed)| Control::Ping { ack, seed }),
        3 => (1..=0x7fff_ffffu32).prop_map(Control::WindowUpdate),
        2 => Just(Control::SettingsAck),
        1 => settings_list().prop_map(Control::Settings),
    ]
}

fn update() -> impl Strategy<Value = Update> {
    (
        0..12usize,
        priority_value(),
        0..=12usize,
        prop::bool::weighted(0.15),
    )
        .prop_map(|(stream_index, value, before_request, malformed)| Update {
            stream_index,
            value,
            before_request,
            malformed,
        })
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(1usize),
        2 => 1..16usize,
        3 => 1..2048usize,
        3 => 1..40000usize,
    ]
}

fn write_op() -> impl Strategy<Value = WriteOp> {
    (
        size(),
        prop_oneof![3 => Just(1usize), 2 => 2..=4usize],
        any::<u64>(),
        prop::bool::weighted(0.2),
        prop_oneof![8 => Just(0usize), 2 => 1..64usize],
    )
        .prop_map(
            |(size, slices, split_seed, flush_after, read_before)| WriteOp {
                size,
                slices,
                split_seed,
                flush_after,
                read_before,
            },
        )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Pending),
        2 => Just(Step::Accept(1)),
        2 => (1..32usize).prop_map(Step::Accept),
        2 => (1..2048usize).prop_map(Step::Accept),
        3 => (1..65536usize).prop_map(Step::Accept),
    ]
}

/// Up to 40 steps, cycled: at most 40 consecutive `Pending`s.
fn schedule() -> impl Strategy<Value = Vec<Step>> {
    vec(step(), 1..40).prop_map(|mut s| {
        if !s.iter().any(|st| matches!(st, Step::Accept(_))) {
            s.push(Step::Accept(1));
        }
        s
    })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop_oneof![
            9 => settings_list(),
            1 => settings_list().prop_map(|mut v| {
                v.push((9, 1));
                v
            }),
        ],
        vec(stream_spec(), 1..=12),
        vec(control(), 0..8),
        vec(any::<u16>(), 1..32),
        vec(update(), 0..6),
        0..96usize,
        vec(write_op(), 1..24),
        schedule(),
        prop_oneof![
            Just(Buffering::Off),
            Just(Buffering::Reported),
            Just(Buffering::Silent)
        ],
    )
        .prop_map(
            |(
                first_settings,
                streams,
                controls,
                picks,
                updates,
                read_first,
                plan,
                schedule,
                buffering,
            )| Scenario {
                first_settings,
                streams,
                controls,
                picks,
                updates,
                read_first,
                plan,
                schedule,
                buffering,
            },
        )
}

/// A stream's units in order: its header block, DATA frames, then trailers or RST_STREAM.
fn stream_units(id: u32, spec: &StreamSpec) -> Vec<Vec<Frame>> {
    let headers_only = spec.data.is_empty() && matches!(spec.end, End::Finish);
    let block = response_block(spec.response_priority, spec.pad);
    let mut units = vec![header_block(id, &block, spec.header_parts, headers_only)];
    for (k, &len) in spec.data.iter().enumerate() {
        let end_stream = k + 1 == spec.data.len() && matches!(spec.end, End::Finish);
        units.push(vec![data(id, k, len, end_stream)]);
    }
    match spec.end {
        End::Finish => {}
        End::Trailers { parts } => {
            let mut trailers = Vec::new();
            literal(&mut trailers, b"grpc-status", b"0");
            units.push(header_block(id, &trailers, parts, true));
        }
        End::Reset => units.push(vec![Frame::new(RST_STREAM, 0, id, 8u32.to_be_bytes())]),
    }
    units
}

fn control_frame(c: &Control) -> Frame {
    match c {
        Control::Ping { ack, seed } => {
            let payload: Vec<u8> = (0..8u8).map(|i| seed.wrapping_add(i)).collect();
            Frame::new(PING, if *ack { ACK } else { 0 }, 0, payload)
        }
        Control::WindowUpdate(n) => Frame::new(WINDOW_UPDATE, 0, 0, n.to_be_bytes()),
        Control::SettingsAck => settings_frame(ACK, &[]),
        Control::Settings(list) => settings_frame(0, list),
    }
}

/// The server's frames in the order h2 writes them: SETTINGS, then the streams' units and
/// the control frames interleaved (each header block staying whole, as h2 writes it).
fn server_frames(scn: &Scenario) -> Vec<Frame> {
    let mut sources: Vec<VecDeque<Vec<Frame>>> = scn
        .streams
        .iter()
        .enumerate()
        .map(|(i, spec)| stream_units(stream_id(i), spec).into())
        .collect();
    sources.push(
        scn.controls
            .iter()
            .map(|c| vec![control_frame(c)])
            .collect(),
    );
    let mut frames = vec![settings_frame(0, &scn.first_settings)];
    for turn in 0.. {
        let active: Vec<usize> = (0..sources.len())
            .filter(|&i| !sources[i].is_empty())
            .collect();
        if active.is_empty() {
            break;
        }
        let pick = usize::from(scn.picks[turn % scn.picks.len()]) % active.len();
        frames.extend(sources[active[pick]].pop_front().expect("active source"));
    }
    frames
}

/// The client's bytes: preface, SETTINGS, one request per stream in id order (carrying its
/// `priority`), and PRIORITY_UPDATE frames among them (some early, some malformed).
fn client_bytes(scn: &Scenario) -> Vec<u8> {
    let n = scn.streams.len();
    let mut frames = vec![settings_frame(0, &[])];
    for i in 0..=n {
        for u in scn.updates.iter().filter(|u| u.before_request.min(n) == i) {
            frames.push(if u.malformed {
                Frame::new(PRIORITY_UPDATE, 0, 0, vec![0, 0])
            } else {
                priority_update(stream_id(u.stream_index % n), u.value)
            });
        }
        if let Some(spec) = scn.streams.get(i) {
            frames.push(Frame::new(
                HEADERS,
                END_HEADERS | END_STREAM,
                stream_id(i),
                request_block(spec.request_priority),
            ));
        }
    }
    let mut bytes = PREFACE.to_vec();
    bytes.extend(encode_all(&frames));
    bytes
}

/// Splits `chunk` into `slices` pieces (some possibly empty) at pseudo-random points.
fn split(chunk: &[u8], slices: usize, seed: u64) -> Vec<&[u8]> {
    if slices <= 1 {
        return vec![chunk];
    }
    let mut x = seed | 1;
    let mut cuts: Vec<usize> = (1..slices)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (chunk.len() as u64 + 1)) as usize
        })
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::with_capacity(slices);
    let mut at = 0;
    for cut in cuts {
        pieces.push(&chunk[at..cut]);
        at = cut;
    }
    pieces.push(&chunk[at..]);
    pieces
}

/// How a generated scenario is run.
#[derive(Clone, Copy, Debug)]
struct Setup {
    policy: Policy,
    /// `(soft, hard)`; `None` for the defaults.
    limits: Option<(usize, usize)>,
    announce: bool,
    /// `tls_max_fragment_size`.
    fragment: Option<usize>,
    /// `FlushConfig::cork` (on by default).
    cork: bool,
    /// `FlushConfig::pack_records` (on in every preset).
    pack: bool,
    /// Keep the preset's anticipation (5 ms for `scheduled`); `false`: `anticipate(None)`.
    anticipate: bool,
}

impl Setup {
    /// A policy's preset with the announcement off, default limits, records and cork.
    fn new(policy: Policy) -> Self {
        Setup {
            policy,
            limits: None,
            announce: false,
            fragment: None,
            cork: true,
            pack: true,
            anticipate: true,
        }
    }

    fn config(&self) -> FlushConfig {
        let mut config = FlushConfig::for_policy(self.policy)
            .announce_no_rfc7540_priorities(self.announce)
            .tls_max_fragment_size(self.fragment)
            .cork(self.cork)
            .pack_records(self.pack);
        if !self.anticipate {
            config = config.anticipate(None);
        }
        if let Some((soft, hard)) = self.limits {
            config = config.soft_limit(soft).hard_limit(hard);
        }
        config
    }

    fn hard_limit(&self) -> usize {
        self.limits.map_or(DEFAULT_HARD_LIMIT, |(_, hard)| hard)
    }

    fn record_payload(&self) -> usize {
        self.fragment
            .map_or(MAX_RECORD, |n| n.saturating_sub(5).clamp(1, MAX_RECORD))
    }
}

/// Where byte `pos` of the encoded `frames` falls, for error messages.
fn locate(frames: &[Frame], pos: usize) -> String {
    let mut start = 0;
    for (i, f) in frames.iter().enumerate() {
        if pos < start + f.wire_len() {
            let before = &frames[i.saturating_sub(3)..i];
            return format!(
                "writing byte {} of frame #{i} {f:?}, after {before:?}",
                pos - start
            );
        }
        start += f.wire_len();
    }
    format!("all {} frames written", frames.len())
}

/// Writes the scenario's server output the way h2 does and checks every property.
fn run_scenario(scn: &Scenario, setup: Setup) -> Result<(), String> {
    run_scenario_inner(scn, setup).map_err(|e| format!("[{setup:?}] {e}"))
}

fn run_scenario_inner(scn: &Scenario, setup: Setup) -> Result<(), String> {
    let input_frames = server_frames(scn);
    let input = encode_all(&input_frames);
    let client = client_bytes(scn);
    let mut h = Harness::new(
        setup.config(),
        Wire::new(scn.schedule.clone(), scn.buffering, client.clone()),
    );

    // h2's side: random-sized (vectored) writes re-offering the rest, random flushes,
    // client bytes read in between.
    let mut read = h.read(scn.read_first)?;
    let mut pos = 0;
    let mut calls = 0usize;
    while pos < input.len() {
        let op = &scn.plan[calls % scn.plan.len()];
        calls += 1;
        read.extend(h.read(op.read_before)?);
        let chunk = &input[pos..(pos + op.size).min(input.len())];
        pos += h
            .write(&split(chunk, op.slices, op.split_seed))
            .map_err(|e| format!("{e} ({})", locate(&input_frames, pos)))?;
        if op.flush_after {
            h.flush()?;
        }
    }
    read.extend(h.read_all_client()?);
    let expected = expected_frames(&input_frames, setup.announce);
    let expected_len: usize = expected.iter().map(Frame::wire_len).sum();

    // h2's last flush, polled as long as it asks to be; checked in (6a) below.
    h.settle()?;
    let settled = {
        let w = h.wire.borrow();
        (w.accepted.len(), w.flushed, h.stats().queued_bytes)
    };
    h.shutdown()?;

    if read != client {
        return Err("the read side changed the client's bytes".into());
    }
    if !h.stream.is_http2() {
        return Err("the wrapper did not run the HTTP/2 pipeline".into());
    }

    // (6) After poll_shutdown returned Ready(Ok), every byte was delivered.
    let output = {
        let w = h.wire.borrow();
        if !w.shut_down {
            return Err("the transport was not shut down".into());
        }
        if w.flushed != w.accepted.len() {
            return Err("bytes left unflushed in the transport at shutdown".into());
        }
        w.accepted.clone()
    };

    // (1) Whole frames; (2) per-stream order, identical bytes, same multiset.
    let out = parse_frames(&output)?;
    let perm = match_frames(&expected, &out)?;
    if output.len() != expected_len {
        return Err(format!(
            "{} bytes output, {expected_len} expected",
            output.len()
        ));
    }
    // (6a) Once h2's last flush returned Ready without asking to be polled again, everything
    // h2 wrote was on the socket: nothing held, nothing queued.
    if settled != (expected_len, expected_len, 0) {
        return Err(format!(
            "the final flush settled with {} of {expected_len} bytes written, {} flushed and \
             {} still queued",
            settled.0, settled.1, settled.2
        ));
    }
    // (3) header blocks, (4) SETTINGS barriers, control frames ahead of later DATA.
    check_header_blocks(&out, &perm)?;
    check_settings_barriers(&out, &perm)?;
    check_control_not_overtaken(&out, &perm)?;
    // (5) in-order policies.
    let in_order = setup.policy != Policy::Scheduled;
    if in_order {
        check_in_order(&out, &perm)?;
    }
    if setup.announce {
        check_first_settings_grew(&input_frames, &out)?;
    }

    // (7) counters.
    let s = h.stats();
    if s.bytes_written != output.len() as u64 {
        return Err(format!(
            "stats.bytes_written = {} but the transport accepted {} bytes",
            s.bytes_written,
            output.len()
        ));
    }
    if s.queued_bytes != 0 {
        return Err(format!(
            "stats.queued_bytes = {} after shutdown",
            s.queued_bytes
        ));
    }
    // Admission checks every frame against everything queued (an unfinished header block
    // too), so the queue stays within the hard limit, or within one frame admitted into an
    // empty queue; a header block already begun is taken whole (it cannot leave until
    // complete), so one block may come on top. The first SETTINGS grows by 6 bytes after
    // admission.
    let largest_frame = expected.iter().map(Frame::wire_len).max().unwrap_or(0);
    let largest_block = largest_header_block(&expected);
    let bound =
        (setup.hard_limit() + largest_block).max(largest_frame) + NO_RFC7540_PRIORITIES.len();
    if s.queued_bytes_high_water > bound as u64 {
        return Err(format!(
            "stats.queued_bytes_high_water = {} > max(hard limit + largest header block, largest frame) = {bound}",
            s.queued_bytes_high_water
        ));
    }
    if s.records_written * (setup.record_payload() as u64) < s.bytes_written {
        return Err(format!(
            "{} records cannot hold {} bytes",
            s.records_written, s.bytes_written
        ));
    }
    let inverted = inverted_data_frames(&out, &perm) as u64;
    if in_order && s.data_frames_reordered != 0 {
        return Err(format!(
            "in-order policy counted {} reordered DATA frames",
            s.data_frames_reordered
        ));
    }
    if s.data_frames_reordered > inverted || (inverted > 0 && s.data_frames_reordered == 0) {
        return Err(format!(
            "stats.data_frames_reordered = {} but {inverted} DATA frames were output ahead \
             of older DATA",
            s.data_frames_reordered
        ));
    }
    // A record ends early after a small DATA frame of an urgent stream, or after an urgent
    // stream's HEADERS whose DATA is not queued yet.
    let cut_points = out
        .iter()
        .filter(|f| (f.is_data() && f.payload.len() <= 4096) || f.kind == HEADERS)
        .count() as u64;
    if setup.policy == Policy::Dynamic && s.early_cuts != 0 {
        return Err(format!(
            "dynamic has no urgent cut, yet {} early cuts",
            s.early_cuts
        ));
    }
    if s.early_cuts > cut_points {
        return Err(format!(
            "{} early cuts but only {cut_points} small DATA and HEADERS frames",
            s.early_cuts
        ));
    }
    Ok(())
}

/// With the announcement on: the first non-ACK SETTINGS grew by exactly the 6 bytes of
/// SETTINGS_NO_RFC7540_PRIORITIES = 1 (unless h2 already sent it), and nothing else.
fn check_first_settings_grew(input: &[Frame], out: &[Frame]) -> Result<(), String> {
    let first_in = input
        .iter()
        .find(|f| f.is_settings() && f.flags & ACK == 0)
        .ok_or("no SETTINGS written")?;
    let first_out = out
        .iter()
        .find(|f| f.is_settings() && f.flags & ACK == 0)
        .ok_or("no SETTINGS output")?;
    let already = first_in.payload.chunks_exact(6).any(|s| s[..2] == [0, 9]);
    let mut want = first_in.payload.clone();
    if !already {
        want.extend_from_slice(&NO_RFC7540_PRIORITIES);
    }
    if first_out.payload != want {
        return Err(format!(
            "first SETTINGS payload {:02x?}, expected {want:02x?}",
            first_out.payload
        ));
    }
    // Every other SETTINGS is untouched.
    let others_in: Vec<&Frame> = input.iter().filter(|f| f.is_settings()).skip(1).collect();
    let others_out: Vec<&Frame> = out.iter().filter(|f| f.is_settings()).skip(1).collect();
    if others_in != others_out {
        return Err("a SETTINGS frame other than the first changed".into());
    }
    Ok(())
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

/// `cases` per property, or `PROPTEST_CASES` when set (for a deeper run).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // Keep failing inputs out of the source tree; a failure prints the minimal input.
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    }
}

/// Frames `..n` of `frames` that form complete units within the first `pos` bytes: whole
/// frames, less a header block whose END_HEADERS is not among them.
fn complete_frames(frames: &[Frame], pos: usize) -> usize {
    let mut end = 0;
    let mut whole = 0;
    let mut open_block = None;
    for (i, f) in frames.iter().enumerate() {
        end += f.wire_len();
        if end > pos {
            break;
        }
        whole = i + 1;
        if f.starts_header_block() || f.kind == CONTINUATION {
            open_block = if f.end_headers() {
                None
            } else {
                open_block.or(Some(i))
            };
        }
    }
    open_block.unwrap_or(whole)
}

/// Frames of `expected` not in `out` (as multisets).
fn missing_frames<'a>(expected: &'a [Frame], out: &[Frame]) -> Vec<&'a Frame> {
    let mut out: Vec<&Frame> = out.iter().collect();
    let mut missing = Vec::new();
    for f in expected {
        match out.iter().position(|o| *o == f) {
            Some(i) => {
                out.swap_remove(i);
            }
            None => missing.push(f),
        }
    }
    missing
}

/// Writes the scenario as h2 does into an always-writable transport and checks, after each
/// of h2's flushes, what the flush delivered: every frame the wrapper took completely is on
/// the socket, except, with `cork`, one short record of bulk DATA (DATA without END_STREAM)
/// held for one turn, for which the flush woke the task; the flush of that next turn sends
/// it. Without `cork` nothing is ever held.
fn run_flush_latency(scn: &Scenario, setup: Setup) -> Result<(), String> {
    run_flush_latency_inner(scn, setup).map_err(|e| format!("[{setup:?}] {e}"))
}

fn run_flush_latency_inner(scn: &Scenario, setup: Setup) -> Result<(), String> {
    assert!(
        !setup.announce,
        "the output is compared with the input bytes"
    );
    let input_frames = server_frames(scn);
    let input = encode_all(&input_frames);
    let mut h = Harness::new(setup.config(), Wire::open(scn.buffering, client_bytes(scn)));
    h.read(scn.read_first)?;
    let mut pos = 0;
    let mut calls = 0usize;
    let mut held_turns = 0;
    while pos < input.len() {
        let op = &scn.plan[calls % scn.plan.len()];
        calls += 1;
        h.read(op.read_before)?;
        let chunk = &input[pos..(pos + op.size).min(input.len())];
        pos += h
            .write(&split(chunk, op.slices, op.split_seed))
            .map_err(|e| format!("{e} ({})", locate(&input_frames, pos)))?;
        if !op.flush_after && pos < input.len() {
            continue;
        }
        let complete = &input_frames[..complete_frames(&input_frames, pos)];
        let want: usize = complete.iter().map(Frame::wire_len).sum();
        for turn in 0..2 {
            match h.poll_once("poll_flush", |s, cx| s.poll_flush(cx))? {
                Poll::Ready(Ok(())) => {}
                other => return Err(format!("flush returned {other:?}")),
            }
            let w = h.wire.borrow();
            let (accepted, flushed) = (w.accepted.len(), w.flushed);
            if flushed != accepted {
                return Err(format!(
                    "a flush returned Ready with {} of {accepted} written bytes flushed",
                    flushed
                ));
            }
            if accepted == want {
                break;
            }
            let what = format!(
                "after {pos} bytes taken and {} flush(es), {accepted} of the {want} bytes of \
                 complete frames are on the socket",
                turn + 1
            );
            if turn == 1 || !setup.cork {
                return Err(what);
            }
            if !h.last_poll_woke {
                return Err(format!(
                    "{what}, and the flush held them without waking the task"
                ));
            }
            let record = setup.record_payload();
            if want - accepted >= record {
                return Err(format!(
                    "{what}: more than a short record ({record} bytes) held"
                ));
            }
            // Whole frames output; a frame split across records counts as held.
            let mut whole = w.accepted.clone();
            let mut at = 0;
            while at + HEADER_LEN <= whole.len() {
                let len = u32::from_be_bytes([0, whole[at], whole[at + 1], whole[at + 2]]);
                if at + HEADER_LEN + len as usize > whole.len() {
                    break;
                }
                at += HEADER_LEN + len as usize;
            }
            whole.truncate(at);
            let out = parse_frames(&whole)?;
            let held = missing_frames(complete, &out);
            if let Some(f) = held
                .iter()
                .find(|f| !f.is_data() || f.flags & END_STREAM != 0)
            {
                return Err(format!(
                    "{what}: the held record has {f:?}, which must never wait (held: {held:?})"
                ));
            }
            held_turns += 1;
        }
    }
    h.shutdown()?;
    let out = parse_frames(&h.output())?;
    match_frames(&input_frames, &out)?;
    if !setup.cork && held_turns > 0 {
        return Err("a record was held with cork off".into());
    }
    Ok(())
}

fn limits() -> impl Strategy<Value = Option<(usize, usize)>> {
    prop::sample::select(vec![None, Some((8 * 1024, 32 * 1024)), Some((1024, 4096))])
}

proptest! {
    #![proptest_config(config(128))]

    /// Properties (1)-(7) for every policy with the default limits (256 KiB / 1 MiB),
    /// announcement off so the output must equal the input frame for frame; default cork.
    #[test]
    fn every_policy_delivers_exact_streams_with_default_limits(scn in scenario()) {
        for policy in Policy::ALL {
            run_scenario(&scn, Setup::new(policy)).map_err(TestCaseError::fail)?;
        }
    }

    /// Properties (1)-(7) for every policy with small limits (8 KiB soft / 32 KiB hard), so
    /// that writes are refused past the soft limit and only frames that go ahead get in.
    #[test]
    fn every_policy_delivers_exact_streams_with_small_limits(scn in scenario()) {
        for policy in Policy::ALL {
            let setup = Setup {
                limits: Some((8 * 1024, 32 * 1024)),
                ..Setup::new(policy)
            };
            run_scenario(&scn, setup).map_err(TestCaseError::fail)?;
        }
    }

    /// The same properties with SETTINGS_NO_RFC7540_PRIORITIES announced (the default):
    /// the first SETTINGS grows by exactly those 6 bytes and nothing else changes. Limits
    /// and record sizes vary, down to a 1 KiB soft limit and 507-byte records.
    #[test]
    fn announcing_no_rfc7540_priorities_changes_only_the_first_settings(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
        fragment in prop::sample::select(vec![None, Some(4096), Some(512)]),
    ) {
        let setup = Setup { limits, announce: true, fragment, ..Setup::new(policy) };
        run_scenario(&scn, setup).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// Under tight limits (down to 1 KiB soft / 4 KiB hard) writes are refused all the time,
    /// often with the queue draining in the same poll, and zero-length frames (empty
    /// END_STREAM DATA, SETTINGS ACK) are refused too. Driven as h2 drives the wrapper (no
    /// retry of failed writes, no extra empty write), every refused frame is taken later and
    /// everything is delivered: properties (1)-(7) for every policy.
    #[test]
    fn refused_frames_are_taken_later_under_tight_limits(
        scn in scenario(),
        limits in prop::sample::select(vec![(8 * 1024, 32 * 1024), (1024, 4096)]),
    ) {
        for policy in Policy::ALL {
            let setup = Setup { limits: Some(limits), ..Setup::new(policy) };
            run_scenario(&scn, setup).map_err(TestCaseError::fail)?;
        }
    }

    /// Properties (1)-(7) with `FlushConfig::cork(false)`: a flush never holds a short
    /// record. Records packed or (as stock hyper writes) one frame per write.
    #[test]
    fn cork_off_delivers_exact_streams(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
        pack in any::<bool>(),
    ) {
        let setup = Setup { limits, cork: false, pack, ..Setup::new(policy) };
        run_scenario(&scn, setup).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// With `FlushConfig::cork(false)` and an always-writable transport, each flush h2 makes
    /// puts every frame the wrapper took completely on the socket. (Anticipation, which
    /// holds DATA for a few ms on its own terms, is off.)
    #[test]
    fn without_cork_each_flush_delivers_every_complete_frame(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
    ) {
        let setup = Setup { limits, cork: false, anticipate: false, ..Setup::new(policy) };
        run_flush_latency(&scn, setup).map_err(TestCaseError::fail)?;
    }

    /// With the default cork and an always-writable transport, a flush holds back at most one
    /// short record of bulk DATA, wakes the task, and the next flush sends it. (Anticipation
    /// is off, as above.)
    #[test]
    fn default_cork_holds_at_most_one_short_bulk_record_for_one_turn(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
    ) {
        let setup = Setup { limits, anticipate: false, ..Setup::new(policy) };
        run_flush_latency(&scn, setup).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------
// Deterministic tests
// ---------------------------------------------------------------------------------------

fn client_with_requests(requests: &[(u32, Option<&str>)]) -> Vec<u8> {
    let mut bytes = PREFACE.to_vec();
    settings_frame(0, &[]).encode_into(&mut bytes);
    for &(id, priority) in requests {
        Frame::new(
            HEADERS,
            END_HEADERS | END_STREAM,
            id,
            request_block(priority),
        )
        .encode_into(&mut bytes);
    }
    bytes
}

/// Offers one frame in a single `poll_write`, expecting it to be absorbed at once.
fn absorb_frame(h: &mut Harness, f: &Frame) -> Result<(), String> {
    let bytes = f.encode();
    match h.poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes))? {
        Poll::Ready(Ok(n)) if n == bytes.len() => Ok(()),
        other => Err(format!("{f:?} was not absorbed at once: {other:?}")),
    }
}

/// Property (8) setup: the client asked for streams 1 and 3 at `u=5, i` and stream 5 at
/// `u=0` (read before any write); the transport is blocked before h2's first write and every
/// frame is absorbed while it accepts nothing; then it opens (waking the task) and the
/// stream is flushed and shut down. With `stale_readiness` the blocked transport still says
/// it is writable, so the wrapper builds the first record at once (it cannot be sent); then
/// anticipation is off, or it would hold stream 1's DATA back from that record for as long
/// as stream 5's response has not begun and its request is less than 5 ms old.
struct Outcome {
    input: Vec<Frame>,
    out: Vec<Frame>,
    perm: Vec<usize>,
    stats: StatsSnapshot,
}

fn absorbed_while_blocked(stale_readiness: bool) -> Result<Outcome, String> {
    let client =
        client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=5, i")), (5, Some("u=0"))]);
    let mut config =
        FlushConfig::for_policy(Policy::Scheduled).announce_no_rfc7540_priorities(false);
    if stale_readiness {
        config = config.anticipate(None);
    }
    let mut h = Harness::new(config, Wire::open(Buffering::Off, client));
    h.read_all_client()?;
    h.wire.borrow_mut().stale_readiness = stale_readiness;
    h.set_blocked(true);
    let big = 16384;
    let input = vec![
        settings_frame(0, &[(3, 100), (4, 1 << 20)]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        Frame::new(HEADERS, END_HEADERS, 3, response_block(None, 0)),
        data(1, 0, big, false),
        data(3, 0, big, false),
        data(1, 1, big, false),
        data(3, 1, big, false),
        Frame::new(PING, 0, 0, [7; 8]),
        Frame::new(WINDOW_UPDATE, 0, 0, 65535u32.to_be_bytes()),
        Frame::new(HEADERS, END_HEADERS, 5, response_block(None, 0)),
        data(5, 0, 1000, false),
        data(1, 2, big, false),
        data(3, 2, big, false),
        data(5, 1, 1000, true),
        data(1, 3, big, true),
        data(3, 3, big, true),
    ];
    for f in &input {
        absorb_frame(&mut h, f)?;
    }
    if !h.output().is_empty() {
        return Err("the blocked transport accepted bytes".into());
    }
    let waiting_for_readiness = h.wire.borrow().ready_waker.is_some();
    if waiting_for_readiness == stale_readiness {
        return Err(format!(
            "the last write {} for write readiness",
            if stale_readiness {
                "waited (the readiness said Ready)"
            } else {
                "did not wait"
            }
        ));
    }
    h.set_blocked(false);
    h.settle()?;
    h.shutdown()?;
    let out = parse_frames(&h.output())?;
    let perm = match_frames(&input, &out)?;
    check_header_blocks(&out, &perm)?;
    check_settings_barriers(&out, &perm)?;
    Ok(Outcome {
        input,
        out,
        perm,
        stats: h.stats(),
    })
}

fn positions(out: &[Frame], pred: impl Fn(&Frame) -> bool) -> Vec<usize> {
    (0..out.len()).filter(|&p| pred(&out[p])).collect()
}

/// Property (8), late binding: the transport was blocked before h2's first write, so the
/// wrapper, waiting for write readiness, built no record; once it is writable every frame
/// absorbed meanwhile competes. PING and WINDOW_UPDATE leave before all DATA, the `u=0`
/// stream's DATA before all `u=5, i` DATA, header blocks keep their order, and
/// `data_frames_reordered` counts the overtaking.
#[test]
fn scheduled_sends_control_and_urgent_data_first_when_all_frames_were_absorbed() {
    let Outcome {
        input,
        out,
        perm,
        stats,
    } = absorbed_while_blocked(false).unwrap();
    let data = positions(&out, Frame::is_data);
    let first_data = data[0];
    for p in positions(&out, |f| matches!(f.kind, PING | WINDOW_UPDATE)) {
        assert!(
            p < first_data,
            "{:?} output at #{p}, after {:?} at #{first_data}; output order: {out:?}",
            out[p],
            out[first_data]
        );
    }
    let last_urgent = *positions(&out, |f| f.is_data() && f.stream == 5)
        .last()
        .unwrap();
    let first_bulk = positions(&out, |f| f.is_data() && f.stream != 5)[0];
    assert!(
        last_urgent < first_bulk,
        "u=0 DATA output at #{last_urgent} after u=5 DATA at #{first_bulk}; output order: {out:?}"
    );
    let blocks: Vec<u32> = out
        .iter()
        .filter(|f| f.kind == HEADERS)
        .map(|f| f.stream)
        .collect();
    assert_eq!(blocks, vec![1, 3, 5]);
    assert!(stats.data_frames_reordered > 0, "{stats:?}");
    assert_eq!(stats.queued_bytes, 0);
    assert_eq!(
        stats.bytes_written,
        input.iter().map(Frame::wire_len).sum::<usize>() as u64
    );
    assert_eq!(perm.len(), input.len());
}

/// Property (8) when the readiness went stale: the transport said it was writable when h2
/// first wrote, so the first record (SETTINGS, both HEADERS and the start of stream 1's first
/// DATA frame) was built in arrival order and is stuck; only that record is bound early.
/// Beyond it (its straddling DATA frame's tail necessarily follows), PING and WINDOW_UPDATE
/// leave before every other DATA frame, and the `u=0` DATA before every other `u=5, i` DATA.
#[test]
fn scheduled_binds_late_beyond_a_record_built_on_stale_readiness() {
    let Outcome {
        input,
        out,
        perm,
        stats,
    } = absorbed_while_blocked(true).unwrap();
    let data = positions(&out, Frame::is_data);
    let straddler = data[0];
    assert_eq!(
        (out[straddler].stream, out[straddler].payload.len()),
        (1, 16384)
    );
    let committed: usize = out[..=straddler].iter().map(Frame::wire_len).sum();
    assert!(
        committed - out[straddler].wire_len() < MAX_RECORD && committed > MAX_RECORD,
        "the first DATA frame must straddle the first record: {out:?}"
    );
    let rest = &data[1..];
    for p in positions(&out, |f| matches!(f.kind, PING | WINDOW_UPDATE)) {
        assert!(
            rest.iter().all(|&d| p < d),
            "{:?} output at #{p} behind DATA; output order: {out:?}",
            out[p]
        );
    }
    let urgent = positions(&out, |f| f.is_data() && f.stream == 5);
    let bulk_after: Vec<usize> = rest
        .iter()
        .copied()
        .filter(|&d| out[d].stream != 5)
        .collect();
    assert!(
        urgent.iter().all(|&u| bulk_after.iter().all(|&b| u < b)),
        "u=0 DATA behind u=5 DATA; output order: {out:?}"
    );
    let blocks: Vec<u32> = out
        .iter()
        .filter(|f| f.kind == HEADERS)
        .map(|f| f.stream)
        .collect();
    assert_eq!(blocks, vec![1, 3, 5]);
    assert!(stats.data_frames_reordered > 0, "{stats:?}");
    assert_eq!(stats.queued_bytes, 0);
    assert_eq!(
        stats.bytes_written,
        input.iter().map(Frame::wire_len).sum::<usize>() as u64
    );
    assert_eq!(perm.len(), input.len());
}

/// Anticipation (`scheduled`): while a request more urgent than the next DATA has been read
/// and its response has not begun, that DATA waits, the wrapper asking to be polled again
/// meanwhile, and it waits at most the bound after the request arrived.
///
/// The client asked for stream 1 at `u=5` and stream 3 at `u=0`; h2 writes stream 1's
/// response first. With a bound far away, stream 1's DATA stays queued across flushes (each
/// asks to be polled again) until stream 3's HEADERS arrive, and stream 3's DATA leaves
/// first. With a short bound and no response for stream 3, stream 1's DATA leaves once the
/// bound has passed.
#[test]
fn scheduled_anticipation_holds_bulk_data_until_the_urgent_response_begins_or_the_bound() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    let start = [
        settings_frame(0, &[]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 8000, true),
    ];
    let head_len = start[0].wire_len() + start[1].wire_len();

    // Held until the urgent response begins.
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::Scheduled)
            .announce_no_rfc7540_priorities(false)
            .anticipate(Some(Duration::from_secs(600))),
        Wire::open(Buffering::Reported, client.clone()),
    );
    h.read_all_client().unwrap();
    h.write_all(&encode_all(&start)).unwrap();
    for _ in 0..3 {
        h.flush().unwrap();
        assert!(
            h.last_poll_woke,
            "a flush holding DATA must ask to be polled again"
        );
        assert_eq!(h.output().len(), head_len, "stream 1's DATA must wait");
    }
    assert_eq!(h.stats().anticipation_holds, 1);
    let urgent = [
        Frame::new(HEADERS, END_HEADERS, 3, response_block(None, 0)),
        data(3, 0, 100, true),
    ];
    h.write_all(&encode_all(&urgent)).unwrap();
    h.settle().unwrap();
    h.shutdown().unwrap();
    let input: Vec<Frame> = start.iter().chain(&urgent).cloned().collect();
    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_header_blocks(&out, &perm).unwrap();
    let order: Vec<(u8, u32)> = out.iter().map(|f| (f.kind, f.stream)).collect();
    assert_eq!(order[2..], [(HEADERS, 3), (DATA, 3), (DATA, 1)], "{out:?}");
    assert!(h.stats().data_frames_reordered > 0);

    // Held at most the bound.
    let bound = Duration::from_millis(50);
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::Scheduled)
            .announce_no_rfc7540_priorities(false)
            .anticipate(Some(bound)),
        Wire::open(Buffering::Off, client),
    );
    let read_at = Instant::now();
    h.read_all_client().unwrap();
    h.write_all(&encode_all(&start)).unwrap();
    h.flush().unwrap();
    if read_at.elapsed() < bound {
        assert_eq!(h.output().len(), head_len, "stream 1's DATA must wait");
        assert!(h.last_poll_woke);
    }
    std::thread::sleep(bound.saturating_sub(read_at.elapsed()));
    h.settle().unwrap();
    assert_eq!(h.output(), encode_all(&start), "the bound has passed");
    h.shutdown().unwrap();
}

/// `poll_shutdown` delivers everything h2 wrote, also while anticipation holds DATA back for
/// an urgent response that will never begin (h2 closes the connection without answering it).
///
/// Regression: `poll_shutdown` once shut the transport down while anticipation still held
/// DATA; it now drains with anticipation off.
#[test]
fn shutdown_delivers_data_held_for_an_urgent_response() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::Scheduled)
            .announce_no_rfc7540_priorities(false)
            .anticipate(Some(Duration::from_secs(600))),
        Wire::open(Buffering::Off, client),
    );
    h.read_all_client().unwrap();
    let input = [
        settings_frame(0, &[]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 8000, true),
    ];
    h.write_all(&encode_all(&input)).unwrap();
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    assert_eq!(
        h.stats().queued_bytes,
        0,
        "poll_shutdown returned Ready with bytes queued; output: {out:?}"
    );
    match_frames(&input, &out).unwrap();
}

/// Past the soft limit, `scheduled` refuses more bulk DATA while only bulk is queued (the
/// write is `Pending`, nothing of it taken), still admits DATA of a stream more urgent than
/// the least urgent queued one, then admits bulk DATA again while more urgent DATA is queued
/// (refusing it would block h2, which interleaves streams, in front of the urgent stream's
/// next frames), and, the transport having been blocked before the first write, sends all
/// urgent DATA before any bulk DATA.
#[test]
fn scheduled_admits_more_urgent_data_past_the_soft_limit() {
    let client = client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=0"))]);
    let (soft, hard) = (40 * 1024, 128 * 1024);
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::Scheduled)
            .announce_no_rfc7540_priorities(false)
            .soft_limit(soft)
            .hard_limit(hard),
        Wire::open(Buffering::Off, client),
    );
    h.read_all_client().unwrap();
    h.set_blocked(true);
    let mut input = vec![
        settings_frame(0, &[]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        Frame::new(HEADERS, END_HEADERS, 3, response_block(None, 0)),
    ];
    for f in &input {
        absorb_frame(&mut h, f).unwrap();
    }
    // Bulk DATA up to the soft limit (each queued frame also counts 128 bytes of overhead).
    let mut k = 0;
    while h.stats().queued_bytes as usize + 128 * (input.len() + 1) + 4009 <= soft {
        let f = data(1, k, 4000, false);
        absorb_frame(&mut h, &f).unwrap();
        input.push(f);
        k += 1;
    }
    // Bulk DATA is refused past it while only bulk is queued ...
    let early = data(1, k, 4000, false).encode();
    let refused = h
        .poll_once("poll_write", |s, cx| s.poll_write(cx, &early))
        .unwrap();
    assert!(refused.is_pending(), "bulk DATA admitted: {refused:?}");
    // ... urgent DATA is admitted past it ...
    for j in 0..3 {
        let f = data(3, j, 4000, j == 2);
        absorb_frame(&mut h, &f).unwrap();
        input.push(f);
    }
    let queued = h.stats().queued_bytes;
    assert!(queued as usize > soft);
    // ... and bulk DATA again, while urgent DATA is queued, up to the hard limit.
    let bulk = data(1, k, 4000, true);
    let bytes = bulk.encode();
    let taken = h
        .poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes))
        .unwrap();
    assert!(
        matches!(taken, std::task::Poll::Ready(Ok(n)) if n == bytes.len()),
        "bulk DATA refused while urgent DATA is queued: {taken:?}"
    );
    assert_eq!(h.stats().queued_bytes, queued + bytes.len() as u64);
    input.push(bulk);
    h.set_blocked(false);
    h.settle().unwrap();
    h.shutdown().unwrap();

    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_header_blocks(&out, &perm).unwrap();
    let last_urgent = *positions(&out, |f| f.is_data() && f.stream == 3)
        .last()
        .unwrap();
    let first_bulk = positions(&out, |f| f.is_data() && f.stream == 1)[0];
    assert!(last_urgent < first_bulk, "{out:?}");
    let s = h.stats();
    assert!(s.data_frames_reordered > 0);
    assert!(s.queued_bytes_high_water as usize <= hard);
}

/// A write refused over the soft limit is `Pending` (nothing of it taken) while the queue
/// cannot drain, and is taken in the poll in which the queue drains completely.
///
/// In-order policy, 8 KiB soft limit: 8 KiB of DATA sit in the record being built. The next
/// DATA frame is refused; the wrapper pushes the short record out, the transport is blocked,
/// so the write is `Pending`. Once the transport is writable the next poll writes the record,
/// finds the queue empty, admits the frame and reports all of it written.
///
/// Regression: `poll_write_h2` once measured progress after its first drive, so a queue
/// drained in that poll looked like no progress and the write returned `Pending` with no
/// wake-up (the old "write path made no progress" case).
#[test]
fn refused_write_is_taken_in_the_poll_in_which_the_queue_drains() {
    let client = client_with_requests(&[(1, None)]);
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::EarlyFlush)
            .announce_no_rfc7540_priorities(false)
            .soft_limit(8 * 1024)
            .hard_limit(32 * 1024),
        Wire::open(Buffering::Off, client),
    );
    h.read_all_client().unwrap();
    let mut input = vec![
        settings_frame(0, &[]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 4000, false),
        data(1, 1, 4000, false),
    ];
    for f in &input {
        absorb_frame(&mut h, f).unwrap();
    }
    assert!(
        h.output().is_empty(),
        "a partial record waits for more frames"
    );
    let queued = h.stats().queued_bytes;
    assert_eq!(queued, 8037);
    h.set_blocked(true);
    let refused = data(1, 2, 4000, true);
    let bytes = refused.encode();
    input.push(refused);
    for _ in 0..2 {
        let poll = h
            .poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes))
            .unwrap();
        assert!(poll.is_pending(), "{poll:?}");
        assert!(h.output().is_empty());
        assert_eq!(
            h.stats().queued_bytes,
            queued,
            "nothing of the frame is taken"
        );
    }
    // The transport becomes writable and takes everything: the frame is taken in that poll.
    h.set_blocked(false);
    let taken = h
        .poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes))
        .unwrap();
    assert!(
        matches!(taken, Poll::Ready(Ok(n)) if n == bytes.len()),
        "{taken:?}"
    );
    assert_eq!(h.output().len(), queued as usize);
    h.settle().unwrap();
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_in_order(&out, &perm).unwrap();
}

/// A zero-length frame refused at the limit stays with the writer and is delivered.
///
/// 8187 bytes wait in the record being built, 133 below the soft limit of 8 KiB + 128 (the
/// overhead the queue counts for one frame), so the empty frame's 9 + 128 do not fit. h2 writes the empty END_STREAM DATA frame while the transport is blocked: it is
/// refused, and the write is `Pending` with none of its 9 bytes taken (were they reported
/// written, h2 would consider the frame sent while it waits in the wrapper, and drop it at
/// shutdown). h2's flush returns `Ready` without anything reaching the transport. When the
/// transport is writable, a flush drains the queue, h2's retry is taken and the frame
/// reaches the wire. (Retrying before that flush hits the lost wake-up of
/// `refused_write_is_taken_in_the_poll_in_which_the_queue_drains`.)
#[test]
fn refused_zero_length_frame_stays_with_the_writer_and_is_delivered_on_retry() {
    let client = client_with_requests(&[(1, None)]);
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::EarlyFlush)
            .announce_no_rfc7540_priorities(false)
            .soft_limit(8 * 1024 + 128)
            .hard_limit(32 * 1024),
        Wire::open(Buffering::Off, client),
    );
    h.read_all_client().unwrap();
    let mut input = vec![
        settings_frame(0, &[]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 4000, false),
        data(1, 1, 4150, false),
    ];
    // 19 + 4009 + 4159 = 8187 bytes wait in the record being built: just under the limit.
    for f in &input {
        absorb_frame(&mut h, f).unwrap();
    }
    assert_eq!(h.stats().queued_bytes, 8187);
    h.set_blocked(true);
    let end = data(1, 2, 0, true);
    let bytes = end.encode();
    input.push(end);
    let refused = h
        .poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes))
        .unwrap();
    assert!(refused.is_pending(), "{refused:?}");
    assert_eq!(h.stats().queued_bytes, 8187);
    // h2's flush is Ready although the transport is Pending: nothing reached it.
    h.flush().unwrap();
    assert!(h.output().is_empty());
    h.set_blocked(false);
    h.settle().unwrap();
    assert_eq!(h.output().len(), 8187);
    let retried = h
        .poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes))
        .unwrap();
    assert!(
        matches!(retried, Poll::Ready(Ok(HEADER_LEN))),
        "{retried:?}"
    );
    h.settle().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    assert_eq!(
        out.last(),
        input.last(),
        "the settled flush must deliver the END_STREAM frame: {out:?}"
    );
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_in_order(&out, &perm).unwrap();
}

/// Writes `frames` one `poll_write` at a time into a blocked transport until the wrapper
/// refuses (returns `Pending`); returns how many frames, and bytes of the refused one, it took.
fn absorb_until_refused(h: &mut Harness, frames: &[Frame]) -> (usize, usize) {
    for (i, f) in frames.iter().enumerate() {
        let bytes = f.encode();
        let mut taken = 0;
        while taken < bytes.len() {
            match h
                .poll_once("poll_write", |s, cx| s.poll_write(cx, &bytes[taken..]))
                .unwrap()
            {
                Poll::Ready(Ok(n)) => taken += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => return (i, taken),
            }
        }
    }
    (frames.len(), 0)
}

/// The hard limit bounds what is queued, header blocks counted: with the transport blocked,
/// a 28 KiB header block written as 1 KiB frames on top of 8 KiB of queued DATA is taken
/// whole once begun (it cannot leave until complete, so refusing a CONTINUATION could never
/// make room), `queued_bytes` counts it while it is open, and the DATA frame after it is
/// refused because the queue is past the hard limit. Once the transport drains, everything
/// is delivered; the high-water mark stays within the hard limit plus one header block.
#[test]
fn hard_limit_counts_an_unfinished_header_block() {
    // The soft limit leaves room for the per-frame overhead of the first DATA frames.
    let (soft, hard) = (8 * 1024 + 512, 32 * 1024);
    let client = client_with_requests(&[(1, None), (3, None)]);
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::Scheduled)
            .announce_no_rfc7540_priorities(false)
            .soft_limit(soft)
            .hard_limit(hard),
        Wire::open(Buffering::Off, client),
    );
    h.read_all_client().unwrap();
    h.set_blocked(true);
    let mut input = vec![
        settings_frame(0, &[]),
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 4000, false),
        data(1, 1, 4000, false),
    ];
    let block = response_block(None, 28 * 1024);
    let parts = block.len().div_ceil(1000);
    input.extend(header_block(3, &block, parts, false));
    input.push(data(3, 0, 10, true));
    input.push(data(1, 2, 10, true));
    let block_len: usize = input[4..4 + parts].iter().map(Frame::wire_len).sum();
    assert!(block_len < hard && 8037 + block_len > hard);

    let (done, partial) = absorb_until_refused(&mut h, &input);
    let s = h.stats();
    assert_eq!(
        (done, partial),
        (4 + parts, 0),
        "the whole block is taken, the DATA after it refused ({done} frames taken)"
    );
    let taken: usize = input[..done].iter().map(Frame::wire_len).sum();
    assert_eq!(
        s.queued_bytes as usize, taken,
        "queued_bytes counts the block"
    );
    assert!(taken > hard, "{taken}");

    h.set_blocked(false);
    h.write_all(&encode_all(&input[done..])).unwrap();
    h.settle().unwrap();
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_header_blocks(&out, &perm).unwrap();
    let s = h.stats();
    assert!(
        s.queued_bytes_high_water as usize <= hard + block_len,
        "queued_bytes_high_water = {} > hard limit {hard} + block {block_len}",
        s.queued_bytes_high_water
    );
}

/// A header block larger than the hard limit must still get through (h2 writes a block's
/// frames back to back and cannot do otherwise; the response headers are the server's).
///
/// Regression: admission once refused a CONTINUATION when only the open block was queued,
/// which could never drain: h2's task slept forever. A block already begun is now taken whole,
/// bounding the queue by the hard limit plus one header block.
#[test]
fn header_block_larger_than_the_hard_limit_is_delivered() {
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::Scheduled)
            .announce_no_rfc7540_priorities(false)
            .soft_limit(1024)
            .hard_limit(4096),
        Wire::open(Buffering::Off, client_with_requests(&[(1, None)])),
    );
    h.read_all_client().unwrap();
    let block = response_block(None, 5000);
    let mut input = vec![settings_frame(0, &[])];
    input.extend(header_block(1, &block, 6, false));
    input.push(data(1, 0, 10, true));
    // A hang is an error from `write_all` (Pending without a wake-up); a spin would panic
    // there (the harness counts transport calls per poll).
    h.write_all(&encode_all(&input)).unwrap();
    h.settle().unwrap();
    h.shutdown().unwrap();
    let out = parse_frames(&h.output()).unwrap();
    let perm = match_frames(&input, &out).unwrap();
    check_header_blocks(&out, &perm).unwrap();
}

/// An urgent small DATA frame ends its record, and the record is flushed at once, here with
/// a transport that reports its buffered output (as rustls does).
#[test]
fn urgent_small_data_ends_its_record_and_is_flushed() {
    let mut w = Wire::open(
        Buffering::Reported,
        client_with_requests(&[(1, Some("u=0")), (3, None)]),
    );
    w.record_events = true;
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::EarlyFlush).announce_no_rfc7540_priorities(false),
        w,
    );
    h.read_all_client().unwrap();
    h.write_all(&settings_frame(0, &[]).encode()).unwrap();
    h.flush().unwrap();
    let burst = encode_all(&[
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 100, true),
        Frame::new(HEADERS, END_HEADERS, 3, response_block(None, 0)),
        data(3, 0, 100, false),
    ]);
    h.write_all(&burst).unwrap();
    // SETTINGS (empty), then the record cut right after stream 1's DATA.
    let urgent_end = HEADER_LEN + (HEADER_LEN + 1) + (HEADER_LEN + 100);
    let w = h.wire.borrow();
    assert_eq!(
        w.accepted.len(),
        urgent_end,
        "the record must end right after the urgent DATA frame, the rest waits for more"
    );
    assert_eq!(
        w.flushed,
        w.accepted.len(),
        "the urgent record was not flushed"
    );
    assert_eq!(w.event_summary(), (urgent_end, Some(urgent_end)));
    drop(w);
    assert_eq!(h.stats().early_cuts, 1);
    h.settle().unwrap();
    h.shutdown().unwrap();
    assert_eq!(h.output().len(), HEADER_LEN + burst.len());
}

/// The urgent cut flushes the record it ends after writing it, also through a transport
/// that buffers without saying so (`has_buffered_output` left at the trait's default), where
/// nothing else would flush it: the transport sees the cut record written, then a flush
/// covering all of it, within the write that completed the urgent frame.
#[test]
fn urgent_cut_record_is_flushed_after_it_is_written() {
    let mut w = Wire::open(Buffering::Silent, client_with_requests(&[(1, Some("u=0"))]));
    w.record_events = true;
    let mut h = Harness::new(
        FlushConfig::for_policy(Policy::EarlyFlush).announce_no_rfc7540_priorities(false),
        w,
    );
    h.read_all_client().unwrap();
    h.write_all(&settings_frame(0, &[]).encode()).unwrap();
    h.flush().unwrap();
    let settings_events = vec![
        Event::Write {
            from: 0,
            to: HEADER_LEN,
        },
        Event::Flush {
            flushed: HEADER_LEN,
        },
    ];
    assert_eq!(h.wire.borrow().events, settings_events);
    h.write_all(&encode_all(&[
        Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
        data(1, 0, 100, true),
    ]))
    .unwrap();
    assert_eq!(h.stats().early_cuts, 1);
    let w = h.wire.borrow();
    let end = 3 * HEADER_LEN + 1 + 100;
    assert_eq!(w.accepted.len(), end);
    assert_eq!(
        w.events[settings_events.len()..],
        [
            Event::Write {
                from: HEADER_LEN,
                to: end
            },
            Event::Flush { flushed: end }
        ],
        "the cut record must be written, then flushed; transport events: {:?}",
        w.events
    );
}

/// The in-order policies under the same blocked start keep h2's order exactly.
#[test]
fn in_order_policies_keep_h2_order_when_all_frames_were_absorbed() {
    for policy in [Policy::EarlyFlush, Policy::Dynamic] {
        let client = client_with_requests(&[(1, Some("u=5, i")), (3, Some("u=0"))]);
        let mut h = Harness::new(
            FlushConfig::for_policy(policy).announce_no_rfc7540_priorities(false),
            Wire::open(Buffering::Reported, client),
        );
        h.read_all_client().unwrap();
        h.set_blocked(true);
        let input = vec![
            settings_frame(0, &[]),
            Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
            data(1, 0, 16384, false),
            Frame::new(PING, 0, 0, [1; 8]),
            Frame::new(HEADERS, END_HEADERS, 3, response_block(Some("u=0"), 0)),
            data(3, 0, 500, true),
            data(1, 1, 16384, true),
        ];
        for f in &input {
            absorb_frame(&mut h, f).unwrap();
        }
        h.set_blocked(false);
        h.settle().unwrap();
        h.shutdown().unwrap();
        let out = parse_frames(&h.output()).unwrap();
        let perm = match_frames(&input, &out).unwrap();
        check_in_order(&out, &perm).unwrap();
        assert_eq!(h.stats().data_frames_reordered, 0);
    }
}

/// A DATA frame larger than the hard limit and than 1 MiB (a client may allow frames of up
/// to 16 MiB) is never held whole: it is written through in pieces once everything before
/// it is out, and nothing else comes between its pieces. The queue's accounted memory stays
/// within the hard limit plus a piece, under every policy, with partial and refused writes.
#[test]
fn frames_larger_than_the_hard_limit_are_written_through_in_pieces() {
    let client = client_with_requests(&[(1, Some("u=5")), (3, Some("u=0"))]);
    for policy in Policy::ALL {
        let mut h = Harness::new(
            FlushConfig::for_policy(policy).announce_no_rfc7540_priorities(false),
            Wire::new(
                vec![Step::Accept(7000), Step::Pending, Step::Accept(usize::MAX)],
                Buffering::Off,
                client.clone(),
            ),
        );
        h.read_all_client().unwrap();
        let input = vec![
            settings_frame(0, &[]),
            Frame::new(HEADERS, END_HEADERS, 1, response_block(None, 0)),
            data(1, 0, 3 << 20, false),
            Frame::new(HEADERS, END_HEADERS, 3, response_block(None, 0)),
            data(3, 0, 100, true),
            data(1, 1, (2 << 20) + 5, true),
        ];
        let bytes = encode_all(&input);
        for chunk in bytes.chunks(50_000) {
            h.write_all(chunk).unwrap();
            h.flush().unwrap();
        }
        h.settle().unwrap();
        let out = parse_frames(&h.output()).unwrap();
        let perm = match_frames(&input, &out).unwrap();
        check_header_blocks(&out, &perm).unwrap();
        check_control_not_overtaken(&out, &perm).unwrap();
        let s = h.stats();
        assert_eq!(s.queued_bytes, 0, "{policy}");
        assert!(
            s.queued_memory_high_water <= (1 << 20) + 2 * (16384 + 128),
            "{policy}: {} bytes accounted at the peak",
            s.queued_memory_high_water
        );
        assert!(s.queued_bytes_high_water < 1 << 20, "{policy}");
    }
}
