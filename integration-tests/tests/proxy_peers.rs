//! The `proxy` example (`examples/examples/proxy.rs`, whose upstream client is
//! `tls_flush::client::FlushConnector`) in front of real servers: nginx and h2o serve the
//! lab's fixture, and every byte of every response through the proxy, three of them at once
//! on one connection, equals the file the peer serves (compared byte for byte, SHA-256 in
//! the message). The proxy binary is the examples crate's: `cargo build -p examples
//! --examples` (or `cargo test -p examples`) builds it into the same target directory.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use integration_tests::client::Trust;
use integration_tests::first_request::{client_config, ClientCase};
use integration_tests::peers::{PeerKind, PeerServer};
use integration_tests::workload::{BACKGROUND_PATHS, CRITICAL_PATH};
use integration_tests::BoxError;
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use support::{peer_installed, runnable, serial};

/// The built `proxy` example beside this test's executable (`target/<profile>/deps/`).
fn proxy_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe
        .parent()?
        .parent()?
        .join("examples")
        .join(format!("proxy{}", std::env::consts::EXE_SUFFIX));
    let check = if path.exists() {
        Ok(())
    } else {
        Err(format!(
            "{} is not built: run `cargo build -p examples --examples` first",
            path.display()
        ))
    };
    runnable("proxy in front of the peers", check).then_some(path)
}

/// The proxy, running in front of `peer`; killed when dropped.
struct Proxy {
    addr: std::net::SocketAddr,
    _child: Child,
}

async fn start_proxy(binary: &PathBuf, peer: &PeerServer) -> Result<Proxy, BoxError> {
    let upstream = format!("https://{}", peer.addr());
    let mut child = Command::new(binary)
        .args([
            "--addr",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--upstream-ca",
        ])
        .arg(peer.layout().cert())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(20), stdout.read_line(&mut line)).await??;
    let addr = line
        .trim_end()
        .strip_prefix("listening on https://")
        .ok_or_else(|| format!("unexpected first line {line:?}"))?
        .parse()?;
    Ok(Proxy {
        addr,
        _child: child,
    })
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// GETs the fixture's three files at once on one HTTP/2 connection to the proxy and
/// compares each body with the file `peer` serves.
async fn fetch_through(proxy: &Proxy, peer: &PeerServer) -> Result<(), BoxError> {
    let config = client_config(ClientCase::StockClient, &Trust::AnyCertificate)?;
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::clone(&config))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
    let driver = tokio::spawn(connection);
    let paths = std::iter::once(CRITICAL_PATH).chain(BACKGROUND_PATHS);
    let fetches = paths.map(|path| {
        let mut sender = sender.clone();
        async move {
            let request = http::Request::get(format!("https://localhost{path}"))
                .body(http_body_util::Empty::<bytes::Bytes>::new())?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((path, status, body))
        }
    });
    for fetched in futures_util::future::join_all(fetches).await {
        let (path, status, body) = fetched?;
        let file = std::fs::read(peer.layout().htdocs().join(&path[1..]))?;
        if status != http::StatusCode::OK || body[..] != file[..] {
            return Err(format!(
                "{} {path}: status {status}, {} bytes sha256 {}; the file: {} bytes sha256 {}",
                peer.kind(),
                body.len(),
                sha256(&body),
                file.len(),
                sha256(&file)
            )
            .into());
        }
    }
    drop(sender);
    driver.abort();
    Ok(())
}

#[test]
fn proxy_in_front_of_nginx_and_h2o_returns_every_byte() {
    let Some(binary) = proxy_binary() else {
        return;
    };
    let _serial = serial();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for kind in [PeerKind::Nginx, PeerKind::H2o] {
        if !peer_installed(kind) {
            continue;
        }
        let peer = PeerServer::start(kind).unwrap();
        rt.block_on(async {
            let proxy = start_proxy(&binary, &peer).await.unwrap();
            // Twice: the second time over the proxy's pooled upstream connection.
            for round in 0..2 {
                fetch_through(&proxy, &peer)
                    .await
                    .unwrap_or_else(|e| panic!("{kind}, round {round}: {e}; {}", peer.logs()));
            }
        });
        drop(peer);
    }
}
