//! The real peer servers ([`integration_tests::peers`]): each installed one serves the seed
//! fixture byte-exact through the relay link in both workloads, with sane counts, and stops
//! when dropped. A peer that is not installed fails the test in CI (`CI=true`) with the
//! install hint, and is skipped with one line elsewhere. Assertions are on bytes and record
//! counts, never on times.

use std::io::{self, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use integration_tests::link::LinkConfig;
use integration_tests::peers::{PeerKind, PeerServer};
use integration_tests::workload::{
    run_once, Case, RunResult, Urgencies, Workload, BACKGROUND_LEN, CRITICAL_LEN, LATE_THRESHOLD,
};
use integration_tests::{ClientOptions, TapClient, Trust};

/// 5 ms RTT, 200 Mbit/s, one BDP of queue: the seed's shape, ten times faster.
const FAST: LinkConfig = LinkConfig {
    rtt: Duration::from_millis(5),
    rate_mbit: 200.0,
    queue_bytes: None,
};

/// The peers start processes and load the two cores: one test at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether `kind` can run here: in CI a missing peer fails the test with the install hint;
/// elsewhere the test prints one skip line and passes.
fn installed(kind: PeerKind) -> bool {
    match kind.binary() {
        Ok(_) => true,
        Err(missing) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{missing} (CI=true: the peers must be installed in CI)")
        }
        Err(missing) => {
            // Straight to stderr: the test harness would capture an `eprintln!`.
            let _ = writeln!(io::stderr(), "skipping peer `{kind}`: {missing}");
            false
        }
    }
}

/// Checks what holds in every run, whatever the timing.
fn check_counts(r: &RunResult, kind: PeerKind, workload: Workload, urgencies: Urgencies) {
    let label = format!("{kind}/{workload}/{urgencies}: {r:?}");
    assert_eq!(
        (r.case.as_str(), r.workload, r.urgencies),
        (kind.name(), workload, urgencies),
        "{label}"
    );
    match workload {
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
    let payload = 2 * BACKGROUND_LEN + CRITICAL_LEN;
    assert!(r.wire_bytes > payload, "{label}");
    // Every body byte crossed the wire in records of at most 16 KiB of plaintext (4 KiB for
    // nginx-4k)...
    let max_record = if kind == PeerKind::Nginx4k {
        4096
    } else {
        16384
    };
    assert!(
        r.tls_records as u64 >= payload / max_record,
        "{label}: too few records"
    );
    // ... and none of them is absurdly small on average (the smallest seen: h2o, about 230
    // records per MiB at start).
    assert!(
        (r.tls_records as u64) < payload / 1024,
        "{label}: too many records"
    );
    // The ciphertext is the payload plus headers, frames and the handshake: under 5% more.
    assert!(r.wire_bytes < payload + payload / 20, "{label}: wire bytes");
    assert!(
        r.critical_first_byte_ms <= r.critical_complete_ms,
        "{label}"
    );
    assert!(r.critical_complete_ms <= r.fixture_complete_ms, "{label}");
}

/// Runs both workloads (and both urgency sets) once through the fast link.
async fn serves_both_workloads(kind: PeerKind) {
    if !installed(kind) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    for workload in Workload::ALL {
        for urgencies in Urgencies::ALL {
            // run_once fails unless every body has the right length, pattern and SHA-256.
            let r = run_once(&Case::Peer(kind), workload, urgencies, &FAST)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            println!(
                "{kind}/{workload}/{urgencies}: critical complete {:.1} ms, {} KiB of background \
                 before it, {} records",
                r.critical_complete_ms,
                r.background_bytes_before_critical / 1024,
                r.tls_records
            );
            check_counts(&r, kind, workload, urgencies);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_serves_both_workloads_byte_exact_through_the_link() {
    serves_both_workloads(PeerKind::Nginx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_4k_serves_both_workloads_byte_exact_through_the_link() {
    serves_both_workloads(PeerKind::Nginx4k).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nghttpd_serves_both_workloads_byte_exact_through_the_link() {
    serves_both_workloads(PeerKind::Nghttpd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2o_serves_both_workloads_byte_exact_through_the_link() {
    serves_both_workloads(PeerKind::H2o).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_serves_both_workloads_byte_exact_through_the_link() {
    serves_both_workloads(PeerKind::Apache).await;
}

/// Each installed peer verifies with its own certificate, serves h2 directly (no link), sends
/// no session tickets (every record after the handshake carries HTTP/2 bytes) and is gone,
/// directory included, once dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_start_verify_serve_and_stop() {
    for kind in PeerKind::ALL {
        if !installed(kind) {
            continue;
        }
        let _one = ONE_AT_A_TIME.lock().await;
        let peer = tokio::task::spawn_blocking(move || PeerServer::start(kind))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = peer.addr();
        let dir = peer.layout().dir.clone();
        assert!(dir.join("htdocs/bg/1").is_file());
        let client = TapClient::connect(
            addr,
            ClientOptions {
                trust: Trust::Certificate(peer.certificate().clone()),
                ..ClientOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let critical = client
            .get("/critical", Some("u=0"))
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert!(critical.status.is_success(), "{kind}: {}", critical.status);
        assert_eq!(critical.len, CRITICAL_LEN, "{kind}");
        assert!(critical.pattern_ok, "{kind}");
        let missing = client.get("/no-such-file", None).await.unwrap();
        assert_eq!(missing.status.as_u16(), 404, "{kind}");
        // The record spans assume that no record after the handshake holds anything but
        // HTTP/2 bytes: with a session ticket, the plaintext would exceed the frames'. (The
        // pause lets the connection task read whatever the last records hold.)
        tokio::time::sleep(Duration::from_millis(200)).await;
        let plain: u64 = client.record_spans().last().map_or(0, |s| s.1);
        let log = client.log();
        assert_eq!(
            plain, log.plain_bytes as u64,
            "{kind}: records hold more than HTTP/2 bytes (a session ticket?)"
        );
        drop(client);
        tokio::task::spawn_blocking(move || drop(peer))
            .await
            .unwrap();
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
            "{kind}: still listening on {addr} after drop"
        );
        assert!(!dir.exists(), "{kind}: {} left behind", dir.display());
    }
}
