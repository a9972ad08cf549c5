//! The client of the first-request workload: one connection, measured.
//!
//! [`one_connection`] connects over TCP, wraps the stream in a [`RecordCounter`] (under
//! TLS, so that it sees the records the client writes), does the TLS handshake of the
//! client case ([`client_stream`], the one place a case becomes a TLS stream), speaks
//! HTTP/2 with hyper's client, sends one `GET`, checks the response (status 200 and
//! [`RESPONSE_LEN`] bytes of the fixture's pattern) and closes. Invariant: a connection
//! whose response is not exactly the critical resource is an error, never a measurement.
//!
//! What the TLS layer says about the connection ([`TlsInfo`]) is read after every read and
//! write of the stream hyper owns ([`Observed`]), since hyper keeps the stream.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::ClientConnection;
use rustls::pki_types::ServerName;
use rustls::{HandshakeKind, ProtocolVersion};
use tls_flush::client::FlushClientStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::counter::{RecordCounter, WireLog};
use super::flight::sent_early_data;
use super::{ClientCase, CONNECTION_TIMEOUT, REQUEST_PATH, RESPONSE_LEN};
use crate::client::{h2_client_config, Trust};
use crate::BoxError;

/// How long a closing connection gets to end before the run goes on without it.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A client TLS stream hyper can speak HTTP/2 over, with the rustls connection under it
/// (for the handshake kind, early data and the protocol version).
pub trait ClientTls: AsyncRead + AsyncWrite + Send + Unpin {
    /// The client's rustls connection.
    fn connection(&self) -> &ClientConnection;
}

impl ClientTls for tokio_rustls::client::TlsStream<RecordCounter<TcpStream>> {
    fn connection(&self) -> &ClientConnection {
        self.get_ref().1
    }
}

impl ClientTls for FlushClientStream<tokio_rustls::client::TlsStream<RecordCounter<TcpStream>>> {
    fn connection(&self) -> &ClientConnection {
        self.get_ref().get_ref().1
    }
}

/// The rustls client configuration of `case`, trusting as `trust` says: ALPN `h2`, rustls'
/// default in-memory session store, early data enabled for [`ClientCase::early_data`]. One
/// configuration is shared by the connections that should resume each other's sessions.
pub fn client_config(
    case: ClientCase,
    trust: &Trust,
) -> Result<Arc<rustls::ClientConfig>, BoxError> {
    let mut config = h2_client_config(trust)?;
    config.enable_early_data = case.early_data();
    Ok(Arc::new(config))
}

/// **The extension point of the client cases**: the TLS stream the client of `case`
/// speaks HTTP/2 over, on `tcp` (the client's counted TCP connection, `TCP_NODELAY` off),
/// with `config` (from [`client_config`]) and the server name `name`.
///
/// - `stock-client`: tokio-rustls' stream, returned after the handshake; Nagle stays on.
/// - `coalesced`: `TCP_NODELAY` on, tokio-rustls' handshake, then
///   [`FlushClientStream`], which writes the HTTP/2 preface, SETTINGS, WINDOW_UPDATE and the
///   first HEADERS hyper hands it as one TLS record (what `FlushConnector` builds, with
///   [`RecordCounter`] kept under the TLS).
/// - `coalesced-0rtt`: the same with tokio-rustls' early data on (and `enable_early_data`
///   in `config`): on a resumed session whose ticket allows early data the stream comes
///   back before the handshake completes, and the first flight goes as 0-RTT data.
pub async fn client_stream(
    case: ClientCase,
    tcp: RecordCounter<TcpStream>,
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
) -> Result<Box<dyn ClientTls>, BoxError> {
    match case {
        ClientCase::StockClient => {
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(Box::new(stream))
        }
        ClientCase::Coalesced | ClientCase::Coalesced0Rtt => {
            // One write of the first flight is one segment only without Nagle.
            tcp.get_ref().set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .early_data(case.early_data())
                .connect(name, tcp)
                .await?;
            Ok(Box::new(FlushClientStream::new(tls)))
        }
    }
}

/// What the TLS layer said about a connection (read after every I/O of the stream hyper
/// owns, so it is known once the request is done).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TlsInfo {
    /// Full, resumed, or with a HelloRetryRequest; `None` while handshaking.
    pub handshake_kind: Option<HandshakeKind>,
    /// Whether the server accepted the client's early data.
    pub early_data_accepted: bool,
    /// The protocol version.
    pub version: Option<ProtocolVersion>,
}

impl TlsInfo {
    /// Whether the handshake resumed a session.
    pub fn resumed(&self) -> bool {
        self.handshake_kind == Some(HandshakeKind::Resumed)
    }

    fn read(connection: &ClientConnection) -> TlsInfo {
        TlsInfo {
            handshake_kind: connection.handshake_kind(),
            early_data_accepted: connection.is_early_data_accepted(),
            version: connection.protocol_version(),
        }
    }
}

/// A [`ClientTls`] that copies its [`TlsInfo`] out after every read and write.
struct Observed {
    inner: Box<dyn ClientTls>,
    info: Arc<Mutex<TlsInfo>>,
}

impl Observed {
    fn note(&self) {
        *self.info.lock().expect("tls info poisoned") = TlsInfo::read(self.inner.connection());
    }
}

impl AsyncRead for Observed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.note();
        poll
    }
}

impl AsyncWrite for Observed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note();
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note();
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What one connection of the client saw.
#[derive(Debug, Clone)]
pub struct ConnectionOutcome {
    /// When the TCP connect started.
    pub connect_start: Instant,
    /// When [`client_stream`] returned (the handshake done, for `stock-client`).
    pub stream_ready_at: Instant,
    /// The arrival of the first response byte: the last client read before hyper handed
    /// over the response head.
    pub first_response_at: Instant,
    /// When the response body was complete (and checked).
    pub complete_at: Instant,
    /// What the TLS layer said.
    pub tls: TlsInfo,
    /// The client's local port (which packets of the tun link's log are this connection's).
    pub local_port: u16,
    /// The records the client wrote and when it read.
    pub wire: WireLog,
}

impl ConnectionOutcome {
    /// Whether the client wrote application data before it read anything from the server:
    /// TLS 1.3 early data (0-RTT), accepted or not.
    pub fn sent_early_data(&self) -> bool {
        sent_early_data(&self.wire)
    }
}

/// Opens one connection to `addr` for `case` with `config`, sends `GET /critical`, checks
/// the 4096-byte body, and closes the connection.
pub async fn one_connection(
    case: ClientCase,
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<ConnectionOutcome, BoxError> {
    one_connection_to(case, addr, config, REQUEST_PATH).await
}

/// [`one_connection`] with the request target `path` (`/critical` with a query, say, to
/// find this request in a server's access log; the response must still be the critical
/// resource).
pub async fn one_connection_to(
    case: ClientCase,
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<ConnectionOutcome, BoxError> {
    tokio::time::timeout(
        CONNECTION_TIMEOUT,
        measure_connection(case, addr, config, path),
    )
    .await
    .map_err(|_| format!("{case}: no response within {CONNECTION_TIMEOUT:?}"))?
}

/// [`one_connection_to`] without its time limit.
async fn measure_connection(
    case: ClientCase,
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<ConnectionOutcome, BoxError> {
    let connect_start = Instant::now();
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let local_port = tcp.local_addr()?.port();
    let (tcp, wire) = RecordCounter::new(tcp);
    let name = ServerName::try_from("localhost")?;
    let stream = client_stream(case, tcp, config, name)
        .await
        .map_err(|e| format!("{case}: TLS: {e}"))?;
    let stream_ready_at = Instant::now();
    let info = Arc::new(Mutex::new(TlsInfo::read(stream.connection())));
    let observed = Observed {
        inner: stream,
        info: info.clone(),
    };
    let exchange = get_over_h2(case, observed, path).await?;
    let wire = wire.lock().expect("wire log poisoned").clone();
    let first_response_at = last_read_by(&wire, exchange.head_at);
    let tls = *info.lock().expect("tls info poisoned");
    Ok(ConnectionOutcome {
        connect_start,
        stream_ready_at,
        first_response_at,
        complete_at: exchange.complete_at,
        tls,
        local_port,
        wire,
    })
}

/// When the one request of a connection got its answer.
struct Exchange {
    /// When hyper handed over the response head.
    head_at: Instant,
    /// When the body was complete (before it was checked).
    complete_at: Instant,
}

/// Speaks HTTP/2 over `stream`: one `GET path`, the response checked to be the critical
/// resource, then the connection closed.
async fn get_over_h2(case: ClientCase, stream: Observed, path: &str) -> Result<Exchange, BoxError> {
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| format!("{case}: HTTP/2 handshake: {e}"))?;
    let driver = tokio::spawn(connection);
    let request = http::Request::get(format!("https://localhost{path}"))
        .body(http_body_util::Empty::<Bytes>::new())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{case}: request: {e}"))?;
    let head_at = Instant::now();
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{case}: response body: {e}"))?
        .to_bytes();
    let complete_at = Instant::now();
    check_critical(case, status, &body)?;
    // Close: hyper ends the connection once no sender is left.
    drop(sender);
    if tokio::time::timeout(CLOSE_GRACE, driver).await.is_err() {
        tracing::debug!("first-request: the connection did not close within 2 s");
    }
    Ok(Exchange {
        head_at,
        complete_at,
    })
}

/// Whether the response is the critical resource: status 200 and [`RESPONSE_LEN`] bytes of
/// the fixture's pattern (the server's answer is checked, never trusted).
fn check_critical(
    case: ClientCase,
    status: http::StatusCode,
    body: &Bytes,
) -> Result<(), BoxError> {
    if status != http::StatusCode::OK {
        return Err(format!("{case}: status {status}").into());
    }
    let is_pattern = || {
        body.iter()
            .enumerate()
            .all(|(i, &b)| b == examples::body::pattern_byte(i as u64))
    };
    if body.len() as u64 != RESPONSE_LEN || !is_pattern() {
        return Err(format!(
            "{case}: the body is not {RESPONSE_LEN} pattern bytes ({} bytes)",
            body.len()
        )
        .into());
    }
    Ok(())
}

/// The arrival of the first response byte: the last read at or before `head_at` (when
/// hyper handed over the response head), or `head_at` itself when the log has none.
fn last_read_by(wire: &WireLog, head_at: Instant) -> Instant {
    wire.reads
        .iter()
        .copied()
        .filter(|&at| at <= head_at)
        .max()
        .unwrap_or(head_at)
}
