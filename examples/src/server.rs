//! The server both example binaries run.
//!
//! With a `tls-flush` policy it is the product's own server, [`tls_flush::serve`]:
//! `TCP_NODELAY`, the TLS handshake (dropped after [`HANDSHAKE_TIMEOUT`]), the
//! `tls_flush::FlushStream` wrapper and hyper's HTTP/1.1 + HTTP/2 builder, each connection
//! on its own task; tls-flush logs every connection's counters at debug level when it closes
//! (`closed counters=StatsSnapshot { .. }`, target `tls_flush::serve`).
//!
//! `stock` is the baseline without the wrapper. tls-flush cannot serve a connection
//! unwrapped, so [`serve_stock`] does the same steps itself: `TCP_NODELAY`, the handshake
//! with the same timeout, then hyper's auto builder over the plain TLS stream.
//!
//! Either way SIGINT or SIGTERM stops accepting, lets every in-flight response finish
//! (HTTP/2 `GOAWAY`, HTTP/1.1 close after the current response) for at most
//! [`GRACEFUL_TIMEOUT`] or until a second signal, and then returns, so the process exits 0.

use std::future::{Future, IntoFuture};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn, Instrument};

use tls_flush::{FlushConfig, HttpService, MemoryBudget};

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
pub async fn run<S: HttpService>(args: Args, service: S) -> Result<(), BoxError> {
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
        let config = FlushConfig::for_policy(policy)
            .tls_max_fragment_size(args.record_size.map(usize::from));
        match args.memory_budget {
            Some(bytes) => config.memory_budget(Some(MemoryBudget::new(bytes))),
            None => config,
        }
    })
}

/// How often [`report_budget`] looks at the budget.
const BUDGET_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Prints `memory-budget used=U high_water=H limit=L connections=C` on stdout each time the
/// budget's high-water mark rose since the last look (once per `BUDGET_REPORT_EVERY`, a second),
/// for `scripts/scale.sh`'s `budget` row; runs until the process ends.
pub async fn report_budget(budget: MemoryBudget) {
    let mut reported = 0;
    let mut tick = tokio::time::interval(BUDGET_REPORT_EVERY);
    loop {
        tick.tick().await;
        let high = budget.high_water();
        if high == reported {
            continue;
        }
        reported = high;
        let mut out = io::stdout().lock();
        let _ = writeln!(
            out,
            "memory-budget used={} high_water={high} limit={} connections={}",
            budget.used(),
            budget.limit(),
            budget.connections()
        );
        let _ = out.flush();
    }
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
pub async fn serve<S: HttpService>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    flush: Option<FlushConfig>,
    service: S,
) -> io::Result<()> {
    let shutdown = ShutdownSignal::install()?;
    serve_with_shutdown(listener, tls, flush, service, shutdown).await
}

/// Like [`serve`], with signal handlers installed by the caller: through
/// [`tls_flush::serve`] with `flush`'s configuration, or [`serve_stock`] for `None`.
///
/// `service` is any tower service over `http::Request<hyper::body::Incoming>` that never
/// fails ([`tls_flush::HttpService`]: an axum `Router`, or a hand-written service behind
/// `tower::ServiceBuilder`); each connection gets a clone.
///
/// After the first signal the listener is closed and every open connection is asked to
/// shut down gracefully; this returns when they have all finished, after
/// [`GRACEFUL_TIMEOUT`], or at a second signal, whichever comes first.
pub async fn serve_with_shutdown<S: HttpService>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    flush: Option<FlushConfig>,
    service: S,
    shutdown: ShutdownSignal,
) -> io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    match flush {
        Some(config) => serve_wrapped(listener, acceptor, config, service, shutdown).await,
        None => serve_stock(listener, acceptor, service, shutdown).await,
    }
}

/// [`tls_flush::serve`], stopped by the first signal.
async fn serve_wrapped<S: HttpService>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    config: FlushConfig,
    service: S,
    mut shutdown: ShutdownSignal,
) -> io::Result<()> {
    if let Some(budget) = config
        .budget()
        .filter(|b| !b.same_budget(&MemoryBudget::for_machine()))
    {
        tokio::spawn(report_budget(budget.clone()));
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let mut server = tls_flush::serve(listener, acceptor, config, service)
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .with_graceful_shutdown(async {
            let _ = stopped.await;
        })
        .into_future();
    let signal_name = tokio::select! {
        // Only an unusable listening socket ends it without a signal.
        served = &mut server => return served,
        name = shutdown.recv() => name,
    };
    let _ = stop.send(());
    drain(signal_name, server, &mut shutdown).await
}

/// The stock server: the steps of [`tls_flush::serve`] without the wrapper.
pub async fn serve_stock<S: HttpService>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    service: S,
    mut shutdown: ShutdownSignal,
) -> io::Result<()> {
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
                let (acceptor, service) = (acceptor.clone(), service.clone());
                let watcher = Some(graceful.watcher());
                let connection = serve_stock_connection(tcp, acceptor, service, watcher);
                tokio::spawn(connection.instrument(tracing::debug_span!("stock", %peer)));
            }
            name = shutdown.recv() => break name,
        }
    };
    drop(listener);
    drain(
        signal_name,
        async move {
            graceful.shutdown().await;
            Ok(())
        },
        &mut shutdown,
    )
    .await
}

/// One stock connection: `TCP_NODELAY`, the handshake within [`HANDSHAKE_TIMEOUT`], then
/// hyper's auto builder over the plain TLS stream until the peer leaves or `watcher`'s
/// graceful shutdown completes. Its outcome is logged at debug level.
pub async fn serve_stock_connection<S: HttpService>(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    service: S,
    watcher: Option<Watcher>,
) {
    if let Err(e) = tcp.set_nodelay(true) {
        debug!(error = %e, "TCP_NODELAY failed");
    }
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            debug!(error = %e, "TLS handshake failed; dropping the connection");
            return;
        }
        Err(_) => {
            debug!("TLS handshake timed out; dropping the connection");
            return;
        }
    };
    let conn = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(service))
        .into_owned();
    let served = match watcher {
        Some(watcher) => watcher.watch(conn).await,
        None => conn.await,
    };
    match served {
        Ok(()) => debug!("connection closed"),
        Err(e) => debug!(error = %e, "connection ended with an error"),
    }
}

/// After the first signal (`signal_name`, the listener closed): waits for `connections`
/// to end, at most [`GRACEFUL_TIMEOUT`] or until a second signal.
async fn drain(
    signal_name: &str,
    connections: impl Future<Output = io::Result<()>>,
    shutdown: &mut ShutdownSignal,
) -> io::Result<()> {
    info!(
        signal = signal_name,
        "stopped accepting; waiting for in-flight responses"
    );
    tokio::select! {
        ended = connections => {
            info!("all connections closed; exiting");
            ended
        }
        _ = tokio::time::sleep(GRACEFUL_TIMEOUT) => {
            warn!(timeout = ?GRACEFUL_TIMEOUT, "graceful shutdown timed out; exiting");
            Ok(())
        }
        name = shutdown.recv() => {
            warn!(signal = name, "second signal; exiting without waiting");
            Ok(())
        }
    }
}
