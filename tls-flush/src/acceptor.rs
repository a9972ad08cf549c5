//! [`FlushAcceptor`]: the wrapper for axum-server, as one more acceptor in its chain.
//!
//! axum-server composes acceptors (`Accept<I, S>`: a stream and a service in, a stream and
//! a service out). `FlushAcceptor` runs its inner acceptor (the TLS one, usually
//! `RustlsAcceptor`), wraps the resulting TLS stream in [`FlushStream`] and adds the
//! connection's [`ConnectionStats`] to every request's extensions. Whatever the inner chain
//! does stays: its handshake timeout, its `TlsData`/SNI extensions, axum-server's `Handle`
//! (graceful shutdown, connection counts).
//!
//! Invariant: a failed inner accept is returned as it is (axum-server drops that
//! connection); nothing here can fail.
//!
//! For 0.5-RTT early data, the inner acceptor is [`HalfRttTlsAcceptor`] in place of
//! axum-server's `RustlsAcceptor` ([`FlushAcceptor::half_rtt`]): it gets the service, so
//! it marks early requests and applies the 425 rule itself (module `half_rtt`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::middleware::AddExtension;
use axum::Extension;
use axum_server::accept::Accept;
use tower::Layer;

use crate::config::{FlushConfig, SharedSetup};
use crate::stats::ConnectionStats;
use crate::stream::FlushStream;
use crate::transport::Transport;

#[cfg(feature = "serve")]
mod half_rtt;
#[cfg(feature = "serve")]
pub use half_rtt::{HalfRttTlsAcceptor, HalfRttTlsFuture};

/// An `axum_server::accept::Accept` that wraps the TLS stream of an inner acceptor in
/// [`FlushStream`]; each request carries its connection's [`ConnectionStats`]
/// (`Extension<ConnectionStats>` in axum). The inner acceptor is axum-server's
/// `RustlsAcceptor`, or [`HalfRttTlsAcceptor`] for 0.5-RTT early data
/// ([`FlushAcceptor::half_rtt`]).
///
/// ```no_run
/// # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
/// use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
/// use tls_flush::{FlushAcceptor, FlushConfig};
///
/// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
/// let rustls = RustlsConfig::from_config(tls_config);
/// axum_server::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 8443)))
///     .acceptor(FlushAcceptor::new(RustlsAcceptor::new(rustls), FlushConfig::default()))
///     .serve(app.into_make_service())
///     .await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FlushAcceptor<A> {
    inner: A,
    shared: SharedSetup,
}

impl<A> FlushAcceptor<A> {
    /// Wraps the streams that `inner` produces with `config`.
    ///
    /// ```no_run
    /// # fn run(rustls: axum_server::tls_rustls::RustlsConfig) {
    /// use axum_server::tls_rustls::RustlsAcceptor;
    /// let acceptor = tls_flush::FlushAcceptor::new(RustlsAcceptor::new(rustls), Default::default());
    /// # }
    /// ```
    pub fn new(inner: A, config: FlushConfig) -> Self {
        FlushAcceptor {
            inner,
            shared: SharedSetup::new(config),
        }
    }

    /// The inner acceptor.
    ///
    /// ```no_run
    /// # fn run(acceptor: tls_flush::FlushAcceptor<axum_server::tls_rustls::RustlsAcceptor>) {
    /// let _rustls: &axum_server::tls_rustls::RustlsAcceptor = acceptor.get_ref();
    /// # }
    /// ```
    pub fn get_ref(&self) -> &A {
        &self.inner
    }
}

impl<A, I, S> Accept<I, S> for FlushAcceptor<A>
where
    A: Accept<I, S>,
    A::Stream: Transport,
{
    type Stream = FlushStream<A::Stream>;
    type Service = AddExtension<A::Service, ConnectionStats>;
    type Future = FlushAcceptorFuture<A::Future>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        FlushAcceptorFuture {
            inner: self.inner.accept(stream, service),
            shared: self.shared.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`FlushAcceptor`]'s `accept`: the inner acceptor's, then the wrap.
    #[derive(Debug)]
    pub struct FlushAcceptorFuture<F> {
        #[pin]
        inner: F,
        shared: SharedSetup,
    }
}

impl<F, T, Svc> Future for FlushAcceptorFuture<F>
where
    F: Future<Output = io::Result<(T, Svc)>>,
    T: Transport,
{
    type Output = io::Result<(FlushStream<T>, AddExtension<Svc, ConnectionStats>)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let (tls, service) = ready!(this.inner.poll(cx))?;
        let stream = FlushStream::with_shared(tls, this.shared);
        tracing::debug!(http2 = stream.is_http2(), "TLS established; wrapped");
        let service = Extension(stream.stats()).layer(service);
        Poll::Ready(Ok((stream, service)))
    }
}
