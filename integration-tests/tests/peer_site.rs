//! The browser lab's static sites: every installed peer ([`PeerOptions::site`]) and our own
//! site server ([`start_site_server`], stock and wrapped by every policy) serve a generated
//! site over HTTP/2 byte-identically, each file `200` with the `Content-Type` of
//! [`SITE_CONTENT_TYPES`] and cacheable by a browser (`Last-Modified` or `ETag`, and no
//! `Cache-Control: no-store`); the peers' fixture still works beside it.
//!
//! A peer that is not installed is skipped with one line naming `scripts/install-peers.sh`
//! (and fails the test under CI), as in `peers.rs`. Servers start processes and load the
//! two cores: one test at a time.

mod support;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, LAST_MODIFIED};
use integration_tests::peers::{PeerKind, PeerOptions, PeerServer, SITE_CONTENT_TYPES};
use integration_tests::server::ServerSetup;
use integration_tests::site_server::start_site_server;
use integration_tests::workload::CRITICAL_LEN;
use integration_tests::{ClientOptions, Response, TapClient};
use rand::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};
use support::{peer_installed, serial_async};

/// The generated site: two files of every extension of [`SITE_CONTENT_TYPES`], one to three
/// directories deep, as in the browser lab's pages, and their sizes: from one byte and
/// under one HTTP/2 frame (16 KiB) to a body of many frames and TLS records
/// (`busy/big.bin`, 1 MiB and an odd tail).
const SITE_FILES: &[(&str, usize)] = &[
    ("index.html", 1_200),
    ("article/index.html", 9_000),
    ("article/style.css", 4_000),
    ("article/print.css", 700),
    ("article/app.js", 60_000),
    ("article/lib/vendor.js", 150_000),
    ("article/font.woff2", 30_000),
    ("fonts/bold.woff2", 25_000),
    ("article/hero.png", 200_000),
    ("article/thumb.png", 5_000),
    ("media/clip.mp4", 500_000),
    ("media/intro/clip.mp4", 64_000),
    ("app/api/3.json", 800),
    ("app/api/v1/list.json", 17_000),
    ("busy/big.bin", (1 << 20) + 17),
    ("busy/small.bin", 1),
];

/// One generated file: its URL path, content and expected `Content-Type`.
struct SiteFile {
    url_path: String,
    bytes: Vec<u8>,
    content_type: &'static str,
}

/// A generated site in a fresh directory, removed when dropped.
struct TestSite {
    dir: PathBuf,
    files: Vec<SiteFile>,
}

impl TestSite {
    /// Writes [`SITE_FILES`], each of distinct pseudo-random bytes (seeded by its index, so
    /// that a run is repeatable and no two files are alike).
    fn generate() -> TestSite {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "peer-site-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        let files = SITE_FILES
            .iter()
            .zip(0u64..)
            .map(|(&(path, len), seed)| write_site_file(&dir, path, len, seed))
            .collect();
        TestSite { dir, files }
    }
}

impl Drop for TestSite {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Writes `len` pseudo-random bytes (from `seed`) at `dir/path` and describes the file.
fn write_site_file(dir: &Path, path: &str, len: usize, seed: u64) -> SiteFile {
    let mut bytes = vec![0; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    let file = dir.join(path);
    fs::create_dir_all(file.parent().expect("a file in the site")).expect("site directory");
    fs::write(&file, &bytes).expect("site file");
    let extension = path.rsplit_once('.').expect("an extension").1;
    let content_type = SITE_CONTENT_TYPES
        .iter()
        .find(|(known, _)| *known == extension)
        .unwrap_or_else(|| panic!("{path}: not a site extension"))
        .1;
    SiteFile {
        url_path: format!("/{path}"),
        bytes,
        content_type,
    }
}

/// Fetches every file of `site` from `server` over one HTTP/2 connection, asserts that it
/// is served as it should be ([`check_file`]), and prints the caching headers it sent.
async fn check_serves(server: &str, addr: SocketAddr, options: ClientOptions, site: &TestSite) {
    let client = TapClient::connect(addr, options)
        .await
        .unwrap_or_else(|e| panic!("{server}: {e}"));
    let mut caching = Vec::new();
    for file in &site.files {
        let response = client
            .get(&file.url_path, None)
            .await
            .unwrap_or_else(|e| panic!("{server} {}: {e}", file.url_path));
        check_file(server, file, &response);
        caching.push(caching_headers(&response));
    }
    caching.dedup();
    println!("{server}: every file typed as expected; caching headers: {caching:?}");
}

/// Asserts that `response` is `file`: status, bytes, `Content-Type`, cacheability.
#[track_caller]
fn check_file(server: &str, file: &SiteFile, response: &Response) {
    let what = format!("{server} {}", file.url_path);
    assert_eq!(response.status, http::StatusCode::OK, "{what}");
    assert_eq!(response.len, file.bytes.len() as u64, "{what}: length");
    let sha256: [u8; 32] = Sha256::digest(&file.bytes).into();
    assert!(response.sha256 == sha256, "{what}: bytes differ");
    let content_type = response.headers.get(CONTENT_TYPE);
    assert_eq!(
        content_type.map(|v| v.as_bytes()),
        Some(file.content_type.as_bytes()),
        "{what}"
    );
    let headers = &response.headers;
    assert!(
        headers.contains_key(LAST_MODIFIED) || headers.contains_key(ETAG),
        "{what}: neither Last-Modified nor ETag in {headers:?}"
    );
    let no_store = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .any(|v| v.to_str().unwrap_or_default().contains("no-store"));
    assert!(!no_store, "{what}: Cache-Control: no-store");
}

/// The caching headers `response` has: the names of `Last-Modified` and `ETag` (whose
/// values differ per file), and `Cache-Control` with its value.
fn caching_headers(response: &Response) -> Vec<String> {
    let mut present: Vec<String> = [LAST_MODIFIED, ETAG]
        .into_iter()
        .filter(|name| response.headers.contains_key(name))
        .map(|name| name.to_string())
        .collect();
    present.extend(
        response
            .headers
            .get_all(CACHE_CONTROL)
            .iter()
            .map(|value| format!("{CACHE_CONTROL}: {value:?}")),
    );
    present
}

/// Starts `kind` with the generated site, checks every file and the fixture beside it.
async fn peer_serves_the_site(kind: PeerKind) {
    if !peer_installed(kind) {
        return;
    }
    let _one = serial_async().await;
    let site = TestSite::generate();
    let options = PeerOptions {
        site: Some(site.dir.clone()),
        ..PeerOptions::default()
    };
    let peer = tokio::task::spawn_blocking(move || PeerServer::start_with(kind, &options))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let trusting = ClientOptions::trusting(peer.certificate().clone());
    check_serves(kind.name(), peer.addr(), trusting.clone(), &site).await;
    let client = TapClient::connect(peer.addr(), trusting).await.unwrap();
    let critical = client.get("/critical", None).await.unwrap();
    critical
        .check_pattern(CRITICAL_LEN)
        .unwrap_or_else(|e| panic!("{kind} /critical beside the site: {e}"));
    drop(client);
    tokio::task::spawn_blocking(move || drop(peer))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_serves_the_site_typed_and_cacheable() {
    peer_serves_the_site(PeerKind::Nginx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nghttpd_serves_the_site_typed_and_cacheable() {
    peer_serves_the_site(PeerKind::Nghttpd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2o_serves_the_site_typed_and_cacheable() {
    peer_serves_the_site(PeerKind::H2o).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_serves_the_site_typed_and_cacheable() {
    peer_serves_the_site(PeerKind::Apache).await;
}

/// Our site server, stock and wrapped by every policy, serves the same site alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_site_server_serves_the_site_typed_and_cacheable() {
    let _one = serial_async().await;
    let site = TestSite::generate();
    let any_port: SocketAddr = ([127, 0, 0, 1], 0).into();
    for (name, setup) in ServerSetup::all() {
        let server = start_site_server(setup, &site.dir, any_port)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        check_serves(name, server.addr, server.client_options(), &site).await;
    }
    let missing = site.dir.join("none");
    let refused = start_site_server(ServerSetup::default(), &missing, any_port).await;
    assert!(refused.is_err(), "a site that is not a directory");
}
