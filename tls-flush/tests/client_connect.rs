//! How the connectors reach a server: a dead first address (refused, or blackholed) gives
//! way to the next one, within a family and across families (happy eyeballs); the connect
//! timeout and the TLS handshake timeout fail with `TimedOut`; and h2c by prior knowledge
//! carries real requests, its first flight in one TCP segment.
//!
//! A blackholed address without a network: a loopback listener whose accept queue is full,
//! so that Linux drops the SYNs of further connects (the client retransmits them and waits).
//! Names are resolved by injected resolvers, except `localhost` through getaddrinfo.

mod client_support;

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client_support::*;
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tls_flush::client::{FirstFlightConfig, FlushConnector, H2cConnector};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Short enough for a test, long enough for a loopback connect on a loaded machine.
const SHORT: Duration = Duration::from_millis(400);

/// A loopback address that never answers a connect: a listener with a full accept queue.
struct Blackhole {
    addr: SocketAddr,
    _listener: TcpListener,
    _queued: Vec<TcpStream>,
}

/// `None` when `ip` cannot be bound (no IPv6 loopback here).
async fn blackhole(ip: IpAddr) -> Option<Blackhole> {
    let socket = match ip {
        IpAddr::V4(_) => TcpSocket::new_v4(),
        IpAddr::V6(_) => TcpSocket::new_v6(),
    }
    .ok()?;
    socket.bind(SocketAddr::new(ip, 0)).ok()?;
    // Backlog 0: the accept queue holds one connection; Linux drops SYNs beyond it.
    let listener = socket.listen(0).ok()?;
    let addr = listener.local_addr().ok()?;
    let mut queued = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(SHORT, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => queued.push(tcp),
            Ok(Err(e)) => panic!("connect to the filling listener: {e}"),
            // This SYN was dropped: the queue is full.
            Err(_) => {
                return Some(Blackhole {
                    addr,
                    _listener: listener,
                    _queued: queued,
                })
            }
        }
    }
    panic!("the accept queue of {addr} never filled");
}

/// A loopback port nobody listens on: connects are refused at once.
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    listener.local_addr().unwrap()
}

/// A resolver that answers every name with `addrs`, in that order.
fn resolver(
    addrs: Vec<SocketAddr>,
) -> impl tower::Service<
    Name,
    Response = std::vec::IntoIter<SocketAddr>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + Sync
       + 'static {
    tower::service_fn(move |_: Name| {
        let addrs = addrs.clone();
        async move { Ok(addrs.into_iter()) }
    })
}

/// An h2c server (hyper, HTTP/2 only, over plain TCP) answering `h2c METHOD /path`. It
/// sends, per connection, what the first TCP read brought.
async fn h2c_server() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                // What arrived first, left in the socket for hyper.
                tcp.readable().await.unwrap();
                let mut first = vec![0; 64 * 1024];
                let n = tcp.peek(&mut first).await.unwrap();
                first.truncate(n);
                let _ = tx.send(first);
                let service = hyper::service::service_fn(|request: Request<_>| async move {
                    let text = format!("h2c {} {}", request.method(), request.uri().path());
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (addr, rx)
}

async fn text(response: Response<hyper::body::Incoming>) -> String {
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.version(), Version::HTTP_2);
    let body = within("body", response.into_body().collect()).await;
    String::from_utf8(body.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn a_blackholed_address_times_out() {
    let hole = blackhole(Ipv4Addr::LOCALHOST.into()).await.unwrap();
    let h2c = H2cConnector::new().connect_timeout(SHORT);
    let literal: Uri = format!("http://{}/", hole.addr).parse().unwrap();
    let e = within("h2c", h2c.connect(&literal)).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");

    // Through a resolver, and through the TLS connector.
    let named: Uri = "https://origin.test/".parse().unwrap();
    let (_, client) = tls_pair(0);
    let tls = FlushConnector::new(Arc::new(client))
        .connect_timeout(SHORT)
        .resolver(resolver(vec![hole.addr]));
    let e = within("tls", tls.connect(&named)).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
}

#[tokio::test]
async fn a_silent_server_fails_the_handshake_with_timed_out() {
    // Accepts, then neither reads nor writes: no ServerHello ever comes.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move { listener.accept().await });
    let (_, client) = tls_pair(0);
    let connector = FlushConnector::new(Arc::new(client)).handshake_timeout(SHORT);
    let e = within("handshake", connector.connect_addr(addr, localhost()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("TLS handshake"), "{e}");
    held.abort();
}

#[tokio::test]
async fn a_dead_first_address_gives_way_to_the_next() {
    let (server, _first_reads) = h2c_server().await;
    let hole = blackhole(Ipv4Addr::LOCALHOST.into()).await.unwrap();
    // No port in the URIs: the resolver's ports count.
    let uri: Uri = "http://origin.test/".parse().unwrap();

    // Refused: the next address at once.
    let h2c = H2cConnector::new().resolver(resolver(vec![closed_port().await, server]));
    let stream = within("refused first", h2c.connect(&uri)).await.unwrap();
    assert_eq!(stream.get_ref().peer_addr().unwrap(), server);

    // Blackholed, same family: the next address after its share of the connect timeout
    // (half of it, of two addresses).
    let h2c = H2cConnector::new()
        .connect_timeout(4 * SHORT)
        .resolver(resolver(vec![hole.addr, server]));
    let stream = within("blackholed first", h2c.connect(&uri)).await.unwrap();
    assert_eq!(stream.get_ref().peer_addr().unwrap(), server);
}

#[tokio::test]
async fn happy_eyeballs_tries_the_other_family_while_the_first_hangs() {
    let Some(hole) = blackhole(Ipv6Addr::LOCALHOST.into()).await else {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    };
    let (server, _first_reads) = h2c_server().await;
    let uri: Uri = "http://origin.test/".parse().unwrap();
    // No connect timeout: the IPv6 attempt alone would wait for minutes (within() fails
    // after 10 s); only the IPv4 attempt started after the delay can win.
    let h2c = H2cConnector::new()
        .connect_timeout(None)
        .happy_eyeballs_delay(Duration::from_millis(50))
        .resolver(resolver(vec![hole.addr, server]));
    let stream = within("happy eyeballs", h2c.connect(&uri)).await.unwrap();
    assert_eq!(stream.get_ref().peer_addr().unwrap(), server);
}

#[tokio::test]
async fn localhost_resolves_through_getaddrinfo() {
    let (server, _first_reads) = h2c_server().await;
    let uri: Uri = format!("http://localhost:{}/", server.port())
        .parse()
        .unwrap();
    // Whatever getaddrinfo lists first (::1 is refused here), 127.0.0.1 answers.
    let stream = within("localhost", H2cConnector::new().connect(&uri))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().peer_addr().unwrap(), server);
}

#[tokio::test]
async fn h2c_serves_requests_through_the_legacy_client_and_the_handshake() {
    let (server, mut first_reads) = h2c_server().await;
    // 50 ms rather than 2 ms: a loaded machine must not make the request miss the hold.
    let connector = H2cConnector::new()
        .first_flight(FirstFlightConfig::default().hold(Duration::from_millis(50)));

    // hyper-util's client: the connection says HTTP/2, so it speaks HTTP/2.
    let client: Client<_, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector.clone());
    let uri: Uri = format!("http://{server}/pooled").parse().unwrap();
    let response = within("legacy client", client.get(uri)).await.unwrap();
    assert_eq!(text(response).await, "h2c GET /pooled");
    // The first TCP read held the whole first flight: preface, SETTINGS and the request.
    let first = within("first read", first_reads.recv()).await.unwrap();
    let frames = frames(&first);
    assert!(
        frames
            .iter()
            .any(|&(kind, flags, id)| kind == 0x1 && id == 1 && flags & 0x1 != 0),
        "no complete first request in the first read: {frames:?}"
    );

    // hyper's connection handshake over `connect`.
    let uri: Uri = format!("http://{server}/direct").parse().unwrap();
    let stream = within("connect", connector.connect(&uri)).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = Request::post(uri).body(Empty::<Bytes>::new()).unwrap();
    let response = within("direct", sender.send_request(request))
        .await
        .unwrap();
    assert_eq!(text(response).await, "h2c POST /direct");

    // https URIs are not for it.
    let e = connector
        .connect(&"https://localhost/".parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn tls_connector_falls_through_to_a_working_address() {
    let (server, client) = tls_pair(0);
    let h2 = H2Server::start(vec![server]).await;
    let connector = FlushConnector::new(Arc::new(client))
        .resolver(resolver(vec![closed_port().await, h2.addr]));
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let response = within(
        "request",
        http.get("https://localhost/fallback".parse().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(text(response).await, "GET /fallback early=false body=0");
}
