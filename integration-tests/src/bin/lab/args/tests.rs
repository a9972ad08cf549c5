//! `LabConfig::from_args`: the flags, their checks, and what the report says of them.

use super::*;
use crate::report::{config_json, render_report};
use integration_tests::peers::PeerKind;

pub(crate) fn args(extra: &[&str]) -> LabArgs {
    LabArgs::try_parse_from(std::iter::once("lab").chain(extra.iter().copied()))
        .expect("flags parse")
}

pub(crate) fn report_first_line(config: &LabConfig) -> String {
    render_report(config, &[])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn defaults_cover_every_cell() {
    let config = LabConfig::from_args(&args(&["--seed", "7"])).unwrap();
    assert_eq!(config.repeats, 10);
    assert_eq!(config.cells().len(), 30);
    assert_eq!(config.link.rtt, LinkConfig::default().rtt);
    let plan = config.schedule();
    assert_eq!(plan.len(), 300);
    for repeat in 0..10 {
        let mut cells: Vec<_> = plan
            .iter()
            .filter(|p| p.repeat == repeat)
            .map(|p| (p.case.clone(), p.workload, p.urgencies))
            .collect();
        assert_eq!(cells.len(), 30);
        cells.sort_by_key(|(c, w, u)| (c.name().to_string(), *w, *u));
        cells.dedup();
        assert_eq!(cells.len(), 30, "every cell once per repeat");
    }
    assert_eq!(plan, config.schedule(), "the seed fixes the order");
    let other = LabConfig::from_args(&args(&["--seed", "8"])).unwrap();
    assert_ne!(plan, other.schedule());
    let first: Vec<_> = plan[..30].iter().map(|p| p.case.clone()).collect();
    assert_ne!(
        first,
        config.cells().into_iter().map(|c| c.0).collect::<Vec<_>>()
    );
}

#[test]
fn flags_are_checked() {
    let a = args(&[
        "--cases",
        "scheduled,stock",
        "--workloads",
        "late",
        "--urgencies",
        "explicit",
        "--rtt-ms",
        "5",
        "--rate-mbit",
        "200",
        "--queue-bytes",
        "65536",
        "--repeats",
        "3",
    ]);
    let config = LabConfig::from_args(&a).unwrap();
    assert_eq!(config.cases, vec![Case::Scheduled, Case::Stock]);
    assert_eq!(config.link.rtt, Duration::from_millis(5));
    assert_eq!(config.link.rate_mbit, 200.0);
    assert_eq!(config.link.queue_limit(), 65536);
    assert_eq!(config.schedule().len(), 6);
    let err = LabArgs::try_parse_from(["lab", "--link", "netem"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown link `netem`"), "{err}");
    assert_eq!(config.link_mode, LinkMode::Relay);
    assert!(report_first_line(&config).starts_with("relay link: 5 ms RTT"));
    let err = LabConfig::from_args(&args(&["--cases", "stock,fast"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown case `fast`"), "{err}");
    assert!(LabConfig::from_args(&args(&["--repeats", "0"])).is_err());
    assert!(LabConfig::from_args(&args(&["--rate-mbit", "0"])).is_err());
}

#[test]
fn tun_link_flags() {
    let config = LabConfig::from_args(&args(&["--link", "tun"])).unwrap();
    assert_eq!(config.link_mode, LinkMode::Tun);
    assert_eq!(config.tun, TunConfig::default());
    assert_eq!(
        report_first_line(&config),
        "tun link: 20 ms RTT, 20 Mbit/s each way, queue 1000 packets, MTU 1500, cc cubic; \
         two network namespaces, kernel TCP end to end"
    );
    let config = LabConfig::from_args(&args(&[
        "--link",
        "tun",
        "--cc",
        "bbr",
        "--rtt-ms",
        "40",
        "--rate-mbit",
        "10",
        "--queue-packets",
        "100",
    ]))
    .unwrap();
    assert_eq!(config.tun.cc, CongestionControl::Bbr);
    assert_eq!(config.tun.rtt, Duration::from_millis(40));
    assert_eq!(config.tun.rate_mbit, 10.0);
    assert_eq!(config.tun.queue_packets, 100);
    let json = config_json(&config);
    assert_eq!(json["link"]["mode"], "tun");
    assert_eq!(json["link"]["cc"], "bbr");
    assert_eq!(json["link"]["queue_packets"], 100);
    assert!(report_first_line(&config).contains("queue 100 packets, MTU 1500, cc bbr"));
    let traced = LabConfig::from_args(&args(&[
        "--link",
        "tun",
        "--trace",
        "/tmp/t",
        "--trace-runs",
        "2",
    ]))
    .unwrap();
    assert_eq!(traced.trace, Some((PathBuf::from("/tmp/t"), 2)));
    assert!(LabConfig::from_args(&args(&["--trace", "/tmp/t"])).is_err());
    assert!(LabArgs::try_parse_from(["lab", "--trace-runs", "2"]).is_err());
    let err = LabArgs::try_parse_from(["lab", "--link", "tun", "--cc", "reno"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("known: cubic, bbr"), "{err}");
    for bad in [
        &["--cc", "bbr"][..],
        &["--queue-packets", "10"],
        &["--link", "tun", "--queue-bytes", "1000"],
        &["--link", "tun", "--queue-packets", "0"],
    ] {
        assert!(LabConfig::from_args(&args(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn first_request_flags() {
    let config = LabConfig::from_args(&args(&["--workloads", "first-request"])).unwrap();
    let plan = config.first_request.clone().unwrap();
    assert_eq!(plan.cases, [ClientCase::StockClient]);
    assert_eq!(plan.servers, [FirstRequestServer::Ours]);
    assert!(plan.first_request && plan.connection_rate.is_none());
    assert!(config.cases.is_empty() && config.workloads.is_empty());
    let config = LabConfig::from_args(&args(&[
        "--workloads",
        "connection-rate",
        "--cases",
        "coalesced,stock-client",
        "--servers",
        "nginx-0rtt,ours",
        "--duration",
        "2.5",
    ]))
    .unwrap();
    let plan = config.first_request.unwrap();
    assert_eq!(plan.cases, [ClientCase::StockClient, ClientCase::Coalesced]);
    assert_eq!(plan.connection_rate, Some(Duration::from_millis(2500)));
    assert!(!plan.first_request);
    for bad in [
        &["--workloads", "first-request,late"][..],
        &["--workloads", "first-request", "--cases", "stock"],
        &["--workloads", "first-request", "--duration", "3"],
        &["--workloads", "connection-rate", "--duration", "0"],
        &["--servers", "ours"],
        &["--workloads", "first-request", "--explain"],
    ] {
        assert!(LabConfig::from_args(&args(bad)).is_err(), "{bad:?}");
    }
    let err = LabArgs::try_parse_from(["lab", "--workloads", "first"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("first-request, connection-rate"), "{err}");
}

#[test]
fn peers_are_cases_and_missing_ones_are_skipped() {
    let a = args(&[
        "--cases",
        "stock,nginx,nginx-4k,nghttpd,h2o,apache",
        "--seed",
        "3",
    ]);
    let mut config = LabConfig::from_args(&a).unwrap();
    assert_eq!(config.cases[1..], Case::PEERS);
    let asked = config.cases.len();
    let skipped: Vec<PeerKind> = config.skip_missing_peers().iter().map(|m| m.kind).collect();
    assert_eq!(config.cases.len() + skipped.len(), asked);
    assert!(skipped.iter().all(|k| !k.is_installed()));
    assert!(config
        .cases
        .iter()
        .filter_map(Case::peer)
        .all(PeerKind::is_installed));
    assert_eq!(config.cases[0], Case::Stock, "ours are never skipped");
    // What a skipped peer looks like in the report and the JSON.
    config.skipped = vec![NotInstalled {
        kind: PeerKind::H2o,
        detail: "no `h2o` in PATH".into(),
    }];
    let report = render_report(&config, &[]);
    assert!(
        report.contains("Skipped, not installed (run scripts/install-peers.sh): h2o."),
        "{report}"
    );
    let json = config_json(&config);
    assert_eq!(json["skipped"][0]["case"], "h2o");
    assert!(json["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("h2o not installed: run scripts/install-peers.sh"));
    // The default run is ours only: it needs no peer.
    let default = LabConfig::from_args(&args(&[])).unwrap();
    assert!(default.cases.iter().all(|c| c.peer().is_none()));
}

#[test]
fn several_clients_are_tun_only_and_untraced() {
    let config = LabConfig::from_args(&args(&["--link", "tun", "--clients", "20"])).unwrap();
    assert_eq!(config.tun.clients, 20);
    assert!(report_first_line(&config)
        .ends_with("; 20 clients at once, each on its own connection to one server"));
    for (flags, error) in [
        (
            &["--clients", "2"][..],
            "--clients applies to --link tun only",
        ),
        (&["--link", "tun", "--clients", "0"], "at least 1"),
        (
            &["--link", "tun", "--clients", "2", "--trace", "t"],
            "--trace traces runs of one",
        ),
        (
            &["--link", "tun", "--clients", "2", "--workloads", "page-app"],
            "simultaneous",
        ),
    ] {
        let err = LabConfig::from_args(&args(flags)).unwrap_err().to_string();
        assert!(err.contains(error), "{flags:?}: {err}");
    }
}

#[test]
fn cross_traffic_is_tun_only() {
    let config = LabConfig::from_args(&args(&["--link", "tun", "--cross", "2"])).unwrap();
    assert_eq!(config.tun.cross_flows, 2);
    assert!(report_first_line(&config).ends_with(
        "kernel TCP end to end; cross traffic: 2 bulk TCP flows server to client, 3-4 s \
         head start (seeded)"
    ));
    let none = LabConfig::from_args(&args(&["--link", "tun"])).unwrap();
    assert_eq!(none.tun.cross_flows, 0);
    let err = LabConfig::from_args(&args(&["--cross", "1"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--cross applies to --link tun only"), "{err}");
    let err = LabConfig::from_args(&args(&[
        "--link",
        "tun",
        "--workloads",
        "first-request",
        "--cross",
        "1",
    ]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--cross apply to the priority workloads"),
        "{err}"
    );
}
