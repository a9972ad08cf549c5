//! The real peer servers ([`integration_tests::peers`]): each installed one serves the
//! experiment's fixture byte-exact through the relay link in both workloads, with sane
//! counts, and stops when dropped. A peer that is not installed fails the test under CI
//! (`CI` is `true` or `1`) with the install hint, and is skipped with one line elsewhere.
//! Assertions are on bytes and record counts, never on times. The peers start processes
//! and load the two cores: one test at a time.

mod support;

use std::net::TcpStream;
use std::time::Duration;

use integration_tests::peers::{PeerKind, PeerServer};
use integration_tests::workload::{run_once, Case, Urgencies, Workload, CRITICAL_LEN};
use integration_tests::{ClientOptions, TapClient};
use support::{check_counts, peer_installed, serial_async, FAST};

/// Runs both workloads (and both urgency sets) once through the fast link.
async fn serves_both_workloads(kind: PeerKind) {
    if !peer_installed(kind) {
        return;
    }
    let _one = serial_async().await;
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
            check_counts(&r, &Case::Peer(kind), workload, urgencies);
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
        if !peer_installed(kind) {
            continue;
        }
        let _one = serial_async().await;
        let peer = tokio::task::spawn_blocking(move || PeerServer::start(kind))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = peer.addr();
        let dir = peer.layout().dir.clone();
        assert!(dir.join("htdocs/bg/1").is_file());
        let client = TapClient::connect(addr, ClientOptions::trusting(peer.certificate().clone()))
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
