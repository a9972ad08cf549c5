//! A short path for axum and hyper users: accept, handshake, wrap, serve.
//!
//! [`serve`] is a complete TLS server in the style of `axum::serve`: it returns a [`Serve`]
//! builder that you configure and `.await`. [`serve_connection`] serves one accepted TCP
//! connection and is what [`serve`] runs for each connection, on its own task.
//!
//! Every connection goes through the same steps: `TCP_NODELAY`, the TLS handshake, the
//! [`FlushStream`](crate::FlushStream) wrapper, then hyper's HTTP/1.1 + HTTP/2 server (`hyper_util`'s auto
//! builder, with [`TokioTimer`] set on both protocols) with your service. Each request
//! carries the connection's [`ConnectionStats`](crate::ConnectionStats) in its extensions. Under the wrapper,
//! [`EarlyDataStream`](crate::EarlyDataStream) hands hyper what rustls accepted as TLS 1.3 early data (when the
//! rustls config sets `max_early_data_size`; tokio-rustls alone would drop those bytes),
//! and the requests that began in it carry [`EarlyData`](crate::EarlyData). With
//! [`Serve::early_data`] set to [`EarlyDataMode::HalfRtt`], the handshake is
//! [`HalfRttAcceptor`]'s instead: early requests are served before the client's Finished
//! (0.5-RTT), behind [`TooEarlyLayer`].
//!
//! The invariants (accept errors, timeouts, shutdown) are documented on [`Serve`], because
//! this module is private and `Serve` is where users read them:
//! accept errors never end the loop except on an unusable listening socket; handshakes
//! time out (10 s); idle connections are shut down gracefully (60 s) and dropped if nothing
//! moves for one more period; a graceful shutdown refuses new connections, lets responses
//! in flight complete and resolves when every connection has ended; dropping the future
//! aborts every connection.

use std::convert::Infallible;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioTimer;
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn, Instrument};

use crate::accept::{classify, AcceptError, Backoff, DEFAULT_HANDSHAKE_TIMEOUT};
use crate::config::{FlushConfig, SharedSetup};
use crate::early_data::TooEarlyLayer;
use crate::half_rtt::{EarlyDataMode, HalfRttAcceptor};
use crate::stats::StatsSnapshot;

mod activity;
mod connection;
mod streams;

use activity::{idle_for, ActivityClock, Tracked};
use connection::{run_connection, Handshaker, Start};
use streams::StreamExecutor;
pub use streams::StreamTasks;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What [`serve`] and [`serve_connection`] accept: a tower service over
/// `http::Request<hyper::body::Incoming>` that never fails (`Error = Infallible`), is
/// `Clone + Send + 'static` with a `Send + 'static` future, and answers with a body that is
/// `Send + 'static` with `Send` data and boxable errors.
///
/// You never implement it: every such service has it (an axum `Router`, a
/// `tower::ServiceBuilder` stack, a `tower::service_fn`, ...).
///
/// ```
/// fn accepts<S: tls_flush::HttpService>(_: S) {}
/// accepts(axum::Router::new());
/// ```
pub trait HttpService:
    tower::Service<
        Request<Incoming>,
        Response = Response<<Self as HttpService>::ResBody>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
    /// The response body type.
    type ResBody: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> HttpService for S
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type ResBody = B;
}

const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// hyper's own default.
const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// hyper's own default.
const DEFAULT_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// `SETTINGS_MAX_CONCURRENT_STREAMS` the HTTP/2 server announces: 100, as nginx
/// (`http2_max_concurrent_streams`) and h2o do, and the minimum RFC 9113 §6.5.2 recommends
/// (hyper's own default is 200). It bounds what a client makes the server read ahead: each
/// open stream holds a request in h2 and a response of up to h2's per-stream send buffer
/// (128 KiB; with body scheduling 16 KiB, 48 KiB to a nearby peer) waiting for the wrapper's queue, so a client that keeps opening
/// streams while it does not read gets further ones refused (`RST_STREAM` with
/// `REFUSED_STREAM`, which a client retries) instead of growing the server's backlog.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 100;

/// Per-connection settings shared by [`serve`] and [`serve_connection`].
#[derive(Debug, Clone, Copy)]
struct Settings {
    handshake_timeout: Duration,
    idle_timeout: Duration,
    header_read_timeout: Duration,
    keep_alive_interval: Option<Duration>,
    keep_alive_timeout: Duration,
    max_concurrent_streams: u32,
    stream_tasks: StreamTasks,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            keep_alive_interval: None,
            keep_alive_timeout: DEFAULT_KEEP_ALIVE_TIMEOUT,
            max_concurrent_streams: H2_MAX_CONCURRENT_STREAMS,
            stream_tasks: StreamTasks::Connection,
        }
    }
}

/// hyper's per-stream HTTP/2 send buffer under the wrapper (hyper's default is 400 KiB):
/// what h2 buffers sits above the wrapper, in h2's round-robin order, where a more urgent
/// response waits behind it; the wrapper's queue, where priority decides, holds the rest.
/// Enough for the wrapper to pack full records from what h2 writes at once (with one frame,
/// every 16 KiB DATA frame became a full record and a 9-byte one, as stock's do).
pub(crate) const H2_SEND_BUFFER: usize = 128 * 1024;

/// The same with body scheduling on ([`FlushConfig::schedule_bodies`]), where the write
/// budget paces the path: it decides when a body ends, which is when body scheduling stops
/// holding less urgent bodies back. Measured in the browser lab's page-busy (hero image
/// behind a 20 MiB download, tun link), the hero ended at 1,257 ms with 128 KiB, 689-750
/// with 32 KiB, 587 with 16 KiB. Not on a path the budget does not pace (a minimum RTT
/// under [`MIN_PACED_RTT`](crate::MIN_PACED_RTT): loopback, a LAN), whose queues drain
/// in well under a millisecond: there each 16 KiB of a body took a round of task wake-ups,
/// and 1 MiB downloads on loopback got 0.90x stock's throughput (h2load `-c 4 -m 1`, 5
/// alternating rounds, `SCALE_ROWS=bulk scripts/scale.sh`; over 3 rounds 1.43x with 64 KiB,
/// 1.02x with 32, and 1.49x with 128 over 5).
pub(crate) const H2_SEND_BUFFER_SCHEDULED: usize = crate::body_gate::GATE_PIECE;

/// The per-stream send buffer with body scheduling on a path the write budget does not pace
/// (see [`H2_SEND_BUFFER_SCHEDULED`]): what a stalled reader there parks in h2 besides the
/// wrapper's queue. With each request's future on its connection's task
/// ([`StreamTasks::Connection`]), 3 alternating rounds on loopback (`SCALE_ROWS=bulk,stalled
/// scripts/scale.sh 3`): 48 KiB gave bulk 1 MiB bodies 1.26x stock's MB/s and 1,000 stalled
/// downloads 99.6 KiB of server RSS per connection (stock 64.4); 64 KiB 1.31x and 128.3
/// KiB (1.97-2.01x stock's, where spawned tasks had 121); 32 KiB 0.99x and 87.7 KiB.
pub(crate) const H2_SEND_BUFFER_UNPACED: usize = 48 * 1024;

/// hyper's server builders for a connection's path (see [`H2_SEND_BUFFER_SCHEDULED`]): one
/// for a path the write budget paces, one for a nearby peer.
pub(crate) struct HttpBuilders {
    paced: auto::Builder<StreamExecutor>,
    unpaced: auto::Builder<StreamExecutor>,
}

impl HttpBuilders {
    fn new(settings: &Settings, config: &FlushConfig) -> Self {
        let (paced, unpaced) = send_buffers(config);
        HttpBuilders {
            paced: http_builder(settings, paced),
            unpaced: http_builder(settings, unpaced),
        }
    }

    /// The builder for a connection whose path is `path` (read after the handshake, whose
    /// round trips gave TCP its first RTT samples); unknown counts as paced.
    pub(crate) fn for_path(
        &self,
        path: Option<crate::PathState>,
    ) -> &auto::Builder<StreamExecutor> {
        let unpaced =
            path.is_some_and(|s| !s.min_rtt.is_zero() && s.min_rtt < crate::MIN_PACED_RTT);
        if unpaced {
            &self.unpaced
        } else {
            &self.paced
        }
    }
}

/// h2's per-stream send buffer for a path the write budget paces and for one it does not.
fn send_buffers(config: &FlushConfig) -> (usize, usize) {
    if config.schedule_bodies {
        (H2_SEND_BUFFER_SCHEDULED, H2_SEND_BUFFER_UNPACED)
    } else {
        (H2_SEND_BUFFER, H2_SEND_BUFFER)
    }
}

/// hyper's HTTP/1.1 + HTTP/2 server builder as both [`serve`] and [`serve_connection`]
/// configure it: tokio executor, tokio timer on both protocols, the header read timeout,
/// the HTTP/2 keep-alive, at most [`H2_MAX_CONCURRENT_STREAMS`] concurrent streams (or the
/// setting's value) and a per-stream send buffer of `send_buffer` bytes.
fn http_builder(settings: &Settings, send_buffer: usize) -> auto::Builder<StreamExecutor> {
    let mut builder = auto::Builder::new(StreamExecutor {
        tasks: settings.stream_tasks,
    });
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.keep_alive_interval)
        .keep_alive_timeout(settings.keep_alive_timeout)
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_send_buf_size(send_buffer);
    builder
}

/// Serves one accepted TCP connection: `TCP_NODELAY`, the TLS handshake, the wrapper, then
/// hyper's HTTP/1.1 + HTTP/2 server with `service`. Returns the connection's counters.
///
/// It applies the defaults of [`Serve`]: the handshake must finish within 10 s, the
/// connection is shut down gracefully after 60 s without a byte moving on its socket (and
/// dropped after 60 s more), hyper's HTTP/1 header read timeout is 30 s, HTTP/2 keep-alive is
/// off, at most [`H2_MAX_CONCURRENT_STREAMS`] HTTP/2 streams are open at once. Every request carries the connection's [`ConnectionStats`](crate::ConnectionStats) in its extensions.
/// When `acceptor`'s config accepts TLS 1.3 early data (`max_early_data_size` above
/// zero, stateful resumption), those bytes are served through [`EarlyDataStream`](crate::EarlyDataStream), and the
/// requests that began in them carry [`EarlyData`](crate::EarlyData) (see
/// [`TooEarlyLayer`]).
///
/// Errors: the handshake's (`TimedOut` when it took too long), a connection dropped while
/// shutting down (`TimedOut`), and hyper's (as `io::Error::other`).
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
pub async fn serve_connection<S: HttpService>(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    config: FlushConfig,
    service: S,
) -> io::Result<StatsSnapshot> {
    serve_one(tcp, Handshaker::Rustls(acceptor), config, service).await
}

/// [`serve_connection`] with 0.5-RTT early data: requests that arrive as TLS 1.3 early data
/// are answered before the client's Finished, in the server's first flight, as
/// [`Serve::early_data`] with [`EarlyDataMode::HalfRtt`] does (non-idempotent early requests
/// get `425 Too Early`, see [`TooEarlyLayer`]). Make `acceptor` once
/// per server: it checks the rustls config (and probes a custom session store) when it is
/// made, and early data it refuses is logged there.
///
/// ```no_run
/// # async fn run(tcp: tokio::net::TcpStream, tls: std::sync::Arc<rustls::ServerConfig>) {
/// let acceptor = tls_flush::HalfRttAcceptor::new(tls, tls_flush::DEFAULT_MAX_EARLY_DATA_SIZE);
/// let app = axum::Router::new();
/// let stats = tls_flush::serve_half_rtt_connection(tcp, acceptor, tls_flush::FlushConfig::default(), app)
///     .await
///     .unwrap();
/// println!("records written: {}", stats.records_written);
/// # }
/// ```
pub async fn serve_half_rtt_connection<S: HttpService>(
    tcp: TcpStream,
    acceptor: HalfRttAcceptor,
    config: FlushConfig,
    service: S,
) -> io::Result<StatsSnapshot> {
    let handshaker = Handshaker::HalfRtt(acceptor, TooEarlyLayer::default());
    serve_one(tcp, handshaker, config, service).await
}

/// One connection with [`Serve`]'s default settings, outside a server's accept loop.
async fn serve_one<S: HttpService>(
    tcp: TcpStream,
    handshaker: Handshaker,
    config: FlushConfig,
    service: S,
) -> io::Result<StatsSnapshot> {
    let settings = Settings::default();
    let builders = HttpBuilders::new(&settings, &config);
    let peer = tcp.peer_addr().ok();
    let start = Box::new(Start {
        tcp,
        handshaker,
        shared: SharedSetup::new(config),
        service,
        handshake_timeout: settings.handshake_timeout,
        shutdown: None,
    });
    logged(connection_span(peer), || {
        run_connection(start, settings.idle_timeout, &builders)
    })
    .await
}

/// Accepts TLS connections on `listener` and serves each with `service` on its own task,
/// through [`FlushStream`](crate::FlushStream) with `config`. Configure the returned [`Serve`], then `.await` it.
///
/// The future runs until [`Serve::with_graceful_shutdown`]'s signal fires and every
/// connection has ended (`Ok(())`), or until the listening socket becomes unusable (`Err`,
/// see [`Serve`]); without a signal and on a healthy socket it never resolves. [`Serve`]
/// documents what happens on accept errors, timeouts and shutdown.
///
/// Handlers can read the connection's counters: each request carries its connection's
/// [`ConnectionStats`](crate::ConnectionStats) in its extensions (`Extension<ConnectionStats>` in axum).
///
/// ```no_run
/// # async fn run(acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
/// use axum::{routing::get, Extension};
/// use tls_flush::ConnectionStats;
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
/// let app = axum::Router::new()
///     .route("/", get(|| async { "hi" }))
///     .route(
///         "/stats",
///         get(|Extension(stats): Extension<ConnectionStats>| async move {
///             format!("{:?}", stats.snapshot())
///         }),
///     );
/// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
///     .with_graceful_shutdown(async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await
/// # }
/// ```
pub fn serve<S: HttpService>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    config: FlushConfig,
    service: S,
) -> Serve<S> {
    Serve {
        listener,
        acceptor,
        config,
        service,
        settings: Settings::default(),
        early_data: EarlyDataMode::AfterHandshake,
        too_early: TooEarlyLayer::new(),
        signal: None,
    }
}

/// A TLS server being configured; returned by [`serve`]. `.await` it to run it
/// (it implements [`IntoFuture`] with `Output = io::Result<()>`).
///
/// # Invariants
///
/// - **Accept errors never stop the server** unless the listening socket itself is unusable.
///   Errors about one pending connection (`ECONNABORTED`, `ECONNRESET`, `EPROTO`,
///   `EHOSTUNREACH` and the other network errors Linux reports from `accept`, `EPERM` from a
///   firewall) are logged at debug level and the next connection is accepted at once. Every
///   other error (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`, ...) is logged with
///   `tracing::warn!` and accepting is retried after a pause that starts at 5 ms, doubles up
///   to 1 s while errors continue, and resets after a successful accept. Only `EBADF`,
///   `ENOTSOCK` and `EINVAL` (the descriptor was closed or replaced, or the socket is no
///   longer listening; none of them can recover) end the accept loop: the open connections
///   are then shut down gracefully as after a shutdown signal, and the future resolves to
///   that error once they have ended.
/// - **TLS handshake timeout** (default 10 s, [`Serve::handshake_timeout`]): a connection
///   whose handshake has not finished by then is dropped, logged at debug level.
/// - **Idle timeout** (default 60 s, [`Serve::idle_timeout`]): a connection on whose socket
///   no byte moved in either direction for that long is asked to shut down gracefully; if no
///   byte moves for one more idle timeout after a graceful shutdown began (for any reason),
///   it is dropped.
/// - **HTTP/1 header read timeout** (default hyper's 30 s, [`Serve::header_read_timeout`])
///   and **HTTP/2 keep-alive** (default off, [`Serve::http2_keep_alive`]) are hyper's own.
/// - **HTTP/2 concurrent streams** (default 100, [`Serve::http2_max_concurrent_streams`]):
///   announced in the server's SETTINGS; streams past it are refused (`REFUSED_STREAM`), so
///   a client that keeps opening streams cannot grow the server's read-side backlog.
/// - **Graceful shutdown** ([`Serve::with_graceful_shutdown`]): when the signal fires the
///   listener is dropped (new connections are refused), connections still in their TLS
///   handshake are dropped, every other connection is asked to shut down gracefully
///   (HTTP/2 `GOAWAY`; HTTP/1.1 closes after the response in flight), responses in flight
///   complete, and the future resolves once every connection has ended.
/// - **Dropping the future** (for example when a `tokio::time::timeout` around it expires)
///   drops the listener and aborts every connection task still running.
/// - **Request extensions**: every request carries its connection's [`ConnectionStats`](crate::ConnectionStats)
///   (`Extension<ConnectionStats>` in axum), a handle on live counters; requests that
///   began in TLS 1.3 early data carry [`EarlyData`](crate::EarlyData).
/// - **Early data** ([`Serve::early_data`]): by default as the rustls config says, served
///   after the handshake; with [`EarlyDataMode::HalfRtt`], answered before the client's
///   Finished, non-idempotent early requests getting `425 Too Early`.
#[must_use = "a Serve does nothing until it is awaited"]
pub struct Serve<S> {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    config: FlushConfig,
    service: S,
    settings: Settings,
    early_data: EarlyDataMode,
    too_early: TooEarlyLayer,
    signal: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<S> fmt::Debug for Serve<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("local_addr", &self.listener.local_addr().ok())
            .field("config", &self.config)
            .field("handshake_timeout", &self.settings.handshake_timeout)
            .field("idle_timeout", &self.settings.idle_timeout)
            .field("header_read_timeout", &self.settings.header_read_timeout)
            .field(
                "http2_keep_alive_interval",
                &self.settings.keep_alive_interval,
            )
            .field(
                "http2_keep_alive_timeout",
                &self.settings.keep_alive_timeout,
            )
            .field(
                "http2_max_concurrent_streams",
                &self.settings.max_concurrent_streams,
            )
            .field("stream_tasks", &self.settings.stream_tasks)
            .field("early_data", &self.early_data)
            .field("too_early", &self.too_early)
            .field("graceful_shutdown", &self.signal.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Serve<S> {
    /// How long a TLS handshake may take (default 10 s), counted from the accept. A
    /// connection whose handshake has not finished by then is dropped and logged at debug
    /// level.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// use std::time::Duration;
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .handshake_timeout(Duration::from_secs(5))
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.settings.handshake_timeout = timeout;
        self
    }

    /// How long a connection may stay idle (default 60 s) before it is shut down gracefully
    /// with hyper's `graceful_shutdown` (HTTP/2 `GOAWAY`, HTTP/1.1 close once the response
    /// in flight is written).
    ///
    /// *Idle* means that no byte was read from or written to the connection's TCP socket,
    /// in either direction: TLS records of any kind count (application data, alerts, key
    /// updates), so do HTTP/2 control frames such as PING and WINDOW_UPDATE. A response
    /// still being computed while nothing moves is idle time too: its connection is asked
    /// to shut down, the response still completes. A download that a client reads slowly
    /// is not idle as long as some byte moves within each timeout.
    ///
    /// Precision: the time of the last byte is kept with millisecond resolution, and the
    /// check runs on tokio's timer (1 ms granularity), so the shutdown begins no earlier
    /// than `timeout` after the last byte, and normally within 2 ms plus scheduling delay
    /// after that.
    ///
    /// If no byte moves for one more `timeout` after a graceful shutdown began (for this
    /// reason or because of [`with_graceful_shutdown`](Self::with_graceful_shutdown)'s
    /// signal), the connection is dropped: a peer that stopped reading cannot hold it open.
    ///
    /// Interactions: with [`http2_keep_alive`](Self::http2_keep_alive) at an interval
    /// shorter than `timeout`, hyper's PINGs are traffic and an idle HTTP/2 connection is
    /// never closed by this timeout. HTTP/1.1 connections waiting for their next request
    /// are also closed by hyper's [`header_read_timeout`](Self::header_read_timeout),
    /// whichever comes first.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// use std::time::Duration;
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .idle_timeout(Duration::from_secs(300))
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.settings.idle_timeout = timeout;
        self
    }

    /// hyper's HTTP/1 header read timeout (default hyper's 30 s): a client must send a
    /// request's complete header section within this time after hyper starts reading it,
    /// which includes the wait for the next request on a kept-alive connection; otherwise
    /// the connection is closed. It does not apply to HTTP/2.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// use std::time::Duration;
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .header_read_timeout(Duration::from_secs(10))
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.settings.header_read_timeout = timeout;
        self
    }

    /// hyper's HTTP/2 keep-alive (default off): with `Some(interval)`, hyper sends a PING
    /// after `interval` without frames from the client, and closes the connection if the
    /// acknowledgement does not arrive within `timeout` (hyper's default 20 s). hyper's
    /// server pings idle connections too, which keeps them from
    /// [`idle_timeout`](Self::idle_timeout) when `interval` is shorter. It does not apply to
    /// HTTP/1.1.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// use std::time::Duration;
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .http2_keep_alive(Some(Duration::from_secs(30)), Duration::from_secs(10))
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn http2_keep_alive(mut self, interval: Option<Duration>, timeout: Duration) -> Self {
        self.settings.keep_alive_interval = interval;
        self.settings.keep_alive_timeout = timeout;
        self
    }

    /// `SETTINGS_MAX_CONCURRENT_STREAMS` announced to HTTP/2 clients (default
    /// [`H2_MAX_CONCURRENT_STREAMS`], 100): streams a client opens past it are refused with
    /// `RST_STREAM(REFUSED_STREAM)` (RFC 9113 §5.1.2), which clients retry, so a client
    /// cannot make the server hold more requests and responses than this per connection.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .http2_max_concurrent_streams(250)
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn http2_max_concurrent_streams(mut self, max: u32) -> Self {
        self.settings.max_concurrent_streams = max;
        self
    }

    /// Where each HTTP/2 request's future (the service call and the response body) runs
    /// (default [`StreamTasks::Connection`]: on its connection's task).
    ///
    /// On its connection's task, the responses that requests read together make ready
    /// reach the wrapper, and the wire, in the same turn, and the connection costs the
    /// runtime no task per request: h2load `-c 1000 -m 10` on loopback (4 KiB urgent
    /// responses, 2 cores, two alternating runs) got 1.16-1.18x the requests per second
    /// and 0.71-0.73x the mean time per request of spawned tasks, whose responses reached
    /// the wrapper as the runtime got to each request's task. [`StreamTasks::Spawned`]
    /// spreads one connection's streams over the runtime's worker threads, for services
    /// whose handlers compute on the async threads and whose clients send many requests
    /// on one connection.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .stream_tasks(tls_flush::StreamTasks::Spawned)
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn stream_tasks(mut self, tasks: StreamTasks) -> Self {
        self.settings.stream_tasks = tasks;
        self
    }

    /// How TLS 1.3 early data is answered (default [`EarlyDataMode::AfterHandshake`]).
    ///
    /// - `AfterHandshake` is what the rustls config says: early data is accepted only if
    ///   its `max_early_data_size` is above zero (0 by default in rustls), and the requests
    ///   in it are answered after the client's Finished; they carry
    ///   [`EarlyData`](crate::EarlyData) and nothing else changes.
    /// - `HalfRtt { max_early_data_size }` opts in to 0.5-RTT through
    ///   [`HalfRttAcceptor`]: up to that many bytes of early data are accepted (whatever
    ///   the config says) on resumed connections, the requests in them are served at once
    ///   and their responses leave in the server's first flight, before the client's
    ///   Finished. Early requests whose method is not GET, HEAD or OPTIONS are answered
    ///   `425 Too Early` (the client sends them again after the handshake), the others reach
    ///   the service with `Early-Data: 1` and [`EarlyData`](crate::EarlyData); change that
    ///   with [`too_early`](Self::too_early). Early data is refused, and connections are
    ///   served after the handshake, where it cannot be made safe: with client
    ///   certificate authentication, with stateless tickets, with a session store whose
    ///   tickets are not single use (see [`HalfRttAcceptor`]; the reason is logged as a
    ///   warning when the server starts).
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .early_data(tls_flush::EarlyDataMode::half_rtt())
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn early_data(mut self, mode: EarlyDataMode) -> Self {
        self.early_data = mode;
        self
    }

    /// Which early requests reach the service under [`EarlyDataMode::HalfRtt`] (default
    /// [`TooEarlyLayer::new`]: GET, HEAD and OPTIONS; `425 Too Early` for the others).
    /// [`TooEarlyLayer::any_method`] lets every early request through (opting out of the
    /// 425s: the app must then treat [`EarlyData`](crate::EarlyData) requests as
    /// replayable). Without 0.5-RTT it has no effect.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// use tls_flush::{EarlyDataMode, TooEarlyLayer};
    /// let app = axum::Router::new();
    /// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .early_data(EarlyDataMode::half_rtt())
    ///     .too_early(TooEarlyLayer::new().safe_methods([http::Method::GET]))
    ///     .await
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn too_early(mut self, layer: TooEarlyLayer) -> Self {
        self.too_early = layer;
        self
    }

    /// Shuts the server down gracefully when `signal` completes: the listener is dropped,
    /// so new connections are refused; connections still in their TLS handshake are
    /// dropped; every other connection is asked to shut down gracefully (HTTP/2 `GOAWAY`,
    /// HTTP/1.1 closes after the response in flight); responses in flight complete; the
    /// future resolves with `Ok(())` once every connection has ended.
    ///
    /// There is no upper bound on that wait other than the idle rule of
    /// [`idle_timeout`](Self::idle_timeout) (a connection on which nothing moves for that
    /// long is dropped): a slow download keeps the server running. Callers who want a bound
    /// wrap the future in `tokio::time::timeout`; when it expires the future is dropped,
    /// which aborts the remaining connections. A second call replaces the first signal.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// use std::future::IntoFuture;
    /// use std::time::Duration;
    ///
    /// let app = axum::Router::new();
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let mut server = tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
    ///     .with_graceful_shutdown(async {
    ///         let _ = stopped.await;
    ///     })
    ///     .into_future();
    /// tokio::select! {
    ///     res = &mut server => return res,
    ///     _ = tokio::signal::ctrl_c() => {
    ///         let _ = stop.send(());
    ///     }
    /// }
    /// // At most 30 s more for the responses in flight; then dropping `server` aborts the rest.
    /// tokio::time::timeout(Duration::from_secs(30), server)
    ///     .await
    ///     .unwrap_or(Ok(()))
    /// # }
    /// ```
    #[must_use = "this returns the configured Serve, which does nothing until awaited"]
    pub fn with_graceful_shutdown<F>(mut self, signal: F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.signal = Some(Box::pin(signal));
        self
    }

    /// The address the listener is bound to.
    ///
    /// ```no_run
    /// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
    /// let app = axum::Router::new();
    /// let server = tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app);
    /// println!("listening on https://{}", server.local_addr()?);
    /// server.await
    /// # }
    /// ```
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

impl<S: HttpService> IntoFuture for Serve<S> {
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

impl<S: HttpService> Serve<S> {
    async fn run(self) -> io::Result<()> {
        let Serve {
            listener,
            acceptor,
            config,
            service,
            settings,
            early_data,
            too_early,
            signal,
        } = self;
        let handshaker = Handshaker::new(acceptor, early_data, too_early);
        let builders = Arc::new(HttpBuilders::new(&settings, &config));
        let shared = SharedSetup::new(config);
        let mut signal = signal.unwrap_or_else(|| Box::pin(std::future::pending()));
        // `true` once the server shuts down; every connection task holds a receiver.
        let (shutdown, _) = watch::channel(false);
        let mut connections = JoinSet::new();
        let mut backoff = Backoff::default();
        let mut failure = None;
        let local = listener.local_addr().ok();
        debug!(addr = ?local, "tls-flush: accepting");

        'accept: loop {
            tokio::select! {
                biased;
                () = &mut signal => break 'accept,
                Some(joined) = connections.join_next() => reap(joined),
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _peer)) => {
                        backoff.reset();
                        let start = Box::new(Start {
                            tcp,
                            handshaker: handshaker.clone(),
                            shared: shared.clone(),
                            service: service.clone(),
                            handshake_timeout: settings.handshake_timeout,
                            shutdown: Some(shutdown.subscribe()),
                        });
                        let task =
                            run_connection_owned(start, settings.idle_timeout, builders.clone());
                        connections.spawn(task);
                    }
                    Err(err) => match classify(&err) {
                        AcceptError::Connection => {
                            debug!(error = %err, "accept failed for one connection; continuing");
                        }
                        AcceptError::Fatal => {
                            tracing::error!(error = %err, "listener unusable; shutting down");
                            failure = Some(err);
                            break 'accept;
                        }
                        AcceptError::Transient => {
                            let delay = backoff.next_delay();
                            warn!(error = %err, retry_in = ?delay, "accept failed");
                            tokio::select! {
                                biased;
                                () = &mut signal => break 'accept,
                                () = tokio::time::sleep(delay) => {}
                            }
                        }
                    },
                },
            }
        }

        drop(listener);
        shutdown.send_replace(true);
        debug!(
            addr = ?local,
            connections = connections.len(),
            "tls-flush: stopped accepting; shutting connections down gracefully"
        );
        while let Some(joined) = connections.join_next().await {
            reap(joined);
        }
        debug!(addr = ?local, "tls-flush: all connections ended");
        match failure {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

fn reap(joined: Result<(), tokio::task::JoinError>) {
    if let Err(err) = joined {
        if err.is_panic() {
            warn!(error = %err, "connection task panicked");
        }
    }
}

/// A connection's task: [`run_connection`] for `start`; the outcome is logged inside.
async fn run_connection_owned<S: HttpService>(
    start: Box<Start<S>>,
    idle_timeout: Duration,
    builders: Arc<HttpBuilders>,
) {
    let span = connection_span(start.tcp.peer_addr().ok());
    let _ = logged(span, || run_connection(start, idle_timeout, &builders)).await;
}

/// The connection `start` begins (a [`run_connection`]) in `span`, which names its peer.
/// Logs its outcome at debug level. It takes a closure, not the future, and is not an
/// async fn: a future passed in would be kept twice in the task (once as the argument, once
/// where it is awaited; the task of an idle connection grew by about 17 KiB), and so would
/// an async fn's arguments (the peer's address and the closure: 64 bytes).
fn logged<F: Future<Output = io::Result<StatsSnapshot>>>(
    span: tracing::Span,
    start: impl FnOnce() -> F,
) -> impl Future<Output = io::Result<StatsSnapshot>> {
    async move {
        let result = start().await;
        match &result {
            Ok(stats) => debug!(counters = ?stats, "closed"),
            Err(err) => debug!(error = %err, "connection failed"),
        }
        result
    }
    .instrument(span)
}

/// The span a connection runs in.
fn connection_span(peer: Option<SocketAddr>) -> tracing::Span {
    tracing::debug_span!("tls-flush", peer = ?peer)
}

/// Completes once the server shuts down; never without a receiver, or when the server was
/// dropped (its connection tasks are aborted then anyway).
async fn shutdown_requested(shutdown: &mut Option<watch::Receiver<bool>>) {
    if let Some(rx) = shutdown {
        // `changed` rather than `wait_for`: every open connection keeps this future.
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            if rx.changed().await.is_err() {
                break;
            }
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service type of the tests below.
    type Svc = tower::util::ServiceFn<
        fn(Request<Incoming>) -> std::future::Ready<Result<Response<String>, Infallible>>,
    >;

    /// With body scheduling, a connection whose path the write budget paces gets h2's
    /// one-frame send buffer, a nearby peer (loopback, a LAN) the larger one, and a path
    /// not known yet counts as paced; without body scheduling both are hyper's usual one.
    #[test]
    fn the_h2_send_buffer_follows_the_path() {
        let path = |micros| {
            Some(crate::PathState {
                min_rtt: Duration::from_micros(micros),
                ..Default::default()
            })
        };
        let settings = Settings::default();
        let scheduled = HttpBuilders::new(
            &settings,
            &FlushConfig::for_policy(crate::Policy::Scheduled),
        );
        assert!(std::ptr::eq(
            scheduled.for_path(path(40)),
            &scheduled.unpaced
        ));
        assert!(std::ptr::eq(
            scheduled.for_path(path(20_000)),
            &scheduled.paced
        ));
        assert!(std::ptr::eq(scheduled.for_path(path(0)), &scheduled.paced));
        assert!(std::ptr::eq(scheduled.for_path(None), &scheduled.paced));
        assert_eq!(
            send_buffers(&FlushConfig::for_policy(crate::Policy::Scheduled)),
            (H2_SEND_BUFFER_SCHEDULED, H2_SEND_BUFFER_UNPACED)
        );
        // Without body scheduling nothing depends on the path.
        let in_order = FlushConfig::for_policy(crate::Policy::EarlyFlush);
        assert_eq!(send_buffers(&in_order), (H2_SEND_BUFFER, H2_SEND_BUFFER));
    }

    /// The size of the future `f` returns, without calling it.
    fn output_size<A, F>(_: impl FnOnce(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Each open connection holds its task's future, sized for its largest state: apart from
    /// hyper's connection it keeps little (not the handshake's state, nor the accepted
    /// socket, handshaker, config and service it started from; 10.6 KiB before, 4.4 of them
    /// hyper's connection; beyond hyper's connection the task kept 736 bytes of its own, the
    /// idle check and the shutdown watch among them, and keeps 568 now). One future serves both
    /// handshakes (tokio-rustls' and 0.5-RTT), whose streams differ: it is checked against
    /// hyper's connection over each.
    #[test]
    fn a_connection_task_is_little_more_than_hyper_connection() {
        let task = output_size(
            |(start, idle, builders): (Box<Start<Svc>>, Duration, Arc<HttpBuilders>)| {
                run_connection_owned(start, idle, builders)
            },
        );
        for (handshake, conn) in ["rustls", "0.5-RTT"]
            .into_iter()
            .zip(connection::hyper_connection_sizes::<Svc>())
        {
            assert!(
                task <= conn + 640,
                "task {task} B, hyper's connection over the {handshake} stream {conn} B"
            );
        }
    }
}
