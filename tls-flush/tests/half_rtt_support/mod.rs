//! Shared pieces of the 0.5-RTT tests (`tests/half_rtt*.rs`): a raw rustls client that
//! writes its first flight (ClientHello and early data) itself and can hold back its second
//! flight (EndOfEarlyData, Finished), HTTP/1.1 requests and response parsing, and an app
//! that records which requests were early.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::routing::{get, post};
use rustls::{ClientConfig, ClientConnection, ServerConfig};
use tls_flush::EarlyData;
use tls_flush_testkit::tls::{config_pair, connect_as_localhost, localhost};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on every wait that should succeed.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a response that must not come is waited for.
pub const QUIET: Duration = Duration::from_millis(500);
pub const EARLY: u32 = 16 * 1024;

/// TLS 1.3 only, no ALPN (the requests are HTTP/1.1, which hyper's auto builder detects),
/// early data enabled on the client; the server's `max_early_data_size` is left at 0 (the
/// 0.5-RTT mode sets its own).
pub fn tls() -> (ServerConfig, ClientConfig) {
    let (server, mut client) = config_pair(&["localhost"], &[&rustls::version::TLS13]);
    client.enable_early_data = true;
    (server, client)
}

/// What the app saw: GETs with whether they were early, POSTs run.
#[derive(Default)]
pub struct Seen {
    pub gets: Mutex<Vec<bool>>,
    pub posts: AtomicUsize,
}

/// `GET /get` answers `early=BOOL` and records it, `POST /post` counts its runs.
pub fn app(seen: &Arc<Seen>) -> axum::Router {
    let (gets, posts) = (seen.clone(), seen.clone());
    axum::Router::new()
        .route(
            "/get",
            get(move |request: Request| async move {
                let early = request.extensions().get::<EarlyData>().is_some();
                gets.gets.lock().unwrap().push(early);
                format!("early={early}")
            }),
        )
        .route(
            "/post",
            post(move |request: Request| async move {
                posts.posts.fetch_add(1, Ordering::SeqCst);
                let early = request.extensions().get::<EarlyData>().is_some();
                format!("posted early={early}")
            }),
        )
}

pub fn request(method: &str, path: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n").into_bytes()
}

/// The body of a complete HTTP/1.1 response in `bytes`, with its status line.
pub fn response(bytes: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })?
        .trim()
        .parse()
        .ok()?;
    let status = head.lines().next()?.to_owned();
    (body.len() >= length).then(|| (status, body[..length].to_owned()))
}

/// A full handshake and one GET, so that the client holds tickets (with early data when the
/// server allows it).
pub async fn get_tickets(client: &Arc<ClientConfig>, addr: SocketAddr) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio::time::timeout(TIMEOUT, connect_as_localhost(client.clone(), tcp))
        .await
        .unwrap()
        .unwrap();
    tls.write_all(&request("GET", "/get")).await.unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    while response(&bytes).is_none() {
        let n = tokio::time::timeout(TIMEOUT, tls.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before the response");
        bytes.extend_from_slice(&buf[..n]);
    }
}

/// A client that writes TLS itself: its first flight is kept, its later flights are sent
/// only when asked.
pub struct RawClient {
    pub tcp: TcpStream,
    pub conn: ClientConnection,
    pub plaintext: Vec<u8>,
}

impl RawClient {
    /// A new connection resuming with `client`'s ticket: `early` as early data (asserts that
    /// the ticket allows it). Returns the client and its first flight, as sent.
    pub async fn connect_early(
        client: &Arc<ClientConfig>,
        addr: SocketAddr,
        early: &[u8],
    ) -> (RawClient, Vec<u8>) {
        let mut conn = ClientConnection::new(client.clone(), localhost()).unwrap();
        conn.early_data()
            .expect("the ticket allows early data")
            .write_all(early)
            .unwrap();
        let mut flight = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut flight).unwrap();
        }
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&flight).await.unwrap();
        let raw = RawClient {
            tcp,
            conn,
            plaintext: Vec::new(),
        };
        (raw, flight)
    }

    /// Reads and processes what the server sends (without writing anything) until a
    /// complete response has been decrypted, or `wait` passes without one.
    pub async fn read_response(&mut self, wait: Duration) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(done) = response(&self.plaintext) {
                return Some(done);
            }
            let n = match tokio::time::timeout_at(deadline, self.tcp.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => n,
                _ => return None,
            };
            let mut input = &buf[..n];
            while !input.is_empty() {
                self.conn.read_tls(&mut input).unwrap();
                self.conn.process_new_packets().unwrap();
            }
            let mut chunk = [0u8; 4096];
            loop {
                match self.conn.reader().read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => self.plaintext.extend_from_slice(&chunk[..n]),
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(err) => panic!("{err}"),
                }
            }
        }
    }

    /// Sends what the client has to send: its EndOfEarlyData and Finished, once it has read
    /// the server's flight; then `data`, as application data.
    pub async fn send(&mut self, data: &[u8]) {
        if !data.is_empty() {
            self.conn.writer().write_all(data).unwrap();
        }
        let mut out = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut out).unwrap();
        }
        self.tcp.write_all(&out).await.unwrap();
    }
}

/// Sends `flight` on a new TCP connection and reads what the server answers until it
/// closes or `QUIET` passes.
pub async fn replay(addr: SocketAddr, flight: &[u8]) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(flight).await.unwrap();
    let mut buf = [0u8; 16 * 1024];
    while let Ok(Ok(n)) = tokio::time::timeout(QUIET, tcp.read(&mut buf)).await {
        if n == 0 {
            break;
        }
    }
}
