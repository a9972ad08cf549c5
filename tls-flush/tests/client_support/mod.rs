//! Shared pieces of the `tls_flush::client` tests: TLS 1.3 configurations with early data
//! around a fresh certificate for `localhost` and 127.0.0.1 (made by the testkit's `tls`,
//! which the `serve` tests use too), a recording TCP proxy that parses the TLS
//! record headers the client sends, a silent TLS server that only reads, and an HTTP/2
//! server (hyper) that records, per connection, the early data it accepted and the
//! requests it served.

#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::{ClientConfig, ServerConfig};
use tls_flush::EarlyDataStream;
use tls_flush_testkit::tls::{config_pair, loopback_listener, ALPN_H2};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

// Each test binary uses some of them.
#[allow(unused_imports)]
pub use tls_flush_testkit::tls::{connect_as_localhost, localhost};

/// Bound on every wait of these tests.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// TLS content type of application data (and, in TLS 1.3, of every encrypted record).
pub const APPLICATION_DATA: u8 = 23;

/// A server configuration (TLS 1.3 only, ALPN `h2`, early data up to `max_early_data`
/// bytes, rustls' default stateful resumption) with a fresh certificate for `localhost` and
/// 127.0.0.1, and a client configuration trusting it (ALPN `h2`, early data enabled,
/// rustls' default resumption store).
pub fn tls_pair(max_early_data: u32) -> (ServerConfig, ClientConfig) {
    let (mut server, mut client) =
        config_pair(&["localhost", "127.0.0.1"], &[&rustls::version::TLS13]);
    server.alpn_protocols = vec![ALPN_H2.to_vec()];
    server.max_early_data_size = max_early_data;
    client.alpn_protocols = vec![ALPN_H2.to_vec()];
    client.enable_early_data = true;
    (server, client)
}

/// Awaits `future` within [`TIMEOUT`].
pub async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// One TLS record the client sent, as the proxy saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub content_type: u8,
    pub len: usize,
    /// The proxy's read (from the client) where the record began and where it ended.
    pub first_read: usize,
    pub last_read: usize,
}

/// A TCP proxy in front of `upstream` that parses the TLS record headers of what clients
/// send (one connection at a time is enough for these tests).
pub struct Proxy {
    pub addr: SocketAddr,
    /// Per connection, in the order they were accepted.
    pub records: Arc<Mutex<Vec<Vec<Record>>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let (listener, addr) = loopback_listener().await;
        let records = Arc::new(Mutex::new(Vec::new()));
        let log = records.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(upstream).await.unwrap();
                server.set_nodelay(true).unwrap();
                let (mut client_r, mut client_w) = client.into_split();
                let (mut server_r, mut server_w) = server.into_split();
                let log = log.clone();
                let connection = {
                    let mut log = log.lock().unwrap();
                    log.push(Vec::new());
                    log.len() - 1
                };
                tokio::spawn(async move {
                    let (mut pending, mut reads) = (Vec::<u8>::new(), 0usize);
                    // The records begun but not ended: (type, len, first read).
                    let mut start: Option<(u8, usize, usize)> = None;
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match client_r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        pending.extend_from_slice(&buf[..n]);
                        loop {
                            if start.is_none() && pending.len() >= 5 {
                                let len = u16::from_be_bytes([pending[3], pending[4]]) as usize;
                                start = Some((pending[0], len, reads));
                            }
                            match start {
                                Some((content_type, len, first_read))
                                    if pending.len() >= 5 + len =>
                                {
                                    log.lock().unwrap()[connection].push(Record {
                                        content_type,
                                        len,
                                        first_read,
                                        last_read: reads,
                                    });
                                    pending.drain(..5 + len);
                                    start = None;
                                }
                                _ => break,
                            }
                        }
                        reads += 1;
                        if server_w.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = server_w.shutdown().await;
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_r, &mut client_w).await;
                    let _ = client_w.shutdown().await;
                });
            }
        });
        Proxy { addr, records }
    }

    /// The records of the last connection.
    pub fn last(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }

    /// The records of the first connection.
    pub fn records(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap()
            .first()
            .cloned()
            .unwrap_or_default()
    }

    /// The client's encrypted records (TLS 1.3: its Finished, then its application data).
    pub fn encrypted(&self) -> Vec<Record> {
        self.records()
            .into_iter()
            .filter(|r| r.content_type == APPLICATION_DATA)
            .collect()
    }
}

/// A TLS server that completes handshakes and reads, never writing a byte of its own:
/// whatever the client sends is its first flight (no server SETTINGS to acknowledge).
/// Reports, per connection, the time from the end of the handshake to the end of the
/// client preface, and everything the client sent within `listen`.
pub struct Silent {
    pub addr: SocketAddr,
    pub seen: tokio::sync::mpsc::UnboundedReceiver<(Duration, Vec<u8>)>,
}

impl Silent {
    pub async fn start(server: ServerConfig, listen: Duration) -> Silent {
        let (listener, addr) = loopback_listener().await;
        let acceptor = TlsAcceptor::from(Arc::new(server));
        let (tx, seen) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut tls = EarlyDataStream::new(tls);
                    let accepted = Instant::now();
                    let (mut bytes, mut preface_at) = (Vec::new(), None);
                    let until = tokio::time::Instant::now() + listen;
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(Ok(n)) = tokio::time::timeout_at(until, tls.read(&mut buf)).await {
                        if n == 0 {
                            break;
                        }
                        bytes.extend_from_slice(&buf[..n]);
                        if preface_at.is_none() && bytes.len() >= 24 {
                            preface_at = Some(accepted.elapsed());
                        }
                    }
                    let _ = tx.send((preface_at.unwrap_or(Duration::MAX), bytes));
                });
            }
        });
        Silent { addr, seen }
    }
}

/// The HTTP/2 frames in `bytes` after the client preface, as (type, flags, stream id).
pub fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32)> {
    assert!(
        bytes.starts_with(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        "no preface"
    );
    let (mut out, mut pos) = (Vec::new(), 24);
    while bytes.len() >= pos + 9 {
        let h = &bytes[pos..pos + 9];
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        out.push((h[3], h[4], stream));
        pos += 9 + len;
    }
    out
}

/// What the HTTP/2 server saw on one connection.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub early_bytes: usize,
    /// Each request as `METHOD /path early=BOOL`.
    pub requests: Vec<String>,
}

/// An HTTP/2 server (hyper) over [`EarlyDataStream`]: it answers `METHOD /path` with a
/// body of that text plus the request body's length, and records what it saw. The TLS
/// configuration of each new connection is `configs[i]` (the last one for the rest).
pub struct H2Server {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl H2Server {
    pub async fn start(configs: Vec<ServerConfig>) -> H2Server {
        let (listener, addr) = loopback_listener().await;
        let acceptors: Vec<TlsAcceptor> = configs
            .into_iter()
            .map(|c| TlsAcceptor::from(Arc::new(c)))
            .collect();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut index = 0;
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptors[index.min(acceptors.len() - 1)].clone();
                index += 1;
                let log = log.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let stream = EarlyDataStream::new(tls);
                    let early = stream.early_requests();
                    let slot = {
                        let mut log = log.lock().unwrap();
                        log.push(Seen {
                            early_bytes: stream.early_bytes(),
                            requests: Vec::new(),
                        });
                        log.len() - 1
                    };
                    let service = hyper::service::service_fn(
                        move |mut request: Request<hyper::body::Incoming>| {
                            let marked = early.mark(&mut request);
                            let line = format!(
                                "{} {} early={marked}",
                                request.method(),
                                request.uri().path()
                            );
                            log.lock().unwrap()[slot].requests.push(line.clone());
                            async move {
                                let body = request.into_body().collect().await?.to_bytes();
                                let text = format!("{line} body={}", body.len());
                                Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(text))))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        H2Server { addr, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// An infallible body for requests.
pub fn body(bytes: &'static [u8]) -> Full<Bytes> {
    Full::new(Bytes::from_static(bytes))
}

/// For `service_fn`s that cannot fail.
pub type Never = Infallible;
