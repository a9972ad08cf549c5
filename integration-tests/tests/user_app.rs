//! How to check your own app with the harness: an axum `Router` of yours, served through
//! `tls-flush` behind an emulated slow link, and an assertion that its critical response
//! overtakes a download already in progress. Copy this file into your project's tests and
//! replace the router.
//!
//! The assertion is on bytes (how much of the download arrived before the critical response
//! was complete), not on times, so it holds on a loaded CI machine.

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use integration_tests::link::{LinkConfig, RelayLink};
use integration_tests::server::ServerSetup;
use integration_tests::{TapClient, TestServer};
use tls_flush::Policy;
use tower_priority::PriorityLayer;

/// The application under test: a stylesheet the page cannot render without, pinned urgent
/// by the server, and a large download that follows the client's priority.
fn my_app() -> Router {
    Router::new()
        .route(
            "/app.css",
            get(|| async { "body { margin: 0 }\n".repeat(100) })
                .layer(PriorityLayer::new().urgency(0)),
        )
        .route("/video", get(|| async { vec![7u8; 2 << 20] }))
        .layer(PriorityLayer::new())
}

/// Bytes of `/video` received before `/app.css` was complete, when the stylesheet is requested
/// once 64 KiB of the video have arrived.
async fn video_bytes_before_css(policy: Option<Policy>) -> usize {
    let server = TestServer::start(
        ServerSetup {
            policy,
            ..ServerSetup::default()
        },
        my_app(),
    )
    .await
    .expect("server");
    // 10 ms RTT at 50 Mbit/s: slow enough that where bytes wait decides the order.
    let link = RelayLink::start(
        server.addr,
        LinkConfig {
            rtt: Duration::from_millis(10),
            rate_mbit: 50.0,
            queue_bytes: None,
        },
    )
    .await
    .expect("link");
    // Through the link, trusting the server's certificate.
    let client = TapClient::connect(link.addr(), server.client_options())
        .await
        .expect("connect");
    let video = client.start("/video", None).await.expect("video");
    let video_id = video.stream_id();
    let video_done = tokio::spawn(video.finish());
    client
        .wait_for_data(&[video_id], 64 * 1024, Duration::from_secs(10))
        .await
        .expect("video started");
    let css = client.start("/app.css", None).await.expect("css");
    let css_id = css.stream_id();
    let css = css.finish().await.expect("css response");
    assert_eq!(css.status, 200);
    assert_eq!(
        css.headers.get("priority").map(|v| v.to_str().unwrap()),
        Some("u=0")
    );
    let video = video_done.await.expect("join").expect("video response");
    assert_eq!(video.len, 2 << 20);

    // Every DATA byte of the video that arrived before the stylesheet's last DATA frame.
    let frames = client.log().frames;
    let css_end = frames
        .iter()
        .rposition(|f| f.kind == 0 && f.stream_id == css_id)
        .expect("css DATA");
    frames[..css_end]
        .iter()
        .filter(|f| f.kind == 0 && f.stream_id == video_id)
        .map(|f| f.len)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_critical_stylesheet_overtakes_a_running_download() {
    let stock = video_bytes_before_css(None).await;
    let flushed = video_bytes_before_css(Some(Policy::Scheduled)).await;
    println!("video bytes before the stylesheet: stock {stock}, scheduled {flushed}");
    // With tls-flush the stylesheet waits only for what had already left the server's queues
    // (the link's queue, bytes in flight, rustls and a small kernel queue), not for the whole
    // download sitting in kernel buffers.
    assert!(flushed < 768 * 1024, "{flushed} video bytes went first");
    assert!(flushed * 2 < stock, "scheduled {flushed} vs stock {stock}");
}
