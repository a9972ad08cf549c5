//! The wrapper's cost per MiB against stock, over in-memory transports.
//!
//! `plain`: h2-shaped frames written straight to a sink (the testkit's `Sink`: stock) or
//! through `FlushStream` into one.
//! `tls`: the same through tokio-rustls over an in-memory pipe whose far end discards the
//! ciphertext, so the ratio shows the wrapper's share next to the encryption it feeds.
//! Read the medians as ratios against `stock` in the same run.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tls_flush::{FlushConfig, FlushStream, Policy, Transport};
use tls_flush_testkit::tls::{config_pair, connect_as_localhost};
use tls_flush_testkit::Sink;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

const MIB: usize = 1 << 20;

fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; 9] {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// What h2 writes for two 512 KiB responses on streams 1 and 3: SETTINGS, HEADERS, then
/// DATA frames of 16 KiB alternating, each as a (header, payload) pair.
fn workload() -> Vec<(Vec<u8>, Vec<u8>)> {
    let payload = vec![0x5a; 16384];
    let mut out = vec![(frame_header(6, 4, 0, 0).to_vec(), vec![0, 3, 0, 0, 0, 100])];
    for stream in [1, 3] {
        out.push((frame_header(1, 1, 4, stream).to_vec(), vec![0x88]));
    }
    for i in 0..MIB / 16384 {
        let stream = if i % 2 == 0 { 1 } else { 3 };
        out.push((frame_header(16384, 0, 0, stream).to_vec(), payload.clone()));
    }
    out
}

/// Writes the workload the way h2 does (one vectored write per frame) and flushes.
async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, frames: &[(Vec<u8>, Vec<u8>)]) {
    for (header, payload) in frames {
        let total = header.len() + payload.len();
        let mut done = 0;
        while done < total {
            let slices: Vec<IoSlice<'_>> = if done < header.len() {
                vec![IoSlice::new(&header[done..]), IoSlice::new(payload)]
            } else {
                vec![IoSlice::new(&payload[done - header.len()..])]
            };
            done += w.write_vectored(&slices).await.expect("write");
        }
    }
    w.flush().await.expect("flush");
}

fn plain(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let frames = workload();
    let mut group = c.benchmark_group("plain");
    group.throughput(Throughput::Bytes(MIB as u64));
    group.bench_function("stock", |b| {
        b.iter(|| rt.block_on(async { write_all(&mut Sink::default(), &frames).await }))
    });
    for policy in Policy::ALL {
        group.bench_with_input(
            BenchmarkId::from_parameter(policy),
            &policy,
            |b, &policy| {
                b.iter(|| {
                    rt.block_on(async {
                        let mut s =
                            FlushStream::new(Sink::default(), FlushConfig::for_policy(policy));
                        write_all(&mut s, &frames).await;
                    })
                })
            },
        );
    }
    group.finish();
}

/// The server side of a TLS connection (a fresh certificate, rustls' default versions) over
/// an in-memory pipe whose client end only discards what it receives.
fn tls_pair(rt: &tokio::runtime::Runtime) -> tokio_rustls::server::TlsStream<Pipe> {
    let (server, client) = config_pair(&["localhost"], rustls::DEFAULT_VERSIONS);
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let (server, client) = tokio::join!(
            acceptor.accept(Pipe(a)),
            connect_as_localhost(Arc::new(client), b)
        );
        let (mut raw, _) = client.expect("client handshake").into_inner();
        // The far end only discards ciphertext.
        tokio::spawn(async move {
            let mut buf = vec![0; 1 << 16];
            while tokio::io::AsyncReadExt::read(&mut raw, &mut buf)
                .await
                .is_ok_and(|n| n > 0)
            {}
        });
        server.expect("server handshake")
    })
}

/// An in-memory pipe usable as a transport.
struct Pipe(tokio::io::DuplexStream);

impl AsyncRead for Pipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Transport for Pipe {}

fn tls(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let frames = workload();
    let mut group = c.benchmark_group("tls");
    group.throughput(Throughput::Bytes(MIB as u64));
    let mut stock = tls_pair(&rt);
    group.bench_function("stock", |b| {
        b.iter(|| rt.block_on(write_all(&mut stock, &frames)))
    });
    for policy in Policy::ALL {
        // One connection per policy; the frames' SETTINGS is harmless to repeat.
        let mut stream = FlushStream::new(tls_pair(&rt), FlushConfig::for_policy(policy));
        group.bench_function(BenchmarkId::from_parameter(policy), |b| {
            b.iter(|| rt.block_on(write_all(&mut stream, &frames)))
        });
    }
    group.finish();
}

criterion_group!(benches, plain, tls);
criterion_main!(benches);
