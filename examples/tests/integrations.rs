//! The three ways into an existing server, each an example started as a process:
//! `axum_serve` (`axum::serve` with `tls_flush::FlushListener`), `axum_server` (axum-server
//! with `tls_flush::FlushAcceptor` around `RustlsAcceptor`) and `hyper_loop` (a hyper-util
//! loop with `tls_flush::FlushStream`). curl fetches the routes over one HTTP/2 connection,
//! every byte is checked, and the connection's own counters (`GET /stats`) show that the
//! wrapper ran; SIGTERM with a download in flight finishes it and exits 0; `axum_serve`'s
//! `/metrics` shows the `tls_flush.*` metrics in Prometheus' text format.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use examples::responses::{BG_LEN, CRITICAL_LEN};
use support::*;
use tokio::process::Command;

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs one curl over HTTP/2 (`-k`, the URLs one after another on one connection) and
/// returns its `-w` lines: `URL HTTP_VERSION STATUS SIZE NEW_CONNECTS priority=[...]`.
async fn curl_h2(dir: &Path, urls: &[String], headers: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-k", "--http2"])
        .args([
            "-w",
            "%{url} %{http_version} %{response_code} %{size_download} %{num_connects} \
             priority=[%header{priority}]\\n",
        ])
        .current_dir(dir);
    for h in headers {
        cmd.args(["-H", h]);
    }
    for (i, url) in urls.iter().enumerate() {
        cmd.arg(url).args(["-o", &format!("body{i}")]);
    }
    let out = run_tool("curl", &mut cmd, TOOL_TIMEOUT).await;
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl failed ({}): {report}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    report.lines().map(str::to_owned).collect()
}

/// Every policy: `/critical` (the client asks `u=7`, the route pins `u=0`), `/bg/one` and
/// `/size/300000` arrive byte-exact over HTTP/2 on one connection (only the first transfer
/// connects); with a `tls-flush` policy that connection's `/stats` shows every byte went
/// through the wrapper, in full records with an early cut for `/critical`, with a working
/// HPACK observer. SIGTERM then stops the server with status 0.
async fn curl_over_one_connection(name: &'static str) {
    println!("[{name}] {}", require_tool("curl", &["--version"]));
    for policy in policies() {
        let mut server = Server::start(name, &["--policy", policy]).await;
        let dir = scratch_dir("integrations", &[name, policy]);
        let base = format!("https://{}", server.addr);
        let paths = [
            ("/critical", CRITICAL_LEN, "u=0"),
            ("/bg/one", BG_LEN, ""),
            ("/size/300000", 300_000, ""),
        ];
        let mut urls: Vec<String> = paths.iter().map(|(p, _, _)| format!("{base}{p}")).collect();
        urls.push(format!("{base}/stats"));
        let lines = curl_h2(&dir, &urls, &["priority: u=7"]).await;
        assert_eq!(lines.len(), urls.len(), "{lines:?}");
        for (i, (path, len, priority)) in paths.iter().enumerate() {
            let connects = if i == 0 { 1 } else { 0 };
            let expected = format!("{base}{path} 2 200 {len} {connects} priority=[{priority}]");
            assert_eq!(lines[i], expected, "[{name}/{policy}]");
            let body = std::fs::read(dir.join(format!("body{i}"))).unwrap();
            assert_pattern(&body, *len, &format!("[{name}/{policy}] {path}"));
        }
        let stats = std::fs::read_to_string(dir.join(format!("body{}", paths.len()))).unwrap();
        if policy == examples::cli::STOCK {
            // No wrapper, so no counters: the route fails for want of them.
            assert!(lines[paths.len()].contains(" 500 "), "{lines:?}");
        } else {
            assert!(lines[paths.len()].contains(" 2 200 "), "{lines:?}");
            let counters = snapshot_fields(&stats).unwrap_or_else(|e| panic!("{e}: {stats:?}"));
            check_counters(name, policy, &counters);
        }
        println!("  [{name}/{policy}] {}", stats.trim());
        server.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn check_counters(name: &str, policy: &str, c: &BTreeMap<String, u64>) {
    let get = |k: &str| c[k];
    let bodies = CRITICAL_LEN + BG_LEN + 300_000;
    assert!(get("bytes_written") > bodies, "[{name}/{policy}] {c:?}");
    // Full records: the 1.3 MB of bodies in few records (stock writes two per DATA frame).
    let records = get("records_written");
    assert!(
        records > 0 && records < bodies / 8192,
        "[{name}/{policy}] {records} records: {c:?}"
    );
    // `/critical` is pinned u=0 and small: its record ends right after it. Under `dynamic`
    // the connection starts with short records anyway, so that record ends there unforced.
    if policy != tls_flush::Policy::Dynamic.name() {
        assert!(get("early_cuts") >= 1, "[{name}/{policy}] {c:?}");
    }
    assert_eq!(get("hpack_failures"), 0, "[{name}/{policy}] {c:?}");
    assert!(get("bytes_read") > 0, "[{name}/{policy}] {c:?}");
}

/// `GET /metrics` of `axum_serve`: once a connection has been served and closed, the
/// process-wide `tls_flush.*` metrics (Prometheus names) count its records and bytes, the
/// PRIORITY_UPDATE counter has its `outcome` label, and the connection's queue high-water
/// mark is one histogram sample.
#[tokio::test]
async fn axum_serve_exports_prometheus_metrics() {
    require_tool("curl", &["--version"]);
    let mut server = Server::start("axum_serve", &[]).await;
    let dir = scratch_dir("integrations", &["metrics"]);
    let base = format!("https://{}", server.addr);
    let lines = curl_h2(&dir, &[format!("{base}/bg/one")], &[]).await;
    assert!(lines[0].contains(&format!(" 2 200 {BG_LEN} ")), "{lines:?}");

    // The connection above has ended once its histogram sample is in.
    let metrics = within("the first connection's histogram sample", async {
        loop {
            curl_h2(&dir, &[format!("{base}/metrics")], &[]).await;
            let text = std::fs::read_to_string(dir.join("body0")).unwrap();
            if value(&text, "tls_flush_queue_high_water_count") >= 1.0 {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    println!("{metrics}");
    assert!(value(&metrics, "tls_flush_connections") >= 2.0, "{metrics}");
    assert!(
        value(&metrics, "tls_flush_bytes_written") >= BG_LEN as f64,
        "{metrics}"
    );
    let records = value(&metrics, "tls_flush_records");
    assert!((64.0..200.0).contains(&records), "{metrics}");
    assert!(
        value(&metrics, "tls_flush_queue_high_water_sum") > 0.0,
        "{metrics}"
    );
    for outcome in ["applied", "buffered", "ignored", "invalid"] {
        let series = format!("tls_flush_priority_updates{{outcome=\"{outcome}\"}}");
        assert_eq!(value(&metrics, &series), 0.0, "{metrics}");
    }
    assert!(
        metrics.contains("# HELP tls_flush_early_cuts"),
        "described: {metrics}"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of the series `series` (name and labels, exactly) in Prometheus' text format.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

macro_rules! for_each_integration {
    ($($test:ident),* $(,)?) => {
        $(mod $test {
            #[tokio::test]
            async fn axum_serve() {
                super::$test("axum_serve").await
            }
            #[tokio::test]
            async fn axum_server() {
                super::$test("axum_server").await
            }
            #[tokio::test]
            async fn hyper_loop() {
                super::$test("hyper_loop").await
            }
        })*
    };
}

for_each_integration!(curl_over_one_connection, check_graceful_shutdown);
