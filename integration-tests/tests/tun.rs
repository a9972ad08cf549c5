//! Self-tests of the kernel-faithful link ([`integration_tests::tun`], root only): the RTT
//! and the rate it delivers to kernel TCP between its two namespaces, tail drop, the
//! congestion control, cleanup (after a normal run, a panic and a crashed process), and one
//! run of the experiment's `late` workload through it.
//!
//! They need root (network namespaces, /dev/net/tun). Not as root they print a skip line,
//! except under CI (`CI` is `true` or `1`; CI runs as root), where they fail. They measure
//! time: one at a time.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use integration_tests::client::pattern_byte;
use integration_tests::tun::{
    self, CongestionControl, Side, TunConfig, TunLink, CLIENT_PREFIX, SERVER_ADDR, SERVER_PREFIX,
};
use integration_tests::workload::{
    run_tun, run_tun_clients, Case, Urgencies, Workload, BACKGROUND_LEN, CRITICAL_LEN,
    LATE_THRESHOLD,
};
use support::{have_root, median, run_alone, serial};

/// 20 ms RTT, 20 Mbit/s, 1000 packets, MTU 1500 (the lab's link) with `cc`.
fn lab_link(cc: CongestionControl) -> TunConfig {
    TunConfig {
        cc,
        ..TunConfig::default()
    }
}

/// A listener on the server's address inside the server namespace.
fn listen(link: &TunLink) -> TcpListener {
    link.run_in(Side::Server, || TcpListener::bind((SERVER_ADDR, 0)))
        .unwrap()
        .unwrap()
}

/// Connects from the client namespace.
fn connect(link: &TunLink, addr: SocketAddr) -> TcpStream {
    link.run_in(Side::Client, move || TcpStream::connect(addr))
        .unwrap()
        .unwrap()
}

fn namespaces() -> Vec<String> {
    tun::list_namespaces().expect("ip netns list")
}

fn sysctl_in(namespace: &str, key: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", namespace, "sysctl", "-n", key])
        .output()
        .expect("ip netns exec sysctl");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn rtt_is_delivered() {
    if !have_root("rtt_is_delivered") {
        return;
    }
    let _serial = serial();
    let config = TunConfig {
        rtt: Duration::from_millis(40),
        ..lab_link(CongestionControl::Cubic)
    };
    let link = TunLink::start(config.clone()).unwrap();
    let listener = listen(&link);
    let addr = link.server_addr(listener.local_addr().unwrap().port());
    // Echo server: sockets created in a namespace stay there, whichever thread uses them.
    let echo = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_nodelay(true).unwrap();
        let mut buf = [0u8; 64];
        while stream.read_exact(&mut buf).is_ok() {
            stream.write_all(&buf).unwrap();
        }
    });
    let mut stream = connect(&link, addr);
    stream.set_nodelay(true).unwrap();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0..25u8 {
        let sent = Instant::now();
        stream.write_all(&[i; 64]).unwrap();
        stream.read_exact(&mut buf).unwrap();
        rtts.push(sent.elapsed().as_secs_f64() * 1e3);
        assert_eq!(buf, [i; 64]);
    }
    drop(stream);
    echo.join().unwrap();
    let stats = link.stats();
    let rtt_ms = median(&mut rtts);
    let want = config.rtt.as_secs_f64() * 1e3;
    eprintln!(
        "tun rtt: median {rtt_ms:.2} ms (min {:.2}, max {:.2}) for {want} ms configured; \
         delivery lateness mean {:.0} us, max {} us",
        rtts[0],
        rtts[rtts.len() - 1],
        stats.downstream.late_us_mean(),
        stats.upstream.late_us_max.max(stats.downstream.late_us_max),
    );
    assert!(
        rtts[0] >= want,
        "a round trip was faster than the RTT: {rtts:?}"
    );
    assert!(
        (rtt_ms - want).abs() <= want * 0.1,
        "median RTT {rtt_ms:.2} ms is not within 10% of {want} ms: {rtts:?}"
    );
    assert_eq!(stats.upstream.dropped + stats.downstream.dropped, 0);
}

/// Sends `total` bytes from the server namespace to the client namespace and returns the
/// receiver-side goodput over the second half, in Mbit/s.
fn bulk_goodput(link: &TunLink, total: usize) -> f64 {
    let listener = listen(link);
    let addr = link.server_addr(listener.local_addr().unwrap().port());
    let sender = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let chunk: Vec<u8> = (0..64 * 1024).map(pattern_byte).collect();
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            stream.write_all(&chunk[..n]).unwrap();
            sent += n;
        }
    });
    let mut stream = connect(link, addr);
    let mut buf = vec![0u8; 64 * 1024];
    let mut received = 0usize;
    let mut half_at = None;
    let mut offset = 0u64;
    loop {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        // Byte-exact: the pattern continues across reads.
        for (i, &b) in buf[..n].iter().enumerate() {
            let at = offset + i as u64;
            assert_eq!(b, pattern_byte(at % (64 * 1024)), "byte {at}");
        }
        offset += n as u64;
        received += n;
        if half_at.is_none() && received >= total / 2 {
            half_at = Some((Instant::now(), received));
        }
    }
    let done = Instant::now();
    sender.join().unwrap();
    assert_eq!(received, total);
    let (half_at, at_half) = half_at.unwrap();
    (total - at_half) as f64 * 8.0 / (done - half_at).as_secs_f64() / 1e6
}

fn rate_is_delivered(cc: CongestionControl) {
    let _serial = serial();
    let config = lab_link(cc);
    let link = TunLink::start(config.clone()).unwrap();
    assert_eq!(
        sysctl_in(
            link.namespace(Side::Server),
            "net.ipv4.tcp_congestion_control"
        ),
        cc.name()
    );
    assert_eq!(
        sysctl_in(
            link.namespace(Side::Client),
            "net.ipv4.tcp_congestion_control"
        ),
        cc.name()
    );
    let started = Instant::now();
    let goodput = bulk_goodput(&link, 4_000_000);
    let stats = link.stats();
    // The rate counts IP bytes: a full segment carries 1448 payload bytes (TCP timestamps)
    // in a 1500-byte packet.
    let expected = config.rate_mbit * 1448.0 / 1500.0;
    eprintln!(
        "tun rate ({cc}): {goodput:.2} Mbit/s goodput over the last 2 MB of 4 MB \
         (expected {expected:.2} = {} Mbit/s of IP packets); {:.2} s in all; \
         downstream: {} packets, {} dropped, queue up to {} packets, lateness mean {:.0} us, \
         max {} us",
        config.rate_mbit,
        started.elapsed().as_secs_f64(),
        stats.downstream.delivered,
        stats.downstream.dropped,
        stats.downstream.max_queue,
        stats.downstream.late_us_mean(),
        stats.downstream.late_us_max,
    );
    assert!(
        (goodput - expected).abs() <= expected * 0.1,
        "goodput {goodput:.2} Mbit/s is not within 10% of {expected:.2}"
    );
    assert!((goodput - config.rate_mbit).abs() <= config.rate_mbit * 0.1);
}

#[test]
fn rate_is_delivered_with_cubic() {
    if have_root("rate_is_delivered_with_cubic") {
        rate_is_delivered(CongestionControl::Cubic);
    }
}

#[test]
fn rate_is_delivered_with_bbr() {
    if have_root("rate_is_delivered_with_bbr") {
        rate_is_delivered(CongestionControl::Bbr);
    }
}

#[test]
fn a_full_queue_drops_at_the_tail() {
    if !have_root("a_full_queue_drops_at_the_tail") {
        return;
    }
    let _serial = serial();
    let config = TunConfig {
        queue_packets: 8,
        ..lab_link(CongestionControl::Cubic)
    };
    let link = TunLink::start(config.clone()).unwrap();
    // TCP recovers every loss: the transfer still arrives byte-exact.
    bulk_goodput(&link, 1_000_000);
    let stats = link.stats();
    eprintln!("tun queue of 8 packets: {stats:?}");
    assert!(stats.downstream.dropped > 0, "{stats:?}");
    assert!(stats.downstream.max_queue <= 8, "{stats:?}");
}

#[test]
fn namespaces_are_removed_after_a_run_a_panic_and_a_crash() {
    if !have_root("namespaces_are_removed_after_a_run_a_panic_and_a_crash") {
        return;
    }
    let _serial = serial();
    // Which of `link_names` exist, in their order.
    let ours = |names: &[String], link_names: &[String]| -> Vec<String> {
        link_names
            .iter()
            .filter(|n| names.contains(n))
            .cloned()
            .collect()
    };
    // A normal run.
    let link = TunLink::start(TunConfig::default()).unwrap();
    let names = vec![
        link.namespace(Side::Client).to_string(),
        link.namespace(Side::Server).to_string(),
    ];
    assert!(names[0].starts_with(CLIENT_PREFIX) && names[1].starts_with(SERVER_PREFIX));
    assert_eq!(ours(&namespaces(), &names), names);
    let device = Command::new("ip")
        .args(["-n", &names[1], "-o", "address", "show", "dev", "tun0"])
        .output()
        .unwrap();
    let device = String::from_utf8_lossy(&device.stdout);
    assert!(device.contains("10.77.0.2/30"), "{device}");
    drop(link);
    assert_eq!(ours(&namespaces(), &names), Vec::<String>::new());

    // A run that panics while the link is up.
    let (tx, rx) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let link = TunLink::start(TunConfig::default()).unwrap();
        tx.send(vec![
            link.namespace(Side::Client).to_string(),
            link.namespace(Side::Server).to_string(),
        ])
        .unwrap();
        link.run_in(Side::Client, || -> () { panic!("a failing run") })
            .unwrap();
    })
    .join();
    assert!(panicked.is_err());
    let names = rx.recv().unwrap();
    assert_eq!(ours(&namespaces(), &names), Vec::<String>::new());

    // A process that died without cleaning up: namespaces named after a pid that does not
    // exist (above the kernel's pid_max) are removed by the next start.
    let stale = vec![
        format!("{CLIENT_PREFIX}4194305-0"),
        format!("{SERVER_PREFIX}4194305-0"),
    ];
    for name in &stale {
        let status = Command::new("ip")
            .args(["netns", "add", name])
            .status()
            .unwrap();
        assert!(status.success());
    }
    assert_eq!(ours(&namespaces(), &stale), stale);
    let link = TunLink::start(TunConfig::default()).unwrap();
    assert_eq!(ours(&namespaces(), &stale), Vec::<String>::new());
    drop(link);
}

#[test]
fn late_scheduled_run_through_the_tun_link_is_byte_exact() {
    if !have_root("late_scheduled_run_through_the_tun_link_is_byte_exact") {
        return;
    }
    // Alone (other tests' links would show among the namespaces), on a fresh runtime.
    run_alone(async {
        let before = namespaces();
        let config = lab_link(CongestionControl::Cubic);
        let r = run_tun(
            &Case::Scheduled,
            Workload::Late,
            Urgencies::Explicit,
            &config,
        )
        .await
        .unwrap();
        eprintln!("scheduled/late/explicit through the tun link: {r:?}");
        assert_eq!(r.case, "scheduled");
        assert!(r.background_bytes_at_critical_request >= LATE_THRESHOLD as u64);
        assert!(r.wire_bytes > 2 * BACKGROUND_LEN + CRITICAL_LEN);
        // The critical response takes at least one RTT after its request left.
        assert!(
            r.critical_complete_ms >= config.rtt.as_secs_f64() * 1e3,
            "{r:?}"
        );
        // Everything the run created is gone.
        let after: Vec<String> = namespaces()
            .into_iter()
            .filter(|n| !before.contains(n))
            .filter(|n| n.starts_with(CLIENT_PREFIX) || n.starts_with(SERVER_PREFIX))
            .collect();
        assert!(after.is_empty(), "left behind: {after:?}");
    });
}

#[test]
fn several_clients_share_one_server_and_the_link_each_byte_exact() {
    if !have_root("several_clients_share_one_server_and_the_link_each_byte_exact") {
        return;
    }
    run_alone(async {
        const CLIENTS: usize = 4;
        let config = TunConfig {
            clients: CLIENTS,
            ..lab_link(CongestionControl::Cubic)
        };
        let runs = run_tun_clients(
            &Case::Scheduled,
            Workload::Simultaneous,
            Urgencies::Explicit,
            &config,
        )
        .await
        .unwrap();
        assert_eq!(runs.len(), CLIENTS);
        for (i, run) in runs.into_iter().enumerate() {
            // `fixture` checked every body byte for byte.
            let r = run.unwrap_or_else(|e| panic!("client {i}: {e}"));
            assert_eq!(r.client, i);
            assert!(r.wire_bytes > 2 * BACKGROUND_LEN + CRITICAL_LEN, "{r:?}");
            // At once, not one after another: each gets about a quarter of the link.
            let goodput = r.path.fixture_goodput_mbit;
            assert!(
                goodput < config.rate_mbit / 2.0,
                "client {i}: {goodput} Mbit/s"
            );
            assert_eq!(
                r.attribution.server_queued_bytes_at_request, None,
                "not its own"
            );
        }
    });
}
