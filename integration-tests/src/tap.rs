//! Taps on the client's byte streams: under TLS (ciphertext: record boundaries and arrival
//! times) and above TLS (plaintext: HTTP/2 frames as h2 receives them).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One TLS record received from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordEvent {
    /// When its last byte arrived.
    pub at: Instant,
    /// TLS content type of the outer header (23 = application data in TLS 1.3).
    pub content_type: u8,
    /// Length of the record body (ciphertext).
    pub len: usize,
}

/// One HTTP/2 frame received, as seen above TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameEvent {
    /// When its first byte was delivered to h2.
    pub first_byte_at: Instant,
    /// When its last byte was delivered to h2.
    pub last_byte_at: Instant,
    /// Frame type.
    pub kind: u8,
    /// Frame flags.
    pub flags: u8,
    /// Stream identifier.
    pub stream_id: u32,
    /// Payload length.
    pub len: usize,
    /// Offset in the decrypted byte stream just past the frame's last byte.
    pub end_offset: u64,
}

/// Everything the taps saw on one connection.
#[derive(Debug, Default, Clone)]
pub struct TapLog {
    /// TLS records, in arrival order.
    pub records: Vec<RecordEvent>,
    /// HTTP/2 frames, in arrival order.
    pub frames: Vec<FrameEvent>,
    /// Ciphertext bytes received.
    pub wire_bytes: u64,
    /// Plaintext bytes delivered to h2.
    pub plain_bytes: u64,
}

/// Shared handle on a [`TapLog`].
pub type SharedLog = Arc<Mutex<TapLog>>;

/// Parses a byte stream into units with a fixed-size header that announces the body size.
#[derive(Debug)]
struct Framer {
    header: Vec<u8>,
    header_len: usize,
    remaining: usize,
    first_byte_at: Option<Instant>,
    /// Bytes consumed so far: the offset just past the last byte fed.
    consumed: u64,
}

impl Framer {
    fn new(header_len: usize) -> Self {
        Framer {
            header: Vec::with_capacity(header_len),
            header_len,
            remaining: 0,
            first_byte_at: None,
            consumed: 0,
        }
    }

    /// Feeds bytes; calls `done(header, first_byte_at, end_offset)` for every completed unit.
    fn feed(
        &mut self,
        mut bytes: &[u8],
        now: Instant,
        body_len: impl Fn(&[u8]) -> usize,
        mut done: impl FnMut(&[u8], Instant, u64),
    ) {
        while !bytes.is_empty() {
            if self.header.len() < self.header_len {
                if self.header.is_empty() {
                    self.first_byte_at = Some(now);
                }
                let n = (self.header_len - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..n]);
                self.consumed += n as u64;
                bytes = &bytes[n..];
                if self.header.len() < self.header_len {
                    return;
                }
                self.remaining = body_len(&self.header);
            }
            let n = self.remaining.min(bytes.len());
            self.remaining -= n;
            self.consumed += n as u64;
            bytes = &bytes[n..];
            if self.remaining == 0 {
                done(
                    &self.header,
                    self.first_byte_at.unwrap_or(now),
                    self.consumed,
                );
                self.header.clear();
            }
        }
    }
}

/// A stream wrapper that records what is read through it, and can hold reads back.
#[derive(Debug)]
pub struct Tap<S> {
    inner: S,
    kind: TapKind,
    framer: Framer,
    log: SharedLog,
    gate: ReadGate,
    injector: Injector,
    /// Where the client's own writes are: inside its preface, or frame by frame.
    outgoing: Framer,
    preface_left: usize,
    /// Bytes of an injected frame being written; h2 waits until they are out.
    injecting: Vec<u8>,
}

/// Queues raw HTTP/2 frames for the tap to slip between the client's own frames
/// (PRIORITY_UPDATE and malformed frames that the h2 crate cannot send).
#[derive(Debug, Clone, Default)]
pub struct Injector {
    inner: Arc<Mutex<InjectorState>>,
    /// Signalled whenever the tap takes the queued frames.
    taken: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default)]
struct InjectorState {
    frames: Vec<u8>,
    waker: Option<Waker>,
}

impl Injector {
    /// Queues one frame; it goes out at the next frame boundary of the client's writes.
    pub fn send_frame(&self, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
        let mut state = self.inner.lock().expect("injector poisoned");
        let len = (payload.len() as u32).to_be_bytes();
        state.frames.extend_from_slice(&len[1..]);
        state.frames.push(kind);
        state.frames.push(flags);
        state.frames.extend_from_slice(&stream_id.to_be_bytes());
        state.frames.extend_from_slice(payload);
        if let Some(w) = state.waker.take() {
            w.wake();
        }
    }

    /// True when the tap took every queued frame: they are written before anything the
    /// client writes next.
    pub fn is_idle(&self) -> bool {
        self.inner
            .lock()
            .expect("injector poisoned")
            .frames
            .is_empty()
    }

    /// Waits until [`Self::is_idle`].
    pub async fn idle(&self) {
        loop {
            let taken = self.taken.notified();
            tokio::pin!(taken);
            // Registered before the check, so a take in between is not missed.
            taken.as_mut().enable();
            if self.is_idle() {
                return;
            }
            taken.await;
        }
    }

    /// Registers the tap's task for the next [`Self::send_frame`].
    fn register(&self, cx: &Context<'_>) {
        self.inner.lock().expect("injector poisoned").waker = Some(cx.waker().clone());
    }

    fn take(&self) -> Vec<u8> {
        let frames = std::mem::take(&mut self.inner.lock().expect("injector poisoned").frames);
        if !frames.is_empty() {
            self.taken.notify_waiters();
        }
        frames
    }
}

#[derive(Debug, Clone, Copy)]
enum TapKind {
    Records,
    Frames,
}

impl<S> Tap<S> {
    /// Taps TLS records read from `inner` (the socket under the client's TLS).
    pub fn records(inner: S, log: SharedLog, gate: ReadGate) -> Self {
        Tap {
            inner,
            kind: TapKind::Records,
            framer: Framer::new(5),
            log,
            gate,
            injector: Injector::default(),
            outgoing: Framer::new(9),
            preface_left: 0,
            injecting: Vec::new(),
        }
    }

    /// Taps HTTP/2 frames read from `inner` (the client's TLS stream); frames queued on
    /// `injector` are written between the client's own frames.
    pub fn frames(inner: S, log: SharedLog, injector: Injector) -> Self {
        Tap {
            inner,
            kind: TapKind::Frames,
            framer: Framer::new(9),
            log,
            gate: ReadGate::default(),
            injector,
            outgoing: Framer::new(9),
            preface_left: 24,
            injecting: Vec::new(),
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    fn observe(&mut self, bytes: &[u8]) {
        let now = Instant::now();
        let mut log = self.log.lock().expect("tap log poisoned");
        match self.kind {
            TapKind::Records => {
                log.wire_bytes += bytes.len() as u64;
                self.framer.feed(
                    bytes,
                    now,
                    |h| u16::from_be_bytes([h[3], h[4]]) as usize,
                    |h, _, _| {
                        log.records.push(RecordEvent {
                            at: now,
                            content_type: h[0],
                            len: u16::from_be_bytes([h[3], h[4]]) as usize,
                        })
                    },
                );
            }
            TapKind::Frames => {
                log.plain_bytes += bytes.len() as u64;
                self.framer.feed(
                    bytes,
                    now,
                    |h| u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize,
                    |h, first, end_offset| {
                        log.frames.push(FrameEvent {
                            first_byte_at: first,
                            last_byte_at: now,
                            kind: h[3],
                            flags: h[4],
                            stream_id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                            len: u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize,
                            end_offset,
                        })
                    },
                )
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> Tap<S> {
    /// True between two of the client's frames (not inside its preface or a frame).
    fn at_boundary(&self) -> bool {
        self.preface_left == 0 && self.outgoing.header.is_empty()
    }

    /// Writes injected frames while at a frame boundary. `Ready(Ok)` once none is pending.
    fn poll_inject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !matches!(self.kind, TapKind::Frames) {
            return Poll::Ready(Ok(()));
        }
        // Registered on every poll, not only at a boundary: a frame queued while the
        // client is inside one of its own must still wake the task.
        self.injector.register(cx);
        loop {
            // Frames queued while earlier ones were being written are taken here too: their
            // wake-up was spent on the poll that went on writing.
            if self.injecting.is_empty() && self.at_boundary() {
                self.injecting = self.injector.take();
            }
            if self.injecting.is_empty() {
                return Pin::new(&mut self.inner).poll_flush(cx);
            }
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &self.injecting))?;
            self.injecting.drain(..n);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // h2 polls reads constantly: a good moment to slip injected frames in.
        if let Poll::Ready(Err(err)) = self.poll_inject(cx) {
            return Poll::Ready(Err(err));
        }
        let allowance = self.gate.allowance(cx);
        if allowance == Some(0) {
            return Poll::Pending;
        }
        let Some(allowance) = allowance else {
            // No budget: read straight into the caller's buffer.
            let before = buf.filled().len();
            let result = Pin::new(&mut self.inner).poll_read(cx, buf);
            let new = buf.filled()[before..].to_vec();
            if !new.is_empty() {
                self.observe(&new);
            }
            return result;
        };
        let mut scratch = vec![0u8; (allowance as usize).min(buf.remaining())];
        let mut limited = ReadBuf::new(&mut scratch);
        let result = Pin::new(&mut self.inner).poll_read(cx, &mut limited);
        let new = limited.filled().to_vec();
        if !new.is_empty() {
            buf.put_slice(&new);
            self.gate.spend(new.len() as u64);
            self.observe(&new);
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_inject(cx))?;
        let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        // Follow the client's frame boundaries so injections never split one of its frames.
        let mut written = &buf[..n];
        let skip = self.preface_left.min(written.len());
        self.preface_left -= skip;
        written = &written[skip..];
        let now = Instant::now();
        self.outgoing.feed(
            written,
            now,
            |h| u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize,
            |_, _, _| {},
        );
        if self.at_boundary() && !self.injector.is_idle() {
            // Frames queued while the client was inside a frame go at this boundary: poll
            // again, h2 may not write or read for a while.
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(n))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Lets a test stop the client from reading its socket (a slow reader), then resume.
///
/// ```
/// let gate = integration_tests::ReadGate::default();
/// gate.close();
/// gate.open();
/// ```
#[derive(Debug, Clone, Default)]
pub struct ReadGate {
    inner: Arc<Mutex<GateState>>,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    /// Bytes that may still be read before the gate closes by itself.
    budget: Option<u64>,
    waker: Option<Waker>,
}

impl ReadGate {
    /// Holds reads back until [`open`](Self::open).
    pub fn close(&self) {
        self.inner.lock().expect("gate poisoned").closed = true;
    }

    /// Lets `bytes` more bytes through, then closes: a pause that starts at an exact point
    /// of the byte stream, however fast the sender is.
    pub fn close_after(&self, bytes: u64) {
        self.inner.lock().expect("gate poisoned").budget = Some(bytes);
    }

    /// Adds `bytes` to the budget of a gate that [`close_after`](Self::close_after) set
    /// (or that is closed), and lets them through: a slow reader, a little at a time.
    pub fn allow(&self, bytes: u64) {
        let mut state = self.inner.lock().expect("gate poisoned");
        state.closed = false;
        state.budget = Some(state.budget.unwrap_or(0) + bytes);
        if let Some(w) = state.waker.take() {
            w.wake();
        }
    }

    /// True once the gate has closed (by [`close`](Self::close) or a spent budget).
    pub fn is_shut(&self) -> bool {
        let state = self.inner.lock().expect("gate poisoned");
        state.closed || state.budget == Some(0)
    }

    /// Lets reads through again.
    pub fn open(&self) {
        let mut state = self.inner.lock().expect("gate poisoned");
        state.closed = false;
        state.budget = None;
        if let Some(w) = state.waker.take() {
            w.wake();
        }
    }

    /// How many bytes may be read now: `Some(0)` means closed (and the waker is kept).
    fn allowance(&self, cx: &Context<'_>) -> Option<u64> {
        let mut state = self.inner.lock().expect("gate poisoned");
        let allowance = if state.closed { Some(0) } else { state.budget };
        if allowance == Some(0) {
            state.waker = Some(cx.waker().clone());
        }
        allowance
    }

    fn spend(&self, bytes: u64) {
        let mut state = self.inner.lock().expect("gate poisoned");
        if let Some(budget) = &mut state.budget {
            *budget = budget.saturating_sub(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framer_handles_split_units() {
        let mut f = Framer::new(5);
        let mut got = Vec::new();
        let wire = [
            23u8, 3, 3, 0, 2, 0xaa, 0xbb, 23, 3, 3, 0, 0, 21, 3, 3, 0, 1, 9,
        ];
        for b in wire {
            f.feed(
                &[b],
                Instant::now(),
                |h| u16::from_be_bytes([h[3], h[4]]) as usize,
                |h, _, _| got.push((h[0], h[4])),
            );
        }
        assert_eq!(got, vec![(23, 2), (23, 0), (21, 1)]);
    }

    /// Frames queued while an earlier batch is still being written (the wire full) go out
    /// once it drains, with no other poll of the tap than the wake-ups it asked for.
    #[tokio::test]
    async fn frames_queued_during_an_injection_are_written_after_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let (client_side, mut server_side) = tokio::io::duplex(64);
        let injector = Injector::default();
        let mut tap = Tap::frames(client_side, SharedLog::default(), injector.clone());
        tap.write_all(PREFACE).await.unwrap();
        // The client's connection task: it only reads, as h2 does while it has nothing to
        // write.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let _ = tap.read(&mut buf).await;
        });
        injector.send_frame(0x10, 0, 0, &[1; 200]);
        tokio::task::yield_now().await;
        assert!(injector.is_idle(), "the first batch was taken");
        injector.send_frame(0x10, 0, 0, &[2; 200]);
        // 24 bytes of preface and two frames of 9 + 200 bytes.
        let mut wire = vec![0u8; 24 + 2 * 209];
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            server_side.read_exact(&mut wire),
        )
        .await;
        assert!(read.is_ok(), "the second batch stayed queued");
        assert_eq!(&wire[..24], PREFACE);
        assert!(wire[24 + 9..24 + 209].iter().all(|&b| b == 1));
        assert!(wire[24 + 209 + 9..].iter().all(|&b| b == 2));
        reader.abort();
    }
}
