//! The server side of TLS 1.3 early data (0-RTT, RFC 8446 §2.3) for HTTP (RFC 8470).
//!
//! rustls accepts early data when `ServerConfig::max_early_data_size` is above zero (and
//! resumption is stateful, rustls' default). tokio-rustls 0.26's server returns the stream
//! only once the handshake has completed, and keeps what arrived as early data aside, in
//! `ServerConnection::early_data()`: an app reading the stream never sees those bytes.
//! [`EarlyDataStream`] reads them first, then the rest of the stream, and keys the
//! requests that began in them, so that they can be marked.
//!
//! What is covered, and what is not:
//! - a request is early when its first frame (HTTP/2 HEADERS opening a stream) began in
//!   early data. Each early request's header block is decoded (the early bytes start at the
//!   connection's beginning, so a fresh HPACK decoder follows the client's encoder) into a
//!   key of its method, URI and header fields, and [`EarlyRequests::mark`] marks the
//!   requests whose key matches an early one's, in whatever order it is called. Requests
//!   identical in all of these are interchangeable: the first one marked takes the mark. A
//!   block that cannot be keyed (cut by the end of early data, not decodable, too large)
//!   leaves that request and the later early ones to counting: requests that match no key
//!   take those marks in call order, as hyper delivers them (more marked, never fewer).
//!   Early bytes that are not HTTP/2 mark every request of the connection;
//! - requests are processed after the handshake has completed (tokio-rustls gives no stream
//!   before), so a replayed ClientHello never reaches the app: an attacker who replays
//!   early data cannot complete the handshake. The marks are for RFC 8470 semantics (425,
//!   `Early-Data: 1` on forwarded requests), which matter for an app that forwards them to
//!   a server that could act before its own handshake completes;
//! - no 0.5-RTT data: responses are written after the handshake. For 0.5-RTT, see
//!   [`HalfRttAcceptor`](crate::HalfRttAcceptor), whose stream keys the early requests
//!   as their bytes arrive, with the same rules.
//!
//! [`EarlyRequests::mark`] puts [`EarlyData`] into an early request's extensions, and
//! [`TooEarlyLayer`] answers non-idempotent early requests with `425 Too Early` and adds
//! `Early-Data: 1` to the early requests it lets through.
//!
//! ```no_run
//! use hyper_util::rt::{TokioExecutor, TokioIo};
//! use tls_flush::{EarlyDataStream, TooEarlyLayer};
//! use tower::ServiceExt;
//!
//! # async fn run(acceptor: tokio_rustls::TlsAcceptor, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .layer(TooEarlyLayer::new());
//! let stream = EarlyDataStream::new(acceptor.accept(tcp).await?);
//! let early = stream.early_requests();
//! let service = hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
//!     early.mark(&mut request);
//!     app.clone().oneshot(request)
//! });
//! hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
//!     .serve_connection(TokioIo::new(stream), service)
//!     .await
//!     .map_err(std::io::Error::other)
//! # }
//! ```

use std::future::Future;
use std::io::{self, Read};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

mod body;
mod keys;
mod mark;
use crate::Transport;
pub(crate) use body::OrEmpty;
use keys::{EarlyParser, KeyHasher, Marks};
pub use mark::MarkEarly;

/// A request extension: (the start of) this request arrived as TLS 1.3 early data, which
/// an attacker can replay (RFC 8470).
///
/// ```
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(tls_flush::EarlyData);
/// assert!(request.extensions().get::<tls_flush::EarlyData>().is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EarlyData;

/// Which requests of one connection began in early data; cheap to clone into the
/// connection's service. See [`EarlyDataStream::early_requests`].
///
/// A request is marked by what it is (its method, URI and header fields, against those of
/// the early requests' header blocks), not by when [`mark`](Self::mark) is called, so the
/// clones may mark requests in any order, from any task.
///
/// ```
/// let early = tls_flush::EarlyRequests::none();
/// let mut request = http::Request::new(());
/// assert!(!early.mark(&mut request));
/// ```
#[derive(Debug, Clone)]
pub struct EarlyRequests {
    /// `None`: no request is early (a connection without early data allocates nothing).
    shared: Option<Arc<Shared>>,
}

/// What the clones of one [`EarlyRequests`] share.
#[derive(Debug)]
struct Shared {
    marks: Mutex<Marks>,
    /// Hashes the early requests' blocks (on the stream's side) and the requests marked.
    hasher: KeyHasher,
}

impl EarlyRequests {
    /// No request is early.
    ///
    /// ```
    /// assert_eq!(tls_flush::EarlyRequests::none().remaining(), 0);
    /// ```
    pub fn none() -> Self {
        EarlyRequests { shared: None }
    }

    #[cfg(test)]
    fn with(marks: Marks) -> Self {
        EarlyRequests {
            shared: Some(Arc::new(Shared::new(marks))),
        }
    }

    /// The next `n` requests are early, by count.
    #[cfg(test)]
    fn first(n: usize) -> Self {
        Self::with(Marks::counted(n))
    }

    fn marks(&self) -> Option<MutexGuard<'_, Marks>> {
        self.shared.as_deref().map(Shared::marks)
    }

    /// Call once per request the connection delivers, in any order: inserts [`EarlyData`]
    /// into the request's extensions if it began in early data, and says so.
    ///
    /// A request is early when its method, URI and header fields (as hyper hands them over,
    /// before any layer changes them) match those of a request whose header block began
    /// in early data and that no earlier call has marked. When the early bytes could not
    /// tell (a block cut by the end of early data, or one that did not decode), the
    /// requests that match no early one take the remaining marks in call order; early bytes
    /// that are not HTTP/2 make every request early.
    ///
    /// ```
    /// let early = tls_flush::EarlyRequests::none();
    /// let mut request = http::Request::new(());
    /// assert!(!early.mark(&mut request));
    /// assert!(request.extensions().get::<tls_flush::EarlyData>().is_none());
    /// ```
    pub fn mark<B>(&self, request: &mut http::Request<B>) -> bool {
        let Some(shared) = self.shared.as_deref() else {
            return false;
        };
        let early = shared.marks().take(|| shared.hasher.of_request(request));
        if early {
            request.extensions_mut().insert(EarlyData);
        }
        early
    }

    /// How many early requests are not marked yet (`usize::MAX`: every request of the
    /// connection is early). A request whose first bytes arrived early but whose header
    /// block is not complete yet counts.
    ///
    /// ```
    /// assert_eq!(tls_flush::EarlyRequests::none().remaining(), 0);
    /// ```
    pub fn remaining(&self) -> usize {
        self.marks().map_or(0, |marks| marks.remaining())
    }

    /// Early requests left to count-based marking because their header block could not be
    /// keyed (cut, not decodable, too large, or past the bound on keys).
    #[cfg(test)]
    pub(crate) fn fallbacks(&self) -> usize {
        self.marks().map_or(0, |marks| marks.fallbacks())
    }
}

impl Shared {
    fn new(marks: Marks) -> Self {
        Shared {
            marks: Mutex::new(marks),
            hasher: KeyHasher::default(),
        }
    }

    fn marks(&self) -> MutexGuard<'_, Marks> {
        // The marks are consistent after any statement: a panic elsewhere spoils nothing.
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keys the requests that begin in early data as its bytes are read, a piece at a time
/// (for [`HalfRttStream`](crate::HalfRttStream), which hands early data on while more may
/// still arrive), and says when the early data ended.
#[derive(Debug)]
pub(crate) struct EarlyCounter {
    /// Early bytes fed so far.
    fed: usize,
    /// Made at the first early byte, dropped when the early data ends.
    parser: Option<Box<EarlyParser>>,
    ended: bool,
    /// What the requests handed out share: the marks, found as the bytes come.
    shared: Arc<Shared>,
}

impl Default for EarlyCounter {
    fn default() -> Self {
        EarlyCounter {
            fed: 0,
            parser: None,
            ended: false,
            shared: Arc::new(Shared::new(Marks::default())),
        }
    }
}

impl EarlyCounter {
    /// The early bytes handed on so far continue with `chunk`: key (or count) the requests
    /// that began in them, before the app can see them.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        if self.ended || chunk.is_empty() {
            return;
        }
        self.fed += chunk.len();
        let hasher = &self.shared.hasher;
        let parser = self
            .parser
            .get_or_insert_with(|| Box::new(EarlyParser::new(hasher.clone())));
        parser.feed(chunk);
        let pending = parser.pending();
        self.shared.marks().add(parser.found(), pending);
    }

    /// The early data has ended (call before handing on any later byte): a request whose
    /// header block it cut is counted, and a request matching no early key is no longer
    /// early by default.
    pub(crate) fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.parser = None;
        self.shared.marks().end();
    }

    /// The requests to mark, shared with every clone.
    pub(crate) fn requests(&self) -> EarlyRequests {
        EarlyRequests {
            shared: Some(self.shared.clone()),
        }
    }

    /// Early bytes fed so far.
    pub(crate) fn bytes(&self) -> usize {
        self.fed
    }
}

/// A server TLS stream that yields what the client sent as TLS 1.3 early data first, then
/// the rest; writes pass through.
///
/// A request is early when its first frame (HTTP/2 HEADERS opening a stream) began in
/// early data; early bytes that are not HTTP/2 mark every request of the connection.
/// tokio-rustls returns the server stream only after the handshake, so early requests are
/// served after it (no 0.5-RTT responses).
///
/// ```
/// fn accepts<T: tls_flush::Transport>() {}
/// accepts::<tls_flush::EarlyDataStream<tokio::net::TcpStream>>(); // FlushStream can wrap it
/// ```
#[derive(Debug)]
pub struct EarlyDataStream<IO> {
    inner: tokio_rustls::server::TlsStream<IO>,
    early: Vec<u8>,
    pos: usize,
    requests: EarlyRequests,
}

impl<IO> EarlyDataStream<IO> {
    /// Takes the early data rustls kept aside during the handshake (at most the server's
    /// `max_early_data_size`) and keys the requests that began in it.
    ///
    /// ```no_run
    /// # async fn run(acceptor: tokio_rustls::TlsAcceptor, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
    /// let stream = tls_flush::EarlyDataStream::new(acceptor.accept(tcp).await?);
    /// println!("{} bytes of early data", stream.early_bytes());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(mut inner: tokio_rustls::server::TlsStream<IO>) -> Self {
        let mut early = Vec::new();
        if let Some(mut reader) = inner.get_mut().1.early_data() {
            // An in-memory buffer: reading it cannot fail or block.
            let _ = reader.read_to_end(&mut early);
        }
        let requests = early_requests(&early);
        EarlyDataStream {
            inner,
            early,
            pos: 0,
            requests,
        }
    }

    /// Bytes that arrived as early data.
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::EarlyDataStream<tokio::net::TcpStream>) {
    /// let accepted_early = stream.early_bytes() > 0;
    /// # }
    /// ```
    pub fn early_bytes(&self) -> usize {
        self.early.len()
    }

    /// The connection's early requests, for [`EarlyRequests::mark`].
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::EarlyDataStream<tokio::net::TcpStream>) {
    /// let early = stream.early_requests();
    /// println!("{} early requests", early.remaining());
    /// # }
    /// ```
    pub fn early_requests(&self) -> EarlyRequests {
        self.requests.clone()
    }

    /// The TLS stream.
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::EarlyDataStream<tokio::net::TcpStream>) {
    /// let alpn = stream.get_ref().get_ref().1.alpn_protocol();
    /// # }
    /// ```
    pub fn get_ref(&self) -> &tokio_rustls::server::TlsStream<IO> {
        &self.inner
    }
}

/// The requests that began in `early`, all of the early data: HTTP/2 HEADERS frames opening a
/// stream, keyed by their header blocks.
fn early_requests(early: &[u8]) -> EarlyRequests {
    if early.is_empty() {
        return EarlyRequests::none();
    }
    let mut counter = EarlyCounter::default();
    counter.feed(early);
    counter.end();
    counter.requests()
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for EarlyDataStream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.early.len() {
            let n = buf.remaining().min(this.early.len() - this.pos);
            buf.put_slice(&this.early[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.early.len() {
                this.early = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for EarlyDataStream<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: Transport> Transport for EarlyDataStream<T> {
    fn has_buffered_output(&self) -> bool {
        self.inner.has_buffered_output()
    }

    fn seal_record_ahead(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.inner.seal_record_ahead(bufs)
    }

    fn seals_records_ahead(&self) -> bool {
        self.inner.seals_records_ahead()
    }

    fn alpn_protocol(&self) -> Option<&[u8]> {
        Transport::alpn_protocol(&self.inner)
    }

    fn tcp_stream(&self) -> Option<&TcpStream> {
        self.inner.tcp_stream()
    }
}

/// A tower layer for RFC 8470: an early request (one with [`EarlyData`]) whose method is
/// not in the safe list (GET, HEAD, OPTIONS) gets `425 Too Early` without reaching the
/// service; the others reach it with `Early-Data: 1`, which a proxy forwards upstream.
///
/// ```
/// use tls_flush::TooEarlyLayer;
/// let app: axum::Router = axum::Router::new()
///     .route("/", axum::routing::post(|| async { "done" }))
///     .layer(TooEarlyLayer::new().safe_methods([http::Method::GET]));
/// ```
#[derive(Debug, Clone)]
pub struct TooEarlyLayer {
    rule: Rule,
}

/// Which early requests [`TooEarly`] lets through.
#[derive(Debug, Clone)]
enum Rule {
    /// Those whose method is listed; `425 Too Early` for the others.
    Safe(Arc<[http::Method]>),
    /// All of them, with `Early-Data: 1`.
    Any,
    /// All of them untouched (what `serve` does without 0.5-RTT).
    PassThrough,
}

impl Default for TooEarlyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl TooEarlyLayer {
    /// GET, HEAD and OPTIONS may be served early.
    ///
    /// ```
    /// let _layer = tls_flush::TooEarlyLayer::new();
    /// ```
    pub fn new() -> Self {
        TooEarlyLayer {
            rule: Rule::Safe(Arc::from([
                http::Method::GET,
                http::Method::HEAD,
                http::Method::OPTIONS,
            ])),
        }
    }

    /// The methods that may be served early; the others get 425.
    ///
    /// ```
    /// let _layer = tls_flush::TooEarlyLayer::new().safe_methods([]); // 425 for every early request
    /// ```
    #[must_use]
    pub fn safe_methods(mut self, methods: impl IntoIterator<Item = http::Method>) -> Self {
        self.rule = Rule::Safe(methods.into_iter().collect());
        self
    }

    /// Every early request is served (with `Early-Data: 1`), whatever its method: for an
    /// app whose handlers are all safe to replay, or that checks
    /// [`EarlyData`] itself.
    ///
    /// ```
    /// let _layer = tls_flush::TooEarlyLayer::any_method();
    /// ```
    pub fn any_method() -> Self {
        TooEarlyLayer { rule: Rule::Any }
    }

    /// Lets everything through untouched: `serve`'s layer without 0.5-RTT.
    pub(crate) fn pass_through() -> Self {
        TooEarlyLayer {
            rule: Rule::PassThrough,
        }
    }
}

impl<S> tower::Layer<S> for TooEarlyLayer {
    type Service = TooEarly<S>;

    fn layer(&self, inner: S) -> TooEarly<S> {
        TooEarly {
            inner,
            rule: self.rule.clone(),
        }
    }
}

/// The service of [`TooEarlyLayer`].
///
/// ```
/// use tower::Layer;
/// let service = tls_flush::TooEarlyLayer::new().layer(tower::service_fn(|_: http::Request<()>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// # let _ = service;
/// ```
#[derive(Debug, Clone)]
pub struct TooEarly<S> {
    inner: S,
    rule: Rule,
}

impl<S, B, R> tower::Service<http::Request<B>> for TooEarly<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    R: Default,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = TooEarlyFuture<S::Future, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let rule = match &self.rule {
            Rule::PassThrough => None,
            Rule::Any => Some(true),
            Rule::Safe(safe) => Some(safe.contains(request.method())),
        };
        if let (Some(safe), Some(_)) = (rule, request.extensions().get::<EarlyData>()) {
            if !safe {
                let mut response = http::Response::new(R::default());
                *response.status_mut() = http::StatusCode::TOO_EARLY;
                return TooEarlyFuture {
                    future: None,
                    response: Some(response),
                };
            }
            request.headers_mut().insert(
                http::header::HeaderName::from_static("early-data"),
                http::HeaderValue::from_static("1"),
            );
        }
        TooEarlyFuture {
            future: Some(self.inner.call(request)),
            response: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`TooEarly`]: the inner service's, or an immediate 425.
    pub struct TooEarlyFuture<F, R> {
        #[pin]
        future: Option<F>,
        response: Option<http::Response<R>>,
    }
}

impl<F, R, E> Future for TooEarlyFuture<F, R>
where
    F: Future<Output = Result<http::Response<R>, E>>,
{
    type Output = Result<http::Response<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.future.as_pin_mut() {
            Some(future) => future.poll(cx),
            None => match this.response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameHeader, CLIENT_PREFACE, FLAG_END_HEADERS, HEADERS};

    fn frame(kind: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = FrameHeader {
            length: payload.len() as u32,
            kind,
            flags: FLAG_END_HEADERS,
            stream_id,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn counts_streams_opened_in_early_data() {
        let mut early = CLIENT_PREFACE.to_vec();
        early.extend(frame(0x4, 0, &[]));
        early.extend(frame(HEADERS, 1, &[0x82]));
        early.extend(frame(HEADERS, 1, &[0x82])); // trailers: not a new request
        early.extend(frame(HEADERS, 3, &[0x82]));
        assert_eq!(early_requests(&early).remaining(), 2);
        // A frame cut inside its header counts unless its type says it is not HEADERS.
        let mut cut = early.clone();
        cut.extend(&frame(HEADERS, 5, &[0x82])[..2]);
        assert_eq!(early_requests(&cut).remaining(), 3);
        let mut cut = early.clone();
        cut.extend(&frame(0x0, 3, &[1, 2])[..5]);
        assert_eq!(early_requests(&cut).remaining(), 2);
        // Cut inside the payload: the request began early.
        early.extend(&frame(HEADERS, 5, &[0x82, 0x84])[..10]);
        assert_eq!(early_requests(&early).remaining(), 3);
    }

    #[test]
    fn odd_early_bytes() {
        assert_eq!(early_requests(b"").remaining(), 0);
        assert_eq!(early_requests(&CLIENT_PREFACE[..10]).remaining(), 0);
        assert_eq!(
            early_requests(b"GET / HTTP/1.1\r\n").remaining(),
            usize::MAX
        );
        // A huge frame length does not overflow.
        let mut early = CLIENT_PREFACE.to_vec();
        early.extend([0xff, 0xff, 0xff, 0x1, 0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(early_requests(&early).remaining(), 1);
    }

    #[test]
    fn marks_the_first_requests_only() {
        let early = EarlyRequests::first(1);
        let (mut a, mut b) = (http::Request::new(()), http::Request::new(()));
        assert!(early.clone().mark(&mut a));
        assert!(!early.mark(&mut b));
        assert_eq!(a.extensions().get::<EarlyData>(), Some(&EarlyData));
        assert_eq!(b.extensions().get::<EarlyData>(), None);
    }
}
