//! End-to-end tests of the example servers: each test runs against both the `axum` and the
//! `hyper` example binary, started with `--addr 127.0.0.1:0`, through real HTTP/2 (`h2`
//! crate) and HTTP/1.1 (hyper client) clients over tokio-rustls.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use examples::responses::{BG_LEN, CRITICAL_LEN, MAX_DELAY_MS, MAX_SIZE};
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::ServerName;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const H2: &[&[u8]] = &[b"h2"];
const H1: &[&[u8]] = &[b"http/1.1"];

/// Every route over HTTP/2 with the generated certificate: bodies byte-exact, status,
/// content types, pinned `priority` response headers, 400/404 paths, HEAD at the size limit.
async fn routes_over_h2(name: &'static str) {
    let server = Server::start(name, &[]).await;
    let mut c = h2_connect(server.addr, insecure_client(H2), "localhost", None).await;

    // The client asks for u=7; the route pins u=0 and says so.
    let r = c.get("/critical", &[("priority", "u=7")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r.headers, "priority"), "u=0");
    assert_eq!(
        header(&r.headers, "content-type"),
        "application/octet-stream"
    );
    assert_eq!(header(&r.headers, "content-length"), "4096");
    assert_eq!(r.body.len() as u64, CRITICAL_LEN);
    for (i, b) in r.body.iter().enumerate() {
        assert_eq!(*b, (i % 251) as u8, "/critical byte {i}");
    }

    // Background follows the client: nothing pinned, so no priority header.
    let r = c.get("/bg/x", &[("priority", "u=5, i")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r.headers, "priority"), "");
    assert_eq!(
        header(&r.headers, "content-type"),
        "application/octet-stream"
    );
    assert_eq!(header(&r.headers, "content-length"), "1048576");
    assert_pattern(&r.body, BG_LEN, "/bg/x");

    let r = c.get("/size/100", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        header(&r.headers, "content-type"),
        "application/octet-stream"
    );
    assert_pattern(&r.body, 100, "/size/100");

    let r = c.get("/size/0", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());

    // The limit itself is accepted (HEAD, so 64 MiB are not transferred).
    let r = c.fetch("HEAD", &format!("/size/{MAX_SIZE}"), &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r.headers, "content-length"), MAX_SIZE.to_string());
    assert!(r.body.is_empty());

    let r = c.get(&format!("/size/{}", MAX_SIZE + 1), &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(header(&r.headers, "content-type").starts_with("text/plain"));
    let reason = String::from_utf8(r.body).unwrap();
    assert!(reason.contains("67108864"), "{reason}");

    let r = c.get("/size/abc", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(header(&r.headers, "content-type").starts_with("text/plain"));
    assert!(!r.body.is_empty());

    let r = c.get("/", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        header(&r.headers, "content-type"),
        "text/html; charset=utf-8"
    );
    assert_eq!(header(&r.headers, "priority"), "u=0");
    let html = String::from_utf8(r.body).unwrap();
    assert!(
        html.contains("/critical") && html.matches("/bg/").count() >= 2,
        "{html}"
    );

    let r = c.get("/nope", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = c.fetch("POST", "/critical", &[]).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// `/delay/50` answers the 4096 pattern bytes of `/critical` no sooner than 50 ms after the
/// request, without pinning a priority (it follows the client); `/delay/10001` (over the
/// 10 s limit) and `/delay/abc` are 400 with a plain-text reason.
async fn delay_route(name: &'static str) {
    let server = Server::start(name, &[]).await;
    let mut c = h2_connect(server.addr, insecure_client(H2), "localhost", None).await;

    let started = Instant::now();
    let r = c.get("/delay/50", &[("priority", "u=6")]).await;
    let took = started.elapsed();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r.headers, "priority"), "", "not pinned");
    assert_eq!(
        header(&r.headers, "content-type"),
        "application/octet-stream"
    );
    assert_eq!(header(&r.headers, "content-length"), "4096");
    assert_pattern(&r.body, CRITICAL_LEN, "/delay/50");
    assert!(
        took >= Duration::from_millis(50),
        "/delay/50 answered after {took:?}"
    );

    let too_long = format!("/delay/{}", MAX_DELAY_MS + 1);
    for path in [too_long.as_str(), "/delay/abc"] {
        let r = c.get(path, &[]).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(
            header(&r.headers, "content-type").starts_with("text/plain"),
            "{path}"
        );
        let reason = String::from_utf8(r.body).unwrap();
        assert!(reason.contains("delay"), "{path}: {reason}");
        if path == too_long {
            assert!(reason.contains("10000"), "{path}: {reason}");
        }
    }
}

/// The seed workload on one HTTP/2 connection, under every policy: two 1 MiB downloads and
/// the critical response requested together; all three complete byte-exact.
async fn concurrent_workload_over_h2(name: &'static str) {
    for policy in policies() {
        concurrent_workload_with(name, policy).await;
    }
}

async fn concurrent_workload_with(name: &'static str, policy: &'static str) {
    let server = Server::start(name, &["--policy", policy]).await;
    let c = h2_connect(server.addr, insecure_client(H2), "localhost", None).await;
    let fetch = |path: &'static str, prio: &'static str| {
        let mut c = H2 {
            send: c.send.clone(),
            authority: c.authority.clone(),
            peer_cert: c.peer_cert.clone(),
            records: c.records.clone(),
        };
        tokio::spawn(async move { c.get(path, &[("priority", prio)]).await })
    };
    let a = fetch("/bg/a", "u=5, i");
    let b = fetch("/bg/b", "u=5, i");
    let crit = fetch("/critical", "u=0");
    let crit = crit.await.unwrap();
    assert_eq!(header(&crit.headers, "priority"), "u=0");
    assert_pattern(&crit.body, CRITICAL_LEN, "/critical");
    assert_pattern(&a.await.unwrap().body, BG_LEN, "/bg/a");
    assert_pattern(&b.await.unwrap().body, BG_LEN, "/bg/b");
}

/// Without `--cert/--key` the server generates a self-signed leaf (not a CA) valid for
/// `localhost` and `127.0.0.1`: a webpki client trusting it as a root accepts it under both
/// names and rejects it for another name. That rejected handshake, and a plaintext request
/// on the TLS port, drop only their own connections: an open one keeps working.
async fn generated_certificate(name: &'static str) {
    let server = Server::start(name, &[]).await;
    let mut first = h2_connect(server.addr, insecure_client(H2), "localhost", None).await;
    let cert = first.peer_cert.clone();

    for server_name in ["localhost", "127.0.0.1"] {
        let mut c = h2_connect(
            server.addr,
            trusting_client(cert.clone(), H2),
            server_name,
            None,
        )
        .await;
        let r = c.get("/critical", &[]).await;
        assert_pattern(&r.body, CRITICAL_LEN, server_name);
    }

    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let wrong = ServerName::try_from("example.com").unwrap();
    let res = within(
        "handshake as example.com",
        TlsConnector::from(trusting_client(cert, H2)).connect(wrong, tcp),
    )
    .await;
    assert!(
        res.is_err(),
        "certificate must not be valid for example.com"
    );

    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The server drops the connection (it may first send a TLS alert).
    within("plaintext connection closed", tcp.read_to_end(&mut buf))
        .await
        .ok();

    let r = first.get("/size/100", &[]).await;
    assert_pattern(&r.body, 100, "after failed handshakes");
}

/// `--cert/--key`: the server presents the PEM certificate the test generated, and a client
/// trusting only that certificate fetches `/critical` over HTTP/2.
async fn provided_certificate(name: &'static str) {
    let dir = std::env::temp_dir().join(format!(
        "examples-test-{}-{name}-{}",
        std::process::id(),
        line!()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();

    let server = Server::start(
        name,
        &[
            "--cert",
            cert_path.to_str().unwrap(),
            "--key",
            key_path.to_str().unwrap(),
        ],
    )
    .await;
    let mut c = h2_connect(
        server.addr,
        trusting_client(cert.der().clone(), H2),
        "localhost",
        None,
    )
    .await;
    assert_eq!(
        c.peer_cert,
        *cert.der(),
        "server presents the given certificate"
    );
    let r = c.get("/critical", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r.headers, "priority"), "u=0");
    assert_pattern(&r.body, CRITICAL_LEN, "/critical");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--record-size 1024` reaches rustls: every record the server sends fits in 1024 bytes
/// of plaintext including the header (at most 1019 + 1 content type + 16 tag = 1036 bytes
/// of ciphertext), and the 4 KiB response still arrives byte-exact.
async fn record_size(name: &'static str) {
    let server = Server::start(name, &["--record-size", "1024"]).await;
    let mut c = h2_connect(server.addr, insecure_client(H2), "localhost", None).await;
    let r = c.get("/critical", &[]).await;
    assert_pattern(&r.body, CRITICAL_LEN, "/critical");
    let lengths = c.records.lock().unwrap().lengths.clone();
    let max = *lengths.iter().max().unwrap();
    assert!(
        max <= 1036,
        "record of {max} bytes with --record-size 1024: {lengths:?}"
    );
    assert!(
        lengths.iter().filter(|&&l| l >= 1000).count() >= 4,
        "the 4 KiB body should fill several records: {lengths:?}"
    );
}

/// HTTP/1.1 on the same listener, with ALPN `http/1.1` and without ALPN, under every
/// policy: keep-alive requests on one connection, the pinned `priority` header, byte-exact
/// bodies, 400.
async fn http1(name: &'static str) {
    for policy in policies() {
        http1_with(name, policy).await;
    }
}

async fn http1_with(name: &'static str, policy: &'static str) {
    let server = Server::start(name, &["--policy", policy]).await;
    for alpn in [H1, &[][..]] {
        let (tls, _) = tls_connect(server.addr, insecure_client(alpn), "localhost").await;
        let negotiated = tls.get_ref().1.alpn_protocol().map(|p| p.to_vec());
        assert_eq!(negotiated, alpn.first().map(|p| p.to_vec()), "ALPN");
        let (mut send, conn) = within(
            "h1 handshake",
            ::hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(tls)),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        for (path, status, len) in [
            ("/critical", 200, Some(CRITICAL_LEN)),
            ("/bg/x", 200, Some(BG_LEN)),
            ("/size/100", 200, Some(100)),
            ("/size/67108865", 400, None),
            ("/", 200, None),
        ] {
            let req = http::Request::get(path)
                .header("host", "localhost")
                .body(Empty::new())
                .unwrap();
            let res = within("h1 response", send.send_request(req)).await.unwrap();
            assert_eq!(res.status().as_u16(), status, "{path}");
            assert_eq!(res.version(), http::Version::HTTP_11);
            let pinned = path == "/critical" || path == "/";
            assert_eq!(
                header(res.headers(), "priority"),
                if pinned { "u=0" } else { "" },
                "{path}"
            );
            let body = within("h1 body", res.into_body().collect())
                .await
                .unwrap()
                .to_bytes();
            if let Some(len) = len {
                assert_pattern(&body, len, path);
            }
        }
    }
}

/// `--policy bogus` is a usage error: exit status 2, and the message lists the valid
/// policies.
async fn bogus_policy(name: &'static str) {
    let out = within(
        "bogus policy exit",
        tokio::process::Command::new(example_path(name))
            .args(["--addr", "127.0.0.1:0", "--policy", "bogus"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus") && err.contains("stock"), "{err}");
}

/// SIGTERM with a download stalled on flow control: see `support::check_graceful_shutdown`.
async fn graceful_shutdown(name: &'static str) {
    check_graceful_shutdown(name).await;
}

for_both!(
    routes_over_h2,
    delay_route,
    concurrent_workload_over_h2,
    generated_certificate,
    provided_certificate,
    record_size,
    http1,
    bogus_policy,
    graceful_shutdown,
);
