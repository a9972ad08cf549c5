//! The client's first flight on the wire: hyper's HTTP/2 client through `FlushConnector`
//! sends preface, SETTINGS, WINDOW_UPDATE and the first request in one TLS record that
//! arrives in one TCP read, where stock tokio-rustls sends several records; and a
//! connection that sends no request is not held beyond the bound.
//!
//! A TCP proxy parses the TLS record headers the client sends; the server behind it
//! completes the handshake and only reads, so everything the client sends is its first
//! flight (there are no server SETTINGS to acknowledge).

mod client_support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client_support::*;
use http::{Request, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ServerConfig;
use tls_flush::client::{FirstFlightConfig, FlushConnector};
use tokio::net::TcpStream;

const HEADERS: u8 = 0x1;
const END_STREAM: u8 = 0x1;

/// What the silent server received must hold the whole first request.
fn assert_first_request(bytes: &[u8]) {
    let frames = frames(bytes);
    assert!(
        frames
            .iter()
            .any(|&(kind, flags, id)| kind == HEADERS && id == 1 && flags & END_STREAM != 0),
        "no complete first request in {frames:?}"
    );
}

#[tokio::test]
async fn connector_first_flight_is_one_record_in_one_read_stock_is_not() {
    // Through FlushConnector and hyper-util's legacy client.
    let (server, client) = tls_pair(0);
    let mut silent = Silent::start(server.clone(), Duration::from_millis(300)).await;
    let proxy = Proxy::start(silent.addr).await;
    // A 50 ms hold rather than the default 2 ms: a loaded CI machine must not make the
    // request miss it (hyper takes well under 1 ms here).
    let connector = FlushConnector::new(Arc::new(client.clone()))
        .first_flight(FirstFlightConfig::default().hold(Duration::from_millis(50)));
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let uri: Uri = format!("https://127.0.0.1:{}/first", proxy.addr.port())
        .parse()
        .unwrap();
    // Never answered: the server is silent.
    let pending = tokio::spawn(async move { http.get(uri).await });
    let (_, bytes) = within("silent server", silent.seen.recv()).await.unwrap();
    pending.abort();
    assert_first_request(&bytes);
    let encrypted = proxy.encrypted();
    println!("coalesced: client's encrypted records {encrypted:?}");
    assert_eq!(
        encrypted.len(),
        2,
        "the client's Finished, then one record for the whole first flight: {encrypted:?}"
    );
    let flight = encrypted[1];
    assert_eq!(flight.len, bytes.len() + 17, "the record holds all of it");
    assert_eq!(
        flight.first_read, flight.last_read,
        "it arrived in one TCP read"
    );

    // Stock: tokio-rustls under hyper's HTTP/2 client, the same request.
    let mut silent = Silent::start(server, Duration::from_millis(300)).await;
    let proxy = Proxy::start(silent.addr).await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let tls = connect_as_localhost(Arc::new(client), tcp).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = Request::get("https://localhost/first")
        .body(Full::<Bytes>::default())
        .unwrap();
    let pending = tokio::spawn(async move { sender.send_request(request).await });
    let (_, bytes) = within("silent server", silent.seen.recv()).await.unwrap();
    pending.abort();
    assert_first_request(&bytes);
    let encrypted = proxy.encrypted();
    println!("stock: client's encrypted records {encrypted:?}");
    assert!(
        encrypted.len() > 2,
        "stock sends the first flight in more than one record: {encrypted:?}"
    );
}

/// A connection through `connector` to a fresh [`Silent`] server (listening for `listen`)
/// on which hyper's HTTP/2 client sends no request: how long after the handshake the
/// client's preface arrived there, and everything the server received. The client is kept
/// until the server has reported, so that closing it cannot be what released the bytes.
async fn lone_handshake(
    connector: FlushConnector,
    server: ServerConfig,
    listen: Duration,
) -> (Duration, Vec<u8>) {
    let mut silent = Silent::start(server, listen).await;
    let stream = connector
        .connect_addr(silent.addr, localhost())
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let seen = within("silent server", silent.seen.recv()).await.unwrap();
    drop(sender);
    seen
}

#[tokio::test]
async fn a_lone_handshake_is_held_no_longer_than_the_bound() {
    let (server, client) = tls_pair(0);
    let client = Arc::new(client);

    // Default bound (2 ms): the preface and SETTINGS leave at once without a request.
    let connector = FlushConnector::new(client.clone());
    let (preface_after, bytes) =
        lone_handshake(connector, server.clone(), Duration::from_millis(300)).await;
    println!("default bound: preface {preface_after:?} after the handshake");
    assert!(
        preface_after < Duration::from_millis(100),
        "{preface_after:?}"
    );
    assert!(frames(&bytes).iter().all(|&(kind, _, _)| kind != HEADERS));

    // A 150 ms bound: the same bytes wait for it, which shows the timer releases them.
    let connector = FlushConnector::new(client)
        .first_flight(FirstFlightConfig::default().hold(Duration::from_millis(150)));
    let (preface_after, _) = lone_handshake(connector, server, Duration::from_millis(500)).await;
    println!("150 ms bound: preface {preface_after:?} after the handshake");
    assert!(
        preface_after >= Duration::from_millis(100) && preface_after < Duration::from_secs(2),
        "{preface_after:?}"
    );
}
