//! TLS for the tests on real sockets (`serve`, the listener, per-route policies, the client's
//! first flight and early data) and for the wrapper benchmark: a fresh self-signed
//! certificate with rustls configurations (ring) around it, the loopback listener a test
//! server binds, and a client's handshake as `localhost`. Behind the `tls` feature, so that
//! the fuzz crate builds none of it.
//!
//! Invariants the tests rely on:
//! - every [`config_pair`] has a certificate and key of its own: a client of one pair
//!   cannot complete a handshake with (nor resume at) the server of another;
//! - its client configuration trusts that certificate and nothing else, and verifies the
//!   server name, so a client connecting as [`localhost`] reaches only its own server;
//! - ALPN, early data and resumption are left as rustls makes them (no ALPN, no early data,
//!   default resumption): each test sets what it exercises.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rcgen::{CertificateParams, KeyPair};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The ALPN identifier of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";
/// The ALPN identifier of HTTP/1.1.
pub const ALPN_HTTP_1_1: &[u8] = b"http/1.1";

/// A server configuration with a fresh self-signed certificate for `names` (rcgen's default
/// leaf parameters and key type), and a client configuration that trusts only that
/// certificate; both speak `versions` (`rustls::DEFAULT_VERSIONS` for rustls' safe
/// defaults) with the ring provider.
///
/// Panics if rcgen or rustls refuses the parameters (a bug in the test, not a finding).
pub fn config_pair(
    names: &[&str],
    versions: &[&'static SupportedProtocolVersion],
) -> (ServerConfig, ClientConfig) {
    let key = KeyPair::generate().expect("key pair");
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let cert = CertificateParams::new(names)
        .expect("certificate names")
        .self_signed(&key)
        .expect("self-signed certificate");
    let key = PrivatePkcs8KeyDer::from(key.serialize_der());
    (
        server_config(cert.der().clone(), key, versions),
        client_config(cert.der().clone(), versions),
    )
}

/// ring, the provider of every configuration here (the workspace bans aws-lc-rs).
fn ring() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    versions: &[&'static SupportedProtocolVersion],
) -> ServerConfig {
    ServerConfig::builder_with_provider(ring())
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], PrivateKeyDer::Pkcs8(key))
        .expect("server certificate")
}

fn client_config(
    trusted: CertificateDer<'static>,
    versions: &[&'static SupportedProtocolVersion],
) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots.add(trusted).expect("trusted certificate");
    ClientConfig::builder_with_provider(ring())
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The name every test client connects as (the certificates of [`config_pair`] name it).
pub fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").expect("a DNS name")
}

/// The client's TLS handshake over `io` as [`localhost`]; unbounded in time (callers that
/// must not hang bound it).
pub async fn connect_as_localhost<IO>(
    client: Arc<ClientConfig>,
    io: IO,
) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    TlsConnector::from(client).connect(localhost(), io).await
}

/// A listener on a free port of 127.0.0.1 (tests send traffic to loopback only), and its
/// address.
pub async fn loopback_listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    (listener, addr)
}
