//! Real clients against both example servers (`axum` and `hyper`), under every `--policy`:
//! curl (HTTP/2 and HTTP/1.1), nghttp (many concurrent streams, `priority` headers,
//! RFC 7540 priority signals), h2load (10,000 requests over 50 connections with 10
//! streams each), and a python `h2` client that sends valid and malformed PRIORITY_UPDATE
//! frames (tests/python/priority_update_client.py).
//!
//! The tools are installed by `scripts/install-test-tools.sh`; a missing tool fails the
//! test with a message naming it. Each test starts one server per policy, drives it with
//! the tool, then stops it with SIGTERM (it must exit 0) and reads the counters line
//! (`closed counters=StatsSnapshot { .. }`) tls-flush's server logged for every connection
//! when it closed (the servers run with `RUST_LOG=info,examples=debug,tls_flush::serve=debug`).
//! Run with `-- --nocapture` to see what each tool reported (versions, req/s, counters).

#[macro_use]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use examples::responses::{BG_LEN, CRITICAL_LEN};
use serde_json::Value;
use support::*;
use tokio::process::Command;

/// Bound for one run of a tool (h2load takes a few seconds against a debug build).
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// A fresh scratch directory for one test's files.
fn scratch_dir(test: &str, name: &str, policy: &str) -> PathBuf {
    support::scratch_dir("interop", &[test, name, policy])
}

/// Stops the server and returns the counters of the connections it served; with a
/// `tls-flush` policy there must be at least `min_connections` connections (at least one
/// with counters, see below), each logged counters line showing a working HPACK observer (it decoded every header block the client and the server
/// sent), and no malformed PRIORITY_UPDATE (real clients send none). Prints a digest.
async fn stop_and_check_counters(
    server: &mut Server,
    policy: &str,
    tool: &str,
    min_connections: usize,
) -> Vec<Counters> {
    let logs = server.stop().await;
    let all = counters(&logs);
    if policy == "stock" {
        assert!(
            all.is_empty(),
            "stock serves without the wrapper, yet counters were logged"
        );
        return all;
    }
    // tls-flush logs no counters for a connection that ended with an error (a client that
    // closed the socket without a TLS close_notify, as nghttp sometimes does): such
    // connections count as served, and only the others' counters are checked.
    let failed = logs
        .lines()
        .filter(|l| l.contains("tls_flush::serve: connection failed"))
        .count();
    assert!(
        !all.is_empty() && all.len() + failed >= min_connections,
        "{tool}: expected at least {min_connections} connections, got {} with counters and \
         {failed} without:\n{logs}",
        all.len()
    );
    let sum = |field: &str| all.iter().map(|c| c.get(field)).sum::<u64>();
    for c in &all {
        assert_eq!(
            c.get("hpack_failures"),
            0,
            "{tool}: HPACK observer gave up: {c:?}"
        );
    }
    if tool != "python h2" {
        assert_eq!(sum("priority_updates_invalid"), 0, "{tool}: {all:?}");
    }
    println!(
        "  [{}/{policy}] {tool}: {} connections, {} records, {} bytes, early cuts {}, \
         reordered {}, holds {}, updates applied/buffered/ignored/invalid {}/{}/{}/{}, \
         queued at close {}, max queued high water {}",
        server.name,
        all.len(),
        sum("records_written"),
        sum("bytes_written"),
        sum("early_cuts"),
        sum("data_frames_reordered"),
        sum("anticipation_holds"),
        sum("priority_updates_applied"),
        sum("priority_updates_buffered"),
        sum("priority_updates_ignored"),
        sum("priority_updates_invalid"),
        sum("queued_bytes"),
        all.iter()
            .map(|c| c.get("queued_bytes_high_water"))
            .max()
            .unwrap_or(0),
    );
    all
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ---------------------------------------------------------------------------------------
// curl
// ---------------------------------------------------------------------------------------

/// curl with `--http2` (both requests multiplexed with `--parallel`) and with `--http1.1`
/// (sequential, keep-alive), `-k` for the self-signed certificate: `/critical` and
/// `/size/300000` arrive byte-exact, `%{http_version}` is `2` and `1.1`, `/critical`
/// carries the pinned `priority: u=0` although the client asked for `u=7`, and `/size`
/// carries no `priority` header.
async fn curl(name: &'static str) {
    let version = require_tool("curl", &["--version"]);
    println!("[{name}] {version}");
    for policy in policies() {
        let mut server = Server::start(name, &["--policy", policy]).await;
        let dir = scratch_dir("curl", name, policy);
        for (flag, http_version) in [("--http2", "2"), ("--http1.1", "1.1")] {
            let urls = [
                ("/critical", CRITICAL_LEN, "u=0"),
                ("/size/300000", 300_000, ""),
            ];
            let mut cmd = Command::new("curl");
            cmd.args(["-sS", "-k", flag, "-H", "priority: u=7"])
                .args([
                    "-w",
                    "%{url} %{http_version} %{response_code} %{size_download} \
                     priority=[%header{priority}]\\n",
                ])
                .current_dir(&dir);
            if flag == "--http2" {
                cmd.arg("--parallel");
            }
            for (i, (path, _, _)) in urls.iter().enumerate() {
                cmd.arg(format!("https://{}{path}", server.addr))
                    .args(["-o", &format!("body{i}")]);
            }
            let out = run_tool("curl", &mut cmd, TOOL_TIMEOUT).await;
            let report = stdout_of(&out);
            assert!(
                out.status.success(),
                "[{name}/{policy}] curl {flag} failed ({}): {report}{}",
                out.status,
                stderr_of(&out)
            );
            for (i, (path, len, priority)) in urls.iter().enumerate() {
                let url = format!("https://{}{path}", server.addr);
                let line = report
                    .lines()
                    .find(|l| l.split(' ').next() == Some(url.as_str()))
                    .unwrap_or_else(|| panic!("no -w line for {url} in {report:?}"));
                let expected = format!("{url} {http_version} 200 {len} priority=[{priority}]");
                assert_eq!(line, expected, "[{name}/{policy}] curl {flag}");
                let body = std::fs::read(dir.join(format!("body{i}"))).unwrap();
                assert_pattern(
                    &body,
                    *len,
                    &format!("[{name}/{policy}] curl {flag} {path}"),
                );
            }
            println!(
                "  [{name}/{policy}] curl {flag}: {}",
                report.trim().replace('\n', "; ")
            );
        }
        // One HTTP/2 connection and one HTTP/1.1 connection.
        stop_and_check_counters(&mut server, policy, "curl", 2).await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// ---------------------------------------------------------------------------------------
// nghttp
// ---------------------------------------------------------------------------------------

/// One HAR entry nghttp wrote: URL, status, body bytes received, `priority` header.
#[derive(Debug)]
struct HarEntry {
    url: String,
    status: u64,
    size: u64,
    priority: String,
}

fn read_har(path: &Path) -> Vec<HarEntry> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("nghttp wrote no HAR at {}: {e}", path.display()));
    let har: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad HAR JSON: {e}\n{text}"));
    har["log"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let res = &e["response"];
            HarEntry {
                url: e["request"]["url"].as_str().unwrap().to_owned(),
                status: res["status"].as_u64().unwrap(),
                size: res["content"]["size"].as_u64().unwrap(),
                priority: res["headers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|h| h["name"].as_str() == Some("priority"))
                    .and_then(|h| h["value"].as_str())
                    .unwrap_or("")
                    .to_owned(),
            }
        })
        .collect()
}

/// nghttp, 20 concurrent requests for each of `/size/65536` and `/critical` on one
/// connection (`-m 20`) with `priority: u=5, i`, RFC 7540 dependency signals on (nghttp's
/// default): exit status 0, 40 HAR entries all 200 with the right sizes, `/critical`
/// pinned at `u=0`; the bodies nghttp wrote to stdout (interleaved as the DATA frames
/// arrived) have exactly the total length and the byte histogram of 20 + 20 pattern
/// bodies, and split into runs that each continue the pattern. Then the same with
/// `--no-rfc7540-pri -n -s` (RFC 9218 signals only), checking its statistics table.
async fn nghttp(name: &'static str) {
    const N: u64 = 20;
    const SIZE: u64 = 65_536;
    let version = require_tool("nghttp", &["--version"]);
    println!("[{name}] {version}");
    for policy in policies() {
        let mut server = Server::start(name, &["--policy", policy]).await;
        let dir = scratch_dir("nghttp", name, policy);
        let har = dir.join("nghttp.har");
        let size_url = format!("https://{}/size/{SIZE}", server.addr);
        let critical_url = format!("https://{}/critical", server.addr);
        let started = Instant::now();
        let out = run_tool(
            "nghttp",
            Command::new("nghttp")
                .args(["-y", "-m", &N.to_string(), "-H", "priority: u=5, i"])
                .arg(format!("--har={}", har.display()))
                .args([&size_url, &critical_url]),
            TOOL_TIMEOUT,
        )
        .await;
        let elapsed = started.elapsed();
        assert!(
            out.status.success(),
            "[{name}/{policy}] nghttp exit status {}: {}",
            out.status,
            stderr_of(&out)
        );
        let entries = read_har(&har);
        assert_eq!(entries.len() as u64, 2 * N, "{entries:?}");
        for e in &entries {
            let (size, priority) = if e.url == critical_url {
                (CRITICAL_LEN, "u=0")
            } else {
                assert_eq!(e.url, size_url);
                (SIZE, "")
            };
            assert_eq!(
                (e.status, e.size, e.priority.as_str()),
                (200, size, priority),
                "[{name}/{policy}] nghttp {e:?}"
            );
        }
        // The bodies, interleaved frame by frame across the 40 streams.
        let body = &out.stdout;
        let total = N * (SIZE + CRITICAL_LEN);
        assert_eq!(body.len() as u64, total, "[{name}/{policy}] nghttp stdout");
        let mut expected = [0u64; 256];
        for (len, times) in [(SIZE, N), (CRITICAL_LEN, N)] {
            for (e, h) in expected.iter_mut().zip(pattern_histogram(len)) {
                *e += h * times;
            }
        }
        let mut got = [0u64; 256];
        for &b in body {
            got[b as usize] += 1;
        }
        assert!(
            got == expected,
            "[{name}/{policy}] nghttp: byte histogram of the bodies differs from the pattern's"
        );
        // Maximal runs where each byte continues the pattern; every run must end where a
        // DATA frame can end: at most one run per 16 bytes would mean garbage.
        let runs = 1 + body
            .windows(2)
            .filter(|w| w[1] as u16 != (w[0] as u16 + 1) % 251)
            .count();
        assert!(
            runs as u64 <= total / 1024,
            "[{name}/{policy}] nghttp: {runs} pattern runs in {total} bytes"
        );
        println!(
            "  [{name}/{policy}] nghttp -m {N}: {} responses 200, {total} body bytes in {runs} \
             pattern runs, {elapsed:.2?}",
            entries.len()
        );

        // RFC 9218 signals only, bodies discarded, statistics table.
        let out = run_tool(
            "nghttp",
            Command::new("nghttp")
                .args(["-y", "-n", "-s", "--no-rfc7540-pri", "-m", &N.to_string()])
                .args(["-H", "priority: u=2"])
                .arg(&size_url),
            TOOL_TIMEOUT,
        )
        .await;
        let stats = stdout_of(&out);
        assert!(
            out.status.success(),
            "[{name}/{policy}] nghttp -s exit status {}: {stats}{}",
            out.status,
            stderr_of(&out)
        );
        // "id  responseEnd requestStart  process code size request path"
        let rows: Vec<Vec<&str>> = stats
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() == 7 && f[0].parse::<u32>().is_ok())
            .collect();
        assert_eq!(rows.len() as u64, N, "nghttp statistics:\n{stats}");
        for row in &rows {
            assert_eq!(
                (row[4], row[5], row[6]),
                ("200", "64K", format!("/size/{SIZE}").as_str()),
                "nghttp statistics:\n{stats}"
            );
        }
        println!(
            "  [{name}/{policy}] nghttp -n -s --no-rfc7540-pri -m {N}: {} x 200",
            rows.len()
        );
        stop_and_check_counters(&mut server, policy, "nghttp", 2).await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// ---------------------------------------------------------------------------------------
// h2load
// ---------------------------------------------------------------------------------------

/// The numbers after each `<label>` in an h2load summary line, e.g. from
/// `requests: 10000 total, 10000 started, ...` the value before `succeeded`.
fn h2load_field(line: &str, label: &str) -> u64 {
    line.split(',')
        .map(str::trim)
        .map(|part| part.rsplit(':').next().unwrap().trim())
        .find_map(|part| {
            let (n, what) = part.split_once(' ')?;
            (what == label).then(|| n.parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no `{label}` in {line:?}"))
}

/// h2load, 10,000 requests for `/size/1024` over 50 connections with 10 concurrent streams
/// each and `priority: u=3, i`, under every policy: ALPN h2, all 10,000 succeeded (none
/// failed, errored or timed out), 10,000 2xx, exactly 10,240,000 body bytes; the req/s
/// line is printed. With a `tls-flush` policy all 50 connections logged counters.
async fn h2load(name: &'static str) {
    const REQUESTS: u64 = 10_000;
    const CLIENTS: u64 = 50;
    let version = require_tool("h2load", &["--version"]);
    println!("[{name}] {version}");
    for policy in policies() {
        let mut server = Server::start(name, &["--policy", policy]).await;
        let out = run_tool(
            "h2load",
            Command::new("h2load")
                .args(["-n", &REQUESTS.to_string(), "-c", &CLIENTS.to_string()])
                .args(["-m", "10", "-H", "priority: u=3, i"])
                .arg(format!("https://{}/size/1024", server.addr)),
            TOOL_TIMEOUT,
        )
        .await;
        let report = stdout_of(&out);
        assert!(
            out.status.success(),
            "[{name}/{policy}] h2load exit status {}:\n{report}{}",
            out.status,
            stderr_of(&out)
        );
        let line = |prefix: &str| {
            report
                .lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` line in h2load output:\n{report}"))
        };
        assert_eq!(line("Application protocol:"), "Application protocol: h2");
        let requests = line("requests:");
        for (label, want) in [
            ("total", REQUESTS),
            ("succeeded", REQUESTS),
            ("failed", 0),
            ("errored", 0),
            ("timeout", 0),
        ] {
            assert_eq!(
                h2load_field(requests, label),
                want,
                "[{name}/{policy}] h2load {label}: {requests}"
            );
        }
        let codes = line("status codes:");
        assert_eq!(h2load_field(codes, "2xx"), REQUESTS, "{codes}");
        let traffic = line("traffic:");
        assert!(
            traffic.contains(&format!("({}) data", REQUESTS * 1024)),
            "[{name}/{policy}] h2load body bytes: {traffic}"
        );
        println!("  [{name}/{policy}] h2load: {}", line("finished in"));
        println!("  [{name}/{policy}] h2load: {requests}");
        let all = stop_and_check_counters(&mut server, policy, "h2load", CLIENTS as usize).await;
        if policy != "stock" {
            assert_eq!(
                all.len() as u64,
                CLIENTS,
                "one counters line per connection"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// python h2: PRIORITY_UPDATE
// ---------------------------------------------------------------------------------------

fn python_client() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/priority_update_client.py")
}

/// The python `h2` client (tests/python/priority_update_client.py) on one connection
/// under every policy: PRIORITY_UPDATE before a stream opens, two during a 1 MiB response,
/// two after streams ended, one of each malformed kind (payload under 4 bytes, prioritized
/// stream id 0, non-ASCII value, sent on a non-zero stream), 5000 for idle streams during
/// a response, then PING and one more request. The script checks every body byte and the
/// `priority` response headers and exits 0; here: every stream 200 with its full length,
/// the connection kept serving, and from the connection's counters (tls-flush policies):
/// applied >= the updates sent to open streams, invalid == the 4 malformed ones, and
/// buffered + ignored == the before-open, after-end and idle ones, with buffering bounded
/// at 128 per connection (the rest of the flood ignored).
async fn python_priority_update(name: &'static str) {
    const FLOOD: u64 = 5000;
    const MAX_EARLY_UPDATES: u64 = 128;
    let version = require_tool(
        "python3",
        &[
            "-c",
            "import h2, sys; print('python', sys.version.split()[0], 'h2', h2.__version__)",
        ],
    );
    println!("[{name}] {version}");
    for policy in policies() {
        let mut server = Server::start(name, &["--policy", policy]).await;
        let started = Instant::now();
        let out = run_tool(
            "python3 priority_update_client.py",
            Command::new("python3")
                .arg(python_client())
                .arg(server.addr.ip().to_string())
                .arg(server.addr.port().to_string())
                .args(["--flood", &FLOOD.to_string()]),
            TOOL_TIMEOUT,
        )
        .await;
        let stdout = stdout_of(&out);
        assert!(
            out.status.success(),
            "[{name}/{policy}] python client exit status {}:\n{stdout}{}",
            out.status,
            stderr_of(&out)
        );
        let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("python client summary: {e}\n{stdout}"));
        assert!(
            summary["failures"].as_array().is_none_or(Vec::is_empty),
            "{stdout}"
        );
        assert_eq!(summary["served_after"].as_bool(), Some(true), "{stdout}");
        let expected_lengths = [
            ("/critical", CRITICAL_LEN),
            ("/bg/during", BG_LEN),
            ("/size/300000", 300_000),
            ("/size/300000", 300_000),
        ];
        // Members in key order (serde_json's map, like the script's `sort_keys`).
        let streams: Vec<&Value> = summary["streams"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .collect();
        assert_eq!(streams.len(), expected_lengths.len(), "{stdout}");
        for (s, (path, len)) in streams.iter().zip(expected_lengths) {
            assert_eq!(s["path"].as_str(), Some(path), "{stdout}");
            assert_eq!(s["status"].as_u64(), Some(200), "{stdout}");
            assert_eq!(s["bytes"].as_u64(), Some(len), "{stdout}");
        }
        let sent = &summary["sent"];
        let n = |key: &str| {
            sent[key]
                .as_u64()
                .unwrap_or_else(|| panic!("no sent.{key} in {stdout}"))
        };
        let (before_open, during, after_end, flood) = (
            n("before_open"),
            n("during_response"),
            n("after_end"),
            n("idle_flood"),
        );
        let malformed = sent["malformed"].as_object();
        assert_eq!(malformed.map_or(0, |m| m.len()), 4, "{stdout}");
        let malformed: u64 = malformed
            .into_iter()
            .flat_map(|m| m.values())
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(flood, FLOOD);
        let port = summary["local_port"].as_u64().unwrap();
        println!(
            "  [{name}/{policy}] python h2: {} raw frames, {} body bytes checked, {:.2?}; sent \
             before-open {before_open}, during {during}, after-end {after_end}, malformed \
             {malformed}, idle flood {flood}",
            summary["raw_frames"].as_u64().unwrap(),
            summary["bytes_checked"].as_u64().unwrap(),
            started.elapsed(),
        );

        let all = stop_and_check_counters(&mut server, policy, "python h2", 1).await;
        if policy == "stock" {
            continue;
        }
        let peer = format!("{}:{port}", server.addr.ip());
        let c = all
            .iter()
            .find(|c| c.peer == peer)
            .unwrap_or_else(|| panic!("no counters for the python client's {peer}: {all:?}"));
        let (applied, buffered, ignored, invalid) = (
            c.get("priority_updates_applied"),
            c.get("priority_updates_buffered"),
            c.get("priority_updates_ignored"),
            c.get("priority_updates_invalid"),
        );
        println!(
            "  [{name}/{policy}] python h2 counters: applied {applied}, buffered {buffered}, \
             ignored {ignored}, invalid {invalid}"
        );
        let ctx = format!("[{name}/{policy}] {c:?}");
        assert!(applied >= during, "valid updates to open streams: {ctx}");
        assert_eq!(invalid, malformed, "malformed updates: {ctx}");
        assert_eq!(
            applied + buffered + ignored,
            before_open + during + after_end + flood,
            "every valid update applied, buffered or ignored: {ctx}"
        );
        // The before-open update was buffered and consumed by its stream; of the flood,
        // 128 fit in the (then empty) buffer and the rest were ignored, as were the
        // updates for finished streams.
        assert_eq!(
            buffered,
            before_open + MAX_EARLY_UPDATES,
            "bounded buffering: {ctx}"
        );
        assert_eq!(
            ignored,
            after_end + flood - MAX_EARLY_UPDATES,
            "beyond the bound, and for finished streams: {ctx}"
        );
    }
}

for_both!(curl, nghttp, h2load, python_priority_update);
