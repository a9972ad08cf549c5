//! The passive HPACK decoder against loona-hpack's (which it replaced), on header blocks
//! shaped like a browser's requests and a server's responses, Huffman-coded the way
//! Chrome and h2 code them.
//!
//! Each iteration starts a fresh decoder and decodes a connection's first two blocks
//! (the first fills the dynamic table, the second mostly indexes it), keeping every
//! field's name and value the way the observers do for `priority`. Read the ratio of the
//! medians.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hpack_codec::field::LiteralHeaderField;
use hpack_codec::table::Index;

// The decoder's internals, public only with the `bench-internals` feature.
use tls_flush::hpack_bench as hpack;

const REQUEST_1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":authority", "www.example.com"),
    (":scheme", "https"),
    (":path", "/"),
    (
        "sec-ch-ua",
        "\"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"",
    ),
    ("sec-ch-ua-mobile", "?0"),
    ("sec-ch-ua-platform", "\"Linux\""),
    ("upgrade-insecure-requests", "1"),
    (
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
         Chrome/124.0.0.0 Safari/537.36",
    ),
    (
        "accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,\
         image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
    ),
    ("sec-fetch-site", "none"),
    ("sec-fetch-mode", "navigate"),
    ("sec-fetch-user", "?1"),
    ("sec-fetch-dest", "document"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
    ("accept-language", "en-US,en;q=0.9"),
    (
        "cookie",
        "session=4f2a9c0e7b1d4e8f9a3b; _ga=GA1.2.1234567890.1700000000; theme=dark",
    ),
    ("priority", "u=0, i"),
];

const REQUEST_2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":authority", "www.example.com"),
    (":scheme", "https"),
    (":path", "/assets/js/app.3f9a2c1e.js"),
    (
        "sec-ch-ua",
        "\"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"",
    ),
    ("sec-ch-ua-mobile", "?0"),
    (
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
         Chrome/124.0.0.0 Safari/537.36",
    ),
    ("sec-ch-ua-platform", "\"Linux\""),
    ("accept", "*/*"),
    ("sec-fetch-site", "same-origin"),
    ("sec-fetch-mode", "no-cors"),
    ("sec-fetch-dest", "script"),
    ("referer", "https://www.example.com/"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
    ("accept-language", "en-US,en;q=0.9"),
    (
        "cookie",
        "session=4f2a9c0e7b1d4e8f9a3b; _ga=GA1.2.1234567890.1700000000; theme=dark",
    ),
    ("priority", "u=1"),
];

const RESPONSE_1: &[(&str, &str)] = &[
    (":status", "200"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-length", "48213"),
    ("date", "Sat, 30 Nov 2024 16:30:00 GMT"),
    ("server", "hyper"),
    ("cache-control", "public, max-age=3600"),
    ("vary", "accept-encoding"),
    ("priority", "u=0"),
];

const RESPONSE_2: &[(&str, &str)] = &[
    (":status", "200"),
    ("content-type", "application/javascript"),
    ("content-length", "1024"),
    ("date", "Sat, 30 Nov 2024 16:30:00 GMT"),
    ("server", "hyper"),
    ("cache-control", "public, max-age=3600"),
    ("vary", "accept-encoding"),
    ("priority", "u=2"),
];

/// Encodes `fields` the way Chrome and h2 do: a field already in the table is indexed,
/// anything else is a literal with incremental indexing (its name indexed when known),
/// every string Huffman-coded.
fn encode(enc: &mut hpack_codec::Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = enc.enter_header_block(Vec::new()).unwrap();
    for &(name, value) in fields {
        let (name, value) = (name.as_bytes(), value.as_bytes());
        let (mut full, mut by_name) = (None, None);
        for i in 1..=block.table().len() {
            let index = Index::new(i).unwrap();
            let entry = block.table().get(index).unwrap();
            if entry.name() == name {
                by_name.get_or_insert(index);
                if entry.value() == value {
                    full.get_or_insert(index);
                }
            }
        }
        if let Some(index) = full {
            block.encode_field(index).unwrap();
            continue;
        }
        let field = match by_name {
            Some(index) => LiteralHeaderField::with_indexed_name(index, value),
            None => LiteralHeaderField::new(name, value).with_huffman_encoded_name(),
        };
        block
            .encode_field(field.with_huffman_encoded_value().with_indexing())
            .unwrap();
    }
    block.finish()
}

fn connection(first: &[(&str, &str)], second: &[(&str, &str)]) -> [Vec<u8>; 2] {
    let mut enc = hpack_codec::Encoder::new(4096);
    [encode(&mut enc, first), encode(&mut enc, second)]
}

/// Our decoder: the `priority` values, as `PassiveDecoder::priority_fields` collects them.
fn ours(blocks: &[Vec<u8>]) -> usize {
    let mut d = hpack::Decoder::new(4096, 64 * 1024);
    let mut found = 0;
    for block in blocks {
        let mut values: Vec<Vec<u8>> = Vec::new();
        d.decode(block, |name, value| {
            if name == b"priority" {
                values.push(value.to_vec());
            }
        })
        .unwrap();
        found += values.len();
    }
    found
}

/// loona-hpack 0.4.3, as the crate used it.
fn loona(blocks: &[Vec<u8>]) -> usize {
    let mut d = loona_hpack::Decoder::new();
    d.set_max_allowed_table_size(64 * 1024);
    let mut found = 0;
    for block in blocks {
        let mut values: Vec<Vec<u8>> = Vec::new();
        d.decode_with_cb(block, |name, value| {
            if name.as_ref() == b"priority" {
                values.push(value.into_owned());
            }
        })
        .unwrap();
        found += values.len();
    }
    found
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("requests", connection(REQUEST_1, REQUEST_2)),
        ("responses", connection(RESPONSE_1, RESPONSE_2)),
    ];
    let mut group = c.benchmark_group("hpack");
    for (name, blocks) in &cases {
        assert_eq!(ours(blocks), 2);
        assert_eq!(loona(blocks), 2);
        let bytes: usize = blocks.iter().map(Vec::len).sum();
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_with_input(BenchmarkId::new("ours", name), blocks, |b, blocks| {
            b.iter(|| ours(blocks))
        });
        group.bench_with_input(BenchmarkId::new("loona", name), blocks, |b, blocks| {
            b.iter(|| loona(blocks))
        });
    }
    group.finish();

    // The Huffman decoder alone, on a long user-agent string.
    let ua = hpack_codec::field::LiteralHeaderField::new(b"", REQUEST_1[8].1.as_bytes())
        .with_huffman_encoded_value();
    let coded = match ua.value() {
        hpack_codec::literal::HpackString::Huffman(c) => c.to_vec(),
        hpack_codec::literal::HpackString::Plain(_) => unreachable!(),
    };
    let mut group = c.benchmark_group("huffman");
    group.throughput(Throughput::Bytes(coded.len() as u64));
    let mut out = Vec::new();
    group.bench_function("ours/user-agent", |b| {
        b.iter(|| {
            out.clear();
            hpack::huffman_decode(&coded, &mut out).unwrap();
            out.len()
        })
    });
    group.bench_function("loona/user-agent", |b| {
        b.iter(|| {
            loona_hpack::huffman::HuffmanDecoder::new()
                .decode(&coded)
                .unwrap()
                .len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
