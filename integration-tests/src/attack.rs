//! Client-side tools for hostile-input tests: hand-made HTTP/2 frames and HPACK field
//! lines, a raw HTTP/2 connection over TLS that writes whatever it is given and records
//! what comes back frame by frame, an `h2` client whose frames can be interleaved with
//! injected ones and whose reads can be paused, fast checks of the body pattern, and the
//! process's CPU time.
//!
//! Used by `tests/hostile_bounds_{memory,scheduling}.rs`; nothing here measures, the tests do.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls::pki_types::{CertificateDer, ServerName};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::client::pattern_byte;
use crate::tap::{Injector, ReadGate, SharedLog, Tap, TapLog};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// HTTP/2 frame types (RFC 9113 §6, RFC 9218 §7.1).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// PRIORITY_UPDATE.
    pub const PRIORITY_UPDATE: u8 = 0x10;
}

/// END_STREAM (DATA, HEADERS) and ACK (SETTINGS, PING): both 0x1.
pub const FLAG_END_STREAM: u8 = 0x1;
/// END_HEADERS.
pub const FLAG_END_HEADERS: u8 = 0x4;

/// One HTTP/2 frame: 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A PRIORITY_UPDATE payload (RFC 9218 §7.1): prioritized stream id, then the field value.
pub fn priority_update_payload(stream_id: u32, field_value: &[u8]) -> Vec<u8> {
    let mut p = stream_id.to_be_bytes().to_vec();
    p.extend_from_slice(field_value);
    p
}

/// A tiny HPACK encoder (RFC 7541): only the representations the attacks need, never
/// Huffman-coded. Integers, strings and literals with a new name are the testkit's, which
/// tls-flush's own tests use too.
pub mod hpack {
    use tls_flush_testkit::{hpack_int, hpack_string, literal};

    /// An indexed field line (§6.1): one octet for indexes below 127. Index 62 is the most
    /// recent dynamic-table entry.
    pub fn indexed(out: &mut Vec<u8>, index: usize) {
        hpack_int(out, 0x80, 7, index);
    }

    /// A literal field line with incremental indexing and a new name (§6.2.1): the field
    /// enters the dynamic table of the peer's decoder.
    pub fn literal_indexed_new_name(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        literal(out, true, name, value);
    }

    /// A literal field line without indexing, name from the table (§6.2.2).
    pub fn literal_indexed_name(out: &mut Vec<u8>, name_index: usize, value: &[u8]) {
        hpack_int(out, 0x00, 4, name_index);
        hpack_string(out, value);
    }

    /// A literal field line without indexing and a new name (§6.2.2).
    pub fn literal_new_name(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        literal(out, false, name, value);
    }

    /// The request pseudo-header fields, without touching the dynamic table: `:method`
    /// (GET from the static table, anything else as a literal), `:scheme https`, `:path`
    /// and `:authority localhost` as literals without indexing.
    pub fn request(method: &str, path: &str) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + path.len());
        if method == "GET" {
            indexed(&mut b, 2);
        } else {
            literal_indexed_name(&mut b, 2, method.as_bytes());
        }
        indexed(&mut b, 7); // :scheme https
        literal_indexed_name(&mut b, 4, path.as_bytes());
        literal_indexed_name(&mut b, 1, b"localhost");
        b
    }
}

/// A rustls client configuration that trusts `certificate` and offers `alpn`.
pub fn tls_connector(certificate: &CertificateDer<'static>, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certificate.clone()).expect("certificate");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// A TCP connection to `addr` with `TCP_NODELAY` and, when given, `SO_RCVBUF`.
pub async fn tcp_connect(
    addr: SocketAddr,
    recv_buffer: Option<usize>,
) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if let Some(size) = recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    socket.set_nodelay(true)?;
    socket.set_nonblocking(true)?;
    tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(socket))
        .connect(addr)
        .await
}

/// A TLS connection with ALPN `h2` whose socket reads go through `gate` and whose
/// records are logged in `log`.
pub async fn tls_h2(
    addr: SocketAddr,
    certificate: &CertificateDer<'static>,
    gate: ReadGate,
    log: SharedLog,
    recv_buffer: Option<usize>,
) -> Result<TlsStream<Tap<TcpStream>>, BoxError> {
    let tcp = tcp_connect(addr, recv_buffer).await?;
    let tls = tls_connector(certificate, &[b"h2"])
        .connect(
            ServerName::try_from("localhost")?,
            Tap::records(tcp, log, gate),
        )
        .await?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err("server did not negotiate h2".into());
    }
    Ok(tls)
}

// ---------------------------------------------------------------------------------------
// The body pattern.
// ---------------------------------------------------------------------------------------

fn pattern_table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| (0..251 + 65536).map(pattern_byte).collect())
}

/// True when `chunk` holds the pattern bytes for offsets `offset..offset + chunk.len()`
/// (slice comparisons, fast enough for tens of MiB in a debug build).
pub fn pattern_matches(offset: u64, chunk: &[u8]) -> bool {
    let table = pattern_table();
    let mut at = offset;
    chunk.chunks(65536).all(|piece| {
        let start = (at % 251) as usize;
        at += piece.len() as u64;
        piece == &table[start..start + piece.len()]
    })
}

/// `n` pattern bytes from offset 0.
pub fn pattern_bytes(n: usize) -> Bytes {
    let mut v = Vec::with_capacity(n);
    let table = pattern_table();
    while v.len() < n {
        let start = v.len() % 251;
        let take = (n - v.len()).min(65536);
        v.extend_from_slice(&table[start..start + take]);
    }
    Bytes::from(v)
}

// ---------------------------------------------------------------------------------------
// A raw HTTP/2 connection.
// ---------------------------------------------------------------------------------------

/// What the raw client received on one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStream {
    /// Header blocks received (response headers, trailers).
    pub header_blocks: u32,
    /// First octet of the first header block (h2 encodes `:status 200` as 0x88).
    pub first_block_octet: Option<u8>,
    /// DATA payload bytes.
    pub data: u64,
    /// Every DATA byte matched the body pattern at its offset.
    pub pattern_ok: bool,
    /// END_STREAM was received.
    pub ended: bool,
    /// RST_STREAM error code, if reset.
    pub reset: Option<u32>,
    /// Order in which the stream finished (ended or reset), counted over the connection.
    pub finished_as: Option<u64>,
}

impl Default for RawStream {
    fn default() -> Self {
        RawStream {
            header_blocks: 0,
            first_block_octet: None,
            data: 0,
            pattern_ok: true,
            ended: false,
            reset: None,
            finished_as: None,
        }
    }
}

impl RawStream {
    /// Ended or reset.
    pub fn finished(&self) -> bool {
        self.ended || self.reset.is_some()
    }
}

/// Everything the raw client's reader saw.
#[derive(Debug, Clone, Default)]
pub struct RawLog {
    /// Per stream.
    pub streams: BTreeMap<u32, RawStream>,
    /// GOAWAY: last stream id and error code.
    pub goaway: Option<(u32, u32)>,
    /// Frames received.
    pub frames: u64,
    /// Largest DATA payload received.
    pub max_data_frame: usize,
    /// Streams finished so far.
    pub finished: u64,
    /// Set when the reader stopped: `Ok` at a clean end of stream between frames.
    pub end: Option<Result<(), String>>,
}

/// An HTTP/2 connection over TLS driven by hand: the test writes frames, a reader task
/// records the server's frames per stream (checking DATA against the body pattern) and
/// acknowledges SETTINGS and PING. Its SETTINGS give the server the largest windows, so
/// it never needs a WINDOW_UPDATE.
#[derive(Debug)]
pub struct RawH2 {
    data: mpsc::Sender<Vec<u8>>,
    log: Arc<Mutex<RawLog>>,
    gate: ReadGate,
    next_stream: u32,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

/// Largest flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

impl RawH2 {
    /// Connects, sends the preface, SETTINGS (push off, largest stream window) and a
    /// connection WINDOW_UPDATE to the largest window.
    pub async fn connect(
        addr: SocketAddr,
        certificate: &CertificateDer<'static>,
        recv_buffer: Option<usize>,
    ) -> Result<RawH2, BoxError> {
        let gate = ReadGate::default();
        let tls = tls_h2(
            addr,
            certificate,
            gate.clone(),
            SharedLog::default(),
            recv_buffer,
        )
        .await?;
        let (rd, wr) = tokio::io::split(tls);
        let (data_tx, data_rx) = mpsc::channel::<Vec<u8>>(64);
        let (ctrl_tx, ctrl_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(write_loop(wr, data_rx, ctrl_rx));
        let log = Arc::new(Mutex::new(RawLog::default()));
        let reader = tokio::spawn(read_loop(rd, log.clone(), ctrl_tx));
        let mut hello = PREFACE.to_vec();
        let mut settings = Vec::new();
        settings.extend_from_slice(&2u16.to_be_bytes()); // ENABLE_PUSH
        settings.extend_from_slice(&0u32.to_be_bytes());
        settings.extend_from_slice(&4u16.to_be_bytes()); // INITIAL_WINDOW_SIZE
        settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        hello.extend(frame(kind::SETTINGS, 0, 0, &settings));
        hello.extend(frame(
            kind::WINDOW_UPDATE,
            0,
            0,
            &(MAX_WINDOW - 65535).to_be_bytes(),
        ));
        data_tx.send(hello).await?;
        Ok(RawH2 {
            data: data_tx,
            log,
            gate,
            next_stream: 1,
            reader,
            writer,
        })
    }

    /// The read gate: close it to stop reading the socket.
    pub fn gate(&self) -> &ReadGate {
        &self.gate
    }

    /// Queues bytes for the writer task; waits while 64 writes are already queued (the
    /// server not reading makes this wait).
    pub async fn send(&self, bytes: Vec<u8>) -> Result<(), BoxError> {
        self.data
            .send(bytes)
            .await
            .map_err(|_| "writer gone".into())
    }

    /// A sender the test can move into a task of its own (same queue as [`send`](Self::send)).
    pub fn sender(&self) -> mpsc::Sender<Vec<u8>> {
        self.data.clone()
    }

    /// Takes the next client stream id.
    pub fn next_stream_id(&mut self) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        id
    }

    /// A HEADERS frame (END_HEADERS, END_STREAM) for a request with `block` on the next
    /// stream id; returns the id and the frame.
    pub fn request_frame(&mut self, block: &[u8]) -> (u32, Vec<u8>) {
        let id = self.next_stream_id();
        (
            id,
            frame(kind::HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, id, block),
        )
    }

    /// Sends `method path` (with a `priority` field line when given) and returns its id.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        priority: Option<&str>,
    ) -> Result<u32, BoxError> {
        let mut block = hpack::request(method, path);
        if let Some(p) = priority {
            hpack::literal_new_name(&mut block, b"priority", p.as_bytes());
        }
        let (id, f) = self.request_frame(&block);
        self.send(f).await?;
        Ok(id)
    }

    /// A copy of what the reader saw so far.
    pub fn log(&self) -> RawLog {
        self.log.lock().expect("raw log poisoned").clone()
    }

    /// Streams finished so far (ended or reset), readable from another task.
    pub fn finished_counter(&self) -> impl Fn() -> u64 + Send + 'static {
        let log = self.log.clone();
        move || log.lock().expect("raw log poisoned").finished
    }

    /// One stream's record (default when nothing arrived on it).
    pub fn stream(&self, id: u32) -> RawStream {
        self.log
            .lock()
            .expect("raw log poisoned")
            .streams
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `done(log)` holds, or the reader stopped, or `limit` passed; returns
    /// the log then.
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&RawLog) -> bool) -> RawLog {
        let deadline = Instant::now() + limit;
        loop {
            {
                let log = self.log.lock().expect("raw log poisoned");
                if done(&log) || log.end.is_some() || Instant::now() > deadline {
                    return log.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until every stream in `ids` finished (or the connection ended, or `limit`).
    pub async fn wait_finished(&self, ids: &[u32], limit: Duration) -> RawLog {
        self.wait_for(limit, |log| {
            ids.iter()
                .all(|id| log.streams.get(id).is_some_and(RawStream::finished))
        })
        .await
    }
}

impl Drop for RawH2 {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

async fn write_loop(
    mut wr: WriteHalf<TlsStream<Tap<TcpStream>>>,
    mut data: mpsc::Receiver<Vec<u8>>,
    mut ctrl: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    loop {
        let bytes = tokio::select! {
            biased;
            Some(c) = ctrl.recv() => c,
            d = data.recv() => match d {
                Some(d) => d,
                None => break,
            },
        };
        if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

/// Reads one HTTP/2 frame: its type, flags and stream id, the payload into `payload`.
/// `Ok(None)` at a clean end of stream between frames; `Err` describes any other end.
pub async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    payload: &mut Vec<u8>,
) -> Result<Option<(u8, u8, u32)>, String> {
    let mut header = [0u8; 9];
    match rd.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
    payload.resize(len, 0);
    rd.read_exact(payload)
        .await
        .map_err(|e| format!("inside a frame: {e}"))?;
    Ok(Some((header[3], header[4], id)))
}

async fn read_loop(
    mut rd: ReadHalf<TlsStream<Tap<TcpStream>>>,
    log: Arc<Mutex<RawLog>>,
    ctrl: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut payload = Vec::new();
    let end = loop {
        let (kind, flags, id) = match read_frame(&mut rd, &mut payload).await {
            Ok(Some(h)) => h,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let len = payload.len();
        match kind {
            kind::SETTINGS if flags & FLAG_END_STREAM == 0 => {
                let _ = ctrl.send(frame(kind::SETTINGS, 0x1, 0, &[]));
            }
            kind::PING if flags & FLAG_END_STREAM == 0 => {
                let _ = ctrl.send(frame(kind::PING, 0x1, 0, &payload));
            }
            _ => {}
        }
        let mut log = log.lock().expect("raw log poisoned");
        log.frames += 1;
        let finished = log.finished;
        match kind {
            kind::DATA => {
                log.max_data_frame = log.max_data_frame.max(len);
                let s = log.streams.entry(id).or_default();
                s.pattern_ok &= pattern_matches(s.data, &payload);
                s.data += len as u64;
                if flags & FLAG_END_STREAM != 0 && !s.finished() {
                    s.ended = true;
                    s.finished_as = Some(finished);
                    log.finished += 1;
                }
            }
            kind::HEADERS => {
                let s = log.streams.entry(id).or_default();
                s.header_blocks += 1;
                if s.first_block_octet.is_none() {
                    s.first_block_octet = payload.first().copied();
                }
                if flags & FLAG_END_STREAM != 0 && !s.finished() {
                    s.ended = true;
                    s.finished_as = Some(finished);
                    log.finished += 1;
                }
            }
            kind::RST_STREAM => {
                let code = payload
                    .get(..4)
                    .map_or(0, |c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                let s = log.streams.entry(id).or_default();
                if !s.finished() {
                    s.reset = Some(code);
                    s.finished_as = Some(finished);
                    log.finished += 1;
                }
            }
            kind::GOAWAY => {
                let word = |at: usize| {
                    payload.get(at..at + 4).map_or(0, |c| {
                        u32::from_be_bytes([c[0], c[1], c[2], c[3]]) & 0x7fff_ffff
                    })
                };
                log.goaway = Some((word(0), word(4)));
            }
            _ => {}
        }
    };
    log.lock().expect("raw log poisoned").end = Some(end);
}

// ---------------------------------------------------------------------------------------
// An h2 client with taps, an injector and a read gate.
// ---------------------------------------------------------------------------------------

/// Settings of an [`H2Client`].
#[derive(Debug, Clone, Copy)]
pub struct H2Options {
    /// SETTINGS_MAX_FRAME_SIZE the client announces.
    pub max_frame_size: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub stream_window: u32,
    /// Connection-level window.
    pub connection_window: u32,
    /// `SO_RCVBUF` of the client's socket.
    pub recv_buffer: Option<usize>,
}

impl Default for H2Options {
    fn default() -> Self {
        H2Options {
            max_frame_size: 16384,
            stream_window: 4 << 20,
            connection_window: 16 << 20,
            recv_buffer: None,
        }
    }
}

/// The `h2` crate's client over TLS, with a frame tap (log), an injector for raw frames
/// and a read gate.
pub struct H2Client {
    /// Request handle.
    pub send: h2::client::SendRequest<Bytes>,
    /// The socket's read gate.
    pub gate: ReadGate,
    /// Raw frames slipped between the client's own.
    pub injector: Injector,
    /// Records and frames received.
    pub log: SharedLog,
    conn: JoinHandle<()>,
}

impl std::fmt::Debug for H2Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Client").finish_non_exhaustive()
    }
}

impl H2Client {
    /// Connects to `addr` trusting `certificate`.
    pub async fn connect(
        addr: SocketAddr,
        certificate: &CertificateDer<'static>,
        options: H2Options,
    ) -> Result<H2Client, BoxError> {
        let gate = ReadGate::default();
        let log = SharedLog::default();
        let injector = Injector::default();
        let tls = tls_h2(
            addr,
            certificate,
            gate.clone(),
            log.clone(),
            options.recv_buffer,
        )
        .await?;
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(options.stream_window)
            .initial_connection_window_size(options.connection_window)
            .max_frame_size(options.max_frame_size)
            .handshake::<_, Bytes>(Tap::frames(tls, log.clone(), injector.clone()))
            .await?;
        let conn = tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(%err, "attack client connection ended");
            }
        });
        Ok(H2Client {
            send,
            gate,
            injector,
            log,
            conn,
        })
    }

    /// Sends `method path` with a `priority` header when given.
    pub async fn request(
        &self,
        method: http::Method,
        path: &str,
        priority: Option<&str>,
    ) -> Result<h2::client::ResponseFuture, BoxError> {
        send_request(&self.send, method, path, priority).await
    }

    /// `GET path`.
    pub async fn get(
        &self,
        path: &str,
        priority: Option<&str>,
    ) -> Result<h2::client::ResponseFuture, BoxError> {
        self.request(http::Method::GET, path, priority).await
    }

    /// Queues a PRIORITY_UPDATE for `stream_id` with `field_value`.
    pub fn priority_update(&self, stream_id: u32, field_value: &[u8]) {
        self.injector.send_frame(
            kind::PRIORITY_UPDATE,
            0,
            0,
            &priority_update_payload(stream_id, field_value),
        );
    }

    /// Waits until the tap took every injected frame (they go out before the client's
    /// next frame); false if that took longer than `limit`.
    pub async fn injected(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.injector.idle())
            .await
            .is_ok()
    }

    /// A copy of the taps' log.
    pub fn log(&self) -> TapLog {
        self.log.lock().expect("tap log poisoned").clone()
    }
}

impl Drop for H2Client {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

/// Sends `method path` (no body) on `send`, with a `priority` header when given: for tasks
/// that hold a clone of an [`H2Client`]'s handle.
pub async fn send_request(
    send: &h2::client::SendRequest<Bytes>,
    method: http::Method,
    path: &str,
    priority: Option<&str>,
) -> Result<h2::client::ResponseFuture, BoxError> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"));
    if let Some(p) = priority {
        builder = builder.header("priority", p);
    }
    let mut send = send.clone().ready().await?;
    let (response, _) = send.send_request(builder.body(())?, true)?;
    Ok(response)
}

/// A response body read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Body {
    /// HTTP status.
    pub status: u16,
    /// Bytes received.
    pub len: u64,
    /// Every byte matched the pattern at its offset.
    pub pattern_ok: bool,
    /// SHA-256 of the body.
    pub sha256: [u8; 32],
}

/// Reads a response to its end, checking every byte against the pattern, hashing it and
/// adding each chunk's length to `counter`.
pub async fn read_body(
    response: h2::client::ResponseFuture,
    counter: Option<&AtomicU64>,
) -> Result<Body, h2::Error> {
    read_body_with(response, counter, true, None).await
}

/// [`read_body`] without the SHA-256 (`sha256` is all zeros): for long downloads read as
/// fast as possible, where hashing in a debug build would be most of the client's CPU.
pub async fn read_body_unhashed(
    response: h2::client::ResponseFuture,
    counter: Option<&AtomicU64>,
) -> Result<Body, h2::Error> {
    read_body_with(response, counter, false, None).await
}

/// [`read_body_unhashed`] at most `bytes_per_second`: a reader that keeps a steady pace
/// (with a small stream window, the server cannot run ahead of it by more than that
/// window).
pub async fn read_body_paced(
    response: h2::client::ResponseFuture,
    counter: Option<&AtomicU64>,
    bytes_per_second: f64,
) -> Result<Body, h2::Error> {
    read_body_with(response, counter, false, Some(bytes_per_second)).await
}

async fn read_body_with(
    response: h2::client::ResponseFuture,
    counter: Option<&AtomicU64>,
    hash: bool,
    pace: Option<f64>,
) -> Result<Body, h2::Error> {
    let start = tokio::time::Instant::now();
    let (parts, mut body) = response.await?.into_parts();
    let mut hasher = hash.then(Sha256::new);
    let mut len = 0u64;
    let mut pattern_ok = true;
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        pattern_ok &= pattern_matches(len, &chunk);
        if let Some(h) = &mut hasher {
            h.update(&chunk);
        }
        len += chunk.len() as u64;
        if let Some(c) = counter {
            c.fetch_add(chunk.len() as u64, Relaxed);
        }
        if let Some(rate) = pace {
            tokio::time::sleep_until(start + Duration::from_secs_f64(len as f64 / rate)).await;
        }
    }
    Ok(Body {
        status: parts.status.as_u16(),
        len,
        pattern_ok,
        sha256: hasher.map_or([0; 32], |h| h.finalize().into()),
    })
}

/// User plus system CPU time this process has used so far (`getrusage(RUSAGE_SELF)`).
pub fn process_cpu_time() -> Duration {
    // SAFETY: `getrusage` only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_checks_at_any_offset() {
        let bytes = pattern_bytes(200_000);
        assert!(pattern_matches(0, &bytes));
        assert!(pattern_matches(1000, &bytes[1000..]));
        assert!(!pattern_matches(1, &bytes[..10]));
        let mut bad = bytes.to_vec();
        bad[150_000] ^= 1;
        assert!(!pattern_matches(0, &bad));
    }
}
