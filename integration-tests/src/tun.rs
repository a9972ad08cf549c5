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

use std::collections::{BTreeSet, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::link::LinkConfig;
use crate::BoxError;

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

/// Where `ip netns` keeps named namespaces.
const NETNS_DIR: &str = "/run/netns";
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

/// Counters of one direction of the emulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets delivered to the receiver's TUN device.
    pub delivered: u64,
    /// IP bytes delivered.
    pub delivered_bytes: u64,
    /// Packets dropped because the queue was full.
    pub dropped: u64,
    /// Largest queue occupancy seen, in packets (the arriving one included).
    pub max_queue: u64,
    /// Sum of how late deliveries were after their due time, in microseconds.
    pub late_us_total: u64,
    /// Latest delivery after its due time, in microseconds.
    pub late_us_max: u64,
    /// Packets the receiver's TUN device refused (written while it was going down).
    pub write_errors: u64,
}

impl DirectionStats {
    /// Mean lateness of a delivery, in microseconds.
    pub fn late_us_mean(&self) -> f64 {
        if self.delivered == 0 {
            0.0
        } else {
            self.late_us_total as f64 / self.delivered as f64
        }
    }
}

/// Counters of both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunStats {
    /// Client to server.
    pub upstream: DirectionStats,
    /// Server to client.
    pub downstream: DirectionStats,
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    dropped: AtomicU64,
    max_queue: AtomicU64,
    late_us_total: AtomicU64,
    late_us_max: AtomicU64,
    write_errors: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> DirectionStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DirectionStats {
            delivered: get(&self.delivered),
            delivered_bytes: get(&self.delivered_bytes),
            dropped: get(&self.dropped),
            max_queue: get(&self.max_queue),
            late_us_total: get(&self.late_us_total),
            late_us_max: get(&self.late_us_max),
            write_errors: get(&self.write_errors),
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
        let emulator = Emulator::start(&config, client_device, server_device)?;
        let link = TunLink {
            config,
            emulator,
            namespaces,
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
        TunStats {
            upstream: self.emulator.counters[0].snapshot(),
            downstream: self.emulator.counters[1].snapshot(),
        }
    }
}

/// Runs `f` on a scoped thread that entered the namespace `name`.
fn in_namespace<T, F>(name: &str, f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn_scoped(scope, || {
                enter_namespace(name)?;
                Ok(f())
            })?;
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Moves the **calling thread** into the network namespace `name` (`/run/netns/NAME`, as
/// made by `ip netns add`), for good: call it only on a thread of your own that is meant to
/// live in that namespace. Sockets the thread creates from then on, and threads it starts,
/// belong to the namespace.
pub fn enter_namespace(name: &str) -> io::Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let file = File::open(&path).map_err(|e| context(e, path.display()))?;
    sys::setns_net(&file).map_err(|e| context(e, format!("entering network namespace {name}")))
}

/// In the namespace the calling thread entered: IPv6 off, the congestion control, no TCP
/// metrics cache; then the TUN device.
fn setup_namespace(cc: CongestionControl) -> io::Result<File> {
    let ipv6 = Path::new("/proc/sys/net/ipv6/conf");
    if ipv6.exists() {
        // `default` first, so that the TUN device is created without IPv6; `all` for lo.
        for conf in ["default", "all"] {
            write_sysctl(&ipv6.join(conf).join("disable_ipv6"), "1")?;
        }
    }
    let cc_path = Path::new("/proc/sys/net/ipv4/tcp_congestion_control");
    write_sysctl(cc_path, cc.name())?;
    let set = fs::read_to_string(cc_path)?;
    if set.trim() != cc.name() {
        return Err(io::Error::other(format!(
            "tcp_congestion_control is `{}` after setting `{cc}`",
            set.trim()
        )));
    }
    write_sysctl(Path::new("/proc/sys/net/ipv4/tcp_no_metrics_save"), "1")?;
    let device = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| context(e, "/dev/net/tun"))?;
    sys::tun_set_iff(&device, DEVICE).map_err(|e| context(e, format!("TUNSETIFF {DEVICE}")))?;
    Ok(device)
}

/// The host's list of congestion controls a namespace other than the initial one may make
/// its default.
const ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Adds `cc` to the host's `net.ipv4.tcp_allowed_congestion_control` when it is not there:
/// Linux lets a network namespace other than the initial one choose only an allowed
/// congestion control as its default (`EPERM` otherwise), and allows only the host's own
/// default and reno out of the box. The list is global (it also says which congestion
/// controls unprivileged sockets may pick with `TCP_CONGESTION`); this only ever adds to it.
fn allow_congestion_control(cc: CongestionControl) -> io::Result<()> {
    let allowed = fs::read_to_string(ALLOWED_CC).map_err(|e| context(e, ALLOWED_CC))?;
    if allowed.split_whitespace().any(|name| name == cc.name()) {
        return Ok(());
    }
    let wanted = format!("{} {cc}", allowed.trim());
    write_sysctl(Path::new(ALLOWED_CC), &wanted).map_err(|e| {
        context(
            e,
            format!("allowing {cc} in network namespaces (is the tcp_{cc} module available?)"),
        )
    })?;
    tracing::info!(%cc, allowed = %wanted, "added to net.ipv4.tcp_allowed_congestion_control");
    Ok(())
}

/// Writes a sysctl through `/proc/sys`, which shows the calling thread's network namespace.
fn write_sysctl(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| context(e, format!("{} = {value}", path.display())))
}

fn context(error: io::Error, what: impl fmt::Display) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}

/// Runs `ip ARGS` (with `stdin` as its input), failing with its stderr.
fn ip(args: &[&str], stdin: Option<&str>) -> io::Result<()> {
    let shown = format!("ip {}", args.join(" "));
    let mut child = Command::new("ip")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| context(e, format!("{shown} (is iproute2 installed?)")))?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{shown}: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Whether this process runs as root (effective user id 0).
pub fn is_root() -> bool {
    // The second field of `Uid:` is the effective user id.
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// The names of the network namespaces `ip netns list` shows.
pub fn list_namespaces() -> io::Result<Vec<String>> {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| context(e, "ip netns list (is iproute2 installed?)"))?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "ip netns list: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    // Lines are `NAME` or `NAME (id: N)`.
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Names of the namespaces this process's live links own (registered before `ip netns add`,
/// so that a concurrent [`remove_stale`] never takes one being created).
fn live() -> MutexGuard<'static, BTreeSet<String>> {
    static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deletes the link namespaces (`tfc-<pid>-<n>`, `tfs-<pid>-<n>`) left by processes that
/// no longer exist, and this process's that no live link owns; returns their names.
pub fn remove_stale() -> io::Result<Vec<String>> {
    let me = std::process::id();
    let mut removed = Vec::new();
    for name in list_namespaces()? {
        let Some(pid) = [CLIENT_PREFIX, SERVER_PREFIX]
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        let stale = if pid == me {
            !live().contains(&name)
        } else {
            !Path::new("/proc").join(pid.to_string()).exists()
        };
        if stale {
            ip(&["netns", "delete", &name], None)?;
            removed.push(name);
        }
    }
    if !removed.is_empty() {
        tracing::info!(?removed, "removed stale tun link namespaces");
    }
    Ok(removed)
}

/// The namespaces a link created; deleted on drop.
#[derive(Default)]
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    fn add(&mut self, name: &str) -> io::Result<()> {
        live().insert(name.to_string());
        if let Err(error) = ip(&["netns", "add", name], None) {
            live().remove(name);
            return Err(error);
        }
        self.names.push(name.to_string());
        Ok(())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in self.names.drain(..).rev() {
            if let Err(error) = ip(&["netns", "delete", &name], None) {
                tracing::warn!(%error, "deleting a tun link namespace");
            }
            live().remove(&name);
        }
    }
}

/// The four threads moving packets between the two TUN devices.
struct Emulator {
    /// Dropping it (EOF on the pipe) stops the reader threads.
    stop: Option<io::PipeWriter>,
    deliveries: [Arc<Delivery>; 2],
    threads: Vec<JoinHandle<()>>,
    /// [upstream, downstream].
    counters: [Arc<Counters>; 2],
}

/// Per-direction parameters.
#[derive(Clone, Copy)]
struct Params {
    one_way: Duration,
    bits_per_sec: f64,
    queue_packets: usize,
}

impl Emulator {
    fn start(config: &TunConfig, client: Arc<File>, server: Arc<File>) -> io::Result<Emulator> {
        let params = Params {
            one_way: config.one_way_delay(),
            bits_per_sec: config.rate_mbit * 1e6,
            queue_packets: config.queue_packets,
        };
        let (stop_reader, stop) = io::pipe()?;
        let mut emulator = Emulator {
            stop: Some(stop),
            deliveries: [Arc::default(), Arc::default()],
            threads: Vec::new(),
            counters: [Arc::default(), Arc::default()],
        };
        // From here on, dropping `emulator` stops whatever was started.
        for (i, (name, from, to)) in [
            ("upstream", client.clone(), server.clone()),
            ("downstream", server, client),
        ]
        .into_iter()
        .enumerate()
        {
            let delivery = emulator.deliveries[i].clone();
            let counters = emulator.counters[i].clone();
            emulator.threads.push(
                std::thread::Builder::new()
                    .name(format!("tun-{name}-deliver"))
                    .spawn(move || delivery.run(&to, &counters))?,
            );
            let delivery = emulator.deliveries[i].clone();
            let counters = emulator.counters[i].clone();
            let stop = stop_reader.try_clone()?;
            emulator.threads.push(
                std::thread::Builder::new()
                    .name(format!("tun-{name}-read"))
                    .spawn(move || read_loop(&from, &stop, params, &delivery, &counters))?,
            );
        }
        Ok(emulator)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        drop(self.stop.take());
        for delivery in &self.deliveries {
            delivery.stop();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        // The devices' last references were the threads': the TUN devices are gone now.
    }
}

/// Reads packets from one TUN device, applies the queue and schedules their delivery, until
/// `stop` reports end of file.
fn read_loop(
    from: &File,
    stop: &io::PipeReader,
    params: Params,
    delivery: &Delivery,
    counters: &Counters,
) {
    let mut buf = vec![0u8; MAX_PACKET];
    // Serialization end of every packet still in the queue, oldest first.
    let mut departures: VecDeque<Instant> = VecDeque::with_capacity(params.queue_packets);
    let mut free_at = Instant::now();
    loop {
        match sys::wait_readable(from.as_fd(), stop.as_fd()) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                tracing::warn!(%error, "tun link: waiting for a packet");
                return;
            }
        }
        let len = match (&*from).read(&mut buf) {
            Ok(0) => continue,
            Ok(len) => len,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                continue
            }
            Err(error) => {
                tracing::warn!(%error, "tun link: reading a packet");
                return;
            }
        };
        let now = Instant::now();
        while departures.front().is_some_and(|&d| d <= now) {
            departures.pop_front();
        }
        if departures.len() >= params.queue_packets {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let start = free_at.max(now);
        free_at = start + Duration::from_secs_f64(len as f64 * 8.0 / params.bits_per_sec);
        departures.push_back(free_at);
        counters
            .max_queue
            .fetch_max(departures.len() as u64, Ordering::Relaxed);
        delivery.push(free_at + params.one_way, buf[..len].to_vec());
    }
}

/// The packets of one direction on their way to the receiver, due in FIFO order (departures
/// never decrease and the delay is constant), and the thread that writes them when due.
#[derive(Default)]
struct Delivery {
    state: Mutex<DeliveryState>,
    changed: Condvar,
}

#[derive(Default)]
struct DeliveryState {
    queue: VecDeque<(Instant, Vec<u8>)>,
    stopping: bool,
}

impl Delivery {
    fn lock(&self) -> MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, due: Instant, packet: Vec<u8>) {
        let mut state = self.lock();
        let was_empty = state.queue.is_empty();
        state.queue.push_back((due, packet));
        drop(state);
        // Only a new head changes the deadline the delivery thread waits for.
        if was_empty {
            self.changed.notify_one();
        }
    }

    fn stop(&self) {
        self.lock().stopping = true;
        self.changed.notify_one();
    }

    /// Writes every packet to `to` at or after its due time, until stopped.
    fn run(&self, to: &File, counters: &Counters) {
        let mut due_now = Vec::new();
        let mut state = self.lock();
        loop {
            if state.stopping {
                return;
            }
            let now = Instant::now();
            while state.queue.front().is_some_and(|(due, _)| *due <= now) {
                due_now.extend(state.queue.pop_front());
            }
            if due_now.is_empty() {
                state = match state.queue.front() {
                    Some(&(due, _)) => {
                        self.changed
                            .wait_timeout(state, due - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                    None => self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
                };
                continue;
            }
            drop(state);
            for (due, packet) in due_now.drain(..) {
                // A TUN device takes a packet whole, or not at all.
                match (&*to).write(&packet) {
                    Ok(n) if n == packet.len() => {
                        let late = Instant::now().saturating_duration_since(due).as_micros() as u64;
                        counters.delivered.fetch_add(1, Ordering::Relaxed);
                        counters
                            .delivered_bytes
                            .fetch_add(packet.len() as u64, Ordering::Relaxed);
                        counters.late_us_total.fetch_add(late, Ordering::Relaxed);
                        counters.late_us_max.fetch_max(late, Ordering::Relaxed);
                    }
                    Ok(_) | Err(_) => {
                        counters.write_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            state = self.lock();
        }
    }
}

/// The only `unsafe` code of the link: `setns(2)`, the `TUNSETIFF` `ioctl(2)` and `poll(2)`.
mod sys {
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd};

    /// Moves the calling thread into the network namespace `namespace` refers to.
    pub(super) fn setns_net(namespace: &File) -> io::Result<()> {
        // SAFETY: setns(2) takes a file descriptor, open for the duration of the call since
        // `namespace` is borrowed, and a flag; it touches no memory of ours. It changes only
        // the calling thread's network namespace.
        let rc = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Attaches `device` (an open `/dev/net/tun`) to a new TUN interface named `name` in the
    /// calling thread's network namespace, without packet information: reads and writes are
    /// bare IP packets. The interface lives until `device` is closed.
    pub(super) fn tun_set_iff(device: &File, name: &str) -> io::Result<()> {
        // SAFETY: `ifreq` is plain old data (a name and a union of integers and plain
        // structs), for which all-zero bytes are a valid value.
        let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= request.ifr_name.len() || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name `{name}`"),
            ));
        }
        for (dst, &src) in request.ifr_name.iter_mut().zip(bytes) {
            *dst = src as libc::c_char;
        }
        // The name stays NUL-terminated: it is shorter than the zeroed array.
        request.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `request` is, valid and
        // exclusively borrowed for the duration of the call; the descriptor is open since
        // `device` is borrowed.
        let rc = unsafe { libc::ioctl(device.as_raw_fd(), libc::TUNSETIFF, &mut request) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Blocks until `fd` has a packet to read (`true`) or `stop` is readable or closed at its
    /// other end (`false`).
    pub(super) fn wait_readable(fd: BorrowedFd<'_>, stop: BorrowedFd<'_>) -> io::Result<bool> {
        let mut fds = [
            libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `fds` is an array of two initialized `pollfd`, valid and exclusively
            // borrowed for the call; both descriptors are open since they are borrowed.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            if fds[1].revents != 0 {
                return Ok(false);
            }
            if fds[0].revents & libc::POLLIN != 0 {
                return Ok(true);
            }
            if fds[0].revents != 0 {
                return Err(io::Error::other(format!(
                    "TUN device poll events {:#x}",
                    fds[0].revents
                )));
            }
        }
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
