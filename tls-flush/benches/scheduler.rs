//! The scheduler's cost per frame against the number of units queued: N DATA frames of N
//! different streams are queued behind a blocked transport, then the transport opens and
//! the wrapper drains them (choosing, copying and writing each). The time per frame must
//! not grow with N (it did when every choice scanned every queued stream). The transport is
//! the testkit's gated `Sink`.
//!
//! `cargo bench -p tls-flush --bench scheduler`; compare the time per element across N.
//! `SCHEDULER_BENCH_UNITS=10,1000` picks other sizes.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tls_flush::{FlushConfig, FlushStream, Policy};
use tls_flush_testkit::Sink;
use tokio::io::AsyncWrite;

fn frame(len: usize, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    let mut out = vec![l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]];
    out.resize(9 + len, 0x5a);
    out
}

/// A wrapper holding `units` DATA frames (100-byte payloads) of `units` streams.
fn queued(units: usize, policy: Policy) -> (FlushStream<Sink>, Arc<AtomicBool>) {
    let (sink, blocked) = Sink::gated();
    let config = FlushConfig::for_policy(policy)
        .soft_limit(256 << 20)
        .hard_limit(256 << 20)
        .announce_no_rfc7540_priorities(false);
    let mut stream = FlushStream::new(sink, config);
    let mut cx = Context::from_waker(Waker::noop());
    let mut wire = frame(0, 0x4, 0, 0);
    for i in 0..units {
        wire.extend(frame(100, 0x0, 0, 2 * i as u32 + 1));
    }
    let mut at = 0;
    while at < wire.len() {
        match Pin::new(&mut stream).poll_write(&mut cx, &wire[at..]) {
            Poll::Ready(Ok(n)) if n > 0 => at += n,
            other => panic!("the queue refused bytes: {other:?}"),
        }
    }
    (stream, blocked)
}

fn drain(stream: &mut FlushStream<Sink>) {
    let mut cx = Context::from_waker(Waker::noop());
    while Pin::new(&mut *stream).poll_shutdown(&mut cx).is_pending() {}
    assert_eq!(stream.stats().snapshot().queued_bytes, 0);
}

fn scheduler(c: &mut Criterion) {
    let mut group = c.benchmark_group("drain queued units");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    let sizes: Vec<usize> = std::env::var("SCHEDULER_BENCH_UNITS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 1_000, 100_000]);
    for units in sizes {
        for policy in [Policy::EarlyFlush, Policy::Scheduled] {
            group.throughput(Throughput::Elements(units as u64));
            group.bench_with_input(
                BenchmarkId::new(policy.name(), units),
                &units,
                |b, &units| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let (mut stream, blocked) = queued(units, policy);
                            blocked.store(false, Ordering::Relaxed);
                            let start = Instant::now();
                            drain(&mut stream);
                            total += start.elapsed();
                        }
                        total
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, scheduler);
criterion_main!(benches);
