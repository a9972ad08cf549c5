//! The demo app (the axum `Router`) under a hand-written hyper-util accept loop: TLS with
//! tokio-rustls, then `tls_flush::FlushStream::new(tls, config)` where the loop used to give
//! the TLS stream to `TokioIo`. The connection's counters go into every request's
//! extensions (`Extension<ConnectionStats>`) and into the log when it closes. SIGINT/SIGTERM
//! stop accepting and let the responses in flight finish. `--policy stock` serves the same
//! app without the wrapper (the shared stock loop).
//!
//! ```text
//! cargo run --release -p examples --example hyper_loop -- [--addr IP:PORT] [--cert PEM --key PEM] [--policy NAME] [--record-size N]
//! ```

use std::process::ExitCode;

use axum::Extension;
use clap::Parser;
use examples::server::{GRACEFUL_TIMEOUT, HANDSHAKE_TIMEOUT};
use examples::{Args, BoxError};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tls_flush::FlushStream;
use tokio_rustls::TlsAcceptor;
use tower::Layer;
use tracing::{debug, warn};

async fn serve(args: Args) -> Result<(), BoxError> {
    let app = examples::axum_app::router_with_stats();
    let Some(config) = examples::flush_config(&args) else {
        return examples::run(args, app).await;
    };
    let examples::Bound {
        listener,
        tls,
        mut shutdown,
    } = examples::bind(&args).await?;
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();

    let signal = loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            signal = shutdown.recv() => break signal,
        };
        let (acceptor, config, app) = (acceptor.clone(), config.clone(), app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let served: Result<(), BoxError> = async move {
                tcp.set_nodelay(true)?;
                let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await??;
                // The wrapper goes where the TLS stream went: `TokioIo::new(tls)` before.
                let stream = FlushStream::new(tls, config);
                let stats = stream.stats();
                let service = TowerToHyperService::new(Extension(stats.clone()).layer(app));
                let builder = auto::Builder::new(TokioExecutor::new());
                let served = watcher.watch(builder.serve_connection(TokioIo::new(stream), service));
                let result = served.await;
                debug!(%peer, counters = ?stats.snapshot(), "tls-flush counters");
                result
            }
            .await;
            if let Err(e) = served {
                debug!(%peer, error = %e, "connection failed");
            }
        });
    };
    drop(listener);
    tracing::info!(signal, "stopped accepting; waiting for in-flight responses");
    match tokio::time::timeout(GRACEFUL_TIMEOUT, graceful.shutdown()).await {
        Ok(()) => tracing::info!("all connections closed; exiting"),
        Err(_) => warn!("graceful shutdown timed out; exiting"),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    examples::logging::init();
    examples::exit_code(serve(args).await)
}
