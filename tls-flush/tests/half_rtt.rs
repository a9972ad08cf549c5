//! 0.5-RTT (`serve` with `EarlyDataMode::HalfRtt`) over real sockets, with a raw rustls
//! client that writes its first flight (ClientHello and early data) itself and can hold
//! back its second flight (EndOfEarlyData, Finished):
//! - a request sent as early data is answered before the client sends its Finished (and
//!   not with `EarlyDataMode::AfterHandshake`, today's path, in the same test);
//! - a replayed first flight (the same bytes on a second TCP connection) reaches no
//!   handler: tickets are single use, so the replay gets a full handshake it cannot finish;
//! - with client certificate authentication configured, early data is refused and the
//!   request is served after the handshake.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::routing::{get, post};
use rustls::server::{ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig};
use tls_flush::{
    EarlyData, EarlyDataMode, EarlyDataRefusal, FlushConfig, HalfRttAcceptor, TooEarlyLayer,
    SESSION_ENTRY_BYTES,
};
use tls_flush_testkit::tls::{config_pair, connect_as_localhost, localhost, loopback_listener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on every wait that should succeed.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a response that must not come is waited for.
const QUIET: Duration = Duration::from_millis(500);
const EARLY: u32 = 16 * 1024;

/// TLS 1.3 only, no ALPN (the requests are HTTP/1.1, which hyper's auto builder detects),
/// early data enabled on the client; the server's `max_early_data_size` is left at 0 (the
/// 0.5-RTT mode sets its own).
fn tls() -> (ServerConfig, ClientConfig) {
    let (server, mut client) = config_pair(&["localhost"], &[&rustls::version::TLS13]);
    client.enable_early_data = true;
    (server, client)
}

/// What the app saw: GETs with whether they were early, POSTs run.
#[derive(Default)]
struct Seen {
    gets: Mutex<Vec<bool>>,
    posts: AtomicUsize,
}

/// `serve` on a loopback port with `mode` and `too_early`: `GET /get` answers
/// `early=BOOL`, `POST /post` counts its runs.
async fn server(
    config: ServerConfig,
    mode: EarlyDataMode,
    too_early: TooEarlyLayer,
) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let (gets, posts) = (seen.clone(), seen.clone());
    let app = axum::Router::new()
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
        );
    let (listener, addr) = loopback_listener().await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let serve = tls_flush::serve(listener, acceptor, FlushConfig::default(), app)
        .early_data(mode)
        .too_early(too_early);
    tokio::spawn(async move { serve.await });
    (addr, seen)
}

fn request(method: &str, path: &str) -> Vec<u8> {
    format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n").into_bytes()
}

/// The body of a complete HTTP/1.1 response in `bytes`, with its status line.
fn response(bytes: &[u8]) -> Option<(String, String)> {
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
async fn get_tickets(client: &Arc<ClientConfig>, addr: SocketAddr) {
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
struct RawClient {
    tcp: TcpStream,
    conn: ClientConnection,
    plaintext: Vec<u8>,
}

impl RawClient {
    /// A new connection resuming with `client`'s ticket: `early` as early data (asserts that
    /// the ticket allows it). Returns the client and its first flight, as sent.
    async fn connect_early(
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
    async fn read_response(&mut self, wait: Duration) -> Option<(String, String)> {
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
    async fn send(&mut self, data: &[u8]) {
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

#[tokio::test]
async fn early_request_is_answered_before_the_client_finished() {
    // 0.5-RTT: the whole response arrives while the client holds its Finished back.
    let (server_config, client) = tls();
    let client = Arc::new(client);
    let (addr, seen) = server(
        server_config.clone(),
        EarlyDataMode::half_rtt(),
        TooEarlyLayer::new(),
    )
    .await;
    get_tickets(&client, addr).await;
    let (mut raw, _) = RawClient::connect_early(&client, addr, &request("GET", "/get")).await;
    let answer = raw.read_response(TIMEOUT).await;
    assert_eq!(
        answer,
        Some(("HTTP/1.1 200 OK".to_owned(), "early=true".to_owned()))
    );
    // rustls' client considers its handshake done once its Finished is queued: it is
    // still here, unsent.
    assert!(
        raw.conn.wants_write(),
        "the client has not sent its Finished"
    );
    // The handshake then completes; the connection goes on. (Early bytes that are not
    // HTTP/2 mark every request of their connection, so this one is early too.)
    raw.send(&request("GET", "/get")).await;
    raw.plaintext.clear();
    assert_eq!(
        raw.read_response(TIMEOUT).await,
        Some(("HTTP/1.1 200 OK".to_owned(), "early=true".to_owned()))
    );
    assert!(raw.conn.is_early_data_accepted());
    assert_eq!(*seen.gets.lock().unwrap(), vec![false, true, true]);

    // Today's path (early data accepted by the rustls config, served after the
    // handshake): nothing before the Finished, the response after it.
    let mut after_config = server_config;
    after_config.max_early_data_size = EARLY;
    let (addr, seen) = server(
        after_config,
        EarlyDataMode::AfterHandshake,
        TooEarlyLayer::new(),
    )
    .await;
    get_tickets(&client, addr).await;
    let (mut raw, _) = RawClient::connect_early(&client, addr, &request("GET", "/get")).await;
    assert_eq!(
        raw.read_response(QUIET).await,
        None,
        "no response before the Finished"
    );
    raw.send(b"").await;
    assert_eq!(
        raw.read_response(TIMEOUT).await,
        Some(("HTTP/1.1 200 OK".to_owned(), "early=true".to_owned()))
    );
    assert!(raw.conn.is_early_data_accepted());
    assert_eq!(*seen.gets.lock().unwrap(), vec![false, true]);
}

/// rustls' memory cache, recording the largest entry put into it.
#[derive(Debug)]
struct Measured {
    inner: Arc<ServerSessionMemoryCache>,
    largest: AtomicUsize,
}

impl StoresServerSessions for Measured {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.largest
            .fetch_max(key.len() + value.len(), Ordering::SeqCst);
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.take(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}

/// Sends `flight` on a new TCP connection and reads what the server answers until it
/// closes or `QUIET` passes.
async fn replay(addr: SocketAddr, flight: &[u8]) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(flight).await.unwrap();
    let mut buf = [0u8; 16 * 1024];
    while let Ok(Ok(n)) = tokio::time::timeout(QUIET, tcp.read(&mut buf)).await {
        if n == 0 {
            break;
        }
    }
}

#[tokio::test]
async fn replayed_early_data_reaches_no_handler() {
    for too_early in [TooEarlyLayer::new(), TooEarlyLayer::any_method()] {
        let (mut server_config, client) = tls();
        let store = Arc::new(Measured {
            inner: ServerSessionMemoryCache::new(256),
            largest: AtomicUsize::new(0),
        });
        server_config.session_storage = store.clone();
        let client = Arc::new(client);
        let any_method = format!("{too_early:?}").contains("Any");
        let (addr, seen) = server(server_config, EarlyDataMode::half_rtt(), too_early).await;
        get_tickets(&client, addr).await;

        // A POST as early data: 425 by default; run once when every method is allowed.
        let (mut raw, post_flight) =
            RawClient::connect_early(&client, addr, &request("POST", "/post")).await;
        let (status, body) = raw.read_response(TIMEOUT).await.unwrap();
        if any_method {
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert_eq!(body, "posted early=true");
        } else {
            assert_eq!(status, "HTTP/1.1 425 Too Early");
        }
        raw.send(b"").await;
        let posts = usize::from(any_method);
        assert_eq!(seen.posts.load(Ordering::SeqCst), posts);

        // A GET as early data: served early once.
        let (mut raw, get_flight) =
            RawClient::connect_early(&client, addr, &request("GET", "/get")).await;
        let answer = raw.read_response(TIMEOUT).await.unwrap();
        assert_eq!(answer.1, "early=true");
        raw.send(b"").await;

        // The same first flights again, twice each, byte for byte: the tickets were taken,
        // the replays get full handshakes they cannot finish, no handler runs.
        for _ in 0..2 {
            replay(addr, &post_flight).await;
            replay(addr, &get_flight).await;
        }
        assert_eq!(
            seen.posts.load(Ordering::SeqCst),
            posts,
            "POST ran at most once"
        );
        assert_eq!(
            *seen.gets.lock().unwrap(),
            vec![false, true],
            "the replayed GET never reached the app"
        );

        // The anti-replay state: one cache entry per ticket, of this many bytes.
        let largest = store.largest.load(Ordering::SeqCst);
        assert_eq!(largest, SESSION_ENTRY_BYTES);
    }
}

/// A client certificate verifier that offers client authentication but lets clients
/// without a certificate in (the refusal is about the offer).
fn optional_client_auth(server: &mut ServerConfig) {
    let ca = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .allow_unauthenticated()
    .build()
    .unwrap();
    let with_auth =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_client_cert_verifier(verifier);
    // The same certificate (its resolver) and session store as `server`.
    let mut with_auth = with_auth.with_cert_resolver(server.cert_resolver.clone());
    with_auth.session_storage = server.session_storage.clone();
    *server = with_auth;
}

#[tokio::test]
async fn client_auth_refuses_early_data() {
    let (server_config, client) = tls();
    let mut with_auth = server_config.clone();
    optional_client_auth(&mut with_auth);
    let acceptor = HalfRttAcceptor::new(Arc::new(with_auth.clone()), EARLY);
    assert_eq!(acceptor.refusal(), Some(EarlyDataRefusal::ClientAuth));
    assert_eq!(acceptor.config().max_early_data_size, 0);
    assert!(!acceptor.config().send_half_rtt_data);

    // A ticket that allows early data, from a server without client authentication that
    // shares the session store; then the server with client authentication.
    let client = Arc::new(client);
    let (open_addr, _) = server(
        server_config,
        EarlyDataMode::half_rtt(),
        TooEarlyLayer::new(),
    )
    .await;
    get_tickets(&client, open_addr).await;
    let (addr, seen) = server(with_auth, EarlyDataMode::half_rtt(), TooEarlyLayer::new()).await;
    let (mut raw, _) = RawClient::connect_early(&client, addr, &request("GET", "/get")).await;
    assert_eq!(
        raw.read_response(QUIET).await,
        None,
        "nothing before the Finished"
    );
    assert!(!raw.conn.is_handshaking());
    assert!(!raw.conn.is_early_data_accepted(), "early data refused");
    // The client sends the request again after the handshake; it is served then.
    raw.send(&request("GET", "/get")).await;
    assert_eq!(
        raw.read_response(TIMEOUT).await,
        Some(("HTTP/1.1 200 OK".to_owned(), "early=false".to_owned()))
    );
    assert_eq!(*seen.gets.lock().unwrap(), vec![false]);
}

#[test]
fn refusals() {
    let (server, _) = tls();
    let ok = HalfRttAcceptor::new(Arc::new(server.clone()), EARLY);
    assert_eq!(ok.refusal(), None, "a config without client authentication");
    assert_eq!(ok.config().max_early_data_size, EARLY);
    assert!(ok.config().send_half_rtt_data);
    assert_eq!(
        HalfRttAcceptor::new(Arc::new(server.clone()), 0).refusal(),
        Some(EarlyDataRefusal::Disabled)
    );

    let mut stateless = server.clone();
    stateless.ticketer = rustls::crypto::ring::Ticketer::new().unwrap();
    assert_eq!(
        HalfRttAcceptor::new(Arc::new(stateless), EARLY).refusal(),
        Some(EarlyDataRefusal::StatelessTickets)
    );

    /// A store whose `take` leaves the session in place.
    #[derive(Debug)]
    struct Reusable(Arc<ServerSessionMemoryCache>);
    impl StoresServerSessions for Reusable {
        fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
            self.0.put(key, value)
        }
        fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
            self.0.get(key)
        }
        fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
            self.0.get(key)
        }
        fn can_cache(&self) -> bool {
            true
        }
    }
    let mut reusable = server.clone();
    reusable.session_storage = Arc::new(Reusable(ServerSessionMemoryCache::new(8)));
    assert_eq!(
        HalfRttAcceptor::new(Arc::new(reusable), EARLY).refusal(),
        Some(EarlyDataRefusal::ReusableSessions)
    );

    let mut none = server;
    none.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    assert_eq!(
        HalfRttAcceptor::new(Arc::new(none), EARLY).refusal(),
        Some(EarlyDataRefusal::NoSessionStore)
    );
}
