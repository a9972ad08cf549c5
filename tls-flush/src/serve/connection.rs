//! One connection of [`serve`](fn@crate::serve): the handshake (tokio-rustls' or 0.5-RTT),
//! the wrapper, hyper's connection with the service, the idle and shutdown rules.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use super::streams::WithStreams;
use super::{
    idle_for, shutdown_requested, ActivityClock, BoxError, HttpBuilders, HttpService,
    StreamExecutor, Tracked,
};
use crate::accept::handshake_within;
use crate::body_gate::{BodyGate, GatedBody, GatedFuture};
use crate::config::SharedSetup;
use crate::early_data::{EarlyDataStream, EarlyRequests, OrEmpty, TooEarly, TooEarlyLayer};
use crate::half_rtt::{EarlyDataMode, HalfRttAcceptor, HalfRttStream};
use crate::stats::{ConnectionStats, StatsSnapshot};
use crate::stream::FlushStream;
use crate::transport::Transport;

/// The TLS side of a connection: tokio-rustls' accept (early data, if the config accepts
/// it, is served after the handshake) or 0.5-RTT.
#[derive(Clone)]
pub(super) enum Handshaker {
    Rustls(TlsAcceptor),
    HalfRtt(HalfRttAcceptor, TooEarlyLayer),
}

impl Handshaker {
    pub(super) fn new(
        acceptor: TlsAcceptor,
        mode: EarlyDataMode,
        too_early: TooEarlyLayer,
    ) -> Self {
        match mode {
            EarlyDataMode::AfterHandshake => Handshaker::Rustls(acceptor),
            EarlyDataMode::HalfRtt {
                max_early_data_size,
            } => {
                let half_rtt = HalfRttAcceptor::new(acceptor.config().clone(), max_early_data_size);
                if let Some(why) = half_rtt.refusal() {
                    warn!(reason = ?why, "tls-flush: 0.5-RTT asked for, but early data is refused");
                }
                Handshaker::HalfRtt(half_rtt, too_early)
            }
        }
    }
}

/// What a connection starts from: the accepted socket and what its handshake and wrapper
/// need. Boxed, and consumed by [`open`], so that the task's future keeps neither these nor
/// the handshake's state while the connection lives: rustc keeps an async fn's arguments,
/// and every local that was borrowed before an await, for the whole function, and an idle
/// connection's task was 10.6 KiB, 4.4 of them hyper's connection. (`open`'s own state
/// needs no box: rustc lays it over the serving phase's, which it never lives with.)
pub(super) struct Start<S> {
    pub(super) tcp: TcpStream,
    pub(super) handshaker: Handshaker,
    pub(super) shared: SharedSetup,
    pub(super) service: S,
    pub(super) handshake_timeout: Duration,
    pub(super) shutdown: Option<watch::Receiver<bool>>,
}

/// The stream tokio-rustls' handshake gives, early data (served after it) first.
type RustlsIo = EarlyDataStream<Tracked<TcpStream>>;
/// The stream the 0.5-RTT handshake gives.
type HalfRttIo = HalfRttStream<Tracked<TcpStream>>;

/// The service's responses, with a body a `425 Too Early` can have too (an empty one). A fn
/// pointer rather than a closure, so that the service's type can be named.
type OrEmptyFn<B> = fn(Response<B>) -> Response<OrEmpty<B>>;

/// The service hyper calls: each request marked (in the order h2 accepted them, which the
/// body gate needs), then the body gate, the 0.5-RTT rule.
type Stack<S> = Marked<
    TowerToHyperService<
        TooEarly<tower::util::MapResponse<S, OrEmptyFn<<S as HttpService>::ResBody>>>,
    >,
>;

/// hyper's connection over the wrapper over `T`.
type HyperConnection<'a, T, S> =
    auto::Connection<'a, TokioIo<FlushStream<T>>, Stack<S>, StreamExecutor>;

/// A connection after its handshake, wrapped, in hyper's hands: what serving it needs.
struct Opened<'a, S: HttpService> {
    conn: Serving<'a, S>,
    clock: Arc<ActivityClock>,
    stats: ConnectionStats,
    shutdown: Option<watch::Receiver<bool>>,
}

/// One connection, from the accepted TCP stream to its end; see [`logged`](super::logged)
/// for its outcome.
pub(super) async fn run_connection<S: HttpService>(
    start: Box<Start<S>>,
    idle_timeout: Duration,
    builders: &HttpBuilders,
) -> io::Result<StatsSnapshot> {
    let Opened {
        conn,
        clock,
        stats,
        mut shutdown,
    } = open(start, builders).await?;
    let mut conn = std::pin::pin!(WithStreams::new(conn));
    let mut idle = std::pin::pin!(idle_for(&clock, idle_timeout));
    let mut shutting_down = false;
    let served = loop {
        tokio::select! {
            served = conn.as_mut() => break served,
            () = idle.as_mut() => {
                if shutting_down {
                    debug!(
                        timeout = ?idle_timeout,
                        "nothing moved while shutting down; dropping the connection"
                    );
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no byte moved for {idle_timeout:?} during a graceful shutdown"),
                    ));
                }
                debug!(timeout = ?idle_timeout, "idle; shutting down gracefully");
                conn.as_mut().conn().graceful_shutdown();
                shutting_down = true;
                clock.touch();
                idle.set(idle_for(&clock, idle_timeout));
            }
            () = shutdown_requested(&mut shutdown), if !shutting_down => {
                debug!("server shutting down; shutting the connection down gracefully");
                conn.as_mut().conn().graceful_shutdown();
                shutting_down = true;
                clock.touch();
                idle.set(idle_for(&clock, idle_timeout));
            }
        }
    };
    if let Err(err) = served {
        // The counters of a connection that failed are worth as much as a clean one's.
        debug!(error = %err, counters = ?stats.snapshot(), "closed with an error");
        return Err(io::Error::other(err));
    }
    Ok(stats.snapshot())
}

/// `TCP_NODELAY`, the TLS handshake (within its timeout, unless the server shuts down),
/// then the wrapper and hyper's connection.
async fn open<S: HttpService>(
    start: Box<Start<S>>,
    builders: &HttpBuilders,
) -> io::Result<Opened<'_, S>> {
    let Start {
        tcp,
        handshaker,
        shared,
        service,
        handshake_timeout,
        mut shutdown,
    } = *start;
    tcp.set_nodelay(true)?;
    let clock = Arc::new(ActivityClock::new());
    let io = Tracked {
        io: tcp,
        clock: clock.clone(),
    };
    let (conn, stats) = match handshaker {
        Handshaker::Rustls(acceptor) => {
            let accept = std::pin::pin!(acceptor.accept(io));
            let tls = handshake(handshake_timeout, &mut shutdown, accept).await?;
            // Early data first (rustls keeps it aside; without this a client whose 0-RTT the
            // server accepted would never be answered), then the wrapper.
            let tls = EarlyDataStream::new(tls);
            let early = tls.early_requests();
            let too_early = TooEarlyLayer::pass_through();
            let (conn, stats) = wrap(tls, early, &too_early, &shared, service, builders);
            (Serving::Rustls { conn }, stats)
        }
        Handshaker::HalfRtt(acceptor, too_early) => {
            let accept = std::pin::pin!(acceptor.accept(io));
            let tls = handshake(handshake_timeout, &mut shutdown, accept).await?;
            debug!(
                half_rtt = tls.is_half_rtt(),
                "handshake done or early data accepted"
            );
            let early = tls.early_requests();
            let (conn, stats) = wrap(tls, early, &too_early, &shared, service, builders);
            (Serving::HalfRtt { conn }, stats)
        }
    };
    Ok(Opened {
        conn,
        clock,
        stats,
        shutdown,
    })
}

/// `accept` within `timeout`, unless the server shuts down first. `accept` is best pinned
/// by the caller and passed as `Pin<&mut _>`: an async fn keeps its arguments for its
/// whole life, so a future passed by value would take its room twice (once as the
/// argument, once inside the timeout).
async fn handshake<T>(
    timeout: Duration,
    shutdown: &mut Option<watch::Receiver<bool>>,
    accept: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::select! {
        handshake = handshake_within(timeout, accept) => handshake.inspect_err(|err| {
            debug!(error = %err, "TLS handshake failed or timed out; dropping the connection");
        }),
        () = shutdown_requested(shutdown) => {
            debug!("server shutting down; dropping a connection in its TLS handshake");
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "server shut down during the TLS handshake",
            ))
        }
    }
}

/// Wraps `tls`, whose handshake is done, and hands it to hyper with the service that marks
/// the requests `early` counts and applies `too_early`; a plain fn, so that none of this
/// stays in the task's future.
fn wrap<'a, T, S>(
    tls: T,
    early: EarlyRequests,
    too_early: &TooEarlyLayer,
    shared: &SharedSetup,
    service: S,
    builders: &'a HttpBuilders,
) -> (HyperConnection<'a, T, S>, ConnectionStats)
where
    T: Transport + Send + 'static,
    S: HttpService,
{
    let schedule_bodies = shared.config.schedule_bodies;
    let builder = builders.for_path(tls.path_state());
    let mut stream = FlushStream::with_shared(tls, shared);
    let gate = (schedule_bodies && stream.is_http2()).then(BodyGate::default);
    if let Some(gate) = &gate {
        stream.follow_bodies(gate.clone());
    }
    let stats = stream.stats();
    tracing::debug!(
        http2 = stream.is_http2(),
        early = early.remaining(),
        "wrapped"
    );
    // A 425 needs a body of the service's type: an empty one.
    let or_empty: OrEmptyFn<S::ResBody> = |r| r.map(OrEmpty::new);
    let service = tower::util::MapResponse::new(service, or_empty);
    let service = tower::Layer::layer(too_early, service);
    let service = Marked {
        inner: TowerToHyperService::new(service),
        stats: stats.clone(),
        early,
        gate,
    };
    (
        builder.serve_connection(TokioIo::new(stream), service),
        stats,
    )
}

/// `inner`, a hyper service, with the connection's [`ConnectionStats`] in every request's
/// extensions, [`EarlyData`](crate::EarlyData) in those that began in TLS 1.3 early data,
/// and each response body behind the body gate (none: untouched) at the priority the wire
/// scheduler gives it.
///
/// Why at hyper's level: the body gate claims streams in the order h2 accepted them, and
/// hyper calls its service in that order; a tower service behind `TowerToHyperService` is
/// only called once the request's future is first polled, which with
/// [`StreamTasks::Spawned`](crate::StreamTasks) is in whatever order the runtime runs their
/// tasks. (The early mark matches each request by its key and needs no order, except for
/// requests the early bytes could not key, which are marked by count.)
#[derive(Debug, Clone)]
struct Marked<S> {
    inner: S,
    stats: ConnectionStats,
    early: EarlyRequests,
    gate: Option<BodyGate>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Marked<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
    B: http_body::Body,
{
    type Response = Response<GatedBody<B>>;
    type Error = S::Error;
    type Future = GatedFuture<S::Future>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(self.stats.clone());
        self.early.mark(&mut req);
        let claim = self.gate.as_ref().map(|gate| gate.claim(req.headers()));
        GatedFuture::new(self.inner.call(req), claim)
    }
}

pin_project_lite::pin_project! {
    /// hyper's connection over either handshake's stream: one type, so that the task's
    /// future has one serving phase, the larger of the two.
    #[project = ServingProj]
    enum Serving<'a, S: HttpService> {
        Rustls { #[pin] conn: HyperConnection<'a, RustlsIo, S> },
        HalfRtt { #[pin] conn: HyperConnection<'a, HalfRttIo, S> },
    }
}

impl<S: HttpService> Serving<'_, S> {
    /// hyper's graceful shutdown (HTTP/2 `GOAWAY`, or the end of the HTTP/1.1 connection
    /// after the request in flight).
    fn graceful_shutdown(self: Pin<&mut Self>) {
        match self.project() {
            ServingProj::Rustls { conn } => conn.graceful_shutdown(),
            ServingProj::HalfRtt { conn } => conn.graceful_shutdown(),
        }
    }
}

impl<S: HttpService> Future for Serving<'_, S> {
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ServingProj::Rustls { conn } => conn.poll(cx),
            ServingProj::HalfRtt { conn } => conn.poll(cx),
        }
    }
}

/// The size of hyper's connection over each handshake's stream, for the size test.
#[cfg(test)]
pub(super) fn hyper_connection_sizes<S: HttpService>() -> [usize; 2] {
    [
        std::mem::size_of::<HyperConnection<'static, RustlsIo, S>>(),
        std::mem::size_of::<HyperConnection<'static, HalfRttIo, S>>(),
    ]
}
