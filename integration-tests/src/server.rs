//! Servers under test, started in-process: any tower service (the demo app by default),
//! served over rustls, wrapped by `tls-flush` with a policy (the product's
//! `tls_flush::serve_connection`) or plain (`stock`: the example servers' stock connection).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use examples::server::serve_stock_connection;
use http::Request;
use hyper::body::Incoming;
use rustls::pki_types::CertificateDer;
use tls_flush::{ConnectionStats, FlushConfig, HttpService, Policy};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::util::MapRequest;

use crate::client::{ClientOptions, TapClient};
use crate::peers::{PeerKind, PeerOptions, PeerServer};
use crate::BoxError;
use retransmits::Retransmits;

mod retransmits;

/// How the server under test writes: stock hyper + tokio-rustls, or through the wrapper.
#[derive(Debug, Clone, Default)]
pub struct ServerSetup {
    /// `None` is stock (no wrapper).
    pub policy: Option<Policy>,
    /// rustls `max_fragment_size` (e.g. 4096 for static 4 KiB records).
    pub record_size: Option<usize>,
    /// A full wrapper configuration, used instead of `policy`'s preset when set.
    pub config: Option<FlushConfig>,
    /// How wrapped connections answer TLS 1.3 early data (the rustls config decides
    /// whether any is accepted): after the handshake (default), or 0.5-RTT through
    /// [`tls_flush::serve_half_rtt_connection`].
    pub early_data: tls_flush::EarlyDataMode,
}

impl ServerSetup {
    /// Wrapped by `tls-flush` with `policy`'s preset, default records.
    pub fn with_policy(policy: Policy) -> ServerSetup {
        ServerSetup {
            policy: Some(policy),
            ..ServerSetup::default()
        }
    }

    /// Stock (no wrapper) and every policy, each with its name (`stock`, then
    /// [`Policy::name`]).
    pub fn all() -> Vec<(&'static str, ServerSetup)> {
        let mut all = vec![("stock", ServerSetup::default())];
        all.extend(
            Policy::ALL
                .into_iter()
                .map(|p| (p.name(), ServerSetup::with_policy(p))),
        );
        all
    }
}

/// A server under test on loopback, the relay link's upstream: ours in-process or a peer
/// process; stopped when dropped, or by [`LoopbackServer::stop`], which waits for a peer's
/// process off the runtime's threads.
pub(crate) enum LoopbackServer {
    InProcess(TestServer),
    Peer(PeerServer),
}

impl LoopbackServer {
    /// Starts the peer `kind` with `options` (blocking until its port answers: off the
    /// runtime's threads).
    pub(crate) async fn start_peer(
        kind: PeerKind,
        options: PeerOptions,
    ) -> Result<LoopbackServer, BoxError> {
        let peer = tokio::task::spawn_blocking(move || PeerServer::start_with(kind, &options));
        Ok(LoopbackServer::Peer(peer.await??))
    }

    /// Where it listens, and its certificate.
    pub(crate) fn endpoint(&self) -> (SocketAddr, CertificateDer<'static>) {
        match self {
            LoopbackServer::InProcess(s) => (s.addr, s.certificate.clone()),
            LoopbackServer::Peer(p) => (p.addr(), p.certificate().clone()),
        }
    }

    /// Stops it; for a peer, waits for the process to exit.
    pub(crate) async fn stop(self) -> Result<(), BoxError> {
        if let LoopbackServer::Peer(peer) = self {
            tokio::task::spawn_blocking(move || drop(peer)).await?;
        }
        Ok(())
    }
}

/// A server running on a background task; stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its certificate, to trust in clients.
    pub certificate: CertificateDer<'static>,
    stats: ServerStats,
    live: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Starts the demo app (`examples::axum_app::router()`) on 127.0.0.1 with `setup`.
    pub async fn demo(setup: ServerSetup) -> Result<TestServer, BoxError> {
        TestServer::start(setup, examples::axum_app::router()).await
    }

    /// Starts the demo app on `addr` (port 0: a free one) with `setup`, e.g. on an address
    /// inside a network namespace ([`crate::tun`]) when called on a thread that entered it.
    pub async fn demo_on(setup: ServerSetup, addr: SocketAddr) -> Result<TestServer, BoxError> {
        TestServer::start_on(setup, examples::axum_app::router(), addr).await
    }

    /// Starts `service` on 127.0.0.1 with `setup`.
    /// `service` is any tower service hyper can serve ([`tls_flush::HttpService`]: an axum
    /// `Router` is one).
    pub async fn start<S: HttpService>(
        setup: ServerSetup,
        service: S,
    ) -> Result<TestServer, BoxError> {
        TestServer::start_on(setup, service, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts `service` on `addr` (port 0: a free one) with `setup`.
    pub async fn start_on<S: HttpService>(
        setup: ServerSetup,
        service: S,
        addr: SocketAddr,
    ) -> Result<TestServer, BoxError> {
        let identity = examples::tls::self_signed()?;
        let certificate = identity.chain[0].clone();
        let mut tls = examples::tls::server_config(identity, setup.record_size)?;
        // No session tickets: every application-data record after the handshake is then
        // HTTP bytes, which lets the client map records to frames.
        tls.send_tls13_tickets = 0;
        TestServer::start_with_tls(setup, service, addr, certificate, tls).await
    }

    /// Starts `service` on `addr` (port 0: a free one) with `setup`, over a rustls
    /// configuration of the caller's (e.g. with session tickets and early data, which
    /// [`start_on`](Self::start_on) turns off); `certificate` is the one `tls` presents,
    /// for clients to trust. `setup.record_size` is left to `tls` (its
    /// `max_fragment_size`), and only tells the wrapper.
    pub async fn start_with_tls<S: HttpService>(
        setup: ServerSetup,
        service: S,
        addr: SocketAddr,
        certificate: CertificateDer<'static>,
        tls: rustls::ServerConfig,
    ) -> Result<TestServer, BoxError> {
        let handshake = Handshake::new(Arc::new(tls), setup.early_data);
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Mutex::new(Vec::new()));
        let live = Arc::new(AtomicUsize::new(0));
        let retransmits = Retransmits::default();
        let config = setup.config.clone().or_else(|| {
            setup
                .policy
                .map(|p| FlushConfig::for_policy(p).tls_max_fragment_size(setup.record_size))
        });
        let task = tokio::spawn(accept_loop(
            listener,
            handshake,
            config,
            service,
            stats.clone(),
            live.clone(),
            retransmits.clone(),
        ));
        Ok(TestServer {
            addr,
            certificate,
            stats: ServerStats(stats, retransmits),
            live,
            task,
        })
    }

    /// Client options that trust this server's certificate (see [`TapClient::connect`]).
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions::trusting(self.certificate.clone())
    }

    /// A tapped client connected to this server, trusting its certificate.
    pub async fn client(&self) -> Result<TapClient, BoxError> {
        TapClient::connect(self.addr, self.client_options()).await
    }

    /// Counters of every wrapped connection that has made a request so far, in the order of
    /// their first requests (empty for stock).
    pub fn connection_stats(&self) -> Vec<ConnectionStats> {
        self.stats.connections()
    }

    /// A handle on the same counters that outlives the server and can move to another
    /// thread (e.g. out of a network namespace's thread the server runs on).
    pub fn stats(&self) -> ServerStats {
        self.stats.clone()
    }

    /// Connections accepted whose task has not ended yet (TLS handshake, serving, or
    /// shutting down). Connection tasks outlive the `TestServer`; this counts them anyway.
    pub fn live_connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

/// The counters of a [`TestServer`]'s wrapped connections ([`TestServer::stats`]).
#[derive(Debug, Clone, Default)]
pub struct ServerStats(Arc<Mutex<Vec<ConnectionStats>>>, Retransmits);

impl ServerStats {
    /// Counters of every wrapped connection that has made a request so far, in the order
    /// of their first requests (empty for stock).
    pub fn connections(&self) -> Vec<ConnectionStats> {
        self.0.lock().expect("stats poisoned").clone()
    }

    /// Segments the server's TCP retransmitted on every connection it accepted, stock ones
    /// included (Linux `tcpi_total_retrans`: each open connection's count now, each closed
    /// one's when its task ended); `None` before the first connection.
    pub fn server_retransmits(&self) -> Option<u64> {
        self.1.total()
    }
}

/// Counts one live connection task; the count goes down when the task ends, however it
/// ends (returned, panicked, or dropped by the runtime).
struct LiveGuard(Arc<AtomicUsize>);

impl LiveGuard {
    fn new(live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        LiveGuard(live.clone())
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The TLS side of the test server's connections.
#[derive(Clone)]
enum Handshake {
    /// tokio-rustls' accept: early data, if accepted, is answered after the handshake.
    AfterHandshake(TlsAcceptor),
    /// 0.5-RTT (wrapped connections only; stock ones use the rustls config as it is).
    HalfRtt(TlsAcceptor, tls_flush::HalfRttAcceptor),
}

impl Handshake {
    fn new(tls: Arc<rustls::ServerConfig>, mode: tls_flush::EarlyDataMode) -> Self {
        match mode {
            tls_flush::EarlyDataMode::AfterHandshake => {
                Handshake::AfterHandshake(TlsAcceptor::from(tls))
            }
            tls_flush::EarlyDataMode::HalfRtt {
                max_early_data_size,
            } => Handshake::HalfRtt(
                TlsAcceptor::from(tls.clone()),
                tls_flush::HalfRttAcceptor::new(tls, max_early_data_size),
            ),
        }
    }

    fn tokio_rustls(&self) -> &TlsAcceptor {
        match self {
            Handshake::AfterHandshake(acceptor) | Handshake::HalfRtt(acceptor, _) => acceptor,
        }
    }
}

/// Each connection on its own task: [`tls_flush::serve_connection`] (or
/// [`tls_flush::serve_half_rtt_connection`]) with `config`, or the stock examples'
/// [`serve_stock_connection`] for `None`.
async fn accept_loop<S: HttpService>(
    listener: TcpListener,
    handshake: Handshake,
    config: Option<FlushConfig>,
    service: S,
    stats: Arc<Mutex<Vec<ConnectionStats>>>,
    live: Arc<AtomicUsize>,
    retransmits: Retransmits,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        let (handshake, config, service) = (handshake.clone(), config.clone(), service.clone());
        // Counted from the accept on, so a connection is never invisible between its
        // accept and its task's first poll.
        let guard = LiveGuard::new(&live);
        let stats = stats.clone();
        // Reads the socket's retransmissions when the task ends, however it ends.
        let watch = retransmits.watch(&tcp);
        tokio::spawn(async move {
            let _guard = guard;
            let _watch = watch;
            let Some(config) = config else {
                let acceptor = handshake.tokio_rustls().clone();
                return serve_stock_connection(tcp, acceptor, service, None).await;
            };
            let service = registering_stats(service, stats);
            let served = match handshake {
                Handshake::AfterHandshake(acceptor) => {
                    tls_flush::serve_connection(tcp, acceptor, config, service).await
                }
                Handshake::HalfRtt(_, acceptor) => {
                    tls_flush::serve_half_rtt_connection(tcp, acceptor, config, service).await
                }
            };
            if let Err(err) = served {
                tracing::debug!(%err, "test server connection ended with an error");
            }
        });
    }
}

/// `service` for one connection, registering the connection's [`ConnectionStats`] (which
/// `serve_connection` puts in every request's extensions) in `stats` at its first request.
fn registering_stats<S: HttpService>(
    service: S,
    stats: Arc<Mutex<Vec<ConnectionStats>>>,
) -> impl HttpService {
    let registered = Arc::new(AtomicBool::new(false));
    MapRequest::new(service, move |req: Request<Incoming>| {
        if !registered.swap(true, Ordering::SeqCst) {
            if let Some(connection) = req.extensions().get::<ConnectionStats>() {
                stats
                    .lock()
                    .expect("stats poisoned")
                    .push(connection.clone());
            }
        }
        req
    })
}
