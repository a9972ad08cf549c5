//! Headless Chromium against the axum example, `--policy scheduled` and `--policy stock`:
//! the browser loads `/`, whose script fetches `/critical` and two `/bg/...` resources and
//! checks every byte itself (see `examples::responses::INDEX_HTML`); the test reads the
//! verdict from the DOM that Chromium dumps, checks in the server's log that every request
//! came over HTTP/2, and prints the `priority` request headers Chromium sent (real-world
//! input for our defaults). The report goes straight to stderr, so it shows in `cargo test` output even
//! when the test passes.
//!
//! Needs Debian's `chromium` on `PATH`: `scripts/install-test-tools.sh` installs it.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use examples::responses::{BG_LEN, CRITICAL_LEN};
use support::Server;
use tls_flush_testkit::CHROMIUM_FLAGS;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// The browser binary (Debian package `chromium`).
const CHROMIUM: &str = "chromium";

/// Bound for one whole test: server start, browser run, log collection.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// With the shared [`CHROMIUM_FLAGS`] (no sandbox, no QUIC, no certificate checks, no
/// background traffic): headless, then `--dump-dom`, print the DOM once the page has
/// settled. `--virtual-time-budget` makes headless Chromium wait for the page's pending
/// network fetches (virtual time does not advance while they run) before dumping; once the
/// page is idle the remaining budget elapses instantly, so a generous value costs nothing.
const FLAGS: &[&str] = &["--headless", "--virtual-time-budget=30000", "--dump-dom"];

/// Hint for a page or log from an example binary older than this test (`cargo test -p
/// examples --test browser` alone does not rebuild the examples).
const STALE: &str = "the example binary looks older than this test: rebuild it with \
                     `cargo build -p examples --examples` (plain `cargo test -p examples` does)";

/// The paths the page loads (the document and its three fetches).
const PAGE_PATHS: [&str; 4] = ["/", "/critical", "/bg/one", "/bg/two"];

/// `chromium --version`, or a panic naming the install script.
fn chromium_version() -> String {
    let out = std::process::Command::new(CHROMIUM)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `{CHROMIUM}` ({e}): install it with scripts/install-test-tools.sh")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let version = stdout
        .lines()
        .find(|l| l.starts_with("Chromium"))
        .unwrap_or_else(|| {
            panic!(
                "`{CHROMIUM} --version` did not print a version ({:?}, stderr {:?}): \
                 install it with scripts/install-test-tools.sh",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    version.trim().to_owned()
}

/// A fresh `--user-data-dir`, removed when dropped.
struct ProfileDir(PathBuf);

impl ProfileDir {
    fn new(tag: &str) -> ProfileDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "examples-chromium-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        ProfileDir(dir)
    }
}

impl Drop for ProfileDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running Chromium in its own process group. Unless it has exited and been reaped,
/// dropping it kills the whole group (browser, zygote, renderers: the group id is the
/// browser's pid, which stays ours until reaped), and the browser itself by
/// `kill_on_drop`.
struct Browser {
    child: Child,
    reaped: bool,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.start_kill();
    }
}

/// Reads `pipe` to its end in a task.
fn collect(mut pipe: impl AsyncRead + Unpin + Send + 'static) -> JoinHandle<Vec<u8>> {
    tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf).await;
        buf
    })
}

/// Runs headless Chromium on `url` with a fresh profile and returns the dumped DOM.
/// Panics (killing the browser) if it does not exit successfully.
async fn dump_dom(url: &str, profile: &ProfileDir) -> String {
    let mut child = Command::new(CHROMIUM)
        .args(FLAGS)
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.0.display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("spawn `{CHROMIUM}` ({e}): install it with scripts/install-test-tools.sh")
        });
    let stdout = collect(child.stdout.take().unwrap());
    let stderr = collect(child.stderr.take().unwrap());
    let mut browser = Browser {
        child,
        reaped: false,
    };
    let status = browser.child.wait().await.expect("wait for chromium");
    browser.reaped = true;
    // Helpers that outlive the browser could hold the pipes open: do not wait forever.
    let stdout = tokio::time::timeout(Duration::from_secs(10), stdout)
        .await
        .expect("chromium's stdout did not close")
        .unwrap();
    let stderr = tokio::time::timeout(Duration::from_secs(10), stderr)
        .await
        .map(|r| r.unwrap())
        .unwrap_or_default();
    let dom = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "chromium exited with {status}\n--- stdout ---\n{dom}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&stderr)
    );
    dom
}

/// One request as the server logged it (the `request priority header` debug line).
#[derive(Debug)]
struct Logged {
    path: String,
    version: String,
    /// The raw `priority` header values, as the `Debug` of a list of header values
    /// (`["u=0, i"]`, `[]` when absent).
    priority: String,
}

/// The `request priority header` lines in the server's log:
/// `... request priority header path=/ version=HTTP/2.0 priority=["u=0, i"]`.
fn logged_requests(logs: &str) -> Vec<Logged> {
    logs.lines()
        .filter_map(|line| {
            let rest = line.split_once("request priority header ")?.1;
            let rest = rest.strip_prefix("path=")?;
            let (path, rest) = rest.split_once(" version=")?;
            let (version, priority) = rest.split_once(" priority=")?;
            Some(Logged {
                path: path.to_owned(),
                version: version.to_owned(),
                priority: priority.to_owned(),
            })
        })
        .collect()
}

/// The text of each `<li>` in `dom` (the page's per-resource timings).
fn list_items(dom: &str) -> Vec<&str> {
    dom.split("<li>")
        .skip(1)
        .filter_map(|s| s.split_once("</li>").map(|(item, _)| item))
        .collect()
}

async fn load_index(policy: &'static str) {
    let started = Instant::now();
    let version = chromium_version();
    let server = Server::start("axum", &["--policy", policy]).await;
    let profile = ProfileDir::new(policy);
    let url = format!("https://127.0.0.1:{}/", server.addr.port());
    let dom = dump_dom(&url, &profile).await;

    let expected = format!("ok critical={CRITICAL_LEN} bg1={BG_LEN} bg2={BG_LEN}");
    assert!(dom.contains("<p id=\"result\">"), "{STALE}:\n{dom}");
    assert!(
        dom.contains(&format!("<p id=\"result\">{expected}</p>"))
            && dom.contains(&format!("<title>{expected}</title>")),
        "the page did not report `{expected}` (is it `loading` or `error: ...`?):\n{dom}"
    );

    // The page is done, so every request reached the server; its log may lag a little.
    let requests = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let requests = logged_requests(&server.logs());
            if PAGE_PATHS
                .iter()
                .all(|p| requests.iter().any(|r| r.path == *p))
            {
                return requests;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the server did not log a request for each of {PAGE_PATHS:?} \
             (without any `request priority header` line: {STALE}):\n{}",
            server.logs()
        )
    });
    for r in &requests {
        assert_eq!(r.version, "HTTP/2.0", "{r:?} was not HTTP/2");
    }

    let mut report =
        format!("{version}, axum example --policy {policy}: priority request headers sent\n");
    for r in &requests {
        report.push_str(&format!(
            "  {:<14} {} priority={}\n",
            r.path, r.version, r.priority
        ));
    }
    for item in list_items(&dom) {
        report.push_str(&format!("  page: {item}\n"));
    }
    report.push_str(&format!(
        "  page: {expected}; test took {:.1} s\n",
        started.elapsed().as_secs_f64()
    ));
    // Straight to the process's stderr: the test harness captures `eprintln!`, and these
    // values are the point of the test.
    let _ = std::io::stderr().lock().write_all(report.as_bytes());
}

async fn with_timeout(policy: &'static str) {
    tokio::time::timeout(TEST_TIMEOUT, load_index(policy))
        .await
        .unwrap_or_else(|_| panic!("timed out after {TEST_TIMEOUT:?} (--policy {policy})"));
}

#[tokio::test]
async fn chromium_loads_index_scheduled() {
    with_timeout("scheduled").await;
}

#[tokio::test]
async fn chromium_loads_index_stock() {
    with_timeout("stock").await;
}
