//! `attack`: runs one hostile-client attack against an example server process and reports
//! what it cost the server: its peak resident memory (`VmHWM`) and the CPU time it spent
//! (from `/proc/PID`), and for the urgent-request flood, how many bytes a running
//! download still moved.
//!
//! ```sh
//! cargo build --release -p examples --examples
//! cargo run --release -p integration-tests --bin attack -- \
//!     --server target/release/examples/axum --policy scheduled --attack hpack
//! ```
//!
//! The server is started with a generated certificate on a free loopback port and stopped
//! afterwards; run it once per policy (`stock` too) and compare the lines it prints.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use integration_tests::attack::{frame, hpack, priority_update_payload, RawH2};
use integration_tests::BoxError;
use rustls::pki_types::CertificateDer;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Attack {
    /// A 4000-byte `priority` value enters the HPACK dynamic table, then a 16 KiB HEADERS
    /// frame references it 16,000 times; three rounds of `--connections` connections.
    Hpack,
    /// 2000 PRIORITY_UPDATE frames with 16 KiB field values for an open stream.
    Updates,
    /// A 64 MiB download at `u=5, i` while a `u=0` request for `/critical` arrives every
    /// 2 ms for one second: the download's bytes in that second.
    Urgent,
}

/// Runs one hostile-client attack against an example server and reports its cost.
#[derive(Debug, Parser)]
struct Args {
    /// The example server binary (`target/release/examples/axum` or `.../hyper`).
    #[arg(long)]
    server: PathBuf,
    /// Its `--policy` (stock, early-flush, dynamic, scheduled).
    #[arg(long, default_value = "scheduled")]
    policy: String,
    #[arg(long, value_enum)]
    attack: Attack,
    /// Connections attacking at once (hpack).
    #[arg(long, default_value_t = 1)]
    connections: usize,
}

struct Server {
    child: Child,
    addr: SocketAddr,
    certificate: CertificateDer<'static>,
    _dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &Args) -> Result<Server, BoxError> {
    let (certificate, cert_pem, key_pem) = examples::tls::self_signed_pem()?;
    let dir = std::env::temp_dir().join(format!("attack-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("cert.pem"), cert_pem)?;
    std::fs::write(dir.join("key.pem"), key_pem)?;
    let mut child = Command::new(&args.server)
        .args(["--addr", "127.0.0.1:0", "--policy", &args.policy, "--cert"])
        .arg(dir.join("cert.pem"))
        .arg("--key")
        .arg(dir.join("key.pem"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on https://")
        .ok_or_else(|| format!("unexpected first line {line:?}"))?
        .parse()?;
    Ok(Server {
        child,
        addr,
        certificate,
        _dir: dir,
    })
}

/// Peak resident set (`VmHWM`) in KiB, and user + system CPU time.
fn usage(pid: u32) -> Result<(u64, Duration), BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmHWM")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').ok_or("bad stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok((hwm, Duration::from_millis(ticks * 1000 / hz)))
}

async fn hpack_attack(server: &Server, connections: usize) -> Result<String, BoxError> {
    let mut goaways = 0;
    for _round in 0..3 {
        let mut conns = Vec::new();
        for _ in 0..connections {
            let mut c = RawH2::connect(server.addr, &server.certificate, None).await?;
            let mut insert = hpack::request("GET", "/critical");
            hpack::literal_indexed_new_name(&mut insert, b"priority", &[b'a'; 4000]);
            let (_, f) = c.request_frame(&insert);
            c.send(f).await?;
            let mut amplify = hpack::request("GET", "/critical");
            amplify.resize(amplify.len() + 16_000, 0xbe);
            let (_, f) = c.request_frame(&amplify);
            c.send(f).await?;
            conns.push(c);
        }
        for c in &conns {
            let log = c
                .wait_for(Duration::from_secs(5), |l| l.goaway.is_some())
                .await;
            goaways += usize::from(log.goaway.is_some());
        }
    }
    Ok(format!("GOAWAYs {goaways} of {}", 3 * connections))
}

async fn updates_attack(server: &Server) -> Result<String, BoxError> {
    let mut c = RawH2::connect(server.addr, &server.certificate, None).await?;
    let id = c.request("GET", "/bg/1", Some("u=5, i")).await?;
    let mut value = b"u=1, ".to_vec();
    value.resize(16 * 1024 - 4, b'x');
    for _ in 0..2000 {
        c.send(frame(0x10, 0, 0, &priority_update_payload(id, &value)))
            .await?;
    }
    let log = c.wait_finished(&[id], Duration::from_secs(30)).await;
    let s = log.streams.get(&id).cloned().unwrap_or_default();
    Ok(format!(
        "download {} bytes, pattern ok {}",
        s.data, s.pattern_ok
    ))
}

async fn urgent_attack(server: &Server) -> Result<String, BoxError> {
    let mut c = RawH2::connect(server.addr, &server.certificate, None).await?;
    let bulk = c.request("GET", "/size/67108864", Some("u=5, i")).await?;
    c.wait_for(Duration::from_secs(5), |l| {
        l.streams.get(&bulk).is_some_and(|s| s.data > 1 << 20)
    })
    .await;
    let before = c.stream(bulk).data;
    let start = Instant::now();
    let mut urgent = 0;
    while start.elapsed() < Duration::from_secs(1) {
        c.request("GET", "/critical", Some("u=0")).await?;
        urgent += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let moved = c.stream(bulk).data - before;
    Ok(format!(
        "download moved {:.1} MB in 1 s beside {urgent} urgent requests",
        moved as f64 / 1e6
    ))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let server = start(&args)?;
    let pid = server.child.id();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (hwm_before, cpu_before) = usage(pid)?;
    let detail = match args.attack {
        Attack::Hpack => hpack_attack(&server, args.connections).await?,
        Attack::Updates => updates_attack(&server).await?,
        Attack::Urgent => urgent_attack(&server).await?,
    };
    let (hwm_after, cpu_after) = usage(pid)?;
    println!(
        "{:?} policy={} connections={}: peak RSS {} -> {} KiB (+{} KiB), server CPU {} ms; {}",
        args.attack,
        args.policy,
        args.connections,
        hwm_before,
        hwm_after,
        hwm_after.saturating_sub(hwm_before),
        (cpu_after - cpu_before).as_millis(),
        detail
    );
    Ok(())
}
