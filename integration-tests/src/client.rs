//! A deterministic HTTP/2 client over rustls, with taps under and above TLS, that checks
//! every body byte.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use examples::tls::AcceptAnyCert;
use h2::client::SendRequest;
use rustls::pki_types::{CertificateDer, ServerName};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::tap::{Injector, ReadGate, SharedLog, Tap, TapLog};
use crate::BoxError;

/// Stream-level receive window: large, so flow control is not what is measured.
pub const STREAM_WINDOW: u32 = 4 << 20;
/// Connection-level receive window.
pub const CONNECTION_WINDOW: u32 = 16 << 20;

/// How the client trusts the server.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Trust this certificate as a root (DER).
    Certificate(CertificateDer<'static>),
    /// Accept any certificate, with [`AcceptAnyCert`]: no authentication, for tests against
    /// self-signed servers only.
    AnyCertificate,
}

/// Options for [`TapClient::connect`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How to verify the server.
    pub trust: Trust,
    /// SNI name.
    pub server_name: String,
    /// The client's socket receive buffer (`SO_RCVBUF`); `None` leaves the kernel default.
    pub recv_buffer: Option<usize>,
}

impl ClientOptions {
    /// The default options with `trust`: a certificate to trust as the only root (a
    /// [`CertificateDer`]), or a [`Trust`].
    ///
    /// ```
    /// use integration_tests::{ClientOptions, Trust};
    /// let options = ClientOptions::trusting(Trust::AnyCertificate);
    /// assert_eq!(options.server_name, "localhost");
    /// ```
    pub fn trusting(trust: impl Into<Trust>) -> ClientOptions {
        ClientOptions {
            trust: trust.into(),
            ..ClientOptions::default()
        }
    }
}

impl From<CertificateDer<'static>> for Trust {
    fn from(certificate: CertificateDer<'static>) -> Trust {
        Trust::Certificate(certificate)
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            trust: Trust::AnyCertificate,
            server_name: "localhost".into(),
            recv_buffer: None,
        }
    }
}

/// One response, fully received and checked.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status.
    pub status: http::StatusCode,
    /// Response headers.
    pub headers: http::HeaderMap,
    /// Body length.
    pub len: u64,
    /// SHA-256 of the body.
    pub sha256: [u8; 32],
    /// True when every byte at offset `i` was [`pattern_byte`]`(i)`.
    pub pattern_ok: bool,
    /// The HTTP/2 stream id it came on.
    pub stream_id: u32,
    /// When the request was sent.
    pub sent_at: Instant,
    /// When the body was complete.
    pub done_at: Instant,
}

impl Response {
    /// Fails, saying why, unless this is a `200 OK` whose body is exactly `len` bytes of the
    /// pattern ([`pattern_byte`]), checked byte by byte and by SHA-256.
    pub fn check_pattern(&self, len: u64) -> Result<(), String> {
        if self.status != http::StatusCode::OK {
            return Err(format!("status {}", self.status));
        }
        if self.len != len {
            return Err(format!("{} body bytes, expected {len}", self.len));
        }
        if !self.pattern_ok {
            return Err("body bytes differ from the pattern".into());
        }
        if self.sha256 != pattern_sha256_cached(len) {
            return Err("body SHA-256 differs from the pattern's".into());
        }
        Ok(())
    }
}

/// [`pattern_sha256`], computed once per length.
fn pattern_sha256_cached(len: u64) -> [u8; 32] {
    static KNOWN: Mutex<BTreeMap<u64, [u8; 32]>> = Mutex::new(BTreeMap::new());
    if let Some(sha) = KNOWN.lock().expect("pattern hashes poisoned").get(&len) {
        return *sha;
    }
    let sha = pattern_sha256(len);
    KNOWN
        .lock()
        .expect("pattern hashes poisoned")
        .insert(len, sha);
    sha
}

/// An HTTP/2 connection over TLS with taps.
#[derive(Clone)]
pub struct TapClient {
    send: SendRequest<Bytes>,
    log: SharedLog,
    gate: ReadGate,
    injector: Injector,
    /// When the TCP connection was opened.
    pub connected_at: Instant,
    /// TLS records received during the handshake; application data follows them.
    pub handshake_records: usize,
}

impl std::fmt::Debug for TapClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapClient").finish_non_exhaustive()
    }
}

/// The body pattern every test server uses: byte `i` is `(i % 251) as u8` (the demo app's
/// [`examples::body`], also what the peer servers serve).
pub use examples::body::pattern_byte;

impl TapClient {
    /// Connects, handshakes TLS with ALPN h2 and HTTP/2, and drives the connection on a task.
    pub async fn connect(addr: SocketAddr, options: ClientOptions) -> Result<TapClient, BoxError> {
        let connected_at = Instant::now();
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        if let Some(size) = options.recv_buffer {
            socket.set_recv_buffer_size(size)?;
        }
        socket.set_nodelay(true)?;
        socket.set_nonblocking(true)?;
        let socket = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(socket));
        let tcp: TcpStream = socket.connect(addr).await?;
        let log: SharedLog = Arc::new(Mutex::new(TapLog::default()));
        let gate = ReadGate::default();
        let injector = Injector::default();
        let tls = connector(&options.trust)?
            .connect(
                ServerName::try_from(options.server_name.clone())?,
                Tap::records(tcp, log.clone(), gate.clone()),
            )
            .await?;
        let handshake_records = log.lock().expect("tap log poisoned").records.len();
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err("server did not negotiate h2".into());
        }
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(16384)
            .handshake::<_, Bytes>(Tap::frames(tls, log.clone(), injector.clone()))
            .await?;
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(%err, "client connection ended");
            }
        });
        Ok(TapClient {
            send,
            log,
            gate,
            injector,
            connected_at,
            handshake_records,
        })
    }

    /// Sends `GET path` (with a `priority` header when given) and reads the whole body.
    pub async fn get(&self, path: &str, priority: Option<&str>) -> Result<Response, BoxError> {
        let pending = self.start(path, priority).await?;
        pending.finish().await
    }

    /// Sends the request and returns a handle that reads the response later.
    pub async fn start(
        &self,
        path: &str,
        priority: Option<&str>,
    ) -> Result<PendingResponse, BoxError> {
        let mut builder = http::Request::get(format!("https://localhost{path}"));
        if let Some(p) = priority {
            builder = builder.header("priority", p);
        }
        let mut send = self.send.clone().ready().await?;
        let sent_at = Instant::now();
        let (response, _) = send.send_request(builder.body(())?, true)?;
        Ok(PendingResponse { response, sent_at })
    }

    /// Plaintext spans `(start, end)` of the application-data records received after the
    /// handshake, assuming a TLS 1.3 AEAD with a 16-byte tag and no padding (rustls), and a
    /// server that sends no session tickets (the harness's servers do not).
    pub fn record_spans(&self) -> Vec<(u64, u64)> {
        let mut at = 0;
        self.log().records[self.handshake_records..]
            .iter()
            .filter(|r| r.content_type == 23)
            .map(|r| {
                let start = at;
                at += r.len.saturating_sub(17) as u64;
                (start, at)
            })
            .collect()
    }

    /// A copy of what the taps saw so far.
    pub fn log(&self) -> TapLog {
        self.log.lock().expect("tap log poisoned").clone()
    }

    /// Sends a raw frame between the client's own frames (for PRIORITY_UPDATE, type 0x10,
    /// and for malformed frames the h2 crate would never write).
    pub fn send_raw_frame(&self, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
        self.injector.send_frame(kind, flags, stream_id, payload);
    }

    /// Sends a PRIORITY_UPDATE (RFC 9218 §7.1) for `stream_id` with `field_value`.
    pub fn send_priority_update(&self, stream_id: u32, field_value: &str) {
        let mut payload = stream_id.to_be_bytes().to_vec();
        payload.extend_from_slice(field_value.as_bytes());
        self.send_raw_frame(0x10, 0, 0, &payload);
    }

    /// The read gate: close it to stop reading the socket (a slow reader).
    pub fn gate(&self) -> &ReadGate {
        &self.gate
    }

    /// Reads slowly, `bytes` every `period`, until `until` completes; then reads at full
    /// speed again.
    pub async fn read_slowly<F: std::future::Future>(
        &self,
        bytes: u64,
        period: Duration,
        until: F,
    ) -> F::Output {
        let gate = self.gate.clone();
        let drip = async move {
            loop {
                gate.allow(bytes);
                tokio::time::sleep(period).await;
            }
        };
        let output = tokio::select! {
            output = until => output,
            _ = drip => unreachable!("the drip never ends"),
        };
        self.gate.open();
        output
    }

    /// Waits until the taps have seen at least `bytes` of DATA payload on any of `streams`.
    pub async fn wait_for_data(
        &self,
        streams: &[u32],
        bytes: usize,
        timeout: Duration,
    ) -> Result<(), BoxError> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen: usize = self
                .log()
                .frames
                .iter()
                .filter(|f| f.kind == 0 && streams.contains(&f.stream_id))
                .map(|f| f.len)
                .sum();
            if seen >= bytes {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("only {seen} of {bytes} DATA bytes arrived in time").into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A request in flight.
#[derive(Debug)]
pub struct PendingResponse {
    response: h2::client::ResponseFuture,
    sent_at: Instant,
}

impl PendingResponse {
    /// The stream id the request went on.
    pub fn stream_id(&self) -> u32 {
        u32::from(self.response.stream_id())
    }

    /// When the request was sent.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// Reads the whole response, checking the body pattern and hashing it.
    pub async fn finish(self) -> Result<Response, BoxError> {
        let stream_id = self.stream_id();
        let response = self.response.await?;
        let (parts, mut body) = response.into_parts();
        let mut hasher = Sha256::new();
        let mut len = 0u64;
        let mut pattern_ok = true;
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            body.flow_control().release_capacity(chunk.len())?;
            hasher.update(&chunk);
            for (i, b) in chunk.iter().enumerate() {
                pattern_ok &= *b == pattern_byte(len + i as u64);
            }
            len += chunk.len() as u64;
        }
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            len,
            sha256: hasher.finalize().into(),
            pattern_ok,
            stream_id,
            sent_at: self.sent_at,
            done_at: Instant::now(),
        })
    }
}

/// The SHA-256 of `len` pattern bytes, to compare with [`Response::sha256`].
pub fn pattern_sha256(len: u64) -> [u8; 32] {
    let mut hasher = Sha256::new();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut at = 0u64;
    while at < len {
        buf.clear();
        let n = (len - at).min(64 * 1024);
        buf.extend((at..at + n).map(pattern_byte));
        hasher.update(&buf);
        at += n;
    }
    hasher.finalize().into()
}

fn connector(trust: &Trust) -> Result<TlsConnector, BoxError> {
    Ok(TlsConnector::from(Arc::new(h2_client_config(trust)?)))
}

/// The harness's rustls client configuration: the `ring` provider, rustls' safe default
/// protocol versions, ALPN `h2` only, and the server verified as `trust` says. The one
/// place every client of the harness (the tapped client, the first-request client, the
/// peers' readiness probe) gets its TLS settings, so that they all speak the same TLS.
pub fn h2_client_config(trust: &Trust) -> Result<rustls::ClientConfig, BoxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = match trust {
        Trust::Certificate(cert) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert.clone())?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
