//! The experiment's workloads: two 1 MiB background downloads and a 4 KiB critical response
//! on one fresh HTTP/2 connection, the three requests sent together
//! ([`Workload::Simultaneous`]) or the critical one sent once the downloads are under way
//! ([`Workload::Late`]), with equal or explicit RFC 9218 urgencies; run against a server
//! under test ([`Case`]) behind an emulated link, and measured by the client's taps.
//!
//! The fixture (paths, lengths, the byte pattern) is the demo app's, from
//! [`examples::responses`] and [`examples::body`]; the peer servers serve the same bytes
//! as static files.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use integration_tests::link::LinkConfig;
//! use integration_tests::workload::{run_once, Case, Urgencies, Workload};
//!
//! let result = run_once(
//!     &Case::Scheduled,
//!     Workload::Late,
//!     Urgencies::Explicit,
//!     &LinkConfig::default(),
//! )
//! .await?;
//! println!("critical complete after {:.1} ms", result.critical_complete_ms);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tls_flush::Policy;

use crate::client::{ClientOptions, PendingResponse, Response, TapClient, Trust};
use crate::link::{LinkConfig, RelayLink};
use crate::peers::{PeerKind, PeerServer};
use crate::server::{ServerSetup, TestServer};
use crate::tap::{FrameEvent, TapLog};
use crate::tun;
use crate::BoxError;

mod path_figures;
mod tun_run;

pub use path_figures::{bottleneck_share, fixture_body_bytes, goodput_mbit, PathFigures};
pub(crate) use tun_run::{link_drops, start_cross, TunServer};
pub use tun_run::{run_tun, run_tun_clients, run_tun_traced, TunRun};

/// Length of each background body ([`BACKGROUND_PATHS`]), the demo app's
/// [`examples::responses::BG_LEN`].
pub const BACKGROUND_LEN: u64 = examples::responses::BG_LEN;
/// Length of the critical body ([`CRITICAL_PATH`]), the demo app's
/// [`examples::responses::CRITICAL_LEN`].
pub const CRITICAL_LEN: u64 = examples::responses::CRITICAL_LEN;
/// The two background downloads (`/bg/1`, `/bg/2`).
pub const BACKGROUND_PATHS: [&str; 2] = examples::responses::FIXTURE_BG_PATHS;
/// The critical resource (`/critical`).
pub const CRITICAL_PATH: &str = examples::responses::CRITICAL_PATH;
/// Background DATA payload that must have arrived before the late critical request is sent.
pub const LATE_THRESHOLD: usize = 32 * 1024;
/// A run fails when it takes longer than this plus four times the fixture's transfer time at
/// the link's rate (a stuck connection, not a slow one).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The rustls `max_fragment_size` of the `stock-4k` case: static 4 KiB records, the usual
/// fixed-size remedy for a critical response buried in large records.
pub const STOCK_4K_FRAGMENT: usize = 4096;

const DATA: u8 = 0x0;
const END_STREAM: u8 = 0x1;

/// When the critical request is sent relative to the two background requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// GET `/critical` alone on a fresh connection: the floor the other workloads'
    /// critical times are compared with.
    Alone,
    /// GET `/bg/1`, `/bg/2` and `/critical` sent together.
    Simultaneous,
    /// `/critical` sent once at least [`LATE_THRESHOLD`] bytes of background DATA arrived.
    Late,
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 3] = [Workload::Alone, Workload::Simultaneous, Workload::Late];

    /// The name on command lines and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Alone => "alone",
            Workload::Simultaneous => "simultaneous",
            Workload::Late => "late",
        }
    }

    /// The background requests it sends with the critical one.
    pub fn has_background(self) -> bool {
        self != Workload::Alone
    }
}

/// The `priority` request headers the client sends (RFC 9218).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Urgencies {
    /// Every request `priority: u=3`.
    Equal,
    /// Critical `priority: u=0`, background `priority: u=5, i`.
    Explicit,
}

impl Urgencies {
    /// Both, in table order.
    pub const ALL: [Urgencies; 2] = [Urgencies::Equal, Urgencies::Explicit];

    /// The name on command lines and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Urgencies::Equal => "equal",
            Urgencies::Explicit => "explicit",
        }
    }

    /// The `priority` header of the critical request.
    pub fn critical(self) -> &'static str {
        match self {
            Urgencies::Equal => "u=3",
            Urgencies::Explicit => "u=0",
        }
    }

    /// The `priority` header of each background request.
    pub fn background(self) -> &'static str {
        match self {
            Urgencies::Equal => "u=3",
            Urgencies::Explicit => "u=5, i",
        }
    }
}

/// The server under test.
///
/// The five built-in cases start the demo app (`examples::axum_app::router()`) in-process,
/// a fresh server per run. [`Case::Peer`] starts a real server from Debian (nginx, nghttpd,
/// h2o, Apache: see [`crate::peers`]) as a child process, also a fresh one per run, serving
/// the same fixture as static files with its own certificate, which the client verifies.
/// [`Case::External`] is a server someone else started: it must serve the same fixture
/// (`/critical` 4096 bytes and `/bg/{name}` 1 MiB, byte `i` being `(i % 251) as u8`) over
/// TLS with ALPN h2; its certificate is not verified. An external server that sends TLS
/// session tickets adds them to `tls_records` (the peers are configured to send none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Case {
    /// Stock hyper + tokio-rustls.
    Stock,
    /// Stock, with rustls `max_fragment_size` 4096 (static 4 KiB records).
    Stock4k,
    /// `tls-flush` with [`Policy::EarlyFlush`].
    EarlyFlush,
    /// `tls-flush` with [`Policy::Dynamic`].
    Dynamic,
    /// `tls-flush` with [`Policy::Scheduled`].
    Scheduled,
    /// A real peer server, started for each run (skipped by the lab when not installed).
    Peer(PeerKind),
    /// A server already listening at `addr`, measured behind the same link.
    External {
        /// The name in tables and JSON.
        name: String,
        /// Where it listens.
        addr: SocketAddr,
    },
}

impl Case {
    /// The in-process cases, in table order: stock first (the baseline of the paired
    /// differences), then stock with 4 KiB records, then the `tls-flush` policies.
    pub const BUILTIN: [Case; 5] = [
        Case::Stock,
        Case::Stock4k,
        Case::EarlyFlush,
        Case::Dynamic,
        Case::Scheduled,
    ];

    /// The peer servers, in table order (`nginx`, `nginx-4k`, `nghttpd`, `h2o`, `apache`).
    pub const PEERS: [Case; 5] = [
        Case::Peer(PeerKind::Nginx),
        Case::Peer(PeerKind::Nginx4k),
        Case::Peer(PeerKind::Nghttpd),
        Case::Peer(PeerKind::H2o),
        Case::Peer(PeerKind::Apache),
    ];

    /// The peer this case runs, if it is one.
    pub fn peer(&self) -> Option<PeerKind> {
        match self {
            Case::Peer(kind) => Some(*kind),
            _ => None,
        }
    }

    /// The `tls-flush` policy of the in-process server, for the cases that run one; its
    /// [`Policy::name`] is the case's name.
    pub fn policy(&self) -> Option<Policy> {
        match self {
            Case::EarlyFlush => Some(Policy::EarlyFlush),
            Case::Dynamic => Some(Policy::Dynamic),
            Case::Scheduled => Some(Policy::Scheduled),
            Case::Stock | Case::Stock4k | Case::Peer(_) | Case::External { .. } => None,
        }
    }

    /// The name on command lines, in tables and in JSON.
    pub fn name(&self) -> &str {
        match self {
            Case::Stock => "stock",
            Case::Stock4k => "stock-4k",
            Case::EarlyFlush => Policy::EarlyFlush.name(),
            Case::Dynamic => Policy::Dynamic.name(),
            Case::Scheduled => Policy::Scheduled.name(),
            Case::Peer(kind) => kind.name(),
            Case::External { name, .. } => name,
        }
    }

    /// How the in-process server is set up; `None` for a peer or an external server.
    pub fn setup(&self) -> Option<ServerSetup> {
        let record_size = match self {
            Case::Stock4k => Some(STOCK_4K_FRAGMENT),
            Case::Stock | Case::EarlyFlush | Case::Dynamic | Case::Scheduled => None,
            Case::Peer(_) | Case::External { .. } => return None,
        };
        Some(ServerSetup {
            policy: self.policy(),
            record_size,
            ..ServerSetup::default()
        })
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Urgencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a known case, workload or urgency set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What was looked up ("case", "workload", "urgencies").
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The names accepted.
    pub known: Vec<String>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}` (known: {})",
            self.what,
            self.name,
            self.known.join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

impl FromStr for Case {
    type Err = UnknownName;

    /// A built-in name, a peer's name, or `NAME@HOST:PORT` for an external server.
    ///
    /// ```
    /// use integration_tests::peers::PeerKind;
    /// use integration_tests::workload::Case;
    /// assert_eq!("stock-4k".parse::<Case>().unwrap(), Case::Stock4k);
    /// assert_eq!("nginx-4k".parse::<Case>().unwrap(), Case::Peer(PeerKind::Nginx4k));
    /// let nginx: Case = "nginx@127.0.0.1:8443".parse().unwrap();
    /// assert_eq!(nginx.name(), "nginx");
    /// assert!("fast".parse::<Case>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(case) = Case::BUILTIN.iter().find(|c| c.name() == s) {
            return Ok(case.clone());
        }
        if let Some(kind) = PeerKind::from_name(s) {
            return Ok(Case::Peer(kind));
        }
        let unknown = || UnknownName {
            what: "case",
            name: s.to_string(),
            known: Case::BUILTIN
                .iter()
                .chain(&Case::PEERS)
                .map(|c| c.name().to_string())
                .chain(["NAME@HOST:PORT".to_string()])
                .collect(),
        };
        let (name, addr) = s.split_once('@').ok_or_else(unknown)?;
        let addr = addr.parse().map_err(|_| unknown())?;
        if name.is_empty() || Case::BUILTIN.iter().any(|c| c.name() == name) {
            return Err(unknown());
        }
        Ok(Case::External {
            name: name.to_string(),
            addr,
        })
    }
}

/// The one of `all` named `s` (by `name`, white space around `s` ignored), or an
/// [`UnknownName`] listing them.
pub(crate) fn by_name<T: Copy>(
    what: &'static str,
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, UnknownName> {
    all.iter()
        .copied()
        .find(|&t| name(t) == s.trim())
        .ok_or_else(|| UnknownName {
            what,
            name: s.to_string(),
            known: all.iter().map(|&t| name(t).to_string()).collect(),
        })
}

impl FromStr for Workload {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name("workload", s, &Workload::ALL, Workload::name)
    }
}

impl FromStr for Urgencies {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        by_name("urgencies", s, &Urgencies::ALL, Urgencies::name)
    }
}

/// What one run measured. Times are milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// [`Case::name`].
    pub case: String,
    /// The workload.
    pub workload: Workload,
    /// The urgencies.
    pub urgencies: Urgencies,
    /// Which repeat of the lab this run belongs to (0 outside the lab).
    pub repeat: usize,
    /// Which of the run's clients this is: 0 but with several at once
    /// ([`crate::tun::TunConfig::clients`]).
    #[serde(default)]
    pub client: usize,
    /// From the moment the critical request left the client to the first decrypted byte of
    /// its DATA (the first byte of its first non-empty DATA frame delivered above TLS).
    pub critical_first_byte_ms: f64,
    /// From the moment the critical request left the client to the last byte of its first
    /// complete non-empty DATA frame (the figure the experiment is about: when the
    /// application can use the critical response).
    pub critical_complete_ms: f64,
    /// Background DATA payload bytes received on the connection before the critical
    /// response's first complete DATA frame (including, in `late`, those that arrived before
    /// the critical request was sent: see `background_bytes_at_critical_request`).
    pub background_bytes_before_critical: u64,
    /// Background DATA payload bytes received before the critical request was sent (0 in
    /// `simultaneous`, at least [`LATE_THRESHOLD`] in `late`).
    pub background_bytes_at_critical_request: u64,
    /// From the start of the TCP connect to the last byte of all three bodies.
    pub fixture_complete_ms: f64,
    /// From the start of the TCP connect to the critical request leaving the client.
    pub critical_sent_ms: f64,
    /// Server-to-client TLS application-data records after the handshake.
    pub tls_records: usize,
    /// Ciphertext bytes the client received, handshake included.
    pub wire_bytes: u64,
    /// Where the less urgent bytes were when the critical request reached the server.
    #[serde(flatten)]
    pub attribution: Attribution,
    /// What the path gave the connection: goodput, bottleneck share, drops, retransmits.
    #[serde(flatten)]
    pub path: PathFigures,
}

/// Where the bytes ahead of the critical response were at the moment the server read the
/// critical request, and what the server sent after it. Each figure is `None` (JSON `null`)
/// where it is not known: the link's queue only behind the tun link; the server's figures
/// only for the `tls-flush` cases (from [`tls_flush::RequestArrival`]), not for stock or a
/// peer. Missing keys read as `None`, so results written before these figures existed
/// still parse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Attribution {
    /// Bytes in the tun emulator's server-to-client queue when the client-to-server packet
    /// carrying the critical request was delivered to the server.
    pub link_queue_bytes_at_request: Option<u64>,
    /// Bytes in the wrapper's write queue when the server read the critical request.
    pub server_queued_bytes_at_request: Option<u64>,
    /// Whether rustls held ciphertext it had not handed to the socket then.
    pub server_tls_buffered_at_request: Option<bool>,
    /// Bytes in the server's kernel send buffer not yet sent then (`tcpi_notsent_bytes`).
    pub server_notsent_bytes_at_request: Option<u64>,
    /// Bytes the server had in flight then (`tcpi_unacked` x MSS).
    pub server_in_flight_bytes_at_request: Option<u64>,
    /// Plaintext bytes the server handed to TLS after reading the critical request and
    /// before the critical response's first DATA frame.
    pub server_bytes_after_request: Option<u64>,
    /// Milliseconds from the server reading the critical request to the critical
    /// response's first DATA frame entering a record (the application's time to begin the
    /// body, and any wait of the wrapper's).
    pub server_first_data_ms: Option<f64>,
}

impl Attribution {
    /// Fills in the server's figures from its connections' counters (the run's one
    /// connection; nothing for stock, which keeps none).
    pub fn from_server(&mut self, connections: &[tls_flush::ConnectionStats]) {
        let Some(arrival) = connections.iter().find_map(|c| c.urgent_request()) else {
            return;
        };
        self.server_queued_bytes_at_request = Some(arrival.queued_bytes);
        self.server_tls_buffered_at_request = Some(arrival.tls_buffered);
        self.server_notsent_bytes_at_request = arrival.notsent_bytes;
        self.server_in_flight_bytes_at_request = arrival.in_flight_bytes;
        self.server_bytes_after_request = arrival.written_before_first_data();
        self.server_first_data_ms = arrival.first_data_after.map(|d| d.as_secs_f64() * 1e3);
    }
}

/// Runs `workload` once against a fresh server for `case`, through a fresh relay link with
/// `link`, on a fresh connection; every body is checked byte for byte (a wrong or short
/// body fails the run). The server and the link are torn down before this returns.
pub async fn run_once(
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
    link: &LinkConfig,
) -> Result<RunResult, BoxError> {
    run_on(case, workload, urgencies, Some(link)).await
}

/// [`run_once`], or straight over loopback without a link when `link` is `None` (fast, for
/// tests of the runner itself; the figures then say little about a real path).
pub async fn run_on(
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
    link: Option<&LinkConfig>,
) -> Result<RunResult, BoxError> {
    let label = format!("{case}/{workload}/{urgencies}");
    let server = match (case.setup(), case) {
        (Some(setup), _) => Server::InProcess(
            TestServer::demo(setup)
                .await
                .map_err(|e| format!("{label}: starting the server: {e}"))?,
        ),
        (None, Case::Peer(kind)) => {
            let kind = *kind;
            // Starting waits for the child's port (blocking): off the runtime's threads.
            let peer = tokio::task::spawn_blocking(move || PeerServer::start(kind))
                .await
                .map_err(|e| format!("{label}: starting the server: {e}"))?
                .map_err(|e| format!("{label}: starting the server: {e}"))?;
            Server::Peer(peer)
        }
        (None, Case::External { addr, .. }) => Server::External(*addr),
        (None, _) => unreachable!("built-in cases start a server"),
    };
    let (upstream, trust) = match &server {
        Server::InProcess(server) => (server.addr, Trust::Certificate(server.certificate.clone())),
        Server::Peer(peer) => (peer.addr(), Trust::Certificate(peer.certificate().clone())),
        Server::External(addr) => (*addr, Trust::AnyCertificate),
    };
    let relay = match link {
        Some(config) => Some(
            RelayLink::start(upstream, *config)
                .await
                .map_err(|e| format!("{label}: starting the link: {e}"))?,
        ),
        None => None,
    };
    let addr = relay.as_ref().map_or(upstream, RelayLink::addr);
    let limit = run_limit(link.map(|l| (l.rate_mbit, l.rtt)));
    let measured = on_client_thread(limit, None, move || {
        fixture(addr, trust, workload, urgencies)
    })
    .await
    .map_err(|e| format!("{label}: {e}"))?;
    let mut measured = measured.result;
    if let Server::InProcess(server) = &server {
        measured.attribution.from_server(&server.connection_stats());
        measured.path.from_server(&server.stats());
    }
    // The client is gone (its connection closes); stop the link and the server, and let the
    // close travel before the next run starts.
    drop(relay);
    if let Server::Peer(peer) = server {
        // Stopping waits for the process to exit (blocking): off the runtime's threads.
        tokio::task::spawn_blocking(move || drop(peer))
            .await
            .map_err(|e| format!("{label}: stopping the server: {e}"))?;
    } else {
        drop(server);
    }
    if let Some(config) = link {
        tokio::time::sleep(config.rtt).await;
    }
    Ok(labelled(measured, case, workload, urgencies))
}

/// What `fixture` measured, labelled with the cell it belongs to.
fn labelled(
    measured: RunResult,
    case: &Case,
    workload: Workload,
    urgencies: Urgencies,
) -> RunResult {
    RunResult {
        case: case.name().to_string(),
        workload,
        urgencies,
        repeat: 0,
        ..measured
    }
}

/// How long a run may take: [`RUN_TIMEOUT`] plus four times the fixture's transfer time (and
/// ten RTTs) at a link's `(rate_mbit, rtt)`.
fn run_limit(link: Option<(f64, Duration)>) -> Duration {
    let transfer = link.map_or(Duration::ZERO, |(rate_mbit, rtt)| {
        let bits = (2 * BACKGROUND_LEN + CRITICAL_LEN) as f64 * 8.0;
        Duration::from_secs_f64(bits / (rate_mbit * 1e6) + rtt.as_secs_f64() * 10.0)
    });
    RUN_TIMEOUT + transfer * 4
}

/// The server of one run; an in-process one and a peer are stopped when dropped.
enum Server {
    InProcess(TestServer),
    Peer(PeerServer),
    External(SocketAddr),
}

/// Runs the client side of a run on its own thread with a single-threaded runtime, like a
/// separate client process: the server and the link keep the caller's runtime, and requests
/// started back to back (no await point between them yields) leave in one write, so the
/// `simultaneous` requests reach the server together. The client's connection ends with
/// that runtime. With `netns`, the thread first enters that network namespace.
pub(crate) async fn on_client_thread<F, Fut, T>(
    limit: Duration,
    netns: Option<String>,
    run: F,
) -> Result<T, BoxError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("workload-client".into())
        .spawn(move || {
            let result = netns
                .as_deref()
                .map_or(Ok(()), tun::enter_namespace)
                .map_err(BoxError::from)
                .and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(BoxError::from)
                })
                .and_then(|runtime| {
                    runtime.block_on(async {
                        tokio::time::timeout(limit, run())
                            .await
                            .map_err(|_| format!("no result within {limit:?}"))?
                    })
                });
            let _ = tx.send(result);
        })?;
    rx.await.map_err(|_| "the client thread panicked")?
}

/// What the client of one run saw: the figures, when the critical request left, and the
/// taps' log (for a packet trace's record and stream columns).
pub(crate) struct Measured {
    pub(crate) result: RunResult,
    pub(crate) sent_at: Instant,
    pub(crate) log: TapLog,
    pub(crate) handshake_records: usize,
    pub(crate) critical_stream: u32,
    /// From the first request leaving the client to the last body byte (the goodput's
    /// interval, [`PathFigures::fixture_transfer_ms`]).
    pub(crate) transfer: (Instant, Instant),
}

/// Runs the requests of the fixture on one fresh connection to `addr` and measures them.
async fn fixture(
    addr: SocketAddr,
    trust: Trust,
    workload: Workload,
    urgencies: Urgencies,
) -> Result<Measured, BoxError> {
    let client = TapClient::connect(addr, ClientOptions::trusting(trust))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let mut background = Vec::new();
    let mut reading = None;
    let mut first_sent_at = None;
    if workload.has_background() {
        let [bg1_path, bg2_path] = BACKGROUND_PATHS;
        let bg1 = client.start(bg1_path, Some(urgencies.background())).await?;
        let bg2 = client.start(bg2_path, Some(urgencies.background())).await?;
        first_sent_at = Some(bg1.sent_at());
        background = vec![bg1.stream_id(), bg2.stream_id()];
        // Read both background bodies from now on, concurrently with everything else.
        reading = Some(tokio::spawn(async move {
            let (r1, r2) = futures_util::join!(bg1.finish(), bg2.finish());
            check_body(bg1_path, &r1?, BACKGROUND_LEN)?;
            check_body(bg2_path, &r2?, BACKGROUND_LEN)
        }));
    }
    let frames_at_request = match workload {
        Workload::Alone | Workload::Simultaneous => 0,
        Workload::Late => {
            client
                .wait_for_data(&background, LATE_THRESHOLD, Duration::from_secs(3600))
                .await?;
            client.log().frames.len()
        }
    };
    let critical: PendingResponse = client
        .start(CRITICAL_PATH, Some(urgencies.critical()))
        .await?;
    let critical_id = critical.stream_id();
    let sent_at = critical.sent_at();
    let critical = critical.finish().await?;
    if let Some(reading) = reading {
        reading.await.map_err(|e| format!("reading: {e}"))??;
    }
    check_body(CRITICAL_PATH, &critical, CRITICAL_LEN)?;
    let log = client.log();
    let handshake_records = client.handshake_records;
    let connected_at = client.connected_at;
    drop(client);
    let mut result = measure(
        &log,
        handshake_records,
        connected_at,
        sent_at,
        critical_id,
        &background,
        frames_at_request,
    )?;
    let first_sent_at = first_sent_at.unwrap_or(sent_at);
    let done_at = connected_at + Duration::from_secs_f64(result.fixture_complete_ms / 1e3);
    result.path =
        PathFigures::of_fixture(workload, done_at.saturating_duration_since(first_sent_at));
    Ok(Measured {
        result,
        sent_at,
        log,
        handshake_records,
        critical_stream: critical_id,
        transfer: (first_sent_at, done_at),
    })
}

/// Fails unless `response` is a 200 with exactly `len` pattern bytes.
fn check_body(path: &str, response: &Response, len: u64) -> Result<(), BoxError> {
    response
        .check_pattern(len)
        .map_err(|e| format!("{path}: {e}").into())
}

fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e3
}

/// The figures of one run, from the taps' log. `frames_at_request` is how many frames had
/// arrived when the critical request was sent.
fn measure(
    log: &TapLog,
    handshake_records: usize,
    connected_at: Instant,
    sent_at: Instant,
    critical: u32,
    background: &[u32],
    frames_at_request: usize,
) -> Result<RunResult, BoxError> {
    let is_data = |f: &FrameEvent| f.kind == DATA && f.len > 0;
    let first = log
        .frames
        .iter()
        .position(|f| is_data(f) && f.stream_id == critical)
        .ok_or("no critical DATA frame seen")?;
    let background_bytes = |frames: &[FrameEvent]| -> u64 {
        frames
            .iter()
            .filter(|f| f.kind == DATA && background.contains(&f.stream_id))
            .map(|f| f.len as u64)
            .sum()
    };
    let mut done = None;
    for id in background.iter().copied().chain([critical]) {
        let end = log
            .frames
            .iter()
            .rfind(|f| f.stream_id == id && f.flags & END_STREAM != 0)
            .ok_or_else(|| format!("stream {id} never ended"))?;
        done = done.max(Some(end.last_byte_at));
    }
    let done = done.expect("the critical stream at least");
    let frame = &log.frames[first];
    Ok(RunResult {
        case: String::new(),
        workload: Workload::Simultaneous,
        urgencies: Urgencies::Equal,
        repeat: 0,
        client: 0,
        critical_first_byte_ms: ms(sent_at, frame.first_byte_at),
        critical_complete_ms: ms(sent_at, frame.last_byte_at),
        background_bytes_before_critical: background_bytes(&log.frames[..first]),
        background_bytes_at_critical_request: background_bytes(
            &log.frames[..frames_at_request.min(log.frames.len())],
        ),
        fixture_complete_ms: ms(connected_at, done),
        critical_sent_ms: ms(connected_at, sent_at),
        tls_records: log
            .records
            .iter()
            .skip(handshake_records)
            .filter(|r| r.content_type == 23)
            .count(),
        wire_bytes: log.wire_bytes,
        attribution: Attribution::default(),
        path: PathFigures::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::RecordEvent;

    #[test]
    fn names_round_trip() {
        for case in Case::BUILTIN.into_iter().chain(Case::PEERS) {
            assert_eq!(case.name().parse::<Case>().unwrap(), case);
        }
        assert!(Case::PEERS
            .iter()
            .all(|c| c.setup().is_none() && c.peer().is_some()));
        let err = "nginx-8k".parse::<Case>().unwrap_err().to_string();
        assert!(err.contains("nginx-4k, nghttpd, h2o, apache"), "{err}");
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        }
        for u in Urgencies::ALL {
            assert_eq!(u.name().parse::<Urgencies>().unwrap(), u);
        }
        let err = "nope".parse::<Workload>().unwrap_err().to_string();
        assert!(err.contains("simultaneous, late"), "{err}");
        assert!("stock@127.0.0.1:1".parse::<Case>().is_err());
        assert!("x@nowhere".parse::<Case>().is_err());
        let ext: Case = "h2o@127.0.0.1:8443".parse().unwrap();
        assert!(ext.setup().is_none());
    }

    #[test]
    fn every_policy_is_a_builtin_case_of_its_name() {
        for policy in Policy::ALL {
            let case = Case::BUILTIN
                .into_iter()
                .find(|c| c.policy() == Some(policy))
                .unwrap_or_else(|| panic!("no lab case runs {policy}"));
            assert_eq!(case.name(), policy.name());
            assert_eq!(case.setup().unwrap().policy, Some(policy));
        }
    }

    #[test]
    fn cases_map_to_server_setups() {
        assert!(Case::Stock.setup().unwrap().policy.is_none());
        assert_eq!(Case::Stock4k.setup().unwrap().record_size, Some(4096));
        assert_eq!(
            Case::Scheduled.setup().unwrap().policy,
            Some(Policy::Scheduled)
        );
        assert_eq!(
            serde_json::to_string(&Workload::Simultaneous).unwrap(),
            "\"simultaneous\""
        );
    }

    #[test]
    fn measure_reads_the_taps() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let frame = |ms0, ms1, stream_id, len, flags| FrameEvent {
            first_byte_at: at(ms0),
            last_byte_at: at(ms1),
            kind: DATA,
            flags,
            stream_id,
            len,
            end_offset: 0,
        };
        let record = |ms, content_type| RecordEvent {
            at: at(ms),
            content_type,
            len: 100,
        };
        let log = TapLog {
            records: vec![record(1, 22), record(2, 23), record(30, 23), record(31, 23)],
            frames: vec![
                frame(10, 11, 1, 16384, 0),
                frame(11, 12, 3, 16384, 0),
                frame(12, 13, 1, 1000, 0),
                frame(20, 25, 5, 4096, 0),
                frame(25, 25, 5, 0, END_STREAM),
                frame(26, 27, 1, 500, END_STREAM),
                frame(27, 40, 3, 500, END_STREAM),
            ],
            wire_bytes: 1234,
            plain_bytes: 0,
        };
        let r = measure(&log, 1, t0, at(12), 5, &[1, 3], 2).unwrap();
        assert_eq!(r.critical_first_byte_ms, 8.0);
        assert_eq!(r.critical_complete_ms, 13.0);
        assert_eq!(r.background_bytes_before_critical, 16384 * 2 + 1000);
        assert_eq!(r.background_bytes_at_critical_request, 16384 * 2);
        assert_eq!(r.fixture_complete_ms, 40.0);
        assert_eq!(r.critical_sent_ms, 12.0);
        assert_eq!(r.tls_records, 3);
        assert_eq!(r.wire_bytes, 1234);
        let mut unfinished = log.clone();
        unfinished.frames.pop();
        assert!(measure(&unfinished, 1, t0, at(12), 5, &[1, 3], 2).is_err());
    }
}
