//! Starting and stopping the server of a first-request run: `ours` in-process, or a peer
//! process, on loopback behind the relay link ([`start_relay_server`]) or in the tun link's
//! server namespace ([`start_tun_server`]).
//!
//! Invariant: a fresh server for every run, so that no run resumes a session of another;
//! starting and stopping a peer blocks (it waits for the child's port, or for it to exit),
//! so it happens off the runtime's threads.

use std::net::SocketAddr;

use super::FirstRequestServer;
use crate::peers::PeerOptions;
use crate::server::{LoopbackServer, ServerSetup, TestServer};
use crate::tun::TunLink;
use crate::workload::TunServer;
use crate::BoxError;

/// The most early data `ours` accepts (one first flight with room to spare).
pub const OURS_MAX_EARLY_DATA: u32 = 16 * 1024;

/// Starts `ours` on `addr` (port 0: a free one): the demo app behind `tls-flush` (default
/// configuration, through `tls_flush::serve_half_rtt_connection`: early requests are
/// answered in the server's first flight, 0.5-RTT), TLS 1.3 resumption from rustls'
/// stateful in-memory session cache (two tickets per handshake, rustls' default; each
/// usable once) and early data up to [`OURS_MAX_EARLY_DATA`]. rustls accepts early data
/// only with stateful resumption, so no `Ticketer`.
pub async fn start_ours(addr: SocketAddr) -> Result<TestServer, BoxError> {
    let identity = examples::tls::self_signed()?;
    let certificate = identity.chain[0].clone();
    let mut tls = examples::tls::server_config(identity, None)?;
    tls.max_early_data_size = OURS_MAX_EARLY_DATA;
    let setup = ServerSetup {
        config: Some(tls_flush::FlushConfig::default()),
        early_data: tls_flush::EarlyDataMode::HalfRtt {
            max_early_data_size: OURS_MAX_EARLY_DATA,
        },
        ..ServerSetup::default()
    };
    TestServer::start_with_tls(setup, examples::axum_app::router(), addr, certificate, tls).await
}

/// Starts `server` on loopback, on a free port (the relay link's upstream).
pub(super) async fn start_relay_server(
    server: FirstRequestServer,
) -> Result<LoopbackServer, BoxError> {
    match server {
        FirstRequestServer::Ours => Ok(LoopbackServer::InProcess(
            start_ours(SocketAddr::from(([127, 0, 0, 1], 0))).await?,
        )),
        FirstRequestServer::Peer(kind) => {
            LoopbackServer::start_peer(kind, PeerOptions::default()).await
        }
    }
}

/// Starts `server` in the tun link's server namespace.
pub(super) async fn start_tun_server(
    link: &TunLink,
    server: FirstRequestServer,
) -> Result<TunServer, BoxError> {
    match server {
        FirstRequestServer::Ours => TunServer::start_with(link, start_ours).await,
        FirstRequestServer::Peer(kind) => TunServer::start_peer(link, kind, None).await,
    }
}
