//! The first-request workload (`integration_tests::first_request`) on the relay link: the
//! stock client's first flight is counted, a resumed connection resumes, the first response
//! takes at least the handshake's round trips; the nginx variants say what the workload
//! needs; a short connection-rate run completes connections. Through the tun link (root):
//! segments are counted.

mod support;

use std::time::Duration;

use integration_tests::first_request::{
    connection_rate, run_relay, run_tun, ClientCase, Connection, FirstRequestServer, NotBuiltYet,
};
use integration_tests::link::LinkConfig;
use integration_tests::peers::{Layout, PeerKind};
use integration_tests::tun::TunConfig;

use support::{have_root, peer_installed, serial};

/// 20 ms RTT: long enough that round trips dominate the loopback's noise.
fn link() -> LinkConfig {
    LinkConfig {
        rtt: Duration::from_millis(20),
        rate_mbit: 100.0,
        queue_bytes: None,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn stock_client_first_flight_on_the_relay() {
    let _serial = serial();
    let rt = runtime();
    let link = link();
    let rtt_ms = link.rtt.as_secs_f64() * 1e3;
    let fresh = rt
        .block_on(run_relay(
            ClientCase::StockClient,
            FirstRequestServer::Ours,
            Connection::Fresh,
            &link,
        ))
        .unwrap();
    assert!(!fresh.resumed, "{fresh:?}");
    assert!(fresh.first_flight_records >= 1, "{fresh:?}");
    assert!(
        fresh.client_records > fresh.first_flight_records,
        "{fresh:?}"
    );
    assert_eq!(
        fresh.first_flight_segments, None,
        "no segments on the relay"
    );
    assert_eq!(fresh.tls_version, "TLSv1_3");
    // TCP (1 RTT), TLS 1.3 (1 RTT), request (1 RTT): at least three round trips, and not
    // many more on an idle loopback.
    assert!(
        fresh.first_response_ms >= 3.0 * rtt_ms && fresh.first_response_ms < 3.0 * rtt_ms + 40.0,
        "{fresh:?}"
    );
    let resumed = rt
        .block_on(run_relay(
            ClientCase::StockClient,
            FirstRequestServer::Ours,
            Connection::Resumed,
            &link,
        ))
        .unwrap();
    assert!(resumed.resumed, "{resumed:?}");
    assert!(!resumed.early_data_accepted, "{resumed:?}");
    assert!(resumed.first_flight_records >= 1, "{resumed:?}");
    assert!(
        resumed.first_response_ms >= 3.0 * rtt_ms && resumed.first_response_ms > 0.0,
        "{resumed:?}"
    );
    let json = serde_json::to_value(&resumed).unwrap();
    for key in [
        "case",
        "server",
        "resumed",
        "first_flight_records",
        "first_flight_segments",
        "first_response_ms",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert_eq!(json["case"], "stock-client");
    assert_eq!(json["connection"], "resumed");
}

#[test]
fn coalesced_cases_say_they_are_not_built_yet() {
    let rt = runtime();
    for case in [ClientCase::Coalesced, ClientCase::Coalesced0Rtt] {
        let err = rt
            .block_on(run_relay(
                case,
                FirstRequestServer::Ours,
                Connection::Fresh,
                &link(),
            ))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&NotBuiltYet(case).to_string()), "{err}");
    }
}

#[test]
fn nginx_variants_resume_with_and_without_early_data() {
    let layout = Layout {
        dir: "/tmp/x".into(),
        listen: "127.0.0.1:8443".parse().unwrap(),
    };
    let (_, zero_rtt) = PeerKind::Nginx0rtt.config(&layout).unwrap();
    assert!(zero_rtt.contains("ssl_early_data on;"), "{zero_rtt}");
    assert!(zero_rtt.contains("ssl_session_tickets on;"), "{zero_rtt}");
    let (_, no_early) = PeerKind::NginxNoEarly.config(&layout).unwrap();
    assert!(no_early.contains("ssl_early_data off;"), "{no_early}");
    if !peer_installed(PeerKind::Nginx) {
        return;
    }
    let _serial = serial();
    let rt = runtime();
    for kind in PeerKind::RESUMING {
        let run = rt
            .block_on(run_relay(
                ClientCase::StockClient,
                FirstRequestServer::Peer(kind),
                Connection::Resumed,
                &link(),
            ))
            .unwrap();
        assert!(run.resumed, "{kind}: {run:?}");
        assert!(run.first_flight_records >= 1, "{kind}: {run:?}");
    }
}

#[test]
fn a_short_connection_rate_run_completes_connections() {
    let _serial = serial();
    let rt = runtime();
    let rate = rt
        .block_on(connection_rate(
            ClientCase::StockClient,
            FirstRequestServer::Ours,
            Duration::from_secs(1),
            &link(),
        ))
        .unwrap();
    assert!(rate.connections > 0, "{rate:?}");
    assert!(rate.connections_per_s > 0.0, "{rate:?}");
    // Every connection after the first resumes the session of an earlier one.
    assert!(rate.resumed_connections + 1 >= rate.connections, "{rate:?}");
}

#[test]
fn stock_client_segments_through_the_tun_link() {
    if !have_root("first-request through the tun link") {
        return;
    }
    let _serial = serial();
    let rt = runtime();
    let config = TunConfig::default();
    let run = rt
        .block_on(run_tun(
            ClientCase::StockClient,
            FirstRequestServer::Ours,
            Connection::Fresh,
            &config,
        ))
        .unwrap();
    let segments = run.first_flight_segments.expect("segments on the tun link");
    assert!(
        (1..=run.first_flight_records).contains(&segments),
        "{run:?}"
    );
    assert!(run.first_response_ms >= 3.0 * 20.0, "{run:?}");
}
