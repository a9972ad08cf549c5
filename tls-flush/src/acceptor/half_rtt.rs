//! [`HalfRttTlsAcceptor`]: 0.5-RTT early data for axum-server, in place of its
//! `RustlsAcceptor`.
//!
//! axum-server's `Accept` gets each connection's service with its stream, so this acceptor
//! wraps the service itself ([`MarkEarly`]: early requests marked, the 425 rule applied)
//! before the connection is served: the rule cannot be forgotten.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum_server::accept::Accept;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::warn;

use super::FlushAcceptor;
use crate::accept::{handshake_within, DEFAULT_HANDSHAKE_TIMEOUT};
use crate::config::FlushConfig;
use crate::early_data::{MarkEarly, TooEarlyLayer};
use crate::half_rtt::{EarlyDataRefusal, HalfRttAcceptor, HalfRttStream};

/// An `axum_server::accept::Accept` that runs TLS itself through a [`HalfRttAcceptor`]:
/// requests that arrive as TLS 1.3 early data are answered before the client's Finished
/// (0.5-RTT), carry [`EarlyData`](crate::EarlyData), and get `425 Too Early` unless their
/// method is GET, HEAD or OPTIONS ([`too_early`](Self::too_early)). It takes the place of
/// axum-server's `RustlsAcceptor` (whose `TlsData` extension and config reloading it does
/// not provide), usually inside a [`FlushAcceptor`] ([`FlushAcceptor::half_rtt`]).
///
/// The 425 rule needs the service's response body to have a `Default` (empty) value, as
/// axum's has. Early data is refused, and connections served after the handshake, when
/// [`HalfRttAcceptor`]'s rules say so (client certificates, tickets that are not single
/// use); the reason is logged as a warning.
///
/// ```no_run
/// # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
/// use tls_flush::{FlushAcceptor, FlushConfig, HalfRttTlsAcceptor, DEFAULT_MAX_EARLY_DATA_SIZE};
///
/// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
/// let tls = HalfRttTlsAcceptor::new(tls_config, DEFAULT_MAX_EARLY_DATA_SIZE)
///     .handshake_timeout(std::time::Duration::from_secs(5));
/// axum_server::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 8443)))
///     .acceptor(FlushAcceptor::new(tls, FlushConfig::default()))
///     .serve(app.into_make_service())
///     .await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct HalfRttTlsAcceptor {
    acceptor: HalfRttAcceptor,
    too_early: TooEarlyLayer,
    handshake_timeout: Duration,
}

impl HalfRttTlsAcceptor {
    /// TLS on `config` with up to `max_early_data_size` bytes of early data
    /// ([`DEFAULT_MAX_EARLY_DATA_SIZE`](crate::DEFAULT_MAX_EARLY_DATA_SIZE) is one record);
    /// handshakes time out after 10 s, as `RustlsAcceptor`'s do.
    ///
    /// ```no_run
    /// # fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) {
    /// let tls = tls_flush::HalfRttTlsAcceptor::new(tls_config, tls_flush::DEFAULT_MAX_EARLY_DATA_SIZE);
    /// # }
    /// ```
    pub fn new(config: Arc<ServerConfig>, max_early_data_size: u32) -> Self {
        let acceptor = HalfRttAcceptor::new(config, max_early_data_size);
        if let Some(why) = acceptor.refusal() {
            warn!(reason = ?why, "tls-flush: 0.5-RTT asked for, but early data is refused");
        }
        HalfRttTlsAcceptor {
            acceptor,
            too_early: TooEarlyLayer::new(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// How long a client may take to complete its handshake (or, with early data, to
    /// have the server's flight written), from the moment axum-server accepted its TCP
    /// connection (default 10 s).
    ///
    /// ```no_run
    /// # fn run(tls: tls_flush::HalfRttTlsAcceptor) {
    /// let tls = tls.handshake_timeout(std::time::Duration::from_secs(5));
    /// # }
    /// ```
    #[must_use]
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Which early requests reach the service (default [`TooEarlyLayer::new`]: GET, HEAD
    /// and OPTIONS).
    ///
    /// ```no_run
    /// # fn run(tls: tls_flush::HalfRttTlsAcceptor) {
    /// let tls = tls.too_early(tls_flush::TooEarlyLayer::new().safe_methods([http::Method::GET]));
    /// # }
    /// ```
    #[must_use]
    pub fn too_early(mut self, layer: TooEarlyLayer) -> Self {
        self.too_early = layer;
        self
    }

    /// Why early data is refused, if it is.
    ///
    /// ```no_run
    /// # fn run(tls: tls_flush::HalfRttTlsAcceptor) {
    /// assert_eq!(tls.refusal(), None, "0.5-RTT on");
    /// # }
    /// ```
    pub fn refusal(&self) -> Option<EarlyDataRefusal> {
        self.acceptor.refusal()
    }
}

/// The future of [`HalfRttTlsAcceptor`]'s `accept` (boxed: `HalfRttAcceptor::accept`'s
/// future has no name; one allocation per connection, beside a TLS handshake).
pub type HalfRttTlsFuture<I, S> =
    Pin<Box<dyn Future<Output = io::Result<(HalfRttStream<I>, MarkEarly<S>)>> + Send>>;

impl<I, S> Accept<I, S> for HalfRttTlsAcceptor
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Send + 'static,
{
    type Stream = HalfRttStream<I>;
    type Service = MarkEarly<S>;
    type Future = HalfRttTlsFuture<I, S>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accept = self.acceptor.accept(stream);
        let (timeout, too_early) = (self.handshake_timeout, self.too_early.clone());
        Box::pin(async move {
            let tls = handshake_within(timeout, accept).await?;
            tracing::debug!(
                half_rtt = tls.is_half_rtt(),
                "handshake done or early data accepted"
            );
            let service = MarkEarly::new(service, tls.early_requests(), &too_early);
            Ok((tls, service))
        })
    }
}

impl FlushAcceptor<HalfRttTlsAcceptor> {
    /// 0.5-RTT early data for axum-server in one line: TLS on `tls_config` through a
    /// [`HalfRttTlsAcceptor`] (up to `max_early_data_size` bytes of early data; early
    /// requests other than GET, HEAD and OPTIONS get `425 Too Early`), each connection
    /// wrapped with `config`.
    ///
    /// ```no_run
    /// # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
    /// use tls_flush::{FlushAcceptor, FlushConfig, DEFAULT_MAX_EARLY_DATA_SIZE};
    ///
    /// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    /// axum_server::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 8443)))
    ///     .acceptor(FlushAcceptor::half_rtt(tls_config, DEFAULT_MAX_EARLY_DATA_SIZE, FlushConfig::default()))
    ///     .serve(app.into_make_service())
    ///     .await
    /// # }
    /// ```
    pub fn half_rtt(
        tls_config: Arc<ServerConfig>,
        max_early_data_size: u32,
        config: FlushConfig,
    ) -> Self {
        FlushAcceptor::new(
            HalfRttTlsAcceptor::new(tls_config, max_early_data_size),
            config,
        )
    }
}
