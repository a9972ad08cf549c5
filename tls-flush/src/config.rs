//! Per-connection configuration: which parts of the pipeline run and their bounds.

use std::time::Duration;

use crate::memory_budget::MemoryBudget;

/// The largest TLS plaintext record (RFC 8446 §5.1).
pub const MAX_RECORD_PAYLOAD: usize = 16384;

/// The default [`FlushConfig::blocked_soft_limit`]: two records, what the next writes take
/// once the socket has room again. 1,000 stalled downloads on loopback
/// (`scripts/scale.sh`): 338 KiB of server RSS per connection with the whole 256 KiB soft
/// limit queued, 145 KiB with four records, 114 KiB with two; stock 64-67 KiB (whose kernel
/// holds 2.1-2.3 MiB per connection instead).
const BLOCKED_SOFT_LIMIT: usize = 2 * MAX_RECORD_PAYLOAD;

/// The soft limit of the in-order presets: two full DATA frames, so that a record can be
/// packed across a frame boundary.
const IN_ORDER_SOFT_LIMIT: usize = 36 * 1024;

/// Preset behaviours, named as the example servers and the lab name them.
///
/// ```
/// use tls_flush::{FlushConfig, Policy};
///
/// let config = FlushConfig::for_policy(Policy::EarlyFlush);
/// assert_eq!(config.policy(), Policy::EarlyFlush);
/// assert_eq!("scheduled".parse::<Policy>(), Ok(Policy::Scheduled));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Policy {
    /// h2's order; records packed full; an urgent small DATA frame ends its record and is
    /// flushed at once; the wrapper holds about two frames (36 KiB soft limit) and the
    /// downstream is kept shallow (a bounded early flush).
    EarlyFlush,
    /// As `EarlyFlush`, with dynamic record sizes: small records at connection start and
    /// after an idle gap, ramping up to full records.
    Dynamic,
    /// Everything: RFC 9218 scheduling, packing, early cuts, shallow downstream.
    #[default]
    Scheduled,
}

impl Policy {
    /// Every policy, in the order they are documented.
    pub const ALL: [Policy; 3] = [Policy::EarlyFlush, Policy::Dynamic, Policy::Scheduled];

    /// The policy's name on command lines.
    pub fn name(self) -> &'static str {
        match self {
            Policy::EarlyFlush => "early-flush",
            Policy::Dynamic => "dynamic",
            Policy::Scheduled => "scheduled",
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown policy name.
///
/// ```
/// assert!("fast".parse::<tls_flush::Policy>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown policy {:?}; valid: early-flush, dynamic, scheduled",
            self.0
        )
    }
}

impl std::error::Error for UnknownPolicy {}

impl std::str::FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPolicy(s.to_owned()))
    }
}

/// How big the records handed to the TLS layer are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordSizing {
    /// Every record up to this many plaintext bytes.
    Fixed(usize),
    /// Ramp 1368 → 2736 → 4096 → 8192 → 16384 bytes over the first ~16 KiB sent, and
    /// start over after the connection was idle for `idle_reset`.
    Dynamic {
        /// Idle gap after which records start small again.
        idle_reset: Duration,
    },
}

/// When a record ends early after an urgent DATA frame: see [`FlushConfig::urgent_cut`].
///
/// ```
/// use tls_flush::{FlushConfig, UrgentCut};
///
/// let config = FlushConfig::default().urgent_cut(Some(UrgentCut { max_urgency: 1, max_payload: 8192 }));
/// # let _ = config;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrgentCut {
    /// DATA frames of urgency `<= max_urgency` qualify.
    pub max_urgency: u8,
    /// ... when their payload is at most this many bytes.
    pub max_payload: usize,
}

impl Default for UrgentCut {
    /// Urgency 0, payloads up to 4096 bytes.
    fn default() -> Self {
        UrgentCut {
            max_urgency: 0,
            max_payload: 4096,
        }
    }
}

/// Configuration of one wrapped connection; build it from a [`Policy`] and adjust.
///
/// Every setter is named after what it sets; a feature with a parameter takes an
/// `Option` (`None` switches it off), an on/off feature takes a `bool`, and a plain amount
/// (bytes, a duration, a count) is taken as it is.
///
/// # Settings
///
/// | setter | takes | [`Policy::Scheduled`] | [`Policy::EarlyFlush`], [`Policy::Dynamic`] |
/// |---|---|---|---|
/// | [`reorder`](Self::reorder) | `bool` | on | off |
/// | [`schedule_bodies`](Self::schedule_bodies) | `bool` | on | off |
/// | [`pack_records`](Self::pack_records) | `bool` | on | on |
/// | [`cork`](Self::cork) | `bool` | on | on |
/// | [`write_budget`](Self::write_budget) | `bool` | on | off |
/// | [`announce_no_rfc7540_priorities`](Self::announce_no_rfc7540_priorities) | `bool` | on | on |
/// | [`urgent_cut`](Self::urgent_cut) | `Option<UrgentCut>` | urgency 0, payloads up to 4096 bytes | the same |
/// | [`anticipate`](Self::anticipate) | `Option<Duration>` | 5 ms | off |
/// | [`notsent_lowat`](Self::notsent_lowat) | `Option<u32>` (`None`: the socket's own) | 16 KiB | 16 KiB |
/// | [`tls_max_fragment_size`](Self::tls_max_fragment_size) | `Option<usize>` (`None`: rustls's default) | `None` | `None` |
/// | [`record_sizing`](Self::record_sizing) | [`RecordSizing`] | full records | full records; `Dynamic`: ramping sizes, reset after 1 s idle |
/// | [`soft_limit`](Self::soft_limit) | bytes | 256 KiB | 36 KiB |
/// | [`blocked_soft_limit`](Self::blocked_soft_limit) | `Option<usize>` | 32 KiB (unpaced paths) | 32 KiB (applies with the write budget only) |
/// | [`hard_limit`](Self::hard_limit) | bytes | 1 MiB | 1 MiB |
/// | [`memory_budget`](Self::memory_budget) | `Option<MemoryBudget>` | [`MemoryBudget::for_machine`] (an eighth of the machine's memory, shared by the process) | the same |
/// | [`anticipation_budget`](Self::anticipation_budget) | time per second | 100 ms | 100 ms |
/// | [`max_early_updates`](Self::max_early_updates) | count | 128 | 128 |
///
/// # Memory bounds
///
/// Everything a client can make one connection hold is bounded, whatever it sends:
///
/// | structure | bound |
/// |---|---|
/// | write queues of all connections sharing a [`MemoryBudget`] | `max(limit, connections × BUDGET_FLOOR)` (floor 33,042 bytes: two full frames) while no connection opens; at worst `limit + connections × BUDGET_FLOOR` (see [`MemoryBudget`]) |
/// | write queue (h2's frames not yet handed to TLS) | [`queue_limit`](Self::queue_limit): the [`hard_limit`](Self::hard_limit) (default 1 MiB), plus 129 KiB while DATA is held for an urgent response, counting 128 bytes per queued frame besides its wire bytes, so at most `queue_limit / 128` frames; plus one response header block (the application's own) |
/// | a DATA frame larger than the hard limit and than 1 MiB (a client may allow frames of up to 16 MiB) | never held whole: written through in 16 KiB pieces once the queue before it is empty |
/// | request header block being reassembled | 64 KiB (larger: priority tracking stops for the connection) |
/// | HPACK dynamic tables mirrored (one per direction) | 64 KiB each (larger size updates stop tracking) |
/// | a request's `priority` field lines, decoded and joined | 1 KiB (longer: default priority, counted in `priority_values_too_long`) |
/// | a PRIORITY_UPDATE field value | 1 KiB (longer: not copied, counted invalid); values are parsed only for open or not-yet-open streams |
/// | PRIORITY_UPDATEs for streams not yet open | [`max_early_updates`](Self::max_early_updates) (default 128) |
/// | streams whose priority is tracked | 1024; further streams get the default priority |
/// | anticipation holds armed | one per tracked, complete request, each at most [`anticipate`](Self::anticipate) long, all together at most [`anticipation_budget`](Self::anticipation_budget) per second |
///
/// ```
/// use tls_flush::{FlushConfig, Policy, UrgentCut};
///
/// let config = FlushConfig::default()
///     .soft_limit(128 * 1024)
///     .urgent_cut(Some(UrgentCut { max_urgency: 0, max_payload: 4096 }))
///     .cork(false)
///     .anticipate(None)
///     .notsent_lowat(Some(16 * 1024))
///     .tls_max_fragment_size(Some(4096));
/// assert_eq!(config.policy(), Policy::Scheduled);
/// ```
#[derive(Debug, Clone)]
pub struct FlushConfig {
    pub(crate) policy: Policy,
    pub(crate) reorder: bool,
    pub(crate) schedule_bodies: bool,
    pub(crate) pack_records: bool,
    pub(crate) record_sizing: RecordSizing,
    pub(crate) tls_record_payload: usize,
    pub(crate) urgent_cut: Option<UrgentCut>,
    pub(crate) cork: bool,
    pub(crate) anticipate: Option<Duration>,
    pub(crate) anticipation_budget: Duration,
    pub(crate) soft_limit: usize,
    pub(crate) blocked_soft_limit: Option<usize>,
    pub(crate) hard_limit: usize,
    pub(crate) notsent_lowat: Option<u32>,
    pub(crate) write_budget: bool,
    pub(crate) announce_no_rfc7540_priorities: bool,
    pub(crate) max_early_updates: usize,
    pub(crate) max_tracked_streams: usize,
    pub(crate) memory_budget: Option<MemoryBudget>,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig::for_policy(Policy::Scheduled)
    }
}

impl FlushConfig {
    /// The preset for `policy`, with default bounds.
    pub fn for_policy(policy: Policy) -> Self {
        let base = FlushConfig {
            policy,
            reorder: false,
            schedule_bodies: false,
            pack_records: true,
            record_sizing: RecordSizing::Fixed(MAX_RECORD_PAYLOAD),
            tls_record_payload: MAX_RECORD_PAYLOAD,
            urgent_cut: Some(UrgentCut::default()),
            cork: true,
            anticipate: None,
            anticipation_budget: Duration::from_millis(100),
            soft_limit: 256 * 1024,
            blocked_soft_limit: Some(BLOCKED_SOFT_LIMIT),
            hard_limit: 1024 * 1024,
            notsent_lowat: Some(16 * 1024),
            write_budget: true,
            announce_no_rfc7540_priorities: true,
            max_early_updates: 128,
            max_tracked_streams: 1024,
            memory_budget: Some(MemoryBudget::for_machine()),
        };
        // In h2's order the wrapper cannot move an urgent frame ahead of what it holds, so
        // it holds about one record (what it is writing and what it is building) and leaves
        // the rest with h2, whose round robin still lets a new stream in. Without reordering,
        // holding bulk DATA back for TCP only delays whatever h2 queued behind it, so the
        // write budget is off.
        let in_order = FlushConfig {
            soft_limit: IN_ORDER_SOFT_LIMIT,
            write_budget: false,
            ..base.clone()
        };
        match policy {
            Policy::EarlyFlush => in_order,
            Policy::Dynamic => FlushConfig {
                record_sizing: RecordSizing::Dynamic {
                    idle_reset: Duration::from_secs(1),
                },
                ..in_order
            },
            Policy::Scheduled => FlushConfig {
                reorder: true,
                schedule_bodies: true,
                anticipate: Some(Duration::from_millis(5)),
                ..base
            },
        }
    }

    /// The preset this configuration started from.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Bytes absorbed from h2 before only frames that would be sent ahead of the queue
    /// are admitted (default 256 KiB with [`Policy::Scheduled`], 36 KiB in h2's order).
    pub fn soft_limit(mut self, bytes: usize) -> Self {
        self.soft_limit = bytes;
        self.hard_limit = self.hard_limit.max(bytes);
        self
    }

    /// The soft limit while the transport is blocked on a path the write budget does not
    /// pace (loopback, a LAN): the socket returned `Pending` and has not been ready since,
    /// because the client stopped reading or reads more slowly than the server writes.
    /// Bytes queued beyond it would only wait, and h2 can keep them (hyper then stops
    /// polling the body), so a stalled reader costs a few records here instead of the whole
    /// soft limit. Default two records (32 KiB); `None` keeps the soft limit, e.g. to let the
    /// wrapper hold whole responses for a reader that pauses.
    ///
    /// ```
    /// let config = tls_flush::FlushConfig::default().blocked_soft_limit(None);
    /// # let _ = config;
    /// ```
    pub fn blocked_soft_limit(mut self, bytes: Option<usize>) -> Self {
        self.blocked_soft_limit = bytes;
        self
    }

    /// Bytes absorbed from h2 beyond which nothing more is admitted (default 1 MiB).
    pub fn hard_limit(mut self, bytes: usize) -> Self {
        self.hard_limit = bytes.max(self.soft_limit);
        self
    }

    /// The most the write queue takes in, counting 128 bytes per frame besides its wire
    /// bytes: the [hard limit](Self::hard_limit), and with [anticipation](Self::anticipate)
    /// on, eight 16 KiB frames more, taken only while DATA is held for an urgent response,
    /// four at a time, each time h2 comes back after a refused frame or writes the awaited
    /// response's header block (h2 writes one frame at a time with its stream state locked:
    /// refusing the frames ahead of the urgent response would block that response until the
    /// hold's bound). Held DATA itself stops at the [soft limit](Self::soft_limit) until
    /// such room is granted. A header block already begun may come on top.
    ///
    /// ```
    /// use tls_flush::{FlushConfig, Policy};
    ///
    /// let in_order = FlushConfig::for_policy(Policy::EarlyFlush).hard_limit(1 << 20);
    /// assert_eq!(in_order.queue_limit(), 1 << 20);
    /// let scheduled = FlushConfig::for_policy(Policy::Scheduled).hard_limit(1 << 20);
    /// assert!(scheduled.queue_limit() > 1 << 20);
    /// assert_eq!(scheduled.anticipate(None).queue_limit(), 1 << 20);
    /// ```
    #[must_use]
    pub fn queue_limit(&self) -> usize {
        match (self.reorder, self.anticipate) {
            (true, Some(_)) => self.hard_limit + crate::write_path::HOLD_OVERSHOOT,
            _ => self.hard_limit,
        }
    }

    /// The memory budget this connection's write queue shares with every connection whose
    /// configuration carries the same budget (clones of one [`FlushConfig`] do): under
    /// pressure the queue's limits shrink toward a floor of two frames, so that the queues
    /// together stay within the budget; frames not taken wait in h2. Default
    /// [`MemoryBudget::for_machine`], one budget for the whole process; `None`: only the
    /// per-connection limits apply. See [`MemoryBudget`] for the bound and the curve.
    ///
    /// ```
    /// use tls_flush::{FlushConfig, MemoryBudget};
    ///
    /// let budget = MemoryBudget::new(64 << 20);
    /// let config = FlushConfig::default().memory_budget(Some(budget.clone()));
    /// assert!(config.budget().is_some_and(|b| b.same_budget(&budget)));
    /// assert!(FlushConfig::default().budget().is_some_and(|b| b.same_budget(&MemoryBudget::for_machine())));
    /// ```
    #[must_use]
    pub fn memory_budget(mut self, budget: Option<MemoryBudget>) -> Self {
        self.memory_budget = budget;
        self
    }

    /// The memory budget the connection's queue shares (see
    /// [`memory_budget`](Self::memory_budget)).
    #[must_use]
    pub fn budget(&self) -> Option<&MemoryBudget> {
        self.memory_budget.as_ref()
    }

    /// Ends a record right after a DATA frame of urgency `<= max_urgency` whose payload is
    /// at most `max_payload` bytes, and flushes it at once (default urgency 0, 4096 bytes;
    /// `None`: records never end early). The response HEADERS of such a stream also end
    /// their record when its DATA is not queued yet, so they never wait inside a record of
    /// less urgent bytes.
    pub fn urgent_cut(mut self, cut: Option<UrgentCut>) -> Self {
        self.urgent_cut = cut;
        self
    }

    /// Lets a short record wait one turn of the task scheduler on flush for h2's next
    /// frames (default on): records stay full, and small responses finishing together
    /// share a record and a system call. A record holding a frame of a stream as urgent
    /// as the [urgent cut](Self::urgent_cut) never waits, nor does one cut after an urgent
    /// frame.
    pub fn cork(mut self, on: bool) -> Self {
        self.cork = on;
        self
    }

    /// While a complete request more urgent than the next DATA waits for its response body to
    /// begin, holds that DATA back for at most `bound` after the request completed, and
    /// `bound` again after the response's HEADERS left (a body read from a file follows its
    /// headers by a few milliseconds) (default 5 ms for [`Policy::Scheduled`], off
    /// otherwise; only with [`reorder`](Self::reorder)).
    /// At connection start the downstream is empty, so without it the first bulk frames
    /// would leave before an urgent response requested in the same flight exists. Until the
    /// connection's first DATA, DATA also waits for complete requests as urgent whose
    /// responses have not begun: the application may pin one more urgent (a page's
    /// requests often arrive together, all at the default urgency).
    ///
    /// Each request arms at most one hold, and only once it is complete (END_STREAM seen: a
    /// request whose body never arrives holds nothing). The hold is as urgent as the
    /// stream's effective priority: a response the application pins more urgent (its
    /// HEADERS, through [`PriorityLayer`](tower_priority::PriorityLayer)) or a
    /// PRIORITY_UPDATE moves it. Holds wait on Tokio's timer (the runtime needs its time
    /// driver, as `#[tokio::main]` enables), so they cost no CPU; their total per
    /// connection is capped by
    /// [`anticipation_budget`](Self::anticipation_budget).
    pub fn anticipate(mut self, bound: Option<Duration>) -> Self {
        self.anticipate = bound;
        self
    }

    /// The most time DATA may be held for anticipation per connection in each second
    /// (default 100 ms), so that urgent requests that keep arriving, or responses slow to
    /// begin, cannot starve less urgent responses: at least 90% of the time stays theirs.
    pub fn anticipation_budget(mut self, per_second: Duration) -> Self {
        self.anticipation_budget = per_second.min(Duration::from_secs(1));
        self
    }

    /// Record sizes handed to the TLS layer.
    pub fn record_sizing(mut self, sizing: RecordSizing) -> Self {
        self.record_sizing = sizing;
        self
    }

    /// Tells the wrapper the `max_fragment_size` given to rustls, so that its records are
    /// cut where rustls cuts them (rustls puts `n - 5` plaintext bytes in a record).
    pub fn tls_max_fragment_size(mut self, max_fragment_size: Option<usize>) -> Self {
        self.tls_record_payload = match max_fragment_size {
            Some(n) => n.saturating_sub(5).clamp(1, MAX_RECORD_PAYLOAD),
            None => MAX_RECORD_PAYLOAD,
        };
        self
    }

    /// `TCP_NOTSENT_LOWAT` for the socket (default 16 KiB); `None` leaves it alone.
    pub fn notsent_lowat(mut self, bytes: Option<u32>) -> Self {
        self.notsent_lowat = bytes;
        self
    }

    /// Sizes each write from what TCP reports (`TCP_INFO`, see [`PathState`](crate::PathState);
    /// default on with [`Policy::Scheduled`], off in h2's order, where bytes held back
    /// could not be overtaken anyway): the kernel holds about one record beyond what the congestion window can
    /// send now (and, in a larger window, what it frees during a timer wait), the bytes in flight stay near the path's bandwidth-delay product, and
    /// records fit a small congestion window. Paths with a minimum RTT under
    /// [`MIN_PACED_RTT`](crate::MIN_PACED_RTT) and transports without `TCP_INFO` are not
    /// limited; on the former a write holds up to four full records.
    pub fn write_budget(mut self, on: bool) -> Self {
        self.write_budget = on;
        self
    }

    /// Appends `SETTINGS_NO_RFC7540_PRIORITIES = 1` to h2's first SETTINGS frame (default on).
    pub fn announce_no_rfc7540_priorities(mut self, on: bool) -> Self {
        self.announce_no_rfc7540_priorities = on;
        self
    }

    /// Packs bulk bytes into full records (default on). Off, each frame h2 wrote is
    /// written on its own, as stock hyper does.
    pub fn pack_records(mut self, on: bool) -> Self {
        self.pack_records = on;
        self
    }

    /// Orders DATA by RFC 9218 (on for [`Policy::Scheduled`]).
    pub fn reorder(mut self, on: bool) -> Self {
        self.reorder = on;
        self
    }

    /// Reads a connection's response bodies by urgency (on for [`Policy::Scheduled`]; only
    /// where this crate runs hyper: [`serve`](crate::serve()) and
    /// [`serve_connection`](crate::serve_connection), HTTP/2 only). h2 writes its streams'
    /// buffered DATA one frame per stream in turn, and the wrapper cannot skip a frame h2
    /// offers, so once its queue is full every stream leaves at the rate h2 offers it, a
    /// hero image behind a download as slowly as the download. With this on, while a more
    /// urgent response of the same connection is producing, a less urgent body's next
    /// chunk is read at the wire scheduler's share (a sixteenth per level of urgency above
    /// the default, a half from it down), so h2's turns go to the urgent streams. Within an
    /// urgency at or below the default (`u=3` and less urgent), bodies of known length go
    /// shortest first (equal ones in request order), a longer one at a sixteenth of the
    /// shorter one's share (a page's images before a long download of the same urgency).
    /// A body whose source has nothing ready, or that hyper has not polled for 50 ms while
    /// the wrapper took h2's writes (the peer's window is closed), holds nothing back.
    /// Bodies are only delayed, never altered.
    pub fn schedule_bodies(mut self, on: bool) -> Self {
        self.schedule_bodies = on;
        self
    }

    /// PRIORITY_UPDATE frames kept for streams not yet open (default 128).
    pub fn max_early_updates(mut self, n: usize) -> Self {
        self.max_early_updates = n;
        self
    }

    /// Plaintext bytes per record at `sent` bytes since start or idle.
    pub(crate) fn record_target(&self, sent_since_idle: u64) -> usize {
        let size = match self.record_sizing {
            RecordSizing::Fixed(n) => n,
            RecordSizing::Dynamic { .. } => match sent_since_idle {
                0..1368 => 1368,
                1368..4104 => 2736,
                4104..8200 => 4096,
                8200..16384 => 8192,
                _ => MAX_RECORD_PAYLOAD,
            },
        };
        size.clamp(1, self.tls_record_payload)
    }
}

/// What the connections of one server (or acceptor, or listener) share: one copy of the
/// configuration and of the metrics handles for all of them, not one per connection (an
/// idle connection is a few KiB in all; these were 424 bytes of it).
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedSetup {
    pub(crate) config: std::sync::Arc<FlushConfig>,
    pub(crate) counters: crate::stats::SharedCounters,
}

impl SharedSetup {
    pub(crate) fn new(config: FlushConfig) -> Self {
        SharedSetup {
            config: std::sync::Arc::new(config),
            counters: crate::stats::SharedCounters::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The presets are what the settings table in [`FlushConfig`]'s documentation says.
    #[test]
    fn presets_match_the_settings_table() {
        let s = FlushConfig::for_policy(Policy::Scheduled);
        assert!(s.reorder && s.pack_records && s.cork && s.write_budget);
        assert!(s.announce_no_rfc7540_priorities);
        assert_eq!(s.urgent_cut, Some(UrgentCut::default()));
        assert_eq!(s.anticipate, Some(Duration::from_millis(5)));
        assert_eq!(s.notsent_lowat, Some(16 * 1024));
        assert_eq!(s.tls_record_payload, MAX_RECORD_PAYLOAD);
        assert_eq!(s.record_sizing, RecordSizing::Fixed(MAX_RECORD_PAYLOAD));
        assert_eq!((s.soft_limit, s.hard_limit), (256 * 1024, 1024 * 1024));
        assert_eq!(s.anticipation_budget, Duration::from_millis(100));
        assert_eq!(s.max_early_updates, 128);
        for policy in [Policy::EarlyFlush, Policy::Dynamic] {
            let c = FlushConfig::for_policy(policy);
            assert!(!c.reorder && !c.write_budget && c.pack_records && c.cork);
            assert!(c.announce_no_rfc7540_priorities);
            assert_eq!(c.urgent_cut, s.urgent_cut);
            assert_eq!(c.anticipate, None);
            assert_eq!(c.notsent_lowat, s.notsent_lowat);
            assert_eq!((c.soft_limit, c.hard_limit), (36 * 1024, 1024 * 1024));
            assert_eq!(c.anticipation_budget, s.anticipation_budget);
            assert_eq!(c.max_early_updates, s.max_early_updates);
        }
        assert_eq!(
            FlushConfig::for_policy(Policy::Dynamic).record_sizing,
            RecordSizing::Dynamic {
                idle_reset: Duration::from_secs(1)
            }
        );
    }
}
