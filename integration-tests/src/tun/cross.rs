//! Cross traffic through the link's bottleneck: `flows` bulk TCP connections from a sender
//! of their own in the server namespace to a sink in the client namespace, sharing the
//! server-to-client queue with whatever the server under test sends (they never touch it).
//!
//! The sink listens on [`CLIENT_ADDR`] (port 0), each sender binds [`SERVER_ADDR`] (port 0)
//! and connects to it; both are plain kernel TCP sockets of their namespace, so they run
//! the link's congestion control ([`TunConfig::cc`](super::TunConfig::cc)). A sender writes
//! an endless byte pattern (byte `i` of the flow is `i % 251`) as fast as its socket takes
//! it, on a thread of its own; the sink reads each flow on a thread of its own and counts
//! the bytes, and logs when each read happened ([`CrossTraffic::received_between`]).
//! [`CrossTraffic::stop`] (or dropping the handle) ends every flow at once: the senders'
//! sockets are shut down and reset (`SO_LINGER` 0), so nothing they had queued keeps
//! crossing the link.
//!
//! ```no_run
//! use integration_tests::tun::{cross_head_start, CrossTraffic, TunConfig, TunLink};
//!
//! let link = TunLink::start(TunConfig::default())?;
//! let cross = CrossTraffic::start(&link, 1)?;
//! std::thread::sleep(cross_head_start(link.config().seed));
//! println!("{} bytes crossed so far", cross.received_bytes());
//! let total = cross.stop()?;
//! # let _ = total;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::{derive_seed, Side, TunLink, CLIENT_ADDR, SERVER_ADDR};

/// How long the lab lets cross traffic run before a run's fixture starts, at least: time
/// for the flows to leave slow start and fill the bottleneck's queue. Each run waits a
/// seeded draw of up to [`CROSS_PHASE_SPREAD`] more ([`cross_head_start`]).
pub const CROSS_HEAD_START: Duration = Duration::from_secs(3);

/// The most a run waits beyond [`CROSS_HEAD_START`]: a competitor's window is a sawtooth
/// (under cubic with the 200-packet queue an epoch takes seconds), so runs that all start
/// exactly 3 s after it meet it at one moment of its cycle. The lab's 200-packet profile,
/// `late`, 10 repeats and 2 seeds: started at 3 s, `scheduled`'s answer took one round trip
/// in every run (134 ms) and stock's 603-638 ms; with a draw of up to 1 s, two round trips
/// in 36 runs of 40 (medians 275-281 ms) and stock's 743-823, the queue full in both.
pub const CROSS_PHASE_SPREAD: Duration = Duration::from_secs(1);

/// Which stream of a link's seed [`cross_head_start`] draws from ([`derive_seed`]): none of
/// the impairments' (theirs are below 4), so that turning cross traffic on does not change
/// their draws.
const CROSS_PHASE_STREAM: u64 = 16;

/// How long cross traffic runs before the fixture of a run whose link has `seed`
/// ([`TunConfig::seed`](super::TunConfig::seed), one per repeat in the lab, so every case
/// of a repeat meets the same moment): [`CROSS_HEAD_START`] and a draw, in whole
/// milliseconds, below [`CROSS_PHASE_SPREAD`].
///
/// ```
/// use integration_tests::tun::{cross_head_start, CROSS_HEAD_START, CROSS_PHASE_SPREAD};
///
/// let wait = cross_head_start(7);
/// assert!(wait >= CROSS_HEAD_START && wait < CROSS_HEAD_START + CROSS_PHASE_SPREAD);
/// assert_eq!(wait, cross_head_start(7));
/// assert_ne!(wait, cross_head_start(8));
/// ```
pub fn cross_head_start(seed: u64) -> Duration {
    let spread = CROSS_PHASE_SPREAD.as_millis() as u64;
    let draw = derive_seed(seed, CROSS_PHASE_STREAM) % spread;
    CROSS_HEAD_START + Duration::from_millis(draw)
}

/// How long a flow's connect (and the sink's accept) may take: long enough for a lost SYN
/// to be sent again twice.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a blocked sender or sink looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// The sender's buffer: a whole number of pattern periods (251 bytes), about 64 KiB.
const CHUNK: usize = 251 * 256;

/// What the sink received: the total, and when each read completed.
#[derive(Default)]
struct Sink {
    received: AtomicU64,
    /// `(when, total received by then)` after every read, in order.
    reads: Mutex<Vec<(Instant, u64)>>,
}

impl Sink {
    fn add(&self, bytes: usize) {
        let mut reads = self.reads.lock().expect("cross sink poisoned");
        let total = self.received.load(Ordering::Relaxed) + bytes as u64;
        self.received.store(total, Ordering::Relaxed);
        reads.push((Instant::now(), total));
    }

    /// The total received by `at` (by the last read that completed at or before it).
    fn total_at(reads: &[(Instant, u64)], at: Instant) -> u64 {
        match reads.partition_point(|&(when, _)| when <= at) {
            0 => 0,
            n => reads[n - 1].1,
        }
    }
}

/// Running cross traffic: bulk TCP flows from a sender in the server namespace (bound to
/// [`SERVER_ADDR`]) to a sink in the client namespace (listening on [`CLIENT_ADDR`]), each
/// writing an endless pattern as fast as its socket takes it, with the link's congestion
/// control; the sink counts what it reads ([`received_bytes`](Self::received_bytes)) and
/// when ([`received_between`](Self::received_between)). [`stop`](Self::stop) ends every
/// flow at once (the senders' sockets are reset); dropping the handle does too, without
/// waiting for the threads.
pub struct CrossTraffic {
    flows: usize,
    sink: Arc<Sink>,
    stop: Arc<AtomicBool>,
    /// The senders' sockets (clones), to shut down when stopping.
    senders: Vec<TcpStream>,
    /// The senders' and the sink's threads: what each moved, or why it failed.
    threads: Vec<JoinHandle<io::Result<u64>>>,
}

impl std::fmt::Debug for CrossTraffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossTraffic")
            .field("flows", &self.flows)
            .field("received", &self.received_bytes())
            .finish_non_exhaustive()
    }
}

impl CrossTraffic {
    /// Starts `flows` bulk TCP flows from the server namespace to the client namespace of
    /// `link` and returns once every flow is connected (about one RTT; it blocks). Zero
    /// flows: a handle that counts nothing.
    pub fn start(link: &TunLink, flows: usize) -> io::Result<CrossTraffic> {
        let stop = Arc::new(AtomicBool::new(false));
        let sink = Arc::new(Sink::default());
        let mut cross = CrossTraffic {
            flows,
            sink: sink.clone(),
            stop: stop.clone(),
            senders: Vec::new(),
            threads: Vec::new(),
        };
        if flows == 0 {
            return Ok(cross);
        }
        let listener = link.run_in(Side::Client, || TcpListener::bind((CLIENT_ADDR, 0)))??;
        let sink_addr = SocketAddr::from((CLIENT_ADDR, listener.local_addr()?.port()));
        let senders = link.run_in(Side::Server, move || {
            (0..flows)
                .map(|_| connect(sink_addr))
                .collect::<io::Result<Vec<TcpStream>>>()
        })??;
        // On an error from here on, dropping `cross` stops what already runs.
        for sender in senders {
            cross.senders.push(sender.try_clone()?);
            let stop = stop.clone();
            cross.threads.push(
                std::thread::Builder::new()
                    .name("cross-sender".into())
                    .spawn(move || send(sender, &stop))?,
            );
        }
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        while cross.threads.len() < 2 * flows {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(e),
            };
            stream.set_nonblocking(false)?;
            let (sink, stop) = (sink.clone(), stop.clone());
            cross.threads.push(
                std::thread::Builder::new()
                    .name("cross-sink".into())
                    .spawn(move || receive(stream, &sink, &stop))?,
            );
        }
        Ok(cross)
    }

    /// How many flows run.
    pub fn flows(&self) -> usize {
        self.flows
    }

    /// Bytes the sink has received so far, every flow together (a live counter).
    pub fn received_bytes(&self) -> u64 {
        self.sink.received.load(Ordering::Relaxed)
    }

    /// Bytes the sink received between `from` and `to` (reads that completed after `from`,
    /// up to and including `to`); 0 when `to` is not after `from`.
    pub fn received_between(&self, from: Instant, to: Instant) -> u64 {
        let reads = self.sink.reads.lock().expect("cross sink poisoned");
        Sink::total_at(&reads, to).saturating_sub(Sink::total_at(&reads, from))
    }

    /// Stops every flow, waits for their threads and returns the bytes the sink received
    /// in all; fails if a flow had failed before it was told to stop.
    pub fn stop(mut self) -> io::Result<u64> {
        self.halt();
        let mut failed = Ok(());
        for thread in std::mem::take(&mut self.threads) {
            match thread.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => failed = failed.and(Err(e)),
                Err(_) => failed = failed.and(Err(io::Error::other("a cross flow panicked"))),
            }
        }
        failed.map(|()| self.received_bytes())
    }

    /// Tells the threads to stop and shuts the senders' sockets (waking a blocked write).
    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for sender in self.senders.drain(..) {
            let _ = sender.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for CrossTraffic {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A sender's socket, connected to the sink from [`SERVER_ADDR`] (call it in the server
/// namespace). Closing it resets the connection (`SO_LINGER` 0).
fn connect(sink: SocketAddr) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddr::from((SERVER_ADDR, 0)).into())?;
    socket.set_linger(Some(Duration::ZERO))?;
    socket.connect_timeout(&sink.into(), CONNECT_TIMEOUT)?;
    Ok(socket.into())
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Writes the pattern until told to stop; returns the bytes written.
fn send(mut stream: TcpStream, stop: &AtomicBool) -> io::Result<u64> {
    let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    stream.set_write_timeout(Some(POLL))?;
    let mut sent = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let at = (sent % CHUNK as u64) as usize;
        match stream.write(&chunk[at..]) {
            Ok(n) => sent += n as u64,
            Err(e) if timed_out(&e) => {}
            Err(_) if stop.load(Ordering::SeqCst) => break,
            Err(e) => return Err(io::Error::new(e.kind(), format!("cross sender: {e}"))),
        }
    }
    Ok(sent)
}

/// Reads one flow until told to stop, counting into `sink`; returns the bytes read.
fn receive(mut stream: TcpStream, sink: &Sink, stop: &AtomicBool) -> io::Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    stream.set_read_timeout(Some(POLL))?;
    let mut received = 0u64;
    while !stop.load(Ordering::SeqCst) {
        match stream.read(&mut buf) {
            Ok(0) if stop.load(Ordering::SeqCst) => break,
            Ok(0) => return Err(io::Error::other("cross sink: the flow ended early")),
            Ok(n) => {
                received += n as u64;
                sink.add(n);
            }
            Err(e) if timed_out(&e) => {}
            Err(_) if stop.load(Ordering::SeqCst) => break,
            Err(e) => return Err(io::Error::new(e.kind(), format!("cross sink: {e}"))),
        }
    }
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reads_between_two_moments() {
        let sink = Sink::default();
        let t0 = Instant::now();
        sink.add(100);
        sink.add(50);
        let t1 = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        sink.add(25);
        let t2 = Instant::now();
        let reads = sink.reads.lock().unwrap();
        assert_eq!(Sink::total_at(&reads, t0), 0);
        assert_eq!(Sink::total_at(&reads, t1), 150);
        assert_eq!(Sink::total_at(&reads, t2), 175);
        assert_eq!(sink.received.load(Ordering::Relaxed), 175);
    }
}
