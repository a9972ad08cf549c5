//! The `proxy` example in front of the `axum` example: every byte of the demo responses
//! comes back through it (its upstream client is `tls_flush::client::FlushConnector`), the
//! pinned `priority` header too, and an unreachable upstream is a 502.

#[macro_use]
mod support;

use examples::responses::{BG_LEN, CRITICAL_LEN};
use http::StatusCode;
use support::*;

const H2: &[&[u8]] = &[b"h2"];

#[tokio::test]
async fn proxy_in_front_of_the_axum_example() {
    let dir = scratch_dir("proxy", &["axum"]);
    let (_, cert_pem, key_pem) = examples::tls::self_signed_pem().unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, cert_pem).unwrap();
    std::fs::write(&key, key_pem).unwrap();
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());

    let upstream = Server::start("axum", &["--cert", cert, "--key", key]).await;
    let url = format!("https://127.0.0.1:{}", upstream.addr.port());
    let proxy = Server::start("proxy", &["--upstream", &url, "--upstream-ca", cert]).await;

    let mut c = h2_connect(proxy.addr, insecure_client(H2), "localhost", None).await;
    let r = c.get("/critical", &[("priority", "u=7")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r.headers, "priority"), "u=0", "pinned upstream");
    assert_pattern(&r.body, CRITICAL_LEN, "/critical");
    let r = c.get("/bg/x", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_pattern(&r.body, BG_LEN, "/bg/x");
    let r = c.get("/size/100", &[]).await;
    assert_pattern(&r.body, 100, "/size/100");
    let r = c.get("/no-such-route", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // The same requests straight from the upstream give the same bytes.
    let mut direct = h2_connect(upstream.addr, insecure_client(H2), "localhost", None).await;
    let d = direct.get("/critical", &[]).await;
    let p = c.get("/critical", &[]).await;
    assert_eq!(d.body, p.body);

    // The upstream gone: 502.
    drop(upstream);
    let r = c.get("/critical", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
}
