//! A short path for axum and hyper users: accept, handshake, wrap, serve.

use std::convert::Infallible;
use std::io;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use crate::config::FlushConfig;
use crate::stats::{ConnectionStats, StatsSnapshot};
use crate::stream::FlushStream;

/// Serves one accepted TCP connection: TLS handshake, `TCP_NODELAY`, the wrapper, then
/// hyper's HTTP/1.1 + HTTP/2 server with `service`. Returns the connection's counters.
///
/// ```no_run
/// # async fn run(tcp: tokio::net::TcpStream, acceptor: tokio_rustls::TlsAcceptor) {
/// let app = axum::Router::new();
/// let stats = tls_flush::serve_connection(tcp, acceptor, tls_flush::FlushConfig::default(), app)
///     .await
///     .unwrap();
/// println!("records written: {}", stats.records_written);
/// # }
/// ```
pub async fn serve_connection<S, B>(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    config: FlushConfig,
    service: S,
) -> io::Result<StatsSnapshot>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let span = tracing::debug_span!("tls-flush", peer = ?tcp.peer_addr().ok());
    async move {
        tcp.set_nodelay(true)?;
        let tls = acceptor.accept(tcp).await?;
        let stream = FlushStream::new(tls, config);
        let stats: ConnectionStats = stream.stats();
        tracing::debug!(http2 = stream.is_http2(), "wrapped");
        let served = auto::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .await;
        tracing::debug!(counters = ?stats.snapshot(), "closed");
        served.map_err(io::Error::other)?;
        Ok(stats.snapshot())
    }
    .instrument(span)
    .await
}

/// Accepts connections forever and serves each with [`serve_connection`] on its own task.
/// Errors of single connections are logged at debug level and do not stop the loop.
///
/// ```no_run
/// # async fn run(acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
/// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hi" }));
/// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app).await
/// # }
/// ```
pub async fn serve<S, B>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    config: FlushConfig,
    service: S,
) -> io::Result<()>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let (tcp, peer) = listener.accept().await?;
        let (acceptor, config, service) = (acceptor.clone(), config.clone(), service.clone());
        tokio::spawn(async move {
            match serve_connection(tcp, acceptor, config, service).await {
                Ok(stats) => tracing::debug!(%peer, ?stats, "connection closed"),
                Err(err) => tracing::debug!(%peer, %err, "connection failed"),
            }
        });
    }
}
