//! The urgent path's cost per response against stock, over an in-memory transport.
//!
//! Each iteration is one turn of a connection the way hyper and h2 drive it: the client's
//! request HEADERS (`priority: u=0`, END_STREAM) are read through the wrapper, whose read
//! observer learns their urgency; then h2 writes each response as it does (one vectored
//! write of the HEADERS frame and the DATA frame header, then the 4 KiB payload, then a
//! flush), next to a frame of a long `u=3` download, and flushes once more when its batch
//! is over. A flush that asks to be polled again (the record writer's cork) is polled again,
//! as the executor would. Header blocks are HPACK-coded as h2load and h2 code them on a
//! warm connection: literals with incremental indexing once, then indexed fields.
//!
//! Scenarios (the time per element is the time per urgent response):
//! - `alone`: one urgent response per turn, nothing else (h2load's `/critical` run);
//! - `single`: one urgent response per turn and one 16 KiB DATA frame of the download;
//! - `batched`: ten urgent responses ready in the same turn: h2 writes them (and a frame of
//!   the download) while the socket is full, then it drains, so the record writer finds them
//!   queued together (`batches_next_urgent`).
//!
//! Variants: `stock` (h2's bytes straight to the transport), `passthrough` (the wrapper on
//! a transport that negotiated another protocol: its fixed cost) and each [`Policy`].
//! Read the medians as ratios against `stock` in the same run. Before measuring, the bench
//! checks that every variant delivers the same bytes and prints the heap allocations and
//! transport writes per response.
//!
//! `cargo bench -p tls-flush --bench urgent_path`

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tls_flush::{FlushConfig, FlushStream, PathState, Policy, Transport};
use tls_flush_testkit::{
    hpack_int, hpack_string, settings_frame, Frame, DATA, END_HEADERS, END_STREAM, HEADERS,
    HEADER_LEN, PREFACE,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Counts heap allocations (calls, not bytes), for the allocations per response printed
/// before the measurements.
struct CountingAllocs;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the same arguments; the count is a
// relaxed atomic increment, which neither allocates nor panics.
unsafe impl GlobalAlloc for CountingAllocs {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocs = CountingAllocs;

/// The urgent responses' body: `/critical` in `scripts/scale.sh`.
const URGENT_BODY: usize = 4096;
/// The download's DATA frames: h2's default largest frame (SETTINGS_MAX_FRAME_SIZE).
const BULK_FRAME: usize = 16384;
/// The download's stream; the urgent requests take the odd ids after it.
const BULK_STREAM: u32 = 1;
/// Urgent responses ready in the same turn in the `batched` scenario.
const BATCH: usize = 10;
/// hyper's initial read buffer (8 KiB) grows with what it reads; 16 KiB is where a busy
/// connection's reads settle.
const READ_BUF: usize = 16384;
/// TCP's payload per segment on loopback (MTU 65536 minus headers and options).
const LOOPBACK_MSS: u32 = 65483;
/// A loopback round trip, well below [`tls_flush::MIN_PACED_RTT`].
const LOOPBACK_RTT: Duration = Duration::from_micros(30);
/// Re-polls of a flush that woke its own task, at most, per turn (the cork waits one turn).
const MAX_REPOLLS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Alone,
    Single,
    Batched,
}

impl Scenario {
    const ALL: [Scenario; 3] = [Scenario::Alone, Scenario::Single, Scenario::Batched];

    fn name(self) -> &'static str {
        match self {
            Scenario::Alone => "alone",
            Scenario::Single => "single",
            Scenario::Batched => "batched",
        }
    }

    fn responses(self) -> usize {
        match self {
            Scenario::Alone | Scenario::Single => 1,
            Scenario::Batched => BATCH,
        }
    }

    fn bulk(self) -> bool {
        self != Scenario::Alone
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Stock,
    Passthrough,
    Wrapped(Policy),
}

impl Variant {
    fn all() -> impl Iterator<Item = Variant> {
        [Variant::Stock, Variant::Passthrough]
            .into_iter()
            .chain(Policy::ALL.map(Variant::Wrapped))
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Stock => "stock",
            Variant::Passthrough => "passthrough",
            Variant::Wrapped(policy) => policy.name(),
        }
    }
}

/// The transport's state, shared with the bench loop while the wrapper owns the transport.
#[derive(Default)]
struct Wire {
    /// The client's bytes not yet read.
    incoming: RefCell<Vec<u8>>,
    read_at: Cell<usize>,
    /// While set, writes and write readiness are `Pending` (a full socket).
    blocked: Cell<bool>,
    written: Cell<u64>,
    writes: Cell<u64>,
}

/// An in-memory transport: reads what the bench queued, discards and counts what is
/// written, and reports ALPN as given.
struct BenchIo {
    wire: Rc<Wire>,
    alpn: &'static [u8],
}

impl AsyncRead for BenchIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut incoming = self.wire.incoming.borrow_mut();
        let at = self.wire.read_at.get();
        if at == incoming.len() {
            return Poll::Pending;
        }
        let n = buf.remaining().min(incoming.len() - at);
        buf.put_slice(&incoming[at..at + n]);
        if at + n == incoming.len() {
            incoming.clear();
            self.wire.read_at.set(0);
        } else {
            self.wire.read_at.set(at + n);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for BenchIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.wire.blocked.get() {
            return Poll::Pending;
        }
        self.wire
            .written
            .set(self.wire.written.get() + buf.len() as u64);
        self.wire.writes.set(self.wire.writes.get() + 1);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.wire.blocked.get() {
            return Poll::Pending;
        }
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        self.wire.written.set(self.wire.written.get() + n as u64);
        self.wire.writes.set(self.wire.writes.get() + 1);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Transport for BenchIo {
    fn alpn_protocol(&self) -> Option<&[u8]> {
        Some(self.alpn)
    }

    /// A loopback connection's, as `scripts/scale.sh` measures on: the write budget finds
    /// the path unpaced (records pack several urgent responses, writes several records).
    fn path_state(&self) -> Option<PathState> {
        Some(PathState {
            cwnd: 10,
            mss: LOOPBACK_MSS,
            min_rtt: LOOPBACK_RTT,
            srtt: LOOPBACK_RTT,
            ..PathState::default()
        })
    }

    fn poll_write_ready(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.wire.blocked.get() {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }
}

/// The server side as hyper sees it: the bare transport (stock) or the wrapper on it.
enum Server {
    Stock(BenchIo),
    /// Boxed: the wrapper is a few KiB, the bare transport two pointers.
    Wrapped(Box<FlushStream<BenchIo>>),
}

impl Server {
    fn io(&mut self) -> Pin<&mut (dyn AsyncReadWrite + Unpin)> {
        match self {
            Server::Stock(io) => Pin::new(io),
            Server::Wrapped(stream) => Pin::new(&mut **stream),
        }
    }
}

trait AsyncReadWrite: AsyncRead + AsyncWrite {}
impl<T: AsyncRead + AsyncWrite> AsyncReadWrite for T {}

/// Notes that the task asked to be polled again.
#[derive(Default)]
struct Woken(std::sync::atomic::AtomicBool);

impl Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// HPACK indices of the dynamic table entries the first urgent request and response insert
/// (RFC 7541 §2.3.3: the newest entry is 62).
const NEWEST: usize = 62;

/// The header block of an urgent request: on the connection's first one, literals with
/// incremental indexing (`:path`, `:authority`, `user-agent`, `priority`); afterwards the
/// same fields indexed, as h2load's encoder sends them.
fn urgent_request_block(first: bool) -> Vec<u8> {
    // :method GET, :scheme https.
    let mut block = vec![0x82, 0x87];
    if first {
        for (name_index, value) in [
            (4, &b"/critical"[..]),
            (1, b"localhost:8443"),
            (58, b"h2load nghttp2/1.59.0"),
        ] {
            hpack_int(&mut block, 0x40, 6, name_index);
            hpack_string(&mut block, value);
        }
        block.push(0x40);
        hpack_string(&mut block, b"priority");
        hpack_string(&mut block, b"u=0");
    } else {
        // Newest first: priority, user-agent, :authority, :path.
        for age in (0..4).rev() {
            hpack_int(&mut block, 0x80, 7, NEWEST + age);
        }
    }
    block
}

/// The header block of an urgent response as h2 encodes hyper's: `:status 200`, then
/// `content-length` and `date`, literals with incremental indexing the first time, indexed
/// afterwards.
fn urgent_response_block(first: bool) -> Vec<u8> {
    let mut block = vec![0x88];
    if first {
        for (name_index, value) in [(28, &b"4096"[..]), (33, b"Mon, 01 Jan 2024 00:00:00 GMT")] {
            hpack_int(&mut block, 0x40, 6, name_index);
            hpack_string(&mut block, value);
        }
    } else {
        for age in (0..2).rev() {
            hpack_int(&mut block, 0x80, 7, NEWEST + age);
        }
    }
    block
}

fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEADER_LEN] {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// One connection under test and the bytes its turns replay.
struct Connection {
    server: Server,
    /// The wrapper queues h2's frames (a policy's pipeline is on): the `batched` turns
    /// block the socket while h2 writes.
    queues: bool,
    wire: Rc<Wire>,
    woken: std::sync::Arc<Woken>,
    waker: Waker,
    next_stream: u32,
    read_buf: Vec<u8>,
    /// An urgent request's HEADERS frame (stream id patched in), first and later ones.
    request: [Vec<u8>; 2],
    /// h2's first write of an urgent response: its HEADERS frame, then the DATA frame's
    /// header (stream ids patched in), first and later ones.
    head: [Vec<u8>; 2],
    urgent_body: Vec<u8>,
    bulk_head: [u8; HEADER_LEN],
    bulk_body: Vec<u8>,
    /// Urgent requests so far (the first one's blocks are the literal forms).
    served: usize,
}

impl Connection {
    /// A connection past its preface and SETTINGS exchange, with the download's request
    /// read and its response HEADERS written.
    fn new(variant: Variant) -> Self {
        let wire = Rc::new(Wire::default());
        let io = BenchIo {
            wire: Rc::clone(&wire),
            alpn: if variant == Variant::Passthrough {
                b"http/1.1"
            } else {
                b"h2"
            },
        };
        let server = match variant {
            Variant::Stock => Server::Stock(io),
            Variant::Passthrough => Server::Wrapped(Box::new(FlushStream::new(
                io,
                FlushConfig::for_policy(Policy::Scheduled),
            ))),
            Variant::Wrapped(policy) => Server::Wrapped(Box::new(FlushStream::new(
                io,
                FlushConfig::for_policy(policy),
            ))),
        };
        let request = [true, false].map(|first| {
            let block = urgent_request_block(first);
            let mut frame =
                frame_header(block.len(), HEADERS, END_HEADERS | END_STREAM, 0).to_vec();
            frame.extend_from_slice(&block);
            frame
        });
        let head = [true, false].map(|first| {
            let block = urgent_response_block(first);
            let mut head = frame_header(block.len(), HEADERS, END_HEADERS, 0).to_vec();
            head.extend_from_slice(&block);
            head.extend_from_slice(&frame_header(URGENT_BODY, DATA, END_STREAM, 0));
            head
        });
        let woken = std::sync::Arc::new(Woken::default());
        let mut conn = Connection {
            server,
            queues: matches!(variant, Variant::Wrapped(_)),
            wire,
            waker: Waker::from(std::sync::Arc::clone(&woken)),
            woken,
            next_stream: BULK_STREAM + 2,
            read_buf: vec![0; READ_BUF],
            request,
            head,
            urgent_body: vec![0x5a; URGENT_BODY],
            bulk_head: frame_header(BULK_FRAME, DATA, 0, BULK_STREAM),
            bulk_body: vec![0xa5; BULK_FRAME],
            served: 0,
        };
        // The client's preface, SETTINGS and the download's request (no `priority`: u=3).
        let mut client = PREFACE.to_vec();
        settings_frame(0, &[]).encode_into(&mut client);
        Frame::new(
            HEADERS,
            END_HEADERS | END_STREAM,
            BULK_STREAM,
            vec![0x82, 0x87, 0x84],
        )
        .encode_into(&mut client);
        conn.wire.incoming.borrow_mut().extend_from_slice(&client);
        conn.read_all();
        // The server's SETTINGS, the ACK of the client's, the download's HEADERS.
        let mut server = settings_frame(0, &[(3, 100)]).encode();
        settings_frame(1, &[]).encode_into(&mut server);
        Frame::new(HEADERS, END_HEADERS, BULK_STREAM, vec![0x88]).encode_into(&mut server);
        conn.write(&[&server]);
        conn.flush_until_idle();
        conn
    }

    fn read_all(&mut self) {
        let mut cx = Context::from_waker(&self.waker);
        loop {
            let mut buf = ReadBuf::new(&mut self.read_buf);
            match self.server.io().poll_read(&mut cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {}
                Poll::Pending => return,
                other => panic!("read: {other:?}"),
            }
        }
    }

    /// One write of h2's: all of `parts`, in vectored writes. A write the wrapper refuses
    /// behind a blocked socket waits until the socket drains.
    fn write(&mut self, parts: &[&[u8]]) {
        let mut cx = Context::from_waker(&self.waker);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut done = 0;
        while done < total {
            let mut skip = done;
            let mut slices = [IoSlice::new(&[]); 2];
            let mut n = 0;
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                slices[n] = IoSlice::new(&part[skip..]);
                skip = 0;
                n += 1;
            }
            match self.server.io().poll_write_vectored(&mut cx, &slices[..n]) {
                Poll::Ready(Ok(n)) if n > 0 => done += n,
                Poll::Pending if self.wire.blocked.get() => self.wire.blocked.set(false),
                other => panic!("write refused: {other:?}"),
            }
        }
    }

    fn flush(&mut self) {
        let mut cx = Context::from_waker(&self.waker);
        match self.server.io().poll_flush(&mut cx) {
            Poll::Ready(Ok(())) => {}
            other => panic!("flush: {other:?}"),
        }
    }

    /// h2's flush at the end of its batch, polled again while it asks to be.
    fn flush_until_idle(&mut self) {
        for _ in 0..MAX_REPOLLS {
            self.woken.0.store(false, Ordering::Relaxed);
            self.flush();
            if !self.woken.0.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// One turn: `scenario`'s urgent requests read, their responses written (and a frame
    /// of the download), everything flushed.
    fn turn(&mut self, scenario: Scenario) {
        let responses = scenario.responses();
        {
            let mut incoming = self.wire.incoming.borrow_mut();
            for i in 0..responses {
                let stream = self.next_stream + 2 * i as u32;
                let request = &self.request[usize::from(self.served + i > 0)];
                let at = incoming.len();
                incoming.extend_from_slice(request);
                incoming[at + 5..at + 9].copy_from_slice(&stream.to_be_bytes());
            }
        }
        self.read_all();
        // Behind a full socket the wrapper queues what h2 writes (stock: h2 keeps it).
        self.wire
            .blocked
            .set(scenario == Scenario::Batched && self.queues);
        for _ in 0..responses {
            let stream = self.next_stream;
            self.next_stream += 2;
            let mut head = std::mem::take(&mut self.head[usize::from(self.served > 0)]);
            self.served += 1;
            let data_at = head.len() - HEADER_LEN;
            for at in [5, data_at + 5] {
                head[at..at + 4].copy_from_slice(&stream.to_be_bytes());
            }
            let body = std::mem::take(&mut self.urgent_body);
            self.write(&[&head, &body]);
            self.urgent_body = body;
            let slot = usize::from(self.served > 1);
            if self.head[slot].is_empty() {
                self.head[slot] = head;
            }
            self.flush();
        }
        if scenario.bulk() {
            let (head, body) = (self.bulk_head, std::mem::take(&mut self.bulk_body));
            self.write(&[&head, &body]);
            self.bulk_body = body;
            self.flush();
        }
        self.wire.blocked.set(false);
        self.flush_until_idle();
    }

    fn queued(&self) -> u64 {
        match &self.server {
            Server::Stock(_) => 0,
            Server::Wrapped(s) => s.stats().snapshot().queued_bytes,
        }
    }
}

/// Runs a few turns of each variant: every variant must deliver the same bytes with
/// nothing left queued. Prints the allocations and transport writes per response.
fn check_and_count(scenario: Scenario) {
    const TURNS: usize = 200;
    let mut delivered = None;
    for variant in Variant::all() {
        let mut conn = Connection::new(variant);
        // Warm up: the first turns grow buffers and tables.
        for _ in 0..10 {
            conn.turn(scenario);
        }
        let (bytes, writes) = (conn.wire.written.get(), conn.wire.writes.get());
        let allocs = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..TURNS {
            conn.turn(scenario);
        }
        let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs;
        let responses = (TURNS * scenario.responses()) as f64;
        assert_eq!(conn.queued(), 0, "{}: bytes left queued", variant.name());
        // The wrapper adds SETTINGS_NO_RFC7540_PRIORITIES (6 bytes) to the first SETTINGS.
        let extra = if matches!(variant, Variant::Wrapped(_)) {
            6
        } else {
            0
        };
        let total = conn.wire.written.get() - extra;
        match delivered {
            None => delivered = Some(total),
            Some(d) => assert_eq!(total, d, "{}: bytes delivered", variant.name()),
        }
        eprintln!(
            "urgent_path/{}/{}: {:.2} allocations, {:.2} transport writes, {:.0} bytes per response",
            scenario.name(),
            variant.name(),
            allocs as f64 / responses,
            (conn.wire.writes.get() - writes) as f64 / responses,
            (conn.wire.written.get() - bytes) as f64 / responses,
        );
    }
}

fn urgent_path(c: &mut Criterion) {
    for scenario in Scenario::ALL {
        check_and_count(scenario);
        let mut group = c.benchmark_group(format!("urgent_path/{}", scenario.name()));
        group
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .throughput(Throughput::Elements(scenario.responses() as u64));
        for variant in Variant::all() {
            let mut conn = Connection::new(variant);
            group.bench_function(BenchmarkId::from_parameter(variant.name()), |b| {
                b.iter(|| conn.turn(scenario))
            });
            // A turn delivers everything (also when the filter skipped this variant, whose
            // first record still waits for DATA).
            conn.turn(scenario);
            assert_eq!(conn.queued(), 0, "{}: bytes left queued", variant.name());
        }
        group.finish();
    }
}

criterion_group!(benches, urgent_path);
criterion_main!(benches);
