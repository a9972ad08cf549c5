//! `tls_flush::serve` on real sockets, with rustls (ring) and an `h2` client over
//! tokio-rustls: graceful shutdown, the TLS handshake timeout, the idle timeout, and the
//! connection's `ConnectionStats` in the request extensions. Accept errors (EMFILE) are
//! tested in `serve_emfile.rs`, which lowers the process's file-descriptor limit.

mod serve_support;

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use http::StatusCode;
use serve_support::*;
use tls_flush::FlushConfig;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The signal fires while a 1 MiB response is stalled on flow control: new connections are
/// refused, the server keeps running until the response is complete (byte-exact), then the
/// `serve` future resolves with `Ok(())`.
#[tokio::test]
async fn graceful_shutdown_completes_the_response_in_flight() {
    let mut server = start(|s| s).await;
    let (addr, client) = (server.addr, server.client.clone());

    // Default 64 KiB windows and no capacity released: the download stalls mid-body.
    let mut c = h2_connect(addr, client.clone(), Some(65_535)).await;
    let res = c.request("/big").await;
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut got = read_unreleased(&mut body, 32 * 1024).await;
    assert!(got.len() < BIG_LEN, "the response must still be in flight");

    server.stop();

    // The listener is dropped: new connections are refused. (A connect racing with the
    // close may still be queued and then reset.)
    within("listener closed", async {
        loop {
            match TcpStream::connect(addr).await {
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await;
    let again = TcpStream::connect(addr).await;
    assert!(
        matches!(&again, Err(e) if e.kind() == ErrorKind::ConnectionRefused),
        "{again:?}"
    );

    // The server waits for the response in flight.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !server.task.is_finished(),
        "serve resolved with a response in flight"
    );

    body.flow_control().release_capacity(got.len()).unwrap();
    got.extend(within("rest of /big", read_all(&mut body, usize::MAX)).await);
    assert_pattern(&got, BIG_LEN, "/big across the shutdown");

    let result = server.finished().await;
    assert!(result.is_ok(), "{result:?}");
    // The server closed the connection once its last stream was done.
    within("client connection closed", c.connection)
        .await
        .unwrap()
        .ok();
}

/// Graceful shutdown with no connection open resolves at once; a connection that is still
/// in its TLS handshake does not hold the server up.
#[tokio::test]
async fn graceful_shutdown_drops_connections_in_their_handshake() {
    let mut server = start(|s| s).await;
    let addr = server.addr;
    // Connected and accepted, but no ClientHello (the default handshake timeout is 10 s).
    let mut silent = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop();
    let result = server.finished().await;
    assert!(result.is_ok(), "{result:?}");
    let mut buf = [0u8; 16];
    let n = within("silent connection closed", silent.read(&mut buf))
        .await
        .unwrap_or(0);
    assert_eq!(
        n, 0,
        "the server sent bytes to a client that never said hello"
    );
}

/// A client that connects and never sends a ClientHello is disconnected after the handshake
/// timeout; a client that completed its handshake is not.
#[tokio::test]
async fn handshake_timeout_drops_silent_clients() {
    let server = start(|s| s.handshake_timeout(Duration::from_millis(200))).await;
    let (addr, client) = (server.addr, server.client.clone());

    let mut healthy = h2_connect(addr, client.clone(), None).await;

    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    // Well before the default 10 s: it is the setting that applies.
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("silent client still connected after 5 s");
    let waited = started.elapsed();
    match closed {
        Ok(0) => {}
        Ok(n) => panic!("the server sent {n} bytes before any ClientHello"),
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(
        waited >= Duration::from_millis(200),
        "disconnected after {waited:?}, before the 200 ms handshake timeout"
    );

    // Well past the handshake timeout, the established connection still works.
    let (status, body) = healthy.get("/small").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"ok");
    assert!(!server.task.is_finished());
}

/// With the default handshake timeout (10 s) a silent client is still connected after a
/// second: the 200 ms above is the setting, not something else closing the connection.
#[tokio::test]
async fn default_handshake_timeout_is_not_short() {
    let server = start(|s| s).await;
    let addr = server.addr;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(1), silent.read(&mut buf)).await;
    assert!(read.is_err(), "closed early: {read:?}");
}

/// An idle HTTP/2 connection is closed by the server after the idle timeout, while a
/// connection that keeps downloading (a chunk every 50 ms for 1.5 s) is not: right after
/// its download it still accepts a new request, so it never got a GOAWAY.
#[tokio::test]
async fn idle_connections_are_closed_busy_ones_are_not() {
    let idle_timeout = Duration::from_millis(300);
    let server = start(|s| s.idle_timeout(idle_timeout)).await;
    let (addr, client) = (server.addr, server.client.clone());

    let mut busy = h2_connect(addr, client.clone(), None).await;
    let download = busy.request("/trickle").await;
    assert_eq!(download.status(), StatusCode::OK);
    let mut download = download.into_body();
    let download = tokio::spawn(async move { read_all(&mut download, usize::MAX).await });

    let mut idle = h2_connect(addr, client.clone(), None).await;
    let (status, body) = idle.get("/small").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"ok");
    let last_response = Instant::now();
    let closed = within("idle connection closed", idle.connection).await;
    let after = last_response.elapsed();
    assert!(closed.is_ok(), "{closed:?}");
    // The server's last write came before the client saw the response: allow for that.
    assert!(
        after >= idle_timeout - Duration::from_millis(100),
        "idle connection closed {after:?} after its last response"
    );
    assert!(
        !download.is_finished(),
        "the download should outlast the idle connection"
    );

    let body = within("download", download).await.unwrap();
    assert_pattern(&body, TRICKLE_CHUNKS * TRICKLE_CHUNK, "/trickle");
    // No GOAWAY on the busy connection: a new request is served.
    let (status, body) = busy.get("/small").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"ok");
    assert!(!busy.connection.is_finished());

    // And once it goes idle, it is closed too.
    within("busy connection closed once idle", busy.connection)
        .await
        .unwrap()
        .unwrap();
    assert!(!server.task.is_finished());
}

/// Handlers read their own connection's `ConnectionStats` from the request extensions
/// (`Extension<ConnectionStats>` in axum).
#[tokio::test]
async fn handlers_see_their_connection_stats() {
    let server = start(|s| s).await;
    let (addr, client) = (server.addr, server.client.clone());

    let mut first = h2_connect(addr, client.clone(), None).await;
    let (status, body) = first.get("/big").await;
    assert_eq!(status, StatusCode::OK);
    assert_pattern(&body, BIG_LEN, "/big");
    let (status, body) = first.get("/stats").await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let written: u64 = String::from_utf8(body).unwrap().parse().unwrap();
    assert!(
        written >= BIG_LEN as u64,
        "the connection wrote /big, its stats say {written} bytes"
    );

    // Another connection has its own counters.
    let mut second = h2_connect(addr, client.clone(), None).await;
    let (status, body) = second.get("/stats").await;
    assert_eq!(status, StatusCode::OK);
    let written: u64 = String::from_utf8(body).unwrap().parse().unwrap();
    assert!(
        written < BIG_LEN as u64 / 2,
        "a fresh connection reports {written} bytes written"
    );
}

/// `serve_connection` (one accepted connection) gives handlers the stats too, and returns
/// the counters when the client leaves.
#[tokio::test]
async fn serve_connection_serves_one_connection() {
    let (acceptor, client) = tls_pair();
    let (listener, addr) = loopback_listener().await;
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        tls_flush::serve_connection(tcp, acceptor, FlushConfig::default(), app()).await
    });
    let mut c = h2_connect(addr, client, None).await;
    let (status, body) = c.get("/big").await;
    assert_eq!(status, StatusCode::OK);
    assert_pattern(&body, BIG_LEN, "/big");
    let (status, _) = c.get("/stats").await;
    assert_eq!(status, StatusCode::OK);
    drop(c);
    let stats = within("serve_connection", server).await.unwrap().unwrap();
    assert!(stats.bytes_written >= BIG_LEN as u64, "{stats:?}");
}

/// `serve` announces `SETTINGS_MAX_CONCURRENT_STREAMS` = [`H2_MAX_CONCURRENT_STREAMS`]
/// (100), and a client that opens one stream more than that at once (101 slow requests in
/// one write, so that all of them are read before any response ends) gets exactly that one
/// refused with `RST_STREAM(REFUSED_STREAM)` (RFC 9113 §5.1.2) while the first 100 are
/// answered: the requests a client makes the server hold are bounded.
#[tokio::test]
async fn streams_past_the_announced_limit_are_refused() {
    use tls_flush::H2_MAX_CONCURRENT_STREAMS;
    use tls_flush_testkit::frame::{
        encode_all, parse_frames_lenient, settings_frame, Frame, HEADERS, PREFACE, RST_STREAM,
        SETTINGS,
    };
    use tls_flush_testkit::tls::connect_as_localhost;
    use tokio::io::AsyncWriteExt;

    /// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §6.5.2).
    const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// RFC 9113 §7.
    const REFUSED_STREAM: u32 = 0x7;
    const END_STREAM_AND_HEADERS: u8 = 0x1 | 0x4;

    assert_eq!(H2_MAX_CONCURRENT_STREAMS, 100);
    let server = start(|s| s).await;
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let mut tls = within(
        "TLS handshake",
        connect_as_localhost(server.client.clone(), tcp),
    )
    .await
    .unwrap();
    // GET https /trickle: `:method GET` and `:scheme https` indexed, `:path` a literal.
    let mut block = vec![0x82, 0x87, 0x04, 8];
    block.extend_from_slice(b"/trickle");
    let opened = H2_MAX_CONCURRENT_STREAMS + 1;
    let mut frames = vec![settings_frame(0, &[])];
    frames.extend(
        (0..opened).map(|i| Frame::new(HEADERS, END_STREAM_AND_HEADERS, 2 * i + 1, block.clone())),
    );
    let mut hello = PREFACE.to_vec();
    hello.extend(encode_all(&frames));
    tls.write_all(&hello).await.unwrap();
    tls.flush().await.unwrap();

    let last = 2 * opened - 1;
    let mut announced = None;
    let mut resets = Vec::new();
    let mut answered = std::collections::BTreeSet::new();
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while answered.len() < H2_MAX_CONCURRENT_STREAMS as usize || resets.is_empty() {
        assert!(
            Instant::now() < deadline,
            "resets {resets:?}, {} answered",
            answered.len()
        );
        let mut chunk = [0u8; 16384];
        let n = within("server frames", tls.read(&mut chunk)).await.unwrap();
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let (parsed, tail) = parse_frames_lenient(&buf);
        buf.drain(..buf.len() - tail);
        for f in parsed {
            match f.kind {
                SETTINGS if f.flags & 0x1 == 0 => {
                    announced = f
                        .payload
                        .chunks_exact(6)
                        .find(|s| u16::from_be_bytes([s[0], s[1]]) == MAX_CONCURRENT_STREAMS)
                        .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
                }
                RST_STREAM => {
                    let code = u32::from_be_bytes(f.payload[..4].try_into().unwrap());
                    resets.push((f.stream(), code));
                }
                HEADERS => {
                    answered.insert(f.stream());
                }
                _ => {}
            }
        }
    }
    assert_eq!(announced, Some(H2_MAX_CONCURRENT_STREAMS));
    assert_eq!(resets, vec![(last, REFUSED_STREAM)]);
    assert!(!answered.contains(&last));
}
