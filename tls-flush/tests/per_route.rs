//! Per-route policies end to end: two routes of one app, on one connection, get different
//! wire behaviour. `tower_priority::PriorityLayer` pins each route's urgency in its
//! `priority` response header; the wrapper reads it back from h2's header blocks.
//!
//! The server is a hand-written hyper-util loop over `FlushStream<Tap<TlsStream>>`: `Tap`
//! sits where rustls takes the wrapper's writes, logs the records of each write (rustls cuts
//! a write into records of 16 KiB and never merges two writes into one record) and takes
//! one write every 2 ms, a slow link that keeps the 1 MiB `u=7` download queued in the
//! wrapper while the small responses are requested.

mod serve_support;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serve_support::*;
use tls_flush::{ConnectionStats, FlushConfig, FlushStream, Transport};
use tls_flush_testkit::frame::{parse_frames_lenient, Frame, DATA, END_STREAM};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tower_priority::PriorityLayer;

const SMALL: usize = 4096;
const PACE: Duration = Duration::from_millis(2);

/// The TLS stream, logging the plaintext of each write as rustls cuts it into records, and
/// taking at most one write per [`PACE`].
struct Tap {
    tls: TlsStream<TcpStream>,
    records: Arc<Mutex<Vec<Vec<u8>>>>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl AsyncRead for Tap {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tap {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(pause) = &mut this.pause {
            std::task::ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        let n = std::task::ready!(Pin::new(&mut this.tls).poll_write_vectored(cx, bufs))?;
        let written: Vec<u8> = bufs
            .iter()
            .flat_map(|b| b.iter().copied())
            .take(n)
            .collect();
        let mut log = this.records.lock().unwrap();
        log.extend(written.chunks(16384).map(<[u8]>::to_vec));
        this.pause = Some(Box::pin(tokio::time::sleep(PACE)));
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_shutdown(cx)
    }
}

impl Transport for Tap {
    fn has_buffered_output(&self) -> bool {
        self.tls.has_buffered_output()
    }
    fn alpn_protocol(&self) -> Option<&[u8]> {
        Transport::alpn_protocol(&self.tls)
    }
    fn tcp_stream(&self) -> Option<&TcpStream> {
        self.tls.tcp_stream()
    }
}

/// One app, four policies: `/bulk` pinned `u=7`, `/critical` pinned `u=0`, `/plain` opted
/// out of the client's signals (`ignore_client()`, nothing pinned: `u=3`), `/follow`
/// following the client.
fn app() -> Router {
    let small = || async { Bytes::from(pattern(SMALL)) };
    Router::new()
        .route(
            "/bulk",
            get(|| async { Bytes::from(pattern(BIG_LEN)) }).layer(PriorityLayer::new().urgency(7)),
        )
        .route(
            "/critical",
            get(small).layer(PriorityLayer::new().urgency(0)),
        )
        .route(
            "/plain",
            get(small).layer(PriorityLayer::new().ignore_client()),
        )
        .route("/follow", get(small))
        .layer(PriorityLayer::new())
}

/// Serves one connection through the tap; returns the address, the record log and the
/// connection's counters (once the handshake is done).
async fn server() -> (
    std::net::SocketAddr,
    Arc<Mutex<Vec<Vec<u8>>>>,
    tokio::sync::oneshot::Receiver<ConnectionStats>,
    Arc<rustls::ClientConfig>,
) {
    let (acceptor, client) = tls_pair();
    let (listener, addr) = loopback_listener().await;
    let records = Arc::new(Mutex::new(Vec::new()));
    let log = records.clone();
    let (stats_tx, stats_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        let tap = Tap {
            tls,
            records: log,
            pause: None,
        };
        let stream = FlushStream::new(tap, FlushConfig::default());
        let _ = stats_tx.send(stream.stats());
        let builder = auto::Builder::new(TokioExecutor::new());
        let _ = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app()))
            .await;
    });
    (addr, records, stats_rx, client)
}

/// Sends `GET path` with `priority` (if any) and returns the response.
async fn send(c: &H2Client, path: &str, priority: Option<&str>) -> http::Response<h2::RecvStream> {
    let mut send = within("h2 ready", c.send.clone().ready()).await.unwrap();
    let mut req = Request::get(format!("https://localhost{path}"));
    if let Some(p) = priority {
        req = req.header("priority", p);
    }
    let (res, _) = send.send_request(req.body(()).unwrap(), true).unwrap();
    within("h2 response", res).await.unwrap()
}

/// Requests `/bulk` (pinned `u=7`) and waits for its first DATA, so that the rest of it is
/// queued in the wrapper behind the slow tap.
async fn start_bulk(c: &H2Client) -> (h2::RecvStream, Vec<u8>) {
    let bulk = send(c, "/bulk", None).await;
    assert_eq!(bulk.headers()["priority"], "u=7");
    let mut bulk = bulk.into_body();
    let first = within("bulk DATA", bulk.data()).await.unwrap().unwrap();
    (bulk, first.to_vec())
}

/// The frames of the server's plaintext, each with the offset just past it, and the offsets
/// where records end.
fn wire(records: &[Vec<u8>]) -> (Vec<(Frame, usize)>, Vec<usize>) {
    let all: Vec<u8> = records.concat();
    let mut ends = Vec::new();
    let mut at = 0;
    for r in records {
        at += r.len();
        ends.push(at);
    }
    // The server's first bytes are its SETTINGS, no preface to skip.
    let (frames, _) = parse_frames_lenient(&all);
    let mut offset = 0;
    let frames = frames
        .into_iter()
        .map(|f| {
            offset += f.wire_len();
            (f, offset)
        })
        .collect();
    (frames, ends)
}

/// Where `stream`'s last DATA frame ends, and whether a record ends right there.
fn last_data(frames: &[(Frame, usize)], ends: &[usize], stream: u32) -> (usize, usize, bool) {
    let (i, (_, end)) = frames
        .iter()
        .enumerate()
        .find(|(_, (f, _))| f.stream() == stream && f.kind == DATA && f.flags & END_STREAM != 0)
        .unwrap_or_else(|| panic!("stream {stream} has no last DATA frame"));
    (i, *end, ends.contains(end))
}

/// How many of `stream`'s DATA frames come at or after `index`.
fn bulk_data_after(frames: &[(Frame, usize)], stream: u32, index: usize) -> usize {
    frames[index..]
        .iter()
        .filter(|(f, _)| f.stream() == stream && f.kind == DATA)
        .count()
}

/// While a pinned `u=7` 1 MiB download is queued, the pinned `u=0` route's 4 KiB response
/// overtakes it and its record ends right after its DATA (an early cut); the route that
/// opted out (`ignore_client()`) is not raised by the client's `u=0` and gets no cut, while
/// the route that follows the client and gets the same `u=0` is cut.
#[tokio::test]
async fn two_routes_one_connection_different_wire_behaviour() {
    let (addr, records, stats, client) = server().await;
    let c = h2_connect(addr, client, None).await;
    let stats = within("stats", stats).await.unwrap();

    // Stream 1: the bulk download; once it flows, stream 3: /critical.
    let (mut bulk, mut got) = start_bulk(&c).await;
    let before = stats.snapshot();
    let critical = send(&c, "/critical", None).await;
    assert_eq!(critical.headers()["priority"], "u=0");
    let body = within("critical", read_all(&mut critical.into_body(), usize::MAX)).await;
    assert_pattern(&body, SMALL, "/critical");
    let after_critical = stats.snapshot();
    got.extend(within("rest of bulk", read_all(&mut bulk, usize::MAX)).await);
    assert_pattern(&got, BIG_LEN, "/bulk");

    // Stream 5: bulk again; then /plain (7) and /follow (9), both asking u=0.
    let (mut bulk, mut got) = start_bulk(&c).await;
    let plain = send(&c, "/plain", Some("u=0")).await;
    assert_eq!(plain.headers()["priority"], "u=3, i=?0");
    let follow = send(&c, "/follow", Some("u=0")).await;
    assert!(follow.headers().get("priority").is_none());
    for (res, what) in [(plain, "/plain"), (follow, "/follow")] {
        let body = within(what, read_all(&mut res.into_body(), usize::MAX)).await;
        assert_pattern(&body, SMALL, what);
    }
    got.extend(within("rest of bulk", read_all(&mut bulk, usize::MAX)).await);
    assert_pattern(&got, BIG_LEN, "/bulk");
    drop(c);

    let (frames, ends) = wire(&records.lock().unwrap());
    let (critical_at, _, critical_cut) = last_data(&frames, &ends, 3);
    assert!(critical_cut, "no record ends right after /critical's DATA");
    let overtaken = bulk_data_after(&frames, 1, critical_at);
    assert!(overtaken > 0, "/critical did not overtake the u=7 bulk");
    assert!(
        after_critical.early_cuts > before.early_cuts,
        "{after_critical:?}"
    );
    assert!(after_critical.data_frames_reordered > before.data_frames_reordered);

    let (plain_at, _, plain_cut) = last_data(&frames, &ends, 7);
    let (_, _, follow_cut) = last_data(&frames, &ends, 9);
    assert!(
        follow_cut,
        "the route following the client's u=0 was not cut"
    );
    assert!(!plain_cut, "the opted-out route was cut as if it were u=0");
    println!(
        "records: {}; bulk DATA frames after /critical: {overtaken}, after /plain: {}",
        ends.len(),
        bulk_data_after(&frames, 5, plain_at)
    );
}
