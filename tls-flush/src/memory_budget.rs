//! [`MemoryBudget`]: one bound on the bytes queued in every wrapper of a server.
//!
//! Each connection's write queue is bounded on its own (the soft and hard limits of
//! [`FlushConfig`](crate::FlushConfig)); a budget bounds their sum. A connection's queue
//! always has its *floor* ([`BUDGET_FLOOR`], two full DATA frames: what in-order writing
//! needs to pack a record across a frame boundary), which needs no budget; past the floor it
//! takes a frame only when the budget has room for it, and its limits shrink as the budget
//! fills (see [`MemoryBudget`] for the curve). Nothing is ever dropped: a frame the wrapper
//! does not take stays in h2's per-stream send buffer, and hyper stops polling that body.
//!
//! Accounting: each connection charges the memory its queue accounts for (wire bytes plus
//! a fixed overhead per queued frame, what the queue limits bound) when it takes frames from
//! h2 and releases it when it hands records to TLS, once per write or flush of h2's (one
//! relaxed atomic add or sub), and a frame past the floor reserves its bytes first (one
//! compare-and-swap). Dropping the connection returns whatever it still holds.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use crate::config::MAX_RECORD_PAYLOAD;
use crate::frame::HEADER_LEN;
use crate::write_path::UNIT_OVERHEAD;

/// What a connection's queue may always hold, whatever the budget's state: two full DATA
/// frames of the default maximum frame size (16 KiB payload, RFC 9113 §4.2) with their
/// accounted overhead, so that a record can be packed across a frame boundary while the
/// previous one is written, as the in-order presets do (their soft limit is 36 KiB for the
/// same reason). A connection configured with a smaller soft limit has that as its floor.
pub const BUDGET_FLOOR: usize = 2 * (MAX_RECORD_PAYLOAD + HEADER_LEN + UNIT_OVERHEAD);

/// The default budget is this fraction of the machine's memory (see
/// [`MemoryBudget::for_machine`]): an eighth leaves the rest to the application, the TLS
/// and HTTP/2 state, and the kernel's socket buffers.
const MACHINE_FRACTION: usize = 8;

/// The default budget is never below this (a small container would otherwise squeeze every
/// connection down to its floor under light load): 64 MiB, the issue's example.
const MACHINE_MINIMUM: usize = 64 << 20;

/// The default budget when the machine's memory cannot be read (not Linux): 512 MiB, an
/// eighth of a 4 GiB machine.
const MACHINE_FALLBACK: usize = 512 << 20;

/// Below this share of the room above the floors in use, no connection's limits shrink.
/// (Half: under light load the budget changes nothing; past it, limits shrink linearly.)
const PRESSURE_START_NUM: usize = 1;
const PRESSURE_START_DEN: usize = 2;

/// A memory budget shared by every connection built with a [`FlushConfig`](crate::FlushConfig)
/// that carries it (clones share it): [`serve`](crate::serve()),
/// [`FlushListener`](crate::FlushListener), [`FlushAcceptor`](crate::FlushAcceptor) and
/// [`FlushStream::new`](crate::FlushStream::new) all honour it.
///
/// # The bound
///
/// Each connection reserves its floor ([`BUDGET_FLOOR`], or its soft limit when smaller)
/// from its first HTTP/2 frame until it is dropped, and takes a frame past its floor only
/// while everything queued plus every open connection's floor still fits in the limit. So
/// with `n` connections open and none opening meanwhile, the bytes queued in all of them
/// (as the queue limits count them: wire bytes plus 128 bytes per frame) stay at or below
/// `max(limit, n × floor)`. A connection that opens while the budget is full still gets its
/// floor, on top until the fuller queues have drained below their shrunk limits: at worst
/// `limit + n × floor`. When the floors alone exceed the limit, every connection keeps its
/// floor and nothing more: the wrapper then writes about as stock hyper does (a frame or
/// two at a time, in h2's order), but no connection is starved and no byte is dropped.
/// Two exceptions come on top, as they do for the per-connection limits: a frame taken into
/// an empty queue (larger than the floor only when the client raised
/// `SETTINGS_MAX_FRAME_SIZE` above 16 KiB; DATA over 1 MiB is written through in pieces)
/// and the rest of a header block already begun.
///
/// # Under pressure
///
/// Let `room = limit - floors` (the floors of the open connections) and `used` what is
/// queued. While `used <= room / 2`, connections keep their configured limits. Past that, a
/// connection's soft and hard limits (and the room taken during an anticipation hold)
/// shrink linearly toward its floor, reaching it when `used = room`: a configured limit `x`
/// becomes `floor + (x - floor) × (room - used) / (room / 2)`. A connection holding more
/// than its shrunk limit takes nothing new until its queue drains below it, so the
/// connections that hold the most give way first.
///
/// # Metrics
///
/// With the `metrics` feature, gauges `tls_flush.memory_budget.used` (bytes queued now,
/// published in 64 KiB steps), `tls_flush.memory_budget.high_water` (the most ever queued at
/// once) and `tls_flush.memory_budget.limit`. A process normally has one budget; with
/// several, the gauges show whichever changed last. [`used`](Self::used) and
/// [`high_water`](Self::high_water) read the same figures directly.
///
/// ```
/// use tls_flush::{FlushConfig, MemoryBudget};
///
/// let budget = MemoryBudget::new(64 << 20);
/// let config = FlushConfig::default().memory_budget(Some(budget.clone()));
/// // hand `config` to `serve`, `FlushListener::new`, `FlushAcceptor::new` ...
/// assert_eq!(budget.limit(), 64 << 20);
/// assert_eq!((budget.used(), budget.high_water(), budget.connections()), (0, 0, 0));
/// # drop(config);
/// ```
#[derive(Clone)]
pub struct MemoryBudget {
    shared: Arc<Shared>,
}

struct Shared {
    limit: usize,
    /// Bytes queued in all connections (as last synchronised by each).
    used: AtomicUsize,
    /// The sum of the open connections' floors.
    floors: AtomicUsize,
    connections: AtomicUsize,
    high_water: AtomicUsize,
    #[cfg(feature = "metrics")]
    gauges: Gauges,
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.limit())
            .field("used", &self.used())
            .field("high_water", &self.high_water())
            .field("connections", &self.connections())
            .finish()
    }
}

impl MemoryBudget {
    /// A budget of `limit` bytes, shared by every connection whose configuration carries a
    /// clone of it.
    ///
    /// ```
    /// let budget = tls_flush::MemoryBudget::new(8 << 20);
    /// assert_eq!(budget.limit(), 8 << 20);
    /// ```
    pub fn new(limit: usize) -> Self {
        MemoryBudget {
            shared: Arc::new(Shared {
                limit,
                used: AtomicUsize::new(0),
                floors: AtomicUsize::new(0),
                connections: AtomicUsize::new(0),
                high_water: AtomicUsize::new(0),
                #[cfg(feature = "metrics")]
                gauges: Gauges::new(),
            }),
        }
    }

    /// The process-wide default, the one [`FlushConfig`](crate::FlushConfig)'s presets
    /// carry: an eighth of the machine's memory (the smaller of `MemTotal` in
    /// `/proc/meminfo` and the cgroup v2 limit in `/sys/fs/cgroup/memory.max`), at least
    /// 64 MiB; 512 MiB where neither can be read. Created on first use; every call returns
    /// a handle on the same budget, so every server of the process shares it.
    ///
    /// ```
    /// use tls_flush::MemoryBudget;
    ///
    /// let a = MemoryBudget::for_machine();
    /// assert!(a.limit() >= 64 << 20);
    /// assert!(a.same_budget(&MemoryBudget::for_machine()));
    /// ```
    pub fn for_machine() -> Self {
        static DEFAULT: OnceLock<MemoryBudget> = OnceLock::new();
        DEFAULT
            .get_or_init(|| MemoryBudget::new(machine_default_limit()))
            .clone()
    }

    /// The budget's size in bytes.
    pub fn limit(&self) -> usize {
        self.shared.limit
    }

    /// Bytes queued now in all connections sharing the budget.
    pub fn used(&self) -> usize {
        self.shared.used.load(Relaxed)
    }

    /// The most bytes ever queued at once in all connections sharing the budget.
    pub fn high_water(&self) -> usize {
        self.shared.high_water.load(Relaxed)
    }

    /// Connections currently charging the budget (HTTP/2 connections that wrote a frame,
    /// until they are dropped).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Relaxed)
    }

    /// True when both handles are on the same budget.
    pub fn same_budget(&self, other: &MemoryBudget) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// What a configured limit `x` becomes now for a connection whose floor is `floor`:
    /// see the type's documentation.
    fn shrink(&self, x: usize, floor: usize) -> usize {
        if x <= floor {
            return x;
        }
        let s = &*self.shared;
        let room = s.limit.saturating_sub(s.floors.load(Relaxed));
        let used = s.used.load(Relaxed);
        let start = room / PRESSURE_START_DEN * PRESSURE_START_NUM;
        if used <= start {
            return x;
        }
        if used >= room {
            return floor;
        }
        let span = (room - start).max(1) as u128;
        let left = (room - used) as u128;
        floor + ((x - floor) as u128 * left / span) as usize
    }

    /// Reserves `bytes` more if everything queued plus every floor still fits the limit.
    fn try_reserve(&self, bytes: usize) -> bool {
        let s = &*self.shared;
        let room = s.limit.saturating_sub(s.floors.load(Relaxed));
        let reserved = s.used.fetch_update(Relaxed, Relaxed, |used| {
            used.checked_add(bytes).filter(|&after| after <= room)
        });
        match reserved {
            Ok(before) => {
                self.added(before + bytes);
                true
            }
            Err(_) => false,
        }
    }

    fn add(&self, bytes: usize) {
        let after = self.shared.used.fetch_add(bytes, Relaxed) + bytes;
        self.added(after);
    }

    /// Usage rose to `used`.
    fn added(&self, used: usize) {
        self.raise_high_water(used);
        #[cfg(feature = "metrics")]
        self.shared.gauges.publish_used(used);
    }

    fn sub(&self, bytes: usize) {
        let before = self.shared.used.fetch_sub(bytes, Relaxed);
        #[cfg(feature = "metrics")]
        self.shared.gauges.publish_used(before - bytes);
        #[cfg(not(feature = "metrics"))]
        let _ = before;
    }

    fn raise_high_water(&self, used: usize) {
        // A load first: a new high water is rare once the server has run for a while.
        let s = &*self.shared;
        if used > s.high_water.load(Relaxed) {
            s.high_water.fetch_max(used, Relaxed);
            #[cfg(feature = "metrics")]
            s.gauges.high_water.set(s.high_water.load(Relaxed) as f64);
        }
    }

    fn register(&self, floor: usize) {
        let s = &*self.shared;
        s.floors.fetch_add(floor, Relaxed);
        s.connections.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        s.gauges.limit.set(s.limit as f64);
    }

    fn unregister(&self, floor: usize) {
        let s = &*self.shared;
        s.floors.fetch_sub(floor, Relaxed);
        s.connections.fetch_sub(1, Relaxed);
    }
}

/// `max(64 MiB, min(MemTotal, cgroup memory.max) / 8)`, or 512 MiB when neither is known.
fn machine_default_limit() -> usize {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok());
    let memory = match (total, cgroup) {
        (Some(t), Some(c)) => t.min(c),
        (Some(m), None) | (None, Some(m)) => m,
        (None, None) => return MACHINE_FALLBACK,
    };
    (memory / MACHINE_FRACTION).max(MACHINE_MINIMUM)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// One connection's account with its budget, kept in step with its queue; returns
/// everything it holds when dropped.
#[derive(Debug)]
pub(crate) struct BudgetCharge {
    budget: Option<MemoryBudget>,
    floor: usize,
    /// Bytes charged to the budget.
    charged: usize,
    registered: bool,
}

impl BudgetCharge {
    /// An account with `budget` (none: nothing is charged) for a connection whose soft
    /// limit is `soft_limit`. It registers (reserving its floor) on its first charge, so
    /// that connections that never carry HTTP/2 cost the budget nothing.
    pub(crate) fn new(budget: Option<MemoryBudget>, soft_limit: usize) -> Self {
        BudgetCharge {
            budget,
            floor: BUDGET_FLOOR.min(soft_limit),
            charged: 0,
            registered: false,
        }
    }

    /// What the configured limit `x` is now, with the budget's pressure.
    pub(crate) fn limit(&self, x: usize) -> usize {
        match &self.budget {
            Some(budget) => budget.shrink(x, self.floor),
            None => x,
        }
    }

    /// Whether the queue, holding `queued` bytes, may take `cost` more: free within the
    /// floor, otherwise reserved from the budget (charged now).
    pub(crate) fn admit(&mut self, queued: usize, cost: usize) -> bool {
        let Some(budget) = &self.budget else {
            return true;
        };
        let after = queued + cost;
        if after <= self.floor {
            return true;
        }
        if !self.registered {
            budget.register(self.floor);
            self.registered = true;
        }
        // What the queue will hold beyond what is charged already.
        let extra = after.saturating_sub(self.charged);
        if extra == 0 {
            return true;
        }
        if budget.try_reserve(extra) {
            self.charged += extra;
            return true;
        }
        false
    }

    /// Charges or releases the difference between what the queue holds (`queued`) and
    /// what was charged.
    pub(crate) fn sync(&mut self, queued: usize) {
        let Some(budget) = &self.budget else {
            return;
        };
        if queued == self.charged {
            return;
        }
        if !self.registered {
            budget.register(self.floor);
            self.registered = true;
        }
        if queued > self.charged {
            budget.add(queued - self.charged);
        } else {
            budget.sub(self.charged - queued);
        }
        self.charged = queued;
    }
}

impl Drop for BudgetCharge {
    /// The connection is gone (closed, aborted, or its task dropped): everything it charged
    /// and its floor return to the budget.
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            if self.charged > 0 {
                budget.sub(self.charged);
            }
            if self.registered {
                budget.unregister(self.floor);
            }
        }
    }
}

/// The budget's gauges (feature `metrics`).
#[cfg(feature = "metrics")]
struct Gauges {
    used: ::metrics::Gauge,
    high_water: ::metrics::Gauge,
    limit: ::metrics::Gauge,
    /// `used` as last published, in steps of [`PUBLISH_STEP_SHIFT`] bits.
    published: AtomicUsize,
}

/// The `used` gauge moves in steps of 64 KiB, so that publishing costs an atomic load per
/// charge and a store only when the usage crossed a step.
#[cfg(feature = "metrics")]
const PUBLISH_STEP_SHIFT: u32 = 16;

#[cfg(feature = "metrics")]
impl Gauges {
    fn new() -> Self {
        Gauges {
            used: ::metrics::gauge!(crate::metrics::BUDGET_USED),
            high_water: ::metrics::gauge!(crate::metrics::BUDGET_HIGH_WATER),
            limit: ::metrics::gauge!(crate::metrics::BUDGET_LIMIT),
            published: AtomicUsize::new(usize::MAX),
        }
    }

    fn publish_used(&self, used: usize) {
        let step = used >> PUBLISH_STEP_SHIFT;
        if self.published.load(Relaxed) != step {
            self.published.store(step, Relaxed);
            self.used.set(used as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: usize = BUDGET_FLOOR;

    #[test]
    fn limits_keep_their_size_below_half_the_room_then_shrink_linearly_to_the_floor() {
        let budget = MemoryBudget::new(1 << 20);
        let mut charge = BudgetCharge::new(Some(budget.clone()), 256 * 1024);
        let x = 256 * 1024;
        // Both register (reserving their floors) with their first charge.
        charge.sync(1);
        charge.sync(0);
        let mut other = BudgetCharge::new(Some(budget.clone()), 256 * 1024);
        let room = (1 << 20) - 2 * FLOOR;
        other.sync(room / 2 - 1);
        assert_eq!(charge.limit(x), x, "no pressure below half the room");
        other.sync(room / 2 - 1 + room / 4);
        let mid = charge.limit(x);
        let expected = FLOOR + (x - FLOOR) / 2;
        assert!(mid.abs_diff(expected) <= 1, "{mid} vs {expected}");
        other.sync(room - 1);
        assert_eq!(charge.limit(x), FLOOR, "the floor once the room is used");
        other.sync(2 * room);
        assert_eq!(charge.limit(x), FLOOR, "never below the floor");
        // A configured limit under the floor is left alone.
        assert_eq!(charge.limit(FLOOR / 2), FLOOR / 2);
        // The curve never rises with usage.
        let mut last = usize::MAX;
        for used in (0..room).step_by(room / 64) {
            other.sync(used);
            let now = charge.limit(x);
            assert!(now <= last && now >= FLOOR && now <= x);
            last = now;
        }
    }

    #[test]
    fn the_floor_is_free_and_the_rest_reserved_within_the_limit() {
        let budget = MemoryBudget::new(3 * FLOOR);
        let mut a = BudgetCharge::new(Some(budget.clone()), usize::MAX);
        let mut b = BudgetCharge::new(Some(budget.clone()), usize::MAX);
        // Within the floor: always, even with nothing left.
        assert!(a.admit(0, FLOOR));
        a.sync(FLOOR);
        assert!(b.admit(0, FLOOR));
        b.sync(FLOOR);
        // Two floors reserved and 2 × FLOOR queued: room = 3F - 2F = F, used = 2F.
        assert!(!a.admit(FLOOR, 1), "past the floor without room");
        // b drains: used = F, room F: nothing past the floor fits yet.
        b.sync(0);
        assert!(!a.admit(FLOOR, 1));
        drop(b);
        // One floor now: room 2F, used F: F more fits, not F + 1.
        assert!(!a.admit(FLOOR, FLOOR + 1));
        assert!(a.admit(FLOOR, FLOOR));
        assert_eq!(budget.used(), 2 * FLOOR);
        // Charged at admission: the sync afterwards changes nothing.
        a.sync(2 * FLOOR);
        assert_eq!(budget.used(), 2 * FLOOR);
        assert_eq!(budget.high_water(), 2 * FLOOR);
    }

    #[test]
    fn a_dropped_connection_returns_everything() {
        let budget = MemoryBudget::new(1 << 20);
        let mut a = BudgetCharge::new(Some(budget.clone()), 256 * 1024);
        assert!(a.admit(0, 100_000));
        a.sync(100_000);
        let mut b = BudgetCharge::new(Some(budget.clone()), 256 * 1024);
        b.sync(5000);
        assert_eq!((budget.used(), budget.connections()), (105_000, 2));
        drop(a);
        assert_eq!((budget.used(), budget.connections()), (5000, 1));
        drop(b);
        assert_eq!((budget.used(), budget.connections()), (0, 0));
        assert_eq!(budget.shared.floors.load(Relaxed), 0);
        assert_eq!(budget.high_water(), 105_000);
    }

    #[test]
    fn connections_that_never_charge_cost_nothing() {
        let budget = MemoryBudget::new(1 << 20);
        let idle = BudgetCharge::new(Some(budget.clone()), 256 * 1024);
        assert_eq!(budget.connections(), 0);
        drop(idle);
        assert_eq!(budget.shared.floors.load(Relaxed), 0);
    }

    #[test]
    fn the_machine_default_reads_meminfo() {
        let meminfo = "MemTotal:       24683784 kB\nMemFree:  100 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_683_784 * 1024));
        assert_eq!(mem_total("nothing"), None);
        assert!(machine_default_limit() >= MACHINE_MINIMUM);
    }
}
