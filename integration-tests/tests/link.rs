//! Self-tests of the rootless link emulator ([`integration_tests::link`]): delay, rate,
//! byte-exactness with half-close, backpressure and teardown, against plain tokio TCP servers.
//! They measure time: one at a time.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

mod support;

use integration_tests::client::pattern_byte;
use integration_tests::link::{LinkConfig, RelayLink};
use rand::{rngs::StdRng, RngCore, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout, Instant};

use support::{median, serial_async};

fn localhost() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

/// An echo server: every connection gets back what it sends.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(localhost()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A server that accepts one connection and hands it over without reading from it: its
/// address, and the connection once accepted.
fn sink(listener: TcpListener) -> (SocketAddr, oneshot::Receiver<TcpStream>) {
    let addr = listener.local_addr().unwrap();
    let (sink_tx, sink_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let _ = sink_tx.send(stream);
    });
    (addr, sink_rx)
}

/// A server that accepts one connection (with `TCP_NODELAY`) and runs `serve` on its two
/// halves: its address, and what `serve` returned once it has.
async fn one_connection<T, F, Fut>(serve: F) -> (SocketAddr, oneshot::Receiver<T>)
where
    F: FnOnce(OwnedReadHalf, OwnedWriteHalf) -> Fut + Send + 'static,
    Fut: Future<Output = T> + Send,
    T: Send + 'static,
{
    let listener = TcpListener::bind(localhost()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (result_tx, result_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (read, write) = stream.into_split();
        let _ = result_tx.send(serve(read, write).await);
    });
    (addr, result_rx)
}

fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut data);
    data
}

/// What a receiver saw: the bytes, and when the first and the last read returned.
struct Received {
    data: Vec<u8>,
    first_at: Instant,
    first_len: usize,
    last_at: Instant,
}

impl Received {
    /// Throughput in Mbit/s between the first and the last read (the first read's bytes
    /// arrived at the start of the interval, so they are not counted).
    fn mbit_per_sec(&self) -> f64 {
        let bits = (self.data.len() - self.first_len) as f64 * 8.0;
        bits / (self.last_at - self.first_at).as_secs_f64() / 1e6
    }
}

/// Reads until EOF, timing the reads; `pause` between reads makes a slow reader.
async fn read_to_end<R: AsyncRead + Unpin>(
    reader: R,
    chunk: usize,
    pause: Option<Duration>,
) -> Received {
    read_to_end_signalling(reader, chunk, pause, None).await
}

/// [`read_to_end`], signalling `first_read` when the first bytes arrive.
async fn read_to_end_signalling<R: AsyncRead + Unpin>(
    mut reader: R,
    chunk: usize,
    pause: Option<Duration>,
    mut first_read: Option<oneshot::Sender<()>>,
) -> Received {
    let mut data = Vec::new();
    let mut buf = vec![0u8; chunk];
    let mut first: Option<(Instant, usize)> = None;
    let mut last_at = Instant::now();
    loop {
        let n = reader.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        last_at = Instant::now();
        first.get_or_insert((last_at, n));
        if let Some(first_read) = first_read.take() {
            let _ = first_read.send(());
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(pause) = pause {
            sleep(pause).await;
        }
    }
    let (first_at, first_len) = first.expect("received nothing");
    Received {
        data,
        first_at,
        first_len,
        last_at,
    }
}

#[test]
fn config_defaults_and_description() {
    let config = LinkConfig::default();
    assert_eq!(config.rtt, Duration::from_millis(20));
    assert_eq!(config.rate_mbit, 20.0);
    assert_eq!(config.queue_bytes, None);
    assert_eq!(config.one_way_delay(), Duration::from_millis(10));
    assert_eq!(config.bdp_bytes(), 50_000);
    assert_eq!(config.queue_limit(), 50_000);
    assert_eq!(
        config.describe(),
        "relay link: 20 ms RTT, 20 Mbit/s each way, queue 50000 B (1 BDP); \
         loopback TCP at both ends"
    );
    let custom = LinkConfig {
        rtt: Duration::from_micros(12_500),
        rate_mbit: 2.5,
        queue_bytes: Some(7_812),
    };
    assert_eq!(
        custom.describe(),
        "relay link: 12.5 ms RTT, 2.5 Mbit/s each way, queue 7812 B (2 BDP); \
         loopback TCP at both ends"
    );
    let tiny = LinkConfig {
        queue_bytes: Some(0),
        ..LinkConfig::default()
    };
    assert_eq!(tiny.queue_limit(), integration_tests::link::SEGMENT_BYTES);
}

#[tokio::test]
async fn rejects_a_bad_rate() {
    let _serial = serial_async().await;
    for rate_mbit in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let config = LinkConfig {
            rate_mbit,
            ..LinkConfig::default()
        };
        let error = RelayLink::start(localhost(), config).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    }
}

/// (1) A ping-pong of small messages measures the configured RTT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_pong_measures_the_configured_rtt() {
    let _serial = serial_async().await;
    let config = LinkConfig {
        rtt: Duration::from_millis(40),
        rate_mbit: 1000.0,
        queue_bytes: None,
    };
    let link = RelayLink::start(echo_server().await, config).await.unwrap();
    let mut stream = connect(link.addr()).await;
    let mut rtts = Vec::new();
    let mut reply = [0u8; 64];
    for round in 0..22u8 {
        let message = [round; 64];
        let start = Instant::now();
        stream.write_all(&message).await.unwrap();
        stream.read_exact(&mut reply).await.unwrap();
        let rtt = start.elapsed().as_secs_f64() * 1e3;
        assert_eq!(reply, message);
        if round > 0 {
            // Round 0 also waits for the relay's upstream connection.
            rtts.push(rtt);
        }
    }
    let min = rtts.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = rtts.iter().cloned().fold(0.0, f64::max);
    let median = median(&mut rtts);
    println!(
        "ping-pong through {}: median RTT {median:.2} ms (min {min:.2}, max {max:.2}, n {})",
        config.describe(),
        rtts.len()
    );
    assert!(
        (median - 40.0).abs() <= 4.0,
        "median RTT {median:.2} ms is not within 10% of 40 ms"
    );
    assert!(
        min >= 40.0,
        "a round trip took {min:.2} ms, less than the RTT"
    );
}

/// (2) A bulk transfer in each direction at once measures the configured rate each way, and
/// the first byte arrives one one-way delay (plus one segment's serialization) after it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_transfer_measures_the_configured_rate_each_way() {
    let _serial = serial_async().await;
    const LEN: usize = 2_000_000;
    let config = LinkConfig::default();
    let up = random_bytes(1, LEN);
    let down = random_bytes(2, LEN);

    let server_down = down.clone();
    let (upstream, result_rx) = one_connection(|mut read, mut write| async move {
        // The client's go byte has crossed the relay, so both directions are running.
        let mut go = [0u8; 1];
        read.read_exact(&mut go).await.unwrap();
        let send_start = Instant::now();
        let sender = tokio::spawn(async move {
            write.write_all(&server_down).await.unwrap();
            write.shutdown().await.unwrap();
        });
        let received = read_to_end(read, 64 * 1024, None).await;
        sender.await.unwrap();
        (send_start, received)
    })
    .await;

    let link = RelayLink::start(upstream, config).await.unwrap();
    let stream = connect(link.addr()).await;
    let (read, mut write) = stream.into_split();
    write.write_all(b"!").await.unwrap();
    // Start sending once the server's first bytes are here: the relay is connected upstream,
    // so the first-byte delay measured at the server is the link's alone.
    let (first_tx, first_rx) = oneshot::channel();
    let sender = tokio::spawn({
        let up = up.clone();
        async move {
            first_rx.await.unwrap();
            let send_start = Instant::now();
            write.write_all(&up).await.unwrap();
            write.shutdown().await.unwrap();
            send_start
        }
    });
    let at_client = timeout(
        Duration::from_secs(20),
        read_to_end_signalling(read, 64 * 1024, None, Some(first_tx)),
    )
    .await
    .expect("server-to-client transfer timed out");
    let send_start = sender.await.unwrap();
    let (server_send_start, at_server) = timeout(Duration::from_secs(20), result_rx)
        .await
        .expect("client-to-server transfer timed out")
        .unwrap();
    assert!(at_client.data == down, "server-to-client bytes differ");
    assert!(at_server.data == up, "client-to-server bytes differ");

    // Ideal first-byte delay: one-way delay plus one segment's serialization.
    let ideal_first = config.one_way_delay().as_secs_f64() * 1e3
        + integration_tests::link::SEGMENT_BYTES as f64 * 8.0 / (config.rate_mbit * 1e3);
    for (name, received, start) in [
        ("server-to-client", &at_client, server_send_start),
        ("client-to-server", &at_server, send_start),
    ] {
        let rate = received.mbit_per_sec();
        let first_ms = (received.first_at - start).as_secs_f64() * 1e3;
        println!(
            "{name}: {LEN} B at {rate:.3} Mbit/s (configured {}), first byte after \
             {first_ms:.2} ms (ideal {ideal_first:.2} ms), transfer {:.1} ms",
            config.rate_mbit,
            (received.last_at - received.first_at).as_secs_f64() * 1e3,
        );
        assert!(
            (rate - config.rate_mbit).abs() <= config.rate_mbit * 0.1,
            "{name}: {rate:.3} Mbit/s is not within 10% of {} Mbit/s",
            config.rate_mbit
        );
        assert!(
            // One sample: generous above (a loaded machine), strict below (never early).
            first_ms >= ideal_first - 0.1 && first_ms <= ideal_first * 2.0,
            "{name}: first byte after {first_ms:.2} ms, ideal {ideal_first:.2} ms"
        );
    }
}

/// (3) Random bytes cross both ways exactly, with slow readers at both ends, and a half-close
/// crosses after the data while the other direction keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_are_exact_and_half_close_propagates() {
    let _serial = serial_async().await;
    const TRAILER: &[u8] = b"client EOF seen";
    let configs = [
        LinkConfig {
            rtt: Duration::from_millis(10),
            rate_mbit: 20.0,
            queue_bytes: None,
        },
        // A queue of two segments: many small reads and tight backpressure.
        LinkConfig {
            rtt: Duration::from_millis(4),
            rate_mbit: 50.0,
            queue_bytes: Some(3000),
        },
    ];
    for (i, config) in configs.into_iter().enumerate() {
        let up = random_bytes(10 + i as u64, 700_000 + 1234 * i);
        let down = random_bytes(20 + i as u64, 900_001 - 4321 * i);

        let server_down = down.clone();
        let (upstream, result_rx) = one_connection(|read, mut write| async move {
            let (eof_tx, eof_rx) = oneshot::channel::<()>();
            let sender = tokio::spawn(async move {
                write.write_all(&server_down).await.unwrap();
                // Only once the client's half-close has arrived: proves this direction
                // stays open after the other one is shut down.
                eof_rx.await.unwrap();
                write.write_all(TRAILER).await.unwrap();
                write.shutdown().await.unwrap();
            });
            let received = read_to_end(read, 4096, Some(Duration::from_millis(2))).await;
            eof_tx.send(()).unwrap();
            sender.await.unwrap();
            received.data
        })
        .await;

        let link = RelayLink::start(upstream, config).await.unwrap();
        let stream = connect(link.addr()).await;
        let (read, mut write) = stream.into_split();
        let sender = tokio::spawn({
            let up = up.clone();
            async move {
                write.write_all(&up).await.unwrap();
                write.shutdown().await.unwrap();
                // Keep the write half alive (dropping it would be the same shutdown).
                write
            }
        });
        let at_client = timeout(
            Duration::from_secs(30),
            read_to_end(read, 3000, Some(Duration::from_millis(2))),
        )
        .await
        .expect("transfer timed out");
        let _write = sender.await.unwrap();
        let at_server = timeout(Duration::from_secs(5), result_rx)
            .await
            .expect("server did not finish")
            .unwrap();
        println!(
            "{}: {} B up, {} B down exact, half-close crossed both ways",
            config.describe(),
            at_server.len(),
            at_client.data.len()
        );
        assert!(at_server == up, "client-to-server bytes differ");
        let (body, trailer) = at_client
            .data
            .split_at(at_client.data.len() - TRAILER.len());
        assert!(body == down, "server-to-client bytes differ");
        assert_eq!(trailer, TRAILER);
    }
}

/// (4) A receiver that does not read stops the sender after a bounded amount: the relay holds
/// its queue and pipe, not everything the sender tries to write; then everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_reaches_the_sender() {
    let _serial = serial_async().await;
    const TRY: usize = 32 * 1024 * 1024;
    const BUF: u32 = 16 * 1024;
    let config = LinkConfig::default();

    // A sink that holds its connection without reading (small receive buffer).
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(BUF).unwrap();
    socket.bind(localhost()).unwrap();
    let (upstream, sink_rx) = sink(socket.listen(16).unwrap());

    let link = RelayLink::start(upstream, config).await.unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(BUF).unwrap();
    let mut stream = socket.connect(link.addr()).await.unwrap();
    let pattern: Vec<u8> = (0..64 * 1024).map(pattern_byte).collect();
    let mut written = 0usize;
    loop {
        let offset = written % 251;
        let chunk = &pattern[offset..(offset + 16 * 1024).min(offset + TRY - written)];
        match timeout(Duration::from_millis(500), stream.write(chunk)).await {
            Ok(result) => written += result.unwrap(),
            Err(_) => break,
        }
        assert!(
            written < TRY,
            "the sender wrote all {TRY} B: no backpressure"
        );
    }
    // Relay: queue + pipe (+ slack) + one write batch; kernels: four small socket buffers
    // (doubled by Linux), with room to spare.
    let bound = 1024 * 1024;
    println!(
        "{}: a non-reading receiver stopped the sender after {written} B (tried {TRY} B, \
         bound {bound} B, queue {} B)",
        config.describe(),
        config.queue_limit()
    );
    assert!(
        written < bound,
        "sender wrote {written} B, more than {bound} B"
    );
    assert!(
        written > config.queue_limit(),
        "sender wrote only {written} B: the relay should hold its queue"
    );

    // Now the receiver reads: every byte arrives, in order, and the close follows.
    let sink = sink_rx.await.unwrap();
    stream.shutdown().await.unwrap();
    let received = timeout(Duration::from_secs(10), read_to_end(sink, 64 * 1024, None))
        .await
        .expect("drain timed out");
    assert_eq!(received.data.len(), written);
    assert!(
        received
            .data
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern_byte(i as u64)),
        "drained bytes differ"
    );
}

/// Without small buffers at the sender, its kernel send buffer (autotuned on loopback) holds
/// more, but the relay still bounds what it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_with_default_sender_buffers() {
    let _serial = serial_async().await;
    const TRY: usize = 64 * 1024 * 1024;
    let config = LinkConfig::default();
    let (upstream, sink_rx) = sink(TcpListener::bind(localhost()).await.unwrap());
    let link = RelayLink::start(upstream, config).await.unwrap();
    let mut stream = connect(link.addr()).await;
    let chunk = vec![7u8; 64 * 1024];
    let mut written = 0usize;
    while written < TRY {
        match timeout(Duration::from_millis(500), stream.write(&chunk)).await {
            Ok(result) => written += result.unwrap(),
            Err(_) => break,
        }
    }
    println!("default sender buffers: stopped after {written} B of {TRY} B");
    assert!(written < TRY / 4, "sender wrote {written} B of {TRY} B");
    drop(sink_rx);
}

/// Dropping the link closes its relayed connections and its listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_link_tears_down_relays() {
    let _serial = serial_async().await;
    let config = LinkConfig {
        rtt: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let link = RelayLink::start(echo_server().await, config).await.unwrap();
    let addr = link.addr();
    let mut stream = connect(addr).await;
    stream.write_all(b"hello").await.unwrap();
    let mut reply = [0u8; 5];
    stream.read_exact(&mut reply).await.unwrap();
    assert_eq!(&reply, b"hello");
    drop(link);
    let mut buf = [0u8; 16];
    let ended = timeout(Duration::from_secs(2), stream.read(&mut buf))
        .await
        .expect("relayed connection still open after drop");
    assert!(matches!(ended, Ok(0) | Err(_)), "{ended:?}");
    // Let the aborted accept loop drop its listener.
    sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}
