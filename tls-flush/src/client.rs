//! The client side (feature `client`): an HTTP/2 client's first flight in one TLS record,
//! and in TLS 1.3 early data when the first request is idempotent.
//!
//! h2's client writes the 24-byte preface by itself, then SETTINGS and WINDOW_UPDATE, and
//! the first request's HEADERS in a later write: over tokio-rustls that is several TLS
//! records, several TCP segments, and with Nagle on possibly several round trips; with
//! TLS 1.3 0-RTT only what was written first would go early. [`FlushClientStream`] holds
//! those bytes until the first request has been written (its header block complete and
//! END_STREAM, or a size bound), or a short timer expires, and then writes them in one
//! write: one TLS record, and with `TCP_NODELAY` one TCP segment. [`FlushConnector`] makes
//! such streams for `hyper_util::client::legacy::Client` or for
//! `hyper::client::conn::http2::handshake`, and [`H2cConnector`] makes them over cleartext
//! TCP (HTTP/2 by prior knowledge). Both resolve names and connect through hyper-util's
//! `HttpConnector` (happy eyeballs between IPv6 and IPv4, a pluggable resolver) within a
//! connect timeout ([`DEFAULT_CONNECT_TIMEOUT`]), and `FlushConnector` bounds the TLS
//! handshake too ([`DEFAULT_HANDSHAKE_TIMEOUT`]).
//!
//! Invariants:
//! - bytes leave in the order they were written, each exactly once (the hold changes only
//!   when they leave); after the first flight everything passes through untouched;
//! - the hold is bounded in bytes ([`FirstFlightConfig::max_bytes`], 16 KiB) and in time
//!   ([`FirstFlightConfig::hold`], 2 ms from the first byte): nothing waits longer when no
//!   request follows;
//! - bytes that do not start with the HTTP/2 client preface are not held;
//! - only the first flight may go as TLS 1.3 early data, and only when the first request's
//!   `:method` (decoded from its header block) is one of [`FirstFlightConfig::early_methods`]
//!   (GET, HEAD, OPTIONS: RFC 8470 §4 leaves replay safety to the client, and these are
//!   safe to replay). Otherwise, and for every later byte, the handshake completes first;
//! - when the server rejects early data, tokio-rustls writes those bytes again after the
//!   handshake, once (rustls itself never resends them; see
//!   [`FlushClientStream::early_data_accepted`]).
//!
//! The first flight's fate is reported by [`FlushClientStream::first_flight`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use http_body_util::Empty;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tls_flush::client::FlushConnector;
//!
//! # async fn run(tls: Arc<rustls::ClientConfig>) -> Result<(), Box<dyn std::error::Error>> {
//! let client: Client<_, Empty<bytes::Bytes>> =
//!     Client::builder(TokioExecutor::new()).build(FlushConnector::new(tls));
//! let response = client.get("https://example.com/".parse()?).await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```

mod connector;
mod first_flight;
mod h2c;
mod tcp;
#[cfg(test)]
mod tests;

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub use connector::{FlushConnecting, FlushConnector, DEFAULT_HANDSHAKE_TIMEOUT};
use first_flight::{Scan, Scanner};
pub use h2c::{H2cConnecting, H2cConnector};
pub use tcp::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_HAPPY_EYEBALLS_DELAY};

use crate::timer::Timer;

/// How long the first flight may wait for the first request, from its first byte.
pub const DEFAULT_HOLD: Duration = Duration::from_millis(2);

/// Most bytes held for the first flight (preface, SETTINGS, the first request and a small
/// body); reaching it releases them.
pub const DEFAULT_MAX_FIRST_FLIGHT: usize = 16 * 1024;

/// How [`FlushClientStream`] holds the first flight and which first requests may go as TLS
/// 1.3 early data.
///
/// ```
/// use std::time::Duration;
/// use tls_flush::client::FirstFlightConfig;
///
/// let config = FirstFlightConfig::default()
///     .hold(Duration::from_millis(5))
///     .early_methods([http::Method::GET]);
/// assert_eq!(config.max_bytes_value(), 16 * 1024);
/// ```
#[derive(Debug, Clone)]
pub struct FirstFlightConfig {
    hold: Duration,
    max_bytes: usize,
    early_methods: Vec<http::Method>,
}

impl Default for FirstFlightConfig {
    fn default() -> Self {
        FirstFlightConfig {
            hold: DEFAULT_HOLD,
            max_bytes: DEFAULT_MAX_FIRST_FLIGHT,
            early_methods: vec![http::Method::GET, http::Method::HEAD, http::Method::OPTIONS],
        }
    }
}

impl FirstFlightConfig {
    /// The longest the first flight waits for the first request, from its first byte
    /// ([`DEFAULT_HOLD`]). `Duration::ZERO` writes whatever the first write brought.
    #[must_use]
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Most bytes held ([`DEFAULT_MAX_FIRST_FLIGHT`]); at least 1.
    #[must_use]
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes.max(1);
        self
    }

    /// The methods whose first request may go as TLS 1.3 early data (GET, HEAD and
    /// OPTIONS by default). Only list methods that are safe to replay (RFC 8470 §4):
    /// an attacker can replay early data. Empty: never early.
    #[must_use]
    pub fn early_methods(mut self, methods: impl IntoIterator<Item = http::Method>) -> Self {
        self.early_methods = methods.into_iter().collect();
        self
    }

    /// The hold set by [`hold`](Self::hold).
    pub fn hold_value(&self) -> Duration {
        self.hold
    }

    /// The bound set by [`max_bytes`](Self::max_bytes).
    pub fn max_bytes_value(&self) -> usize {
        self.max_bytes
    }

    fn allows_early(&self, method: Option<&[u8]>) -> bool {
        method.is_some_and(|m| {
            self.early_methods
                .iter()
                .any(|e| e.as_str().as_bytes() == m)
        })
    }
}

/// Why the first flight left when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The first request was complete (header block and END_STREAM).
    RequestComplete,
    /// The held bytes reached [`FirstFlightConfig::max_bytes`].
    SizeBound,
    /// [`FirstFlightConfig::hold`] expired first.
    Timer,
    /// The bytes were not an HTTP/2 client preface.
    NotHttp2,
    /// The stream was shut down.
    Shutdown,
}

/// What happened to the first flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFlight {
    /// Bytes in it (all of them went in one write to the stream below, which may take
    /// them in parts).
    pub bytes: usize,
    /// Why it left.
    pub release: Release,
    /// Whether it was written as TLS 1.3 early data.
    pub early_data: bool,
    /// How long it was held.
    pub held_for: Duration,
}

/// What [`FlushClientStream`] needs from the stream below: whether it is still in the TLS
/// handshake and whether bytes written now would go as TLS 1.3 early data. Implemented for
/// `tokio_rustls::client::TlsStream` and, for h2c (no early data), `tokio::net::TcpStream`.
///
/// ```
/// fn accepts<T: tls_flush::client::ClientTransport>() {}
/// accepts::<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>();
/// accepts::<tokio::net::TcpStream>();
/// ```
pub trait ClientTransport: AsyncRead + AsyncWrite + Unpin + sealed::Sealed {
    /// True until the TLS handshake completes (a stream returned for early data).
    fn is_handshaking(&self) -> bool {
        false
    }

    /// True when bytes written now go as TLS 1.3 early data.
    fn can_write_early_data(&mut self) -> bool {
        false
    }

    /// Whether the server accepted early data (meaningful once the handshake completed).
    fn is_early_data_accepted(&self) -> bool {
        false
    }

    /// The ALPN protocol negotiated, once known.
    fn alpn_protocol(&self) -> Option<&[u8]> {
        None
    }
}

mod sealed {
    pub trait Sealed {}
    impl<IO> Sealed for tokio_rustls::client::TlsStream<IO> {}
    impl Sealed for tokio::net::TcpStream {}
    #[cfg(test)]
    impl Sealed for crate::test_io::LimitedSink {}
}

impl<IO: AsyncRead + AsyncWrite + Unpin> ClientTransport for tokio_rustls::client::TlsStream<IO> {
    fn is_handshaking(&self) -> bool {
        self.get_ref().1.is_handshaking()
    }

    fn can_write_early_data(&mut self) -> bool {
        // rustls offers early data only during the handshake of a resumption whose ticket
        // allows it; tokio-rustls returns the stream before the handshake only then.
        let session = self.get_mut().1;
        session.is_handshaking() && session.early_data().is_some()
    }

    fn is_early_data_accepted(&self) -> bool {
        self.get_ref().1.is_early_data_accepted()
    }

    fn alpn_protocol(&self) -> Option<&[u8]> {
        self.get_ref().1.alpn_protocol()
    }
}

impl ClientTransport for tokio::net::TcpStream {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Collecting the first flight.
    Holding,
    /// Released, not early: the handshake completes before anything is written.
    Handshake,
    /// Writing the held bytes.
    Writing,
    /// Flushing them (for early data this completes the handshake).
    Flushing,
    /// Everything passes through.
    Through,
}

/// A client stream that writes an HTTP/2 client's first flight (preface, SETTINGS,
/// WINDOW_UPDATE and the first request) in one write, and as TLS 1.3 early data when the
/// stream below can and the first request's method allows it; then passes everything
/// through. See the [module documentation](self) for the invariants.
///
/// ```no_run
/// use std::sync::Arc;
/// use rustls::pki_types::ServerName;
/// use tls_flush::client::FlushClientStream;
///
/// # async fn run(config: Arc<rustls::ClientConfig>) -> std::io::Result<()> {
/// let tcp = tokio::net::TcpStream::connect("127.0.0.1:8443").await?;
/// tcp.set_nodelay(true)?;
/// let tls = tokio_rustls::TlsConnector::from(config)
///     .connect(ServerName::try_from("localhost").unwrap(), tcp)
///     .await?;
/// let stream = FlushClientStream::new(tls);
/// let (mut sender, conn) = hyper::client::conn::http2::handshake(
///     hyper_util::rt::TokioExecutor::new(),
///     hyper_util::rt::TokioIo::new(stream),
/// )
/// .await
/// .map_err(std::io::Error::other)?;
/// tokio::spawn(conn);
/// let request = http::Request::get("https://localhost/")
///     .body(http_body_util::Empty::<bytes::Bytes>::new())
///     .unwrap();
/// let response = sender.send_request(request).await.map_err(std::io::Error::other)?;
/// # let _ = response;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FlushClientStream<T> {
    inner: T,
    config: FirstFlightConfig,
    phase: Phase,
    held: Vec<u8>,
    written: usize,
    scanner: Scanner,
    started: Option<Instant>,
    timer: Timer,
    flight: Option<FirstFlight>,
    /// Made by a connector that speaks only HTTP/2: report it to hyper-util while the TLS
    /// handshake is pending (the connector offers only `h2`, and early data needs the
    /// resumed session's protocol), and always over cleartext (prior knowledge).
    only_h2: bool,
}

impl<T: ClientTransport> FlushClientStream<T> {
    /// Wraps `inner` with the default [`FirstFlightConfig`].
    ///
    /// ```
    /// # async fn run(tcp: tokio::net::TcpStream) {
    /// let stream = tls_flush::client::FlushClientStream::new(tcp); // h2c, prior knowledge
    /// assert!(stream.first_flight().is_none());
    /// # }
    /// ```
    pub fn new(inner: T) -> Self {
        Self::with_config(inner, FirstFlightConfig::default())
    }

    /// Wraps `inner` with `config`.
    ///
    /// ```
    /// # async fn run(tcp: tokio::net::TcpStream) {
    /// use tls_flush::client::{FirstFlightConfig, FlushClientStream};
    /// let stream = FlushClientStream::with_config(tcp, FirstFlightConfig::default().early_methods([]));
    /// # let _ = stream;
    /// # }
    /// ```
    pub fn with_config(inner: T, config: FirstFlightConfig) -> Self {
        FlushClientStream {
            inner,
            config,
            phase: Phase::Holding,
            held: Vec::new(),
            written: 0,
            scanner: Scanner::default(),
            started: None,
            timer: Timer::default(),
            flight: None,
            only_h2: false,
        }
    }

    pub(crate) fn only_h2(mut self) -> Self {
        self.only_h2 = true;
        self
    }

    /// The first flight, once it has been released (written or being written).
    ///
    /// ```
    /// # fn check(stream: &tls_flush::client::FlushClientStream<tokio::net::TcpStream>) {
    /// if let Some(flight) = stream.first_flight() {
    ///     println!("{} bytes, early: {}, {:?}", flight.bytes, flight.early_data, flight.release);
    /// }
    /// # }
    /// ```
    pub fn first_flight(&self) -> Option<FirstFlight> {
        self.flight
    }

    /// `Some(accepted)` once the first flight went as early data and the handshake has
    /// completed: `false` means the server rejected it and tokio-rustls wrote it again
    /// after the handshake. `None` otherwise.
    ///
    /// ```
    /// # fn check(stream: &tls_flush::client::FlushClientStream<tokio::net::TcpStream>) {
    /// assert_eq!(stream.early_data_accepted(), None); // h2c never sends early data
    /// # }
    /// ```
    pub fn early_data_accepted(&self) -> Option<bool> {
        let early = self.flight.is_some_and(|f| f.early_data);
        (early && !self.inner.is_handshaking()).then(|| self.inner.is_early_data_accepted())
    }

    /// The stream below.
    ///
    /// ```
    /// # fn check(stream: &tls_flush::client::FlushClientStream<tokio::net::TcpStream>) {
    /// let _peer = stream.get_ref().peer_addr();
    /// # }
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Decides, once, how the held bytes leave.
    fn release(&mut self, release: Release) {
        let early =
            self.config.allows_early(self.scanner.method()) && self.inner.can_write_early_data();
        self.flight = Some(FirstFlight {
            bytes: self.held.len(),
            release,
            early_data: early,
            held_for: self.started.map(|s| s.elapsed()).unwrap_or_default(),
        });
        self.timer.cancel();
        self.phase = if early || !self.inner.is_handshaking() {
            Phase::Writing
        } else {
            Phase::Handshake
        };
        tracing::debug!(
            bytes = self.held.len(),
            held_for = ?self.flight.map(|f| f.held_for),
            ?release,
            early,
            "tls_flush::client: first flight released"
        );
    }

    fn deadline(&self) -> Option<Instant> {
        self.started.map(|s| s + self.config.hold)
    }

    /// Moves a released first flight on; `Ready(Ok)` once everything passes through.
    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.phase {
                Phase::Holding | Phase::Through => return Poll::Ready(Ok(())),
                Phase::Handshake => {
                    // tokio-rustls completes a pending handshake in flush, writing nothing
                    // as early data when nothing was written.
                    ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
                    self.phase = Phase::Writing;
                }
                Phase::Writing => {
                    while self.written < self.held.len() {
                        let n =
                            ready!(Pin::new(&mut self.inner)
                                .poll_write(cx, &self.held[self.written..]))?;
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        self.written += n;
                    }
                    self.phase = Phase::Flushing;
                }
                Phase::Flushing => {
                    ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
                    self.held = Vec::new();
                    self.phase = Phase::Through;
                }
            }
        }
    }

    /// Takes what fits of `buf` into the hold and releases it when the first request is
    /// complete, the bound is reached, the timer expired or it is not HTTP/2.
    fn hold(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let take = buf
            .len()
            .min(self.config.max_bytes.saturating_sub(self.held.len()));
        self.held.extend_from_slice(&buf[..take]);
        match self.scanner.scan(&self.held) {
            Scan::NotHttp2 => self.release(Release::NotHttp2),
            Scan::RequestComplete => self.release(Release::RequestComplete),
            Scan::Incomplete if self.held.len() >= self.config.max_bytes => {
                self.release(Release::SizeBound)
            }
            Scan::Incomplete if now >= started + self.config.hold => self.release(Release::Timer),
            Scan::Incomplete => {}
        }
        // Start writing at once; what is left is finished by the next write or flush.
        if let Poll::Ready(Err(e)) = self.poll_drive(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(take))
    }

    /// Releases the hold when its timer has expired; `Pending` (timer armed) otherwise.
    fn poll_hold_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.deadline() {
            Some(deadline) if self.phase == Phase::Holding => {
                ready!(self.timer.poll_until(cx, deadline));
                self.release(Release::Timer);
                Poll::Ready(())
            }
            _ => Poll::Ready(()),
        }
    }
}

impl<T: ClientTransport> AsyncRead for FlushClientStream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase != Phase::Through {
            // A reader waiting for the server must not wait on a hold nobody flushes.
            if this.poll_hold_expired(cx).is_ready() {
                if let Poll::Ready(Err(e)) = this.poll_drive(cx) {
                    return Poll::Ready(Err(e));
                }
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: ClientTransport> AsyncWrite for FlushClientStream<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.phase {
                Phase::Holding if buf.is_empty() => return Poll::Ready(Ok(0)),
                Phase::Holding => return this.hold(cx, buf),
                Phase::Through => {
                    // Nothing after the first flight goes as early data.
                    if this.inner.is_handshaking() {
                        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
                    }
                    return Pin::new(&mut this.inner).poll_write(cx, buf);
                }
                _ => ready!(this.poll_drive(cx))?,
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.phase == Phase::Through && !this.inner.is_handshaking() {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        let buf = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        Pin::new(this).poll_write(cx, buf)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.phase {
                // Nothing held: nothing to flush (and a pending handshake stays pending, so
                // that the first flight can still go early).
                Phase::Holding if this.held.is_empty() => return Poll::Ready(Ok(())),
                // Flushed when the hold is released; the timer wakes us then at the latest.
                Phase::Holding => ready!(this.poll_hold_expired(cx)),
                Phase::Through => return Pin::new(&mut this.inner).poll_flush(cx),
                _ => ready!(this.poll_drive(cx))?,
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase == Phase::Holding {
            if this.held.is_empty() {
                this.phase = Phase::Through;
            } else {
                this.release(Release::Shutdown);
            }
        }
        ready!(this.poll_drive(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
