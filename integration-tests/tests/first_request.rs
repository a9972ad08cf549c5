//! The first-request workload (`integration_tests::first_request`) on the relay link: the
//! stock client's first flight is counted, a resumed connection resumes, the first response
//! takes at least the handshake's round trips; `coalesced` sends its first flight in one
//! record where stock takes several; `coalesced-0rtt` is served from early data by ours and
//! nginx-0rtt, a round trip sooner; early data that nginx rejects is delivered exactly once;
//! the nginx variants say what the workload needs; a short connection-rate run completes
//! connections. Through the tun link (root): segments are counted.

mod support;

use std::time::Duration;

use integration_tests::client::Trust;
use integration_tests::first_request::{
    client_config, connection_rate, one_connection_to, run_relay, run_tun, ClientCase, Connection,
    FirstRequestResult, FirstRequestServer,
};
use integration_tests::link::{LinkConfig, RelayLink};
use integration_tests::peers::{Layout, PeerKind, PeerServer};
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

/// The client holds its flight until the request is complete or for 2 ms: a client task
/// descheduled longer than that (CI runs test binaries side by side) writes the request in
/// a record of its own, and a resumed one writes it after its first read, so not as early
/// data. Runs `case` until `wanted` holds, at most three times, each miss reported.
fn run_until(
    rt: &tokio::runtime::Runtime,
    case: ClientCase,
    server: FirstRequestServer,
    connection: Connection,
    wanted: fn(&FirstRequestResult) -> bool,
) -> FirstRequestResult {
    for attempt in 1.. {
        let run = rt
            .block_on(run_relay(case, server, connection, &link()))
            .unwrap();
        if wanted(&run) || attempt == 3 {
            return run;
        }
        eprintln!("{server} {connection:?}: attempt {attempt} not in one flight: {run:?}");
    }
    unreachable!("the third attempt returns")
}

#[test]
fn coalesced_first_flight_is_one_record_where_stock_takes_several() {
    let _serial = serial();
    let rt = runtime();
    let server = FirstRequestServer::Ours;
    let stock = rt
        .block_on(run_relay(
            ClientCase::StockClient,
            server,
            Connection::Fresh,
            &link(),
        ))
        .unwrap();
    assert!(stock.first_flight_records > 1, "{stock:?}");
    for connection in Connection::ALL {
        let coalesced = run_until(&rt, ClientCase::Coalesced, server, connection, |run| {
            run.first_flight_records == 1
        });
        assert_eq!(coalesced.first_flight_records, 1, "{coalesced:?}");
        assert_eq!(
            coalesced.resumed,
            connection == Connection::Resumed,
            "{coalesced:?}"
        );
        assert!(!coalesced.early_data_sent, "{coalesced:?}");
        assert_eq!(coalesced.tls_version, "TLSv1_3");
    }
}

/// `coalesced-0rtt` on a resumed connection: the first flight goes as early data, the
/// server accepts it and answers from it (the body is checked byte for byte by the run),
/// within `round_trips` round trips (the relay link's TCP handshake is local). The stock
/// client needs three: the TLS handshake's, the request's and Nagle's.
fn check_served_from_early_data(server: FirstRequestServer, round_trips: f64) {
    let rt = runtime();
    let link = link();
    let rtt_ms = link.rtt.as_secs_f64() * 1e3;
    let case = ClientCase::Coalesced0Rtt;
    let fresh = run_until(&rt, case, server, Connection::Fresh, |run| {
        run.first_flight_records == 1
    });
    assert!(
        !fresh.early_data_sent,
        "no session, no early data: {fresh:?}"
    );
    assert_eq!(fresh.first_flight_records, 1, "{fresh:?}");
    let resumed = run_until(&rt, case, server, Connection::Resumed, |run| {
        run.early_data_sent && run.first_flight_records == 1
    });
    assert!(resumed.resumed, "{server}: {resumed:?}");
    assert!(resumed.early_data_sent, "{server}: {resumed:?}");
    assert!(resumed.early_data_accepted, "{server}: {resumed:?}");
    assert_eq!(resumed.first_flight_records, 1, "{server}: {resumed:?}");
    assert!(
        resumed.first_response_ms >= rtt_ms && resumed.first_response_ms < round_trips * rtt_ms,
        "{server}: within {round_trips} round trips: {resumed:?}"
    );
}

#[test]
fn coalesced_0rtt_is_served_from_early_data_by_ours() {
    let _serial = serial();
    // tokio-rustls' server stream comes after the handshake: the early request is answered
    // once the client's Finished arrived, a round trip after the early data (no 0.5-RTT):
    // two round trips, under the stock client's three.
    check_served_from_early_data(FirstRequestServer::Ours, 3.0);
}

#[test]
fn coalesced_0rtt_is_served_from_early_data_by_nginx() {
    if !peer_installed(PeerKind::Nginx) {
        return;
    }
    let _serial = serial();
    // nginx answers early data at once (0.5-RTT): one round trip.
    check_served_from_early_data(FirstRequestServer::Peer(PeerKind::Nginx0rtt), 1.5);
}

/// A request target no other run uses, to count this one in an access log.
fn unique_path(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/critical?{what}={}-{nanos}", std::process::id())
}

/// The lines of `peer`'s access log with `path`, once the count has held still for a
/// while (nginx logs a request when it is done with it, maybe after the client read it).
fn logged(peer: &PeerServer, path: &str) -> usize {
    let count = || {
        std::fs::read_to_string(peer.layout().access_log())
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(path))
            .count()
    };
    let mut last = count();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(50));
        let now = count();
        if now == last && now > 0 {
            break;
        }
        last = now;
    }
    count()
}

/// Early data that nginx rejects is sent again after the handshake, once: the client
/// offers a session of nginx-0rtt (its ticket allows early data) to nginx-no-early, which
/// skips the 0-RTT records; the request reaches it exactly once (its access log), and
/// never reaches nginx-0rtt. Against nginx-no-early's own session, whose ticket allows no
/// early data (OpenSSL's `max_early_data` is 0 with `ssl_early_data off`), the client
/// sends none.
#[test]
fn early_data_nginx_rejects_is_delivered_exactly_once() {
    if !peer_installed(PeerKind::Nginx) {
        return;
    }
    let _serial = serial();
    let rt = runtime();
    let case = ClientCase::Coalesced0Rtt;
    rt.block_on(async {
        let accepting = PeerServer::start(PeerKind::Nginx0rtt).unwrap();
        let rejecting = PeerServer::start(PeerKind::NginxNoEarly).unwrap();
        let to_accepting = RelayLink::start(accepting.addr(), link()).await.unwrap();
        let to_rejecting = RelayLink::start(rejecting.addr(), link()).await.unwrap();
        // One session store for both servers (both are `localhost`); two certificates.
        let config = client_config(case, &Trust::AnyCertificate).unwrap();
        let prime = unique_path("prime");
        one_connection_to(case, to_accepting.addr(), config.clone(), &prime)
            .await
            .unwrap();
        tokio::time::sleep(link().rtt).await;
        let measured = unique_path("rejected");
        let outcome = one_connection_to(case, to_rejecting.addr(), config.clone(), &measured)
            .await
            .unwrap();
        // nginx-no-early cannot resume nginx-0rtt's session (another certificate, hence
        // another session id context, and another ticket key): a full handshake, which
        // rejects the early data all the same.
        assert!(outcome.sent_early_data(), "{:?}", outcome.tls);
        assert!(!outcome.tls.early_data_accepted, "{:?}", outcome.tls);
        assert!(outcome.tls.handshake_kind.is_some(), "{:?}", outcome.tls);
        assert_eq!(logged(&accepting, &prime), 1, "{}", accepting.logs());
        assert_eq!(logged(&rejecting, &measured), 1, "{}", rejecting.logs());
        assert_eq!(logged(&accepting, &measured), 0);

        // nginx-no-early's own tickets allow no early data.
        let own = client_config(case, &Trust::AnyCertificate).unwrap();
        let prime = unique_path("prime-no-early");
        one_connection_to(case, to_rejecting.addr(), own.clone(), &prime)
            .await
            .unwrap();
        tokio::time::sleep(link().rtt).await;
        let measured = unique_path("resumed-no-early");
        let outcome = one_connection_to(case, to_rejecting.addr(), own, &measured)
            .await
            .unwrap();
        assert!(outcome.tls.resumed(), "{:?}", outcome.tls);
        assert!(!outcome.sent_early_data(), "{:?}", outcome.tls);
        assert_eq!(logged(&rejecting, &measured), 1, "{}", rejecting.logs());
        drop((to_accepting, to_rejecting));
        tokio::task::spawn_blocking(move || drop((accepting, rejecting)))
            .await
            .unwrap();
    });
}

/// Rejection by ours: two of our servers share one session cache, the
/// first accepting early data, the second not; a session of the first, offered to the
/// second, resumes there and its early data is rejected: the request reaches the second
/// exactly once (counted by its service), and the first never.
#[test]
fn early_data_ours_rejects_is_delivered_exactly_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use integration_tests::first_request::OURS_MAX_EARLY_DATA;
    use integration_tests::server::{ServerSetup, TestServer};

    /// Ours with `early` bytes of early data, `sessions` shared, counting the requests
    /// whose target is `path`.
    async fn start(
        identity: &examples::tls::Identity,
        early: u32,
        sessions: Arc<dyn rustls::server::StoresServerSessions>,
        path: String,
    ) -> (TestServer, Arc<AtomicUsize>) {
        let key = identity.key.clone_key();
        let chain = identity.chain.clone();
        let mut tls =
            examples::tls::server_config(examples::tls::Identity { chain, key }, None).unwrap();
        tls.max_early_data_size = early;
        tls.session_storage = sessions;
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let app = tower::util::MapRequest::new(
            examples::axum_app::router(),
            move |request: http::Request<hyper::body::Incoming>| {
                if request.uri().path_and_query().map(|p| p.as_str()) == Some(path.as_str()) {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                request
            },
        );
        let setup = ServerSetup {
            config: Some(tls_flush::FlushConfig::default()),
            ..ServerSetup::default()
        };
        let certificate = identity.chain[0].clone();
        let server = TestServer::start_with_tls(
            setup,
            app,
            "127.0.0.1:0".parse().unwrap(),
            certificate,
            tls,
        )
        .await
        .unwrap();
        (server, count)
    }

    let _serial = serial();
    let rt = runtime();
    let case = ClientCase::Coalesced0Rtt;
    rt.block_on(async {
        let identity = examples::tls::self_signed().unwrap();
        let measured = unique_path("ours-rejected");
        let sessions: Arc<dyn rustls::server::StoresServerSessions> =
            rustls::server::ServerSessionMemoryCache::new(256);
        let (accepting, on_accepting) = start(
            &identity,
            OURS_MAX_EARLY_DATA,
            sessions.clone(),
            measured.clone(),
        )
        .await;
        let (rejecting, on_rejecting) = start(&identity, 0, sessions, measured.clone()).await;
        let to_accepting = RelayLink::start(accepting.addr, link()).await.unwrap();
        let to_rejecting = RelayLink::start(rejecting.addr, link()).await.unwrap();
        let config = client_config(case, &Trust::Certificate(identity.chain[0].clone())).unwrap();
        one_connection_to(
            case,
            to_accepting.addr(),
            config.clone(),
            &unique_path("prime"),
        )
        .await
        .unwrap();
        tokio::time::sleep(link().rtt).await;
        let outcome = one_connection_to(case, to_rejecting.addr(), config, &measured)
            .await
            .unwrap();
        assert!(outcome.sent_early_data(), "{:?}", outcome.tls);
        assert!(outcome.tls.resumed(), "{:?}", outcome.tls);
        assert!(!outcome.tls.early_data_accepted, "{:?}", outcome.tls);
        assert_eq!(on_rejecting.load(Ordering::SeqCst), 1);
        assert_eq!(on_accepting.load(Ordering::SeqCst), 0);
    });
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
