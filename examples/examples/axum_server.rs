//! The demo app under axum-server, with `tls_flush::FlushAcceptor` around its
//! `RustlsAcceptor` (tls-flush feature `axum-server`).
//!
//! The change to an axum-server app is the `.acceptor(...)` line; handlers can read their
//! connection's counters with `Extension<ConnectionStats>`. axum-server's `Handle` shuts
//! down gracefully on SIGINT/SIGTERM. `--policy stock` serves the same app without the
//! wrapper (the shared stock loop).
//!
//! ```text
//! cargo run --release -p examples --example axum_server -- [--addr IP:PORT] [--cert PEM --key PEM] [--policy NAME] [--record-size N]
//! ```

use std::process::ExitCode;

use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use axum_server::Handle;
use clap::Parser;
use examples::server::{announce, ShutdownSignal, GRACEFUL_TIMEOUT};
use examples::{Args, BoxError};
use tls_flush::FlushAcceptor;

async fn serve(args: Args) -> Result<(), BoxError> {
    let app = examples::axum_app::router_with_stats();
    let Some(config) = examples::flush_config(&args) else {
        return examples::run(args, app).await;
    };
    let tls = RustlsConfig::from_config(examples::tls::config_from_args(&args)?);
    let mut signal = ShutdownSignal::install()?;
    let handle = Handle::new();

    let server = axum_server::bind(args.addr)
        .handle(handle.clone())
        .acceptor(FlushAcceptor::new(RustlsAcceptor::new(tls), config))
        .serve(app.into_make_service());
    let server = tokio::spawn(server);
    let addr = handle.listening().await.ok_or("the server did not start")?;
    announce(addr)?;
    let signal = signal.recv().await;
    tracing::info!(signal, "stopped accepting; waiting for in-flight responses");
    handle.graceful_shutdown(Some(GRACEFUL_TIMEOUT));
    server.await??;
    tracing::info!("all connections closed; exiting");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    examples::logging::init();
    examples::exit_code(serve(args).await)
}
