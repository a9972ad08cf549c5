//! Servers under test, started in-process: any tower service (the demo app by default),
//! served over rustls, plain (`stock`) or wrapped by `tls-flush` with a policy.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::CertificateDer;
use tls_flush::{ConnectionStats, FlushConfig, FlushStream, HttpService, Policy};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::client::{ClientOptions, TapClient};
use crate::BoxError;

/// How the server under test writes: stock hyper + tokio-rustls, or through the wrapper.
#[derive(Debug, Clone, Default)]
pub struct ServerSetup {
    /// `None` is stock (no wrapper).
    pub policy: Option<Policy>,
    /// rustls `max_fragment_size` (e.g. 4096 for static 4 KiB records).
    pub record_size: Option<usize>,
    /// A full wrapper configuration, used instead of `policy`'s preset when set.
    pub config: Option<FlushConfig>,
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

/// A server running on a background task; stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its certificate, to trust in clients.
    pub certificate: CertificateDer<'static>,
    stats: Arc<Mutex<Vec<ConnectionStats>>>,
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
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Mutex::new(Vec::new()));
        let live = Arc::new(AtomicUsize::new(0));
        let config = setup.config.clone().or_else(|| {
            setup
                .policy
                .map(|p| FlushConfig::for_policy(p).tls_max_fragment_size(setup.record_size))
        });
        let task = tokio::spawn(accept_loop(
            listener,
            acceptor,
            config,
            service,
            stats.clone(),
            live.clone(),
        ));
        Ok(TestServer {
            addr,
            certificate,
            stats,
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

    /// Counters of every wrapped connection so far (empty for stock).
    pub fn connection_stats(&self) -> Vec<ConnectionStats> {
        self.stats.lock().expect("stats poisoned").clone()
    }

    /// Connections accepted whose task has not ended yet (TLS handshake, serving, or
    /// shutting down). Connection tasks outlive the `TestServer`; this counts them anyway.
    pub fn live_connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
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

async fn accept_loop<S: HttpService>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    config: Option<FlushConfig>,
    service: S,
    stats: Arc<Mutex<Vec<ConnectionStats>>>,
    live: Arc<AtomicUsize>,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, config, service, stats) = (
            acceptor.clone(),
            config.clone(),
            service.clone(),
            stats.clone(),
        );
        // Counted from the accept on, so a connection is never invisible between its
        // accept and its task's first poll.
        let guard = LiveGuard::new(&live);
        tokio::spawn(async move {
            let _guard = guard;
            let _ = tcp.set_nodelay(true);
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let service = TowerToHyperService::new(service);
            let result = match config {
                None => builder.serve_connection(TokioIo::new(tls), service).await,
                Some(config) => {
                    let mut builder = builder;
                    // As tls_flush::serve configures hyper under the wrapper.
                    builder.http2().max_send_buf_size(128 * 1024);
                    let stream = FlushStream::new(tls, config);
                    stats.lock().expect("stats poisoned").push(stream.stats());
                    builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                }
            };
            if let Err(err) = result {
                tracing::debug!(%err, "test server connection ended with an error");
            }
        });
    }
}
