//! The first-request workload: what a client's first flight costs on a new connection, and
//! how many such connections a client makes per second.
//!
//! One run opens a TCP connection through an emulated link (the relay of [`crate::link`] or
//! the kernel-faithful [`crate::tun`] link), does the TLS handshake, speaks HTTP/2 with
//! hyper's client (`hyper::client::conn::http2`), sends one small request (`GET /critical`,
//! 4096 bytes of the fixture's pattern, checked byte for byte) and closes. It measures:
//!
//! - `first_response_ms`: from the start of the TCP connect to the arrival of the first
//!   response byte (the client read that delivered the response's HEADERS: the last read
//!   before hyper handed over the response head);
//! - `first_flight_records`: the TLS records carrying application data (the HTTP/2
//!   preface, SETTINGS, WINDOW_UPDATE, the request's HEADERS, in as many records as the
//!   client wrote) that the client wrote before that arrival, and before it read anything
//!   after the first of them (what it writes then, such as the ACK of the server's
//!   SETTINGS when those arrive before the response, answers the server). The client's TCP stream is
//!   wrapped in [`RecordCounter`], which parses the TLS record headers the client writes;
//!   the handshake's own records (ClientHello, ChangeCipherSpec, and in TLS 1.3 the
//!   encrypted Finished, plus EndOfEarlyData when early data was accepted) are not counted.
//!   In TLS 1.3 every encrypted record says `application_data` outside, so the handshake's
//!   encrypted records are told apart by position: records written before the client read
//!   anything from the server are early data (0-RTT); the first one (two when early data
//!   was accepted) written after it are the handshake's;
//! - `first_flight_segments`, on the tun link only: the client-to-server TCP segments with
//!   payload that carried any byte of those records, from the emulator's packet log (by TCP
//!   sequence number, retransmissions counted once);
//! - `resumed`: whether the handshake actually resumed a session (rustls
//!   [`HandshakeKind::Resumed`]).
//!
//! Cases ([`ClientCase`]): `stock-client`, hyper's HTTP/2 client over tokio-rustls as
//! people use it (no `TCP_NODELAY`, like hyper-util's `HttpConnector` by default), and the
//! coalescing client of `tls-flush` (`coalesced`, and `coalesced-0rtt` with TLS 1.3 early
//! data), which [`client_stream`] builds: the one place where a client case becomes a TLS
//! stream. Each runs on a fresh connection or a resumed one ([`Connection`]): for `resumed`,
//! a priming connection to the same server first fills the client's session store (rustls'
//! default in-memory [`rustls::client::Resumption`]), and the measured connection shares its
//! `ClientConfig`.
//!
//! Servers ([`FirstRequestServer`]): `ours`, the demo app in-process behind `tls-flush`
//! (`tls_flush::serve_connection`) with TLS 1.3 resumption and early data accepted (up to
//! [`OURS_MAX_EARLY_DATA`]; `serve_connection` reads it through `tls_flush::EarlyDataStream`,
//! since tokio-rustls' server stream alone never reads rustls' early-data buffer);
//! `nginx-0rtt` (tickets and `ssl_early_data on`) and `nginx-no-early` (tickets,
//! `ssl_early_data off`: early data is rejected and must be sent again).
//!
//! [`connection_rate`] is the other half: one connection after the other (TCP, TLS,
//! HTTP/2, one small request, close), sequentially, for a number of seconds, counting
//! completed connections per second, as HAProxy measures connection rates.

mod counter;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::ClientConnection;
use rustls::pki_types::ServerName;
use rustls::{HandshakeKind, ProtocolVersion};
use serde::{Deserialize, Serialize};
use tls_flush::client::FlushClientStream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::client::Trust;
use crate::link::{LinkConfig, RelayLink};
use crate::peers::{PeerKind, PeerServer};
use crate::server::{ServerSetup, TestServer};
use crate::tun::{self, PacketEvent, Side, TunConfig, TunLink};
use crate::workload::{on_client_thread, TunServer, UnknownName, CRITICAL_LEN, CRITICAL_PATH};
use crate::BoxError;

pub use counter::{RecordCounter, WireLog, WrittenRecord};

/// The request of every run: the fixture's critical resource.
pub const REQUEST_PATH: &str = CRITICAL_PATH;
/// Its body length.
pub const RESPONSE_LEN: u64 = CRITICAL_LEN;
/// A run (or one connection of a rate run) fails after this long.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(20);
/// Packets the tun link records per run for the segment count (a run takes a few dozen).
const TRACE_PACKETS: usize = 20_000;
/// The TLS record content type of application data (and of every TLS 1.3 encrypted
/// record).
const APPLICATION_DATA: u8 = 23;
/// TCP SYN flag.
const SYN: u8 = 0x02;

/// How the client builds its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientCase {
    /// hyper's HTTP/2 client over tokio-rustls, as people use it: `TCP_NODELAY` off (the
    /// default of hyper-util's `HttpConnector`), hyper's default HTTP/2 settings, no early
    /// data.
    StockClient,
    /// `tls-flush`'s client wrapper: the HTTP/2 preface, SETTINGS, WINDOW_UPDATE and the
    /// first HEADERS in one TLS record.
    Coalesced,
    /// [`ClientCase::Coalesced`] with TLS 1.3 early data (0-RTT) on resumed connections.
    #[serde(rename = "coalesced-0rtt")]
    Coalesced0Rtt,
}

impl ClientCase {
    /// Every case, stock (the baseline of the ratios) first.
    pub const ALL: [ClientCase; 3] = [
        ClientCase::StockClient,
        ClientCase::Coalesced,
        ClientCase::Coalesced0Rtt,
    ];

    /// The name on command lines, in tables and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ClientCase::StockClient => "stock-client",
            ClientCase::Coalesced => "coalesced",
            ClientCase::Coalesced0Rtt => "coalesced-0rtt",
        }
    }

    /// Whether its `ClientConfig` enables TLS 1.3 early data.
    pub fn early_data(self) -> bool {
        self == ClientCase::Coalesced0Rtt
    }
}

impl fmt::Display for ClientCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ClientCase {
    type Err = UnknownName;

    /// ```
    /// use integration_tests::first_request::ClientCase;
    /// assert_eq!("coalesced-0rtt".parse(), Ok(ClientCase::Coalesced0Rtt));
    /// assert!("stock".parse::<ClientCase>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named("client case", s, &ClientCase::ALL, ClientCase::name)
    }
}

/// A fresh connection (empty session store) or a resumed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Connection {
    /// A full handshake: the client has no session for the server.
    Fresh,
    /// A priming connection to the same server ran first, so the client offers its session.
    Resumed,
}

impl Connection {
    /// Both, in table order.
    pub const ALL: [Connection; 2] = [Connection::Fresh, Connection::Resumed];

    /// `fresh` or `resumed`.
    pub fn name(self) -> &'static str {
        match self {
            Connection::Fresh => "fresh",
            Connection::Resumed => "resumed",
        }
    }
}

impl fmt::Display for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Connection {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named("connection", s, &Connection::ALL, Connection::name)
    }
}

/// The server of the first-request workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FirstRequestServer {
    /// The demo app in-process behind `tls-flush` (its default policy), with TLS 1.3
    /// resumption and early data (see the [module documentation](self)).
    Ours,
    /// A peer that resumes: [`PeerKind::Nginx0rtt`] or [`PeerKind::NginxNoEarly`].
    Peer(PeerKind),
}

impl FirstRequestServer {
    /// Every server, in table order.
    pub const ALL: [FirstRequestServer; 3] = [
        FirstRequestServer::Ours,
        FirstRequestServer::Peer(PeerKind::Nginx0rtt),
        FirstRequestServer::Peer(PeerKind::NginxNoEarly),
    ];

    /// `ours`, `nginx-0rtt` or `nginx-no-early`.
    pub fn name(self) -> &'static str {
        match self {
            FirstRequestServer::Ours => "ours",
            FirstRequestServer::Peer(kind) => kind.name(),
        }
    }

    /// The peer it starts, if it is one.
    pub fn peer(self) -> Option<PeerKind> {
        match self {
            FirstRequestServer::Ours => None,
            FirstRequestServer::Peer(kind) => Some(kind),
        }
    }
}

impl fmt::Display for FirstRequestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FirstRequestServer {
    type Err = UnknownName;

    /// ```
    /// use integration_tests::first_request::FirstRequestServer;
    /// use integration_tests::peers::PeerKind;
    /// assert_eq!("nginx-0rtt".parse(), Ok(FirstRequestServer::Peer(PeerKind::Nginx0rtt)));
    /// assert!("nginx".parse::<FirstRequestServer>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named(
            "server",
            s,
            &FirstRequestServer::ALL,
            FirstRequestServer::name,
        )
    }
}

fn named<T: Copy>(
    what: &'static str,
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, UnknownName> {
    all.iter()
        .copied()
        .find(|&t| name(t) == s.trim())
        .ok_or_else(|| UnknownName {
            what,
            name: s.to_string(),
            known: all.iter().map(|&t| name(t).to_string()).collect(),
        })
}

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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = match trust {
        Trust::Certificate(certificate) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(certificate.clone())?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(examples::tls::AcceptAnyCert(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
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
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let poll = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        self.note();
        poll
    }
}

impl AsyncWrite for Observed {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note();
        poll
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note();
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
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

fn sent_early_data(wire: &WireLog) -> bool {
    wire.records.iter().any(|r| {
        r.content_type == APPLICATION_DATA && wire.first_read_at.is_none_or(|read| r.at < read)
    })
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
        connection_inner(case, addr, config, path),
    )
    .await
    .map_err(|_| format!("{case}: no response within {CONNECTION_TIMEOUT:?}"))?
}

async fn connection_inner(
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
    let io = TokioIo::new(Observed {
        inner: stream,
        info: info.clone(),
    });
    let (mut sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .map_err(|e| format!("{case}: HTTP/2 handshake: {e}"))?;
    let driver = tokio::spawn(connection);
    let request = http::Request::get(format!("https://localhost{path}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
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
    if status != http::StatusCode::OK {
        return Err(format!("{case}: status {status}").into());
    }
    if body.len() as u64 != RESPONSE_LEN
        || !body
            .iter()
            .enumerate()
            .all(|(i, &b)| b == examples::body::pattern_byte(i as u64))
    {
        return Err(format!(
            "{case}: the body is not {RESPONSE_LEN} pattern bytes ({} bytes)",
            body.len()
        )
        .into());
    }
    // Close: hyper ends the connection once no sender is left.
    drop(sender);
    if tokio::time::timeout(Duration::from_secs(2), driver)
        .await
        .is_err()
    {
        tracing::debug!("first-request: the connection did not close within 2 s");
    }
    let wire = wire.lock().expect("wire log poisoned").clone();
    let first_response_at = wire
        .reads
        .iter()
        .copied()
        .filter(|&at| at <= head_at)
        .max()
        .unwrap_or(head_at);
    let tls = *info.lock().expect("tls info poisoned");
    Ok(ConnectionOutcome {
        connect_start,
        stream_ready_at,
        first_response_at,
        complete_at,
        tls,
        local_port,
        wire,
    })
}

/// The client's first flight in a connection's [`WireLog`] (see the [module
/// documentation](self) for which records count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFlight {
    /// Application-data records written before the first response byte arrived and before
    /// the client read anything after the first of them.
    pub records: usize,
    /// Every record written before it, the handshake's included.
    pub client_records: usize,
    /// Stream offsets `[start, end)` of the application-data bytes among them (`start ==
    /// end` when there were none).
    pub bytes: (u64, u64),
}

/// Counts the first flight of `wire`, the first response byte having arrived at
/// `first_response_at`, with `tls` saying whether TLS 1.3 was spoken and early data
/// accepted.
pub fn first_flight(wire: &WireLog, tls: &TlsInfo, first_response_at: Instant) -> FirstFlight {
    let tls13 = tls.version == Some(ProtocolVersion::TLSv1_3);
    // The client's encrypted handshake records after the server's first flight.
    let mut handshake_left = if tls13 {
        1 + usize::from(tls.early_data_accepted)
    } else {
        0
    };
    let before: Vec<&WrittenRecord> = wire
        .records
        .iter()
        .filter(|r| r.at < first_response_at)
        .collect();
    let mut app: Vec<&WrittenRecord> = Vec::new();
    // The flight ends at the first read after its first record: what the client writes
    // then (a SETTINGS ACK, say) answers the server, and is no longer its first flight.
    let mut ends_at = first_response_at;
    for record in &before {
        if record.content_type != APPLICATION_DATA || record.at >= ends_at {
            continue;
        }
        let early = wire.first_read_at.is_none_or(|read| record.at < read);
        if !early && handshake_left > 0 {
            handshake_left -= 1;
            continue;
        }
        if app.is_empty() {
            if let Some(&read) = wire.reads.iter().find(|&&read| read > record.at) {
                ends_at = ends_at.min(read);
            }
        }
        app.push(*record);
    }
    let bytes = match (app.first(), app.last()) {
        (Some(first), Some(last)) => (first.offset, last.offset + 5 + u64::from(last.len)),
        _ => (0, 0),
    };
    FirstFlight {
        records: app.len(),
        client_records: before.len(),
        bytes,
    }
}

/// The client-to-server TCP segments with payload of the connection from `client_port`
/// that carried any byte of the client's stream offsets `[start, end)`, in the tun link's
/// packet log (sequence numbers relative to the connection's SYN; a retransmission of the
/// same segment counts once). `None` when the log has no SYN of that connection.
pub fn segments_carrying(
    trace: &[PacketEvent],
    client_port: u16,
    (start, end): (u64, u64),
) -> Option<usize> {
    let ours = trace.iter().filter_map(|p| {
        p.tcp.filter(|t| {
            p.direction == tun::Direction::Upstream && !p.dropped && t.src_port == client_port
        })
    });
    let isn = ours.clone().find(|t| t.flags & SYN != 0)?.seq;
    let mut seen = std::collections::BTreeSet::new();
    for t in ours.filter(|t| t.payload > 0 && t.flags & SYN == 0) {
        let from = u64::from(t.seq.wrapping_sub(isn.wrapping_add(1)));
        let to = from + u64::from(t.payload);
        if from < end && start < to {
            seen.insert((from, to));
        }
    }
    Some(seen.len())
}

/// What one first-request run measured. Times in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstRequestResult {
    /// [`ClientCase::name`].
    pub case: String,
    /// [`FirstRequestServer::name`].
    pub server: String,
    /// `relay` or `tun`.
    pub link: String,
    /// What was asked for: a fresh or a resumed connection.
    pub connection: Connection,
    /// Which repeat (0 outside the lab).
    pub repeat: usize,
    /// Whether the handshake actually resumed a session.
    pub resumed: bool,
    /// Whether the server accepted early data.
    pub early_data_accepted: bool,
    /// Whether the client sent early data (application data before it read anything),
    /// accepted or not.
    pub early_data_sent: bool,
    /// `TLSv1_3`, `TLSv1_2`.
    pub tls_version: String,
    /// TLS records carrying application data the client wrote before the first response
    /// byte arrived.
    pub first_flight_records: usize,
    /// Client-to-server TCP segments that carried them (tun link only; `null` on the relay).
    pub first_flight_segments: Option<usize>,
    /// Every TLS record the client wrote before the first response byte arrived, the
    /// handshake's included.
    pub client_records: usize,
    /// From the start of the TCP connect to the arrival of the first response byte.
    pub first_response_ms: f64,
    /// From the start of the TCP connect to the client's TLS stream being ready for hyper.
    pub tls_ready_ms: f64,
    /// From the start of the TCP connect to the last response byte.
    pub response_complete_ms: f64,
}

fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e3
}

impl FirstRequestResult {
    fn new(
        case: ClientCase,
        server: FirstRequestServer,
        link: &str,
        connection: Connection,
        outcome: &ConnectionOutcome,
        trace: Option<&[PacketEvent]>,
    ) -> FirstRequestResult {
        let flight = first_flight(&outcome.wire, &outcome.tls, outcome.first_response_at);
        FirstRequestResult {
            case: case.name().to_string(),
            server: server.name().to_string(),
            link: link.to_string(),
            connection,
            repeat: 0,
            resumed: outcome.tls.resumed(),
            early_data_accepted: outcome.tls.early_data_accepted,
            early_data_sent: outcome.sent_early_data(),
            tls_version: outcome
                .tls
                .version
                .map_or_else(|| "unknown".into(), |v| format!("{v:?}")),
            first_flight_records: flight.records,
            first_flight_segments: trace
                .and_then(|t| segments_carrying(t, outcome.local_port, flight.bytes)),
            client_records: flight.client_records,
            first_response_ms: ms(outcome.connect_start, outcome.first_response_at),
            tls_ready_ms: ms(outcome.connect_start, outcome.stream_ready_at),
            response_complete_ms: ms(outcome.connect_start, outcome.complete_at),
        }
    }
}

/// The server of a relay run: in-process or a peer process; stopped when dropped.
enum RelayServer {
    InProcess(TestServer),
    Peer(PeerServer),
}

/// The most early data `ours` accepts (one first flight with room to spare).
pub const OURS_MAX_EARLY_DATA: u32 = 16 * 1024;

/// Starts `ours` on `addr` (port 0: a free one): the demo app behind `tls-flush` (default
/// configuration, through `tls_flush::serve_connection`, which reads accepted early data
/// through `tls_flush::EarlyDataStream` before the wrapper), TLS 1.3 resumption from
/// rustls' stateful in-memory session cache (two tickets per handshake, rustls' default;
/// each usable once) and early data up to [`OURS_MAX_EARLY_DATA`]. rustls accepts early
/// data only with stateful resumption, so no `Ticketer`.
pub async fn start_ours(addr: SocketAddr) -> Result<TestServer, BoxError> {
    let identity = examples::tls::self_signed()?;
    let certificate = identity.chain[0].clone();
    let mut tls = examples::tls::server_config(identity, None)?;
    tls.max_early_data_size = OURS_MAX_EARLY_DATA;
    let setup = ServerSetup {
        config: Some(tls_flush::FlushConfig::default()),
        ..ServerSetup::default()
    };
    TestServer::start_with_tls(setup, examples::axum_app::router(), addr, certificate, tls).await
}

async fn start_relay_server(server: FirstRequestServer) -> Result<RelayServer, BoxError> {
    match server {
        FirstRequestServer::Ours => Ok(RelayServer::InProcess(
            start_ours(SocketAddr::from(([127, 0, 0, 1], 0))).await?,
        )),
        FirstRequestServer::Peer(kind) => {
            // Starting waits for the child's port (blocking): off the runtime's threads.
            let peer = tokio::task::spawn_blocking(move || PeerServer::start(kind)).await??;
            Ok(RelayServer::Peer(peer))
        }
    }
}

impl RelayServer {
    fn endpoint(&self) -> (SocketAddr, Trust) {
        match self {
            RelayServer::InProcess(s) => (s.addr, Trust::Certificate(s.certificate.clone())),
            RelayServer::Peer(p) => (p.addr(), Trust::Certificate(p.certificate().clone())),
        }
    }

    async fn stop(self) -> Result<(), BoxError> {
        if let RelayServer::Peer(peer) = self {
            // Stopping waits for the process to exit (blocking).
            tokio::task::spawn_blocking(move || drop(peer)).await?;
        }
        Ok(())
    }
}

/// The client of one first-request run: a priming connection for `resumed`, a pause of
/// `settle` (its close travels), then the measured connection.
async fn first_request_client(
    case: ClientCase,
    connection: Connection,
    addr: SocketAddr,
    trust: Trust,
    settle: Duration,
) -> Result<ConnectionOutcome, BoxError> {
    let config = client_config(case, &trust)?;
    if connection == Connection::Resumed {
        one_connection(case, addr, config.clone())
            .await
            .map_err(|e| format!("priming connection: {e}"))?;
        tokio::time::sleep(settle).await;
    }
    one_connection(case, addr, config).await
}

/// One first-request run behind a fresh relay link with `link`, against a fresh `server`.
pub async fn run_relay(
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
    link: &LinkConfig,
) -> Result<FirstRequestResult, BoxError> {
    let label = format!("{case}/{server}/{connection}");
    let running = start_relay_server(server)
        .await
        .map_err(|e| format!("{label}: starting the server: {e}"))?;
    let (upstream, trust) = running.endpoint();
    let relay = RelayLink::start(upstream, *link)
        .await
        .map_err(|e| format!("{label}: starting the link: {e}"))?;
    let addr = relay.addr();
    let settle = link.rtt;
    let outcome = on_client_thread(CONNECTION_TIMEOUT * 3, None, move || {
        first_request_client(case, connection, addr, trust, settle)
    })
    .await;
    drop(relay);
    running.stop().await?;
    let outcome = outcome.map_err(|e| format!("{label}: {e}"))?;
    Ok(FirstRequestResult::new(
        case, server, "relay", connection, &outcome, None,
    ))
}

/// Starts `server` in the tun link's server namespace.
async fn start_tun_server(
    link: &TunLink,
    server: FirstRequestServer,
) -> Result<TunServer, BoxError> {
    match server {
        FirstRequestServer::Ours => TunServer::start_with(link, start_ours).await,
        FirstRequestServer::Peer(kind) => TunServer::start_peer(link, kind).await,
    }
}

/// Runs `job` with the client of a fresh tun link (root only) against a fresh `server`; the
/// link's packet log is handed to `after` with the job's outcome.
async fn with_tun<T, F, Fut>(
    server: FirstRequestServer,
    config: &TunConfig,
    label: &str,
    limit: Duration,
    job: F,
) -> Result<(T, Vec<PacketEvent>), BoxError>
where
    F: FnOnce(SocketAddr, Trust) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
    T: Send + 'static,
{
    let mut start_config = config.clone();
    start_config.trace_packets = start_config.trace_packets.max(TRACE_PACKETS);
    let link = tun::blocking(move || TunLink::start(start_config))
        .await?
        .map_err(|e| format!("{label}: starting the tun link: {e}"))?;
    let running = start_tun_server(&link, server)
        .await
        .map_err(|e| format!("{label}: starting the server: {e}"))?;
    let (addr, trust) = running.endpoint();
    let namespace = link.namespace(Side::Client).to_string();
    let outcome = on_client_thread(limit, Some(namespace), move || job(addr, trust)).await;
    let stopped = tun::blocking(move || running.stop()).await?;
    let trace = link.trace();
    tun::blocking(move || drop(link)).await?;
    let outcome = outcome.map_err(|e| format!("{label}: {e}"))?;
    stopped.map_err(|e| format!("{label}: stopping the server: {e}"))?;
    Ok((outcome, trace))
}

/// One first-request run through a fresh kernel-faithful link (root only), the server in
/// its server namespace and the client in its client namespace; counts the first flight's
/// TCP segments from the emulator's packet log.
pub async fn run_tun(
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
    config: &TunConfig,
) -> Result<FirstRequestResult, BoxError> {
    let label = format!("{case}/{server}/{connection}");
    let settle = config.rtt;
    let (outcome, trace) = with_tun(
        server,
        config,
        &label,
        CONNECTION_TIMEOUT * 3,
        move |addr, trust| first_request_client(case, connection, addr, trust, settle),
    )
    .await?;
    Ok(FirstRequestResult::new(
        case,
        server,
        "tun",
        connection,
        &outcome,
        Some(&trace),
    ))
}

/// What a connection-rate run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateResult {
    /// [`ClientCase::name`].
    pub case: String,
    /// [`FirstRequestServer::name`].
    pub server: String,
    /// `relay` or `tun`.
    pub link: String,
    /// Which repeat (0 outside the lab).
    pub repeat: usize,
    /// How long the loop ran, in seconds (the last connection finishes after the duration
    /// asked for).
    pub elapsed_s: f64,
    /// Connections completed (each: TCP connect, TLS handshake, HTTP/2, one request, body
    /// checked, close).
    pub connections: usize,
    /// Of which resumed a session.
    pub resumed_connections: usize,
    /// `connections / elapsed_s`.
    pub connections_per_s: f64,
    /// Median time from connect start to the first response byte, in milliseconds.
    pub median_first_response_ms: f64,
}

/// The client of a rate run: connections one after the other until `duration` has passed.
async fn rate_client(
    case: ClientCase,
    addr: SocketAddr,
    trust: Trust,
    duration: Duration,
) -> Result<(usize, usize, Duration, f64), BoxError> {
    let config = client_config(case, &trust)?;
    let start = Instant::now();
    let (mut connections, mut resumed) = (0, 0);
    let mut firsts = Vec::new();
    while start.elapsed() < duration {
        let outcome = one_connection(case, addr, config.clone())
            .await
            .map_err(|e| format!("connection {}: {e}", connections + 1))?;
        connections += 1;
        resumed += usize::from(outcome.tls.resumed());
        firsts.push(ms(outcome.connect_start, outcome.first_response_at));
    }
    firsts.sort_by(f64::total_cmp);
    let median = firsts.get(firsts.len() / 2).copied().unwrap_or(0.0);
    Ok((connections, resumed, start.elapsed(), median))
}

fn rate_result(
    case: ClientCase,
    server: FirstRequestServer,
    link: &str,
    (connections, resumed, elapsed, median): (usize, usize, Duration, f64),
) -> RateResult {
    let elapsed_s = elapsed.as_secs_f64();
    RateResult {
        case: case.name().to_string(),
        server: server.name().to_string(),
        link: link.to_string(),
        repeat: 0,
        elapsed_s,
        connections,
        resumed_connections: resumed,
        connections_per_s: if elapsed_s > 0.0 {
            connections as f64 / elapsed_s
        } else {
            0.0
        },
        median_first_response_ms: median,
    }
}

/// A connection-rate run behind a fresh relay link: against one fresh `server`, the
/// client of `case` opens one connection after the other (TCP, TLS, HTTP/2, `GET
/// /critical`, close; sequentially, one at a time) for `duration`, sharing one session
/// store, so that every connection after the first can resume.
pub async fn connection_rate(
    case: ClientCase,
    server: FirstRequestServer,
    duration: Duration,
    link: &LinkConfig,
) -> Result<RateResult, BoxError> {
    let label = format!("{case}/{server}/connection-rate");
    let running = start_relay_server(server)
        .await
        .map_err(|e| format!("{label}: starting the server: {e}"))?;
    let (upstream, trust) = running.endpoint();
    let relay = RelayLink::start(upstream, *link)
        .await
        .map_err(|e| format!("{label}: starting the link: {e}"))?;
    let addr = relay.addr();
    let measured = on_client_thread(duration + CONNECTION_TIMEOUT * 2, None, move || {
        rate_client(case, addr, trust, duration)
    })
    .await;
    drop(relay);
    running.stop().await?;
    let measured = measured.map_err(|e| format!("{label}: {e}"))?;
    Ok(rate_result(case, server, "relay", measured))
}

/// [`connection_rate`] through a fresh kernel-faithful link (root only).
pub async fn connection_rate_tun(
    case: ClientCase,
    server: FirstRequestServer,
    duration: Duration,
    config: &TunConfig,
) -> Result<RateResult, BoxError> {
    let label = format!("{case}/{server}/connection-rate");
    // No packet log needed: keep the emulator's default.
    let mut config = config.clone();
    config.trace_packets = 0;
    let (measured, _) = with_tun(
        server,
        &config,
        &label,
        duration + CONNECTION_TIMEOUT * 2,
        move |addr, trust| rate_client(case, addr, trust, duration),
    )
    .await?;
    Ok(rate_result(case, server, "tun", measured))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tun::TcpFields;

    const CHANGE_CIPHER_SPEC: u8 = 20;
    const HANDSHAKE: u8 = 22;

    fn record(at: Instant, content_type: u8, offset: u64, len: u16) -> WrittenRecord {
        WrittenRecord {
            at,
            content_type,
            len,
            offset,
        }
    }

    #[test]
    fn names_round_trip() {
        for case in ClientCase::ALL {
            assert_eq!(case.name().parse(), Ok(case));
        }
        for server in FirstRequestServer::ALL {
            assert_eq!(server.name().parse(), Ok(server));
        }
        for c in Connection::ALL {
            assert_eq!(c.name().parse(), Ok(c));
        }
        let err = "stock".parse::<ClientCase>().unwrap_err().to_string();
        assert!(
            err.contains("stock-client, coalesced, coalesced-0rtt"),
            "{err}"
        );
        assert_eq!(
            serde_json::to_string(&ClientCase::Coalesced0Rtt).unwrap(),
            "\"coalesced-0rtt\""
        );
    }

    #[test]
    fn the_first_flight_leaves_the_handshake_out() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // ClientHello, (server flight read at 20), CCS, Finished, preface, SETTINGS,
        // HEADERS, then a SETTINGS ACK after the response arrived at 41.
        let wire = WireLog {
            records: vec![
                record(at(0), HANDSHAKE, 0, 500),
                record(at(21), CHANGE_CIPHER_SPEC, 505, 1),
                record(at(21), APPLICATION_DATA, 511, 53),
                record(at(22), APPLICATION_DATA, 569, 41),
                record(at(22), APPLICATION_DATA, 615, 60),
                record(at(23), APPLICATION_DATA, 680, 40),
                record(at(42), APPLICATION_DATA, 725, 26),
            ],
            first_read_at: Some(at(20)),
            reads: vec![at(20), at(41)],
            bytes_written: 756,
        };
        let tls13 = TlsInfo {
            handshake_kind: Some(HandshakeKind::Full),
            early_data_accepted: false,
            version: Some(ProtocolVersion::TLSv1_3),
        };
        let flight = first_flight(&wire, &tls13, at(41));
        assert_eq!(flight.records, 3);
        assert_eq!(flight.client_records, 6);
        assert_eq!(flight.bytes, (569, 725));
        // The server's SETTINGS read at 30, before the response: the ACK written at 31 is
        // not the first flight.
        let mut acked = wire.clone();
        acked.reads = vec![at(20), at(30), at(41)];
        acked.records[6] = record(at(31), APPLICATION_DATA, 725, 26);
        let flight = first_flight(&acked, &tls13, at(41));
        assert_eq!((flight.records, flight.client_records), (3, 7));
        assert_eq!(flight.bytes, (569, 725));
        // 0-RTT accepted: the early record counts, EndOfEarlyData and Finished do not.
        let early = WireLog {
            records: vec![
                record(at(0), HANDSHAKE, 0, 500),
                record(at(0), APPLICATION_DATA, 505, 150),
                record(at(21), APPLICATION_DATA, 660, 19),
                record(at(21), APPLICATION_DATA, 684, 53),
            ],
            first_read_at: Some(at(20)),
            reads: vec![at(20)],
            bytes_written: 742,
        };
        let accepted = TlsInfo {
            early_data_accepted: true,
            ..tls13
        };
        let flight = first_flight(&early, &accepted, at(21) + Duration::from_micros(1));
        assert_eq!((flight.records, flight.bytes), (1, (505, 660)));
    }

    #[test]
    fn segments_are_counted_by_sequence_number() {
        let t0 = Instant::now();
        let packet = |flags, seq: u32, payload, src_port, direction| PacketEvent {
            at: t0,
            due: t0,
            direction,
            ip_len: 52 + payload,
            tcp: Some(TcpFields {
                src_port,
                dst_port: 443,
                flags,
                seq,
                ack: 0,
                payload,
            }),
            dropped: false,
            queue_bytes: 0,
        };
        let up = tun::Direction::Upstream;
        let isn = u32::MAX - 10; // wraps
        let trace = vec![
            packet(SYN, isn, 0, 5000, up),
            packet(0x18, isn.wrapping_add(1), 505, 5000, up),
            packet(0x18, isn.wrapping_add(506), 100, 5000, up),
            packet(0x18, isn.wrapping_add(606), 200, 5000, up),
            packet(0x18, isn.wrapping_add(606), 200, 5000, up), // retransmitted
            packet(0x18, 77, 300, 6000, up),                    // another connection
            packet(0x18, 99, 300, 443, tun::Direction::Downstream),
        ];
        assert_eq!(segments_carrying(&trace, 5000, (505, 700)), Some(2));
        assert_eq!(segments_carrying(&trace, 5000, (0, 505)), Some(1));
        assert_eq!(segments_carrying(&trace, 5000, (900, 900)), Some(0));
        assert_eq!(segments_carrying(&trace, 7000, (0, 10)), None);
    }
}
