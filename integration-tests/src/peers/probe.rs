//! The readiness probe: a peer is up once its port completes a TLS 1.3 handshake with ALPN
//! `h2` against the certificate it was given ([`handshake`]).
//!
//! Invariant: the probe never panics on what the peer sends; a peer that answers but not as
//! configured (another protocol version, no `h2`, a certificate that does not verify) is
//! [`Probe::Wrong`] at once, and only a port that does not answer yet is retried.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};

use crate::client::{h2_client_config, Trust};
use crate::BoxError;

/// How long the probe waits for the TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the probe waits for each read or write of the handshake.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a probe did not succeed.
pub(super) enum Probe {
    /// Not listening yet (or not answering yet): try again.
    NotYet(String),
    /// Listening, but not as configured: give up.
    Wrong(String),
}

/// Where the probe connects for a peer listening on `listen`: the address itself, or
/// `127.0.0.1` when it is unspecified (`0.0.0.0`).
pub(super) fn probe_addr(listen: SocketAddr) -> SocketAddr {
    if listen.ip().is_unspecified() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
    } else {
        listen
    }
}

/// The probe's client configuration: trusting the peer's `certificate` only, ALPN `h2`.
pub(super) fn probe_config(
    certificate: &CertificateDer<'static>,
) -> Result<Arc<rustls::ClientConfig>, BoxError> {
    Ok(Arc::new(h2_client_config(&Trust::Certificate(
        certificate.clone(),
    ))?))
}

/// One TLS handshake with the server at `addr`, which must pick TLS 1.3 and ALPN h2.
pub(super) fn handshake(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<(), Probe> {
    let not_yet = |e: io::Error| Probe::NotYet(e.to_string());
    let mut tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(not_yet)?;
    tcp.set_read_timeout(Some(IO_TIMEOUT)).map_err(not_yet)?;
    tcp.set_write_timeout(Some(IO_TIMEOUT)).map_err(not_yet)?;
    let name = ServerName::try_from("localhost").expect("a valid name");
    let mut tls = rustls::ClientConnection::new(config, name)
        .map_err(|e| Probe::Wrong(format!("client setup: {e}")))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).map_err(|e| {
            if e.kind() == io::ErrorKind::InvalidData {
                Probe::Wrong(format!("TLS handshake: {e}"))
            } else {
                Probe::NotYet(format!("TLS handshake: {e}"))
            }
        })?;
    }
    check_negotiated(&tls)?;
    close(&mut tls, &mut tcp);
    Ok(())
}

/// Whether the handshake picked what the peer was configured for: ALPN h2 and TLS 1.3.
fn check_negotiated(tls: &rustls::ClientConnection) -> Result<(), Probe> {
    if tls.alpn_protocol() != Some(b"h2") {
        return Err(Probe::Wrong("the server did not negotiate ALPN h2".into()));
    }
    if tls.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
        return Err(Probe::Wrong(format!(
            "the server negotiated {:?}, not TLS 1.3",
            tls.protocol_version()
        )));
    }
    Ok(())
}

/// Sends close_notify, as far as the socket takes it (the probe is done either way).
fn close(tls: &mut rustls::ClientConnection, tcp: &mut TcpStream) {
    tls.send_close_notify();
    while tls.wants_write() {
        if tls.write_tls(tcp).is_err() {
            break;
        }
    }
}
