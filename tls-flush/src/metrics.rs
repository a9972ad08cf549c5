//! The connections' counters through the `metrics` crate's facade (feature `metrics`),
//! for whatever exporter the application installs (Prometheus, OpenTelemetry, StatsD, ...).
//!
//! Every wrapped connection adds to the same process-wide metrics, as it goes: a counter
//! moves when the connection's [`ConnectionStats`](crate::ConnectionStats) counter moves,
//! and the histograms get one sample per connection when it ends (when its last
//! `ConnectionStats` handle is dropped); the `memory_budget` gauges follow the shared
//! [`MemoryBudget`](crate::MemoryBudget) as connections charge it. There is no per-connection label, so the number of
//! series is fixed whatever the traffic. Names follow OpenTelemetry's style (dotted, units
//! out of the name); a Prometheus exporter turns the dots into underscores
//! (`tls_flush_records`).
//!
//! | name | kind | unit | labels | what |
//! |---|---|---|---|---|
//! | `tls_flush.connections` | counter | | | connections wrapped |
//! | `tls_flush.records` | counter | | | TLS records (plain TCP: writes) handed to the transport |
//! | `tls_flush.bytes_written` | counter | bytes | | plaintext bytes handed to the transport |
//! | `tls_flush.bytes_read` | counter | bytes | | plaintext bytes read from the transport |
//! | `tls_flush.early_cuts` | counter | | | records ended right after an urgent small DATA frame |
//! | `tls_flush.data_frames_reordered` | counter | | | DATA frames sent ahead of one h2 wrote before them |
//! | `tls_flush.anticipation_holds` | counter | | | times less urgent DATA waited for an urgent response |
//! | `tls_flush.priority_updates` | counter | | `outcome`: `applied`, `buffered`, `ignored`, `invalid` | PRIORITY_UPDATE frames received, by what became of them |
//! | `tls_flush.hpack_failures` | counter | | | HPACK observer failures (tracking off for that direction) |
//! | `tls_flush.priority_values_too_long` | counter | | | requests whose `priority` lines exceeded 1 KiB (default priority) |
//! | `tls_flush.tcp_info_reads` | counter | | | times the write budget read `TCP_INFO` |
//! | `tls_flush.budget_waits` | counter | | | times bulk DATA waited for TCP to send what it holds |
//! | `tls_flush.budget_cap_lifts` | counter | | | times the write budget stopped capping bytes in flight because another flow filled the path's queue |
//! | `tls_flush.queue.high_water` | histogram | bytes | | per connection: the most wire bytes its write queue held |
//! | `tls_flush.queue.memory_high_water` | histogram | bytes | | per connection: the most memory its write queue accounted for |
//! | `tls_flush.memory_budget.used` | gauge | bytes | | memory the write queues sharing a [`MemoryBudget`](crate::MemoryBudget) account for now (64 KiB steps) |
//! | `tls_flush.memory_budget.high_water` | gauge | bytes | | the most they accounted for at once |
//! | `tls_flush.memory_budget.limit` | gauge | bytes | | the budget's size |
//!
//! Call [`describe`] once after installing the recorder to give exporters the units and
//! descriptions.
//!
//! ```
//! # #[cfg(feature = "metrics")]
//! # {
//! // After installing a recorder (e.g. metrics_exporter_prometheus::PrometheusBuilder):
//! tls_flush::metrics::describe();
//! # }
//! ```

use std::sync::{Arc, OnceLock};

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, histogram, Counter, Histogram,
    Unit,
};

const CONNECTIONS: &str = "tls_flush.connections";
const RECORDS: &str = "tls_flush.records";
const BYTES_WRITTEN: &str = "tls_flush.bytes_written";
const BYTES_READ: &str = "tls_flush.bytes_read";
const EARLY_CUTS: &str = "tls_flush.early_cuts";
const REORDERED: &str = "tls_flush.data_frames_reordered";
const HOLDS: &str = "tls_flush.anticipation_holds";
const PRIORITY_UPDATES: &str = "tls_flush.priority_updates";
const HPACK_FAILURES: &str = "tls_flush.hpack_failures";
const TOO_LONG: &str = "tls_flush.priority_values_too_long";
const TCP_INFO_READS: &str = "tls_flush.tcp_info_reads";
const BUDGET_WAITS: &str = "tls_flush.budget_waits";
const BUDGET_CAP_LIFTS: &str = "tls_flush.budget_cap_lifts";
const QUEUE_HIGH_WATER: &str = "tls_flush.queue.high_water";
const QUEUE_MEMORY_HIGH_WATER: &str = "tls_flush.queue.memory_high_water";
pub(crate) const BUDGET_USED: &str = "tls_flush.memory_budget.used";
pub(crate) const BUDGET_HIGH_WATER: &str = "tls_flush.memory_budget.high_water";
pub(crate) const BUDGET_LIMIT: &str = "tls_flush.memory_budget.limit";

/// Registers the units and descriptions of every `tls_flush.*` metric with the installed
/// recorder (the names and values are recorded whether or not this is called). Call it
/// once, after installing the recorder.
///
/// ```
/// tls_flush::metrics::describe();
/// ```
pub fn describe() {
    describe_counter!(CONNECTIONS, "Connections wrapped by tls-flush");
    describe_counter!(RECORDS, "TLS records handed to the transport");
    describe_counter!(
        BYTES_WRITTEN,
        Unit::Bytes,
        "Plaintext bytes handed to the transport"
    );
    describe_counter!(
        BYTES_READ,
        Unit::Bytes,
        "Plaintext bytes read from the transport"
    );
    describe_counter!(
        EARLY_CUTS,
        "Records ended right after an urgent small DATA frame"
    );
    describe_counter!(
        REORDERED,
        "DATA frames sent ahead of a DATA frame h2 wrote before them"
    );
    describe_counter!(
        HOLDS,
        "Times less urgent DATA waited for an urgent response"
    );
    describe_counter!(
        PRIORITY_UPDATES,
        "PRIORITY_UPDATE frames received, by outcome"
    );
    describe_counter!(HPACK_FAILURES, "HPACK observer failures");
    describe_counter!(TCP_INFO_READS, "Times the write budget read TCP_INFO");
    describe_counter!(
        BUDGET_WAITS,
        "Times bulk DATA waited for TCP to send what it holds"
    );
    describe_counter!(
        BUDGET_CAP_LIFTS,
        "Times the write budget stopped capping bytes in flight because another flow filled the path's queue"
    );
    describe_counter!(
        TOO_LONG,
        "Requests whose priority field lines exceeded 1 KiB"
    );
    describe_histogram!(
        QUEUE_HIGH_WATER,
        Unit::Bytes,
        "Per connection: the most wire bytes its write queue held"
    );
    describe_histogram!(
        QUEUE_MEMORY_HIGH_WATER,
        Unit::Bytes,
        "Per connection: the most memory its write queue accounted for"
    );
    describe_gauge!(
        BUDGET_USED,
        Unit::Bytes,
        "Memory the write queues sharing the memory budget account for now"
    );
    describe_gauge!(
        BUDGET_HIGH_WATER,
        Unit::Bytes,
        "The most memory the write queues sharing the memory budget accounted for at once"
    );
    describe_gauge!(BUDGET_LIMIT, Unit::Bytes, "The memory budget's size");
}

/// Handles on the process-wide metrics, named like the
/// [`ConnectionStats`](crate::ConnectionStats) counters they follow. Registered once per
/// server (see `SharedCounters`), so that counting is an atomic add.
#[derive(Debug)]
pub(crate) struct Handles {
    pub(crate) records_written: Counter,
    pub(crate) bytes_written: Counter,
    pub(crate) early_cuts: Counter,
    pub(crate) data_frames_reordered: Counter,
    pub(crate) anticipation_holds: Counter,
    pub(crate) priority_updates_applied: Counter,
    pub(crate) priority_updates_buffered: Counter,
    pub(crate) priority_updates_ignored: Counter,
    pub(crate) priority_updates_invalid: Counter,
    pub(crate) hpack_failures: Counter,
    pub(crate) priority_values_too_long: Counter,
    pub(crate) bytes_read: Counter,
    pub(crate) tcp_info_reads: Counter,
    pub(crate) budget_waits: Counter,
    pub(crate) budget_cap_lifts: Counter,
    pub(crate) queue_high_water: Histogram,
    pub(crate) queue_memory_high_water: Histogram,
}

impl Handles {
    /// A new connection's handles: `shared`'s, registered by the first connection that
    /// shares them. The connection is counted.
    pub(crate) fn for_connection(shared: &OnceLock<Arc<Handles>>) -> Arc<Handles> {
        counter!(CONNECTIONS).increment(1);
        shared.get_or_init(|| Arc::new(Handles::register())).clone()
    }

    fn register() -> Self {
        Handles {
            records_written: counter!(RECORDS),
            bytes_written: counter!(BYTES_WRITTEN),
            early_cuts: counter!(EARLY_CUTS),
            data_frames_reordered: counter!(REORDERED),
            anticipation_holds: counter!(HOLDS),
            priority_updates_applied: counter!(PRIORITY_UPDATES, "outcome" => "applied"),
            priority_updates_buffered: counter!(PRIORITY_UPDATES, "outcome" => "buffered"),
            priority_updates_ignored: counter!(PRIORITY_UPDATES, "outcome" => "ignored"),
            priority_updates_invalid: counter!(PRIORITY_UPDATES, "outcome" => "invalid"),
            hpack_failures: counter!(HPACK_FAILURES),
            priority_values_too_long: counter!(TOO_LONG),
            bytes_read: counter!(BYTES_READ),
            tcp_info_reads: counter!(TCP_INFO_READS),
            budget_waits: counter!(BUDGET_WAITS),
            budget_cap_lifts: counter!(BUDGET_CAP_LIFTS),
            queue_high_water: histogram!(QUEUE_HIGH_WATER),
            queue_memory_high_water: histogram!(QUEUE_MEMORY_HIGH_WATER),
        }
    }
}
