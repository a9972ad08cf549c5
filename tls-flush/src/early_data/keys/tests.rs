use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::Request;
use tls_flush_testkit::{hpack_int, hpack_string, literal};

use super::MAX_KEYS;
use crate::early_data::{early_requests, EarlyCounter, EarlyData, EarlyRequests};
use crate::frame::{
    encoded_frame, CLIENT_PREFACE, CONTINUATION, FLAG_END_HEADERS, FLAG_END_STREAM, HEADERS,
    SETTINGS,
};

/// A request's header block without the dynamic table: `:method`, `:scheme https`,
/// `:authority example.com`, `:path`, then `fields`.
fn block(method: &str, path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    match method {
        "GET" => out.push(0x82),
        "POST" => out.push(0x83),
        other => literal(&mut out, false, b":method", other.as_bytes()),
    }
    out.push(0x87);
    // `:authority` and `:path` with their names from the static table (indexes 1 and 4).
    hpack_int(&mut out, 0x00, 4, 1);
    hpack_string(&mut out, b"example.com");
    hpack_int(&mut out, 0x00, 4, 4);
    hpack_string(&mut out, path.as_bytes());
    for (name, value) in fields {
        literal(&mut out, false, name.as_bytes(), value.as_bytes());
    }
    out
}

/// The request h2 makes of [`block`]'s block.
fn request(method: &str, path: &str, fields: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("https://example.com{path}"));
    for (name, value) in fields {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap()
}

/// A HEADERS frame opening (or continuing) `stream` with the whole `block`.
fn headers(stream: u32, block: &[u8]) -> Vec<u8> {
    encoded_frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, stream, block)
}

/// The connection's first bytes: preface and an empty SETTINGS frame.
fn preface() -> Vec<u8> {
    let mut out = CLIENT_PREFACE.to_vec();
    out.extend(encoded_frame(SETTINGS, 0, 0, &[]));
    out
}

/// Marks `requests` in the order of `order`; which of them were marked, by position.
fn marked_in_order(early: &EarlyRequests, requests: &[Request<()>], order: &[usize]) -> Vec<bool> {
    let mut marked = vec![false; requests.len()];
    for &i in order {
        let mut request = requests[i].clone();
        marked[i] = early.mark(&mut request);
        assert_eq!(
            request.extensions().get::<EarlyData>().is_some(),
            marked[i],
            "the extension follows the answer"
        );
    }
    marked
}

/// Two early requests, then a later one that was not early.
fn two_early_one_later() -> (Vec<u8>, Vec<Request<()>>) {
    let mut early = preface();
    early.extend(headers(1, &block("GET", "/a?x=1", &[("accept", "*/*")])));
    early.extend(headers(3, &block("GET", "/b", &[("x-id", "2")])));
    let requests = vec![
        request("GET", "/a?x=1", &[("accept", "*/*")]),
        request("GET", "/b", &[("x-id", "2")]),
        request("POST", "/c", &[("x-id", "3")]),
    ];
    (early, requests)
}

#[test]
fn the_later_request_marked_first_takes_no_early_mark() {
    // The old count-based marks gave the first call a mark, whichever request it was.
    let (early, requests) = two_early_one_later();
    let marks = early_requests(&early);
    assert_eq!(marks.remaining(), 2);
    assert_eq!(
        marked_in_order(&marks, &requests, &[2, 1, 0]),
        [true, true, false]
    );
    assert_eq!(marks.remaining(), 0);
    assert_eq!(marks.fallbacks(), 0);
}

#[test]
fn any_order_marks_exactly_the_early_requests() {
    let (early, requests) = two_early_one_later();
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let marks = early_requests(&early);
        assert_eq!(
            marked_in_order(&marks, &requests, &order),
            [true, true, false],
            "{order:?}"
        );
    }
}

#[test]
fn a_key_is_taken_once() {
    // Two identical early requests: two marks, and a third identical request gets none.
    let mut early = preface();
    let get = block("GET", "/same", &[]);
    early.extend(headers(1, &get));
    early.extend(headers(3, &get));
    let marks = early_requests(&early);
    let same = request("GET", "/same", &[]);
    assert_eq!(
        marked_in_order(&marks, &[same.clone(), same.clone(), same], &[0, 1, 2]),
        [true, true, false]
    );
}

#[test]
fn header_order_and_fragments_do_not_change_a_key() {
    // h2's `HeaderMap` groups a name's values; a fragment is not part of the URI.
    let fields = [("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2")];
    let mut early = preface();
    early.extend(headers(1, &block("GET", "/p?q=1#top", &fields)));
    let marks = early_requests(&early);
    let grouped = request(
        "GET",
        "/p?q=1",
        &[("accept", "*/*"), ("cookie", "a=1"), ("cookie", "b=2")],
    );
    // A value that differs, or a field too many, is another request.
    let other = request("GET", "/p?q=1", &[("accept", "*/*"), ("cookie", "a=1")]);
    assert_eq!(
        marked_in_order(&marks, &[other, grouped], &[0, 1]),
        [false, true]
    );
}

#[test]
fn the_dynamic_table_follows_every_block_trailers_included() {
    let mut early = preface();
    // Request 1 adds `x-token: abc` to the table (index 62), its trailers `x-sum: 9`,
    // which pushes it to 63; request 2 refers to both.
    let mut first = block("POST", "/up", &[]);
    literal(&mut first, true, b"x-token", b"abc");
    early.extend(encoded_frame(HEADERS, FLAG_END_HEADERS, 1, &first));
    let mut trailers = Vec::new();
    literal(&mut trailers, true, b"x-sum", b"9");
    early.extend(headers(1, &trailers));
    let mut second = block("GET", "/down", &[]);
    second.extend([0x80 | 63, 0x80 | 62]);
    early.extend(headers(3, &second));
    let marks = early_requests(&early);
    let requests = [
        request("POST", "/up", &[("x-token", "abc")]),
        request("GET", "/down", &[("x-token", "abc"), ("x-sum", "9")]),
    ];
    assert_eq!(marked_in_order(&marks, &requests, &[1, 0]), [true, true]);
    assert_eq!(marks.fallbacks(), 0);
}

#[test]
fn continuation_frames_make_one_block_and_bytes_may_come_one_at_a_time() {
    let (mut early, requests) = two_early_one_later();
    let long = block("GET", "/long", &[("x-pad", "0123456789")]);
    let (head, tail) = long.split_at(7);
    early.extend(encoded_frame(HEADERS, 0, 5, head));
    early.extend(encoded_frame(CONTINUATION, FLAG_END_HEADERS, 5, tail));
    let mut counter = EarlyCounter::default();
    for byte in &early {
        counter.feed(std::slice::from_ref(byte));
    }
    counter.end();
    let marks = counter.requests();
    assert_eq!(marks.remaining(), 3);
    let mut all = requests;
    all.push(request("GET", "/long", &[("x-pad", "0123456789")]));
    assert_eq!(
        marked_in_order(&marks, &all, &[3, 2, 1, 0]),
        [true, true, false, true]
    );
    assert_eq!(marks.fallbacks(), 0);
}

#[test]
fn a_block_cut_by_the_end_of_early_data_is_counted() {
    let (mut early, requests) = two_early_one_later();
    // Request 3's block begins early and ends after the handshake.
    let cut = block("GET", "/cut", &[("x-pad", "0123456789")]);
    early.extend(encoded_frame(HEADERS, 0, 5, &cut[..6]));
    let mut counter = EarlyCounter::default();
    counter.feed(&early);
    let marks = counter.requests();
    assert_eq!(
        marks.remaining(),
        3,
        "the cut request counts while it may go on"
    );
    assert_eq!(marks.fallbacks(), 0);
    counter.end();
    assert_eq!(marks.remaining(), 3);
    assert_eq!(marks.fallbacks(), 1);
    // The keyed requests are marked whatever the order; the count mark goes to the first
    // request that matches no key, as before (here the later POST, not the cut request).
    let mut all = requests;
    all.push(request("GET", "/cut", &[("x-pad", "0123456789")]));
    assert_eq!(
        marked_in_order(&marks, &all, &[2, 1, 3, 0]),
        [true, true, true, false]
    );
    assert_eq!(marks.remaining(), 0);
}

#[test]
fn a_block_that_does_not_decode_leaves_the_later_early_requests_to_counting() {
    let mut early = preface();
    early.extend(headers(1, &block("GET", "/one", &[])));
    // Index 70 is past the static table and an empty dynamic table.
    early.extend(headers(3, &[0x82, 0x80 | 70]));
    early.extend(headers(5, &block("GET", "/three", &[])));
    let marks = early_requests(&early);
    assert_eq!(marks.remaining(), 3);
    assert_eq!(marks.fallbacks(), 2);
    let one = request("GET", "/one", &[]);
    let later = request("GET", "/later", &[]);
    assert_eq!(
        marked_in_order(
            &marks,
            &[one, later.clone(), later.clone(), later],
            &[1, 2, 0, 3]
        ),
        [true, true, true, false]
    );
}

#[test]
fn a_block_too_large_is_counted() {
    let mut early = preface();
    early.extend(headers(1, &block("GET", "/one", &[])));
    let pad = "p".repeat(super::MAX_BLOCK);
    early.extend(headers(3, &block("GET", "/big", &[("x-pad", &pad)])));
    let marks = early_requests(&early);
    assert_eq!(marks.remaining(), 2);
    assert_eq!(marks.fallbacks(), 1);
}

#[test]
fn keys_are_bounded() {
    let mut early = preface();
    let get = block("GET", "/", &[]);
    for i in 0..MAX_KEYS + 3 {
        early.extend(headers(2 * i as u32 + 1, &get));
    }
    let marks = early_requests(&early);
    assert_eq!(marks.remaining(), MAX_KEYS + 3);
    assert_eq!(marks.fallbacks(), 3);
    let kept = marks.marks().map_or(0, |m| m.keys.len());
    assert!(kept > 0 && kept <= MAX_KEYS, "{kept} keys kept");
}

#[test]
fn before_the_early_data_ends_every_request_is_early() {
    // 0.5-RTT: the app may see early requests while early data still arrives; whatever
    // it gets then came from early bytes, even a request whose key did not match.
    let (early, _) = two_early_one_later();
    let mut counter = EarlyCounter::default();
    counter.feed(&early);
    let marks = counter.requests();
    let mut odd = request("GET", "/unknown", &[]);
    assert!(marks.mark(&mut odd));
    counter.end();
    let mut later = request("GET", "/unknown", &[]);
    assert!(!marks.mark(&mut later));
}

/// What hyper's HTTP/2 server hands the app must have the key of the block the client
/// sent: the client is hyper's too (Huffman strings, the dynamic table, its own
/// pseudo-header order), the server marks the requests it got.
#[tokio::test]
async fn a_request_from_hyper_has_the_key_of_its_block() {
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (client_io, tap_client) = tokio::io::duplex(64 * 1024);
    let (tap_server, server_io) = tokio::io::duplex(64 * 1024);
    // The client's bytes, recorded on their way to the server.
    let wire = Arc::new(Mutex::new(Vec::new()));
    let (mut from_client, mut to_client) = tokio::io::split(tap_client);
    let (mut from_server, mut to_server) = tokio::io::split(tap_server);
    let recorded = wire.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf).await {
            recorded.lock().unwrap().extend_from_slice(&buf[..n]);
            if to_server.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move { tokio::io::copy(&mut from_server, &mut to_client).await });

    let (delivered, mut requests) = tokio::sync::mpsc::unbounded_channel();
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let _ = delivered.send(request.map(|_| ()));
        async { Ok::<_, Infallible>(http::Response::new(String::new())) }
    });
    tokio::spawn(
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(server_io), service),
    );
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client_io))
            .await
            .unwrap();
    tokio::spawn(conn);

    let sent = |method: &str, uri: &str, body: &'static str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("user-agent", "tls-flush-test/1.0")
            .header("cookie", "a=1")
            .header("accept", "text/html")
            .header("cookie", "b=2")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    };
    let early_ones = [
        sent("GET", "https://example.com/a?x=%20y", ""),
        sent("POST", "https://example.com:8443/b", "abc"),
    ];
    for request in early_ones {
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
    }
    // Every byte so far as early data; the third request comes after.
    let early = wire.lock().unwrap().clone();
    let response = sender
        .send_request(sent("GET", "https://example.com/c", ""))
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);

    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(requests.recv().await.unwrap());
    }
    let marks = early_requests(&early);
    assert_eq!(marks.remaining(), 2);
    assert_eq!(
        marked_in_order(&marks, &got, &[2, 1, 0]),
        [true, true, false],
        "{got:?}"
    );
    assert_eq!(marks.fallbacks(), 0);
}

#[test]
fn a_connection_without_early_data_shares_nothing() {
    let none = early_requests(&[]);
    assert!(none.shared.is_none());
    let mut request = http::Request::new(());
    assert!(!none.mark(&mut request));
    assert_eq!(none.remaining(), 0);
    assert!(early_requests(&preface()).shared.is_some());
}
