//! Cross traffic through the tun link ([`integration_tests::tun::CrossTraffic`], root only):
//! a bulk flow alone fills the bottleneck and its queue, and a lab run of the
//! `simultaneous` workload against it gets a share of the bottleneck strictly between the
//! two extremes, a goodput below the link's rate, and the path figures of a tun run.
//!
//! They need root (network namespaces, /dev/net/tun). Not as root they print a skip line,
//! except under CI (`CI` is `true` or `1`), where they fail. They measure time: one at a
//! time.

mod support;

use std::time::{Duration, Instant};

use integration_tests::tun::{CrossTraffic, TunConfig, TunLink, CROSS_HEAD_START};
use integration_tests::workload::{
    bottleneck_share, fixture_body_bytes, run_tun, Case, Urgencies, Workload,
};
use support::{check_counts, have_root, run_alone, serial};

/// 20 ms RTT, 20 Mbit/s, a queue of 200 packets (cubic), with `cross_flows`.
fn link(cross_flows: usize) -> TunConfig {
    TunConfig {
        rtt: Duration::from_millis(20),
        rate_mbit: 20.0,
        queue_packets: 200,
        cross_flows,
        ..TunConfig::default()
    }
}

#[test]
fn a_cross_flow_fills_the_bottleneck_and_its_queue() {
    if !have_root("a_cross_flow_fills_the_bottleneck_and_its_queue") {
        return;
    }
    let _serial = serial();
    let config = link(0);
    let link = TunLink::start(config.clone()).unwrap();
    let cross = CrossTraffic::start(&link, 1).unwrap();
    assert_eq!(cross.flows(), 1);
    // Two seconds: the sink timestamps bytes when it reads them, so each edge of the
    // window may be off by a read (one second measured 19.96 Mbit/s on a loaded machine).
    std::thread::sleep(CROSS_HEAD_START - Duration::from_secs(2));
    let from = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let to = Instant::now();
    let second = cross.received_between(from, to);
    let mbit = second as f64 * 8.0 / to.duration_since(from).as_secs_f64() / 1e6;
    let stats = link.stats();
    let stopping = Instant::now();
    let total = cross.stop().unwrap();
    let stopped_in = stopping.elapsed();
    eprintln!(
        "one cross flow: {mbit:.2} Mbit/s in its last two seconds, {total} bytes in all, queue \
         up to {} packets, {} dropped; stopped in {stopped_in:?}",
        stats.downstream.max_queue, stats.downstream.dropped
    );
    // Full-sized segments carry 1448 bytes in 1500: 96.5% of the rate at most, 19.3 Mbit/s
    // (and a read's worth of slack at the window's edges); an unlimited link would give
    // hundreds.
    assert!(
        (15.0..=19.8).contains(&mbit),
        "{mbit:.2} Mbit/s on a 20 Mbit/s link"
    );
    assert!(total >= second);
    // Cubic has filled the queue by the end of the head start, and overflowed it.
    assert!(
        stats.downstream.max_queue as usize >= config.queue_packets,
        "{stats:?}"
    );
    assert!(stats.downstream.dropped > 0, "{stats:?}");
    assert!(stopped_in < Duration::from_secs(1), "{stopped_in:?}");
}

#[test]
fn a_run_against_cross_traffic_gets_a_share_of_the_bottleneck() {
    if !have_root("a_run_against_cross_traffic_gets_a_share_of_the_bottleneck") {
        return;
    }
    run_alone(async {
        let (case, workload, urgencies) =
            (Case::Stock, Workload::Simultaneous, Urgencies::Explicit);
        let config = link(1);
        let r = run_tun(&case, workload, urgencies, &config).await.unwrap();
        eprintln!("stock/simultaneous/explicit against one cross flow: {r:?}");
        check_counts(&r, &case, workload, urgencies);
        let path = r.path;
        let share = path.bottleneck_share.expect("a share with cross traffic");
        assert!(share > 0.05 && share < 0.95, "share {share}: {path:?}");
        let cross = path.cross_bytes.expect("cross bytes");
        assert!(cross > 0, "the sink received nothing: {path:?}");
        assert_eq!(
            share,
            bottleneck_share(fixture_body_bytes(workload), cross),
            "{path:?}"
        );
        assert!(
            path.fixture_goodput_mbit > 0.0 && path.fixture_goodput_mbit < config.rate_mbit,
            "{path:?}"
        );
        // Goodput over the transfer interval, which ends with the fixture.
        assert!(
            path.fixture_transfer_ms > 0.0 && path.fixture_transfer_ms <= r.fixture_complete_ms
        );
        assert!(path.link_drops.is_some(), "tun: drops are counted");
        assert!(path.server_retransmits.is_some(), "our server: {path:?}");

        // Without cross traffic: no share, the rest as before.
        let alone = run_tun(&case, workload, urgencies, &link(0)).await.unwrap();
        eprintln!("stock/simultaneous/explicit without cross traffic: {alone:?}");
        check_counts(&alone, &case, workload, urgencies);
        assert_eq!(alone.path.bottleneck_share, None);
        assert_eq!(alone.path.cross_bytes, None);
        assert!(
            alone.path.fixture_goodput_mbit > 0.0 && alone.path.fixture_goodput_mbit < 20.0,
            "{:?}",
            alone.path
        );
        assert!(alone.path.link_drops.is_some());
    });
}
