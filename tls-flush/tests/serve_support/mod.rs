//! Shared pieces of the `tls_flush::serve` tests: a TLS acceptor and a client configuration
//! trusting only its certificate (made by the testkit's `tls`, which the client tests use
//! too), an HTTP/2 client over tokio-rustls (its handshake, body readers and timeouts are
//! the testkit's `h2_client`, which the example servers' tests use too), the test app, and
//! body checks.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::{Extension, Router};
use bytes::Bytes;
use http::{Request, StatusCode};
use rustls::ClientConfig;
use tls_flush::{ConnectionStats, FlushConfig};
use tls_flush_testkit::tls::{config_pair, connect_as_localhost, ALPN_H2, ALPN_HTTP_1_1};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

// Each test binary uses some of them.
#[allow(unused_imports)]
pub use tls_flush_testkit::h2_client::{h2_handshake, read_all, read_unreleased, within, TIMEOUT};
#[allow(unused_imports)]
pub use tls_flush_testkit::tls::loopback_listener;

/// Length of `/big`.
pub const BIG_LEN: usize = 1 << 20;
/// `/trickle`: this many chunks of [`TRICKLE_CHUNK`] bytes, one every [`TRICKLE_EVERY`].
pub const TRICKLE_CHUNKS: usize = 30;
/// Size of one `/trickle` chunk.
pub const TRICKLE_CHUNK: usize = 1000;
/// Pause before each `/trickle` chunk.
pub const TRICKLE_EVERY: Duration = Duration::from_millis(50);

/// The byte at offset `i` of every test body.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A server acceptor (ALPN `h2`, `http/1.1`; rustls' default protocol versions) with a
/// fresh self-signed certificate for `localhost`, and a client configuration trusting only
/// that certificate and offering `h2`.
pub fn tls_pair() -> (TlsAcceptor, Arc<ClientConfig>) {
    let (mut server, mut client) = config_pair(&["localhost"], rustls::DEFAULT_VERSIONS);
    server.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP_1_1.to_vec()];
    client.alpn_protocols = vec![ALPN_H2.to_vec()];
    (TlsAcceptor::from(Arc::new(server)), Arc::new(client))
}

/// `tls_flush::serve` of [`app`], running on its own task.
pub struct Running {
    pub addr: SocketAddr,
    /// A client configuration trusting the server's certificate.
    pub client: Arc<ClientConfig>,
    /// Sending (or dropping) it starts the server's graceful shutdown.
    stop: Option<oneshot::Sender<()>>,
    /// Resolves with what the `serve` future returned.
    pub task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Fires the graceful shutdown signal.
    pub fn stop(&mut self) {
        let stop = self.stop.take().expect("stopped once");
        stop.send(()).expect("the server is running");
    }

    /// What the `serve` future returned, awaited within the test bound.
    pub async fn finished(self) -> std::io::Result<()> {
        within("serve future", self.task).await.expect("serve task")
    }
}

/// Starts `tls_flush::serve` of [`app`] (default `FlushConfig`, a fresh certificate, a
/// free port of 127.0.0.1) after `configure` set its options, with a graceful shutdown on
/// [`Running::stop`].
pub async fn start(
    configure: impl FnOnce(tls_flush::Serve<Router>) -> tls_flush::Serve<Router>,
) -> Running {
    let (acceptor, client) = tls_pair();
    let (listener, addr) = loopback_listener().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = configure(tls_flush::serve(
        listener,
        acceptor,
        FlushConfig::default(),
        app(),
    ));
    let task = tokio::spawn(
        server
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    Running {
        addr,
        client,
        stop: Some(stop),
        task,
    }
}

/// The test app:
/// - `/small`: `ok`;
/// - `/big`: [`BIG_LEN`] pattern bytes;
/// - `/trickle`: [`TRICKLE_CHUNKS`] × [`TRICKLE_CHUNK`] pattern bytes, one chunk every
///   [`TRICKLE_EVERY`];
/// - `/stats`: `bytes_written` of the connection's `ConnectionStats`, read from the
///   request extensions;
/// - `/task`: the id of the tokio task the handler runs on, after a yield (so that the
///   requests sent together are in their handlers at once);
/// - `/panic`: a handler that panics.
pub fn app() -> Router {
    Router::new()
        .route("/small", get(|| async { "ok" }))
        .route("/big", get(|| async { Bytes::from(pattern(BIG_LEN)) }))
        .route(
            "/trickle",
            get(|| async {
                let all = Bytes::from(pattern(TRICKLE_CHUNKS * TRICKLE_CHUNK));
                let chunks = futures_util::stream::unfold(0usize, move |i| {
                    let all = all.clone();
                    async move {
                        if i == TRICKLE_CHUNKS {
                            return None;
                        }
                        tokio::time::sleep(TRICKLE_EVERY).await;
                        let chunk = all.slice(i * TRICKLE_CHUNK..(i + 1) * TRICKLE_CHUNK);
                        Some((Ok::<_, Infallible>(chunk), i + 1))
                    }
                });
                Body::from_stream(chunks)
            }),
        )
        .route(
            "/stats",
            get(|Extension(stats): Extension<ConnectionStats>| async move {
                stats.snapshot().bytes_written.to_string()
            }),
        )
        .route(
            "/task",
            get(|| async {
                tokio::task::yield_now().await;
                tokio::task::try_id().map_or_else(|| "none".to_owned(), |id| id.to_string())
            }),
        )
        .route(
            "/panic",
            get(|| async {
                if std::hint::black_box(true) {
                    panic!("a handler's bug");
                }
                "unreachable"
            }),
        )
}

/// An HTTP/2 client connection; `connection` ends when the server closes it.
pub struct H2Client {
    pub send: h2::client::SendRequest<Bytes>,
    pub connection: JoinHandle<Result<(), h2::Error>>,
}

/// TCP connect, TLS handshake as `localhost`, HTTP/2 handshake. With `window`, the stream
/// and connection windows stay at that size (capacity is released only by the caller);
/// without, they are large.
pub async fn h2_connect(
    addr: SocketAddr,
    client: Arc<ClientConfig>,
    window: Option<u32>,
) -> H2Client {
    let tcp = within("TCP connect", TcpStream::connect(addr))
        .await
        .expect("TCP connect");
    h2_over(tcp, client, window).await
}

/// [`h2_connect`] over an already connected TCP stream.
pub async fn h2_over(tcp: TcpStream, client: Arc<ClientConfig>, window: Option<u32>) -> H2Client {
    let tls = within("TLS handshake", connect_as_localhost(client, tcp))
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(ALPN_H2), "ALPN");
    let (send, connection) = h2_handshake(tls, window).await;
    H2Client {
        send,
        connection: tokio::spawn(connection),
    }
}

impl H2Client {
    /// Sends `GET path` once the connection can take a stream; the response, still to come.
    pub async fn send(&mut self, path: &str) -> h2::client::ResponseFuture {
        let mut send = within("h2 ready", self.send.clone().ready())
            .await
            .expect("h2 ready");
        let req = Request::get(format!("https://localhost{path}"))
            .body(())
            .unwrap();
        let (res, _) = send.send_request(req, true).expect("send_request");
        res
    }

    /// Sends `GET path`; the response head, body not read.
    pub async fn request(&mut self, path: &str) -> http::Response<h2::RecvStream> {
        let res = self.send(path).await;
        within("h2 response", res).await.expect("h2 response")
    }

    /// `GET path`, the whole body read.
    pub async fn get(&mut self, path: &str) -> (StatusCode, Vec<u8>) {
        let res = self.request(path).await;
        let status = res.status();
        (status, body_of(res).await)
    }
}

/// The whole body of `res`, read within the test bound.
pub async fn body_of(res: http::Response<h2::RecvStream>) -> Vec<u8> {
    let mut body = res.into_body();
    within("h2 body", read_all(&mut body, usize::MAX)).await
}

/// Asserts that `body` is exactly the first `len` pattern bytes, naming the first wrong
/// offset otherwise.
pub fn assert_pattern(body: &[u8], len: usize, what: &str) {
    let expected = pattern(len);
    if body != expected.as_slice() {
        let first_bad = body
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(body.len().min(len));
        panic!(
            "{what}: {} bytes, expected {len}; first difference at offset {first_bad}",
            body.len()
        );
    }
}
