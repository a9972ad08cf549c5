//! `lab`: reproduces seed 000 (a 4 KiB critical response against two 1 MiB background
//! responses on one HTTP/2 connection) for every server case behind an emulated link, and
//! prints medians and paired differences against stock. See `--help`.

use std::process::ExitCode;

use clap::Parser;
use integration_tests::lab::{self, LabArgs};

#[tokio::main]
async fn main() -> ExitCode {
    let args = LabArgs::parse();
    match lab::main(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lab: {err}");
            ExitCode::FAILURE
        }
    }
}
