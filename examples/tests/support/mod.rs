//! Test support: run an example binary, TLS clients (h2 and HTTP/1.1), a TLS record tap,
//! and body checks.

#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use examples::pattern_byte;
use examples::tls::AcceptAnyCert;
use http::{HeaderMap, Request, StatusCode};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use sha2::{Digest, Sha256};
use tls_flush_testkit::poll_read_observed;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout, Command};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

// The h2 client's handshake, body readers and timeouts, shared with tls-flush's serve tests.
// Each test binary uses some of them.
#[allow(unused_imports)]
pub use tls_flush_testkit::h2_client::{h2_handshake, read_all, read_unreleased, within};

/// `for_both!(a, b)` defines tests `axum::a`, `hyper::a`, `axum::b`, ...: each runs the
/// crate-level `async fn a(name)` against the example server `name`.
// Not every test binary has tests for both servers.
#[allow(unused_macros)]
macro_rules! for_both {
    ($($test:ident),* $(,)?) => {
        mod axum {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test("axum").await
                }
            )*
        }
        mod hyper {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test("hyper").await
                }
            )*
        }
    };
}

/// Every `--policy` value: `stock` (hyper + rustls without the wrapper), then every
/// `tls_flush::Policy`.
pub fn policies() -> impl Iterator<Item = &'static str> {
    std::iter::once(examples::cli::STOCK).chain(tls_flush::Policy::ALL.map(tls_flush::Policy::name))
}

/// Path of a built example binary: the test executable is
/// `target/<profile>/deps/<test>-<hash>`, the examples are in `target/<profile>/examples/`.
pub fn example_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable is in target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} does not exist: build the examples first (`cargo test -p examples` does, \
         or `cargo build -p examples --examples`)",
        path.display()
    );
    path
}

/// The servers' `RUST_LOG`: debug for the examples and for tls-flush's server, which logs
/// each connection's counters when it closes (see [`counters`]).
pub const LOG_FILTER: &str = "info,examples=debug,tls_flush::serve=debug";

/// A running example server, killed when dropped. Its stderr (tracing) is collected and
/// printed if the test fails.
pub struct Server {
    pub name: &'static str,
    pub addr: SocketAddr,
    pub child: Child,
    _stdout: BufReader<ChildStdout>,
    logs: Arc<Mutex<String>>,
}

impl Server {
    /// Starts example `name` with `--addr 127.0.0.1:0` and `extra` arguments, and reads the
    /// bound address from the first stdout line.
    pub async fn start(name: &'static str, extra: &[&str]) -> Server {
        let mut child = Command::new(example_path(name))
            .args(["--addr", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", LOG_FILTER)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let logs = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = logs.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let n = within("first stdout line", stdout.read_line(&mut line))
            .await
            .expect("read stdout");
        assert!(
            n > 0,
            "{name} exited before printing its address: {}",
            logs.lock().unwrap()
        );
        let addr = line
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("listening on https://"))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap_or_else(|e| panic!("bad address in {line:?}: {e}"));
        Server {
            name,
            addr,
            child,
            _stdout: stdout,
            logs,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("server still running")
    }

    /// Everything the server wrote to stderr (its tracing output) so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// Sends SIGTERM with the `kill` command.
    pub fn sigterm(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {} server stderr ---\n{}",
                self.name,
                self.logs.lock().unwrap()
            );
        }
        let _ = self.child.start_kill();
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Client config accepting any certificate, offering `alpn`.
pub fn insecure_client(alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider())))
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

/// Client config trusting only `root`, offering `alpn`.
pub fn trusting_client(root: CertificateDer<'static>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(root).unwrap();
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

/// TLS record lengths (the 2-byte length field of each record header) seen on the
/// server-to-client direction.
#[derive(Debug, Default)]
pub struct RecordLog {
    header: Vec<u8>,
    body_left: usize,
    pub lengths: Vec<usize>,
}

impl RecordLog {
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.header.len() == 5 {
                let len = u16::from_be_bytes([self.header[3], self.header[4]]) as usize;
                self.lengths.push(len);
                self.body_left = len;
                self.header.clear();
            }
        }
    }
}

/// A TCP stream that logs the TLS records it reads.
pub struct Tapped {
    inner: TcpStream,
    pub log: Arc<Mutex<RecordLog>>,
}

impl AsyncRead for Tapped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Tapped { inner, log } = &mut *self;
        poll_read_observed(inner, cx, buf, |new| log.lock().unwrap().feed(new))
    }
}

impl AsyncWrite for Tapped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Connects TCP + TLS to `addr` as `server_name`, with the TLS record tap.
pub async fn tls_connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    server_name: &str,
) -> (TlsStream<Tapped>, Arc<Mutex<RecordLog>>) {
    let tcp = within("TCP connect", TcpStream::connect(addr))
        .await
        .expect("TCP connect");
    tcp.set_nodelay(true).unwrap();
    let log = Arc::new(Mutex::new(RecordLog::default()));
    let tapped = Tapped {
        inner: tcp,
        log: log.clone(),
    };
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let tls = within(
        "TLS handshake",
        TlsConnector::from(config).connect(name, tapped),
    )
    .await
    .unwrap_or_else(|e| panic!("TLS handshake as {server_name}: {e}"));
    (tls, log)
}

/// An HTTP/2 client connection.
pub struct H2 {
    pub send: h2::client::SendRequest<Bytes>,
    pub authority: String,
    pub peer_cert: CertificateDer<'static>,
    pub records: Arc<Mutex<RecordLog>>,
}

/// Connects and runs the HTTP/2 handshake (large windows unless `window` is given);
/// asserts that ALPN negotiated `h2`.
pub async fn h2_connect(
    addr: SocketAddr,
    config: Arc<ClientConfig>,
    server_name: &str,
    window: Option<u32>,
) -> H2 {
    let (tls, records) = tls_connect(addr, config, server_name).await;
    let (_, conn) = tls.get_ref();
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]), "ALPN");
    let peer_cert = conn.peer_certificates().unwrap()[0].clone().into_owned();
    let (send, connection) = h2_handshake(tls, window).await;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    H2 {
        send,
        authority: addr.to_string(),
        peer_cert,
        records,
    }
}

/// A response with its whole body.
#[derive(Debug)]
pub struct Fetched {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl H2 {
    /// Sends a request with `method`, `path` and `headers`, without waiting for the body.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> http::Response<h2::RecvStream> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let send = within("h2 ready", self.send.clone().ready())
            .await
            .expect("h2 ready");
        let mut send = send;
        let (res, _) = send
            .send_request(req.body(()).unwrap(), true)
            .expect("send_request");
        within("h2 response", res).await.expect("h2 response")
    }

    /// `GET path` with `headers`, the whole body read.
    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Fetched {
        self.fetch("GET", path, headers).await
    }

    /// A request with `method`, the whole body read.
    pub async fn fetch(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) -> Fetched {
        let res = self.request(method, path, headers).await;
        let (parts, mut body) = res.into_parts();
        let body = within("h2 body", read_all(&mut body, usize::MAX)).await;
        Fetched {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

/// Asserts that `body` is exactly the first `len` pattern bytes, comparing SHA-256 digests
/// and naming the first wrong offset if they differ.
pub fn assert_pattern(body: &[u8], len: u64, what: &str) {
    let expected: Vec<u8> = (0..len).map(pattern_byte).collect();
    if Sha256::digest(body) != Sha256::digest(&expected) {
        let first_bad = body
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(body.len().min(expected.len()));
        panic!(
            "{what}: body of {} bytes differs from the {len}-byte pattern at offset {first_bad}",
            body.len()
        );
    }
}

/// A header as a string, or "" when absent.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .map(|v| v.to_str().expect("ASCII header"))
        .unwrap_or("")
}

// ---------------------------------------------------------------------------------------
// Helpers for the real-client interop tests (examples/tests/interop.rs): the server's
// logs and tls-flush counters, and external tools (their JSON output is read with
// serde_json).
// ---------------------------------------------------------------------------------------

/// Where the interop tests' tools come from.
pub const INSTALL_HINT: &str =
    "install the interop test tools with `scripts/install-test-tools.sh` \
     (as root; it installs curl, nghttp2-client (nghttp, h2load), chromium and python h2)";

impl Server {
    /// Sends SIGTERM, waits for exit status 0 and for the server's last log line, and
    /// returns its whole stderr: every closed connection's tls-flush counters are in it.
    pub async fn stop(&mut self) -> String {
        self.sigterm();
        let status = within("server exit after SIGTERM", self.child.wait())
            .await
            .expect("wait for server");
        assert!(status.success(), "{} exited with {status:?}", self.name);
        within("server's last log line", async {
            loop {
                let logs = self.logs();
                if logs.lines().any(|l| l.contains("; exiting")) {
                    return logs;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }
}

/// One connection's counters line: the peer of the connection and the `StatsSnapshot`
/// fields tls-flush logged when it closed.
#[derive(Debug, Clone)]
pub struct Counters {
    pub peer: String,
    pub values: std::collections::BTreeMap<String, u64>,
}

impl Counters {
    /// The value of field `name` (e.g. `priority_updates_applied`); panics if absent.
    pub fn get(&self, name: &str) -> u64 {
        *self
            .values
            .get(name)
            .unwrap_or_else(|| panic!("no counter {name} in {self:?}"))
    }
}

/// Every counters line in `logs`: one per connection served with a `tls-flush` policy,
/// logged at debug level by `tls_flush::serve` when the connection closes, as
/// `tls-flush{peer=Some(IP:PORT)}: tls_flush::serve: closed counters=StatsSnapshot { .. }`.
pub fn counters(logs: &str) -> Vec<Counters> {
    logs.lines()
        .filter(|l| l.contains("counters=StatsSnapshot {"))
        .map(|line| {
            let peer = line
                .split_once("peer=Some(")
                .and_then(|(_, rest)| rest.split_once(')'))
                .map(|(peer, _)| peer.to_owned())
                .unwrap_or_default();
            let values = snapshot_fields(line)
                .unwrap_or_else(|e| panic!("unexpected counters line {line:?}: {e}"));
            Counters { peer, values }
        })
        .collect()
}

/// The fields of the `StatsSnapshot { name: value, ... }` (its `Debug` form) in `text`: a
/// `tls-flush counters` log line, or the body of the examples' `GET /stats`.
pub fn snapshot_fields(text: &str) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let fields = text
        .split_once("StatsSnapshot {")
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map(|(fields, _)| fields)
        .ok_or("no `StatsSnapshot { .. }`")?;
    fields
        .split(',')
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let (k, v) = f.split_once(':').ok_or(format!("bad counter {f:?}"))?;
            let v = v
                .trim()
                .parse()
                .map_err(|e| format!("bad counter {f:?}: {e}"))?;
            Ok((k.trim().to_owned(), v))
        })
        .collect()
}

/// Checks that `program` runs (`program version_args...`) and returns the first line of
/// what it printed; panics naming `scripts/install-test-tools.sh` if it is missing.
pub fn require_tool(program: &str, version_args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(version_args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}): {INSTALL_HINT}"));
    assert!(
        out.status.success(),
        "`{program} {}` failed ({}): {INSTALL_HINT}\n{}",
        version_args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    };
    String::from_utf8_lossy(text)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// Runs `cmd` to completion (stdin closed, stdout and stderr captured), killing it after
/// `limit`; panics if it cannot be started or times out.
pub async fn run_tool(what: &str, cmd: &mut Command, limit: Duration) -> std::process::Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what} ({e}): {INSTALL_HINT}"));
    tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// How many times each byte value occurs in the first `len` pattern bytes.
pub fn pattern_histogram(len: u64) -> [u64; 256] {
    let mut h = [0u64; 256];
    for (v, count) in h.iter_mut().enumerate().take(251) {
        *count = len / 251 + u64::from((v as u64) < len % 251);
    }
    h
}

/// SIGTERM during a download: the server `name` (default policy) stops accepting
/// connections but finishes the in-flight 1 MiB `/bg/x` response byte-exact, then exits
/// with status 0.
pub async fn check_graceful_shutdown(name: &'static str) {
    let mut server = Server::start(name, &[]).await;
    // Default 64 KiB windows and no capacity released: the download stalls mid-body.
    let mut c = h2_connect(
        server.addr,
        insecure_client(&[b"h2"]),
        "localhost",
        Some(65_535),
    )
    .await;
    let res = c.request("GET", "/bg/x", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut got = Vec::new();
    while got.len() < 32 * 1024 {
        let chunk = within("first DATA", body.data()).await.unwrap().unwrap();
        got.extend_from_slice(&chunk);
    }
    let partial = got.len();

    server.sigterm();

    // The listener closes...
    within("listener closed", async {
        while TcpStream::connect(server.addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // ...while the process waits for the response in flight.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "{name} exited with a response in flight"
    );

    body.flow_control().release_capacity(partial).unwrap();
    got.extend(within("rest of /bg/x", read_all(&mut body, usize::MAX)).await);
    assert_pattern(&got, examples::responses::BG_LEN, "/bg/x across shutdown");

    let status = within("server exit", server.child.wait()).await.unwrap();
    assert!(status.success(), "{name}: exit status {status:?}");
}

/// A fresh scratch directory `examples-{suite}-{pid}-{parts...}` for one test's files.
pub fn scratch_dir(suite: &str, parts: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "examples-{suite}-{}-{}",
        std::process::id(),
        parts.join("-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
