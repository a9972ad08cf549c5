//! The accept loop shared by both example servers.
//!
//! Each accepted TCP connection gets `TCP_NODELAY` and its own task, which does the TLS
//! handshake (a failure logs and drops only that connection) and then serves HTTP/1.1 or
//! HTTP/2 with `hyper_util`'s auto builder. SIGINT or SIGTERM stops accepting, lets every
//! in-flight response finish (HTTP/2 `GOAWAY`, HTTP/1.1 close after the current response),
//! and then returns, so the process exits 0.
//!
//! With a `tls-flush` policy each TLS stream is wrapped in `tls_flush::FlushStream` before
//! hyper sees it; the connection's counters are logged at debug level when it closes.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_rustls::TlsAcceptor;
use tower::Service;
use tracing::{debug, info, warn, Instrument};

use tls_flush::{FlushConfig, FlushStream};

use crate::cli::{policy_name, Args};
use crate::BoxError;

/// How long a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a graceful shutdown waits for in-flight responses before giving up.
pub const GRACEFUL_TIMEOUT: Duration = Duration::from_secs(60);

/// SIGINT and SIGTERM, registered when this is created (so a signal that arrives before
/// the accept loop starts is not lost and does not kill the process).
#[derive(Debug)]
pub struct ShutdownSignal {
    interrupt: Signal,
    terminate: Signal,
}

impl ShutdownSignal {
    /// Registers handlers for SIGINT and SIGTERM.
    pub fn install() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Waits for the next SIGINT or SIGTERM and returns its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

/// Everything a server needs: builds the TLS configuration from `args`, installs the signal
/// handlers, binds `args.addr`, prints exactly `listening on https://IP:PORT` (the bound
/// address) as the first line on stdout and flushes it, then runs [`serve_with_shutdown`].
pub async fn run<S, B>(args: Args, service: S) -> Result<(), BoxError>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let bound = bind(&args).await?;
    serve_with_shutdown(
        bound.listener,
        bound.tls,
        flush_config(&args),
        service,
        bound.shutdown,
    )
    .await?;
    Ok(())
}

/// A server ready to accept: what [`bind`] returns.
#[derive(Debug)]
pub struct Bound {
    /// The listening socket, bound to `--addr`.
    pub listener: TcpListener,
    /// The TLS configuration from `--cert/--key` (or a generated certificate) and
    /// `--record-size`.
    pub tls: Arc<ServerConfig>,
    /// SIGINT and SIGTERM, installed before the address was announced.
    pub shutdown: ShutdownSignal,
}

/// The steps every example server takes before it accepts: builds the TLS configuration
/// from `args`, installs the signal handlers, binds `args.addr`, and prints exactly
/// `listening on https://IP:PORT` (the bound address) as the first line on stdout.
pub async fn bind(args: &Args) -> Result<Bound, BoxError> {
    let tls = crate::tls::config_from_args(args)?;
    let shutdown = ShutdownSignal::install()?;
    let listener = TcpListener::bind(args.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
    let local = listener.local_addr()?;
    announce(local)?;
    info!(
        addr = %local,
        policy = %policy_name(args.policy),
        record_size = ?args.record_size,
        "listening"
    );
    Ok(Bound {
        listener,
        tls,
        shutdown,
    })
}

/// The wrapper's configuration for `--policy` and `--record-size`; `None` for `stock`.
///
/// ```
/// use clap::Parser;
/// let args = examples::Args::try_parse_from(["x", "--policy", "stock"]).unwrap();
/// assert!(examples::server::flush_config(&args).is_none());
/// ```
pub fn flush_config(args: &Args) -> Option<FlushConfig> {
    args.policy.map(|policy| {
        FlushConfig::for_policy(policy).tls_max_fragment_size(args.record_size.map(usize::from))
    })
}

/// The process exit status for a server's outcome: success, or the error on stderr and
/// failure.
pub fn exit_code(result: Result<(), BoxError>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Prints `listening on https://IP:PORT` on stdout and flushes it.
pub fn announce(addr: SocketAddr) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "listening on https://{addr}")?;
    out.flush()
}

/// Serves `service` over TLS on `listener` until SIGINT or SIGTERM, then shuts down
/// gracefully. The signal handlers are installed when this is called; see [`run`] to
/// install them earlier.
pub async fn serve<S, B>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    flush: Option<FlushConfig>,
    service: S,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let shutdown = ShutdownSignal::install()?;
    serve_with_shutdown(listener, tls, flush, service, shutdown).await
}

/// The accept loop: like [`serve`], with signal handlers installed by the caller.
///
/// `service` is any tower service over `http::Request<hyper::body::Incoming>` that is
/// `Clone + Send + 'static` (an axum `Router`, or a hand-written service behind
/// `tower::ServiceBuilder`); each connection gets a clone, wrapped in
/// [`TowerToHyperService`].
///
/// After the first signal the listener is closed and every open connection is asked to
/// shut down gracefully; this returns when they have all finished, after
/// [`GRACEFUL_TIMEOUT`], or at a second signal, whichever comes first.
pub async fn serve_with_shutdown<S, B>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    flush: Option<FlushConfig>,
    service: S,
    mut shutdown: ShutdownSignal,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let signal_name = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE, ECONNABORTED, ...: keep serving, without spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(e) = tcp.set_nodelay(true) {
                    debug!(%peer, error = %e, "TCP_NODELAY failed");
                }
                let span = tracing::info_span!("conn", %peer);
                tokio::spawn(
                    connection(tcp, acceptor.clone(), flush.clone(), service.clone(), graceful.watcher())
                        .instrument(span),
                );
            }
            name = shutdown.recv() => break name,
        }
    };
    drop(listener);
    info!(
        signal = signal_name,
        connections = graceful.count(),
        "stopped accepting; waiting for in-flight responses"
    );
    tokio::select! {
        _ = graceful.shutdown() => info!("all connections closed; exiting"),
        _ = tokio::time::sleep(GRACEFUL_TIMEOUT) => {
            warn!(timeout = ?GRACEFUL_TIMEOUT, "graceful shutdown timed out; exiting");
        }
        name = shutdown.recv() => warn!(signal = name, "second signal; exiting without waiting"),
    }
    Ok(())
}

/// One connection: TLS handshake, then HTTP/1.1 or HTTP/2 until the peer leaves or a
/// graceful shutdown completes.
async fn connection<S, B>(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    flush: Option<FlushConfig>,
    service: S,
    watcher: Watcher,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            warn!(error = %e, "TLS handshake failed; dropping connection");
            return;
        }
        Err(_) => {
            warn!(timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out; dropping connection");
            return;
        }
    };
    let alpn = tls
        .get_ref()
        .1
        .alpn_protocol()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    debug!(alpn = alpn.as_deref().unwrap_or("none"), "TLS established");

    let builder = auto::Builder::new(TokioExecutor::new());
    let service = TowerToHyperService::new(service);
    let result = match flush {
        None => {
            watcher
                .watch(builder.serve_connection(TokioIo::new(tls), service))
                .await
        }
        Some(config) => {
            let stream = FlushStream::new(tls, config);
            let stats = stream.stats();
            let result = watcher
                .watch(builder.serve_connection(TokioIo::new(stream), service))
                .await;
            debug!(counters = ?stats.snapshot(), "tls-flush counters");
            result
        }
    };
    match result {
        Ok(()) => debug!("connection closed"),
        Err(e) => debug!(error = %e, "connection ended with an error"),
    }
}
