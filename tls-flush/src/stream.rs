//! [`FlushStream`]: the wrapper hyper reads from and writes to.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::{FlushConfig, SharedSetup};
use crate::frame::Verdict;
use crate::priorities::StreamPriorities;
use crate::read_observer::ReadObserver;
use crate::stats::ConnectionStats;
use crate::transport::Transport;
use crate::write_path::{Drive, WritePath};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No ALPN: decided by the first bytes (client preface, or h2's SETTINGS).
    Undecided,
    Http2,
    PassThrough,
}

/// Wraps a server-side transport (TLS or plain TCP) under hyper so that RFC 9218
/// priorities reach the wire. See the crate documentation for what it does.
///
/// ```no_run
/// # async fn run(tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
/// use tls_flush::{FlushConfig, FlushStream};
///
/// let stream = FlushStream::new(tls, FlushConfig::default());
/// let stats = stream.stats();
/// // hand `hyper_util::rt::TokioIo::new(stream)` to hyper ...
/// println!("{:?}", stats.snapshot());
/// # }
/// ```
#[derive(Debug)]
pub struct FlushStream<T> {
    io: T,
    mode: Mode,
    config: Arc<FlushConfig>,
    priorities: StreamPriorities,
    read: ReadObserver,
    write: WritePath,
    stats: ConnectionStats,
}

impl<T: Transport> FlushStream<T> {
    /// Wraps `io`, an established connection (after the TLS handshake, or a
    /// [`HalfRttStream`](crate::HalfRttStream) whose early data was accepted: its ALPN
    /// protocol is known by then).
    ///
    /// ALPN `h2` turns the frame pipeline on; another ALPN protocol passes bytes through.
    /// Without ALPN (plain TCP), the first bytes decide. Sets `TCP_NOTSENT_LOWAT` as
    /// configured; a failure to set it is logged, not fatal.
    pub fn new(io: T, config: FlushConfig) -> Self {
        FlushStream::with_shared(io, &SharedSetup::new(config))
    }

    /// [`Self::new`] with what the server's connections share.
    pub(crate) fn with_shared(io: T, shared: &SharedSetup) -> Self {
        let config = shared.config.clone();
        let stats = ConnectionStats::sharing(&shared.counters);
        let mode = match io.alpn_protocol() {
            Some(b"h2") => Mode::Http2,
            Some(_) => Mode::PassThrough,
            None => Mode::Undecided,
        };
        if let (Some(lowat), Some(tcp)) = (config.notsent_lowat, io.tcp_stream()) {
            if let Err(err) = crate::socket::set_notsent_lowat(tcp, lowat) {
                tracing::debug!(%err, "TCP_NOTSENT_LOWAT not set");
            }
        }
        FlushStream {
            io,
            mode,
            priorities: StreamPriorities::new(
                config.max_early_updates,
                config.max_tracked_streams,
                config.reorder.then_some(config.anticipate).flatten(),
                stats.clone(),
            ),
            read: ReadObserver::new(stats.clone()),
            write: WritePath::new(&config, stats.clone()),
            config,
            stats,
        }
    }

    /// A handle on this connection's counters, readable after hyper took the stream.
    pub fn stats(&self) -> ConnectionStats {
        self.stats.clone()
    }

    /// The wrapped transport.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// Lets the connection's body `gate` follow the client's priority updates.
    #[cfg(feature = "serve")]
    pub(crate) fn follow_bodies(&mut self, gate: crate::body_gate::BodyGate) {
        self.priorities.follow_bodies(gate);
    }

    /// True once the connection is known to carry HTTP/2 and the pipeline is on.
    pub fn is_http2(&self) -> bool {
        self.mode == Mode::Http2
    }

    fn decide_on_first_write(&mut self, buf: &[u8]) {
        if self.mode != Mode::Undecided {
            return;
        }
        // An HTTP/2 server's first bytes are its SETTINGS frame (RFC 9113 §3.4), whatever
        // the client sent: a client's preface alone does not make the server speak HTTP/2
        // (an HTTP/1-only server answers it with an HTTP/1 error response).
        self.mode = match self.read.verdict() {
            Verdict::NotHttp2 => Mode::PassThrough,
            Verdict::Http2 | Verdict::Undecided if starts_with_server_settings(buf) => Mode::Http2,
            Verdict::Http2 | Verdict::Undecided => Mode::PassThrough,
        };
        tracing::debug!(
            http2 = self.mode == Mode::Http2,
            "protocol decided by the first write"
        );
    }

    /// After reading: when a request completed that is at least as urgent as every one
    /// before, records where the bytes are ([`crate::RequestArrival`]).
    fn note_urgent_request(&mut self) {
        let Some((stream_id, urgency)) = self.priorities.take_completed() else {
            return;
        };
        if self.stats.is_most_urgent(urgency) {
            self.stats.request_read(
                stream_id,
                urgency,
                self.write.queued_bytes(),
                self.io.has_buffered_output(),
                self.io.path_state(),
            );
        }
    }

    fn poll_write_h2(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut taken = 0;
            for buf in bufs {
                let n = self.write.absorb(buf, &self.config, &mut self.priorities);
                taken += n;
                if n < buf.len() {
                    break;
                }
            }
            let queued_after_absorb = self.write.queued_bytes();
            // Push out whatever full records are ready; a Pending here is fine, the
            // transport will wake us.
            let drove = self.write.drive(
                cx,
                &mut self.io,
                &self.config,
                &mut self.priorities,
                Drive::Write,
            );
            if let Poll::Ready(Err(err)) = drove {
                return Poll::Ready(Err(err));
            }
            if taken > 0 || bufs.iter().all(|b| b.is_empty()) {
                if taken > 0 {
                    self.priorities.writes_taken();
                }
                return Poll::Ready(Ok(taken));
            }
            if drove.is_pending() {
                if self.write.queued_bytes() < queued_after_absorb {
                    // The transport took some bytes before it blocked: there may be room
                    // for the frame that was refused, so offer it again now rather than
                    // leave h2 stalled until the socket drains.
                    continue;
                }
                self.write.refusal_returned(&mut self.priorities);
                return Poll::Pending;
            }
            // Nothing was admitted, yet the transport took everything it could without
            // blocking (only a short record is left): push that out too, then try again.
            std::task::ready!(self.write.drive(
                cx,
                &mut self.io,
                &self.config,
                &mut self.priorities,
                Drive::Push
            ))?;
            if self.write.queued_bytes() == queued_after_absorb {
                // No progress without blocking: DATA is held for an urgent response
                // (anticipation), and the hold's timer will wake the task.
                if !self.write.is_holding() {
                    cx.waker().wake_by_ref();
                }
                self.write.refusal_returned(&mut self.priorities);
                return Poll::Pending;
            }
        }
    }
}

/// True when `buf` starts with a SETTINGS frame header as a server's preface has it: not
/// an ACK, on stream 0, a whole number of settings (an HTTP/1 response never parses so:
/// `HTTP/1.1 ...` reads as type `P`).
fn starts_with_server_settings(buf: &[u8]) -> bool {
    crate::frame::FrameHeader::parse(buf).is_some_and(|h| {
        h.kind == crate::frame::SETTINGS
            && h.flags & crate::frame::FLAG_ACK == 0
            && h.stream_id == 0
            && h.length.is_multiple_of(6)
            && buf[5] & 0x80 == 0
    })
}

impl<T: Transport> AsyncRead for FlushStream<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let result = Pin::new(&mut this.io).poll_read(cx, buf);
        let new = &buf.filled()[before..];
        this.stats.add_bytes_read(new.len() as u64);
        if this.mode != Mode::PassThrough && !new.is_empty() {
            this.read.observe(new, &mut this.priorities);
            this.note_urgent_request();
            if this.mode == Mode::Undecided && this.read.verdict() == Verdict::NotHttp2 {
                this.mode = Mode::PassThrough;
            }
        }
        result
    }
}

impl<T: Transport> AsyncWrite for FlushStream<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.decide_on_first_write(buf);
        match this.mode {
            Mode::Http2 => this.poll_write_h2(cx, &[IoSlice::new(buf)]),
            _ => Pin::new(&mut this.io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            this.decide_on_first_write(first);
        }
        match this.mode {
            Mode::Http2 => this.poll_write_h2(cx, bufs),
            _ => Pin::new(&mut this.io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Pushes what h2 wrote towards the transport. When the socket is full this returns
    /// `Ready` anyway: the frames are in the wrapper's queues, the transport will wake the
    /// task, and the next poll continues. h2 calls flush before it writes more; answering
    /// `Pending` there would stop h2 from absorbing new responses and from reading requests,
    /// the very thing the wrapper exists for. [`poll_shutdown`](Self::poll_shutdown) drains
    /// everything.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.mode != Mode::Http2 {
            return Pin::new(&mut this.io).poll_flush(cx);
        }
        match this.write.drive(
            cx,
            &mut this.io,
            &this.config,
            &mut this.priorities,
            Drive::Flush,
        ) {
            Poll::Pending => Poll::Ready(Ok(())),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.mode == Mode::Http2 {
            // A header block h2 left unfinished is whole frames: it goes out as it is, like
            // an interrupted one. Queued before draining, so that the drain writes it.
            this.write.queue_open_block(&mut this.priorities);
            // Drain everything, short records and held DATA included: nothing waits at
            // shutdown.
            std::task::ready!(this.write.drive(
                cx,
                &mut this.io,
                &this.config,
                &mut this.priorities,
                Drive::Drain
            ))?;
            if this.write.has_truncated_frame() {
                tracing::debug!("shutdown with a truncated frame from h2; its bytes are dropped");
            }
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
