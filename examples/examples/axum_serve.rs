//! The demo app under `axum::serve`, with `tls_flush::FlushListener` as its listener
//! (tls-flush feature `axum`), and the `tls_flush.*` metrics in Prometheus' text format at
//! `GET /metrics` (feature `metrics`, `metrics-exporter-prometheus`).
//!
//! The change to an axum-over-rustls app is the listener line and, for handlers that want
//! their connection's counters, `into_make_service_with_connect_info::<ConnectionInfo>()`.
//! `--policy stock` serves the same app without the wrapper (the shared stock loop).
//!
//! ```text
//! cargo run --release -p examples --example axum_serve -- [--addr IP:PORT] [--cert PEM --key PEM] [--policy NAME] [--record-size N]
//! ```

use std::process::ExitCode;

use axum::extract::ConnectInfo;
use axum::routing::get;
use clap::Parser;
use examples::responses::{stats_response, STATS_PATH};
use examples::{Args, BoxError};
use metrics_exporter_prometheus::PrometheusBuilder;
use tls_flush::{ConnectionInfo, FlushListener};
use tokio_rustls::TlsAcceptor;

async fn serve(args: Args) -> Result<(), BoxError> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    tls_flush::metrics::describe();
    let app = examples::axum_app::router()
        .route(
            STATS_PATH,
            get(
                |ConnectInfo(info): ConnectInfo<ConnectionInfo>| async move {
                    stats_response(info.stats())
                },
            ),
        )
        .route("/metrics", get(move || async move { prometheus.render() }));
    let Some(config) = examples::flush_config(&args) else {
        return examples::run(args, app).await;
    };
    let mut bound = examples::bind(&args).await?;

    let listener = FlushListener::new(bound.listener, TlsAcceptor::from(bound.tls), config);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<ConnectionInfo>(),
    )
    .with_graceful_shutdown(async move {
        let signal = bound.shutdown.recv().await;
        tracing::info!(signal, "stopped accepting; waiting for in-flight responses");
    })
    .await?;
    tracing::info!("all connections closed; exiting");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    examples::logging::init();
    examples::exit_code(serve(args).await)
}
