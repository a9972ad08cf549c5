//! The logic of the `read_observer` and `write_pipeline` fuzz targets, shared with
//! `tls-flush/tests/fuzz_regressions.rs`, which includes this file with
//! `#[path = "../../fuzz/src/harness.rs"] mod harness;` so that CI replays the regression
//! inputs through exactly the checks the fuzzers run, on stable Rust.
//!
//! It therefore depends only on what `tls-flush`'s tests already have: `std`, `tokio`'s I/O
//! traits and `tls_flush`'s public API. The fuzz input is decoded by hand ([`Input`]): every
//! read past the end yields zeros, so every byte string is a valid case and the all-zero
//! tail means "defaults".
//!
//! Entry points: [`run_write_pipeline`] and [`run_read_observer`] return `Err(description)`
//! when an invariant is violated (the fuzz targets panic with it) and panic themselves only
//! where the wrapper panicked or livelocked.
//!
//! Borrowed from `tls-flush/tests/pipeline_props.rs`: the fault-injecting transport, the
//! wake-up bookkeeping (a `Pending` must come with a wake-up), the livelock detector and the
//! checks on the recorded output.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
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

use tls_flush::{FlushConfig, FlushStream, Policy, RecordSizing, StatsSnapshot, Transport};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

// ---------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const PRIORITY_UPDATE: u8 = 0x10;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const HEADER_LEN: usize = 9;
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_NO_RFC7540_PRIORITIES = 1, as the wrapper appends it to the first SETTINGS.
pub const NO_RFC7540_PRIORITIES: [u8; 6] = [0, 9, 0, 0, 0, 1];

const DEFAULT_HARD_LIMIT: usize = 1024 * 1024;
const MAX_RECORD: usize = 16384;
/// `FlushConfig`'s default `max_early_updates` and its (fixed) bound on tracked streams.
const DEFAULT_MAX_EARLY_UPDATES: usize = 128;
const MAX_TRACKED_STREAMS: usize = 1024;
/// What the read observer copies at most (`read_observer.rs`).
const OBSERVER_MAX_HEADER_BLOCK: usize = 64 * 1024;
const OBSERVER_MAX_SMALL_PAYLOAD: usize = 4 + 1024;
/// The observer's cap on one block's decoded `priority` lines.
const OBSERVER_MAX_PRIORITY_VALUE: usize = 1024;

/// One wrapper poll making this many transport calls without progress is a livelock.
const LIVELOCK_CALLS: usize = 100_000;
/// Polls without progress (and time) after which a pipeline is considered stuck.
const MAX_PENDING_POLLS: usize = 10_000;
const STALL_TIME: Duration = Duration::from_millis(50);

/// Caps that keep one fuzz case fast.
const MAX_FRAMES: usize = 128;
const MAX_INPUT_BYTES: usize = 128 * 1024;

/// Stream ids the generators pick from: collisions between frames are what matters.
const STREAM_IDS: [u32; 10] = [1, 3, 5, 7, 9, 11, 13, 2, 0x7fff_ffff, 0];

/// `priority` field values, valid and not.
const PRIORITY_VALUES: [&str; 12] = [
    "u=0", "u=1", "u=2, i", "u=3", "u=5, i", "u=6, i", "u=7", "i", "u=9", "u=0;x", "?", "",
];

// ---------------------------------------------------------------------------------------
// Input decoding
// ---------------------------------------------------------------------------------------

/// Reads a fuzz input front to back; past the end every read yields zeros.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn remaining(&self) -> usize {
        self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A number in `0..n` (`0` when `n <= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => usize::from(self.u8()) % n,
            257..=65536 => usize::from(self.u16()) % n,
            _ => self.u32() as usize % n,
        }
    }

    /// Up to `n` raw bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Up to `max - 1` raw bytes, the count drawn from the input.
    pub fn bytes_upto(&mut self, max: usize) -> &'a [u8] {
        let n = self.below(max);
        self.bytes(n)
    }

    /// Everything that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// A size drawn from a few classes: tiny, small, up to a record, beyond a record.
    pub fn size(&mut self) -> usize {
        match self.u8() % 8 {
            0 => 1,
            1 | 2 => 1 + self.below(16),
            3 | 4 => 1 + self.below(2048),
            5 | 6 => 1 + self.below(40_000),
            _ => usize::MAX,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------

/// One HTTP/2 frame with its payload; `raw_stream` keeps the reserved bit as written.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame {
    pub raw_stream: u32,
    pub kind: u8,
    pub flags: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(kind: u8, flags: u8, stream: u32, payload: impl Into<Vec<u8>>) -> Self {
        Frame {
            raw_stream: stream,
            kind,
            flags,
            payload: payload.into(),
        }
    }

    /// The stream id, reserved bit cleared.
    pub fn stream(&self) -> u32 {
        self.raw_stream & 0x7fff_ffff
    }

    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let len = u32::try_from(self.payload.len()).expect("small frame");
        assert!(len < 1 << 24, "frame payload too long");
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.raw_stream.to_be_bytes());
        out.extend_from_slice(&self.payload);
    }

    pub fn starts_header_block(&self) -> bool {
        matches!(self.kind, HEADERS | PUSH_PROMISE)
    }

    pub fn is_header_frame(&self) -> bool {
        matches!(self.kind, HEADERS | PUSH_PROMISE | CONTINUATION)
    }

    pub fn end_headers(&self) -> bool {
        self.flags & END_HEADERS != 0
    }

    pub fn is_data(&self) -> bool {
        self.kind == DATA
    }

    pub fn is_settings(&self) -> bool {
        self.kind == SETTINGS
    }

    /// END_STREAM on DATA/HEADERS, or RST_STREAM (the write side closes such streams).
    pub fn ends_stream(&self) -> bool {
        (matches!(self.kind, DATA | HEADERS) && self.flags & END_STREAM != 0)
            || self.kind == RST_STREAM
    }
}

/// Frames are printed without their payloads, so that failures stay readable.
impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DATA => "DATA",
            HEADERS => "HEADERS",
            PRIORITY => "PRIORITY",
            RST_STREAM => "RST_STREAM",
            SETTINGS => "SETTINGS",
            PUSH_PROMISE => "PUSH_PROMISE",
            PING => "PING",
            GOAWAY => "GOAWAY",
            WINDOW_UPDATE => "WINDOW_UPDATE",
            CONTINUATION => "CONTINUATION",
            PRIORITY_UPDATE => "PRIORITY_UPDATE",
            _ => "UNKNOWN",
        };
        write!(
            f,
            "{kind}[{:#x}](s={}{}, flags={:#x}, len={})",
            self.kind,
            self.stream(),
            if self.raw_stream & 0x8000_0000 != 0 {
                "+R"
            } else {
                ""
            },
            self.flags,
            self.payload.len()
        )
    }
}

pub fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frames.iter().map(Frame::wire_len).sum());
    for f in frames {
        f.encode_into(&mut out);
    }
    out
}

/// Parses `bytes` as whole frames; returns them and the length of an incomplete tail.
pub fn parse_frames_lenient(bytes: &[u8]) -> (Vec<Frame>, usize) {
    let mut frames = Vec::new();
    let mut rest = bytes;
    while rest.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < HEADER_LEN + len {
            break;
        }
        let raw_stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        frames.push(Frame::new(
            rest[3],
            rest[4],
            raw_stream,
            &rest[HEADER_LEN..HEADER_LEN + len],
        ));
        rest = &rest[HEADER_LEN + len..];
    }
    (frames, rest.len())
}

/// Parses `bytes` as a sequence of whole frames; anything left over is an error.
pub fn parse_frames(bytes: &[u8]) -> Result<Vec<Frame>, String> {
    let (frames, tail) = parse_frames_lenient(bytes);
    if tail != 0 {
        return Err(format!(
            "output ends with {tail} bytes of an incomplete frame after {} whole frames",
            frames.len()
        ));
    }
    Ok(frames)
}

// ---------------------------------------------------------------------------------------
// HPACK helpers (static-table indices and literals)
// ---------------------------------------------------------------------------------------

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the flag bits.
pub fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// An HPACK string literal without Huffman coding (RFC 7541 §5.2).
pub fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A literal header field with a literal name: `0x00` without indexing, `0x40` with
/// incremental indexing (it then enters the dynamic table, on both sides).
pub fn literal(out: &mut Vec<u8>, indexing: bool, name: &[u8], value: &[u8]) {
    out.push(if indexing { 0x40 } else { 0x00 });
    hpack_string(out, name);
    hpack_string(out, value);
}

/// A request header block: `:method GET`, `:scheme https`, `:path /`, optional `priority`.
pub fn request_block(priority: Option<&[u8]>) -> Vec<u8> {
    let mut block = vec![0x82, 0x87, 0x84];
    if let Some(p) = priority {
        literal(&mut block, false, b"priority", p);
    }
    block
}

// ---------------------------------------------------------------------------------------
// Memory accounting
// ---------------------------------------------------------------------------------------

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

/// A global allocator that counts this thread's live heap bytes, for the memory bounds.
/// Install it with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`; without
/// it the memory checks are skipped.
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the same arguments; the bookkeeping only
// touches const-initialised thread-local `Cell`s, which neither allocate nor panic.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// This thread's live heap bytes and resets the peak to it; `None` without
/// [`CountingAlloc`].
fn memory_mark() -> Option<isize> {
    let before = LIVE.with(Cell::get);
    let probe = std::hint::black_box(vec![0u8; 64]);
    let tracking = LIVE.with(Cell::get) != before;
    drop(probe);
    if !tracking {
        return None;
    }
    let live = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(live));
    Some(live)
}

fn memory_peak() -> isize {
    PEAK.with(Cell::get)
}

fn memory_live() -> isize {
    LIVE.with(Cell::get)
}

// ---------------------------------------------------------------------------------------
// The fault-injecting transport
// ---------------------------------------------------------------------------------------

/// What the transport does on its next `poll_write` / `poll_flush` / `poll_shutdown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `Pending`, after waking the task.
    Pending,
    /// Accepts up to this many bytes (a write) or flushes up to this many (a flush).
    Accept(usize),
    /// The socket fills: this call and every later write, flush, shutdown and
    /// `poll_write_ready` are `Pending` (the waker kept, not woken) until the harness
    /// unblocks it, as the reactor would once the socket drains.
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
    /// Accepted bytes wait for `poll_flush`, `has_buffered_output()` stays `false`.
    Silent,
}

/// How the transport hands the client's bytes to `poll_read`.
#[derive(Clone, Debug, Default)]
pub struct ReadPlan {
    /// Chunk sizes, cycled; `0` means `Pending` (after waking the task).
    pub chunks: Vec<usize>,
    /// At the end of the client's bytes: `true` for EOF (`Ready` with nothing), else
    /// `Pending`.
    pub eof: bool,
}

/// The transport's state, shared with the harness while the `FlushStream` owns it.
#[derive(Debug)]
pub struct Wire {
    schedule: Vec<Step>,
    cursor: usize,
    blocked: bool,
    stale_readiness: bool,
    /// The waker a blocked call kept; woken when the harness unblocks the transport.
    ready_waker: Option<Waker>,
    buffering: Buffering,
    /// Fail the write call with this index (counting from 0) with `BrokenPipe`.
    fail_write_at: Option<usize>,
    write_calls: usize,
    /// The injected write failure happened.
    pub failed: bool,
    /// Every byte accepted by `poll_write`, in order.
    pub accepted: Vec<u8>,
    /// `accepted[..flushed]` has reached the socket.
    pub flushed: usize,
    client: Vec<u8>,
    /// Report ALPN `h2`, as a TLS stream that negotiated HTTP/2 does; without it the
    /// wrapper decides from the first bytes (plain TCP).
    pub alpn_h2: bool,
    read_pos: usize,
    read_plan: ReadPlan,
    read_cursor: usize,
    pub shut_down: bool,
    calls_without_progress: Cell<usize>,
    progress_mark: Cell<usize>,
}

impl Wire {
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
            ready_waker: None,
            buffering,
            fail_write_at: None,
            write_calls: 0,
            failed: false,
            accepted: Vec::new(),
            flushed: 0,
            client,
            alpn_h2: false,
            read_pos: 0,
            read_plan: ReadPlan::default(),
            read_cursor: 0,
            shut_down: false,
            calls_without_progress: Cell::new(0),
            progress_mark: Cell::new(0),
        }
    }

    /// Counts one transport call; panics on a livelock (one poll of the wrapper making
    /// [`LIVELOCK_CALLS`] calls without the transport making progress).
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

    /// Blocked: keeps the waker and says `Pending`.
    fn park(&mut self, cx: &mut Context<'_>) {
        self.ready_waker = Some(cx.waker().clone());
    }

    /// The next step: `Some(n)` to accept `n`, `None` for `Pending` (waker handled).
    fn next(&mut self, cx: &mut Context<'_>) -> Option<usize> {
        if self.blocked {
            self.park(cx);
            return None;
        }
        let step = self.schedule[self.cursor % self.schedule.len()];
        self.cursor += 1;
        match step {
            Step::Accept(n) if n > 0 => Some(n),
            Step::Block | Step::BlockStale => {
                self.blocked = true;
                self.stale_readiness = step == Step::BlockStale;
                self.park(cx);
                None
            }
            _ => {
                cx.waker().wake_by_ref();
                None
            }
        }
    }

    pub fn client_remaining(&self) -> usize {
        self.client.len() - self.read_pos
    }

    /// Grows whenever the transport makes progress.
    fn progress(&self) -> usize {
        self.accepted.len() + self.flushed + self.read_pos + usize::from(self.shut_down)
    }

    /// One flush step; `Ready` once everything accepted is on the socket. With nothing to
    /// flush it is `Ready` at once without using a step, as TCP and rustls are.
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
        Poll::Ready(Ok(()))
    }
}

/// A fault-injecting transport: see [`Wire`].
#[derive(Debug)]
pub struct FaultyTransport {
    wire: Rc<RefCell<Wire>>,
}

impl AsyncRead for FaultyTransport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut w = self.wire.borrow_mut();
        if w.client_remaining() == 0 {
            if w.read_plan.eof {
                return Poll::Ready(Ok(()));
            }
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let chunk = if w.read_plan.chunks.is_empty() {
            usize::MAX
        } else {
            let c = w.read_plan.chunks[w.read_cursor % w.read_plan.chunks.len()];
            w.read_cursor += 1;
            c
        };
        if chunk == 0 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = w.client_remaining().min(buf.remaining()).min(chunk);
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
        let call = w.write_calls;
        w.write_calls += 1;
        if w.fail_write_at == Some(call) {
            w.failed = true;
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let Some(n) = w.next(cx) else {
            return Poll::Pending;
        };
        let n = n.min(buf.len());
        w.accepted.extend_from_slice(&buf[..n]);
        if w.buffering == Buffering::Off {
            w.flushed = w.accepted.len();
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
    fn alpn_protocol(&self) -> Option<&[u8]> {
        self.wire.borrow().alpn_h2.then_some(b"h2")
    }

    fn has_buffered_output(&self) -> bool {
        let w = self.wire.borrow();
        w.tick("has_buffered_output");
        w.buffering == Buffering::Reported && w.flushed < w.accepted.len()
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut w = self.wire.borrow_mut();
        w.tick("poll_write_ready");
        if w.blocked && !w.stale_readiness {
            w.park(cx);
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

/// Counts polls without transport progress, to tell a stuck pipeline from one that waits
/// (re-polling itself) for a bounded time.
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

/// The harness's view of a poll: what it returned and whether it asked to be polled again.
struct Polled<T> {
    result: Poll<T>,
    /// The task was woken, or a blocked transport kept the waker (now woken: the harness
    /// plays the reactor and unblocks the transport at once).
    again: bool,
}

pub struct Harness {
    stream: Stream,
    pub wire: Rc<RefCell<Wire>>,
    wakes: Arc<WakeCounter>,
    waker: Waker,
}

impl Harness {
    pub fn new(config: FlushConfig, wire: Wire) -> Self {
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
        }
    }

    /// Polls once. A `Pending` must come with a wake-up (the task woken, or a waker kept by
    /// the blocked transport), else a real executor would never poll again.
    fn poll_once<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(Pin<&mut Stream>, &mut Context<'_>) -> Poll<T>,
    ) -> Result<Polled<T>, String> {
        let mut cx = Context::from_waker(&self.waker);
        {
            let w = self.wire.borrow();
            w.calls_without_progress.set(0);
        }
        let before = self.wakes.0.load(Relaxed);
        let result = f(Pin::new(&mut self.stream), &mut cx);
        let woke = self.wakes.0.load(Relaxed) != before;
        let parked = {
            let mut w = self.wire.borrow_mut();
            w.blocked = false;
            w.stale_readiness = false;
            w.ready_waker.take()
        };
        if result.is_pending() && !woke && parked.is_none() {
            let queued = self.stats().queued_bytes;
            return Err(format!(
                "{what} returned Pending without a wake-up registered ({queued} bytes queued \
                 in the wrapper): the task would hang"
            ));
        }
        let again = woke || parked.is_some();
        if let Some(waker) = parked {
            waker.wake();
        }
        Ok(Polled { result, again })
    }

    /// Polls until `Ready`, as an executor woken by the transport would.
    fn poll_ready<T>(
        &mut self,
        what: &str,
        mut f: impl FnMut(Pin<&mut Stream>, &mut Context<'_>) -> Poll<T>,
    ) -> Result<T, String> {
        let mut stall = Stall::new(&self.wire);
        loop {
            if let Poll::Ready(v) = self.poll_once(what, &mut f)?.result {
                return Ok(v);
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
    pub fn write(&mut self, bufs: &[&[u8]]) -> Result<io::Result<usize>, String> {
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

    /// Writes all of `bytes` with plain `poll_write`, re-offering the rest.
    pub fn write_all(&mut self, mut bytes: &[u8]) -> Result<io::Result<()>, String> {
        while !bytes.is_empty() {
            match self.write(&[bytes])? {
                Ok(n) => bytes = &bytes[n..],
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    /// One flush, as h2 makes it after writing (in HTTP/2 mode it is `Ready` at once even
    /// when the transport is `Pending`).
    pub fn flush(&mut self) -> Result<io::Result<()>, String> {
        self.poll_ready("poll_flush", |s, cx| s.poll_flush(cx))
    }

    /// Polls `poll_flush` the way an executor polls h2's task, which flushes on every poll:
    /// again whenever the last poll asked for it, until a poll returns `Ready(Ok)` without
    /// asking for another.
    pub fn settle(&mut self) -> Result<io::Result<()>, String> {
        let mut stall = Stall::new(&self.wire);
        loop {
            let polled = self.poll_once("poll_flush", |s, cx| s.poll_flush(cx))?;
            match polled.result {
                Poll::Ready(Err(e)) => return Ok(Err(e)),
                Poll::Ready(Ok(())) if !polled.again => return Ok(Ok(())),
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

    pub fn shutdown(&mut self) -> Result<io::Result<()>, String> {
        self.poll_ready("poll_shutdown", |s, cx| s.poll_shutdown(cx))
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
        match polled.result {
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

    /// Reads at most `max` of the client's bytes, polling through `Pending`s.
    pub fn read(&mut self, max: usize) -> Result<Vec<u8>, String> {
        let mut stall = Stall::new(&self.wire);
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
}

// ---------------------------------------------------------------------------------------
// Checks on the recorded output
// ---------------------------------------------------------------------------------------

/// The frames the wrapper must output for `input`: the same frames, with
/// SETTINGS_NO_RFC7540_PRIORITIES appended to the first non-ACK SETTINGS when announcing and
/// that frame does not carry it yet.
pub fn expected_frames(input: &[Frame], announce: bool) -> Vec<Frame> {
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
                // The grown frame's header is re-encoded, which clears the reserved bit
                // (RFC 9113 §4.1: it must be unset when sending; h2 never sets it).
                first.raw_stream &= 0x7fff_ffff;
            }
        }
    }
    out
}

/// Maps each output frame to its index in `expected`, checking that every stream's frames
/// (stream 0 included) come out in exactly the written order with identical bytes, and that
/// nothing is lost, duplicated or invented.
pub fn match_frames(expected: &[Frame], out: &[Frame]) -> Result<Vec<usize>, String> {
    let mut by_stream: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, f) in expected.iter().enumerate() {
        by_stream.entry(f.stream()).or_default().push(i);
    }
    let mut cursor: HashMap<u32, usize> = HashMap::new();
    let mut perm = Vec::with_capacity(out.len());
    for (pos, f) in out.iter().enumerate() {
        let Some(list) = by_stream.get(&f.stream()) else {
            return Err(format!(
                "output frame #{pos} {f:?} is on a stream never written"
            ));
        };
        let k = cursor.entry(f.stream()).or_default();
        let Some(&idx) = list.get(*k) else {
            return Err(format!(
                "output frame #{pos} {f:?} is extra: stream {} had only {} frames \
                 (duplicated bytes?)",
                f.stream(),
                list.len()
            ));
        };
        if expected[idx] != *f {
            let same_elsewhere = list.iter().any(|&j| expected[j] == *f);
            return Err(format!(
                "stream {}: its frame #{} should be {:?} (written as frame #{idx}) but output \
                 frame #{pos} is {f:?}{}",
                f.stream(),
                *k,
                expected[idx],
                if same_elsewhere {
                    " (a frame of this stream out of order)"
                } else {
                    " (bytes differ from every frame of this stream)"
                }
            ));
        }
        *k += 1;
        perm.push(idx);
    }
    let mut streams: Vec<_> = by_stream.iter().collect();
    streams.sort();
    for (stream, list) in streams {
        let got = cursor.get(stream).copied().unwrap_or(0);
        if got != list.len() {
            return Err(format!(
                "stream {stream}: {} frames written, {got} output; first lost: {:?} \
                 (written as frame #{})",
                list.len(),
                expected[list[got]],
                list[got]
            ));
        }
    }
    Ok(perm)
}

/// Header blocks are contiguous and keep their relative order across streams.
pub fn check_header_blocks(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let mut open: Option<u32> = None;
    let mut last_block: Option<usize> = None;
    for (pos, f) in out.iter().enumerate() {
        if let Some(stream) = open {
            if f.kind != CONTINUATION || f.stream() != stream {
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
                open = Some(f.stream());
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

/// SETTINGS (ACK or not) is a barrier: everything written before it is output before it,
/// everything written after it is output after it.
pub fn check_settings_barriers(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let n = perm.len();
    let mut suffix_min = vec![usize::MAX; n + 1];
    for p in (0..n).rev() {
        suffix_min[p] = suffix_min[p + 1].min(perm[p]);
    }
    let mut prefix_max: Option<usize> = None;
    for (p, f) in out.iter().enumerate() {
        if f.is_settings() {
            if let Some(m) = prefix_max.filter(|&m| m > perm[p]) {
                return Err(format!(
                    "{f:?} (written as frame #{}) was overtaken by frame #{m} written after it",
                    perm[p]
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

/// Connection-level frames are never stuck behind DATA: no DATA frame written after a
/// stream-0 frame is output before it.
pub fn check_control_not_overtaken(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let mut max_data_perm: Option<(usize, usize)> = None;
    for (p, f) in out.iter().enumerate() {
        if f.stream() == 0 {
            if let Some((q, m)) = max_data_perm.filter(|&(_, m)| m > perm[p]) {
                return Err(format!(
                    "control frame {f:?} (written as frame #{}) was output after {:?} written \
                     later (frame #{m})",
                    perm[p], out[q]
                ));
            }
        }
        if f.is_data() && max_data_perm.is_none_or(|(_, m)| perm[p] > m) {
            max_data_perm = Some((p, perm[p]));
        }
    }
    Ok(())
}

/// In-order policies output exactly the written order.
pub fn check_in_order(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    match perm.iter().enumerate().find(|&(p, &i)| p != i) {
        Some((p, &i)) => Err(format!(
            "output frame #{p} {:?} was written as frame #{i}: an in-order policy reordered",
            out[p]
        )),
        None => Ok(()),
    }
}

/// DATA frames output ahead of a DATA frame written before them.
pub fn inverted_data_frames(out: &[Frame], perm: &[usize]) -> usize {
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

/// With the announcement on: the first non-ACK SETTINGS grew by exactly the 6 bytes of
/// SETTINGS_NO_RFC7540_PRIORITIES = 1 (unless it already carried it), nothing else changed.
pub fn check_first_settings_grew(input: &[Frame], out: &[Frame]) -> Result<(), String> {
    let Some(first_in) = input.iter().find(|f| f.is_settings() && f.flags & ACK == 0) else {
        return Ok(());
    };
    let Some(first_out) = out.iter().find(|f| f.is_settings() && f.flags & ACK == 0) else {
        return Err("no non-ACK SETTINGS output".into());
    };
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
    Ok(())
}

/// Whether `frames` follows h2's header-block grammar: every HEADERS/PUSH_PROMISE without
/// END_HEADERS is followed at once by CONTINUATIONs of its stream up to one with
/// END_HEADERS, there is no other CONTINUATION, and no header block is on stream 0.
/// (`truncated`: the sequence may stop inside the last block.)
pub fn follows_header_grammar(frames: &[Frame], truncated: bool) -> bool {
    let mut open: Option<u32> = None;
    for f in frames {
        match open {
            Some(stream) => {
                if f.kind != CONTINUATION || f.stream() != stream {
                    return false;
                }
                if f.end_headers() {
                    open = None;
                }
            }
            None => {
                if f.kind == CONTINUATION || (f.starts_header_block() && f.stream() == 0) {
                    return false;
                }
                if f.starts_header_block() && !f.end_headers() {
                    open = Some(f.stream());
                }
            }
        }
    }
    open.is_none() || truncated
}

// ---------------------------------------------------------------------------------------
// The one known deviation, tolerated unless strict
// ---------------------------------------------------------------------------------------

/// Set `TLS_FLUSH_FUZZ_STRICT=1` to require also the frames of a header block left
/// unfinished when h2 stops writing (the wrapper drops them at shutdown; see
/// `fuzz/README.md` and `unfinished_header_block_at_shutdown_is_delivered`).
fn strict_free_mode() -> bool {
    static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("TLS_FLUSH_FUZZ_STRICT").is_some_and(|v| v != "0"))
}

// ---------------------------------------------------------------------------------------
// write_pipeline: server frame sequences through the write path
// ---------------------------------------------------------------------------------------

/// One write call of the plan.
#[derive(Clone, Debug)]
pub struct WriteOp {
    /// Bytes offered (fewer at the end).
    pub size: usize,
    /// Slices of a vectored write (1: plain `poll_write`).
    pub slices: usize,
    pub split_seed: u64,
    pub flush_after: bool,
    /// Client bytes read before this write.
    pub read_before: usize,
}

/// How the frame sequence is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Header blocks as h2 writes them (contiguous, END_HEADERS last, never on stream 0);
    /// everything else arbitrary.
    Grammar,
    /// Anything well-formed at the framing level: stray and interleaved CONTINUATIONs,
    /// unfinished blocks, blocks on stream 0. The same checks, less the contiguity of
    /// header blocks in the output (they are not contiguous in the input either).
    Free,
}

/// A decoded `write_pipeline` case.
#[derive(Clone, Debug)]
pub struct WriteCase {
    pub policy: Policy,
    pub announce: bool,
    pub cork: bool,
    pub pack: bool,
    /// `Some(on)` overrides the preset's reordering.
    pub reorder: Option<bool>,
    pub limits: Option<(usize, usize)>,
    pub fragment: Option<usize>,
    /// `None`: the preset; `Some(None)`: no cut; `Some(Some(..))`: this cut.
    pub urgent_cut: Option<Option<(u8, usize)>>,
    /// `None`: the preset; `Some(bound)`: `anticipate(bound)`.
    pub anticipate: Option<Option<Duration>>,
    pub record_sizing: Option<RecordSizing>,
    pub max_early_updates: Option<usize>,
    pub buffering: Buffering,
    pub schedule: Vec<Step>,
    pub fail_write_at: Option<usize>,
    pub plan: Vec<WriteOp>,
    pub read_first: usize,
    pub shape: Shape,
    /// Cut the encoded input this many bytes before its end (inside the last frame).
    pub truncate: Option<usize>,
    pub client: Vec<u8>,
    pub frames: Vec<Frame>,
}

impl WriteCase {
    /// A readable case: `frames` written in one go by `policy`'s preset (anticipation off)
    /// into a transport that takes everything, the client having sent its preface and an
    /// empty SETTINGS.
    pub fn plain(policy: Policy, frames: Vec<Frame>) -> Self {
        let mut client = PREFACE.to_vec();
        Frame::new(SETTINGS, 0, 0, Vec::new()).encode_into(&mut client);
        WriteCase {
            policy,
            announce: false,
            cork: true,
            pack: true,
            reorder: None,
            limits: None,
            fragment: None,
            urgent_cut: None,
            anticipate: Some(None),
            record_sizing: None,
            max_early_updates: None,
            buffering: Buffering::Off,
            schedule: vec![Step::Accept(usize::MAX)],
            fail_write_at: None,
            plan: vec![WriteOp {
                size: 1 << 20,
                slices: 1,
                split_seed: 0,
                flush_after: false,
                read_before: 0,
            }],
            read_first: 0,
            shape: Shape::Free,
            truncate: None,
            client,
            frames,
        }
    }

    pub fn config(&self) -> FlushConfig {
        let mut c = FlushConfig::for_policy(self.policy)
            .announce_no_rfc7540_priorities(self.announce)
            .cork(self.cork)
            .pack_records(self.pack)
            .tls_max_fragment_size(self.fragment);
        if let Some(on) = self.reorder {
            c = c.reorder(on);
        }
        if let Some((soft, hard)) = self.limits {
            c = c.soft_limit(soft).hard_limit(hard);
        }
        match self.urgent_cut {
            None => {}
            Some(None) => c = c.no_urgent_cut(),
            Some(Some((u, n))) => c = c.urgent_cut(u, n),
        }
        if let Some(bound) = self.anticipate {
            c = c.anticipate(bound);
        }
        if let Some(sizing) = self.record_sizing {
            c = c.record_sizing(sizing);
        }
        if let Some(n) = self.max_early_updates {
            c = c.max_early_updates(n);
        }
        c
    }

    fn reorders(&self) -> bool {
        self.reorder.unwrap_or(self.policy == Policy::Scheduled)
    }

    fn hard_limit(&self) -> usize {
        self.limits
            .map_or(DEFAULT_HARD_LIMIT, |(soft, hard)| hard.max(soft))
    }

    fn record_payload(&self) -> usize {
        self.fragment
            .map_or(MAX_RECORD, |n| n.saturating_sub(5).clamp(1, MAX_RECORD))
    }

    fn has_urgent_cut(&self) -> bool {
        match self.urgent_cut {
            None => self.policy != Policy::Dynamic,
            Some(cut) => cut.is_some(),
        }
    }
}

fn decode_policy(b: u8) -> Policy {
    Policy::ALL[usize::from(b) % Policy::ALL.len()]
}

fn decode_schedule(inp: &mut Input<'_>) -> Vec<Step> {
    let n = 1 + inp.below(16);
    (0..n)
        .map(|_| match inp.u8() % 12 {
            0 | 1 => Step::Accept(usize::MAX),
            2 | 3 => Step::Pending,
            4 => Step::Accept(1),
            5 => Step::Accept(1 + inp.below(32)),
            6 | 7 => Step::Accept(1 + inp.below(4096)),
            8 => Step::Accept(1 + inp.below(65536)),
            9 => Step::Block,
            10 => Step::BlockStale,
            _ => Step::Accept(usize::MAX),
        })
        .collect()
}

fn decode_plan(inp: &mut Input<'_>) -> Vec<WriteOp> {
    let n = 1 + inp.below(8);
    (0..n)
        .map(|_| {
            let size = match inp.size() {
                usize::MAX => 1 << 20,
                s => s,
            };
            let shape = inp.u8();
            WriteOp {
                size,
                slices: 1 + usize::from(shape & 3),
                split_seed: u64::from(inp.u16()),
                flush_after: shape & 4 != 0,
                read_before: if shape & 8 != 0 { inp.below(64) } else { 0 },
            }
        })
        .collect()
}

/// The client's bytes for `write_pipeline`: preface, SETTINGS, requests with a `priority`
/// header and PRIORITY_UPDATEs, so that the scheduler has urgencies to act on.
fn decode_client(inp: &mut Input<'_>) -> Vec<u8> {
    let mut frames = vec![Frame::new(SETTINGS, 0, 0, Vec::new())];
    let n = inp.below(8);
    for _ in 0..n {
        let stream = STREAM_IDS[inp.below(7)];
        match inp.u8() % 4 {
            0 => {
                let value = PRIORITY_VALUES[inp.below(PRIORITY_VALUES.len())];
                let mut payload = STREAM_IDS[inp.below(7)].to_be_bytes().to_vec();
                payload.extend_from_slice(value.as_bytes());
                frames.push(Frame::new(PRIORITY_UPDATE, 0, 0, payload));
            }
            1 => frames.push(Frame::new(
                HEADERS,
                END_HEADERS | END_STREAM,
                stream,
                request_block(None),
            )),
            _ => {
                let value = PRIORITY_VALUES[inp.below(PRIORITY_VALUES.len())];
                frames.push(Frame::new(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    stream,
                    request_block(Some(value.as_bytes())),
                ));
            }
        }
    }
    let mut bytes = PREFACE.to_vec();
    bytes.extend(encode_all(&frames));
    bytes
}

/// Builds frames from the input; `seq` makes DATA payloads distinct.
struct FrameGen<'a, 'b> {
    inp: &'b mut Input<'a>,
    seq: usize,
    shape: Shape,
}

impl FrameGen<'_, '_> {
    fn stream(&mut self) -> u32 {
        let b = self.inp.u8();
        let id = STREAM_IDS[usize::from(b & 0x7f) % STREAM_IDS.len()];
        // Now and then the reserved bit, which must pass through untouched.
        if b & 0x80 != 0 && b & 0x40 != 0 {
            id | 0x8000_0000
        } else {
            id
        }
    }

    fn block_stream(&mut self) -> u32 {
        let s = self.stream();
        if self.shape == Shape::Grammar && s & 0x7fff_ffff == 0 {
            1
        } else {
            s
        }
    }

    fn data_len(&mut self) -> usize {
        match self.inp.u8() % 16 {
            0..=5 => self.inp.below(64),
            6..=11 => self.inp.below(4200),
            12..=14 => self.inp.below(20_000),
            _ => self.inp.below(70_000),
        }
    }

    /// Distinctive DATA content: differs per frame and per offset.
    fn data_payload(&mut self, len: usize) -> Vec<u8> {
        self.seq += 1;
        let seq = self.seq;
        (0..len)
            .map(|j| ((seq * 131 + j * 7 + j / 251) % 251) as u8)
            .collect()
    }

    /// An HPACK block: a response, trailers, raw bytes, or pieces that change the
    /// dynamic table.
    fn hpack_block(&mut self) -> Vec<u8> {
        let mut block = Vec::new();
        match self.inp.u8() % 6 {
            0 => {}
            1 => block.extend_from_slice(self.inp.bytes_upto(40)),
            2 => literal(&mut block, false, b"grpc-status", b"0"),
            _ => block.push(0x88 + (self.inp.u8() % 7)),
        }
        let extras = self.inp.below(4);
        for _ in 0..extras {
            match self.inp.u8() % 8 {
                0 | 1 => {
                    let v = PRIORITY_VALUES[self.inp.below(PRIORITY_VALUES.len())];
                    literal(&mut block, false, b"priority", v.as_bytes());
                }
                2 => {
                    let v = self.inp.bytes_upto(16).to_vec();
                    literal(&mut block, self.inp.bool(), b"priority", &v);
                }
                3 => {
                    let v = PRIORITY_VALUES[self.inp.below(PRIORITY_VALUES.len())];
                    literal(&mut block, true, b"priority", v.as_bytes());
                }
                4 => {
                    // An indexed field from the static or dynamic table.
                    let index = 1 + self.inp.below(70);
                    hpack_int(&mut block, 0x80, 7, index);
                }
                5 => {
                    // A dynamic table size update.
                    let size = self.inp.below(70_000);
                    hpack_int(&mut block, 0x20, 5, size);
                }
                6 => {
                    let pad = vec![b'p'; self.inp.below(3000)];
                    literal(&mut block, self.inp.bool(), b"x-pad", &pad);
                }
                _ => block.extend_from_slice(self.inp.bytes_upto(8)),
            }
        }
        block
    }

    /// A header block split into 1-4 frames: HEADERS or PUSH_PROMISE, then CONTINUATIONs.
    fn header_block(&mut self, out: &mut Vec<Frame>, push: bool) {
        let stream = self.block_stream();
        let block = self.hpack_block();
        let parts = 1 + self.inp.below(4);
        let opts = self.inp.u8();
        let end_stream = opts & 1 != 0;
        let padded = opts & 2 != 0;
        let priority = opts & 4 != 0;
        let malformed_pad = opts & 0x18 == 0x18;
        for i in 0..parts {
            let piece = &block[i * block.len() / parts..(i + 1) * block.len() / parts];
            let mut flags = if i + 1 == parts { END_HEADERS } else { 0 };
            if i > 0 {
                out.push(Frame::new(CONTINUATION, flags, stream, piece));
                continue;
            }
            let mut payload = Vec::new();
            let pad = if padded { self.inp.below(20) } else { 0 };
            if padded {
                flags |= PADDED;
                payload.push(if malformed_pad { 0xff } else { pad as u8 });
            }
            let kind = if push {
                payload.extend_from_slice(&STREAM_IDS[self.inp.below(8)].to_be_bytes());
                PUSH_PROMISE
            } else {
                if end_stream {
                    flags |= END_STREAM;
                }
                if priority {
                    flags |= PRIORITY_FLAG;
                    payload.extend_from_slice(&[0, 0, 0, 3, 15]);
                }
                HEADERS
            };
            payload.extend_from_slice(piece);
            payload.resize(payload.len() + pad, 0);
            out.push(Frame::new(kind, flags, stream, payload));
        }
    }

    fn settings_payload(&mut self) -> Vec<u8> {
        let n = self.inp.below(5);
        let mut payload = Vec::new();
        for _ in 0..n {
            let id = match self.inp.u8() % 8 {
                0 => 9,
                k => u16::from(k),
            };
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&self.inp.u32().to_be_bytes());
        }
        if self.inp.u8().is_multiple_of(16) {
            // Not a multiple of six: malformed, but whole at the framing level.
            payload.push(0x42);
        }
        payload
    }

    /// Appends the next frame (or header block); `false` when the input is used up.
    fn next(&mut self, out: &mut Vec<Frame>) -> bool {
        if self.inp.is_empty() {
            return false;
        }
        let op = self.inp.u8();
        let free_ops = if self.shape == Shape::Free { 3 } else { 0 };
        match op % (14 + free_ops) {
            0..=2 => {
                let stream = self.stream();
                let len = self.data_len();
                let flags = self.inp.u8() & (END_STREAM | PADDED);
                let mut payload = self.data_payload(len);
                if flags & PADDED != 0 {
                    payload.insert(0, 0);
                }
                out.push(Frame::new(DATA, flags, stream, payload));
            }
            3 | 4 => self.header_block(out, false),
            5 => self.header_block(out, true),
            6 => {
                let payload = self.settings_payload();
                out.push(Frame::new(SETTINGS, 0, 0, payload));
            }
            7 => out.push(Frame::new(SETTINGS, ACK, 0, Vec::new())),
            8 => {
                let payload = self.data_payload(8);
                out.push(Frame::new(PING, self.inp.u8() & ACK, 0, payload));
            }
            9 => {
                let stream = self.stream();
                let inc = self.inp.u32();
                out.push(Frame::new(WINDOW_UPDATE, 0, stream, inc.to_be_bytes()));
            }
            10 => {
                let stream = self.stream();
                let code = u32::from(self.inp.u8() % 14);
                out.push(Frame::new(RST_STREAM, 0, stream, code.to_be_bytes()));
            }
            11 => {
                let mut payload = STREAM_IDS[self.inp.below(7)].to_be_bytes().to_vec();
                payload.extend_from_slice(&[0, 0, 0, self.inp.u8() % 14]);
                let n = self.inp.below(16);
                let debug = self.data_payload(n);
                payload.extend_from_slice(&debug);
                out.push(Frame::new(GOAWAY, 0, 0, payload));
            }
            12 => {
                let stream = self.stream();
                out.push(Frame::new(PRIORITY, 0, stream, [0, 0, 0, 1, 200]));
            }
            13 => {
                // Any other frame type (unknown types, PRIORITY_UPDATE, ...), raw.
                let mut kind = self.inp.u8();
                if self.shape == Shape::Grammar && matches!(kind, HEADERS | PUSH_PROMISE) {
                    kind = 0x20;
                }
                if self.shape == Shape::Grammar && kind == CONTINUATION {
                    kind = PRIORITY_UPDATE;
                }
                let flags = self.inp.u8();
                let stream = self.stream();
                let mut payload = self.inp.bytes_upto(32).to_vec();
                let n = self.inp.below(4);
                payload.extend(self.data_payload(n));
                out.push(Frame::new(kind, flags, stream, payload));
            }
            14 => {
                // A lone CONTINUATION, any flags.
                let stream = self.stream();
                let flags = self.inp.u8();
                let block = self.hpack_block();
                out.push(Frame::new(CONTINUATION, flags, stream, block));
            }
            _ => {
                // A single HEADERS / PUSH_PROMISE frame with arbitrary flags (perhaps no
                // END_HEADERS), perhaps on stream 0.
                let kind = if self.inp.bool() {
                    PUSH_PROMISE
                } else {
                    HEADERS
                };
                let stream = self.stream();
                let flags = self.inp.u8() & !(PADDED | PRIORITY_FLAG);
                let mut payload = Vec::new();
                if kind == PUSH_PROMISE {
                    payload.extend_from_slice(&[0, 0, 0, 2]);
                }
                payload.extend(self.hpack_block());
                out.push(Frame::new(kind, flags, stream, payload));
            }
        }
        true
    }
}

/// Decodes a `write_pipeline` case from fuzz input.
pub fn decode_write_case(data: &[u8]) -> WriteCase {
    let mut inp = Input::new(data);
    let policy = decode_policy(inp.u8());
    let bits = inp.u8();
    let announce = bits & 1 != 0;
    let cork = bits & 2 == 0;
    let pack = bits & 4 == 0;
    let reorder = match (bits >> 3) & 3 {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    };
    let shape = if bits & 0x20 != 0 {
        Shape::Free
    } else {
        Shape::Grammar
    };
    let truncate_flag = bits & 0x40 != 0;
    let buffering = match inp.u8() % 3 {
        0 => Buffering::Off,
        1 => Buffering::Reported,
        _ => Buffering::Silent,
    };
    let limits = match inp.u8() % 4 {
        0 | 1 => None,
        2 => {
            let soft = inp.below(70_000);
            Some((soft, soft + inp.below(70_000)))
        }
        _ => {
            let soft = inp.below(256);
            Some((soft, soft + inp.below(256)))
        }
    };
    let fragment = match inp.u8() % 4 {
        0 | 1 => None,
        2 => Some(inp.below(64)),
        _ => Some(inp.below(17_000)),
    };
    let urgent_cut = match inp.u8() % 4 {
        0 | 1 => None,
        2 => Some(None),
        _ => Some(Some((inp.u8() % 9, inp.below(20_000)))),
    };
    let anticipate = match inp.u8() % 4 {
        // The preset's 5 ms hold makes each case slow; rarer.
        0 => Some(None),
        1 => Some(Some(Duration::ZERO)),
        2 => Some(Some(Duration::from_micros(inp.below(300) as u64))),
        _ => {
            if inp.u8().is_multiple_of(4) {
                None
            } else {
                Some(None)
            }
        }
    };
    let record_sizing = match inp.u8() % 4 {
        0 | 1 => None,
        2 => Some(RecordSizing::Fixed(inp.below(20_000))),
        _ => Some(RecordSizing::Dynamic {
            idle_reset: Duration::from_micros(inp.below(2000) as u64),
        }),
    };
    let max_early_updates = match inp.u8() % 4 {
        0 => Some(inp.below(4)),
        _ => None,
    };
    let schedule = decode_schedule(&mut inp);
    let fail_write_at = match inp.u8() % 16 {
        0 => Some(inp.below(64)),
        _ => None,
    };
    let plan = decode_plan(&mut inp);
    let read_first = inp.below(128);
    let client = decode_client(&mut inp);
    let truncate = if truncate_flag {
        Some(1 + inp.below(4096))
    } else {
        None
    };
    let mut frames = Vec::new();
    let mut total = 0;
    {
        let mut gen = FrameGen {
            inp: &mut inp,
            seq: 0,
            shape,
        };
        while frames.len() < MAX_FRAMES && total < MAX_INPUT_BYTES {
            let before = frames.len();
            if !gen.next(&mut frames) {
                break;
            }
            total += frames[before..].iter().map(Frame::wire_len).sum::<usize>();
        }
    }
    WriteCase {
        policy,
        announce,
        cork,
        pack,
        reorder,
        limits,
        fragment,
        urgent_cut,
        anticipate,
        record_sizing,
        max_early_updates,
        buffering,
        schedule,
        fail_write_at,
        plan,
        read_first,
        shape,
        truncate,
        client,
        frames,
    }
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

/// Where byte `pos` of the encoded `frames` falls, for error messages.
fn locate(frames: &[Frame], pos: usize) -> String {
    let mut start = 0;
    for (i, f) in frames.iter().enumerate() {
        if pos < start + f.wire_len() {
            return format!("writing byte {} of frame #{i} {f:?}", pos - start);
        }
        start += f.wire_len();
    }
    format!("all {} frames written", frames.len())
}

/// Runs one `write_pipeline` input; `Err` describes a violated invariant. A header block
/// left unfinished at the end may stay undelivered unless `TLS_FLUSH_FUZZ_STRICT=1`.
pub fn run_write_pipeline(data: &[u8]) -> Result<(), String> {
    run_write_pipeline_with(data, strict_free_mode())
}

/// [`run_write_pipeline`] with the strictness given: `strict` requires every whole frame,
/// those of a header block left unfinished at the end included.
pub fn run_write_pipeline_with(data: &[u8], strict: bool) -> Result<(), String> {
    let case = decode_write_case(data);
    run_write_case(&case, strict).map_err(|e| {
        format!(
            "{e}\n  policy={:?} shape={:?} reorder={} announce={} cork={} pack={} limits={:?} \
             fragment={:?} urgent_cut={:?} anticipate={:?} sizing={:?} buffering={:?} \
             truncate={:?}\n  frames={:?}",
            case.policy,
            case.shape,
            case.reorders(),
            case.announce,
            case.cork,
            case.pack,
            case.limits,
            case.fragment,
            case.urgent_cut,
            case.anticipate,
            case.record_sizing,
            case.buffering,
            case.truncate,
            case.frames
        )
    })
}

/// The outcome of writing a case: what h2 managed to write, and whether an error ended it.
struct Written {
    /// Input bytes the wrapper took.
    taken: usize,
    read: Vec<u8>,
    failed: bool,
}

fn write_input(h: &mut Harness, case: &WriteCase, input: &[u8]) -> Result<Written, String> {
    let mut read = h.read(case.read_first)?;
    let mut pos = 0;
    let mut calls = 0usize;
    while pos < input.len() {
        let op = &case.plan[calls % case.plan.len()];
        calls += 1;
        read.extend(h.read(op.read_before)?);
        let chunk = &input[pos..(pos + op.size).min(input.len())];
        let written = h
            .write(&split(chunk, op.slices, op.split_seed))
            .map_err(|e| format!("{e} ({})", locate(&case.frames, pos)))?;
        match written {
            Ok(n) => pos += n,
            Err(_) => {
                return Ok(Written {
                    taken: pos,
                    read,
                    failed: true,
                })
            }
        }
        if op.flush_after && h.flush()?.is_err() {
            return Ok(Written {
                taken: pos,
                read,
                failed: true,
            });
        }
    }
    read.extend(h.read_all_client()?);
    Ok(Written {
        taken: pos,
        read,
        failed: false,
    })
}

pub fn run_write_case(case: &WriteCase, strict: bool) -> Result<(), String> {
    let mut input = encode_all(&case.frames);
    let full_len = input.len();
    let truncated_by = match case.truncate {
        Some(n) if !case.frames.is_empty() => {
            let last = case.frames.last().map_or(0, Frame::wire_len);
            let cut = n.min(last - 1);
            input.truncate(full_len - cut);
            cut
        }
        _ => 0,
    };
    let mut wire = Wire::new(case.schedule.clone(), case.buffering, case.client.clone());
    wire.fail_write_at = case.fail_write_at;
    wire.alpn_h2 = true;
    let mut h = Harness::new(case.config(), wire);

    let written = write_input(&mut h, case, &input)?;
    let grammar = follows_header_grammar(&case.frames, truncated_by > 0);
    if written.failed {
        // After a transport error only absence of panics and hangs is required; h2 would
        // shut the connection down.
        let _ = h.shutdown()?;
        return Ok(());
    }
    if written.taken != input.len() {
        return Err(format!(
            "took {} of {} bytes without an error",
            written.taken,
            input.len()
        ));
    }
    if written.read != case.client {
        return Err("the read side changed the client's bytes".into());
    }
    if !input.is_empty() && !h.is_http2() {
        return Err("the wrapper did not run the HTTP/2 pipeline".into());
    }

    // Every whole frame must be delivered, except the frames of a header block still
    // unfinished when h2 shuts down (nothing came after them), which the wrapper drops at
    // shutdown: they stay counted in `queued_bytes` (see `poll_shutdown`). Strict mode
    // requires those too.
    let whole = case.frames.len() - usize::from(truncated_by > 0);
    let tail_header =
        truncated_by > 0 && case.frames[whole].wire_len() - truncated_by >= HEADER_LEN;
    let unfinished = if strict {
        0
    } else {
        unfinished_block_at_end(&case.frames, whole, tail_header)
    };
    let complete = whole - unfinished;
    let expected = expected_frames(&case.frames[..complete], case.announce);
    let expected_len: usize = expected.iter().map(Frame::wire_len).sum();
    let residual: usize = case.frames[complete..whole]
        .iter()
        .map(Frame::wire_len)
        .sum();

    // h2's last flush, polled as long as it asks to be.
    if let Err(e) = h.settle()? {
        if h.wire.borrow().failed {
            let _ = h.shutdown()?;
            return Ok(());
        }
        return Err(format!("the final flush failed: {e}"));
    }
    let settled = {
        let w = h.wire.borrow();
        (w.accepted.len(), w.flushed, h.stats().queued_bytes)
    };
    if let Err(e) = h.shutdown()? {
        if h.wire.borrow().failed {
            return Ok(());
        }
        return Err(format!("shutdown failed: {e}"));
    }
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
    let out = parse_frames(&output)?;
    let s = h.stats();
    if s.bytes_written != output.len() as u64 {
        return Err(format!(
            "stats.bytes_written = {} but the transport accepted {} bytes",
            s.bytes_written,
            output.len()
        ));
    }

    // Everything written is delivered, every stream's frames in order with identical bytes.
    let perm = match_frames(&expected, &out)?;
    if output.len() != expected_len {
        return Err(format!(
            "{} bytes output, {expected_len} expected",
            output.len()
        ));
    }
    // Once h2's last flush returned Ready without asking to be polled again, everything
    // complete was on the socket.
    if settled != (expected_len, expected_len, residual as u64) {
        return Err(format!(
            "the final flush settled with {} of {expected_len} bytes written, {} flushed and \
             {} still queued ({residual} expected: an unfinished header block)",
            settled.0, settled.1, settled.2
        ));
    }
    if grammar {
        // Outside h2's grammar (stray CONTINUATIONs, interrupted blocks) the input's blocks
        // are not contiguous to begin with.
        check_header_blocks(&out, &perm)?;
    }
    check_settings_barriers(&out, &perm)?;
    check_control_not_overtaken(&out, &perm)?;
    if !case.reorders() {
        check_in_order(&out, &perm)?;
    }
    if case.announce {
        check_first_settings_grew(&case.frames[..complete], &out)?;
    }
    check_write_counters(case, &expected, &out, &perm, &s, residual as u64)
}

/// Counters after a complete run.
fn check_write_counters(
    case: &WriteCase,
    expected: &[Frame],
    out: &[Frame],
    perm: &[usize],
    s: &StatsSnapshot,
    residual: u64,
) -> Result<(), String> {
    if s.queued_bytes != residual {
        return Err(format!(
            "stats.queued_bytes = {} after shutdown ({residual} expected)",
            s.queued_bytes
        ));
    }
    // The queue stays within the hard limit, or one frame admitted into an empty queue; a
    // header block already begun is taken whole. The first SETTINGS grows by 6 bytes.
    let largest_frame = expected.iter().map(Frame::wire_len).max().unwrap_or(0);
    let largest_block = largest_header_unit(expected).max(residual as usize);
    let bound =
        (case.hard_limit() + largest_block).max(largest_frame) + NO_RFC7540_PRIORITIES.len();
    if s.queued_bytes_high_water > bound as u64 {
        return Err(format!(
            "stats.queued_bytes_high_water = {} > max(hard limit + largest header block, \
             largest frame) = {bound}",
            s.queued_bytes_high_water
        ));
    }
    if s.records_written * (case.record_payload() as u64) < s.bytes_written {
        return Err(format!(
            "{} records cannot hold {} bytes",
            s.records_written, s.bytes_written
        ));
    }
    let inverted = inverted_data_frames(out, perm) as u64;
    if !case.reorders() && s.data_frames_reordered != 0 {
        return Err(format!(
            "in-order configuration counted {} reordered DATA frames",
            s.data_frames_reordered
        ));
    }
    if s.data_frames_reordered > inverted {
        return Err(format!(
            "stats.data_frames_reordered = {} but only {inverted} DATA frames were output \
             ahead of older DATA",
            s.data_frames_reordered
        ));
    }
    if !case.has_urgent_cut() && s.early_cuts != 0 {
        return Err(format!("no urgent cut, yet {} early cuts", s.early_cuts));
    }
    let cut_points = out
        .iter()
        .filter(|f| f.is_data() || f.kind == HEADERS)
        .count() as u64;
    if s.early_cuts > cut_points {
        return Err(format!(
            "{} early cuts but only {cut_points} DATA and HEADERS frames",
            s.early_cuts
        ));
    }
    if s.hpack_failures > 1 {
        return Err(format!(
            "{} HPACK failures on the write side alone (the decoder gives up once)",
            s.hpack_failures
        ));
    }
    if s.priority_updates_applied
        + s.priority_updates_buffered
        + s.priority_updates_ignored
        + s.priority_updates_invalid
        > case.client.len() as u64 / HEADER_LEN as u64
    {
        return Err("more PRIORITY_UPDATE outcomes than client frames".into());
    }
    Ok(())
}

/// The wire size of the largest header block as the wrapper groups them: a HEADERS or
/// PUSH_PROMISE and the CONTINUATIONs of its stream that follow it at once, up to
/// END_HEADERS or to the first other frame (which interrupts the block).
pub fn largest_header_unit(frames: &[Frame]) -> usize {
    let mut largest = 0;
    let mut open: Option<(u32, usize)> = None;
    for f in frames {
        if let Some((stream, size)) = open {
            if f.kind == CONTINUATION && f.stream() == stream {
                let size = size + f.wire_len();
                largest = largest.max(size);
                open = (!f.end_headers()).then_some((stream, size));
                continue;
            }
            open = None;
        }
        if f.starts_header_block() {
            largest = largest.max(f.wire_len());
            if !f.end_headers() {
                open = Some((f.stream(), f.wire_len()));
            }
        }
    }
    largest
}

/// How many of the whole frames `frames[..whole]` form a header block still unfinished
/// when h2 stops writing: a HEADERS/PUSH_PROMISE without END_HEADERS followed only by
/// CONTINUATIONs of its stream without END_HEADERS. Anything else after it (any other frame,
/// a CONTINUATION of another stream, or the header of a truncated last frame that does not
/// continue the block, `tail_header`) interrupts the block, which the wrapper then queues as
/// it is.
pub fn unfinished_block_at_end(frames: &[Frame], whole: usize, tail_header: bool) -> usize {
    let mut open: Option<(u32, usize)> = None;
    for (i, f) in frames[..whole].iter().enumerate() {
        if let Some((stream, _)) = open {
            if f.kind == CONTINUATION && f.stream() == stream {
                if f.end_headers() {
                    open = None;
                }
                continue;
            }
            open = None;
        }
        if f.starts_header_block() && !f.end_headers() {
            open = Some((f.stream(), i));
        }
    }
    let Some((stream, start)) = open else {
        return 0;
    };
    if tail_header {
        let next = &frames[whole];
        if next.kind != CONTINUATION || next.stream() != stream {
            return 0;
        }
    }
    whole - start
}

// ---------------------------------------------------------------------------------------
// read_observer: arbitrary client bytes through poll_read
// ---------------------------------------------------------------------------------------

/// How the client's bytes begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preface {
    /// The client preface, then the body.
    Valid,
    /// The body alone.
    None,
    /// The first `n` bytes of the preface, then the body.
    Partial(usize),
    /// The preface with byte `at` changed, then the body.
    Corrupt(usize),
}

/// One server write interleaved with the reads.
#[derive(Clone, Debug)]
pub struct ServerWrite {
    /// Before the read with this index.
    pub before_read: usize,
    pub frames: Vec<Frame>,
}

/// A decoded `read_observer` case.
#[derive(Clone, Debug)]
pub struct ReadCase {
    pub policy: Policy,
    pub max_early_updates: Option<usize>,
    pub anticipate: Option<Duration>,
    pub preface: Preface,
    pub read_plan: ReadPlan,
    /// Sizes of the buffers passed to `poll_read`, cycled, and bytes already in them.
    pub read_sizes: Vec<(usize, usize)>,
    pub writes: Vec<ServerWrite>,
    pub client: Vec<u8>,
}

impl ReadCase {
    fn config(&self) -> FlushConfig {
        let mut c = FlushConfig::for_policy(self.policy)
            .anticipate(self.anticipate)
            .announce_no_rfc7540_priorities(false);
        if let Some(n) = self.max_early_updates {
            c = c.max_early_updates(n);
        }
        c
    }

    fn max_early_updates(&self) -> usize {
        self.max_early_updates.unwrap_or(DEFAULT_MAX_EARLY_UPDATES)
    }
}

/// Structured client frames, so that the observer's deeper paths are reached quickly.
fn client_frames(inp: &mut Input<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    while !inp.is_empty() && out.len() < MAX_INPUT_BYTES {
        let stream = STREAM_IDS[inp.below(STREAM_IDS.len())];
        match inp.u8() % 12 {
            0..=2 => {
                // PRIORITY_UPDATE: mostly well-formed, on stream 0.
                let mode = inp.u8();
                let frame_stream = if mode & 0x80 != 0 { stream } else { 0 };
                let mut payload = match mode % 8 {
                    0 => inp.bytes_upto(6).to_vec(),
                    1 => {
                        let mut p = inp.u32().to_be_bytes().to_vec();
                        p.extend_from_slice(inp.bytes_upto(24));
                        p
                    }
                    _ => {
                        let mut p = STREAM_IDS[inp.below(STREAM_IDS.len())]
                            .to_be_bytes()
                            .to_vec();
                        p.extend_from_slice(
                            PRIORITY_VALUES[inp.below(PRIORITY_VALUES.len())].as_bytes(),
                        );
                        p
                    }
                };
                if mode & 0x40 != 0 && mode & 0x20 != 0 {
                    payload.resize(OBSERVER_MAX_SMALL_PAYLOAD + 1, b' ');
                }
                Frame::new(PRIORITY_UPDATE, inp.u8(), frame_stream, payload).encode_into(&mut out);
            }
            3..=5 => {
                // A request header block, perhaps split, padded or with a priority field.
                let value = match inp.u8() % 4 {
                    0 => None,
                    1 => Some(inp.bytes_upto(12).to_vec()),
                    _ => Some(
                        PRIORITY_VALUES[inp.below(PRIORITY_VALUES.len())]
                            .as_bytes()
                            .to_vec(),
                    ),
                };
                let mut block = request_block(value.as_deref());
                if inp.u8().is_multiple_of(4) {
                    block.extend_from_slice(inp.bytes_upto(12));
                }
                let parts = 1 + inp.below(3);
                let opts = inp.u8();
                for i in 0..parts {
                    let piece = &block[i * block.len() / parts..(i + 1) * block.len() / parts];
                    let mut flags = if i + 1 == parts { END_HEADERS } else { 0 };
                    if i > 0 {
                        Frame::new(CONTINUATION, flags, stream, piece).encode_into(&mut out);
                        continue;
                    }
                    flags |= opts & END_STREAM;
                    let mut payload = Vec::new();
                    if opts & 2 != 0 {
                        flags |= PADDED;
                        payload.push(if opts & 0x18 == 0x18 { 0xee } else { 3 });
                    }
                    if opts & 4 != 0 {
                        flags |= PRIORITY_FLAG;
                        payload.extend_from_slice(&[0, 0, 0, 0, 7]);
                    }
                    payload.extend_from_slice(piece);
                    if opts & 2 != 0 {
                        payload.extend_from_slice(&[0, 0, 0]);
                    }
                    if opts & 0x30 == 0x30 {
                        // Truncated: the padding/priority fields claim more than there is.
                        payload.truncate(1);
                    }
                    Frame::new(HEADERS, flags, stream, payload).encode_into(&mut out);
                }
            }
            6 => {
                let len = inp.below(3000);
                Frame::new(DATA, inp.u8(), stream, vec![0xd0; len]).encode_into(&mut out);
            }
            7 => {
                Frame::new(RST_STREAM, 0, stream, [0, 0, 0, 8]).encode_into(&mut out);
            }
            8 => {
                // A stray or interleaved CONTINUATION.
                let payload = inp.bytes_upto(16).to_vec();
                Frame::new(CONTINUATION, inp.u8(), stream, payload).encode_into(&mut out);
            }
            9 => {
                let kind = inp.u8();
                let flags = inp.u8();
                let payload = inp.bytes_upto(24).to_vec();
                Frame::new(kind, flags, stream, payload).encode_into(&mut out);
            }
            10 => {
                // Dynamic table: size updates where RFC 7541 §4.2 allows them (at the start
                // of a block; sometimes to 0 first, which empties the table, sometimes above
                // the 64 KiB the observer accepts, sometimes alone, which is an error), then
                // a literal with incremental indexing and an indexed field that may refer
                // to it.
                let mode = inp.u8();
                let mut block = Vec::new();
                let size = (mode & 1 == 1).then(|| inp.below(100_000) % 72_000);
                if let Some(size) = size {
                    if mode & 4 != 0 {
                        hpack_int(&mut block, 0x20, 5, 0);
                    }
                    hpack_int(&mut block, 0x20, 5, size);
                }
                let mut fields = vec![0x82, 0x87, 0x84];
                literal(&mut fields, true, b"priority", inp.bytes_upto(10));
                hpack_int(&mut fields, 0x80, 7, 62 + inp.below(3));
                if size.is_none() || mode & 0x18 != 0x18 {
                    block.extend(fields);
                }
                Frame::new(HEADERS, END_HEADERS, stream, block).encode_into(&mut out);
            }
            _ => {
                // Raw bytes: whatever the fuzzer wants, framing included.
                out.extend_from_slice(inp.bytes_upto(64));
            }
        }
    }
    out
}

pub fn decode_read_case(data: &[u8]) -> ReadCase {
    let mut inp = Input::new(data);
    let policy = decode_policy(inp.u8());
    let bits = inp.u8();
    let preface = match bits & 3 {
        0 | 1 => Preface::Valid,
        2 => Preface::None,
        _ => {
            if inp.bool() {
                Preface::Partial(inp.below(PREFACE.len()))
            } else {
                Preface::Corrupt(inp.below(PREFACE.len()))
            }
        }
    };
    let structured = bits & 4 == 0;
    let max_early_updates = match (bits >> 3) & 3 {
        0 => None,
        1 => Some(0),
        _ => Some(inp.below(8)),
    };
    let anticipate = match inp.u8() % 4 {
        0 => Some(Duration::ZERO),
        1 => Some(Duration::from_micros(inp.below(200) as u64)),
        _ => None,
    };
    let n = 1 + inp.below(8);
    let chunks = (0..n)
        .map(|_| match inp.u8() % 8 {
            0 => 0,
            1 => 1,
            2 | 3 => 1 + inp.below(16),
            4 | 5 => 1 + inp.below(512),
            6 => 1 + inp.below(20_000),
            _ => usize::MAX,
        })
        .collect();
    let mut chunks: Vec<usize> = chunks;
    if chunks.iter().all(|&c| c == 0) {
        chunks.push(usize::MAX);
    }
    let eof = inp.bool();
    let n = 1 + inp.below(4);
    let read_sizes = (0..n)
        .map(|_| {
            let size = match inp.u8() % 4 {
                0 => 1 + inp.below(9),
                1 => 1 + inp.below(100),
                _ => 1 + inp.below(20_000),
            };
            let prefill = if inp.u8().is_multiple_of(4) {
                inp.below(32)
            } else {
                0
            };
            (size, prefill)
        })
        .collect();
    let n_writes = if bits & 0x20 != 0 { inp.below(6) } else { 0 };
    let mut writes = Vec::new();
    let mut seq = 0u8;
    for i in 0..n_writes {
        let before_read = inp.below(64);
        let mut frames = Vec::new();
        if i == 0 {
            frames.push(Frame::new(SETTINGS, 0, 0, [0, 3, 0, 0, 0, 100]));
        }
        let stream = STREAM_IDS[inp.below(7)];
        match inp.u8() % 5 {
            0 => frames.push(Frame::new(SETTINGS, ACK, 0, Vec::new())),
            1 => {
                seq = seq.wrapping_add(1);
                frames.push(Frame::new(PING, ACK, 0, [seq; 8]));
                frames.push(Frame::new(WINDOW_UPDATE, 0, 0, 65_535u32.to_be_bytes()));
            }
            _ => {
                let mut block = vec![0x88];
                if inp.bool() {
                    let v = PRIORITY_VALUES[inp.below(PRIORITY_VALUES.len())];
                    literal(&mut block, false, b"priority", v.as_bytes());
                }
                frames.push(Frame::new(HEADERS, END_HEADERS, stream, block));
                let parts = inp.below(4);
                for k in 0..parts {
                    seq = seq.wrapping_add(1);
                    let len = inp.below(9000);
                    let flags = if k + 1 == parts && inp.bool() {
                        END_STREAM
                    } else {
                        0
                    };
                    frames.push(Frame::new(DATA, flags, stream, vec![seq; len]));
                }
            }
        }
        writes.push(ServerWrite {
            before_read,
            frames,
        });
    }
    let body = if structured {
        client_frames(&mut inp)
    } else {
        inp.rest().to_vec()
    };
    let mut client = match preface {
        Preface::Valid => PREFACE.to_vec(),
        Preface::None => Vec::new(),
        Preface::Partial(n) => PREFACE[..n].to_vec(),
        Preface::Corrupt(at) => {
            let mut p = PREFACE.to_vec();
            p[at] ^= 0x20;
            p
        }
    };
    client.extend(body);
    ReadCase {
        policy,
        max_early_updates,
        anticipate,
        preface,
        read_plan: ReadPlan { chunks, eof },
        read_sizes,
        writes,
        client,
    }
}

/// What the observer must have counted, from a reference parse of the client's bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ObserverModel {
    /// The client's bytes start with the full preface.
    pub http2: bool,
    /// Complete PRIORITY_UPDATE frames after the preface.
    pub updates: u64,
    /// Of those, malformed ones (RFC 9218 §7.1, or longer than the observer copies).
    pub invalid: u64,
    /// `(applied, buffered, ignored)` when the stream table can be followed exactly.
    pub outcomes: Option<(u64, u64, u64)>,
    /// Header-block frames (HEADERS/CONTINUATION, a last incomplete one included), for the
    /// memory bound.
    pub header_frames: u64,
    /// Payload bytes of those frames present in the input (the observer may copy them).
    pub header_bytes: u64,
}

/// The reference: a frame parser plus a model of the stream table, as documented in
/// `read_observer.rs` and `priorities.rs` (RFC 9218 §7.1 for the update's validity).
pub fn observer_model(
    client: &[u8],
    max_early_updates: usize,
    server_closes: bool,
) -> ObserverModel {
    let mut m = ObserverModel::default();
    let Some(mut rest) = client.strip_prefix(PREFACE) else {
        return m;
    };
    m.http2 = true;
    // The stream table, followed exactly unless a header frame's fragment is malformed
    // (whether it opens the stream then depends on the HPACK decoder's state) or the server
    // closes streams (timing of its writes).
    let mut exact = !server_closes;
    let mut open: Vec<u32> = Vec::new();
    let mut early: VecDeque<u32> = VecDeque::new();
    let mut highest = 0u32;
    let mut in_block: Option<u32> = None;
    let (mut applied, mut buffered, mut ignored) = (0u64, 0u64, 0u64);
    while rest.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < HEADER_LEN + len {
            // The input ends inside this frame: a header frame's bytes so far are copied
            // (the observer reassembles header blocks), so they count for the memory bound.
            if matches!(rest[3], HEADERS | CONTINUATION) {
                m.header_frames += 1;
                m.header_bytes += (rest.len() - HEADER_LEN) as u64;
            }
            break;
        }
        let kind = rest[3];
        let flags = rest[4];
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        let payload = &rest[HEADER_LEN..HEADER_LEN + len];
        rest = &rest[HEADER_LEN + len..];
        match kind {
            PRIORITY_UPDATE => {
                m.updates += 1;
                let valid = stream == 0
                    && len <= OBSERVER_MAX_SMALL_PAYLOAD
                    && payload.len() >= 4
                    && u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff
                        != 0
                    && payload[4..].is_ascii();
                if !valid {
                    m.invalid += 1;
                    continue;
                }
                let id = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                if open.contains(&id) {
                    applied += 1;
                } else if id % 2 == 0 || id <= highest {
                    ignored += 1;
                } else if early.contains(&id) {
                    buffered += 1;
                } else if early.len() >= max_early_updates {
                    ignored += 1;
                } else {
                    early.push_back(id);
                    buffered += 1;
                }
            }
            RST_STREAM => open.retain(|&s| s != stream),
            HEADERS | CONTINUATION => {
                m.header_frames += 1;
                m.header_bytes += len as u64;
                if kind == HEADERS {
                    in_block = Some(stream);
                } else if in_block != Some(stream) {
                    continue;
                }
                if len > OBSERVER_MAX_HEADER_BLOCK / 2 || !fragment_ok(kind, flags, payload) {
                    exact = false;
                }
                if flags & END_HEADERS == 0 {
                    continue;
                }
                in_block = None;
                if stream == 0 || stream % 2 == 0 || stream <= highest {
                    continue;
                }
                highest = stream;
                if open.len() >= MAX_TRACKED_STREAMS {
                    continue;
                }
                early.retain(|&s| s != stream);
                open.push(stream);
            }
            _ => {}
        }
    }
    if exact {
        m.outcomes = Some((applied, buffered, ignored));
    }
    m
}

/// Whether a HEADERS/CONTINUATION payload is long enough for its padding and priority
/// fields (`tls-flush`'s `header_block_fragment` returns `Some`).
fn fragment_ok(kind: u8, flags: u8, payload: &[u8]) -> bool {
    let mut body = payload;
    let mut pad = 0usize;
    if kind == HEADERS && flags & PADDED != 0 {
        let Some((&p, rest)) = body.split_first() else {
            return false;
        };
        pad = usize::from(p);
        body = rest;
    }
    if kind == HEADERS && flags & PRIORITY_FLAG != 0 {
        if body.len() < 5 {
            return false;
        }
        body = &body[5..];
    }
    body.len() >= pad
}

/// True when `bytes` start with a server preface SETTINGS frame (not an ACK, stream 0,
/// whole settings): only a first write like that makes the wrapper speak HTTP/2.
fn is_server_settings(bytes: &[u8]) -> bool {
    bytes.len() >= 9
        && bytes[3] == 0x4
        && bytes[4] & 0x1 == 0
        && bytes[5..9] == [0, 0, 0, 0]
        && u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]).is_multiple_of(6)
}

/// Runs one `read_observer` input; `Err` describes a violated invariant.
pub fn run_read_observer(data: &[u8]) -> Result<(), String> {
    let case = decode_read_case(data);
    run_read_case(&case).map_err(|e| {
        format!(
            "{e}\n  policy={:?} preface={:?} max_early_updates={:?} read_plan={:?} \
             read_sizes={:?} writes={} client_len={}",
            case.policy,
            case.preface,
            case.max_early_updates,
            case.read_plan,
            case.read_sizes,
            case.writes.len(),
            case.client.len()
        )
    })
}

pub fn run_read_case(case: &ReadCase) -> Result<(), String> {
    let mut wire = Wire::new(
        vec![Step::Accept(usize::MAX)],
        Buffering::Off,
        case.client.clone(),
    );
    wire.read_plan = case.read_plan.clone();
    let mut h = Harness::new(case.config(), wire);
    let server_closes = case
        .writes
        .iter()
        .flat_map(|w| &w.frames)
        .any(Frame::ends_stream);
    let model = observer_model(&case.client, case.max_early_updates(), server_closes);

    let largest_read = case
        .read_sizes
        .iter()
        .map(|&(s, p)| s + p)
        .max()
        .unwrap_or(0);
    let mut got = Vec::with_capacity(case.client.len() + largest_read);
    let mut scratch = vec![0u8; largest_read.max(16)];
    let mut written: Vec<Frame> = Vec::new();
    // Mode decided by the first write: what the client had sent until then.
    let mut first_write_read: Option<usize> = None;
    let mut first_write_settings = false;
    let baseline = memory_mark();

    let mut reads = 0usize;
    let mut stall = Stall::new(&h.wire);
    while h.wire.borrow().client_remaining() > 0 {
        for w in case.writes.iter().filter(|w| w.before_read == reads) {
            let bytes = encode_all(&w.frames);
            if first_write_read.is_none() && !bytes.is_empty() {
                first_write_read = Some(got.len());
                first_write_settings = is_server_settings(&bytes);
            }
            if h.write_all(&bytes)?.is_err() || h.flush()?.is_err() {
                return Err("a server write failed on an open transport".into());
            }
            written.extend(w.frames.iter().cloned());
        }
        let (size, prefill) = case.read_sizes[reads % case.read_sizes.len()];
        reads += 1;
        match h.read_into(&mut scratch[..size + prefill], prefill)? {
            Some(range) => {
                if range.is_empty() && h.wire.borrow().client_remaining() > 0 {
                    return Err("poll_read returned no bytes with client bytes left".into());
                }
                got.extend_from_slice(&scratch[range]);
            }
            None => {
                if stall.stuck(&h.wire) {
                    return Err("poll_read stays Pending with client bytes left".into());
                }
            }
        }
    }
    // Once more at the end: EOF (or Pending) must not disturb anything.
    let _ = h.read_into(&mut scratch[..16], 0)?;
    let peak = baseline.map(|b| memory_peak() - b);
    let retained = baseline.map(|b| memory_live() - b);

    // Every byte passed through unchanged.
    if got != case.client {
        let at = got
            .iter()
            .zip(&case.client)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(case.client.len()));
        return Err(format!(
            "poll_read delivered {} bytes differing from the client's {} at byte {at}",
            got.len(),
            case.client.len()
        ));
    }

    let s = h.stats();
    let counted = s.priority_updates_applied
        + s.priority_updates_buffered
        + s.priority_updates_ignored
        + s.priority_updates_invalid;
    // A server write decided the mode before the client's bytes did: PassThrough stops the
    // observer, HTTP/2 keeps it going on the client's bytes.
    // A first write that is not the server's SETTINGS makes it pass through from then on:
    // what the observer counted before that is a prefix of the model's updates.
    let preface_seen = match first_write_read {
        Some(r) => {
            let seen = &case.client[..r.min(case.client.len())];
            let n = seen.len().min(PREFACE.len());
            seen[..n] == PREFACE[..n]
        }
        None => true,
    };
    let observed = preface_seen && (first_write_read.is_none() || first_write_settings);
    let observed_until_first_write = preface_seen && !observed;
    if model.http2 && observed {
        if counted != model.updates {
            return Err(format!(
                "{counted} PRIORITY_UPDATE outcomes counted (applied {}, buffered {}, ignored \
                 {}, invalid {}) for {} complete PRIORITY_UPDATE frames",
                s.priority_updates_applied,
                s.priority_updates_buffered,
                s.priority_updates_ignored,
                s.priority_updates_invalid,
                model.updates
            ));
        }
        if s.priority_updates_invalid != model.invalid {
            return Err(format!(
                "{} PRIORITY_UPDATE frames counted invalid, {} are malformed",
                s.priority_updates_invalid, model.invalid
            ));
        }
        if let Some((applied, buffered, ignored)) = model.outcomes {
            let got = (
                s.priority_updates_applied,
                s.priority_updates_buffered,
                s.priority_updates_ignored,
            );
            if got != (applied, buffered, ignored) {
                return Err(format!(
                    "PRIORITY_UPDATE outcomes (applied, buffered, ignored) = {got:?}, the \
                     stream table says {:?}",
                    (applied, buffered, ignored)
                ));
            }
        }
    } else if model.http2 && observed_until_first_write {
        if counted > model.updates || s.priority_updates_invalid > model.invalid {
            return Err(format!(
                "{counted} PRIORITY_UPDATE outcomes ({} invalid) counted before the connection \
                 passed through, more than the {} ({} malformed) the client sent",
                s.priority_updates_invalid, model.updates, model.invalid
            ));
        }
    } else if counted != 0 {
        return Err(format!(
            "{counted} PRIORITY_UPDATE outcomes counted on a connection whose client bytes \
             are not observed as HTTP/2"
        ));
    }
    let hpack_limit = if written.is_empty() { 1 } else { 2 };
    if s.hpack_failures > hpack_limit {
        return Err(format!(
            "{} HPACK failures (each direction's decoder gives up once)",
            s.hpack_failures
        ));
    }

    if written.is_empty() {
        // Nothing written: nothing queued, sent or scheduled.
        let quiet = StatsSnapshot {
            priority_updates_applied: s.priority_updates_applied,
            priority_updates_buffered: s.priority_updates_buffered,
            priority_updates_ignored: s.priority_updates_ignored,
            priority_updates_invalid: s.priority_updates_invalid,
            hpack_failures: s.hpack_failures,
            priority_values_too_long: s.priority_values_too_long,
            bytes_read: s.bytes_read,
            ..StatsSnapshot::default()
        };
        if s != quiet {
            return Err(format!("counters moved without any write: {s:?}"));
        }
        // Memory: the observer copies header blocks (bounded) and small payloads, keeps the
        // HPACK table (bounded), a bounded stream table and a bounded list of early updates;
        // nothing grows with DATA, PRIORITY_UPDATE or unknown frames.
        if let (Some(peak), Some(retained)) = (peak, retained) {
            // Reassembly buffers (payload and block, capacity up to twice their content),
            // the HPACK table (its entries come from literals in the header bytes, several
            // times over for small entries, and the table is capped), the decoded priority
            // value (one capped buffer: references to a large table entry are never copied
            // per reference), a map entry per opened stream, the early updates, the
            // small-payload buffer, and slack.
            let header_bytes = model.header_bytes as isize;
            let bound = 16 * 1024
                + 4 * header_bytes.min(OBSERVER_MAX_HEADER_BLOCK as isize)
                + (16 * header_bytes).min(4 * 64 * 1024)
                + 2 * OBSERVER_MAX_PRIORITY_VALUE as isize
                + 256 * model.header_frames as isize
                + 2 * (OBSERVER_MAX_SMALL_PAYLOAD as isize)
                + 64 * case.max_early_updates() as isize;
            if peak > bound || retained > bound {
                return Err(format!(
                    "memory grew by {peak} bytes at the peak ({retained} retained) reading \
                     {} client bytes; bound {bound} ({} header frames with {} bytes)",
                    case.client.len(),
                    model.header_frames,
                    model.header_bytes
                ));
            }
        }
        return Ok(());
    }

    // The server's frames: whole, exact, in order, everything delivered.
    if h.settle()?.is_err() || h.shutdown()?.is_err() {
        return Err("flush or shutdown failed on an open transport".into());
    }
    let output = h.wire.borrow().accepted.clone();
    if !h.is_http2() {
        // PassThrough: the bytes as written.
        if output != encode_all(&written) {
            return Err("pass-through output differs from what was written".into());
        }
        return Ok(());
    }
    let out = parse_frames(&output)?;
    let perm = match_frames(&written, &out)?;
    check_header_blocks(&out, &perm)?;
    check_settings_barriers(&out, &perm)?;
    check_control_not_overtaken(&out, &perm)?;
    if h.stats().queued_bytes != 0 {
        return Err("bytes still queued after shutdown".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// priority_parse and priority_update_parse (tower-priority)
// ---------------------------------------------------------------------------------------

/// `Priority::parse` on arbitrary input: never panics, always yields a valid priority that
/// round-trips through its canonical form.
pub fn run_priority_parse(data: &[u8]) -> Result<(), String> {
    use tower_priority::Priority;
    let input = String::from_utf8_lossy(data);
    let p = Priority::parse(&input);
    if p.urgency > 7 {
        return Err(format!("urgency out of range: {p:?} from {input:?}"));
    }
    let again = Priority::parse(&p.to_string());
    if again != p {
        return Err(format!(
            "round trip of {input:?}: {p:?} printed as {:?} parses as {again:?}",
            p.to_string()
        ));
    }
    Ok(())
}

/// `PriorityUpdate::parse` on arbitrary payloads: never panics, and its verdict agrees with
/// the frame layout of RFC 9218 §7.1.
pub fn run_priority_update_parse(data: &[u8]) -> Result<(), String> {
    use tower_priority::{Priority, PriorityUpdate, PriorityUpdateError};
    let ok = match PriorityUpdate::parse(data) {
        Ok(update) => {
            data.len() >= 4
                && update.prioritized_stream_id != 0
                && update.prioritized_stream_id <= 0x7FFF_FFFF
                && update.priority.urgency <= 7
                // The field value is ASCII, hence UTF-8, and parses like a header.
                && std::str::from_utf8(&data[4..])
                    .is_ok_and(|field| update.priority == Priority::parse(field))
        }
        Err(PriorityUpdateError::TooShort) => data.len() < 4,
        Err(PriorityUpdateError::ZeroStreamId) => data[0] & 0x7F == 0 && data[1..4] == [0, 0, 0],
        Err(PriorityUpdateError::NonAscii) => !data[4..].is_ascii(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "PriorityUpdate::parse({data:02x?}) = {:?} disagrees with RFC 9218 §7.1",
            PriorityUpdate::parse(data)
        ))
    }
}
