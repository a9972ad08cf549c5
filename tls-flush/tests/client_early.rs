//! TLS 1.3 early data end to end: on a resumed connection an idempotent first request goes
//! as early data (the server reads it from rustls' early data, marks it, and answers it);
//! a POST is not sent early; when the server rejects early data the request is delivered
//! exactly once; and `TooEarlyLayer` answers early non-idempotent requests with 425.

mod client_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use client_support::*;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::time::Duration;
use tls_flush::client::{FirstFlightConfig, FlushConnector};
use tls_flush::{EarlyData, TooEarlyLayer};
use tower::{Layer, ServiceExt};

const HANDSHAKE: u8 = 22;

/// The connector of these tests. The hold is 50 ms, not the default 2 ms, so that a loaded
/// CI machine cannot make a request miss it (hyper takes well under 1 ms here).
fn connector(client: rustls::ClientConfig) -> FlushConnector {
    FlushConnector::new(Arc::new(client))
        .first_flight(FirstFlightConfig::default().hold(Duration::from_millis(50)))
}

/// One request on a new connection through `connector` (the direct API and hyper's
/// HTTP/2 handshake); the response body as text.
async fn fetch(
    connector: &FlushConnector,
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: &'static [u8],
) -> String {
    let stream = connector.connect_addr(addr, localhost()).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .body(client_support::body(body))
        .unwrap();
    let response = within("response", sender.send_request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = within("body", response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// True when the client's first TCP read (at the proxy) held its ClientHello and an
/// encrypted record after it: data sent before the handshake, as early data.
fn sent_early(records: &[Record]) -> bool {
    records.first().is_some_and(|r| r.content_type == HANDSHAKE)
        && records
            .iter()
            .any(|r| r.content_type == APPLICATION_DATA && r.first_read == 0)
}

#[tokio::test]
async fn idempotent_first_request_goes_early_post_does_not() {
    let (server, client) = tls_pair(16 * 1024);
    let h2 = H2Server::start(vec![server]).await;
    let proxy = Proxy::start(h2.addr).await;
    let connector = connector(client);

    // A full handshake: the client gets its resumption tickets.
    let text = fetch(&connector, proxy.addr, Method::GET, "/one", b"").await;
    assert_eq!(text, "GET /one early=false body=0");
    assert!(!sent_early(&proxy.last()));

    // Resumed: the GET goes as early data with the ClientHello, in one TCP read.
    let text = fetch(&connector, proxy.addr, Method::GET, "/two", b"").await;
    assert_eq!(text, "GET /two early=true body=0");
    let records = proxy.last();
    assert!(sent_early(&records), "{records:?}");

    // Resumed too, but a POST: it waits for the handshake.
    let text = fetch(&connector, proxy.addr, Method::POST, "/three", b"abc").await;
    assert_eq!(text, "POST /three early=false body=3");
    let records = proxy.last();
    assert!(!sent_early(&records), "{records:?}");

    // And an OPTIONS goes early (the POST was a decision, not a missing ticket).
    let text = fetch(&connector, proxy.addr, Method::OPTIONS, "/four", b"").await;
    assert_eq!(text, "OPTIONS /four early=true body=0");
    assert!(sent_early(&proxy.last()));

    let seen = h2.seen();
    println!("{seen:?}");
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].early_bytes, 0);
    assert!(
        seen[1].early_bytes > 24,
        "the server read the request as early data"
    );
    assert_eq!(seen[1].requests, vec!["GET /two early=true"]);
    assert_eq!(seen[2].early_bytes, 0);
    assert_eq!(seen[2].requests, vec!["POST /three early=false"]);
    assert_eq!(seen[3].requests, vec!["OPTIONS /four early=true"]);
}

#[tokio::test]
async fn legacy_client_sends_early_on_a_new_resumed_connection() {
    let (server, client) = tls_pair(16 * 1024);
    let h2 = H2Server::start(vec![server]).await;
    // No pooling: every request is a new connection, the second one resumed.
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(
            connector(client).first_flight(
                tls_flush::client::FirstFlightConfig::default()
                    .hold(std::time::Duration::from_millis(50)),
            ),
        );
    let _ = tracing_subscriber::fmt()
        .with_env_filter("tls_flush=debug")
        .try_init();
    for (i, path) in ["/a", "/b"].into_iter().enumerate() {
        let uri: Uri = format!("https://127.0.0.1:{}{path}", h2.addr.port())
            .parse()
            .unwrap();
        let response = within("response", http.get(uri)).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("GET {path} early={} body=0", i == 1));
    }
}

#[tokio::test]
async fn rejected_early_data_is_sent_again_exactly_once() {
    let (server, client) = tls_pair(16 * 1024);
    // The second connection's server shares the session store (resumption works) but
    // accepts no early data.
    let mut rejecting = server.clone();
    rejecting.max_early_data_size = 0;
    let h2 = H2Server::start(vec![server, rejecting]).await;
    let proxy = Proxy::start(h2.addr).await;
    let connector = connector(client);

    let text = fetch(&connector, proxy.addr, Method::GET, "/one", b"").await;
    assert_eq!(text, "GET /one early=false body=0");
    let text = fetch(&connector, proxy.addr, Method::GET, "/two", b"").await;
    assert_eq!(text, "GET /two early=false body=0");
    let records = proxy.last();
    assert!(sent_early(&records), "the client tried: {records:?}");

    let seen = h2.seen();
    println!("{seen:?}");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].early_bytes, 0, "rejected");
    assert_eq!(
        seen[1].requests,
        vec!["GET /two early=false"],
        "delivered once, after the handshake"
    );
}

#[tokio::test]
async fn too_early_layer() {
    let called = Arc::new(Mutex::new(Vec::new()));
    let log = called.clone();
    let inner = tower::service_fn(move |request: Request<()>| {
        let early_header = request
            .headers()
            .get("early-data")
            .map(|v| v.to_str().unwrap().to_owned());
        log.lock()
            .unwrap()
            .push((request.method().clone(), early_header));
        async { Ok::<_, Infallible>(Response::new(String::from("served"))) }
    });
    let service = TooEarlyLayer::new().layer(inner);
    let request = |method: Method, early: bool| {
        let mut request = Request::builder().method(method).body(()).unwrap();
        if early {
            request.extensions_mut().insert(EarlyData);
        }
        request
    };

    let response = service
        .clone()
        .oneshot(request(Method::POST, true))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_EARLY);
    assert_eq!(response.body(), "");
    let response = service
        .clone()
        .oneshot(request(Method::GET, true))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = service
        .clone()
        .oneshot(request(Method::POST, false))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let strict = TooEarlyLayer::new().safe_methods([]).layer(service.clone());
    let response = strict.oneshot(request(Method::GET, true)).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_EARLY);

    assert_eq!(
        *called.lock().unwrap(),
        vec![(Method::GET, Some("1".to_owned())), (Method::POST, None),],
        "the early POST never reached the service; the early GET carries Early-Data: 1"
    );
}

/// `serve` with 0.5-RTT behind the recording proxy, for the crate's own HTTP/2 client: the
/// GET sent as early data on the resumed connection is answered, marked early, and its
/// response reaches the client; a POST on a resumed connection is not sent early and is
/// served after the handshake.
#[tokio::test]
async fn half_rtt_serve_answers_the_early_get_over_http2() {
    let (mut server, client) = tls_pair(0);
    server.max_early_data_size = 0; // HalfRtt sets its own
    let app = axum::Router::new().route(
        "/{*path}",
        axum::routing::any(|request: axum::extract::Request| async move {
            let early = request.extensions().get::<EarlyData>().is_some();
            let header = request.headers().contains_key("early-data");
            format!(
                "{} {} early={early} header={header}",
                request.method(),
                request.uri().path()
            )
        }),
    );
    let (listener, addr) = tls_flush_testkit::tls::loopback_listener().await;
    let serve = tls_flush::serve(
        listener,
        tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        tls_flush::FlushConfig::default(),
        app,
    )
    .early_data(tls_flush::EarlyDataMode::half_rtt());
    tokio::spawn(async move { serve.await });
    let proxy = Proxy::start(addr).await;
    let connector = connector(client);

    let text = fetch(&connector, proxy.addr, Method::GET, "/one", b"").await;
    assert_eq!(text, "GET /one early=false header=false");
    let text = fetch(&connector, proxy.addr, Method::GET, "/two", b"").await;
    assert_eq!(text, "GET /two early=true header=true");
    assert!(sent_early(&proxy.last()));
    let text = fetch(&connector, proxy.addr, Method::POST, "/three", b"abc").await;
    assert_eq!(text, "POST /three early=false header=false");
}
