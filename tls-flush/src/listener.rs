//! [`FlushListener`]: `axum::serve` over TLS, each connection wrapped in [`FlushStream`];
//! [`ConnectionInfo`]: the peer's address and the connection's live counters for handlers.
//!
//! axum has no TLS of its own: its hook is the [`Listener`] trait, whose `accept` axum calls
//! in sequence and must return a ready connection. So the TLS handshakes run here,
//! concurrently, and `accept` hands out only connections whose handshake succeeded.
//!
//! Invariants:
//!
//! - A slow or silent client never delays another: each handshake runs on its own task,
//!   owned by the listener (a [`JoinSet`]), under
//!   [`handshake_timeout`](FlushListener::handshake_timeout) (10 s by default).
//! - At most [`max_pending_handshakes`](FlushListener::max_pending_handshakes) handshakes run
//!   at once; while that many are pending the listener stops accepting TCP connections, which
//!   wait in the kernel's backlog.
//! - `accept` never fails and never returns a failed handshake: failures are logged (debug
//!   level, target `tls_flush::listener`) and skipped; accept errors are retried at once when
//!   they concern one pending connection and after a backoff (5 ms doubling to 1 s) otherwise.
//! - `accept` is cancel-safe: axum's graceful shutdown drops it at any await point without
//!   losing a connection, since accepted connections and finished handshakes stay in the
//!   set. Dropping the listener aborts the handshakes still running.
//! - With 0.5-RTT ([`FlushListener::half_rtt`], module `half_rtt`), a connection's early
//!   data is read before the client's Finished only when the app is served through
//!   [`HalfRttMakeService`], which marks early requests and
//!   applies the 425 rule; served any other way, early data waits for the handshake to
//!   complete (no 0.5-RTT, nothing replayable reaches the app).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::accept::{classify, handshake_within, AcceptError, Backoff, DEFAULT_HANDSHAKE_TIMEOUT};
use crate::config::{FlushConfig, SharedSetup};
use crate::stats::{ConnectionStats, StatsSnapshot};
use crate::stream::FlushStream;
use crate::transport::Transport;

#[cfg(feature = "serve")]
mod half_rtt;
#[cfg(feature = "serve")]
pub use half_rtt::{HalfRttMakeFuture, HalfRttMakeService};

/// The default bound on concurrent TLS handshakes.
const DEFAULT_MAX_PENDING_HANDSHAKES: usize = 512;

/// A finished handshake task: the peer, and its TLS stream or why there is none.
type Handshake<S> = (SocketAddr, io::Result<S>);

/// The TLS handshake a [`FlushListener`] runs on each connection: tokio-rustls'
/// [`TlsAcceptor`] or [`HalfRttAcceptor`](crate::HalfRttAcceptor). Sealed: public only so
/// that it may bound `FlushListener`'s parameter; this module is private.
pub trait ListenerTls: Send + 'static {
    /// The TLS stream a successful handshake yields.
    type Stream: Transport + Send + 'static;

    /// The handshake on `tcp`, run on its own task.
    fn handshake(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send + 'static;
}

impl ListenerTls for TlsAcceptor {
    type Stream = TlsStream<TcpStream>;

    fn handshake(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = io::Result<Self::Stream>> + Send + 'static {
        self.accept(tcp)
    }
}

/// An [`axum::serve::Listener`] that accepts TCP connections, runs their TLS handshakes
/// concurrently and yields each connection wrapped in a [`FlushStream`].
///
/// Replace the `TcpListener` given to `axum::serve` with it; everything else, graceful
/// shutdown included, stays as it was. The module documentation lists the invariants.
///
/// ```no_run
/// # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
/// use tls_flush::{FlushConfig, FlushListener};
///
/// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
/// let tcp = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
/// let listener = FlushListener::new(tcp, tls_config.into(), FlushConfig::default());
/// axum::serve(listener, app)
///     .with_graceful_shutdown(async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await
/// # }
/// ```
///
/// The acceptor type `A` is tokio-rustls' [`TlsAcceptor`] ([`FlushListener::new`]), or
/// [`HalfRttAcceptor`](crate::HalfRttAcceptor) for 0.5-RTT early data
/// ([`FlushListener::half_rtt`]).
pub struct FlushListener<A: ListenerTls = TlsAcceptor> {
    tcp: TcpListener,
    acceptor: A,
    shared: SharedSetup,
    handshake_timeout: Duration,
    max_pending: usize,
    pending: JoinSet<Handshake<A::Stream>>,
    backoff: Backoff,
    /// Set after an accept error that needs a pause; kept here, not in the `accept` future,
    /// so that the pause survives the future being dropped and polled anew.
    retry_at: Option<Instant>,
}

impl<A: ListenerTls> std::fmt::Debug for FlushListener<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `TlsAcceptor` has no `Debug`.
        f.debug_struct("FlushListener")
            .field("tcp", &self.tcp)
            .field("config", &self.shared.config)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_pending_handshakes", &self.max_pending)
            .field("pending", &self.pending.len())
            .field("retry_at", &self.retry_at)
            .finish_non_exhaustive()
    }
}

impl FlushListener {
    /// Listens on `tcp`, handshakes with `acceptor` and wraps every connection with
    /// `config`. Handshakes time out after 10 s; at most 512 run at once.
    ///
    /// ```no_run
    /// # async fn run(acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let listener = tls_flush::FlushListener::new(tcp, acceptor, tls_flush::FlushConfig::default());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// tokio-rustls reads no early data on the server side: a configuration that accepts
    /// it (`max_early_data_size` above 0) would lose the requests clients send as early
    /// data. This listener serves a copy of the configuration that accepts none (clients
    /// send those requests after the handshake) and logs a warning; accept early data with
    /// [`FlushListener::half_rtt`].
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor, config: FlushConfig) -> Self {
        Self::with_acceptor(tcp, without_early_data(acceptor), SharedSetup::new(config))
    }
}

/// `acceptor`, or where its configuration accepts early data, one whose copy accepts none.
fn without_early_data(acceptor: TlsAcceptor) -> TlsAcceptor {
    let tls = acceptor.config();
    if tls.max_early_data_size == 0 {
        return acceptor;
    }
    warn!(
        target: "tls_flush::listener",
        max_early_data_size = tls.max_early_data_size,
        "early data refused: tokio-rustls' handshake would drop it (FlushListener::half_rtt accepts it)"
    );
    let mut tls = rustls::ServerConfig::clone(tls);
    tls.max_early_data_size = 0;
    TlsAcceptor::from(std::sync::Arc::new(tls))
}

impl<A: ListenerTls> FlushListener<A> {
    /// A listener on `tcp` that handshakes with `acceptor`, its other settings default.
    fn with_acceptor(tcp: TcpListener, acceptor: A, shared: SharedSetup) -> Self {
        FlushListener {
            tcp,
            acceptor,
            shared,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_pending: DEFAULT_MAX_PENDING_HANDSHAKES,
            pending: JoinSet::new(),
            backoff: Backoff::default(),
            retry_at: None,
        }
    }

    /// How long a client may take to complete its TLS handshake, counted from the moment
    /// its TCP connection was accepted (default 10 s). A client that takes longer is
    /// disconnected and never reaches axum.
    ///
    /// ```no_run
    /// # async fn run(tcp: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) {
    /// use std::time::Duration;
    /// let listener = tls_flush::FlushListener::new(tcp, acceptor, Default::default())
    ///     .handshake_timeout(Duration::from_secs(5));
    /// # }
    /// ```
    #[must_use]
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How many TLS handshakes may run at once (default 512; at least 1). While that many
    /// are pending, no new TCP connection is accepted: the kernel's backlog holds them, so
    /// a flood of silent clients costs at most this many tasks and sockets.
    ///
    /// ```no_run
    /// # async fn run(tcp: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) {
    /// let listener = tls_flush::FlushListener::new(tcp, acceptor, Default::default())
    ///     .max_pending_handshakes(64);
    /// # }
    /// ```
    #[must_use]
    pub fn max_pending_handshakes(mut self, max: usize) -> Self {
        self.max_pending = max.max(1);
        self
    }

    /// The listening socket.
    ///
    /// ```no_run
    /// # fn run(listener: &tls_flush::FlushListener) -> std::io::Result<()> {
    /// println!("listening on https://{}", listener.get_ref().local_addr()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_ref(&self) -> &TcpListener {
        &self.tcp
    }

    /// The TLS acceptor.
    ///
    /// ```no_run
    /// # fn run(listener: &tls_flush::FlushListener) {
    /// let rustls: &std::sync::Arc<rustls::ServerConfig> = listener.acceptor().config();
    /// # }
    /// ```
    pub fn acceptor(&self) -> &A {
        &self.acceptor
    }

    /// Accepts one TCP connection (or waits out an accept backoff) unless the handshake
    /// set is full, then returns the first connection whose handshake succeeded.
    async fn next(&mut self) -> (FlushStream<A::Stream>, SocketAddr) {
        loop {
            let accepting = self.pending.len() < self.max_pending && self.retry_at.is_none();
            let retry_at = self.retry_at;
            // Finished handshakes first: they are connections a client is waiting on.
            tokio::select! {
                biased;
                Some(joined) = self.pending.join_next() => {
                    if let Some(ready) = self.finished(joined) {
                        return ready;
                    }
                }
                () = sleep_until(retry_at), if retry_at.is_some() => self.retry_at = None,
                accepted = self.tcp.accept(), if accepting => match accepted {
                    Ok((tcp, peer)) => {
                        self.backoff.reset();
                        self.start_handshake(tcp, peer);
                    }
                    Err(err) => self.accept_failed(&err),
                },
            }
        }
    }

    fn start_handshake(&mut self, tcp: TcpStream, peer: SocketAddr) {
        // Urgent records must not wait for Nagle; see `FlushStream`.
        if let Err(err) = tcp.set_nodelay(true) {
            debug!(%peer, error = %err, "TCP_NODELAY not set");
        }
        let handshake = self.acceptor.handshake(tcp);
        let timeout = self.handshake_timeout;
        self.pending
            .spawn(async move { (peer, handshake_within(timeout, handshake).await) });
    }

    fn finished(
        &mut self,
        joined: Result<Handshake<A::Stream>, JoinError>,
    ) -> Option<(FlushStream<A::Stream>, SocketAddr)> {
        match joined {
            Ok((peer, Ok(tls))) => {
                let stream = FlushStream::with_shared(tls, &self.shared);
                debug!(%peer, http2 = stream.is_http2(), "TLS established; wrapped");
                Some((stream, peer))
            }
            Ok((peer, Err(err))) => {
                debug!(%peer, error = %err, "TLS handshake failed; dropping the connection");
                None
            }
            Err(err) => {
                if err.is_panic() {
                    warn!(error = %err, "TLS handshake task panicked");
                }
                None
            }
        }
    }

    fn accept_failed(&mut self, err: &io::Error) {
        match classify(err) {
            AcceptError::Connection => {
                debug!(error = %err, "accept failed for one connection; continuing");
            }
            // `Listener::accept` cannot fail: an unusable socket is retried like a full
            // file table, slowly, and said loudly.
            AcceptError::Fatal | AcceptError::Transient => {
                let delay = self.backoff.next_delay();
                warn!(error = %err, retry_in = ?delay, "accept failed");
                self.retry_at = Some(Instant::now() + delay);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl<A: ListenerTls> Listener for FlushListener<A> {
    type Io = FlushStream<A::Stream>;
    type Addr = SocketAddr;

    fn accept(&mut self) -> impl std::future::Future<Output = (Self::Io, Self::Addr)> + Send {
        self.next()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// What a handler can know about its connection under [`FlushListener`]: the peer's
/// address and the connection's live counters.
///
/// Serve the app with `into_make_service_with_connect_info::<ConnectionInfo>()` and extract
/// `ConnectInfo<ConnectionInfo>`.
///
/// ```no_run
/// # async fn run(listener: tls_flush::FlushListener) -> std::io::Result<()> {
/// use axum::extract::ConnectInfo;
/// use axum::routing::get;
/// use tls_flush::ConnectionInfo;
///
/// async fn stats(ConnectInfo(info): ConnectInfo<ConnectionInfo>) -> String {
///     let s = info.stats();
///     format!("{}: {} records, {} early cuts", info.remote_addr(), s.records_written, s.early_cuts)
/// }
///
/// let app = axum::Router::new().route("/stats", get(stats));
/// axum::serve(listener, app.into_make_service_with_connect_info::<ConnectionInfo>()).await
/// # }
/// ```
///
/// axum provides `ConnectInfo<SocketAddr>` only for its own `TcpListener` and for listeners
/// wrapped with [`ListenerExt::tap_io`](axum::serve::ListenerExt::tap_io) (the orphan rule
/// keeps other crates from adding it), so an app that extracts `ConnectInfo<SocketAddr>`
/// serves `listener.tap_io(|_| {})`; `ConnectionInfo` works with that listener too.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    remote_addr: SocketAddr,
    stats: ConnectionStats,
}

impl ConnectionInfo {
    fn of<T: Transport>(stream: &FlushStream<T>, remote_addr: SocketAddr) -> Self {
        ConnectionInfo {
            remote_addr,
            stats: stream.stats(),
        }
    }

    /// The client's address.
    ///
    /// ```no_run
    /// # fn run(info: tls_flush::ConnectionInfo) {
    /// println!("request from {}", info.remote_addr());
    /// # }
    /// ```
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote_addr
    }

    /// The connection's counters as they are now (they keep moving while it is open).
    ///
    /// ```no_run
    /// # fn run(info: tls_flush::ConnectionInfo) {
    /// println!("{} TLS records so far", info.stats().records_written);
    /// # }
    /// ```
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The handle on the connection's counters, to keep or read later.
    ///
    /// ```no_run
    /// # fn run(info: tls_flush::ConnectionInfo) {
    /// let stats: tls_flush::ConnectionStats = info.connection_stats().clone();
    /// # }
    /// ```
    pub fn connection_stats(&self) -> &ConnectionStats {
        &self.stats
    }
}

impl<A: ListenerTls> Connected<IncomingStream<'_, FlushListener<A>>> for ConnectionInfo {
    fn connect_info(stream: IncomingStream<'_, FlushListener<A>>) -> Self {
        ConnectionInfo::of(stream.io(), *stream.remote_addr())
    }
}

impl<A, F> Connected<IncomingStream<'_, axum::serve::TapIo<FlushListener<A>, F>>> for ConnectionInfo
where
    A: ListenerTls,
    F: FnMut(&mut FlushStream<A::Stream>) + Send + 'static,
{
    fn connect_info(stream: IncomingStream<'_, axum::serve::TapIo<FlushListener<A>, F>>) -> Self {
        ConnectionInfo::of(stream.io(), *stream.remote_addr())
    }
}
