//! Per-connection counters, shared between the wrapper and whoever wants to read them
//! (the lab, a user's logging) while hyper owns the stream.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::path::PathState;

/// Live counters of one wrapped connection.
///
/// Cloning the handle is cheap; every clone reads the same counters. Obtain one with
/// [`FlushStream::stats`](crate::FlushStream::stats) before handing the stream to hyper.
///
/// ```
/// use tls_flush::ConnectionStats;
///
/// let stats = ConnectionStats::default();
/// let snapshot = stats.snapshot();
/// assert_eq!(snapshot.records_written, 0);
/// ```
#[derive(Debug, Clone)]
pub struct ConnectionStats {
    inner: Arc<Counters>,
}

impl Default for ConnectionStats {
    /// A connection's counters, with handles of its own on the `metrics` recorder.
    fn default() -> Self {
        ConnectionStats::sharing(&SharedCounters::default())
    }
}

/// What the connections of one server, acceptor or listener share in their counters: the
/// handles on the `metrics` recorder, registered at the first connection (17 handles, 272
/// bytes, per connection before; an idle connection is a few KiB in all).
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedCounters {
    #[cfg(feature = "metrics")]
    metrics: Arc<std::sync::OnceLock<Arc<crate::metrics::Handles>>>,
}

impl ConnectionStats {
    /// A new connection's counters, sharing `shared`'s metrics handles.
    pub(crate) fn sharing(shared: &SharedCounters) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = shared;
        ConnectionStats {
            inner: Arc::new(Counters {
                tallies: Tallies::default(),
                #[cfg(feature = "metrics")]
                metrics: crate::metrics::Handles::for_connection(&shared.metrics),
            }),
        }
    }
}

/// A connection's counts, and the metrics handles that follow them.
#[derive(Debug)]
struct Counters {
    tallies: Tallies,
    /// The same counts, through the `metrics` facade.
    #[cfg(feature = "metrics")]
    metrics: Arc<crate::metrics::Handles>,
}

impl std::ops::Deref for Counters {
    type Target = Tallies;

    fn deref(&self) -> &Tallies {
        &self.tallies
    }
}

/// A connection's counts, read by [`ConnectionStats::snapshot`].
#[derive(Debug, Default)]
struct Tallies {
    records_written: AtomicU64,
    bytes_written: AtomicU64,
    early_cuts: AtomicU64,
    data_frames_reordered: AtomicU64,
    anticipation_holds: AtomicU64,
    priority_updates_applied: AtomicU64,
    priority_updates_buffered: AtomicU64,
    priority_updates_ignored: AtomicU64,
    priority_updates_invalid: AtomicU64,
    queued_bytes: AtomicU64,
    queued_bytes_high_water: AtomicU64,
    queued_memory_high_water: AtomicU64,
    hpack_failures: AtomicU64,
    priority_values_too_long: AtomicU64,
    bytes_read: AtomicU64,
    tcp_info_reads: AtomicU64,
    budget_waits: AtomicU64,
    budget_cap_lifts: AtomicU64,
    /// The most urgent request read so far, and where bytes were when it was read.
    /// Boxed: most connections read one, an idle one none, and the slot is 112 bytes.
    urgent_request: Mutex<Option<Box<(RequestArrival, Instant)>>>,
    /// The stream of `urgent_request` until its first DATA frame is written (0: none), so
    /// that other DATA frames cost an atomic load only.
    awaiting_data: AtomicU32,
}

/// The connection has ended (its last handle is gone): one sample per connection for the
/// high-water histograms.
#[cfg(feature = "metrics")]
impl Drop for Counters {
    fn drop(&mut self) {
        let m = &self.metrics;
        m.queue_high_water
            .record(self.queued_bytes_high_water.load(Relaxed) as f64);
        m.queue_memory_high_water
            .record(self.queued_memory_high_water.load(Relaxed) as f64);
    }
}

/// A point-in-time copy of [`ConnectionStats`].
///
/// ```
/// let s = tls_flush::StatsSnapshot::default();
/// assert_eq!(s.early_cuts, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// TLS records (or, on plain TCP, writes) handed to the transport.
    pub records_written: u64,
    /// Plaintext bytes handed to the transport.
    pub bytes_written: u64,
    /// Records ended early, right after an urgent small DATA frame.
    pub early_cuts: u64,
    /// DATA frames sent ahead of a DATA frame that h2 wrote before them.
    pub data_frames_reordered: u64,
    /// Times less urgent DATA was held back for an urgent response not yet written.
    pub anticipation_holds: u64,
    /// PRIORITY_UPDATE frames applied to an open stream.
    pub priority_updates_applied: u64,
    /// PRIORITY_UPDATE frames kept for a stream that was not open yet.
    pub priority_updates_buffered: u64,
    /// PRIORITY_UPDATE frames for closed streams, or beyond the buffering bound.
    pub priority_updates_ignored: u64,
    /// Malformed PRIORITY_UPDATE frames (short payload, stream 0, non-ASCII, wrong stream).
    pub priority_updates_invalid: u64,
    /// Bytes absorbed from h2 and not yet handed to the transport.
    pub queued_bytes: u64,
    /// Highest value `queued_bytes` reached.
    pub queued_bytes_high_water: u64,
    /// Highest memory the write queue accounted for: wire bytes plus a fixed overhead per
    /// queued unit (frame or header block). This is what the soft and hard limits bound.
    pub queued_memory_high_water: u64,
    /// HPACK decode failures (each turns priority tracking off for that direction).
    pub hpack_failures: u64,
    /// Requests whose `priority` field lines were longer than the observer keeps (1 KiB
    /// decoded, all lines together); they get the default priority.
    pub priority_values_too_long: u64,
    /// Bytes read from the transport (the client's plaintext).
    pub bytes_read: u64,
    /// Times the write budget read `TCP_INFO` (about once per record on a paced path).
    pub tcp_info_reads: u64,
    /// Times the write budget made bulk DATA wait for TCP to send what it holds.
    pub budget_waits: u64,
    /// Times the write budget lifted its in-flight cap because the path's standing queue
    /// was another flow's (holding back cannot drain it; see `PathState`).
    pub budget_cap_lifts: u64,
}

/// Where the server's bytes were at the moment the wrapper read a request at least as
/// urgent as every request read before it on the connection (of equally urgent ones, the
/// latest): what could still be reordered ahead of its response, and what no longer could.
///
/// Taken when the request's END_STREAM is read (before h2 sees it), from the wrapper's queue,
/// rustls, and the kernel's `TCP_INFO`; `bytes_written_at_first_data` is filled in later,
/// when the response's first DATA frame is handed to the transport. The difference of the
/// two `bytes_written` figures is what the server sent after reading the request and before
/// the response's first byte. Read it with [`ConnectionStats::urgent_request`].
///
/// ```
/// let arrival = tls_flush::RequestArrival {
///     stream_id: 5,
///     urgency: 0,
///     queued_bytes: 48 * 1024,
///     tls_buffered: false,
///     notsent_bytes: Some(16 * 1024),
///     in_flight_bytes: Some(60 * 1448),
///     bytes_written: 200 * 1024,
///     bytes_written_at_first_data: Some(200 * 1024 + 230),
///     first_data_after: Some(std::time::Duration::from_micros(900)),
/// };
/// assert_eq!(arrival.written_before_first_data(), Some(230));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestArrival {
    /// The request's stream.
    pub stream_id: u32,
    /// Its effective urgency when it was read (0 is the most urgent).
    pub urgency: u8,
    /// Bytes in the wrapper's write queue (absorbed from h2, not yet handed to the
    /// transport): less urgent bytes it could still send after the response.
    pub queued_bytes: u64,
    /// rustls held ciphertext it had not handed to the socket yet.
    pub tls_buffered: bool,
    /// Bytes in the kernel's send buffer not yet sent (`tcpi_notsent_bytes`); `None`
    /// without `TCP_INFO`.
    pub notsent_bytes: Option<u64>,
    /// Bytes in the network (`PathState::in_flight_bytes`: unacknowledged less SACKed and
    /// lost, plus retransmissions); `None` without `TCP_INFO`.
    pub in_flight_bytes: Option<u64>,
    /// Plaintext bytes handed to the transport before the request was read.
    pub bytes_written: u64,
    /// Plaintext bytes handed to the transport before the response's first DATA frame
    /// (the bytes of the record that carries it, ahead of the frame, included); `None` until
    /// that frame is written.
    pub bytes_written_at_first_data: Option<u64>,
    /// Time from reading the request to its response's first DATA frame entering a record
    /// (mostly the application's time to begin the body); `None` until that frame is
    /// written.
    pub first_data_after: Option<Duration>,
}

impl RequestArrival {
    /// Plaintext bytes the server sent after reading the request and before the
    /// response's first DATA frame, once that frame was written.
    pub fn written_before_first_data(&self) -> Option<u64> {
        self.bytes_written_at_first_data
            .map(|at| at.saturating_sub(self.bytes_written))
    }
}

macro_rules! adders {
    ($($name:ident => $field:ident),* $(,)?) => {
        $(pub(crate) fn $name(&self, n: u64) {
            self.inner.$field.fetch_add(n, Relaxed);
            #[cfg(feature = "metrics")]
            self.inner.metrics.$field.increment(n);
        })*
    };
}

impl ConnectionStats {
    adders! {
        add_records => records_written,
        add_bytes => bytes_written,
        add_early_cut => early_cuts,
        add_reordered => data_frames_reordered,
        add_anticipation_hold => anticipation_holds,
        add_update_applied => priority_updates_applied,
        add_update_buffered => priority_updates_buffered,
        add_update_ignored => priority_updates_ignored,
        add_update_invalid => priority_updates_invalid,
        add_hpack_failure => hpack_failures,
        add_priority_value_too_long => priority_values_too_long,
        add_bytes_read => bytes_read,
        add_tcp_info_read => tcp_info_reads,
        add_budget_wait => budget_waits,
        add_budget_cap_lifts => budget_cap_lifts,
    }

    /// Records the current queue size (wire bytes, and the memory accounted for them) and
    /// raises the high-water marks.
    pub(crate) fn set_queued(&self, bytes: usize, memory: usize) {
        let bytes = bytes as u64;
        let inner = &*self.inner;
        inner.queued_bytes.store(bytes, Relaxed);
        // A load first: called after every write, and a new high water is rare.
        if bytes > inner.queued_bytes_high_water.load(Relaxed) {
            inner.queued_bytes_high_water.fetch_max(bytes, Relaxed);
        }
        let memory = memory as u64;
        if memory > inner.queued_memory_high_water.load(Relaxed) {
            inner.queued_memory_high_water.fetch_max(memory, Relaxed);
        }
    }

    /// Where the connection's bytes were when the most urgent request so far was read
    /// (`None` before the first complete request). Kept out of [`StatsSnapshot`], whose
    /// fields are all counters (its `Debug` form is logged and parsed as `name: number`).
    pub fn urgent_request(&self) -> Option<RequestArrival> {
        self.urgent_request_slot().as_ref().map(|slot| slot.0)
    }

    fn urgent_request_slot(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<Box<(RequestArrival, Instant)>>> {
        self.inner
            .urgent_request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// True when a request of `urgency` is at least as urgent as every request recorded
    /// before it (so [`request_read`](Self::request_read) would record it).
    pub(crate) fn is_most_urgent(&self, urgency: u8) -> bool {
        self.urgent_request_slot()
            .as_ref()
            .is_none_or(|before| urgency <= before.0.urgency)
    }

    /// The request on `stream_id` (`urgency`) was read with `queued_bytes` in the write
    /// queue, rustls holding ciphertext or not, and TCP in `path`: recorded when it is at
    /// least as urgent as every request recorded before.
    pub(crate) fn request_read(
        &self,
        stream_id: u32,
        urgency: u8,
        queued_bytes: usize,
        tls_buffered: bool,
        path: Option<PathState>,
    ) {
        let mut slot = self.urgent_request_slot();
        if slot
            .as_ref()
            .is_some_and(|before| urgency > before.0.urgency)
        {
            return;
        }
        let arrival = RequestArrival {
            stream_id,
            urgency,
            queued_bytes: queued_bytes as u64,
            tls_buffered,
            notsent_bytes: path.map(|p| u64::from(p.notsent)),
            in_flight_bytes: path.map(|p| p.in_flight_bytes() as u64),
            bytes_written: self.inner.bytes_written.load(Relaxed),
            bytes_written_at_first_data: None,
            first_data_after: None,
        };
        match slot.as_mut() {
            Some(kept) => **kept = (arrival, Instant::now()),
            None => *slot = Some(Box::new((arrival, Instant::now()))),
        }
        self.inner.awaiting_data.store(stream_id, Relaxed);
    }

    /// The first DATA frame of `stream_id` starts `offset` bytes into the record being
    /// built (everything before that record was handed to the transport).
    pub(crate) fn data_started(&self, stream_id: u32, offset: usize) {
        if stream_id == 0 || self.inner.awaiting_data.load(Relaxed) != stream_id {
            return;
        }
        self.inner.awaiting_data.store(0, Relaxed);
        let mut slot = self.urgent_request_slot();
        if let Some((arrival, read_at)) = slot.as_deref_mut() {
            if arrival.stream_id == stream_id && arrival.bytes_written_at_first_data.is_none() {
                arrival.bytes_written_at_first_data =
                    Some(self.inner.bytes_written.load(Relaxed) + offset as u64);
                arrival.first_data_after = Some(read_at.elapsed());
            }
        }
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let c = &self.inner;
        StatsSnapshot {
            records_written: c.records_written.load(Relaxed),
            bytes_written: c.bytes_written.load(Relaxed),
            early_cuts: c.early_cuts.load(Relaxed),
            data_frames_reordered: c.data_frames_reordered.load(Relaxed),
            anticipation_holds: c.anticipation_holds.load(Relaxed),
            priority_updates_applied: c.priority_updates_applied.load(Relaxed),
            priority_updates_buffered: c.priority_updates_buffered.load(Relaxed),
            priority_updates_ignored: c.priority_updates_ignored.load(Relaxed),
            priority_updates_invalid: c.priority_updates_invalid.load(Relaxed),
            queued_bytes: c.queued_bytes.load(Relaxed),
            queued_bytes_high_water: c.queued_bytes_high_water.load(Relaxed),
            queued_memory_high_water: c.queued_memory_high_water.load(Relaxed),
            hpack_failures: c.hpack_failures.load(Relaxed),
            priority_values_too_long: c.priority_values_too_long.load(Relaxed),
            bytes_read: c.bytes_read.load(Relaxed),
            tcp_info_reads: c.tcp_info_reads.load(Relaxed),
            budget_waits: c.budget_waits.load(Relaxed),
            budget_cap_lifts: c.budget_cap_lifts.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_sharing_counters_count_apart_on_one_set_of_metrics_handles() {
        let shared = SharedCounters::default();
        let (a, b) = (
            ConnectionStats::sharing(&shared),
            ConnectionStats::sharing(&shared),
        );
        a.add_records(2);
        b.add_records(5);
        assert_eq!(a.snapshot().records_written, 2);
        assert_eq!(b.snapshot().records_written, 5);
        #[cfg(feature = "metrics")]
        {
            assert!(Arc::ptr_eq(&a.inner.metrics, &b.inner.metrics));
            let alone = ConnectionStats::default();
            assert!(!Arc::ptr_eq(&a.inner.metrics, &alone.inner.metrics));
        }
    }

    #[test]
    fn the_most_urgent_request_is_kept_with_what_was_sent_before_its_data() {
        let stats = ConnectionStats::default();
        assert_eq!(stats.urgent_request(), None);
        stats.add_bytes(1000);
        stats.request_read(1, 5, 300, false, None);
        assert!(stats.is_most_urgent(5) && stats.is_most_urgent(0));
        assert!(!stats.is_most_urgent(6));
        let path = PathState {
            cwnd: 20,
            unacked: 10,
            mss: 1000,
            notsent: 4000,
            ..PathState::default()
        };
        stats.request_read(3, 0, 700, true, Some(path));
        // Less urgent: ignored.
        stats.request_read(5, 3, 0, false, None);
        stats.data_started(1, 10);
        stats.add_bytes(500);
        stats.data_started(3, 40);
        stats.add_bytes(500);
        stats.data_started(3, 90);
        let arrival = stats.urgent_request().expect("recorded");
        assert!(arrival.first_data_after.is_some());
        assert_eq!(
            RequestArrival {
                first_data_after: None,
                ..arrival
            },
            RequestArrival {
                stream_id: 3,
                urgency: 0,
                queued_bytes: 700,
                tls_buffered: true,
                notsent_bytes: Some(4000),
                in_flight_bytes: Some(10_000),
                bytes_written: 1000,
                bytes_written_at_first_data: Some(1540),
                first_data_after: None,
            }
        );
        assert_eq!(arrival.written_before_first_data(), Some(540));
    }
}
