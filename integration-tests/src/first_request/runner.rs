//! Running the workload: a fresh server behind a fresh emulated link, the client on its own
//! thread, then everything torn down.
//!
//! Every run has the same shape, whatever its client case, server, connection or link:
//! start the server, start the link in front of it ([`Stage`]), run the client's job with a
//! time limit on a client thread (in the tun link's client namespace there), stop the
//! server and the link, and report. [`run_on`] is that shape's one home; the public
//! functions only say which job ([`first_request_client`] or [`rate_client`]) on which link
//! ([`RunLink`]).
//!
//! Invariants: the client's outcome is reported before a failure to stop the server (it
//! says more about the run); every error names the run (`case/server/connection`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::results::{ms, RateTally};
use super::servers::{start_relay_server, start_tun_server};
use super::{
    client_config, one_connection, ClientCase, Connection, ConnectionOutcome, FirstRequestResult,
    FirstRequestServer, RateResult, CONNECTION_TIMEOUT,
};
use crate::client::Trust;
use crate::link::{LinkConfig, RelayLink};
use crate::server::LoopbackServer;
use crate::tun::{self, PacketEvent, Side, TunConfig, TunLink};
use crate::workload::{on_client_thread, TunServer};
use crate::BoxError;

/// Packets the tun link records per run for the segment count (a run takes a few dozen).
const TRACE_PACKETS: usize = 20_000;

/// The emulated link of a run.
#[derive(Debug, Clone, Copy)]
enum RunLink<'a> {
    /// The relay on loopback ([`crate::link`]).
    Relay(&'a LinkConfig),
    /// The kernel-faithful link between two network namespaces ([`crate::tun`], root only).
    Tun(&'a TunConfig),
}

impl RunLink<'_> {
    /// `relay` or `tun`, as the results say.
    fn name(self) -> &'static str {
        match self {
            RunLink::Relay(_) => "relay",
            RunLink::Tun(_) => "tun",
        }
    }

    /// The link's round-trip time.
    fn rtt(self) -> Duration {
        match self {
            RunLink::Relay(config) => config.rtt,
            RunLink::Tun(config) => config.rtt,
        }
    }
}

/// A fresh server behind a fresh link, ready for a run's client.
enum Stage {
    /// The server on loopback, the relay in front of it.
    Relay {
        server: LoopbackServer,
        link: RelayLink,
    },
    /// The server in the tun link's server namespace (the link boxed: it is the largest
    /// part by far, and a relay run should not carry its size).
    Tun {
        server: TunServer,
        link: Box<TunLink>,
    },
}

/// What tearing a [`Stage`] down left.
struct TornDown {
    /// The tun link's packet log (`None` on the relay).
    trace: Option<Vec<PacketEvent>>,
    /// How stopping the tun link's server went, told after the client's outcome.
    server_stopped: Result<(), BoxError>,
}

impl Stage {
    /// Starts `server`, then `link` in front of it; errors are prefixed with `label`.
    async fn start(
        server: FirstRequestServer,
        link: RunLink<'_>,
        label: &str,
    ) -> Result<Stage, BoxError> {
        match link {
            RunLink::Relay(config) => Stage::start_relay(server, config, label).await,
            RunLink::Tun(config) => Stage::start_tun(server, config, label).await,
        }
    }

    async fn start_relay(
        server: FirstRequestServer,
        config: &LinkConfig,
        label: &str,
    ) -> Result<Stage, BoxError> {
        let server = start_relay_server(server)
            .await
            .map_err(|e| format!("{label}: starting the server: {e}"))?;
        let (upstream, _) = server.endpoint();
        let link = RelayLink::start(upstream, *config)
            .await
            .map_err(|e| format!("{label}: starting the link: {e}"))?;
        Ok(Stage::Relay { server, link })
    }

    async fn start_tun(
        server: FirstRequestServer,
        config: &TunConfig,
        label: &str,
    ) -> Result<Stage, BoxError> {
        let mut config = config.clone();
        config.trace_packets = config.trace_packets.max(TRACE_PACKETS);
        let link = tun::blocking(move || TunLink::start(config))
            .await?
            .map_err(|e| format!("{label}: starting the tun link: {e}"))?;
        let server = start_tun_server(&link, server)
            .await
            .map_err(|e| format!("{label}: starting the server: {e}"))?;
        Ok(Stage::Tun {
            server,
            link: Box::new(link),
        })
    }

    /// Where the client connects (the relay's end, or the server in the other namespace),
    /// and how it trusts the server.
    fn client_endpoint(&self) -> (SocketAddr, Trust) {
        match self {
            Stage::Relay { server, link } => (link.addr(), Trust::Certificate(server.endpoint().1)),
            Stage::Tun { server, .. } => {
                let (addr, certificate) = server.endpoint();
                (addr, Trust::Certificate(certificate))
            }
        }
    }

    /// The network namespace the client runs in (the tun link's client side).
    fn client_namespace(&self) -> Option<String> {
        match self {
            Stage::Relay { .. } => None,
            Stage::Tun { link, .. } => Some(link.namespace(Side::Client).to_string()),
        }
    }

    /// Stops the link and the server (the server first on the tun link, whose packet log
    /// is read before the link goes).
    async fn tear_down(self) -> Result<TornDown, BoxError> {
        match self {
            Stage::Relay { server, link } => {
                drop(link);
                server.stop().await?;
                Ok(TornDown {
                    trace: None,
                    server_stopped: Ok(()),
                })
            }
            Stage::Tun { server, link } => {
                let server_stopped = tun::blocking(move || server.stop()).await?;
                let trace = link.trace();
                tun::blocking(move || drop(link)).await?;
                Ok(TornDown {
                    trace: Some(trace),
                    server_stopped,
                })
            }
        }
    }
}

/// **The shape of every run**: `job` (given where to connect and how to trust the server)
/// on a client thread within `limit`, against a fresh `server` behind a fresh `link`;
/// returns what the job returned and the tun link's packet log. `label` prefixes errors.
async fn run_on<T, F, Fut>(
    server: FirstRequestServer,
    link: RunLink<'_>,
    label: &str,
    limit: Duration,
    job: F,
) -> Result<(T, Option<Vec<PacketEvent>>), BoxError>
where
    F: FnOnce(SocketAddr, Trust) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
    T: Send + 'static,
{
    let stage = Stage::start(server, link, label).await?;
    let (addr, trust) = stage.client_endpoint();
    let namespace = stage.client_namespace();
    let outcome = on_client_thread(limit, namespace, move || job(addr, trust)).await;
    let torn_down = stage.tear_down().await?;
    let outcome = outcome.map_err(|e| format!("{label}: {e}"))?;
    torn_down
        .server_stopped
        .map_err(|e| format!("{label}: stopping the server: {e}"))?;
    Ok((outcome, torn_down.trace))
}

/// The client of one first-request run: a priming connection for `resumed`, a pause of
/// `settle` (its close travels), then the measured connection.
async fn first_request_client(
    case: ClientCase,
    connection: Connection,
    addr: SocketAddr,
    trust: Trust,
    settle: Duration,
) -> Result<ConnectionOutcome, BoxError> {
    let config = client_config(case, &trust)?;
    if connection == Connection::Resumed {
        one_connection(case, addr, config.clone())
            .await
            .map_err(|e| format!("priming connection: {e}"))?;
        tokio::time::sleep(settle).await;
    }
    one_connection(case, addr, config).await
}

/// One first-request run of `case` against a fresh `server` through a fresh `link`.
async fn first_request_on(
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
    link: RunLink<'_>,
) -> Result<FirstRequestResult, BoxError> {
    let label = format!("{case}/{server}/{connection}");
    // The priming connection's close gets a round trip to travel.
    let settle = link.rtt();
    let (outcome, trace) = run_on(
        server,
        link,
        &label,
        CONNECTION_TIMEOUT * 3,
        move |addr, trust| first_request_client(case, connection, addr, trust, settle),
    )
    .await?;
    Ok(FirstRequestResult::new(
        case,
        server,
        link.name(),
        connection,
        &outcome,
        trace.as_deref(),
    ))
}

/// One first-request run behind a fresh relay link with `link`, against a fresh `server`.
pub async fn run_relay(
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
    link: &LinkConfig,
) -> Result<FirstRequestResult, BoxError> {
    first_request_on(case, server, connection, RunLink::Relay(link)).await
}

/// One first-request run through a fresh kernel-faithful link (root only), the server in
/// its server namespace and the client in its client namespace; counts the first flight's
/// TCP segments from the emulator's packet log.
pub async fn run_tun(
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
    config: &TunConfig,
) -> Result<FirstRequestResult, BoxError> {
    first_request_on(case, server, connection, RunLink::Tun(config)).await
}

/// The client of a rate run: connections one after the other until `duration` has passed.
async fn rate_client(
    case: ClientCase,
    addr: SocketAddr,
    trust: Trust,
    duration: Duration,
) -> Result<RateTally, BoxError> {
    let config = client_config(case, &trust)?;
    let start = Instant::now();
    let (mut connections, mut resumed) = (0, 0);
    let mut firsts = Vec::new();
    while start.elapsed() < duration {
        let outcome = one_connection(case, addr, config.clone())
            .await
            .map_err(|e| format!("connection {}: {e}", connections + 1))?;
        connections += 1;
        resumed += usize::from(outcome.tls.resumed());
        firsts.push(ms(outcome.connect_start, outcome.first_response_at));
    }
    firsts.sort_by(f64::total_cmp);
    Ok(RateTally {
        connections,
        resumed,
        elapsed: start.elapsed(),
        median_first_response_ms: firsts.get(firsts.len() / 2).copied().unwrap_or(0.0),
    })
}

/// A connection-rate run of `case` for `duration` against a fresh `server` through a fresh
/// `link`.
async fn rate_on(
    case: ClientCase,
    server: FirstRequestServer,
    duration: Duration,
    link: RunLink<'_>,
) -> Result<RateResult, BoxError> {
    let label = format!("{case}/{server}/connection-rate");
    let (tally, _) = run_on(
        server,
        link,
        &label,
        duration + CONNECTION_TIMEOUT * 2,
        move |addr, trust| rate_client(case, addr, trust, duration),
    )
    .await?;
    Ok(RateResult::new(case, server, link.name(), tally))
}

/// A connection-rate run behind a fresh relay link: against one fresh `server`, the
/// client of `case` opens one connection after the other (TCP, TLS, HTTP/2, `GET
/// /critical`, close; sequentially, one at a time) for `duration`, sharing one session
/// store, so that every connection after the first can resume.
pub async fn connection_rate(
    case: ClientCase,
    server: FirstRequestServer,
    duration: Duration,
    link: &LinkConfig,
) -> Result<RateResult, BoxError> {
    rate_on(case, server, duration, RunLink::Relay(link)).await
}

/// [`connection_rate`] through a fresh kernel-faithful link (root only).
pub async fn connection_rate_tun(
    case: ClientCase,
    server: FirstRequestServer,
    duration: Duration,
    config: &TunConfig,
) -> Result<RateResult, BoxError> {
    // The rate run reads no packet log: the link records only the first-request runs'
    // minimum (`TRACE_PACKETS`), never more because `config` asks for more.
    let mut config = config.clone();
    config.trace_packets = 0;
    rate_on(case, server, duration, RunLink::Tun(&config)).await
}
