//! 0.5-RTT (`serve` with `EarlyDataMode::HalfRtt`) over real sockets, with a raw rustls
//! client that writes its first flight (ClientHello and early data) itself and can hold
//! back its second flight (EndOfEarlyData, Finished):
//! - a request sent as early data is answered before the client sends its Finished (and
//!   not with `EarlyDataMode::AfterHandshake`, today's path, in the same test);
//! - a replayed first flight (the same bytes on a second TCP connection) reaches no
//!   handler: tickets are single use, so the replay gets a full handshake it cannot finish;
//! - with client certificate authentication configured, early data is refused and the
//!   request is served after the handshake.

mod half_rtt_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use half_rtt_support::*;
use rustls::server::{ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};
use tls_flush::{
    EarlyDataMode, EarlyDataRefusal, FlushConfig, HalfRttAcceptor, TooEarlyLayer,
    SESSION_ENTRY_BYTES,
};
use tls_flush_testkit::tls::loopback_listener;

/// `serve` on a loopback port with `mode` and `too_early`, serving [`app`].
async fn server(
    config: ServerConfig,
    mode: EarlyDataMode,
    too_early: TooEarlyLayer,
) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let app = app(&seen);
    let (listener, addr) = loopback_listener().await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let serve = tls_flush::serve(listener, acceptor, FlushConfig::default(), app)
        .early_data(mode)
        .too_early(too_early);
    tokio::spawn(async move { serve.await });
    (addr, seen)
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
