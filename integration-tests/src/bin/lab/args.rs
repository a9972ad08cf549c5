//! The lab's command line (clap) and what it asks for: the configuration, every cell of the
//! table and the order of the runs.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use integration_tests::first_request::{ClientCase, FirstRequestServer};
use integration_tests::link::LinkConfig;
use integration_tests::pages::Page;
use integration_tests::peers::NotInstalled;
use integration_tests::tun::{derive_seed, CongestionControl, TunConfig};
use integration_tests::workload::{Case, UnknownName, Urgencies, Workload};
use integration_tests::BoxError;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

use crate::impairments::trace_start;
use crate::pages::PagePlan;

/// Which link the runs go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkMode {
    /// The embedded loopback relay (`integration_tests::link::RelayLink`).
    Relay,
    /// The kernel-faithful link between two network namespaces
    /// (`integration_tests::tun::TunLink`, root only).
    Tun,
}

impl LinkMode {
    /// Both, in the order `--help` lists them.
    const ALL: [LinkMode; 2] = [LinkMode::Relay, LinkMode::Tun];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Relay => "relay",
            LinkMode::Tun => "tun",
        }
    }
}

fn parse_link(s: &str) -> Result<LinkMode, String> {
    LinkMode::ALL
        .into_iter()
        .find(|mode| mode.name() == s)
        .ok_or_else(|| {
            format!(
                "unknown link `{s}` (known: relay, the embedded loopback relay; tun, the \
                 kernel-faithful link between two network namespaces, root only)"
            )
        })
}

/// A name given to `--workloads`: one of the priority experiment's workloads, one of the
/// two first-request workloads, which run on their own (their `--cases` are clients), or
/// one of the browser pages, which run on their own too ([`crate::pages`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadArg {
    /// `alone`, `simultaneous`, `late`.
    Priority(Workload),
    /// `first-request`: the client's first flight on a fresh and a resumed connection.
    FirstRequest,
    /// `connection-rate`: new connections, one after the other, for `--duration`.
    ConnectionRate,
    /// `page-article`, `page-app`, `page-busy`, `page-demo`: the page loaded in headless
    /// Chromium.
    Page(Page),
}

impl FromStr for WorkloadArg {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "first-request" => Ok(WorkloadArg::FirstRequest),
            "connection-rate" => Ok(WorkloadArg::ConnectionRate),
            other => match Page::from_name(other) {
                Some(page) => Ok(WorkloadArg::Page(page)),
                None => other.parse().map(WorkloadArg::Priority).map_err(|mut e| {
                    e.known
                        .extend(["first-request".into(), "connection-rate".into()]);
                    e.known.extend(Page::ALL.map(|p| p.name().to_string()));
                    e
                }),
            },
        }
    }
}

/// What `--workloads first-request` and `--workloads connection-rate` run.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstRequestPlan {
    /// Client cases, `stock-client` (the baseline) first when asked for.
    pub cases: Vec<ClientCase>,
    /// Servers.
    pub servers: Vec<FirstRequestServer>,
    /// Run the first-request workload.
    pub first_request: bool,
    /// Run the connection-rate workload, each run this long.
    pub connection_rate: Option<Duration>,
}

/// The default `--duration` of a connection-rate run, in seconds.
pub const DEFAULT_RATE_SECS: f64 = 10.0;

/// Command-line flags of the `lab` binary.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "lab",
    about = "Runs the experiment: two 1 MiB background downloads and a 4 KiB critical \
             response on one HTTP/2 connection (the critical request sent with the others, \
             `simultaneous`, or once 32 KiB of background data arrived, `late`; all at \
             urgency 3, `equal`, or critical u=0 and background u=5, i, `explicit`; or alone \
             on a fresh connection, `alone`), against each server case behind an emulated \
             link, and prints medians, each critical time as a multiple of `alone`, and paired \
             differences against stock; `--explain` adds where the bytes ahead of the critical \
             response were, `--trace` writes packet timelines",
    after_help = "The table goes to stdout, the progress bar to stderr. Times are from the moment \
                  the critical request left the client (fixture completion: from connection \
                  start). RUST_LOG=tls_flush=trace logs our servers' write-budget decisions \
                  (TCP_INFO and the allowance before each record) to stderr.\n\n\
                  Path figures per run: fixture_goodput_mbit (the bodies, 2 MiB + 4 KiB, over \
                  the time from the first request leaving the client to the last body byte), \
                  bottleneck_share (with --cross: the bodies over those plus the cross \
                  traffic's bytes in the same interval), link_drops (--link tun: packets the \
                  link's server-to-client direction dropped while the fixture ran, every flow) \
                  and server_retransmits (our in-process servers: the server socket's \
                  tcpi_total_retrans; null for peers). A run that fails or times out is \
                  recorded (in the JSON with completed false and its error), counted under the \
                  table and left out of the medians; the lab goes on, and exits with an error \
                  only when no run completed.\n\n\
                  Peers: the real servers nginx, nginx-4k (ssl_buffer_size 4k), nghttpd \
                  (--no-rfc7540-pri: RFC 9218 scheduling), h2o and apache (event MPM, \
                  mod_http2) run only when named in --cases, e.g. \
                  --cases stock,scheduled,nginx,nginx-4k,nghttpd,h2o,apache; \
                  scripts/install-peers.sh installs them (Debian packages). Each run starts a \
                  fresh one from a configuration written to a temporary directory. A peer \
                  that is not installed is skipped with one line on stderr; the default \
                  cases are ours only, so the default run needs no peer.\n\n\
                  First request: `--workloads first-request` measures the client's first \
                  flight instead, one small request (GET /critical, 4096 bytes) on a new \
                  connection, fresh (full handshake) and resumed (a priming connection to the \
                  same server first), per client case (--cases stock-client, hyper's HTTP/2 \
                  client over tokio-rustls without TCP_NODELAY; coalesced and coalesced-0rtt, \
                  tls-flush's coalescing client, with TLS 1.3 early data for the latter) and \
                  server (--servers ours, the demo app behind tls-flush with session tickets \
                  and no early data; nginx-0rtt, nginx with session tickets and ssl_early_data \
                  on; nginx-no-early, with ssl_early_data off). Per run: first_response_ms \
                  (connect start to the first response byte), first_flight_records (TLS \
                  records with application data the client wrote before it), \
                  first_flight_segments (the TCP segments that carried them; --link tun only) \
                  and resumed (whether the handshake resumed). `--workloads connection-rate` \
                  opens one connection after the other (TCP, TLS, HTTP/2, the same request, \
                  close), sequentially with a single client, for --duration seconds per case \
                  and server, sharing one session store (every connection after the first may \
                  resume), and reports connections per second and the ratio to stock-client, \
                  the way HAProxy measures connection rates.\n\n\
                  Pages: `--workloads page-article,page-app,page-busy,page-demo` (any subset, \
                  on their own) loads the lab's generated site's pages in a fresh headless \
                  Chromium (Debian's chromium) from a fresh server per run, ours or a peer's, \
                  through the link, and reports LCP, FCP, load, the stylesheet's and the hero \
                  image's ends (article, busy), the API answers' time (app), the critical \
                  answer's time and the two background downloads' end, bulk_end_ms (demo: the \
                  example server's demo page, no LCP or FCP), the ratios and the paired \
                  differences to stock; a load that is not complete and byte-exact is a \
                  failed run. First the `priority` headers Chromium sent per resource type. \
                  Chromium runs 10 steps nicer than the lab, and with --link tun the lab's \
                  threads (the link, our servers and the peers it starts) run 5 steps less \
                  nice: on a real link the browser's rendering does not share the server's \
                  cores."
)]
pub struct LabArgs {
    /// Runs of every (case, workload, urgencies) cell.
    #[arg(long, default_value_t = 10)]
    pub repeats: usize,
    /// Cases, comma-separated: stock, stock-4k, early-flush, dynamic, scheduled; the peers
    /// nginx, nginx-4k, nghttpd, h2o, apache (skipped when not installed; see below); or
    /// NAME@HOST:PORT for an external server serving the same fixture [default: ours only,
    /// stock,stock-4k,early-flush,dynamic,scheduled]. With first-request or
    /// connection-rate: client cases, stock-client, coalesced, coalesced-0rtt [default:
    /// stock-client]. With the page workloads: servers as above, no external one [default:
    /// stock,early-flush,scheduled,nginx,nghttpd,h2o,apache].
    #[arg(long, value_delimiter = ',')]
    pub cases: Option<Vec<String>>,
    /// Workloads, comma-separated: alone (the critical request alone on a fresh connection:
    /// the floor the `x alone` column divides by), simultaneous, late; or, on their own,
    /// first-request and connection-rate (see below); or, on their own, the pages loaded in
    /// headless Chromium: page-article, page-app, page-busy, page-demo (any subset).
    #[arg(long, value_delimiter = ',', default_value = "alone,simultaneous,late")]
    pub workloads: Vec<WorkloadArg>,
    /// With first-request or connection-rate: servers, comma-separated: ours, nginx-0rtt,
    /// nginx-no-early (the nginx ones skipped when not installed) [default: ours].
    #[arg(long, value_delimiter = ',')]
    pub servers: Option<Vec<FirstRequestServer>>,
    /// With connection-rate: seconds each (case, server) run opens connections for
    /// [default: 10].
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Urgencies, comma-separated: equal (all u=3), explicit (critical u=0, background u=5, i).
    #[arg(long, value_delimiter = ',', default_value = "equal,explicit")]
    pub urgencies: Vec<Urgencies>,
    /// The link: `relay` (the embedded loopback relay, rootless) or `tun` (root only: the
    /// server and the client in two network namespaces joined by a TUN-based packet
    /// emulator, kernel TCP end to end).
    #[arg(long, default_value = "relay", value_parser = parse_link)]
    pub link: LinkMode,
    /// TCP congestion control of both namespaces of `--link tun`: cubic or bbr [default:
    /// cubic].
    #[arg(long)]
    pub cc: Option<CongestionControl>,
    /// Round-trip time of the link in milliseconds [default: the link's, 20].
    #[arg(long)]
    pub rtt_ms: Option<f64>,
    /// Rate of the link in Mbit/s, each direction [default: the link's, 20].
    #[arg(long)]
    pub rate_mbit: Option<f64>,
    /// Queue of the relay link in bytes, each direction [default: one bandwidth-delay
    /// product].
    #[arg(long)]
    pub queue_bytes: Option<usize>,
    /// Queue of the tun link in packets, each direction; tail drop when full [default: 1000,
    /// like netem's limit].
    #[arg(long)]
    pub queue_packets: Option<usize>,
    /// With --link tun only: random loss in percent, each direction, of the packets entering
    /// the bottleneck (before the queue; counted apart from tail drops), seeded: each
    /// repeat's link seed derives from --seed and the repeat [default: 0, none].
    #[arg(long, value_name = "PCT")]
    pub loss: Option<f64>,
    /// With --link tun and --loss: losses come in bursts of LEN packets on average (a
    /// Gilbert-Elliott chain: every packet lost in the bad state, none in the good one, at
    /// the same average rate as --loss) instead of independently [default: independent].
    #[arg(long, value_name = "LEN", requires = "loss")]
    pub loss_burst: Option<f64>,
    /// With --link tun only: delay jitter in milliseconds, each direction, seeded: each
    /// packet's extra delay is drawn uniformly from [0, 2 x MS] (mean MS), never delivering
    /// a packet before the one ahead of it (no reordering) [default: 0, none].
    #[arg(long, value_name = "MS")]
    pub jitter_ms: Option<f64>,
    /// With --link tun only: the link's rate follows delivery-opportunity traces
    /// (mahimahi's format: one 1500-byte opportunity per line, a time in ms; unused
    /// opportunities are lost; the trace loops) instead of --rate-mbit: DOWN for server to
    /// client, UP (optional; without it the uplink keeps --rate-mbit) for client to server.
    /// Each is a file, or a bare name resolved in integration-tests/data/traces with
    /// `.down` or `.up` by direction: Verizon-LTE-short, TMobile-LTE-short (e.g.
    /// --rate-trace Verizon-LTE-short,Verizon-LTE-short for both ways). Repeat 0 starts at
    /// the traces' beginning, each later repeat elsewhere in them, every case of a repeat
    /// at the same point.
    #[arg(long, value_name = "DOWN[,UP]", value_delimiter = ',')]
    pub rate_trace: Option<Vec<String>>,
    /// Seed of the random order within each repeat, and of the tun link's random
    /// impairments (--loss, --jitter-ms: each repeat's link seed derives from it and the
    /// repeat, the same for every case of the repeat) [default: a random one, printed].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Writes `{"config": ..., "results": [...]}` (plus the summary) to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draws the median critical completion times as grouped bars to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Prints a second table: where the bytes ahead of the critical response were when the
    /// server read the critical request (the link's queue with --link tun; the wrapper's
    /// queue, rustls, the kernel's unsent and in-flight bytes for the tls-flush cases), and
    /// what the server sent after reading it before the critical response. The JSON has
    /// these figures per run either way.
    #[arg(long)]
    pub explain: bool,
    /// With --link tun: writes a packet timeline of each run to this directory (created if
    /// needed), one CSV file per run named after its order, case, workload, urgencies and
    /// repeat (e.g. `003-scheduled-late-explicit-r0.csv`): time, direction, flow (`fixture`,
    /// or `cross` for --cross traffic), IP length, TCP flags, relative seq and ack, payload,
    /// queue, and the TLS records and HTTP/2 streams a server-to-client packet carried.
    #[arg(long, value_name = "DIR")]
    pub trace: Option<PathBuf>,
    /// With --trace: trace only the first N runs (in the order they run) [default: all].
    #[arg(long, value_name = "N", requires = "trace")]
    pub trace_runs: Option<usize>,
    /// With --link tun only: N bulk TCP flows of cross traffic through the same bottleneck,
    /// from a sender of their own in the server namespace to a sink in the client
    /// namespace (not through the server under test), each writing as fast as its socket
    /// takes it, with the link's --cc. They start 3 s before each run's fixture (a head
    /// start to fill the queue), and up to 1 s more drawn from the repeat's seed (so that
    /// runs meet the competitor's sawtooth at different moments), and stop after it. The
    /// table and the JSON then give the fixture's bottleneck_share: its body bytes over
    /// those plus what the sink received while the fixture ran [default: 0, none].
    #[arg(long, value_name = "N")]
    pub cross: Option<usize>,
    /// With --link tun only: N clients run each workload at once on one server, each on
    /// its own connection, all starting together; every run then has N results (`client`
    /// in the JSON), paired with stock's client of the same index. Not with --trace
    /// [default: 1].
    #[arg(long, value_name = "N")]
    pub clients: Option<usize>,
}

/// What the lab runs.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Runs of every cell.
    pub repeats: usize,
    /// Servers under test; [`crate::stats::BASELINE`] among them enables paired differences.
    pub cases: Vec<Case>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Urgency sets.
    pub urgencies: Vec<Urgencies>,
    /// Link mode.
    pub link_mode: LinkMode,
    /// Link parameters (of the relay; the tun link takes its RTT and rate).
    pub link: LinkConfig,
    /// The tun link's parameters (used with [`LinkMode::Tun`]).
    pub tun: TunConfig,
    /// Seed of the order within each repeat.
    pub seed: u64,
    /// Peer cases asked for but left out because they are not installed (by
    /// [`skip_missing_peers`](Self::skip_missing_peers)).
    pub skipped: Vec<NotInstalled>,
    /// Print the attribution table.
    pub explain: bool,
    /// Where packet traces go, and how many runs are traced.
    pub trace: Option<(PathBuf, usize)>,
    /// `--workloads first-request` / `connection-rate`: what they run (then `cases`,
    /// `workloads` and `urgencies` are empty).
    pub first_request: Option<FirstRequestPlan>,
    /// `--workloads page-*`: the pages to load (then `workloads` and `urgencies` are empty).
    pub pages: Option<PagePlan>,
}

impl LabConfig {
    /// The configuration the flags ask for (checks them).
    pub fn from_args(args: &LabArgs) -> Result<LabConfig, BoxError> {
        if args.repeats == 0 {
            return Err("--repeats must be at least 1".into());
        }
        let mut link = LinkConfig::default();
        if let Some(rtt) = args.rtt_ms {
            if !rtt.is_finite() || rtt < 0.0 {
                return Err(format!("--rtt-ms must be a non-negative number, not {rtt}").into());
            }
            link.rtt = Duration::from_secs_f64(rtt / 1e3);
        }
        if let Some(rate) = args.rate_mbit {
            if !rate.is_finite() || rate <= 0.0 {
                return Err(format!("--rate-mbit must be a positive number, not {rate}").into());
            }
            link.rate_mbit = rate;
        }
        if let Some(queue) = args.queue_bytes {
            if queue == 0 {
                return Err("--queue-bytes must be at least 1".into());
            }
            link.queue_bytes = Some(queue);
        }
        let mut tun = TunConfig::from_link(&link);
        match args.link {
            LinkMode::Relay => {
                if args.trace.is_some() {
                    return Err("--trace applies to --link tun only: the packet timeline \
                                comes from the tun link's emulator"
                        .into());
                }
                if args.cc.is_some() {
                    return Err(
                        "--cc applies to --link tun only: the relay link's TCP runs \
                                over loopback, where congestion control does not act"
                            .into(),
                    );
                }
                if args.queue_packets.is_some() {
                    return Err(
                        "--queue-packets applies to --link tun only (the relay's queue is \
                         --queue-bytes)"
                            .into(),
                    );
                }
                if args.clients.is_some_and(|n| n != 1) {
                    return Err("--clients applies to --link tun only".into());
                }
                if args.cross.is_some() {
                    return Err(
                        "--cross applies to --link tun only: the cross traffic runs between \
                         the tun link's two network namespaces"
                            .into(),
                    );
                }
                if let Some(flag) = crate::impairments::first_flag(args) {
                    return Err(format!(
                        "{flag} applies to --link tun only: the relay link models a rate, a \
                         delay and a queue, not loss, jitter or rate traces"
                    )
                    .into());
                }
            }
            LinkMode::Tun => {
                if args.queue_bytes.is_some() {
                    return Err(
                        "--queue-bytes applies to --link relay only (the tun link's queue \
                         counts packets: --queue-packets)"
                            .into(),
                    );
                }
                if let Some(packets) = args.queue_packets {
                    if packets == 0 {
                        return Err("--queue-packets must be at least 1".into());
                    }
                    tun.queue_packets = packets;
                }
                tun.cc = args.cc.unwrap_or_default();
                tun.cross_flows = args.cross.unwrap_or(0);
                tun.clients = match args.clients.unwrap_or(1) {
                    0 => return Err("--clients must be at least 1".into()),
                    n if n > 1 && args.trace.is_some() => {
                        return Err("--trace traces runs of one client (drop --clients)".into())
                    }
                    n => n,
                };
                crate::impairments::apply(args, &mut tun)?;
            }
        }
        let pages = crate::pages::page_plan(args)?;
        let first_request = first_request_plan(args)?;
        if tun.clients > 1 && (pages.is_some() || first_request.is_some()) {
            return Err("--clients applies to simultaneous, late and alone only".into());
        }
        let case_names = match (&args.cases, &first_request, &pages) {
            (_, Some(_), _) => Vec::new(),
            (Some(names), None, _) => names.clone(),
            (None, None, Some(_)) => crate::pages::DEFAULT_CASES.map(String::from).to_vec(),
            (None, None, None) => Case::BUILTIN.iter().map(|c| c.name().to_string()).collect(),
        };
        let cases = case_names
            .iter()
            .map(|name| name.parse::<Case>())
            .collect::<Result<Vec<_>, _>>()?;
        let cases = dedup(&cases, Case::clone);
        if let Some(dup) = cases.iter().enumerate().find_map(|(i, c)| {
            cases[..i]
                .iter()
                .any(|d| d.name() == c.name())
                .then(|| c.name())
        }) {
            return Err(format!("two different cases are named `{dup}`").into());
        }
        if pages.is_some() {
            crate::pages::check_cases(&cases)?;
        }
        let config = LabConfig {
            repeats: args.repeats,
            cases,
            workloads: dedup(
                &args
                    .workloads
                    .iter()
                    .filter_map(|w| match w {
                        WorkloadArg::Priority(w) => Some(*w),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
                |w| *w,
            ),
            urgencies: if first_request.is_some() || pages.is_some() {
                Vec::new()
            } else {
                dedup(&args.urgencies, |u| *u)
            },
            link_mode: args.link,
            link,
            tun,
            seed: args
                .seed
                .unwrap_or_else(|| u64::from(rand::random::<u32>())),
            skipped: Vec::new(),
            explain: args.explain,
            trace: args
                .trace
                .clone()
                .map(|dir| (dir, args.trace_runs.unwrap_or(usize::MAX))),
            first_request,
            pages,
        };
        let own_plan = config.first_request.is_some() || config.pages.is_some();
        if !own_plan && config.cells().is_empty() {
            return Err(
                "nothing to run: --cases, --workloads and --urgencies may not be empty".into(),
            );
        }
        Ok(config)
    }

    /// Leaves out the peer cases whose server is not installed here, remembers them in
    /// [`skipped`](Self::skipped) and returns them (the lab prints one line for each, and
    /// stops when no case is left).
    pub fn skip_missing_peers(&mut self) -> &[NotInstalled] {
        let mut kept = Vec::new();
        for case in std::mem::take(&mut self.cases) {
            match case.peer().map(|kind| kind.binary()) {
                Some(Err(missing)) => self.skipped.push(missing),
                _ => kept.push(case),
            }
        }
        self.cases = kept;
        if let Some(plan) = &mut self.first_request {
            let mut kept = Vec::new();
            for server in std::mem::take(&mut plan.servers) {
                match server.peer().map(|kind| kind.binary()) {
                    Some(Err(missing)) => self.skipped.push(missing),
                    _ => kept.push(server),
                }
            }
            plan.servers = kept;
        }
        &self.skipped
    }

    /// Every (case, workload, urgencies) cell, in table order.
    pub fn cells(&self) -> Vec<(Case, Workload, Urgencies)> {
        let mut cells = Vec::new();
        for &workload in &self.workloads {
            for &urgencies in &self.urgencies {
                for case in &self.cases {
                    cells.push((case.clone(), workload, urgencies));
                }
            }
        }
        cells
    }

    /// The runs in the order they happen: repeat by repeat, every cell once per repeat, in a
    /// random order drawn from [`seed`](Self::seed).
    pub fn schedule(&self) -> Vec<Planned> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut plan = Vec::new();
        for repeat in 0..self.repeats {
            let mut cells = self.cells();
            cells.shuffle(&mut rng);
            plan.extend(
                cells
                    .into_iter()
                    .map(|(case, workload, urgencies)| Planned {
                        repeat,
                        case,
                        workload,
                        urgencies,
                    }),
            );
        }
        plan
    }

    /// The tun link of the runs of `repeat`: the configured one with the repeat's own
    /// impairment seed (derived from [`seed`](Self::seed)) and, with rate traces, its own
    /// start in them. Every case of a repeat meets the same conditions (paired
    /// comparisons), every repeat different ones, and every run is reproducible.
    pub fn tun_for_repeat(&self, repeat: usize) -> TunConfig {
        let mut tun = TunConfig {
            seed: derive_seed(self.seed, repeat as u64),
            ..self.tun.clone()
        };
        if let Some(traces) = &mut tun.rate_trace {
            traces.start = trace_start(&traces.downstream, repeat);
        }
        tun
    }

    /// The link's one-line description (the first line of the report).
    pub fn describe_link(&self) -> String {
        match self.link_mode {
            LinkMode::Relay => self.link.describe(),
            LinkMode::Tun => self.tun.describe(),
        }
    }
}

/// The first-request plan the flags ask for, if `--workloads` names first-request or
/// connection-rate (which then run alone); checks the flags that only apply to one kind.
fn first_request_plan(args: &LabArgs) -> Result<Option<FirstRequestPlan>, BoxError> {
    let first_request = args.workloads.contains(&WorkloadArg::FirstRequest);
    let rate = args.workloads.contains(&WorkloadArg::ConnectionRate);
    if !first_request && !rate {
        if args.servers.is_some() || args.duration.is_some() {
            return Err(
                "--servers and --duration apply to --workloads first-request and \
                        connection-rate only"
                    .into(),
            );
        }
        return Ok(None);
    }
    if args
        .workloads
        .iter()
        .any(|w| matches!(w, WorkloadArg::Priority(_)))
    {
        return Err(
            "first-request and connection-rate run on their own (their --cases are \
                    clients): run the priority workloads in another lab invocation"
                .into(),
        );
    }
    if args.explain || args.trace.is_some() || args.svg.is_some() || args.cross.is_some() {
        return Err(
            "--explain, --trace, --svg and --cross apply to the priority workloads only".into(),
        );
    }
    if !rate && args.duration.is_some() {
        return Err("--duration applies to --workloads connection-rate only".into());
    }
    let names = args
        .cases
        .clone()
        .unwrap_or_else(|| vec![ClientCase::StockClient.name().to_string()]);
    let cases = names
        .iter()
        .map(|name| name.parse::<ClientCase>())
        .collect::<Result<Vec<_>, _>>()?;
    let mut cases = dedup(&cases, |c| *c);
    // The baseline first, so that ratios have it.
    cases.sort_by_key(|c| *c != ClientCase::StockClient);
    let servers = dedup(
        args.servers
            .as_deref()
            .unwrap_or(&[FirstRequestServer::Ours]),
        |s| *s,
    );
    if cases.is_empty() || servers.is_empty() {
        return Err("nothing to run: --cases and --servers may not be empty".into());
    }
    let duration = args.duration.unwrap_or(DEFAULT_RATE_SECS);
    if !(duration.is_finite() && duration > 0.0) {
        return Err(
            format!("--duration must be a positive number of seconds, not {duration}").into(),
        );
    }
    Ok(Some(FirstRequestPlan {
        cases,
        servers,
        first_request,
        connection_rate: rate.then(|| Duration::from_secs_f64(duration)),
    }))
}

fn dedup<T: Clone, K: PartialEq>(items: &[T], key: impl Fn(&T) -> K) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in items {
        if !out.iter().any(|o| key(o) == key(item)) {
            out.push(item.clone());
        }
    }
    out
}

/// One planned run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Which repeat.
    pub repeat: usize,
    /// The server under test.
    pub case: Case,
    /// The workload.
    pub workload: Workload,
    /// The urgencies.
    pub urgencies: Urgencies,
}

#[cfg(test)]
pub(crate) mod tests;
