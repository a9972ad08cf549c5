//! Servers under test, started in-process: any tower service (the demo app by default),
//! served over rustls, plain (`stock`) or wrapped by `tls-flush` with a policy.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::CertificateDer;
use tls_flush::{ConnectionStats, FlushConfig, FlushStream, Policy};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the server under test writes: stock hyper + tokio-rustls, or through the wrapper.
#[derive(Debug, Clone, Default)]
pub struct ServerSetup {
    /// `None` is stock (no wrapper).
    pub policy: Option<Policy>,
    /// rustls `max_fragment_size` (e.g. 4096 for the seeds' static-fragment cases).
    pub record_size: Option<usize>,
    /// A full wrapper configuration, used instead of `policy`'s preset when set.
    pub config: Option<FlushConfig>,
}

/// A server running on a background task; stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its certificate, to trust in clients.
    pub certificate: CertificateDer<'static>,
    stats: Arc<Mutex<Vec<ConnectionStats>>>,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Starts the demo app (`examples::axum_app::router()`) on 127.0.0.1 with `setup`.
    pub async fn demo(setup: ServerSetup) -> Result<TestServer, BoxError> {
        TestServer::start(setup, examples::axum_app::router()).await
    }

    /// Starts `service` on 127.0.0.1 with `setup`.
    pub async fn start<S, B>(setup: ServerSetup, service: S) -> Result<TestServer, BoxError>
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
        let identity = examples::tls::self_signed()?;
        let certificate = identity.chain[0].clone();
        let mut tls = examples::tls::server_config(identity, setup.record_size)?;
        // No session tickets: every application-data record after the handshake is then
        // HTTP bytes, which lets the client map records to frames.
        tls.send_tls13_tickets = 0;
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Mutex::new(Vec::new()));
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
        ));
        Ok(TestServer {
            addr,
            certificate,
            stats,
            task,
        })
    }

    /// Counters of every wrapped connection so far (empty for stock).
    pub fn connection_stats(&self) -> Vec<ConnectionStats> {
        self.stats.lock().expect("stats poisoned").clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop<S, B>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    config: Option<FlushConfig>,
    service: S,
    stats: Arc<Mutex<Vec<ConnectionStats>>>,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, config, service, stats) = (
            acceptor.clone(),
            config.clone(),
            service.clone(),
            stats.clone(),
        );
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let service = TowerToHyperService::new(service);
            let result = match config {
                None => builder.serve_connection(TokioIo::new(tls), service).await,
                Some(config) => {
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
