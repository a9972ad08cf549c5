//! Per-connection counters, shared between the wrapper and whoever wants to read them
//! (the lab, a user's logging) while hyper owns the stream.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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
#[derive(Debug, Clone, Default)]
pub struct ConnectionStats {
    inner: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
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
    /// The same counts, through the `metrics` facade.
    #[cfg(feature = "metrics")]
    metrics: crate::metrics::Handles,
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
    }

    /// Records the current queue size (wire bytes, and the memory accounted for them) and
    /// raises the high-water marks.
    pub(crate) fn set_queued(&self, bytes: usize, memory: usize) {
        let bytes = bytes as u64;
        self.inner.queued_bytes.store(bytes, Relaxed);
        self.inner.queued_bytes_high_water.fetch_max(bytes, Relaxed);
        self.inner
            .queued_memory_high_water
            .fetch_max(memory as u64, Relaxed);
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
        }
    }
}
