//! 0.5-RTT early data under `axum::serve`: [`FlushListener::half_rtt`] and
//! [`HalfRttMakeService`].
//!
//! The listener does not own the app's service, so it cannot mark early requests nor apply
//! the 425 rule itself. Its connections therefore hold their early data until the
//! handshake completes (as on tokio-rustls' path: a replayed ClientHello never completes
//! it, so nothing replayed reaches the app) unless the app is served through
//! [`HalfRttMakeService`], which wraps each connection's service in [`MarkEarly`] and only
//! then lets the stream hand its early data on at once. Forgetting it costs the 0.5-RTT
//! latency, never the 425 rule.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::serve::{IncomingStream, Listener};
use tokio::net::TcpStream;
use tracing::warn;

use super::{FlushListener, ListenerTls};
use crate::early_data::{EarlyRequests, MarkEarly, TooEarlyLayer};
use crate::half_rtt::{HalfRttAcceptor, HalfRttStream};
use crate::stream::FlushStream;

impl ListenerTls for HalfRttAcceptor {
    type Stream = HalfRttStream<TcpStream>;

    fn handshake(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send + 'static {
        let accept = self.accept(tcp);
        async move {
            let stream = accept.await?;
            // Until `HalfRttMakeService` has wrapped the connection's service.
            stream.hold_early_data();
            Ok(stream)
        }
    }
}

impl FlushListener {
    /// Opts in to 0.5-RTT early data: handshakes run through a
    /// [`HalfRttAcceptor`] on this listener's rustls config, with up to
    /// `max_early_data_size` bytes of early data ([`DEFAULT_MAX_EARLY_DATA_SIZE`](crate::DEFAULT_MAX_EARLY_DATA_SIZE)
    /// is one record). Serve the app through [`HalfRttMakeService`]: its early GET, HEAD
    /// and OPTIONS requests are then answered before the client's Finished, with
    /// [`EarlyData`](crate::EarlyData), and its other early requests get `425 Too Early`.
    /// Served any other way, early data is read only once the handshake has completed.
    ///
    /// Early data is refused (and the reason logged as a warning, see
    /// [`HalfRttAcceptor`]'s rules) with client certificate authentication, stateless
    /// tickets, or a session store whose tickets are not single use; connections are then
    /// served after the handshake. The other settings are kept; call it before serving.
    ///
    /// ```no_run
    /// # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
    /// use tls_flush::{FlushConfig, FlushListener, HalfRttMakeService, DEFAULT_MAX_EARLY_DATA_SIZE};
    ///
    /// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    /// let tcp = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
    /// let listener = FlushListener::new(tcp, tls_config.into(), FlushConfig::default())
    ///     .half_rtt(DEFAULT_MAX_EARLY_DATA_SIZE);
    /// axum::serve(listener, HalfRttMakeService::new(app)).await
    /// # }
    /// ```
    #[must_use]
    pub fn half_rtt(self, max_early_data_size: u32) -> FlushListener<HalfRttAcceptor> {
        let acceptor = HalfRttAcceptor::new(self.acceptor.config().clone(), max_early_data_size);
        if let Some(why) = acceptor.refusal() {
            warn!(reason = ?why, "tls-flush: 0.5-RTT asked for, but early data is refused");
        }
        let mut listener = FlushListener::with_acceptor(self.tcp, acceptor, self.shared);
        listener.handshake_timeout = self.handshake_timeout;
        listener.max_pending = self.max_pending;
        listener
    }
}

impl FlushListener<HalfRttAcceptor> {
    /// Why early data is refused, if it is (see [`HalfRttAcceptor::refusal`]).
    ///
    /// ```no_run
    /// # fn run(listener: tls_flush::FlushListener<tls_flush::HalfRttAcceptor>) {
    /// assert_eq!(listener.early_data_refusal(), None, "0.5-RTT on");
    /// # }
    /// ```
    pub fn early_data_refusal(&self) -> Option<crate::EarlyDataRefusal> {
        self.acceptor.refusal()
    }
}

/// The make service for `axum::serve` over [`FlushListener::half_rtt`]: each connection's
/// service is the app's wrapped in [`MarkEarly`] (early requests carry
/// [`EarlyData`](crate::EarlyData); `425 Too Early` for those whose method is not GET,
/// HEAD or OPTIONS, see [`too_early`](Self::too_early)), and only then may the connection
/// hand its early data on before the client's Finished.
///
/// It wraps anything axum accepts as a make service: a `Router`, or
/// `into_make_service_with_connect_info::<ConnectionInfo>()`.
///
/// ```no_run
/// # async fn run(listener: tls_flush::FlushListener<tls_flush::HalfRttAcceptor>) -> std::io::Result<()> {
/// use axum::extract::ConnectInfo;
/// use tls_flush::{ConnectionInfo, EarlyData, HalfRttMakeService};
///
/// async fn hello(early: Option<axum::Extension<EarlyData>>) -> &'static str {
///     if early.is_some() { "hello, early" } else { "hello" }
/// }
///
/// let app = axum::Router::new().route("/", axum::routing::get(hello));
/// let app = app.into_make_service_with_connect_info::<ConnectionInfo>();
/// axum::serve(listener, HalfRttMakeService::new(app)).await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct HalfRttMakeService<M> {
    inner: M,
    too_early: TooEarlyLayer,
}

impl<M> HalfRttMakeService<M> {
    /// Wraps `inner`'s services; GET, HEAD and OPTIONS may be served early.
    ///
    /// ```
    /// let _make = tls_flush::HalfRttMakeService::new(axum::Router::<()>::new());
    /// ```
    pub fn new(inner: M) -> Self {
        HalfRttMakeService {
            inner,
            too_early: TooEarlyLayer::new(),
        }
    }

    /// Which early requests reach the app (default [`TooEarlyLayer::new`]).
    ///
    /// ```
    /// use tls_flush::{HalfRttMakeService, TooEarlyLayer};
    /// let _make = HalfRttMakeService::new(axum::Router::<()>::new())
    ///     .too_early(TooEarlyLayer::new().safe_methods([http::Method::GET]));
    /// ```
    #[must_use]
    pub fn too_early(mut self, layer: TooEarlyLayer) -> Self {
        self.too_early = layer;
        self
    }
}

impl<'a, L, M, S> tower::Service<IncomingStream<'a, L>> for HalfRttMakeService<M>
where
    L: Listener<Io = FlushStream<HalfRttStream<TcpStream>>>,
    M: tower::Service<IncomingStream<'a, L>, Response = S, Error = Infallible>,
{
    type Response = MarkEarly<S>;
    type Error = Infallible;
    type Future = HalfRttMakeFuture<M::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, stream: IncomingStream<'a, L>) -> Self::Future {
        let tls = stream.io().get_ref();
        let early = tls.early_requests();
        // axum reads the connection only once this future's service is in place, and the
        // future can only resolve with the service wrapped (its error is `Infallible`).
        tls.release_early_data();
        HalfRttMakeFuture {
            inner: self.inner.call(stream),
            early,
            too_early: self.too_early.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`HalfRttMakeService`]: the app's service, then wrapped.
    #[derive(Debug)]
    pub struct HalfRttMakeFuture<F> {
        #[pin]
        inner: F,
        early: EarlyRequests,
        too_early: TooEarlyLayer,
    }
}

impl<F, S> Future for HalfRttMakeFuture<F>
where
    F: Future<Output = Result<S, Infallible>>,
{
    type Output = Result<MarkEarly<S>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let service = ready!(this.inner.poll(cx))?;
        Poll::Ready(Ok(MarkEarly::new(
            service,
            this.early.clone(),
            this.too_early,
        )))
    }
}
