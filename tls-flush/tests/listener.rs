//! `tls_flush::FlushListener` under `axum::serve` (feature `axum`), on real sockets with
//! rustls (ring) and an `h2` client: handshakes run concurrently and failures are skipped,
//! the pending-handshake bound holds, graceful shutdown lets a response in flight finish,
//! and handlers get `ConnectInfo<ConnectionInfo>` (and `ConnectInfo<SocketAddr>` through
//! `tap_io`).

mod serve_support;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::serve::ListenerExt;
use http::StatusCode;
use serve_support::*;
use tls_flush::{ConnectionInfo, FlushConfig, FlushListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A `FlushListener` (default `FlushConfig`) on a free loopback port, its address, and a
/// client configuration trusting its certificate.
async fn flush_listener() -> (
    FlushListener,
    SocketAddr,
    std::sync::Arc<rustls::ClientConfig>,
) {
    let (acceptor, client) = tls_pair();
    let (tcp, addr) = loopback_listener().await;
    (
        FlushListener::new(tcp, acceptor, FlushConfig::default()),
        addr,
        client,
    )
}

/// The test app plus `/info`: the peer address and records written, from
/// `ConnectInfo<ConnectionInfo>`.
fn app_with_info() -> axum::Router {
    app().route(
        "/info",
        get(
            |ConnectInfo(info): ConnectInfo<ConnectionInfo>| async move {
                format!("{} {}", info.remote_addr(), info.stats().records_written)
            },
        ),
    )
}

/// A client that never says hello and one that sends garbage do not hold up a real client,
/// which is served at once, byte-exact, and whose handler sees its own address and live
/// counters through `ConnectInfo<ConnectionInfo>`.
#[tokio::test]
async fn handshakes_run_concurrently_and_failures_are_skipped() {
    let (listener, addr, client) = flush_listener().await;
    let app = app_with_info().into_make_service_with_connect_info::<ConnectionInfo>();
    let _server = tokio::spawn(axum::serve(listener, app).into_future());

    let _silent = TcpStream::connect(addr).await.unwrap();
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    // rustls answers with an alert, or the connection is closed: either way it ends.
    within("garbage connection ended", async {
        while garbage.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    })
    .await;

    let started = Instant::now();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut c = h2_over(tcp, client, None).await;
    let (status, body) = c.get("/big").await;
    assert_eq!(status, StatusCode::OK);
    assert_pattern(&body, BIG_LEN, "/big");
    let (status, body) = c.get("/info").await;
    assert_eq!(status, StatusCode::OK);
    let info = String::from_utf8(body).unwrap();
    let (peer, records) = info.split_once(' ').unwrap();
    assert_eq!(peer, local.to_string());
    let records: u64 = records.parse().unwrap();
    // 1 MiB in full records is at least 64 of them, written before `/info` was asked.
    assert!(records >= 64, "{info}");
    // Well before the 10 s handshake timeout that would free the silent client's slot.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// With `max_pending_handshakes(1)`, a silent client holds the only slot: the next client
/// is not even accepted until the silent one's handshake times out.
#[tokio::test]
async fn pending_handshakes_are_bounded() {
    let (listener, addr, client) = flush_listener().await;
    let timeout = Duration::from_millis(500);
    let listener = listener
        .max_pending_handshakes(1)
        .handshake_timeout(timeout);
    let _server = tokio::spawn(axum::serve(listener, app()).into_future());

    let mut silent = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut c = h2_connect(addr, client, None).await;
    let (status, body) = c.get("/small").await;
    assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"ok"[..]));
    let waited = started.elapsed();
    assert!(
        waited >= timeout,
        "served after {waited:?}, before the slot was free"
    );
    // The silent client was dropped when its handshake timed out.
    let mut buf = [0u8; 16];
    let n = within("silent client closed", silent.read(&mut buf))
        .await
        .unwrap_or(0);
    assert_eq!(n, 0);
}

/// `axum::serve(FlushListener, app).with_graceful_shutdown(signal)`, unchanged: the signal
/// fires while a 1 MiB response is stalled on flow control; the listener closes, the
/// response completes byte-exact, then the future resolves.
#[tokio::test]
async fn graceful_shutdown_completes_the_response_in_flight() {
    let (listener, addr, client) = flush_listener().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, app())
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    let mut c = h2_connect(addr, client, Some(65_535)).await;
    let res = c.request("/big").await;
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut got = Vec::new();
    while got.len() < 32 * 1024 {
        got.extend(within("first DATA", body.data()).await.unwrap().unwrap());
    }

    stop.send(()).unwrap();
    within("listener closed", async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!server.is_finished(), "resolved with a response in flight");

    body.flow_control().release_capacity(got.len()).unwrap();
    got.extend(within("rest of /big", read_all(&mut body, usize::MAX)).await);
    assert_pattern(&got, BIG_LEN, "/big across the shutdown");
    within("serve future", server).await.unwrap().unwrap();
}

/// `ConnectInfo<SocketAddr>`: axum implements it for listeners wrapped with `tap_io`, and
/// `ConnectionInfo` works with such a listener too.
#[tokio::test]
async fn connect_info_socket_addr_through_tap_io() {
    let (listener, addr, client) = flush_listener().await;
    let app = app().route(
        "/addr",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
    );
    let listener = listener.tap_io(|_| {});
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    let _server = tokio::spawn(axum::serve(listener, app).into_future());
    let tcp = TcpStream::connect(addr).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut c = h2_over(tcp, client, None).await;
    let (status, body) = c.get("/addr").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(String::from_utf8(body).unwrap(), local.to_string());

    let (listener, addr, client) = flush_listener().await;
    let app = app_with_info().into_make_service_with_connect_info::<ConnectionInfo>();
    let _server = tokio::spawn(axum::serve(listener.tap_io(|_| {}), app).into_future());
    let mut c = h2_connect(addr, client, None).await;
    let (status, _) = c.get("/info").await;
    assert_eq!(status, StatusCode::OK);
}
