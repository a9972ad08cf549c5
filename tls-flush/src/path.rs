//! What TCP reports about the path, and the write budget the wrapper derives from it.
//!
//! Bytes handed to the kernel can no longer be reordered, so the wrapper gives it only
//! what TCP can send soon (h2o's latency optimisation, generalised). Before it starts a
//! record it reads the socket's state ([`PathState`], from Linux `TCP_INFO`) and:
//!
//! - keeps the kernel's unsent bytes to about one record beyond what the congestion window
//!   lets TCP send now (`(cwnd - in flight) x MSS`, in flight as Linux counts it), plus,
//!   once the window holds four records, what it frees during a timer wait (at most two
//!   windows per minimum RTT, as in slow start), so that TCP does not idle until the timer
//!   fires;
//! - once the path's rate is known and the congestion control is loss-based (cubic: not
//!   BBR, which does this itself), keeps the bytes in flight plus the unsent ones near a
//!   small multiple of the bandwidth-delay product (`max delivery rate x the path's RTT`,
//!   the minimum RTT or, where delay varies, the lowest smoothed RTT seen): twice
//!   it while the rate is still growing (as BBR's startup does), 1.25 times once it stopped
//!   growing for three round trips, plus a record and what drains during a timer wait, so
//!   a deep bottleneck queue does not fill with less urgent bytes under a loss-based
//!   congestion control (cubic fills a 1,000-packet queue) and a fast path does not idle;
//! - lifts that cap where the standing queue is someone else's: while the cap holds bytes
//!   back after the initial slow start (which builds a queue of its own on any slower
//!   link, still standing for a round trip after it ends), a smoothed RTT well above what
//!   our own bytes explain (`gain` minimum RTTs, the record beyond the cap at the measured
//!   rate, and a few milliseconds of noise) means another flow fills the bottleneck. While
//!   the cap holds, bulk records are at most a quarter of the BDP, so that at a low rate
//!   our own record does not look like another flow's queue. Holding back cannot
//!   drain that queue (a more urgent response waits behind it whatever we send) and only
//!   hands our share to the other flow (a cubic download from `scheduled` got 0.55x stock's
//!   throughput against a cubic competitor filling a 1,000-packet queue). The budget then
//!   sends like stock (the congestion window and the kernel's margin only) until the queue
//!   is gone, and tests again every [`SHARED_QUEUE_RETEST`] whether the queue has become
//!   its own (restraint again, judged once its own queue had a round trip to drain), as
//!   BBR re-probes its minimum RTT;
//! - while the congestion window is small (under four full records), sizes records to what
//!   the window can send now, at least one segment's payload, so that a record never
//!   straddles the window's edge (its tail a round trip behind its head); in congestion
//!   avoidance bulk records may hold half the window, ACKs freeing room all through the
//!   round trip, and the next one goes to the kernel while what the ACKs free during a
//!   timer wait is still unsent;
//! - asks the kernel, once per connection, to pace the socket (a loss-based control on a
//!   paced path; BBR paces itself): TCP then spreads each record over the ACK clock at
//!   about 1.2 windows per RTT instead of sending it as one burst. Under the cap, room
//!   freed by a big ACK otherwise left as a burst of a whole record on top of the queue
//!   the cap lets stand, and a shallow bottleneck queue lost the burst's tail (10 Mbit/s,
//!   16-packet queue: 0.93x stock's goodput unpaced, 0.98x paced, and a `late` critical
//!   response in 43 ms instead of 80). Not before the initial slow start ends: paced at
//!   twice the window per smoothed RTT, slow start left part of its window unused each round
//!   trip and grew it more slowly than stock's, and against a competitor that had filled a
//!   200-packet queue first the download ended 0.94x stock's goodput (0.98x unpaced until the
//!   first loss or HyStart exit). Nor before the connection's first retransmission: a
//!   bottleneck that cannot queue a burst drops some of it, and one that can loses nothing
//!   to bursts. On a cellular link, whose ACKs come back in bursts as the radio schedules
//!   them, the pacer refilled a window the ACKs had emptied at 1.2 windows per (inflated)
//!   smoothed RTT while the link could take more (the window 32 segments, 2 in flight,
//!   37 KB held unsent), and a download on the T-Mobile LTE recording got 0.971x stock's
//!   goodput paced against 0.991x unpaced. Once it paces, the window's free room leaves at the
//!   pacing rate rather than at once, so the kernel keeps no more than [`PACED_AHEAD`]'s
//!   worth at that rate beyond a record of at most as much: behind a competitor's deep
//!   queue cubic paced at 240 kB/s, and two full records written into the window's room
//!   held a `late` critical response back by 120 ms;
//! - ends bulk records where they fill the kernel's last segment (see [`segment_aligned`]);
//! - writes the connection's first [`SEGMENT_RECORDS_UNTIL`] bytes in records of one segment
//!   each, as h2o does, so that the client decrypts the first bytes of a response (a page's
//!   head) as they arrive, not once the whole first flight has.
//!
//! Invariants: on a path whose minimum RTT is under [`MIN_PACED_RTT`] (loopback, a LAN) or
//! without `TCP_INFO`, nothing is limited (on such a path each write may hold
//! [`UNPACED_WRITE_RECORDS`] full records), and `TCP_INFO` is read again only every
//! [`UNPACED_REREAD`] records (a path's minimum RTT rarely grows); a wait is never shorter than a millisecond nor
//! longer than the minimum RTT, and it is a timer, not a self-wake.

use std::time::{Duration, Instant};

/// Linux `TCP_INFO`, the fields the write budget reads.
///
/// ```
/// let state = tls_flush::PathState {
///     cwnd: 10,
///     unacked: 4,
///     mss: 1448,
///     notsent: 0,
///     min_rtt: std::time::Duration::from_millis(20),
///     delivery_rate: 0,
///     ssthresh: 0,
///     srtt: std::time::Duration::from_millis(21),
///     retransmits: 0,
///     sacked: 0,
///     lost: 0,
///     retransmitting: 0,
///     pacing_rate: 0,
/// };
/// assert_eq!(state.window_bytes(), 6 * 1448);
/// assert!(state.in_slow_start(), "no slow start threshold yet");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathState {
    /// Congestion window, in segments (`tcpi_snd_cwnd`).
    pub cwnd: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Payload bytes per segment (`tcpi_snd_mss`).
    pub mss: u32,
    /// Bytes written to the socket and not yet sent (`tcpi_notsent_bytes`).
    pub notsent: u32,
    /// Lowest round-trip time seen (`tcpi_min_rtt`); zero when not measured yet.
    pub min_rtt: Duration,
    /// Latest delivery rate sample in bytes per second (`tcpi_delivery_rate`); zero when
    /// none yet.
    pub delivery_rate: u64,
    /// Slow start threshold in segments (`tcpi_snd_ssthresh`); Linux reports zero while
    /// the connection is still in its initial slow start.
    pub ssthresh: u32,
    /// Smoothed round-trip time (`tcpi_rtt`); zero when not measured yet.
    pub srtt: Duration,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub retransmits: u32,
    /// Of `unacked`, segments the receiver holds (selectively acknowledged, `tcpi_sacked`).
    pub sacked: u32,
    /// Of `unacked`, segments marked lost and not yet retransmitted or still missing
    /// (`tcpi_lost`).
    pub lost: u32,
    /// Retransmissions sent and not yet acknowledged (`tcpi_retrans`).
    pub retransmitting: u32,
    /// The rate the kernel paces the socket's segments at, where it paces them, in bytes
    /// per second (`tcpi_pacing_rate`: for cubic 1.2 x the window per smoothed RTT past
    /// slow start); `u64::MAX` when unlimited, zero when not read.
    pub pacing_rate: u64,
}

impl PathState {
    /// Reads a TCP socket's `TCP_INFO` (Linux and Android; elsewhere an
    /// [`Unsupported`](std::io::ErrorKind::Unsupported) error), e.g. to log a connection's
    /// retransmissions.
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let client = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// let state = tls_flush::PathState::read(&client)?;
    /// assert_eq!(state.retransmits, 0, "loopback loses nothing");
    /// assert!(state.mss > 0);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(unix)]
    pub fn read(socket: &impl std::os::fd::AsFd) -> std::io::Result<PathState> {
        crate::socket::tcp_info(socket.as_fd())
    }

    /// Segments in the network, as Linux counts them against the congestion window
    /// (`tcp_packets_in_flight`): sent and unacknowledged, less those the receiver holds
    /// or that are lost, plus retransmissions on their way. During loss recovery this is
    /// well below `unacked`.
    ///
    /// ```
    /// let state = tls_flush::PathState {
    ///     cwnd: 20,
    ///     unacked: 40,
    ///     sacked: 25,
    ///     lost: 10,
    ///     retransmitting: 2,
    ///     mss: 1448,
    ///     ..Default::default()
    /// };
    /// assert_eq!(state.in_flight_segments(), 7);
    /// assert_eq!(state.window_bytes(), 13 * 1448, "room for the lost segments' retransmissions");
    /// ```
    pub fn in_flight_segments(&self) -> u32 {
        self.unacked
            .saturating_sub(self.sacked.saturating_add(self.lost))
            .saturating_add(self.retransmitting)
    }

    /// Bytes the congestion window lets TCP send now.
    pub fn window_bytes(&self) -> usize {
        self.cwnd.saturating_sub(self.in_flight_segments()) as usize * self.mss as usize
    }

    /// Bytes in the network (see [`Self::in_flight_segments`]).
    pub fn in_flight_bytes(&self) -> usize {
        self.in_flight_segments() as usize * self.mss as usize
    }

    /// True while the window grows by what each ACK acknowledges (no threshold yet, or
    /// the window below it); false in congestion avoidance.
    pub fn in_slow_start(&self) -> bool {
        self.ssthresh == 0 || self.cwnd < self.ssthresh
    }
}

/// The kind of congestion control a socket runs, as far as the write budget cares.
///
/// ```
/// use tls_flush::CongestionControl;
///
/// assert_eq!(CongestionControl::from_name(b"bbr"), CongestionControl::ModelBased);
/// assert_eq!(CongestionControl::from_name(b"cubic\0"), CongestionControl::LossBased);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CongestionControl {
    /// Grows its window until packets are lost (cubic, reno): it fills a deep bottleneck
    /// queue, so the budget keeps what is in flight near the bandwidth-delay product.
    LossBased,
    /// Paces to a model of the path (BBR): it keeps what is in flight near the
    /// bandwidth-delay product itself, and a second cap would only slow its startup.
    ModelBased,
}

impl CongestionControl {
    /// From a `TCP_CONGESTION` name (trailing NULs ignored): `bbr`, `bbr2`, `bbr3` are
    /// model-based, everything else loss-based.
    pub fn from_name(name: &[u8]) -> Self {
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        if name.starts_with(b"bbr") {
            CongestionControl::ModelBased
        } else {
            CongestionControl::LossBased
        }
    }
}

/// Paths with a shorter minimum RTT are not paced: their queues drain faster than a timer
/// tick, and a tick would cost more throughput than the queue costs latency.
pub const MIN_PACED_RTT: Duration = Duration::from_millis(1);

/// Records written on an unpaced path before its state is read again: reading it before
/// every record would cost a system call per record for nothing.
pub const UNPACED_REREAD: u32 = 64;

/// Full records per write on an unpaced path: one system call and one loopback or LAN
/// packet train for four records instead of one each (a write there leaves at once, and
/// what it holds drains in well under a millisecond).
pub(crate) const UNPACED_WRITE_RECORDS: usize = 4;

/// A connection's first bytes, up to this many, go in records of one segment each: h2o's
/// threshold (it writes 1,400-byte records for a connection's first 64 KiB). The window
/// is about ten segments then, and a record that spans it reaches the client only with its
/// last segment: a page's head, in the first segment, waited for the whole flight (6 ms at
/// 20 Mbit/s) before the browser could ask for the stylesheet (browser lab, `page-article`:
/// with one-segment records the stylesheet ended 14 ms sooner against h2o's in the same
/// loads, the first paint 14 ms and the largest 18 ms sooner, 40 loads).
pub(crate) const SEGMENT_RECORDS_UNTIL: u64 = 64 * 1024;

/// Plaintext bytes a TLS 1.3 record adds on the wire (header 5, content type 1, AEAD tag
/// 16): a record of one segment carries `mss - 22` bytes of payload.
const RECORD_OVERHEAD: usize = 22;

/// The in-flight cap while the delivery rate is still growing, and once it stopped (in
/// percent of the bandwidth-delay product).
const STARTUP_GAIN: u64 = 200;
const STEADY_GAIN: u64 = 125;
/// Rounds without the rate growing by a quarter after which the pipe counts as full.
const FULL_PIPE_ROUNDS: u8 = 3;
/// How far (in percent of the minimum RTT, and at most [`FOREIGN_QUEUE_NOISE_MAX`]) the
/// smoothed RTT may exceed what our own bytes explain (`gain x min RTT`, and a record
/// beyond the cap) before the standing queue counts as another flow's: the noise of
/// delayed ACKs and a few milliseconds of jitter. With the record the line sits about
/// 0.6 min RTT above the gain on the lab's 20 ms link (0.5 before records were sized to the
/// BDP): the clean link's own smoothed RTT under the cap is about 30 ms of a 39 ms line.
const FOREIGN_QUEUE_NOISE: u64 = 25;
/// The noise does not grow with the RTT beyond this: behind a competitor's 1,000-packet
/// queue the minimum RTT was 170 ms, and half of it (85 ms) held the cap for a second
/// while the queue grew (the download ended 0.965x stock's goodput).
const FOREIGN_QUEUE_NOISE_MAX: Duration = Duration::from_millis(10);
/// While the cap holds, bulk records take at most this fraction (1/n) of the BDP: a
/// record beyond the cap is then a quarter round trip of our own queue at most.
const CAPPED_RECORD_BDP_SHARE: usize = 4;
/// How long the cap stays lifted for a queue that is not ours before the budget restrains
/// again to see whether it has become ours (BBR's ProbeRTT interval).
pub const SHARED_QUEUE_RETEST: Duration = Duration::from_secs(10);
/// How long a wait on the timer may last (a millisecond at least, and the timer's own
/// millisecond of resolution): the pipe's cap leaves room for what drains meanwhile, or a
/// fast path would idle during every wait (5 ms, 100 Mbit/s: 0.25 x BDP drains in 1.25 ms).
const TIMER_SLACK: Duration = Duration::from_millis(2);
/// Where the kernel paces the socket, how far ahead of its pacer the budget keeps it: a
/// record of this long at the pacing rate, and the next once less than this is left. Ten
/// timer slacks, so that a late timer does not leave the pacer without bytes: behind a
/// deep competitor's queue 10 ms cost 1% of the download's goodput and 20 ms 0.4% (within
/// the runs' spread). At the lab's 20 Mbit/s (3 MB/s paced) it is 60 kB, more than a full
/// record, so only slow pacing (a deep queue, a slow link) is bounded by it.
const PACED_AHEAD: Duration = Duration::from_millis(20);
/// The least [`PACED_AHEAD`] keeps, in segments: a pacing rate that lags a link speeding up
/// must not leave TCP a segment at a time (with one segment, single runs on the T-Mobile
/// recording lost up to a quarter of their goodput).
const PACED_AHEAD_SEGMENTS: usize = 4;
/// How fast the congestion window frees room, in windows per round trip, at most: in slow
/// start each ACK frees twice what it acknowledges.
const WINDOW_GROWTH: usize = 2;

/// Segments a congestion window needs before its ACKs come back spread over the round
/// trip (a bulk record may then reach past what TCP can send now, see
/// [`WriteBudget::allowance`]); a window of a few segments, such as a loopback peer's
/// (segments of 12-64 KiB), is acknowledged in one go.
const ACK_CLOCKED_WINDOW: u32 = 8;

/// What the budget allows before the next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allowance {
    /// Write a record of at most this many plaintext bytes.
    Record(usize),
    /// Write nothing now; look again after this long.
    Wait(Duration),
}

/// Tracks the path's rate across reads of [`PathState`] and turns each read into an
/// [`Allowance`].
#[derive(Debug, Default)]
pub(crate) struct WriteBudget {
    max_rate: u64,
    /// The start of the current round (one minimum RTT) and the highest rate before it.
    round: Option<(Instant, u64)>,
    /// Rounds in a row in which the rate grew by less than a quarter.
    flat_rounds: u8,
    /// Records left before an unpaced path is read again.
    unpaced_records: u32,
    /// The last read found the path unpaced.
    unpaced: bool,
    /// The socket's congestion control, once read; `None` (unknown) counts as loss-based.
    congestion: Option<CongestionControl>,
    /// Whose standing queue the path has, as far as the budget can tell.
    queue: QueueOwner,
    /// Times the cap was lifted for a queue that was not ours.
    cap_lifts: u64,
    /// Whether the socket was asked to have the kernel pace it.
    kernel_pacing: KernelPacing,
    /// Whether a read found the connection past its initial slow start.
    slow_start: SlowStart,
    /// Whether a read found a segment retransmitted: the path drops what it cannot queue.
    drops: Drops,
    /// The lowest smoothed RTT seen: see [`Self::path_rtt`].
    quiet_rtt: Duration,
}

/// Whether the kernel was asked to pace the socket (see the [module documentation](self)).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum KernelPacing {
    #[default]
    NotAsked,
    Asked,
    /// Asked, and the socket refused: its segments leave as the window frees room.
    Refused,
}

/// Whether the connection left its initial slow start (Linux sets the slow start threshold
/// when cubic's HyStart or the first loss ends it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum SlowStart {
    #[default]
    Initial,
    Over,
}

/// Whether the connection has retransmitted a segment (`tcpi_total_retrans`): the path's
/// bottleneck drops what it cannot queue, so bursts cost retransmissions there.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Drops {
    #[default]
    NoneSeen,
    Seen,
}

/// Whose standing queue the path's RTT shows (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueOwner {
    /// Ours, or none: the in-flight cap applies. No verdict before `judge_after`: after a
    /// spell without the cap, our own queue needs a round trip to drain.
    Ours { judge_after: Option<Instant> },
    /// Another flow's, since then: no in-flight cap.
    Shared { since: Instant },
}

impl Default for QueueOwner {
    fn default() -> Self {
        QueueOwner::Ours { judge_after: None }
    }
}

impl WriteBudget {
    /// False while the last read found the path unpaced and fewer than [`UNPACED_REREAD`]
    /// records went since: the next record is not limited, and needs no read.
    pub(crate) fn needs_read(&mut self) -> bool {
        if self.unpaced_records == 0 {
            return true;
        }
        self.unpaced_records -= 1;
        false
    }

    /// True when the last read found the path unpaced (loopback, a LAN): writes of
    /// [`UNPACED_WRITE_RECORDS`] records are fine there.
    pub(crate) fn is_unpaced(&self) -> bool {
        self.unpaced
    }

    /// Whether the congestion control still has to be told (see [`Self::set_congestion`]).
    pub(crate) fn knows_congestion(&self) -> bool {
        self.congestion.is_some()
    }

    /// Records the socket's congestion control: with [`CongestionControl::ModelBased`] the
    /// bytes in flight are not capped.
    pub(crate) fn set_congestion(&mut self, cc: CongestionControl) {
        self.congestion = Some(cc);
    }

    /// True once per connection, after the first read that found a paced path under a
    /// loss-based (or unknown) congestion control past its initial slow start and its first
    /// retransmission: the socket should then have the kernel pace it. BBR paces by itself,
    /// an unpaced path needs no pacing, slow start grows its window faster unpaced, and a
    /// path that drops nothing queues its bursts (see the [module documentation](self)).
    pub(crate) fn take_pacing_request(&mut self) -> bool {
        let wanted = self.kernel_pacing == KernelPacing::NotAsked
            && self.slow_start == SlowStart::Over
            && self.drops == Drops::Seen
            && !self.unpaced
            && self.congestion != Some(CongestionControl::ModelBased);
        if wanted {
            self.kernel_pacing = KernelPacing::Asked;
        }
        wanted
    }

    /// The socket refused the pacing [`take_pacing_request`](Self::take_pacing_request)
    /// asked for: the budget stops counting on it.
    pub(crate) fn pacing_refused(&mut self) {
        self.kernel_pacing = KernelPacing::Refused;
    }

    /// Where the kernel paces the socket, the unsent bytes it may hold ahead of its pacer:
    /// [`PACED_AHEAD`] at the pacing rate, at least [`PACED_AHEAD_SEGMENTS`].
    fn paced_ahead(&self, s: &PathState) -> Option<usize> {
        let paced = self.kernel_pacing == KernelPacing::Asked
            && s.pacing_rate > 0
            && s.pacing_rate < u64::MAX;
        paced.then(|| {
            drained_at(s.pacing_rate, PACED_AHEAD).max(PACED_AHEAD_SEGMENTS * s.mss as usize)
        })
    }

    /// The smallest bulk record worth writing: one segment's payload (at least a byte).
    pub(crate) fn smallest_record(s: &PathState) -> usize {
        (s.mss as usize).saturating_sub(RECORD_OVERHEAD).max(1)
    }

    /// The most a record may hold `sent` plaintext bytes into the connection (counted
    /// again after an idle gap where record sizes are dynamic, as TCP's window restarts
    /// then), of `record` allowed: one segment's payload for the first
    /// [`SEGMENT_RECORDS_UNTIL`] bytes on a paced path (on loopback or a LAN a record's
    /// segments arrive together).
    pub(crate) fn opening_record(&self, s: &PathState, sent: u64, record: usize) -> usize {
        if sent < SEGMENT_RECORDS_UNTIL && !self.unpaced {
            record.min(Self::smallest_record(s))
        } else {
            record
        }
    }

    /// The allowance for the next record: `target` is the record size the writer aims at,
    /// `available` what is queued for it. An `urgent` record (it starts with anything but
    /// bulk DATA) never waits: what is ahead of it in the kernel leaves first anyway, and
    /// waiting would only leave the link idle. A bulk record leaves `reserve` bytes of the
    /// congestion window free, and nothing unsent in the kernel, for a more urgent body
    /// about to come.
    pub(crate) fn allowance(
        &mut self,
        s: &PathState,
        target: usize,
        available: usize,
        urgent: bool,
        reserve: usize,
        now: Instant,
    ) -> Allowance {
        let mut record = target.max(1);
        self.unpaced = s.mss == 0 || s.min_rtt < MIN_PACED_RTT;
        if self.unpaced {
            self.unpaced_records = UNPACED_REREAD;
            return Allowance::Record(record);
        }
        self.observe_rate(s, now);
        let mss = s.mss as usize;
        let notsent = s.notsent as usize;
        // A small window: records of what it can send now (at least one segment), so none
        // straddles its edge, and the kernel's margin is that record, not a full one.
        let small_window = (s.cwnd as usize * mss) < 4 * target;
        // The window frees room as ACKs come back, about a window per round trip (twice
        // that in slow start): once it holds four records, what it frees during a timer
        // wait is kept unsent too, or TCP would idle until the timer fires (5 ms, 100 Mbit/s:
        // the fixture took 3% longer than stock's without it). Not in a smaller window: the
        // first round trips' bytes are the ones a more urgent response may still overtake
        // (with equal urgencies a `simultaneous` critical response took 51 ms instead of 45
        // on the 20 ms link).
        let window_rate =
            (s.cwnd as u128 * s.mss as u128 * 1_000_000 / s.min_rtt.as_micros().max(1)) as u64;
        let margin = if small_window {
            let sendable = s.window_bytes().saturating_sub(notsent).max(mss);
            // Bulk in congestion avoidance: ACKs come back all through the round trip, so
            // the part of a record beyond the window leaves within milliseconds. Records of
            // half the window then, not of the segment or two each ACK frees (after an
            // early exit from slow start that was a record per ACK: 218 records for the
            // fixture instead of 144).
            let ack_clocked = !urgent && !s.in_slow_start() && s.cwnd >= ACK_CLOCKED_WINDOW;
            let fits = if ack_clocked {
                sendable.max(s.cwnd as usize * mss / 2)
            } else {
                sendable
            };
            record = record.min(fits - RECORD_OVERHEAD.min(fits - 1));
            // ... and the next record goes to the kernel while what the ACKs freed during
            // a timer wait is still unsent: waiting for an empty kernel left TCP idle from
            // the moment it ran dry until the timer fired (10 Mbit/s, 16-packet queue:
            // 0.925x stock's goodput).
            if ack_clocked {
                record + drained_at(window_rate, TIMER_SLACK)
            } else {
                record
            }
        } else {
            target + WINDOW_GROWTH * drained_at(window_rate, TIMER_SLACK)
        };
        if urgent {
            return Allowance::Record(record);
        }
        // The kernel keeps at most about one record beyond what it can send now, and what
        // the window frees meanwhile.
        let mut kernel = (s.window_bytes() + margin).saturating_sub(notsent);
        // Where the kernel paces, the window's free room leaves at the pacing rate, not
        // now: behind a deep competitor's queue (cubic at 240 kB/s) two records written
        // into it held a critical response back 120 ms. There the kernel keeps records of
        // at most PACED_AHEAD's bytes, and a new one only once it holds less than that.
        // The wait below is timed at the window's rate, faster than the pacing rate where
        // that lags a link speeding up (a cellular one): an early look costs a wakeup.
        if let Some(ahead) = self.paced_ahead(s) {
            record = record.min(ahead);
            kernel = kernel.min((ahead + record).saturating_sub(notsent));
        }
        // Room kept for a more urgent body: the bulk takes what the window can send now
        // beyond it, in records of at least a segment, so that the body, once written,
        // neither waits for ACKs nor queues behind bulk bytes the kernel holds unsent.
        if reserve > 0 {
            let room = s.window_bytes().saturating_sub(reserve + notsent);
            let room = if room < mss { 0 } else { room };
            kernel = kernel.min(room);
            record = record.min(room.saturating_sub(RECORD_OVERHEAD).max(1));
        }
        // What is in flight and unsent stays near gain x BDP (plus a record, and what
        // drains during a timer wait).
        let mut record_margin = target;
        let mut pipe = match self.cap(s, now) {
            Some(cap) => {
                // At a low rate a full record is a long queue of its own (16 KiB is 94 ms
                // at 175 kB/s): once the rate is known, records of at most a quarter of
                // the BDP keep what the cap lets us queue near the cap itself, so that the
                // foreign-queue test can tell our queue from another flow's sooner. Not in
                // startup, where the rate samples lag the window and a full record beyond
                // the cap is what lets slow start grow (with a quarter of the BDP it took
                // a second to reach 30 segments behind a competitor's queue).
                if self.pipe_is_full() {
                    record_margin = target.min(self.capped_record(s, mss));
                    record = record.min(record_margin);
                }
                (cap + record_margin + self.drained_in(TIMER_SLACK))
                    .saturating_sub(s.in_flight_bytes() + notsent)
            }
            None => usize::MAX,
        };
        // Less than a record queued needs room for what is queued only; the record may
        // still fill up while it is built.
        let needed = record.min(available.max(1));
        if pipe < needed && self.queue_is_foreign(s, record_margin, now) {
            pipe = usize::MAX;
        }
        if kernel.min(pipe) >= needed {
            return Allowance::Record(segment_aligned(record, notsent, mss));
        }
        // The pipe drains at the path's rate. An early rate sample may be far below the
        // path's (it measured the handshake), so it never sets the window's wait.
        // While the rate still grows (startup), the newest samples lag the window that is
        // sending: look again as soon as the window could have freed the room.
        let pipe_rate = if self.pipe_is_full() {
            self.max_rate
        } else {
            self.max_rate.max(window_rate)
        };
        let wait = Self::drain_time(needed.saturating_sub(kernel), window_rate, s)
            .max(Self::drain_time(needed.saturating_sub(pipe), pipe_rate, s));
        Allowance::Wait(wait)
    }

    fn observe_rate(&mut self, s: &PathState, now: Instant) {
        if s.retransmits > 0 {
            self.drops = Drops::Seen;
        }
        if !s.in_slow_start() && self.slow_start == SlowStart::Initial {
            self.slow_start = SlowStart::Over;
            self.let_own_queue_drain(s, now);
        }
        if !s.srtt.is_zero() && (self.quiet_rtt.is_zero() || s.srtt < self.quiet_rtt) {
            self.quiet_rtt = s.srtt;
        }
        self.max_rate = self.max_rate.max(s.delivery_rate);
        match self.round {
            None => self.round = Some((now, self.max_rate)),
            Some((start, before)) if now.saturating_duration_since(start) >= s.min_rtt => {
                let was_full = self.pipe_is_full();
                if self.max_rate * 4 >= before * 5 {
                    self.flat_rounds = 0;
                } else {
                    self.flat_rounds = self.flat_rounds.saturating_add(1);
                }
                self.round = Some((now, self.max_rate));
                if !was_full && self.pipe_is_full() {
                    self.let_own_queue_drain(s, now);
                }
            }
            Some(_) => {}
        }
    }

    /// Called where the cap shrinks (the initial slow start ended, or the startup gain gave
    /// way to the steady one): the queue we built under the larger one is still standing,
    /// and ours, so it gets a round trip to drain before the foreign-queue test judges. On
    /// the lab's clean 20 ms link the startup gain left an srtt of 45 ms, above the line for
    /// the steady gain, and the cap lifted in about half the runs.
    fn let_own_queue_drain(&mut self, s: &PathState, now: Instant) {
        if let QueueOwner::Ours { .. } = self.queue {
            self.queue = QueueOwner::Ours {
                judge_after: Some(now + s.srtt + s.min_rtt),
            };
        }
    }

    /// Times the in-flight cap was lifted because the path's standing queue was another
    /// flow's.
    pub(crate) fn cap_lifts(&self) -> u64 {
        self.cap_lifts
    }

    /// True once the delivery rate stopped growing: the pipe is full, and its rate known.
    fn pipe_is_full(&self) -> bool {
        self.flat_rounds >= FULL_PIPE_ROUNDS
    }

    /// The in-flight gain now, in percent of the bandwidth-delay product.
    pub(crate) fn gain(&self) -> u64 {
        if self.pipe_is_full() {
            STEADY_GAIN
        } else {
            STARTUP_GAIN
        }
    }

    /// The cap on bytes in flight plus unsent, once a rate was measured, while the queue
    /// is ours. Ends a spell without the cap once the standing queue is gone, or to test
    /// again whether it has become ours.
    fn cap(&mut self, s: &PathState, now: Instant) -> Option<usize> {
        if self.max_rate == 0 || self.congestion == Some(CongestionControl::ModelBased) {
            return None;
        }
        if let QueueOwner::Shared { since } = self.queue {
            let gone = s.srtt <= Self::rtt_times(s.min_rtt, self.gain());
            if !gone && now.saturating_duration_since(since) < SHARED_QUEUE_RETEST {
                return None;
            }
            // Restrain again; our own queue, if it is ours, drains within a round trip.
            self.queue = QueueOwner::Ours {
                judge_after: (!gone).then(|| now + s.srtt + self.path_rtt(s)),
            };
        }
        Some((self.bdp(s) as u128 * u128::from(self.gain()) / 100).min(usize::MAX as u128) as usize)
    }

    /// The largest bulk record while the cap holds: a [`CAPPED_RECORD_BDP_SHARE`] of the
    /// bandwidth-delay product, at least a segment's payload.
    fn capped_record(&self, s: &PathState, mss: usize) -> usize {
        (self.bdp(s) / CAPPED_RECORD_BDP_SHARE).max(mss.saturating_sub(RECORD_OVERHEAD).max(1))
    }

    /// The bandwidth-delay product: the highest delivery rate times the path's RTT.
    fn bdp(&self, s: &PathState) -> usize {
        drained_at(self.max_rate, self.path_rtt(s))
    }

    /// The round trip the path takes with little of ours queued, which the cap's
    /// bandwidth-delay product is sized on: the minimum RTT, or the lowest smoothed RTT seen
    /// when that is higher. Where delay varies (Wi-Fi and cellular aggregation, the lab's
    /// jitter), the minimum is one lucky packet's and every round trip under load takes
    /// longer, queue or not: 5 ms of jitter each way on the 20 ms link gave a minimum of
    /// 20.5 ms, a lowest srtt of about 30 and 37-41 ms under load, and a cap on the minimum
    /// held the download to 0.75x stock's goodput in the runs where the foreign-queue test
    /// did not lift it (0.95-0.97x over five runs; 0.975-0.98x on this RTT).
    ///
    /// The foreign-queue test stays on the minimum RTT: on such a path it may take our own
    /// queue for another flow's and send like stock for a while, which cost nothing and kept
    /// the cellular traces' goodput (TMobile-LTE-short: 0.989x with the test on the minimum,
    /// 0.965x with it on this RTT, where it lifted the cap later or not at all).
    fn path_rtt(&self, s: &PathState) -> Duration {
        s.min_rtt.max(self.quiet_rtt)
    }

    /// Called while the cap holds bytes back: true (and the cap lifted) when the smoothed
    /// RTT shows a standing queue longer than the cap lets us build, so another flow's.
    /// `record_margin` is what the cap lets us queue beyond it for the next record.
    fn queue_is_foreign(&mut self, s: &PathState, record_margin: usize, now: Instant) -> bool {
        let QueueOwner::Ours { judge_after } = self.queue else {
            return true;
        };
        // In the initial slow start the window doubles each round trip and builds a queue
        // of its own on any slower link: the RTT cannot tell a competitor from that (on the
        // Verizon LTE recording the test fired in slow start in every run, and in two of
        // eight a `late` critical response met 35-40 KB of our own bytes queued at 1-1.3
        // Mbit/s, 326 and 387 ms). A competitor that was there first is still there when
        // slow start ends (against one filling a 1,000-packet queue the lift came seconds
        // later).
        if self.slow_start == SlowStart::Initial
            || judge_after.is_some_and(|t| now < t)
            || s.srtt.is_zero()
        {
            return false;
        }
        // The most our own bytes explain: the cap's gain, and the record beyond it with
        // what drains during a timer wait, at the rate the cap was sized on.
        let own_margin = record_margin + self.drained_in(TIMER_SLACK);
        let ours_at_most = Self::rtt_times(s.min_rtt, self.gain())
            + time_to_drain(own_margin, self.max_rate)
            + Self::rtt_times(s.min_rtt, FOREIGN_QUEUE_NOISE).min(FOREIGN_QUEUE_NOISE_MAX);
        if s.srtt <= ours_at_most + TIMER_SLACK {
            return false;
        }
        self.queue = QueueOwner::Shared { since: now };
        self.cap_lifts += 1;
        true
    }

    /// `rtt` times `percent` / 100.
    fn rtt_times(rtt: Duration, percent: u64) -> Duration {
        rtt * u32::try_from(percent).unwrap_or(u32::MAX) / 100
    }

    /// Bytes the path drains in `d` at its measured rate.
    fn drained_in(&self, d: Duration) -> usize {
        drained_at(self.max_rate, d)
    }

    /// How long `deficit` bytes take to drain at `rate`, within [1 ms, min RTT]; zero when
    /// there is no deficit.
    fn drain_time(deficit: usize, rate: u64, s: &PathState) -> Duration {
        if deficit == 0 {
            return Duration::ZERO;
        }
        time_to_drain(deficit, rate).clamp(Duration::from_millis(1), s.min_rtt)
    }
}

/// A bulk record of at most `record` plaintext bytes that ends the kernel's unsent bytes on
/// a segment boundary, where that keeps at least half of it. TCP sends a partial segment
/// when it runs out of unsent bytes, and the congestion window counts segments, not
/// bytes: bulk records of 16 KiB left a 478-byte segment each time the kernel ran dry
/// between two records (5% of a download's segments behind a competitor's queue, each a
/// whole slot of the window and of the bottleneck's queue).
fn segment_aligned(record: usize, notsent: usize, mss: usize) -> usize {
    let end = notsent + record + RECORD_OVERHEAD;
    let aligned = (end - end % mss.max(1)).saturating_sub(notsent + RECORD_OVERHEAD);
    if aligned >= record / 2 && aligned > 0 {
        aligned
    } else {
        record
    }
}

/// Bytes `rate` (bytes per second) moves in `d`.
fn drained_at(rate: u64, d: Duration) -> usize {
    (rate as u128 * d.as_micros() / 1_000_000).min(usize::MAX as u128) as usize
}

/// How long `rate` (bytes per second, at least one) takes to move `bytes`: the inverse of
/// [`drained_at`].
fn time_to_drain(bytes: usize, rate: u64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64)
}

#[cfg(test)]
mod tests;
