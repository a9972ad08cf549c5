//! Kernel-faithful link (root only): two network namespaces, a TUN device in each, and a
//! user-space packet emulator between the two devices, so that the client's and the server's
//! kernel TCP (congestion control, slow start, pacing, ACK clocking, send-buffer autotuning)
//! run over the emulated path itself, end to end.
//!
//! [`TunLink::start`] creates:
//!
//! - a **client** namespace `tfc-<pid>-<n>` and a **server** namespace `tfs-<pid>-<n>`, with
//!   `lo` up in both;
//! - in each, a TUN device `tun0` (`IFF_TUN | IFF_NO_PI`: raw IP packets), MTU 1500 by
//!   default, addressed [`CLIENT_ADDR`]`/30` (client) and [`SERVER_ADDR`]`/30` (server), so the
//!   connected /30 route of each side goes through its TUN device. These addresses exist only
//!   inside the two namespaces: no packet leaves them. Its transmit queue (the emulator's
//!   input) holds [`DEVICE_TX_QUEUE`] packets, so that a stalled emulator thread delays
//!   packets instead of dropping them outside the emulated link;
//! - in each, `net.ipv4.tcp_congestion_control` set to [`TunConfig::cc`] (`cubic` or `bbr`),
//!   `net.ipv4.tcp_no_metrics_save` set (no cached ssthresh from an earlier connection), and
//!   IPv6 off (no router solicitations or MLD reports on the emulated wire);
//! - four emulator threads: per direction, one reading packets from the sender's TUN device
//!   and one delivering them to the receiver's.
//!
//! Sockets belong to the network namespace of the thread that creates them:
//! [`TunLink::run_in`] and [`TunLink::spawn_in`] run a closure on a fresh thread that entered
//! a namespace (`setns`), where a tokio current-thread runtime can run an in-process server or
//! the client; [`TunLink::command_prefix`] is `ip netns exec NAME` for child processes (the
//! peer servers of [`crate::peers`]). The server listens on [`SERVER_ADDR`], the client
//! connects to it from the client namespace.
//!
//! # What it models
//!
//! Per direction, a bottleneck router feeding a wire, like `netem rate … delay … limit …`,
//! optionally behind an impaired access link (loss, jitter, a recorded cellular rate):
//!
//! - **Loss.** With [`TunConfig::loss_percent`], each packet entering the bottleneck is first
//!   lost or not: independently (Bernoulli), or in bursts ([`TunConfig::loss_burst`], a
//!   Gilbert-Elliott chain with the same average rate). A lost packet never occupies the
//!   queue and is counted in [`DirectionStats::lost`], apart from tail drops (in a
//!   [`PacketEvent`] it shows as `dropped`).
//! - **Queue.** A packet the sender's kernel hands to its TUN device is read at once (the
//!   device's own queue stays empty: for the kernel, the packet has left the host, as on a
//!   real NIC) and joins the emulated queue. The queue holds at most
//!   [`TunConfig::queue_packets`] packets (default [`DEFAULT_QUEUE_PACKETS`], netem's default
//!   `limit`), counting the one being serialized; a packet arriving at a full queue is
//!   dropped (tail drop) and counted ([`DirectionStats::dropped`]). Unlike netem's `limit`,
//!   packets already on the wire (serialized, propagating) do not count: they are bounded by
//!   the pipe, `rate × one-way delay`.
//! - **Serialization.** Each packet leaves the queue at `max(arrival, previous departure) +
//!   len / rate`, where `len` is the IP packet's length (IP and TCP headers count, no
//!   link-layer framing): a full-sized TCP segment with timestamps carries 1448 payload bytes
//!   in 1500, so bulk TCP goodput is about 96.5% of [`TunConfig::rate_mbit`]. The schedule is
//!   computed from arrival times, never from when a timer fired, so the rate does not drift.
//!   With a [`TunConfig::rate_trace`] ([`RateTrace`], mahimahi's format) a direction's
//!   packets leave at the trace's delivery opportunities instead, 1500 bytes each
//!   (mahimahi's byte accounting: small packets share one, a packet that does not fit in
//!   what is left continues at the next); what the queue leaves unused is lost, never
//!   saved. Trace time 0 is when the link starts, and the trace loops.
//! - **Propagation.** A packet is written to the receiver's TUN device one one-way delay
//!   (`rtt / 2`) after its serialization ends, plus, with [`TunConfig::jitter`], an extra
//!   delay drawn uniformly from `[0, 2 × jitter]`, but never before the packet ahead of it.
//! - **Order.** FIFO per direction: no reordering, duplication or corruption; loss only by
//!   tail drop and the loss model.
//! - **Randomness.** Loss and jitter draw from [`TunConfig::seed`], each direction and each
//!   impairment from its own stream: the `n`-th packet of a direction meets the same fate
//!   for the same seed.
//!
//! # Timing
//!
//! Each direction's delivery thread waits on a condition variable with the head packet's
//! deadline (a futex with a monotonic timeout, precise to tens of microseconds, like the
//! relay link's timer thread) and never delivers early; on a loaded machine scheduling
//! latency can make it late. [`DirectionStats`] records how late deliveries were.
//!
//! # Cleanup
//!
//! Dropping the [`TunLink`] stops the emulator threads, closes the TUN devices (which
//! removes them) and deletes both namespaces. A link that fails half-way through
//! [`TunLink::start`] removes what it had created; a panic while a link is alive unwinds
//! through its `Drop`. Namespaces left by a process that died without unwinding (killed, or
//! `panic = "abort"`) are removed by the next [`TunLink::start`]: every `tfc-<pid>-*` and
//! `tfs-<pid>-*` namespace whose process no longer exists ([`remove_stale`]).
//!
//! # Files
//!
//! - `mod.rs`: the configuration and [`TunLink`] (start, sides, counters);
//! - `netns.rs`: the network namespaces: creating, entering, configuring (sysctls, the TUN
//!   device) and removing them (`ip netns`);
//! - `cross.rs`: cross traffic, bulk TCP flows sharing the bottleneck ([`CrossTraffic`]);
//! - `emulator.rs`: the packet emulator (queue, serialization, propagation) and its counters;
//! - `impair.rs`: the random impairments: loss (Bernoulli, Gilbert-Elliott), jitter, seeds;
//! - `rate_trace.rs`: rate traces (parsing, loading test data from [`TRACE_DIR`]) and the
//!   departure schedule of a direction, at a fixed rate or a trace's opportunities;
//! - `sys.rs`: the system calls std does not wrap: `setns(2)` and `poll(2)` (through rustix),
//!   and the `TUNSETIFF` `ioctl(2)`: the link's only `unsafe` code.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use std::net::{SocketAddr, TcpListener, TcpStream};
//! use integration_tests::tun::{Side, TunConfig, TunLink, SERVER_ADDR};
//!
//! let link = TunLink::start(TunConfig::default())?;
//! println!("{}", link.config().describe());
//! let listener = link.run_in(Side::Server, || TcpListener::bind((SERVER_ADDR, 0)))??;
//! let port = listener.local_addr()?.port();
//! let server = std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut stream, _) = listener.accept()?;
//!     stream.write_all(b"hello")
//! });
//! let mut hello = String::new();
//! link.run_in(Side::Client, move || {
//!     TcpStream::connect(SocketAddr::from((SERVER_ADDR, port)))?.read_to_string(&mut hello)?;
//!     Ok::<_, std::io::Error>(hello)
//! })??;
//! server.join().unwrap()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cross;
mod emulator;
mod impair;
mod netns;
mod rate_trace;
mod sys;
mod trace;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use cross::{cross_head_start, CrossTraffic, CROSS_HEAD_START, CROSS_PHASE_SPREAD};
pub use emulator::{DirectionStats, TunStats};
pub use impair::{derive_seed, MAX_JITTER};
pub use netns::{enter_namespace, is_root, list_namespaces, remove_stale};
pub use rate_trace::{RateTrace, RateTraces, KNOWN_TRACES, OPPORTUNITY_BYTES, TRACE_DIR};
pub use trace::{Direction, PacketEvent, PayloadArrival, TcpFields, MAX_PAYLOAD_ARRIVALS};

use crate::link::LinkConfig;
use crate::BoxError;
use emulator::Emulator;
use netns::{allow_congestion_control, context, in_namespace, ip, setup_namespace, Namespaces};

/// The client's address (inside the client namespace only).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The server's address (inside the server namespace only): where servers listen.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// Prefix length of the point-to-point subnet of the two addresses.
pub const PREFIX_LEN: u8 = 30;
/// Name of the TUN device in each namespace.
pub const DEVICE: &str = "tun0";
/// Transmit queue of each TUN device, in packets: what the kernel holds for the emulator's
/// reader. The default (500) is 10 ms of the loss test's 50 datagrams per ms; a reader
/// descheduled longer on a loaded two-core CI machine lost 100-600 of 100,000 datagrams
/// there, drops no emulated link makes. 10,000 is 200 ms of that stream, and 120 ms of
/// full-size packets at 1 Gbit/s. TCP does not see this queue (the TUN driver orphans each
/// packet as it enqueues it, so TCP Small Queues counts it as sent), only a late reader does.
pub const DEVICE_TX_QUEUE: u32 = 10_000;
/// Default queue limit per direction, in packets (netem's default `limit`).
pub const DEFAULT_QUEUE_PACKETS: usize = 1000;
/// Default MTU of the TUN devices.
pub const DEFAULT_MTU: u32 = 1500;
/// Prefix of the client namespaces' names (`tfc-<pid>-<n>`).
pub const CLIENT_PREFIX: &str = "tfc-";
/// Prefix of the server namespaces' names (`tfs-<pid>-<n>`).
pub const SERVER_PREFIX: &str = "tfs-";
/// Why [`TunLink::start`] fails when not run as root.
pub const NEEDS_ROOT: &str = "the tun link needs root (network namespaces and /dev/net/tun)";

/// Largest packet read from a TUN device (more than any MTU we set).
const MAX_PACKET: usize = 65536;

/// The TCP congestion control of both namespaces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CongestionControl {
    /// CUBIC (Linux's default).
    #[default]
    Cubic,
    /// BBR (v1, as in mainline Linux).
    Bbr,
}

impl CongestionControl {
    /// Both.
    pub const ALL: [CongestionControl; 2] = [CongestionControl::Cubic, CongestionControl::Bbr];

    /// The name on the command line, and in `net.ipv4.tcp_congestion_control`.
    pub fn name(self) -> &'static str {
        match self {
            CongestionControl::Cubic => "cubic",
            CongestionControl::Bbr => "bbr",
        }
    }
}

impl fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CongestionControl {
    type Err = String;

    /// `cubic` or `bbr`.
    ///
    /// ```
    /// use integration_tests::tun::CongestionControl;
    /// assert_eq!("bbr".parse(), Ok(CongestionControl::Bbr));
    /// assert!("reno".parse::<CongestionControl>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CongestionControl::ALL
            .into_iter()
            .find(|cc| cc.name() == s.trim())
            .ok_or_else(|| format!("unknown congestion control `{s}` (known: cubic, bbr)"))
    }
}

/// Parameters of the tun link, applied to each direction independently.
#[derive(Debug, Clone, PartialEq)]
pub struct TunConfig {
    /// Round-trip propagation delay; each direction delays by half of it.
    pub rtt: Duration,
    /// Rate of each direction in Mbit/s (10^6 bits per second) of IP packet bytes (a
    /// direction with a [`rate_trace`](Self::rate_trace) follows the trace instead).
    pub rate_mbit: f64,
    /// Queue limit per direction in packets (the one being serialized included).
    pub queue_packets: usize,
    /// MTU of both TUN devices.
    pub mtu: u32,
    /// TCP congestion control in both namespaces.
    pub cc: CongestionControl,
    /// Packets to record in the trace ([`TunLink::trace`]), the first ones; 0: no trace.
    pub trace_packets: usize,
    /// Random loss of the packets entering each direction's bottleneck, in percent (0 to
    /// 100; 0: none), counted in [`DirectionStats::lost`].
    pub loss_percent: f64,
    /// Mean length of a loss burst in packets (at least 1): losses follow a Gilbert-Elliott
    /// chain with the same average rate; `None`: independent losses (Bernoulli).
    pub loss_burst: Option<f64>,
    /// Mean extra delay of each packet, each direction: drawn uniformly from
    /// `[0, 2 × jitter]`, never reordering (at most [`MAX_JITTER`]; zero: none).
    pub jitter: Duration,
    /// Delivery-opportunity traces (mahimahi's format) replacing
    /// [`rate_mbit`](Self::rate_mbit): downstream, and optionally upstream; `None`: the
    /// fixed rate both ways.
    pub rate_trace: Option<RateTraces>,
    /// Seed of the random impairments (loss, jitter): each direction and each impairment
    /// draws from its own stream derived from it ([`derive_seed`]).
    pub seed: u64,
    /// Bulk TCP flows of cross traffic ([`CrossTraffic`]) through the bottleneck during a
    /// lab run ([`crate::workload::run_tun`]); 0: none. The link itself does not start them.
    pub cross_flows: usize,
    /// Clients that run a lab run's workload at once on one server, each on its own
    /// connection ([`crate::workload::run_tun_clients`]); at least 1. The link itself does
    /// not start them.
    pub clients: usize,
}

impl Default for TunConfig {
    /// 20 ms RTT, 20 Mbit/s each way, queue of 1000 packets, MTU 1500, CUBIC.
    fn default() -> Self {
        TunConfig::from_link(&LinkConfig::default())
    }
}

impl TunConfig {
    /// The RTT and rate of a relay link's configuration, with the default queue (its byte
    /// limit does not carry over: this queue counts packets), MTU and congestion control.
    pub fn from_link(link: &LinkConfig) -> TunConfig {
        TunConfig {
            rtt: link.rtt,
            rate_mbit: link.rate_mbit,
            queue_packets: DEFAULT_QUEUE_PACKETS,
            mtu: DEFAULT_MTU,
            cc: CongestionControl::default(),
            trace_packets: 0,
            loss_percent: 0.0,
            loss_burst: None,
            jitter: Duration::ZERO,
            rate_trace: None,
            seed: 0,
            cross_flows: 0,
            clients: 1,
        }
    }

    /// The delay of each direction: half the RTT.
    pub fn one_way_delay(&self) -> Duration {
        self.rtt / 2
    }

    /// Time the wire takes to serialize `bytes` (of IP packet) at the link's rate.
    pub fn serialization(&self, bytes: usize) -> Duration {
        Duration::from_secs_f64(bytes as f64 * 8.0 / (self.rate_mbit * 1e6))
    }

    /// One line for the top of a results table, e.g. `tun link: 20 ms RTT, 20 Mbit/s each
    /// way, queue 1000 packets, MTU 1500, cc cubic; two network namespaces, kernel TCP end
    /// to end`. A rate trace replaces the rate of its direction, and every impairment that
    /// is on follows the congestion control, e.g. `, loss 1% each way (Gilbert-Elliott,
    /// bursts of 3 packets on average), jitter 5 ms each way (uniform 0 to 10 ms, no
    /// reordering)`.
    pub fn describe(&self) -> String {
        format!(
            "tun link: {} ms RTT, {}, queue {} packets, MTU {}, cc {}{}; \
             two network namespaces, kernel TCP end to end",
            round(self.rtt.as_secs_f64() * 1e3, 3),
            self.describe_rate(),
            self.queue_packets,
            self.mtu,
            self.cc,
            self.describe_impairments(),
        ) + &self.describe_cross()
            + &self.describe_clients()
    }

    /// `20 Mbit/s each way`, or each direction's rate trace (or rate).
    fn describe_rate(&self) -> String {
        let fixed = format!("{} Mbit/s", round(self.rate_mbit, 3));
        let Some(traces) = &self.rate_trace else {
            return fixed + " each way";
        };
        let traced = |t: &RateTrace| {
            format!(
                "rate trace {} (mean {} Mbit/s, looping every {} s)",
                t.name(),
                round(t.mean_rate_mbit(), 2),
                round(t.period().as_secs_f64(), 3)
            )
        };
        format!(
            "down {}, up {}",
            traced(&traces.downstream),
            traces.upstream.as_ref().map_or(fixed, traced)
        )
    }

    /// `, loss …, jitter …` for the impairments that are on, else empty.
    fn describe_impairments(&self) -> String {
        let mut out = String::new();
        if self.loss_percent > 0.0 {
            out += &format!(", loss {}% each way", round(self.loss_percent, 4));
            out += &match self.loss_burst {
                Some(burst) => format!(
                    " (Gilbert-Elliott, bursts of {} packets on average)",
                    round(burst, 3)
                ),
                None => " (independent)".to_string(),
            };
        }
        if !self.jitter.is_zero() {
            let ms = self.jitter.as_secs_f64() * 1e3;
            out += &format!(
                ", jitter {} ms each way (uniform 0 to {} ms, no reordering)",
                round(ms, 3),
                round(2.0 * ms, 3)
            );
        }
        out
    }

    /// `; cross traffic: N bulk TCP flows, 3-4 s head start (seeded)` with cross flows,
    /// else empty.
    fn describe_cross(&self) -> String {
        match self.cross_flows {
            0 => String::new(),
            n => format!(
                "; cross traffic: {n} bulk TCP flow{} server to client, {}-{} s head start (seeded)",
                if n == 1 { "" } else { "s" },
                CROSS_HEAD_START.as_secs_f64(),
                (CROSS_HEAD_START + CROSS_PHASE_SPREAD).as_secs_f64()
            ),
        }
    }

    fn describe_clients(&self) -> String {
        match self.clients {
            0 | 1 => String::new(),
            n => format!("; {n} clients at once, each on its own connection to one server"),
        }
    }

    /// Checks the parameters ([`TunLink::start`] does too): a positive rate, a queue of at
    /// least one packet, an MTU of 576 to 65536, a loss rate of 0 to 100% that its mean
    /// burst (at least 1 packet) can reach, and a jitter of at most [`MAX_JITTER`].
    pub fn validate(&self) -> io::Result<()> {
        let invalid = |message: String| Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        if !(self.rate_mbit.is_finite() && self.rate_mbit > 0.0) {
            return invalid(format!(
                "link rate must be a positive number of Mbit/s, got {}",
                self.rate_mbit
            ));
        }
        if self.queue_packets == 0 {
            return invalid("the tun link's queue must hold at least 1 packet".into());
        }
        if !(576..=MAX_PACKET as u32).contains(&self.mtu) {
            return invalid(format!(
                "the tun link's MTU must be 576 to {MAX_PACKET}, got {}",
                self.mtu
            ));
        }
        impair::LossModel::new(self.loss_percent, self.loss_burst)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if self.jitter > MAX_JITTER {
            return invalid(format!(
                "the tun link's jitter must be at most {} s, got {:?}",
                MAX_JITTER.as_secs(),
                self.jitter
            ));
        }
        Ok(())
    }
}

/// A number rounded to `decimals`, printed without trailing zeros.
fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    let v = (value * scale).round() / scale;
    if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// One end of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The client namespace ([`CLIENT_ADDR`]).
    Client,
    /// The server namespace ([`SERVER_ADDR`]).
    Server,
}

impl Side {
    /// This side's address.
    pub fn addr(self) -> Ipv4Addr {
        match self {
            Side::Client => CLIENT_ADDR,
            Side::Server => SERVER_ADDR,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Side::Client => CLIENT_PREFIX,
            Side::Server => SERVER_PREFIX,
        }
    }
}

/// A running tun link (see the [module documentation](self)); dropping it removes
/// everything it created.
pub struct TunLink {
    config: TunConfig,
    // Field order is drop order: the emulator (threads, TUN devices) goes first, then the
    // namespaces.
    emulator: Emulator,
    namespaces: Namespaces,
    started: Instant,
}

impl fmt::Debug for TunLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TunLink")
            .field("config", &self.config)
            .field("client", &self.namespace(Side::Client))
            .field("server", &self.namespace(Side::Server))
            .finish_non_exhaustive()
    }
}

impl TunLink {
    /// Creates the namespaces, the TUN devices and the emulator (see the
    /// [module documentation](self)). Fails with [`NEEDS_ROOT`] when not run as root, and
    /// when `config` is invalid or a step fails (removing whatever it had created).
    pub fn start(config: TunConfig) -> io::Result<TunLink> {
        if !is_root() {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, NEEDS_ROOT));
        }
        config.validate()?;
        allow_congestion_control(config.cc)?;
        if let Err(error) = remove_stale() {
            tracing::warn!(%error, "removing stale tun link namespaces");
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let mut namespaces = Namespaces::default();
        let mut devices = Vec::new();
        for side in [Side::Client, Side::Server] {
            let name = format!("{}{pid}-{n}", side.prefix());
            namespaces.add(&name)?;
            let device = in_namespace(&name, move || setup_namespace(config.cc))
                .and_then(|r| r)
                .map_err(|e| context(e, format!("setting up namespace {name}")))?;
            ip(
                &["-n", &name, "-batch", "-"],
                Some(&format!(
                    "link set dev lo up\n\
                     link set dev {DEVICE} mtu {mtu} txqueuelen {DEVICE_TX_QUEUE} up\n\
                     address add {addr}/{PREFIX_LEN} dev {DEVICE}\n",
                    mtu = config.mtu,
                    addr = side.addr(),
                )),
            )?;
            devices.push(device);
        }
        let server_device = Arc::new(devices.pop().expect("two devices"));
        let client_device = Arc::new(devices.pop().expect("two devices"));
        let started = Instant::now();
        let emulator = Emulator::start(&config, started, client_device, server_device)?;
        let link = TunLink {
            config,
            emulator,
            namespaces,
            started,
        };
        tracing::debug!(link = ?link, "tun link started");
        Ok(link)
    }

    /// The link's parameters.
    pub fn config(&self) -> &TunConfig {
        &self.config
    }

    /// The name of a side's network namespace (for `ip netns exec`).
    pub fn namespace(&self, side: Side) -> &str {
        &self.namespaces.names[match side {
            Side::Client => 0,
            Side::Server => 1,
        }]
    }

    /// Where a server listening on `port` in the server namespace is reached from the client
    /// namespace.
    pub fn server_addr(&self, port: u16) -> SocketAddr {
        SocketAddr::from((SERVER_ADDR, port))
    }

    /// The words that run a command in a side's namespace: `ip netns exec NAME`.
    pub fn command_prefix(&self, side: Side) -> Vec<OsString> {
        ["ip", "netns", "exec", self.namespace(side)]
            .into_iter()
            .map(OsString::from)
            .collect()
    }

    /// Runs `f` on a fresh thread inside a side's namespace, waits for it and returns what it
    /// returned (a panic in `f` is resumed here). Sockets `f` creates belong to the
    /// namespace, and keep belonging to it wherever they are used afterwards.
    pub fn run_in<T, F>(&self, side: Side, f: F) -> io::Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        in_namespace(self.namespace(side), f)
    }

    /// Starts `f` on a fresh thread (named `name`) inside a side's namespace; the thread
    /// returns an error without running `f` if it cannot enter the namespace. Threads `f`
    /// starts are in the namespace too.
    pub fn spawn_in<T, F>(
        &self,
        side: Side,
        name: &str,
        f: F,
    ) -> io::Result<JoinHandle<io::Result<T>>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let namespace = self.namespace(side).to_string();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                enter_namespace(&namespace)?;
                Ok(f())
            })
    }

    /// The emulator's counters so far.
    pub fn stats(&self) -> TunStats {
        self.emulator.stats()
    }

    /// When the emulator started (the origin of a trace's times).
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// The client-to-server packets with TCP payload so far, in order (the first
    /// [`MAX_PAYLOAD_ARRIVALS`]), each with the server-to-client queue when it reached the
    /// server.
    pub fn payload_arrivals(&self) -> Vec<PayloadArrival> {
        self.emulator.payload_arrivals()
    }

    /// The bytes in the server-to-client queue when the first client-to-server packet with
    /// TCP payload that left the client at or after `sent` reached the server: with `sent`
    /// the moment a request was written, the queue ahead of that request's response when
    /// the server read it. `None` when no such packet was logged.
    pub fn downstream_queue_after(&self, sent: Instant) -> Option<u64> {
        self.payload_arrivals()
            .iter()
            .find(|a| a.sent >= sent)
            .map(|a| a.downstream_queue_bytes)
    }

    /// Every packet so far, both directions in the order the emulator read them, up to
    /// [`TunConfig::trace_packets`] (empty when that is 0).
    pub fn trace(&self) -> Vec<PacketEvent> {
        self.emulator.trace()
    }
}

/// Runs a blocking job (starting or stopping a link, joining a namespace thread) off the
/// async runtime's worker threads.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, BoxError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task: {e}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_itself() {
        let config = TunConfig::default();
        assert_eq!(
            config.describe(),
            "tun link: 20 ms RTT, 20 Mbit/s each way, queue 1000 packets, MTU 1500, cc cubic; \
             two network namespaces, kernel TCP end to end"
        );
        let bbr = TunConfig {
            rtt: Duration::from_micros(12_500),
            cc: CongestionControl::Bbr,
            ..config.clone()
        };
        assert!(bbr.describe().starts_with("tun link: 12.5 ms RTT"));
        assert!(bbr.describe().contains("cc bbr"));
        let cross = TunConfig {
            cross_flows: 2,
            ..config.clone()
        };
        assert!(cross.describe().ends_with(
            "kernel TCP end to end; cross traffic: 2 bulk TCP flows server to client, 3-4 s \
             head start (seeded)"
        ));
        assert_eq!(config.serialization(1500), Duration::from_micros(600));
        assert!(TunConfig {
            queue_packets: 0,
            ..config.clone()
        }
        .validate()
        .is_err());
        assert!(TunConfig {
            rate_mbit: 0.0,
            ..config.clone()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn describes_and_checks_impairments() {
        let config = TunConfig {
            loss_percent: 1.0,
            loss_burst: Some(3.0),
            jitter: Duration::from_millis(5),
            ..TunConfig::default()
        };
        assert_eq!(
            config.describe(),
            "tun link: 20 ms RTT, 20 Mbit/s each way, queue 1000 packets, MTU 1500, cc cubic, \
             loss 1% each way (Gilbert-Elliott, bursts of 3 packets on average), jitter 5 ms \
             each way (uniform 0 to 10 ms, no reordering); two network namespaces, kernel TCP \
             end to end"
        );
        config.validate().unwrap();
        let independent = TunConfig {
            loss_burst: None,
            jitter: Duration::ZERO,
            ..config.clone()
        };
        assert!(independent
            .describe()
            .contains("cc cubic, loss 1% each way (independent); two"));
        let traced = TunConfig {
            rate_trace: Some(RateTraces {
                downstream: RateTrace::parse("fast.down", "1\n1\n2\n2\n").unwrap(),
                upstream: None,
                start: Duration::ZERO,
            }),
            ..TunConfig::default()
        };
        assert!(traced.describe().starts_with(
            "tun link: 20 ms RTT, down rate trace fast.down (mean 24 Mbit/s, looping every \
             0.002 s), up 20 Mbit/s, queue 1000 packets"
        ));
        for bad in [
            TunConfig {
                loss_percent: 101.0,
                ..config.clone()
            },
            TunConfig {
                loss_percent: f64::NAN,
                ..config.clone()
            },
            TunConfig {
                loss_burst: Some(0.5),
                ..config.clone()
            },
            TunConfig {
                jitter: MAX_JITTER + Duration::from_nanos(1),
                ..config.clone()
            },
        ] {
            let err = bad.validate().unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn congestion_controls_parse() {
        for cc in CongestionControl::ALL {
            assert_eq!(cc.name().parse::<CongestionControl>(), Ok(cc));
        }
        assert_eq!(CongestionControl::default(), CongestionControl::Cubic);
        let err = "reno".parse::<CongestionControl>().unwrap_err();
        assert!(err.contains("cubic, bbr"), "{err}");
    }
}
