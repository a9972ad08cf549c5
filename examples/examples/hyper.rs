//! The demo app as a plain hyper server over rustls; the service is in
//! `examples::hyper_app` (a hand-written tower service behind `tower::ServiceBuilder`).
//!
//! ```text
//! cargo run --release -p examples --example hyper -- [--addr IP:PORT] [--cert PEM --key PEM] [--policy NAME] [--record-size N]
//! ```

use std::process::ExitCode;

use clap::Parser;
use examples::Args;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    examples::logging::init();
    match examples::run(args, examples::hyper_app::service()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
