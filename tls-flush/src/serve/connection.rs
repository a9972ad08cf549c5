//! One connection of [`serve`](fn@crate::serve): the handshake (tokio-rustls' or 0.5-RTT),
//! the wrapper, hyper's connection with the service, the idle and shutdown rules.

use std::future::Future;
use std::io;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use super::{idle_for, shutdown_requested, ActivityClock, HttpService, Settings, Tracked};
use crate::body_gate::{BodyGate, GatedService};
use crate::config::FlushConfig;
use crate::early_data::{EarlyDataStream, EarlyRequests, OrEmpty, TooEarlyLayer};
use crate::half_rtt::{EarlyDataMode, HalfRttAcceptor};
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

/// One connection, from the accepted TCP stream to its end; see [`logged`] for its outcome.
pub(super) async fn run_connection<S: HttpService>(
    tcp: TcpStream,
    handshaker: Handshaker,
    config: FlushConfig,
    service: S,
    settings: &Settings,
    builder: &auto::Builder<TokioExecutor>,
    mut shutdown: Option<watch::Receiver<bool>>,
) -> io::Result<StatsSnapshot> {
    tcp.set_nodelay(true)?;
    let clock = Arc::new(ActivityClock::new());
    let io = Tracked {
        io: tcp,
        clock: clock.clone(),
    };
    match handshaker {
        Handshaker::Rustls(acceptor) => {
            let tls = handshake(settings, &mut shutdown, acceptor.accept(io)).await?;
            // Early data first (rustls keeps it aside; without this a client whose 0-RTT the
            // server accepted would never be answered), then the wrapper.
            let tls = EarlyDataStream::new(tls);
            let early = tls.early_requests();
            let too_early = TooEarlyLayer::pass_through();
            let conn = Connection {
                settings,
                builder,
                clock,
                shutdown,
            };
            conn.serve(tls, early, too_early, config, service).await
        }
        Handshaker::HalfRtt(acceptor, too_early) => {
            let tls = handshake(settings, &mut shutdown, acceptor.accept(io)).await?;
            debug!(
                half_rtt = tls.is_half_rtt(),
                "handshake done or early data accepted"
            );
            let early = tls.early_requests();
            let conn = Connection {
                settings,
                builder,
                clock,
                shutdown,
            };
            conn.serve(tls, early, too_early, config, service).await
        }
    }
}

/// `accept` within the handshake timeout, unless the server shuts down first.
async fn handshake<T>(
    settings: &Settings,
    shutdown: &mut Option<watch::Receiver<bool>>,
    accept: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let handshake = tokio::time::timeout(settings.handshake_timeout, accept);
    tokio::select! {
        handshake = handshake => match handshake {
            Ok(Ok(tls)) => Ok(tls),
            Ok(Err(err)) => {
                debug!(error = %err, "TLS handshake failed; dropping the connection");
                Err(err)
            }
            Err(_) => {
                debug!(
                    timeout = ?settings.handshake_timeout,
                    "TLS handshake timed out; dropping the connection"
                );
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "TLS handshake not finished within {:?}",
                        settings.handshake_timeout
                    ),
                ))
            }
        },
        () = shutdown_requested(shutdown) => {
            debug!("server shutting down; dropping a connection in its TLS handshake");
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "server shut down during the TLS handshake",
            ))
        }
    }
}

/// What a connection keeps from its accept to its end, past the handshake.
struct Connection<'a> {
    settings: &'a Settings,
    builder: &'a auto::Builder<TokioExecutor>,
    clock: Arc<ActivityClock>,
    shutdown: Option<watch::Receiver<bool>>,
}

impl Connection<'_> {
    /// Wraps `tls`, marks the requests `early` counts, applies `too_early`, and serves
    /// hyper's connection until it ends.
    async fn serve<T, S>(
        self,
        tls: T,
        early: EarlyRequests,
        too_early: TooEarlyLayer,
        config: FlushConfig,
        service: S,
    ) -> io::Result<StatsSnapshot>
    where
        T: Transport + Send + 'static,
        S: HttpService,
    {
        let Connection {
            settings,
            builder,
            clock,
            mut shutdown,
        } = self;
        let schedule_bodies = config.schedule_bodies;
        let stream = FlushStream::new(tls, config);
        let gate = (schedule_bodies && stream.is_http2()).then(BodyGate::default);
        let stats: ConnectionStats = stream.stats();
        tracing::debug!(
            http2 = stream.is_http2(),
            early = early.remaining(),
            "wrapped"
        );
        let request_stats = stats.clone();
        // A 425 needs a body of the service's type: an empty one.
        let service =
            tower::util::MapResponse::new(service, |r: Response<S::ResBody>| r.map(OrEmpty::new));
        let service = tower::Layer::layer(&too_early, service);
        let service = tower::util::MapRequest::new(service, move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(request_stats.clone());
            early.mark(&mut req);
            req
        });
        let service = GatedService::new(service, gate);
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let mut conn = std::pin::pin!(conn);
        let idle_timeout = settings.idle_timeout;
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
                    conn.as_mut().graceful_shutdown();
                    shutting_down = true;
                    clock.touch();
                    idle.set(idle_for(&clock, idle_timeout));
                }
                () = shutdown_requested(&mut shutdown), if !shutting_down => {
                    debug!("server shutting down; shutting the connection down gracefully");
                    conn.as_mut().graceful_shutdown();
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
}
