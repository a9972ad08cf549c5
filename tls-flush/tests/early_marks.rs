//! Which requests carry `EarlyData` when `MarkEarly` is called in task order: an HTTP/2
//! client sends two requests as TLS 1.3 early data and a third with its Finished, so that
//! h2 accepts the three together; behind `TowerToHyperService` on a multi-threaded runtime
//! their tasks (and `MarkEarly::call`) run in any order, often the last one first (tokio's
//! LIFO slot). Exactly the two early requests must be marked.

mod half_rtt_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use half_rtt_support::{get_tickets, tls, RawClient, EARLY, TIMEOUT};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::ClientConfig;
use tls_flush::{EarlyData, EarlyDataStream, MarkEarly, TooEarlyLayer};
use tls_flush_testkit::tls::loopback_listener;
use tls_flush_testkit::{
    hpack_int, hpack_string, literal, settings_frame, Frame, END_HEADERS, END_STREAM, HEADERS,
    PREFACE,
};
use tokio::io::AsyncReadExt;

/// Each request the app got: its path and query, and whether it carried `EarlyData`.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

/// A server over tokio-rustls (early data accepted, served after the handshake) whose
/// connections are `MarkEarly` behind `TowerToHyperService`, as under axum-server; every
/// request reaches the app (`any_method`), which records it.
async fn server() -> (SocketAddr, Arc<ClientConfig>, Seen) {
    let (mut server_config, client) = tls();
    server_config.max_early_data_size = EARLY;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let (listener, addr) = loopback_listener().await;
    let seen = Seen::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |request: Request| async move {
        let early = request.extensions().get::<EarlyData>().is_some();
        let target = request.uri().path_and_query().unwrap().to_string();
        log.lock().unwrap().push((target, early));
        "ok"
    });
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let stream = EarlyDataStream::new(tls);
                let service =
                    MarkEarly::new(app, stream.early_requests(), &TooEarlyLayer::any_method());
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    (addr, Arc::new(client), seen)
}

/// A HEADERS frame for `GET` (or `POST`) `path` on `stream`. Every request carries
/// `x-client: raw`: the first adds it to the HPACK dynamic table (index 62), the others
/// refer to it, so the server's table must follow the early blocks.
fn request(stream: u32, method: &str, path: &str) -> Vec<u8> {
    let mut block = vec![if method == "POST" { 0x83 } else { 0x82 }, 0x87];
    // `:authority` and `:path`, with their names from the static table.
    hpack_int(&mut block, 0x00, 4, 1);
    hpack_string(&mut block, b"localhost");
    hpack_int(&mut block, 0x00, 4, 4);
    hpack_string(&mut block, path.as_bytes());
    if stream == 1 {
        literal(&mut block, true, b"x-client", b"raw");
    } else {
        block.push(0x80 | 62);
    }
    Frame::new(HEADERS, END_HEADERS | END_STREAM, stream, block).encode()
}

/// Reads the server's flight until the client has its EndOfEarlyData and Finished to send.
async fn until_finished_is_due(raw: &mut RawClient) {
    let mut buf = vec![0u8; 64 * 1024];
    while raw.conn.is_handshaking() {
        let n = tokio::time::timeout(TIMEOUT, raw.tcp.read(&mut buf))
            .await
            .expect("the server's flight")
            .unwrap();
        assert!(n > 0, "closed during the handshake");
        let mut input = &buf[..n];
        while !input.is_empty() {
            raw.conn.read_tls(&mut input).unwrap();
            raw.conn.process_new_packets().unwrap();
        }
    }
}

/// Waits until the app has seen every target in `targets`; what it saw of them.
async fn seen_of(seen: &Seen, targets: &[String]) -> BTreeMap<String, bool> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let got: BTreeMap<String, bool> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(target, _)| targets.contains(target))
            .cloned()
            .collect();
        if got.len() == targets.len() {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the app saw {got:?} of {targets:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_early_requests_are_marked_in_whatever_order_their_tasks_run() {
    let (addr, client, seen) = server().await;
    // Several connections: the tasks' order differs from one to the next.
    for round in 0..8 {
        get_tickets(&client, addr).await;
        let targets = [
            format!("/early?round={round}&n=1"),
            format!("/early?round={round}&n=2"),
            format!("/late?round={round}"),
        ];
        let mut early = PREFACE.to_vec();
        early.extend(settings_frame(0, &[]).encode());
        early.extend(request(1, "GET", &targets[0]));
        early.extend(request(3, "GET", &targets[1]));
        let (mut raw, _) = RawClient::connect_early(&client, addr, &early).await;
        until_finished_is_due(&mut raw).await;
        // With the client's Finished, in one write: not early, but read by h2 together with
        // the early requests.
        raw.send(&request(5, "POST", &targets[2])).await;
        let got = seen_of(&seen, &targets).await;
        assert!(raw.conn.is_early_data_accepted(), "round {round}");
        let expected = BTreeMap::from([
            (targets[0].clone(), true),
            (targets[1].clone(), true),
            (targets[2].clone(), false),
        ]);
        assert_eq!(got, expected, "round {round}");
    }
}
