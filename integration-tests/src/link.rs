//! Rootless link emulator: a loopback TCP relay that imposes a one-way delay, a rate and a
//! bounded queue on each direction of every connection it relays.
//!
//! [`RelayLink::start`] listens on `127.0.0.1:0`; every accepted connection is relayed to the
//! upstream address through two independent emulated directions (client to server and server
//! to client), each with the parameters of [`LinkConfig`].
//!
//! # What it models
//!
//! Per direction, a bottleneck router queue feeding a wire:
//!
//! - **Queue.** Bytes enter the queue when the relay reads them from the sender's socket. The
//!   relay reads only while the queue has room: bytes not yet serialized never exceed
//!   [`LinkConfig::queue_limit`] (default one bandwidth-delay product). When the queue is full
//!   the relay stops reading, its (small) socket receive buffer fills, the window it advertises
//!   closes and the sender's writes back up into the sender's kernel send buffer, which is where
//!   a real bottleneck would push them too (by loss and congestion control instead of by flow
//!   control, see below).
//! - **Serialization.** What is read is cut into segments of [`SEGMENT_BYTES`] (an Ethernet
//!   MSS), or at high rates of as many bytes as the wire serializes in 250 µs (3125 B at
//!   100 Mbit/s), to bound the number of timer wake-ups. Each segment leaves the wire at
//!   `max(now, previous departure) + len / rate`; the rate applies to payload bytes (no header
//!   overhead is charged).
//! - **Propagation.** A segment is delivered to the receiver's socket one one-way delay
//!   (`rtt / 2`) after its serialization ends.
//! - **Bytes in flight** (serialized, not yet delivered) do not count against the queue: they
//!   are bounded by the pipe itself (`rate × one-way delay`), as on a real wire. A separate
//!   bound stops the relay when the *receiver* stops reading: everything the relay holds for a
//!   direction (queue, pipe and the batch being written) stays below
//!   `queue_limit + rate × (one-way delay + 5 ms) + 64 KiB`; past that the relay stops reading
//!   from the sender. With a receiver that reads, this bound is never reached. Bytes held while
//!   the receiver does not read are delivered as soon as it reads again, as if they had waited
//!   in its receive buffer.
//! - **Half-close.** When a side shuts down its write half, the relay shuts down the matching
//!   write half towards the other side after every queued byte has been delivered (the FIN is a
//!   zero-length segment that travels the same queue and delay). The other direction keeps
//!   working. No byte is lost, duplicated or reordered; an error on either socket (a reset)
//!   tears the whole relayed connection down.
//! - **Small relay buffers.** The relay's sockets set `TCP_NODELAY` and fixed `SO_RCVBUF` and
//!   `SO_SNDBUF` (which also turns off their autotuning) of [`RELAY_SOCKET_BUFFER`] (16 KiB), or
//!   2 ms of the link rate when that is more (up to 256 KiB; loopback TCP with 64 KiB segments
//!   stalls on tiny buffers at a few hundred Mbit/s). The kernel doubles the value. So the relay
//!   does not hide a large buffer of its own between the sender and the emulated queue.
//!
//! # What it does not model
//!
//! - **The long path's TCP dynamics.** The server's (and the client's) TCP talks to a loopback
//!   peer with a microsecond RTT and a 64 KiB MTU. There is no congestion control, no slow start
//!   and no ACK clocking over the emulated 20 ms path: the sender's window opens at once and the
//!   sender is paced only by the relay's flow-control backpressure.
//! - **Send-buffer autotuning.** Because the loopback RTT is tiny and the window is wide, the
//!   sender's kernel send buffer autotunes far larger than it would on a real 20 ms path (a
//!   stock hyper server behind a loopback relay was seen holding about 1.9 MB unsent in its
//!   kernel send queue). Data that a server has written but the link has not taken waits there, so servers
//!   that write eagerly (stock hyper) look worse here than on a real link, where congestion
//!   control would keep that queue shorter.
//! - **Loss, reordering, duplication, MTU effects, header overhead, jitter** and cross traffic:
//!   none. A full queue backpressures instead of dropping.
//! - **Timer precision.** Tokio's timers tick every millisecond and its driver can oversleep
//!   by up to another one, which would add 0-2 ms to every delivery. The relay instead waits on
//!   one process-wide timer thread (a condition variable with a monotonic deadline, precise to
//!   tens of microseconds), so deliveries are never early and typically late by well under a
//!   millisecond; on a loaded machine, scheduling latency adds to that. The rate does not drift:
//!   departures are computed from the schedule, not from when a timer fired.
//!
//! ```no_run
//! # async fn demo(upstream: std::net::SocketAddr) -> std::io::Result<()> {
//! use integration_tests::link::{LinkConfig, RelayLink};
//! let link = RelayLink::start(upstream, LinkConfig::default()).await?;
//! println!("{}", link.config().describe());
//! let stream = tokio::net::TcpStream::connect(link.addr()).await?;
//! # drop(stream); Ok(()) }
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep, Instant};

/// Size of the segments the wire serializes and delivers (an Ethernet MSS with TCP timestamps);
/// larger at rates above 46 Mbit/s (see the module documentation). The queue always holds at
/// least this much.
pub const SEGMENT_BYTES: usize = 1448;

/// `SO_RCVBUF` and `SO_SNDBUF` requested on every relay socket (Linux doubles it); more at
/// rates above 65 Mbit/s (2 ms of the rate, up to 256 KiB).
pub const RELAY_SOCKET_BUFFER: usize = 16 * 1024;

/// Time of link rate the relay's socket buffers are sized for, above the minimum.
const RELAY_BUFFER_TIME: Duration = Duration::from_millis(2);

/// Upper limit of the relay's socket buffer size.
const RELAY_BUFFER_MAX: usize = 256 * 1024;

/// Largest single read from a sender's socket.
const READ_CHUNK: usize = 16 * 1024;

/// Largest batch of due segments written to a receiver at once.
const WRITE_BATCH: usize = 64 * 1024;

/// Serialization time of a segment at high rates.
const SEGMENT_TIME: Duration = Duration::from_micros(250);

/// Extra pipe time allowed in the in-flight bound (timer lateness, scheduling).
const PIPE_SLACK: Duration = Duration::from_millis(5);

/// Parameters of the emulated link, applied to each direction independently.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Round-trip propagation delay; each direction delays by half of it.
    pub rtt: Duration,
    /// Rate of each direction, in Mbit/s (10^6 bits per second) of payload.
    pub rate_mbit: f64,
    /// Queue limit per direction in bytes; `None` = one bandwidth-delay product
    /// (`rate × rtt / 8`).
    pub queue_bytes: Option<usize>,
}

impl Default for LinkConfig {
    /// 20 ms RTT, 20 Mbit/s each way, queue of one bandwidth-delay product (50 000 B).
    fn default() -> Self {
        LinkConfig {
            rtt: Duration::from_millis(20),
            rate_mbit: 20.0,
            queue_bytes: None,
        }
    }
}

impl LinkConfig {
    /// The delay of each direction: half the RTT.
    pub fn one_way_delay(&self) -> Duration {
        self.rtt / 2
    }

    /// The bandwidth-delay product in bytes: `rate × rtt / 8`.
    pub fn bdp_bytes(&self) -> usize {
        let bdp = self.bytes_per_sec() * self.rtt.as_secs_f64();
        if bdp.is_finite() && bdp > 0.0 {
            bdp.round() as usize
        } else {
            0
        }
    }

    /// The queue limit per direction in bytes: `queue_bytes`, or one bandwidth-delay product
    /// when it is `None`; never less than one segment ([`SEGMENT_BYTES`]).
    pub fn queue_limit(&self) -> usize {
        self.queue_bytes
            .unwrap_or_else(|| self.bdp_bytes())
            .max(SEGMENT_BYTES)
    }

    /// One line for the top of a results table, e.g. `relay link: 20 ms RTT, 20 Mbit/s each
    /// way, queue 50000 B (1 BDP); loopback TCP at both ends`.
    pub fn describe(&self) -> String {
        let queue = self.queue_limit();
        let bdp = self.bdp_bytes();
        let ratio = if bdp > 0 {
            format!(" ({} BDP)", Num(queue as f64 / bdp as f64, 2))
        } else {
            String::new()
        };
        format!(
            "relay link: {} ms RTT, {} Mbit/s each way, queue {queue} B{ratio}; \
             loopback TCP at both ends",
            Num(self.rtt.as_secs_f64() * 1e3, 3),
            Num(self.rate_mbit, 3),
        )
    }

    fn bytes_per_sec(&self) -> f64 {
        self.rate_mbit * 1e6 / 8.0
    }

    fn validate(&self) -> io::Result<()> {
        if !(self.rate_mbit.is_finite() && self.rate_mbit > 0.0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "link rate must be a positive number of Mbit/s, got {}",
                    self.rate_mbit
                ),
            ));
        }
        Ok(())
    }
}

/// A number rounded to a number of decimals, printed without trailing zeros.
struct Num(f64, i32);

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scale = 10f64.powi(self.1);
        let v = (self.0 * scale).round() / scale;
        write!(f, "{}", if v == 0.0 { 0.0 } else { v })
    }
}

/// A running link emulator: a loopback listener whose connections are relayed to an upstream
/// address through the emulated link (see the [module documentation](self)).
///
/// Dropping it stops accepting and tears down every relayed connection.
#[derive(Debug)]
pub struct RelayLink {
    addr: SocketAddr,
    config: LinkConfig,
    task: JoinHandle<()>,
}

impl RelayLink {
    /// Listens on 127.0.0.1:0; every accepted connection is relayed to `upstream` through the
    /// emulated link. Fails if the listener cannot be set up or `config.rate_mbit` is not a
    /// positive number.
    pub async fn start(upstream: SocketAddr, config: LinkConfig) -> io::Result<RelayLink> {
        config.validate()?;
        let params = Params::new(&config);
        let socket = TcpSocket::new_v4()?;
        // Accepted sockets inherit the listener's buffer sizes, set before the handshake so
        // the advertised window scale matches.
        set_small_buffers(&socket, params.socket_buffer)?;
        socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        let listener = socket.listen(1024)?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept_loop(listener, upstream, params));
        tracing::debug!(%addr, %upstream, link = %config.describe(), "relay link started");
        Ok(RelayLink { addr, config, task })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The link's parameters.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }
}

impl Drop for RelayLink {
    fn drop(&mut self) {
        // The accept loop owns the relays' JoinSet; dropping it aborts them.
        self.task.abort();
    }
}

/// Per-direction parameters derived from a [`LinkConfig`].
#[derive(Clone, Copy, Debug)]
struct Params {
    bytes_per_sec: f64,
    one_way: Duration,
    queue_limit: usize,
    segment: usize,
    socket_buffer: usize,
    /// Bound on everything held by one direction (queue + pipe + batch being written).
    held_limit: usize,
}

impl Params {
    fn new(config: &LinkConfig) -> Params {
        let bytes_per_sec = config.bytes_per_sec();
        let one_way = config.one_way_delay();
        let queue_limit = config.queue_limit();
        let pipe = (bytes_per_sec * (one_way + PIPE_SLACK).as_secs_f64()).ceil();
        let pipe = if pipe.is_finite() {
            pipe.min(1e12) as usize
        } else {
            usize::MAX / 16
        };
        let held_limit = queue_limit
            .saturating_add(pipe)
            .saturating_add(WRITE_BATCH.max(READ_CHUNK))
            .min(Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        let segment = (bytes_per_sec * SEGMENT_TIME.as_secs_f64()).min(READ_CHUNK as f64) as usize;
        Params {
            bytes_per_sec,
            one_way,
            queue_limit,
            segment: segment.clamp(SEGMENT_BYTES, READ_CHUNK),
            socket_buffer: (bytes_per_sec * RELAY_BUFFER_TIME.as_secs_f64())
                .clamp(RELAY_SOCKET_BUFFER as f64, RELAY_BUFFER_MAX as f64)
                as usize,
            held_limit,
        }
    }
}

fn set_small_buffers(socket: &TcpSocket, size: usize) -> io::Result<()> {
    socket.set_recv_buffer_size(size as u32)?;
    socket.set_send_buffer_size(size as u32)?;
    Ok(())
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, params: Params) {
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    relays.spawn(async move {
                        if let Err(error) = relay(client, upstream, params).await {
                            tracing::debug!(%peer, %upstream, %error, "relayed connection ended");
                        }
                    });
                }
                Err(error) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(%error, "relay link accept failed");
                    sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, params: Params) -> io::Result<()> {
    client.set_nodelay(true)?;
    let socket = if upstream.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    set_small_buffers(&socket, params.socket_buffer)?;
    let mut server = socket.connect(upstream).await?;
    server.set_nodelay(true)?;
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    tokio::try_join!(
        direction(client_read, server_write, params),
        direction(server_read, client_write, params),
    )?;
    Ok(())
}

/// A segment due at the receiver at `at`; `None` is the FIN.
struct Segment {
    at: Instant,
    data: Option<Bytes>,
}

/// The serialization schedule of one direction.
struct Wire {
    bytes_per_sec: f64,
    one_way: Duration,
    /// When the wire finishes serializing everything scheduled so far.
    free_at: Instant,
}

impl Wire {
    /// Bytes scheduled but not yet serialized at `now` (the queue occupancy).
    fn backlog(&self, now: Instant) -> usize {
        let left = self.free_at.saturating_duration_since(now).as_secs_f64();
        (left * self.bytes_per_sec) as usize
    }

    /// The earliest time the backlog is at most `bytes`.
    fn when_backlog_at_most(&self, bytes: usize) -> Instant {
        let drain = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec);
        self.free_at
            .checked_sub(drain)
            .unwrap_or(self.free_at)
            .max(Instant::now())
            + Duration::from_micros(1)
    }

    /// Schedules `len` bytes read at `now`; returns when they are due at the receiver.
    fn schedule(&mut self, now: Instant, len: usize) -> Instant {
        let start = self.free_at.max(now);
        self.free_at = start + Duration::from_secs_f64(len as f64 / self.bytes_per_sec);
        self.free_at + self.one_way
    }
}

/// Relays one direction: `from` -> queue -> wire -> `to`.
async fn direction<R, W>(from: R, to: W, params: Params) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let held = Semaphore::new(params.held_limit);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::try_join!(ingress(from, tx, &held, params), egress(to, rx, &held))?;
    Ok(())
}

/// Reads from the sender while the queue has room and schedules what it read on the wire.
async fn ingress<R: AsyncRead + Unpin>(
    mut from: R,
    tx: mpsc::UnboundedSender<Segment>,
    held: &Semaphore,
    params: Params,
) -> io::Result<()> {
    let mut wire = Wire {
        bytes_per_sec: params.bytes_per_sec,
        one_way: params.one_way,
        free_at: Instant::now(),
    };
    let limit = params.queue_limit;
    // Wait for a useful amount of room before reading again (fewer, larger reads), but
    // never more than the queue can hold.
    let min_room = (limit / 4).clamp(SEGMENT_BYTES, READ_CHUNK).min(limit);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let backlog = wire.backlog(Instant::now());
        if backlog + min_room > limit {
            sleep_until(wire.when_backlog_at_most(limit - min_room)).await;
            continue;
        }
        // Room only grows until we schedule more, so reading `want` later is still in bounds.
        let want = (limit - backlog).min(READ_CHUNK);
        held.acquire_many(want as u32)
            .await
            .map_err(|_| io::Error::other("relay semaphore closed"))?
            .forget();
        let n = from.read(&mut buf[..want]).await?;
        held.add_permits(want - n);
        let now = Instant::now();
        if n == 0 {
            let at = wire.schedule(now, 0);
            let _ = tx.send(Segment { at, data: None });
            return Ok(());
        }
        let data = Bytes::copy_from_slice(&buf[..n]);
        let mut offset = 0;
        while offset < n {
            let end = (offset + params.segment).min(n);
            let at = wire.schedule(now, end - offset);
            if tx
                .send(Segment {
                    at,
                    data: Some(data.slice(offset..end)),
                })
                .is_err()
            {
                // The egress side is gone (it failed); its error ends the relay.
                return Ok(());
            }
            offset = end;
        }
    }
}

/// Delivers segments to the receiver when they are due.
async fn egress<W: AsyncWrite + Unpin>(
    mut to: W,
    mut rx: mpsc::UnboundedReceiver<Segment>,
    held: &Semaphore,
) -> io::Result<()> {
    let mut next: Option<Segment> = None;
    let mut batch = BytesMut::with_capacity(WRITE_BATCH);
    loop {
        let segment = match next.take() {
            Some(segment) => segment,
            None => match rx.recv().await {
                Some(segment) => segment,
                None => return Ok(()),
            },
        };
        sleep_until(segment.at).await;
        let mut fin = false;
        match segment.data {
            Some(data) => batch.extend_from_slice(&data),
            None => fin = true,
        }
        // Coalesce everything else already due into one write.
        let now = Instant::now();
        while !fin && batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(segment) if segment.at <= now => match segment.data {
                    Some(data) => batch.extend_from_slice(&data),
                    None => fin = true,
                },
                Ok(segment) => {
                    next = Some(segment);
                    break;
                }
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            to.write_all(&batch).await?;
            held.add_permits(batch.len());
            batch.clear();
        }
        if fin {
            to.shutdown().await?;
            return Ok(());
        }
    }
}

/// Waits until `deadline` on the precise timer thread (see "Timer precision" in the module
/// documentation). Never returns early.
async fn sleep_until(deadline: Instant) {
    let deadline = deadline.into_std();
    if deadline <= std::time::Instant::now() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    precise_timer().add(deadline, tx);
    // The thread only drops a sender after its deadline (or never), so either way it is time.
    let _ = rx.await;
    debug_assert!(std::time::Instant::now() >= deadline);
}

fn precise_timer() -> &'static PreciseTimer {
    static TIMER: OnceLock<&'static PreciseTimer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static PreciseTimer = Box::leak(Box::default());
        std::thread::Builder::new()
            .name("link-timer".into())
            .spawn(move || timer.run())
            .expect("spawn the link emulator's timer thread");
        timer
    })
}

/// A thread waking tokio tasks at precise deadlines.
#[derive(Default)]
struct PreciseTimer {
    state: Mutex<TimerState>,
    changed: Condvar,
}

#[derive(Default)]
struct TimerState {
    /// Pending wake-ups, earliest first (ties in arrival order).
    heap: BinaryHeap<Reverse<WakeUp>>,
    next_seq: u64,
}

struct WakeUp {
    deadline: std::time::Instant,
    seq: u64,
    waiter: oneshot::Sender<()>,
}

impl WakeUp {
    fn key(&self) -> (std::time::Instant, u64) {
        (self.deadline, self.seq)
    }
}

impl PartialEq for WakeUp {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for WakeUp {}

impl PartialOrd for WakeUp {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WakeUp {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PreciseTimer {
    fn add(&self, deadline: std::time::Instant, waiter: oneshot::Sender<()>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let seq = state.next_seq;
        state.next_seq += 1;
        let earliest = state
            .heap
            .peek()
            .is_none_or(|Reverse(first)| deadline < first.deadline);
        state.heap.push(Reverse(WakeUp {
            deadline,
            seq,
            waiter,
        }));
        drop(state);
        if earliest {
            self.changed.notify_one();
        }
    }

    fn run(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = std::time::Instant::now();
            while state
                .heap
                .peek()
                .is_some_and(|Reverse(first)| first.deadline <= now)
            {
                if let Some(Reverse(due)) = state.heap.pop() {
                    // The task may be gone (aborted); nothing to do then.
                    let _ = due.waiter.send(());
                }
            }
            state = match state.heap.peek() {
                Some(Reverse(first)) => {
                    let timeout = first.deadline - now;
                    self.changed
                        .wait_timeout(state, timeout)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}
