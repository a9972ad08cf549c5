//! What the integration tests share: when a test may skip (never under CI), one test at a
//! time within a file, a fresh runtime that fails the test when any task panicked, what the
//! process holds (RSS, tasks), a client of a test server, the fast link, the checks every
//! workload run must pass, and medians.
//!
//! Each test file that needs it says `mod support;`. No file uses every item, hence
//! `allow(dead_code)`.
#![allow(dead_code)]

use std::future::Future;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use integration_tests::link::LinkConfig;
use integration_tests::peers::PeerKind;
use integration_tests::tun::{self, NEEDS_ROOT};
use integration_tests::workload::{
    Case, RunResult, Urgencies, Workload, BACKGROUND_LEN, CRITICAL_LEN, LATE_THRESHOLD,
};
use integration_tests::{TapClient, TestServer};

// ---------------------------------------------------------------------------------------
// Skips.
// ---------------------------------------------------------------------------------------

/// Whether this runs under CI: the environment variable `CI` is `true` or `1` (CI exports
/// `CI=true`, and `.ci/run` does too).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether `test` can run: `Ok(())` yes; `Err(reason)` no, and then it is skipped with one
/// line on stderr, except under CI ([`in_ci`]), which installs everything and runs as root:
/// there it fails with the reason instead, so that a skip never hides a test.
pub fn runnable(test: &str, check: Result<(), String>) -> bool {
    let Err(reason) = check else {
        return true;
    };
    if in_ci() {
        panic!("{test} cannot run: {reason}; under CI (CI=true) every test must run");
    }
    // Past the test harness's output capture, so that the skip shows.
    let _ = writeln!(std::io::stderr(), "skipping {test}: {reason}");
    false
}

/// Whether a test that needs root (network namespaces, /dev/net/tun) can run.
pub fn have_root(test: &str) -> bool {
    let check = if tun::is_root() {
        Ok(())
    } else {
        Err(format!("{NEEDS_ROOT}; run as root to test it"))
    };
    runnable(test, check)
}

/// Whether the peer server `kind` is installed (`scripts/install-peers.sh`).
pub fn peer_installed(kind: PeerKind) -> bool {
    runnable(
        &format!("peer `{kind}`"),
        kind.binary()
            .map(drop)
            .map_err(|missing| missing.to_string()),
    )
}

// ---------------------------------------------------------------------------------------
// One at a time, and runtimes.
// ---------------------------------------------------------------------------------------

/// Held by a test that measures time or the process (cargo runs a file's tests in
/// parallel, on two cores here), so that it does not load, or count, another's work.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for the other tests of this file to be done with [`ONE_AT_A_TIME`] (from a test
/// without a runtime).
pub fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.blocking_lock()
}

/// [`serial`] from an async test.
pub async fn serial_async() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// Panics anywhere in the process, spawned tasks included (tokio catches those, so they
/// would not fail a test by themselves).
static PANICS: AtomicU64 = AtomicU64::new(0);

/// Runs `test` alone ([`serial`]) on a fresh two-worker runtime, dropped at the end (so
/// every task it spawned ends), and fails it if any task panicked meanwhile.
pub fn run_alone<F: Future<Output = ()>>(test: F) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::Relaxed);
            previous(info);
        }));
    });
    let _serial = serial();
    let panics = PANICS.load(Ordering::Relaxed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(test);
    drop(runtime);
    assert_eq!(PANICS.load(Ordering::Relaxed), panics, "no task panicked");
}

/// The test process's resident set size in KiB (`VmRSS`), and its peak so far (`VmHWM`).
pub fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Tasks alive on the current tokio runtime.
pub fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Polls `done` every 10 ms for up to `limit`; true if it held.
pub async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Servers, clients and links.
// ---------------------------------------------------------------------------------------

/// A tapped client of `server`, trusting its certificate, with `SO_RCVBUF` `recv_buffer`.
pub async fn client(server: &TestServer, recv_buffer: Option<usize>) -> TapClient {
    TapClient::connect(
        server.addr,
        integration_tests::ClientOptions {
            recv_buffer,
            ..server.client_options()
        },
    )
    .await
    .expect("connect")
}

/// 5 ms RTT, 200 Mbit/s, one BDP of queue: the lab's link (20 ms, 20 Mbit/s) ten times
/// faster, to keep the suite quick.
pub const FAST: LinkConfig = LinkConfig {
    rtt: Duration::from_millis(5),
    rate_mbit: 200.0,
    queue_bytes: None,
};

// ---------------------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------------------

/// Checks what holds in every run of `workload` with `urgencies` against `case`, whatever
/// the timing: the labels, when the critical request left, where every body byte went.
pub fn check_counts(r: &RunResult, case: &Case, workload: Workload, urgencies: Urgencies) {
    let label = format!("{case}/{workload}/{urgencies}: {r:?}");
    assert_eq!(
        (r.case.as_str(), r.workload, r.urgencies),
        (case.name(), workload, urgencies),
        "{label}"
    );
    match workload {
        Workload::Alone => assert_eq!(
            (
                r.background_bytes_at_critical_request,
                r.background_bytes_before_critical
            ),
            (0, 0),
            "{label}"
        ),
        Workload::Simultaneous => assert_eq!(r.background_bytes_at_critical_request, 0, "{label}"),
        Workload::Late => assert!(
            r.background_bytes_at_critical_request >= LATE_THRESHOLD as u64,
            "{label}"
        ),
    }
    assert!(
        r.background_bytes_at_critical_request <= r.background_bytes_before_critical,
        "{label}"
    );
    assert!(
        r.background_bytes_before_critical <= 2 * BACKGROUND_LEN,
        "{label}"
    );
    let payload = match workload {
        Workload::Alone => CRITICAL_LEN,
        _ => 2 * BACKGROUND_LEN + CRITICAL_LEN,
    };
    // Headers, frames and the handshake on top: under 5% of a fixture, a few KiB alone.
    let overhead = match workload {
        Workload::Alone => 16 * 1024,
        _ => payload / 20,
    };
    assert!(r.wire_bytes > payload, "{label}");
    // Every body byte crossed the wire in records of at most 16 KiB of plaintext (4 KiB for
    // stock-4k and nginx-4k)...
    let max_record = match case {
        Case::Stock4k | Case::Peer(PeerKind::Nginx4k) => 4096,
        _ => 16384,
    };
    assert!(
        r.tls_records as u64 >= payload / max_record,
        "{label}: too few records"
    );
    // ... and none of them is absurdly small on average (the smallest seen: h2o, about 230
    // records per MiB at start).
    assert!(
        (r.tls_records as u64) < (payload / 1024).max(8),
        "{label}: too many records"
    );
    assert!(r.wire_bytes < payload + overhead, "{label}: wire bytes");
    assert!(
        r.critical_first_byte_ms <= r.critical_complete_ms,
        "{label}"
    );
    assert!(r.critical_complete_ms <= r.fixture_complete_ms, "{label}");
}

/// The median of `values` (the upper one of an even count); sorts them.
pub fn median<T: PartialOrd + Copy>(values: &mut [T]) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable values"));
    values[values.len() / 2]
}

/// The cells of the Markdown table that starts at the line beginning with `header` in
/// `report` (the lab's output), one vector per row, the header and alignment rows left out.
pub fn markdown_table(report: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = report.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "no table `{header}` in:\n{report}");
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

/// Runs the lab with `args` plus `--json PATH`; returns the report and the JSON.
pub fn run_lab(args: &[&str], json_path: &std::path::Path) -> (String, serde_json::Value) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lab"))
        .args(args)
        .arg("--json")
        .arg(json_path)
        .output()
        .expect("the lab runs");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{}\n{report}\n{stderr}",
        output.status
    );
    let json = std::fs::read_to_string(json_path).expect("the JSON file");
    std::fs::remove_file(json_path).ok();
    println!("{report}");
    (
        report,
        serde_json::from_str(&json).expect("the JSON parses"),
    )
}
