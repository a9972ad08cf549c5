//! Runs through the kernel-faithful link ([`crate::tun`]): the server in the link's server
//! namespace, the client in the client namespace, the emulator's view of the critical
//! request's arrival and, when asked for, its packet trace.

use std::net::SocketAddr;
use std::time::Instant;

use super::{
    fixture, labelled, on_client_thread, run_limit, Case, Measured, RunResult, Urgencies, Workload,
};
use crate::client::Trust;
use crate::peers::{PeerKind, PeerOptions, PeerServer};
use crate::server::{ServerSetup, ServerStats, TestServer};
use crate::tap::TapLog;
use crate::tun::{
    self, cross_head_start, CrossTraffic, PacketEvent, Side, TunConfig, TunLink, SERVER_ADDR,
};
use crate::BoxError;

/// One run through the tun link with what the emulator saw.
#[derive(Debug, Clone)]
pub struct TunRun {
    /// The figures.
    pub result: RunResult,
    /// Every packet, up to [`TunConfig::trace_packets`] (empty when that is 0).
    pub trace: Vec<PacketEvent>,
    /// When the link started (the origin of the trace's times).
    pub link_started: Instant,
    /// What the client's taps saw: the records and frames the server's bytes carried.
    pub client_log: TapLog,
    /// Handshake records at the start of `client_log.records`.
    pub handshake_records: usize,
    /// The critical request's stream.
    pub critical_stream: u32,
}

/// [`run_tun_traced`], the figures only.
pub async fn run_tun(
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
    config: &TunConfig,
) -> Result<RunResult, BoxError> {
    Ok(run_tun_traced(case, workload, urgencies, config)
        .await?
        .result)
}

/// Runs `workload` once like [`super::run_once`], through a fresh kernel-faithful link
/// ([`crate::tun`], root only) instead of the relay: the server runs in the link's server
/// namespace (ours in-process on a thread there, listening on [`SERVER_ADDR`]; a peer under
/// `ip netns exec`), the client in the client namespace, and both kernels' TCP with
/// `config.cc` runs over the emulated path. Fresh namespaces for every run, so nothing (TCP
/// metrics, queue state) carries over from the previous one; everything is removed before
/// this returns, also when the run fails. An [`Case::External`] server cannot be reached
/// from the client namespace: it is an error.
/// The result carries the emulator's server-to-client queue when the critical request
/// reached the server, and for the `tls-flush` cases the server's figures
/// ([`super::Attribution`]).
///
/// With [`TunConfig::cross_flows`], that many bulk TCP flows ([`CrossTraffic`]) run
/// through the same bottleneck from their head start ([`cross_head_start`]) before the
/// client connects until it is done; the result's [`super::PathFigures`] then carry the
/// fixture's `bottleneck_share`. A run whose cross traffic moved nothing in its head
/// start, or failed before it was stopped, fails. [`TunConfig::clients`] must be 1 (see
/// [`run_tun_clients`]).
pub async fn run_tun_traced(
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
    config: &TunConfig,
) -> Result<TunRun, BoxError> {
    if config.clients != 1 {
        return Err(format!("a traced run has one client, not {}", config.clients).into());
    }
    let mut run = run_clients(case, workload, urgencies, config).await?;
    let measured = run.clients.pop().expect("one client")?;
    let mut result = run.figures(&measured, case, workload, urgencies);
    if let Some(stats) = &run.server_stats {
        result.attribution.from_server(&stats.connections());
        result.path.from_server(stats);
    }
    Ok(TunRun {
        result,
        trace: run.trace,
        link_started: run.link_started,
        client_log: measured.measured.log,
        handshake_records: measured.measured.handshake_records,
        critical_stream: measured.measured.critical_stream,
    })
}

/// Like [`run_tun`], with [`TunConfig::clients`] clients at once on one server, each on
/// its own connection from its own thread in the client namespace, all starting together:
/// one result per client (its [`RunResult::client`]), or that client's error (a client that
/// fails or times out does not stop the others). The error of the whole run is for what
/// every client needs (the link, the server, the cross traffic). With more than one client
/// the server's per-connection figures ([`super::Attribution`]'s server side, the write
/// budget's counters, retransmits) are left out, as no client can tell which connection was
/// its own, and so is the link's queue at the request; `link_drops` counts the whole
/// link's drops during the run, and a `bottleneck_share` counts the cross traffic against
/// that client's bytes alone.
pub async fn run_tun_clients(
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
    config: &TunConfig,
) -> Result<Vec<Result<RunResult, BoxError>>, BoxError> {
    if config.clients == 1 {
        return Ok(vec![run_tun(case, workload, urgencies, config).await]);
    }
    let mut run = run_clients(case, workload, urgencies, config).await?;
    let clients = std::mem::take(&mut run.clients);
    Ok(clients
        .into_iter()
        .enumerate()
        .map(|(client, measured)| {
            Ok(RunResult {
                client,
                ..run.figures(&measured?, case, workload, urgencies)
            })
        })
        .collect())
}

/// What every client of a run through the tun link saw, and the link and server figures
/// gathered before they were torn down.
struct ClientsRun {
    /// Per client, in order: its measurement or its error (labelled).
    clients: Vec<Result<ClientFigures, BoxError>>,
    trace: Vec<PacketEvent>,
    link_started: Instant,
    /// Packets the link dropped while the clients ran.
    drops: u64,
    /// Ours only.
    server_stats: Option<ServerStats>,
}

/// One client's measurement, and what the link and the cross traffic did meanwhile.
struct ClientFigures {
    measured: Measured,
    /// The emulator's server-to-client queue when the critical request reached the server.
    link_queue: Option<u64>,
    /// What the cross traffic's sink received during the client's transfer.
    cross_bytes: Option<u64>,
}

impl ClientsRun {
    /// A client's figures, labelled with the cell, without the server's.
    fn figures(
        &self,
        client: &ClientFigures,
        case: &Case,
        workload: Workload,
        urgencies: Urgencies,
    ) -> RunResult {
        let mut result = labelled(client.measured.result.clone(), case, workload, urgencies);
        result.attribution.link_queue_bytes_at_request = client.link_queue;
        result.path.link_drops = Some(self.drops);
        if let Some(bytes) = client.cross_bytes {
            result.path.with_cross(workload, bytes);
        }
        result
    }
}

/// Starts the link, the server and the cross traffic, runs [`TunConfig::clients`] clients
/// at once, and tears everything down (also on an error).
async fn run_clients(
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
    config: &TunConfig,
) -> Result<ClientsRun, BoxError> {
    let label = format!("{case}/{workload}/{urgencies}");
    if let Case::External { addr, .. } = case {
        return Err(format!(
            "{label}: an external server ({addr}) cannot run behind the tun link: it is outside \
             the link's network namespaces (use --link relay)"
        )
        .into());
    }
    let start_config = config.clone();
    let link = tun::blocking(move || TunLink::start(start_config))
        .await?
        .map_err(|e| format!("{label}: starting the tun link: {e}"))?;
    // Dropping `link` (here or on an early return) removes the namespaces.
    let server = match (case.setup(), case) {
        (Some(setup), _) => TunServer::start_in_process(&link, setup).await,
        (None, Case::Peer(kind)) => TunServer::start_peer(&link, *kind, None).await,
        (None, _) => unreachable!("external servers are refused above"),
    }
    .map_err(|e| format!("{label}: starting the server: {e}"))?;
    let cross = match start_cross(&link, config.cross_flows).await {
        Ok(cross) => cross,
        Err(e) => {
            let _ = tun::blocking(move || server.stop()).await;
            return Err(format!("{label}: cross traffic: {e}").into());
        }
    };
    let (addr, certificate) = server.endpoint();
    let server_stats = match &server {
        TunServer::InProcess { stats, .. } => Some(stats.clone()),
        TunServer::Peer(_) => None,
    };
    let limit = run_limit(Some((config.rate_mbit, config.rtt)));
    let client_namespace = link.namespace(Side::Client).to_string();
    let drops_before = link_drops(&link);
    let measured = futures_util::future::join_all((0..config.clients.max(1)).map(|_| {
        let (namespace, trust) = (
            client_namespace.clone(),
            Trust::Certificate(certificate.clone()),
        );
        on_client_thread(limit, Some(namespace), move || {
            fixture(addr, trust, workload, urgencies)
        })
    }))
    .await;
    let drops = link_drops(&link) - drops_before;
    let cross_bytes: Vec<Option<u64>> = measured
        .iter()
        .map(|m| {
            let (cross, m) = (cross.as_ref()?, m.as_ref().ok()?);
            let (from, to) = m.transfer;
            Some(cross.received_between(from, to))
        })
        .collect();
    // Stop the cross traffic (joins its threads: blocking).
    let cross_stopped = match cross {
        Some(cross) => tun::blocking(move || cross.stop()).await?.map(drop),
        None => Ok(()),
    };
    // Stop the server (waits for its thread or process: blocking), then remove the link.
    let stopped = tun::blocking(move || server.stop()).await?;
    // The request that reached the link first after a client's critical request left is
    // that request only when no other client shares the link.
    let link_queues: Vec<Option<u64>> = measured
        .iter()
        .map(|m| {
            let m = m.as_ref().ok().filter(|_| config.clients == 1)?;
            link.downstream_queue_after(m.sent_at)
        })
        .collect();
    let (trace, link_started) = (link.trace(), link.started_at());
    tun::blocking(move || drop(link)).await?;
    stopped.map_err(|e| format!("{label}: stopping the server: {e}"))?;
    cross_stopped.map_err(|e| format!("{label}: cross traffic: {e}"))?;
    let clients = measured
        .into_iter()
        .zip(link_queues.into_iter().zip(cross_bytes))
        .enumerate()
        .map(|(client, (m, (link_queue, cross_bytes)))| match m {
            Ok(measured) => Ok(ClientFigures {
                measured,
                link_queue,
                cross_bytes,
            }),
            Err(e) if config.clients > 1 => Err(format!("{label}: client {client}: {e}").into()),
            Err(e) => Err(format!("{label}: {e}").into()),
        })
        .collect();
    Ok(ClientsRun {
        clients,
        trace,
        link_started,
        drops,
        server_stats,
    })
}

/// Starts `flows` cross flows on `link` (none for 0) and waits their head start, drawn from
/// the link's seed ([`cross_head_start`]); fails if they moved nothing meanwhile.
pub(crate) async fn start_cross(
    link: &TunLink,
    flows: usize,
) -> Result<Option<CrossTraffic>, BoxError> {
    if flows == 0 {
        return Ok(None);
    }
    // Connecting takes about one RTT per flow; blocks this thread meanwhile.
    let cross = CrossTraffic::start(link, flows)?;
    let head_start = cross_head_start(link.config().seed);
    tokio::time::sleep(head_start).await;
    if cross.received_bytes() == 0 {
        return Err(format!("{flows} flows moved nothing in {head_start:?}").into());
    }
    Ok(Some(cross))
}

/// The packets the link's server-to-client direction dropped so far: tail drops and
/// random losses.
pub(crate) fn link_drops(link: &TunLink) -> u64 {
    let downstream = link.stats().downstream;
    downstream.dropped + downstream.lost
}

/// The server of a run through the tun link.
pub(crate) enum TunServer {
    /// Ours, on a current-thread runtime on a thread in the server namespace, until `stop`
    /// (one thread, like the peers' single worker). The flavour matters on this link: on a
    /// multi-thread runtime the background handlers were seen to race ahead of the critical
    /// one in `simultaneous` (112 KiB of background before the critical response with
    /// `scheduled`, instead of 32 KiB).
    InProcess {
        addr: SocketAddr,
        certificate: rustls::pki_types::CertificateDer<'static>,
        stats: ServerStats,
        stop: tokio::sync::oneshot::Sender<()>,
        thread: std::thread::JoinHandle<std::io::Result<()>>,
    },
    /// A peer, started under `ip netns exec`.
    Peer(PeerServer),
}

impl TunServer {
    async fn start_in_process(link: &TunLink, setup: ServerSetup) -> Result<TunServer, BoxError> {
        TunServer::start_with(link, move |addr| TestServer::demo_on(setup, addr)).await
    }

    /// Starts the server `start` makes (given the address to listen on, [`SERVER_ADDR`]
    /// port 0) on a current-thread runtime on a thread in the link's server namespace.
    pub(crate) async fn start_with<F, Fut>(link: &TunLink, start: F) -> Result<TunServer, BoxError>
    where
        F: FnOnce(SocketAddr) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<TestServer, BoxError>>,
    {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = link.spawn_in(Side::Server, "tun-server", move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(BoxError::from(e)));
                    return;
                }
            };
            runtime.block_on(async move {
                match start(SocketAddr::from((SERVER_ADDR, 0))).await {
                    Ok(server) => {
                        let _ = ready_tx.send(Ok((
                            server.addr,
                            server.certificate.clone(),
                            server.stats(),
                        )));
                        // Serve until told to stop (or until the run is dropped).
                        let _ = stop_rx.await;
                        drop(server);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
            // Dropping the runtime ends the connection tasks: the sockets close.
        })?;
        match ready_rx.await {
            Ok(Ok((addr, certificate, stats))) => Ok(TunServer::InProcess {
                addr,
                certificate,
                stats,
                stop,
                thread,
            }),
            Ok(Err(e)) => Err(e),
            // The thread ended without a word: it could not enter the namespace, or panicked.
            Err(_) => match tun::blocking(move || thread.join()).await? {
                Ok(Err(e)) => Err(e.into()),
                _ => Err("the server thread panicked".into()),
            },
        }
    }

    /// Starts the peer `kind` under `ip netns exec` in the link's server namespace, serving
    /// `site` too when given ([`PeerOptions::site`]).
    pub(crate) async fn start_peer(
        link: &TunLink,
        kind: PeerKind,
        site: Option<std::path::PathBuf>,
    ) -> Result<TunServer, BoxError> {
        let options = PeerOptions {
            bind: SERVER_ADDR.into(),
            command_prefix: link.command_prefix(Side::Server),
            site,
            ..PeerOptions::default()
        };
        // Started (blocking) from a thread in the server namespace, where its readiness
        // probe connects.
        let thread = link.spawn_in(Side::Server, "tun-peer-start", move || {
            PeerServer::start_with(kind, &options)
        })?;
        match tun::blocking(move || thread.join()).await? {
            Ok(Ok(Ok(peer))) => Ok(TunServer::Peer(peer)),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err("the thread starting the peer panicked".into()),
        }
    }

    /// Where the client reaches it, and its certificate.
    pub(crate) fn endpoint(&self) -> (SocketAddr, rustls::pki_types::CertificateDer<'static>) {
        match self {
            TunServer::InProcess {
                addr, certificate, ..
            } => (*addr, certificate.clone()),
            TunServer::Peer(peer) => (peer.addr(), peer.certificate().clone()),
        }
    }

    /// Stops the server and waits until it is gone (blocking).
    pub(crate) fn stop(self) -> Result<(), BoxError> {
        match self {
            TunServer::InProcess { stop, thread, .. } => {
                let _ = stop.send(());
                match thread.join() {
                    Ok(result) => Ok(result?),
                    Err(_) => Err("the server thread panicked".into()),
                }
            }
            TunServer::Peer(peer) => {
                drop(peer);
                Ok(())
            }
        }
    }
}
