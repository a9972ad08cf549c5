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
//!   inside the two namespaces: no packet leaves them;
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
//! Per direction, a bottleneck router feeding a wire, like `netem rate … delay … limit …`:
//!
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
//! - **Propagation.** A packet is written to the receiver's TUN device one one-way delay
//!   (`rtt / 2`) after its serialization ends.
//! - **Order.** FIFO per direction: no reordering, duplication or corruption; loss only by
//!   tail drop.
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
//! - `emulator.rs`: the packet emulator (queue, serialization, propagation) and its counters;
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

mod emulator;
mod netns;
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

pub use emulator::{DirectionStats, TunStats};
pub use netns::{enter_namespace, is_root, list_namespaces, remove_stale};
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunConfig {
    /// Round-trip propagation delay; each direction delays by half of it.
    pub rtt: Duration,
    /// Rate of each direction in Mbit/s (10^6 bits per second) of IP packet bytes.
    pub rate_mbit: f64,
    /// Queue limit per direction in packets (the one being serialized included).
    pub queue_packets: usize,
    /// MTU of both TUN devices.
    pub mtu: u32,
    /// TCP congestion control in both namespaces.
    pub cc: CongestionControl,
    /// Packets to record in the trace ([`TunLink::trace`]), the first ones; 0: no trace.
    pub trace_packets: usize,
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
    /// to end`.
    pub fn describe(&self) -> String {
        format!(
            "tun link: {} ms RTT, {} Mbit/s each way, queue {} packets, MTU {}, cc {}; \
             two network namespaces, kernel TCP end to end",
            round(self.rtt.as_secs_f64() * 1e3, 3),
            round(self.rate_mbit, 3),
            self.queue_packets,
            self.mtu,
            self.cc,
        )
    }

    fn validate(&self) -> io::Result<()> {
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
                     link set dev {DEVICE} mtu {mtu} up\n\
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
        let emulator = Emulator::start(&config, client_device, server_device)?;
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
            ..config
        };
        assert!(bbr.describe().starts_with("tun link: 12.5 ms RTT"));
        assert!(bbr.describe().contains("cc bbr"));
        assert_eq!(config.serialization(1500), Duration::from_micros(600));
        assert!(TunConfig {
            queue_packets: 0,
            ..config
        }
        .validate()
        .is_err());
        assert!(TunConfig {
            rate_mbit: 0.0,
            ..config
        }
        .validate()
        .is_err());
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
