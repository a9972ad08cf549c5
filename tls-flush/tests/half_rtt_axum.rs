//! 0.5-RTT under `axum::serve` (`FlushListener::half_rtt` + `HalfRttMakeService`) and
//! axum-server (`FlushAcceptor::half_rtt`), with the raw client of `tests/half_rtt.rs`,
//! which holds back its Finished:
//! - an early GET is answered before the client's Finished and carries `EarlyData`; an
//!   early POST gets `425 Too Early` and its handler does not run;
//! - a 0.5-RTT listener served without `HalfRttMakeService` (no one to mark requests or
//!   apply the 425 rule) reads early data only after the handshake;
//! - without the opt-in, the listener's tickets allow no early data (today's behaviour).

mod half_rtt_support;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Extension;
use half_rtt_support::*;
use rustls::{ClientConnection, ServerConfig};
use tls_flush::{
    ConnectionInfo, ConnectionStats, FlushAcceptor, FlushConfig, FlushListener, HalfRttMakeService,
};
use tls_flush_testkit::tls::{localhost, loopback_listener};

/// A `FlushListener` on a loopback port with `config`.
async fn plain_listener(config: ServerConfig) -> (SocketAddr, FlushListener) {
    let (tcp, addr) = loopback_listener().await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    (
        addr,
        FlushListener::new(tcp, acceptor, FlushConfig::default()),
    )
}

/// [`plain_listener`] opted in to 0.5-RTT (asserting that early data is not refused).
async fn half_rtt_listener(
    config: ServerConfig,
) -> (SocketAddr, FlushListener<tls_flush::HalfRttAcceptor>) {
    let (addr, listener) = plain_listener(config).await;
    let listener = listener.half_rtt(EARLY);
    assert_eq!(listener.early_data_refusal(), None);
    (addr, listener)
}

/// The test app plus `/peer`, which answers from `ConnectInfo<ConnectionInfo>`.
fn app_with_peer(seen: &Arc<Seen>) -> axum::Router {
    app(seen).route(
        "/peer",
        get(
            |ConnectInfo(info): ConnectInfo<ConnectionInfo>| async move {
                format!("peer={}", info.remote_addr().ip())
            },
        ),
    )
}

#[tokio::test]
async fn listener_answers_early_gets_at_half_rtt_and_refuses_early_posts() {
    let (server_config, client) = tls();
    let client = Arc::new(client);
    let (addr, listener) = half_rtt_listener(server_config).await;
    let seen = Arc::new(Seen::default());
    let app = app_with_peer(&seen).into_make_service_with_connect_info::<ConnectionInfo>();
    tokio::spawn(axum::serve(listener, HalfRttMakeService::new(app)).into_future());
    get_tickets(&client, addr).await;

    // After the handshake the same connection goes on; `ConnectInfo<ConnectionInfo>`
    // works on this listener.
    early_get_answered_then(&client, addr, "/peer", "peer=127.0.0.1").await;
    early_post_refused(&client, addr, &seen).await;
}

/// An early GET is answered while the client holds its Finished back and carries
/// `EarlyData`; after the handshake the connection serves `then` with `body`.
async fn early_get_answered_then(
    client: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    then: &str,
    body: &str,
) {
    let (mut raw, _) = RawClient::connect_early(client, addr, &request("GET", "/get")).await;
    assert_eq!(
        raw.read_response(TIMEOUT).await,
        Some(("HTTP/1.1 200 OK".to_owned(), "early=true".to_owned()))
    );
    assert!(
        raw.conn.wants_write(),
        "the client has not sent its Finished"
    );
    raw.send(&request("GET", then)).await;
    raw.plaintext.clear();
    assert_eq!(
        raw.read_response(TIMEOUT).await,
        Some(("HTTP/1.1 200 OK".to_owned(), body.to_owned()))
    );
    assert!(raw.conn.is_early_data_accepted());
}

/// An early POST gets 425 before the client's Finished, and its handler never runs (after
/// [`early_get_answered_then`]: one GET before the tickets, one early).
async fn early_post_refused(client: &Arc<rustls::ClientConfig>, addr: SocketAddr, seen: &Seen) {
    let (mut raw, _) = RawClient::connect_early(client, addr, &request("POST", "/post")).await;
    let (status, _) = raw.read_response(TIMEOUT).await.unwrap();
    assert_eq!(status, "HTTP/1.1 425 Too Early");
    assert!(
        raw.conn.wants_write(),
        "the client has not sent its Finished"
    );
    raw.send(b"").await;
    assert_eq!(seen.posts.load(Ordering::SeqCst), 0);
    assert_eq!(*seen.gets.lock().unwrap(), vec![false, true]);
}

#[tokio::test]
async fn listener_without_make_service_reads_early_data_after_the_handshake() {
    let (server_config, client) = tls();
    let client = Arc::new(client);
    let (addr, listener) = half_rtt_listener(server_config).await;
    let seen = Arc::new(Seen::default());
    // The app as a plain `axum::serve` user would pass it: nothing marks early requests.
    tokio::spawn(axum::serve(listener, app(&seen)).into_future());
    get_tickets(&client, addr).await;

    let (mut raw, _) = RawClient::connect_early(&client, addr, &request("POST", "/post")).await;
    assert_eq!(
        raw.read_response(QUIET).await,
        None,
        "nothing before the Finished"
    );
    assert_eq!(
        seen.posts.load(Ordering::SeqCst),
        0,
        "not run before it either"
    );
    // As on tokio-rustls' path: served once the handshake has completed (a replay could
    // not complete it).
    raw.send(b"").await;
    assert_eq!(
        raw.read_response(TIMEOUT).await,
        Some((
            "HTTP/1.1 200 OK".to_owned(),
            "posted early=false".to_owned()
        ))
    );
    assert!(raw.conn.is_early_data_accepted());
    assert_eq!(seen.posts.load(Ordering::SeqCst), 1);
}

/// Also where the configuration given to the plain listener accepts early data: tokio-rustls
/// would accept it and drop it, losing the request.
#[tokio::test]
async fn listener_without_opt_in_offers_no_early_data() {
    for max_early_data_size in [0, EARLY] {
        let (mut server_config, client) = tls();
        server_config.max_early_data_size = max_early_data_size;
        let client = Arc::new(client);
        let (addr, listener) = plain_listener(server_config).await;
        let seen = Arc::new(Seen::default());
        tokio::spawn(axum::serve(listener, app(&seen)).into_future());
        get_tickets(&client, addr).await;
        // The client resumes, but its ticket allows no early data.
        let mut conn = ClientConnection::new(client, localhost()).unwrap();
        assert!(conn.early_data().is_none(), "{max_early_data_size}");
        assert_eq!(*seen.gets.lock().unwrap(), vec![false]);
    }
}

#[tokio::test]
async fn acceptor_answers_early_gets_at_half_rtt_and_refuses_early_posts() {
    let (server_config, client) = tls();
    let client = Arc::new(client);
    let (tcp, addr) = loopback_listener().await;
    let tcp = tcp.into_std().unwrap();
    let seen = Arc::new(Seen::default());
    let app = app(&seen).route(
        "/stats",
        get(|Extension(stats): Extension<ConnectionStats>| async move {
            format!("read={}", stats.snapshot().bytes_read > 0)
        }),
    );
    let acceptor = FlushAcceptor::half_rtt(Arc::new(server_config), EARLY, FlushConfig::default());
    assert_eq!(acceptor.get_ref().refusal(), None);
    let server = axum_server::from_tcp(tcp)
        .unwrap()
        .acceptor(acceptor)
        .serve(app.into_make_service());
    tokio::spawn(server);
    get_tickets(&client, addr).await;
    // The connection is a `FlushStream`: its counters reach the handlers.
    early_get_answered_then(&client, addr, "/stats", "read=true").await;
    early_post_refused(&client, addr, &seen).await;
}
