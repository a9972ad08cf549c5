//! The demo app as an axum 0.8 server over rustls; the routes are in `examples::axum_app`.
//!
//! ```text
//! cargo run --release -p examples --example axum -- [--addr IP:PORT] [--cert PEM --key PEM] [--policy NAME] [--record-size N]
//! ```

use std::process::ExitCode;

use clap::Parser;
use examples::Args;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    examples::logging::init();
    match examples::run(args, examples::axum_app::router()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
