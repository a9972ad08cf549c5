//! `PriorityLayer` in a plain hyper server: `tower::ServiceBuilder` +
//! `hyper_util::service::TowerToHyperService`, over real TCP, with hyper clients speaking
//! HTTP/1.1 and HTTP/2 (prior knowledge).

use std::{convert::Infallible, net::SocketAddr};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
    service::TowerToHyperService,
};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceBuilder;
use tower_priority::{Priority, PriorityLayer};

/// Routes by path like a tiny app: `/own` sets its own header, the rest echo the
/// effective priority from the extensions.
async fn handler(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let p = req.extensions().get::<Priority>().copied();
    let mut res = Response::new(Full::new(Bytes::from(match p {
        Some(p) => p.to_string(),
        None => "missing".to_owned(),
    })));
    if req.uri().path() == "/own" {
        res.headers_mut()
            .insert("priority", http::HeaderValue::from_static("u=6"));
    }
    Ok(res)
}

/// Serves `layers` around `handler` on an ephemeral port; HTTP/1.1 and h2c both accepted.
async fn serve(outer: PriorityLayer, inner: PriorityLayer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = ServiceBuilder::new()
        .layer(outer)
        .layer(inner)
        .service_fn(handler);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = TowerToHyperService::new(svc.clone());
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

fn request(path: &str, client: &[&str]) -> Request<Empty<Bytes>> {
    let mut req = Request::get(path).header("host", "localhost");
    for line in client {
        req = req.header("priority", *line);
    }
    req.body(Empty::new()).unwrap()
}

async fn read(res: Response<Incoming>) -> (Option<String>, String) {
    let header = res
        .headers()
        .get("priority")
        .map(|v| v.to_str().unwrap().to_owned());
    assert!(res.headers().get_all("priority").iter().count() <= 1);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (header, String::from_utf8(body.to_vec()).unwrap())
}

/// (path, client lines, expected response header, expected effective priority)
type Case<'a> = (&'a str, &'a [&'a str], Option<&'a str>, &'a str);

async fn check_http1(addr: SocketAddr, cases: &[Case<'_>]) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    // Keep-alive: all cases go over the same connection.
    for &(path, client, want_header, want_body) in cases {
        sender.ready().await.unwrap();
        let res = sender.send_request(request(path, client)).await.unwrap();
        let (header, body) = read(res).await;
        assert_eq!(header.as_deref(), want_header, "http1 {path} {client:?}");
        assert_eq!(body, want_body, "http1 {path} {client:?}");
    }
}

async fn check_http2(addr: SocketAddr, cases: &[Case<'_>]) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    // Concurrent streams on one connection.
    let tasks: Vec<_> = cases
        .iter()
        .map(|&(path, client, want_header, want_body)| {
            let mut sender = sender.clone();
            let req = request(&format!("http://localhost{path}"), client);
            let (path, client) = (path.to_owned(), format!("{client:?}"));
            let (want_header, want_body) = (want_header.map(str::to_owned), want_body.to_owned());
            tokio::spawn(async move {
                let res = sender.send_request(req).await.unwrap();
                let (header, body) = read(res).await;
                assert_eq!(header, want_header, "h2 {path} {client}");
                assert_eq!(body, want_body, "h2 {path} {client}");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn follow_the_client() {
    let addr = serve(PriorityLayer::new(), PriorityLayer::new()).await;
    let cases: &[Case] = &[
        ("/", &[], None, "u=3"),
        ("/", &["u=0"], None, "u=0"),
        ("/", &["u=5, i"], None, "u=5, i"),
        ("/", &["u=5", "i"], None, "u=5, i"),
        ("/", &["u=1,,"], None, "u=3"),
    ];
    check_http1(addr, cases).await;
    check_http2(addr, cases).await;
}

#[tokio::test]
async fn clamp_outside_incremental_inside() {
    let addr = serve(
        PriorityLayer::new().clamp_urgency(1, 6),
        PriorityLayer::new().incremental(true),
    )
    .await;
    let cases: &[Case] = &[
        ("/", &[], Some("i, u-range=(1 6)"), "u=3, i"),
        ("/", &["u=0"], Some("u=1, i, u-range=(1 6)"), "u=1, i"),
        ("/", &["u=7, i=?0"], Some("u=6, i, u-range=(1 6)"), "u=6, i"),
        ("/", &["u=4"], Some("i, u-range=(1 6)"), "u=4, i"),
        ("/own", &["u=0"], Some("u=6"), "u=1, i"),
    ];
    check_http1(addr, cases).await;
    check_http2(addr, cases).await;
}

#[tokio::test]
async fn ignore_client_outside_urgency_inside() {
    let addr = serve(
        PriorityLayer::new().ignore_client(),
        PriorityLayer::new().urgency(0),
    )
    .await;
    let cases: &[Case] = &[
        ("/", &["u=7, i"], Some("u=0, i=?0"), "u=0"),
        ("/", &[], Some("u=0, i=?0"), "u=0"),
        ("/own", &[], Some("u=6"), "u=0"),
    ];
    check_http1(addr, cases).await;
    check_http2(addr, cases).await;
}
