//! The coalescer over a fault-injecting transport: whatever the write sizes, partial writes
//! and `Pending`s, the bytes out are the bytes in, in order, each once.

use std::time::Duration;

use proptest::prelude::*;
use tokio::io::AsyncWriteExt;

use super::{ClientTransport, FirstFlightConfig, FlushClientStream, Release};
use crate::frame::{
    encoded_frame, CLIENT_PREFACE, DATA, FLAG_END_HEADERS, FLAG_END_STREAM, HEADERS, SETTINGS,
};
use crate::test_io::LimitedSink;

impl ClientTransport for LimitedSink {}

/// h2's first flight for a GET: preface, SETTINGS, WINDOW_UPDATE, HEADERS (END_STREAM).
fn get_flight() -> Vec<u8> {
    let mut out = CLIENT_PREFACE.to_vec();
    out.extend(encoded_frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0]));
    out.extend(encoded_frame(0x8, 0, 0, &[0, 0xff, 0, 0]));
    out.extend(encoded_frame(
        HEADERS,
        FLAG_END_HEADERS | FLAG_END_STREAM,
        1,
        &[0x82, 0x84, 0x87],
    ));
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// Writes `input` cut at `cuts`, then a flush and a shutdown.
fn run(input: &[u8], cuts: &[usize], limits: Vec<usize>, config: FirstFlightConfig) -> LimitedSink {
    runtime().block_on(async {
        let mut stream = FlushClientStream::with_config(LimitedSink::with_limits(limits), config);
        let mut rest = input;
        for &cut in cuts {
            let (now, later) = rest.split_at(cut.min(rest.len()));
            stream.write_all(now).await.expect("write");
            rest = later;
        }
        stream.write_all(rest).await.expect("write");
        stream.flush().await.expect("flush");
        stream.shutdown().await.expect("shutdown");
        stream.inner
    })
}

#[test]
fn first_flight_of_separate_writes_is_one_write() {
    let flight = get_flight();
    // As h2 writes it: the preface alone, SETTINGS + WINDOW_UPDATE, then HEADERS.
    let cuts = [24, 24 + 15 + 13];
    let mut rest = &flight[..];
    let rt = runtime();
    rt.block_on(async {
        let mut stream = FlushClientStream::new(LimitedSink::default());
        for &cut in &cuts {
            let (now, later) = rest.split_at(cut - (flight.len() - rest.len()));
            stream.write_all(now).await.unwrap();
            assert!(stream.first_flight().is_none(), "held");
            assert!(stream.inner.writes.is_empty());
            rest = later;
        }
        stream.write_all(rest).await.unwrap();
        let f = stream.first_flight().expect("released");
        assert_eq!(f.release, Release::RequestComplete);
        assert_eq!(f.bytes, flight.len());
        assert!(!f.early_data);
        stream.flush().await.unwrap();
        assert_eq!(stream.inner.writes, vec![flight.len()]);
        assert_eq!(stream.inner.out, flight);
        // Later bytes pass through as they come.
        stream.write_all(b"later").await.unwrap();
        assert_eq!(stream.inner.writes, vec![flight.len(), 5]);
    });
}

#[test]
fn a_lone_preface_leaves_when_the_hold_expires() {
    runtime().block_on(async {
        let mut stream = FlushClientStream::new(LimitedSink::default());
        let mut preface = CLIENT_PREFACE.to_vec();
        preface.extend(encoded_frame(SETTINGS, 0, 0, &[]));
        stream.write_all(&preface).await.unwrap();
        let started = std::time::Instant::now();
        stream.flush().await.unwrap();
        let f = stream.first_flight().expect("released");
        assert_eq!(f.release, Release::Timer);
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(stream.inner.out, preface);
    });
}

#[test]
fn not_http2_passes_through_at_once() {
    let inner = run(
        b"GET / HTTP/1.1\r\n\r\n",
        &[3],
        vec![],
        FirstFlightConfig::default(),
    );
    assert_eq!(inner.out, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(inner.writes, vec![3, 15]);
}

#[test]
fn the_size_bound_releases() {
    let mut input = get_flight();
    input.truncate(input.len() - 12); // no HEADERS
    input.extend(encoded_frame(DATA, 0, 0, &[7; 100]));
    let config = FirstFlightConfig::default().max_bytes(64);
    let inner = run(&input, &[], vec![], config);
    assert_eq!(inner.out, input);
    assert_eq!(inner.writes[0], 64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bytes_out_are_bytes_in(
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        end_stream in any::<bool>(),
        garbage in any::<bool>(),
        cuts in proptest::collection::vec(0usize..400, 0..8),
        limits in proptest::collection::vec(0usize..700, 0..12),
        max in 1usize..20_000,
    ) {
        let mut input = if garbage { b"PRI * HTTP/2.1".to_vec() } else { get_flight() };
        if !end_stream {
            // A POST with a body: held until END_STREAM, the bound or the timer.
            let at = input.len() - 12;
            input[at + 4] = FLAG_END_HEADERS;
            input[at + 9] = 0x83;
        }
        input.extend(encoded_frame(DATA, if end_stream { 0 } else { FLAG_END_STREAM }, 1, &body));
        let config = FirstFlightConfig::default().max_bytes(max);
        let inner = run(&input, &cuts, limits, config);
        prop_assert_eq!(inner.out, input);
    }
}
