//! Trace-driven link rate in mahimahi's format ([`RateTrace`]), and when each packet leaves
//! one direction's bottleneck ([`Bottleneck`]): at a fixed rate, or at a trace's delivery
//! opportunities.
//!
//! # The trace
//!
//! One line per opportunity to deliver [`OPPORTUNITY_BYTES`] bytes, the line being a whole
//! number of milliseconds from the start of the trace; a time repeated N times is N
//! opportunities in that millisecond. Times never decrease, and the last one is the trace's
//! period: the trace loops, opportunity `i` of cycle `k` being at `k × period + time[i]`
//! (mahimahi's `LinkQueue` adds the last timestamp to its base at each wrap). Trace time 0 is
//! when the link starts.
//!
//! # The schedule (mahimahi's byte accounting)
//!
//! - An opportunity carries up to [`OPPORTUNITY_BYTES`] bytes of the queue's head: several
//!   small packets can leave at one opportunity, and a packet larger than what is left of
//!   an opportunity takes the rest and continues at the next one (it leaves at the
//!   opportunity that carries its last byte).
//! - What an opportunity does not use is lost, not saved: the bytes left after the queue
//!   empties, and every opportunity that passes while it is empty. A packet arriving at an
//!   empty queue waits for the first opportunity at or after its arrival.
//! - Departures never decrease (FIFO). The queue limit (tail drop) is applied by the caller
//!   on top, counting packets that have not left yet.
//!
//! Mahimahi refuses packets over 1500 bytes; here one simply spans several opportunities.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::trace::Direction;

/// Bytes one delivery opportunity carries (mahimahi's `PACKET_SIZE`: one 1500-byte packet).
pub const OPPORTUNITY_BYTES: usize = 1500;

/// The directory of the traces kept as test data (`integration-tests/data/traces`), where
/// [`RateTrace::resolve`] looks up bare names.
pub const TRACE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/traces");

/// The bare names of the traces in [`TRACE_DIR`] (each with a `.down` and an `.up` file).
pub const KNOWN_TRACES: [&str; 2] = ["Verizon-LTE-short", "TMobile-LTE-short"];

const NANOS_PER_MS: u64 = 1_000_000;

/// A delivery-opportunity trace in mahimahi's format: one line per opportunity to deliver
/// [`OPPORTUNITY_BYTES`] bytes, a whole number of milliseconds from the trace's start, times
/// never decreasing; it loops, its period being the last time. Cheap to clone. How packets
/// use the opportunities: [`TunConfig::rate_trace`](super::TunConfig::rate_trace) and the
/// [link's documentation](super).
#[derive(Clone, PartialEq, Eq)]
pub struct RateTrace {
    name: Arc<str>,
    /// Opportunity times in ms, non-decreasing, the last one (the period) above 0.
    times_ms: Arc<[u64]>,
}

impl fmt::Debug for RateTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateTrace")
            .field("name", &self.name)
            .field("opportunities", &self.times_ms.len())
            .field("period_ms", &self.period_ms())
            .finish()
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl RateTrace {
    /// Parses a trace's text; `name` names it in errors and descriptions. Rejects an empty
    /// trace, a line that is not a whole number of milliseconds (empty lines included),
    /// decreasing times and a trace lasting 0 ms, saying which line.
    ///
    /// ```
    /// use integration_tests::tun::RateTrace;
    /// let trace = RateTrace::parse("two-per-ms", "1\n1\n2\n2\n")?;
    /// assert_eq!(trace.mean_rate_mbit(), 24.0);
    /// assert!(RateTrace::parse("bad", "1\n0\n").is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn parse(name: &str, text: &str) -> io::Result<RateTrace> {
        let mut times_ms: Vec<u64> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let field = line.trim();
            let ms: u64 = field.parse().map_err(|_| {
                invalid(format!(
                    "rate trace {name}, line {line_no}: `{field}` is not a whole number of \
                     milliseconds (one delivery opportunity per line)"
                ))
            })?;
            if let Some(&previous) = times_ms.last() {
                if ms < previous {
                    return Err(invalid(format!(
                        "rate trace {name}, line {line_no}: {ms} ms comes after {previous} ms \
                         (times must not decrease)"
                    )));
                }
            }
            times_ms.push(ms);
        }
        match times_ms.last() {
            None => Err(invalid(format!(
                "rate trace {name}: no delivery opportunity"
            ))),
            Some(0) => Err(invalid(format!(
                "rate trace {name}: it lasts 0 ms (its last time is its period, and must be \
                 above 0)"
            ))),
            Some(_) => Ok(RateTrace {
                name: name.into(),
                times_ms: times_ms.into(),
            }),
        }
    }

    /// Reads and parses the trace at `path`, named after its file name.
    pub fn load(path: &Path) -> io::Result<RateTrace> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| io::Error::new(e.kind(), format!("rate trace {}: {e}", path.display())))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        RateTrace::parse(&name, &text)
    }

    /// The trace `spec` names for `direction`: the file `spec` if it exists; else, for a
    /// bare name (no `/`), `spec.down` or `spec.up` (by direction) or `spec` itself in
    /// [`TRACE_DIR`], e.g. `Verizon-LTE-short` ([`KNOWN_TRACES`]).
    pub fn resolve(spec: &str, direction: Direction) -> io::Result<RateTrace> {
        RateTrace::load(&resolve_path(spec, direction)?)
    }

    /// The name (the file name for a loaded trace).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Delivery opportunities per period.
    pub fn opportunities(&self) -> usize {
        self.times_ms.len()
    }

    /// The period: the last opportunity's time.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms())
    }

    fn period_ms(&self) -> u64 {
        self.times_ms.last().copied().unwrap_or(1)
    }

    /// The mean rate over a period in Mbit/s (10^6 bits per second), every opportunity
    /// carrying [`OPPORTUNITY_BYTES`] bytes.
    pub fn mean_rate_mbit(&self) -> f64 {
        (self.opportunities() * OPPORTUNITY_BYTES * 8) as f64
            / (self.period_ms() as f64 * 1e-3)
            / 1e6
    }

    /// Bytes the opportunities in `[from, to)` (trace time, looping) can carry.
    pub fn capacity_bytes(&self, from: Duration, to: Duration) -> u64 {
        let count = |t: Duration| self.opportunities_before(duration_nanos(t));
        count(to).saturating_sub(count(from)) * OPPORTUNITY_BYTES as u64
    }

    /// Opportunities strictly before `t` nanoseconds of trace time.
    fn opportunities_before(&self, t: u64) -> u64 {
        let period = self.period_ms() * NANOS_PER_MS;
        let cycle = t / period;
        let len = self.times_ms.len() as u64;
        // In cycle `k`, those at `k × period + time < t`.
        let in_cycle = |k: u64| {
            let offset = t - k * period;
            self.times_ms
                .partition_point(|&ms| ms * NANOS_PER_MS < offset) as u64
        };
        // Cycle `cycle - 1` may end exactly at `t` (its last time is the period).
        let earlier = if cycle == 0 {
            0
        } else {
            (cycle - 1) * len + in_cycle(cycle - 1)
        };
        earlier + in_cycle(cycle)
    }

    /// The time of opportunity `index` of cycle `cycle`, in ns of trace time.
    fn at(&self, (cycle, index): Cursor) -> u64 {
        (cycle * self.period_ms() + self.times_ms[index]) * NANOS_PER_MS
    }

    /// The first opportunity at or after `t` ns of trace time.
    fn first_at_or_after(&self, t: u64) -> Cursor {
        let period = self.period_ms() * NANOS_PER_MS;
        let cycle = t / period;
        let offset = t - cycle * period;
        // The last time is the period, above `offset`: the index is always in range.
        let index = self
            .times_ms
            .partition_point(|&ms| ms * NANOS_PER_MS < offset);
        (cycle, index.min(self.times_ms.len() - 1))
    }

    fn after(&self, (cycle, index): Cursor) -> Cursor {
        if index + 1 == self.times_ms.len() {
            (cycle + 1, 0)
        } else {
            (cycle, index + 1)
        }
    }
}

/// A position in a looping trace: (cycle, index).
type Cursor = (u64, usize);

/// Where `spec` points for `direction` (see [`RateTrace::resolve`]).
fn resolve_path(spec: &str, direction: Direction) -> io::Result<PathBuf> {
    let path = PathBuf::from(spec);
    if path.is_file() {
        return Ok(path);
    }
    let bare = !spec.is_empty() && !spec.contains(std::path::MAIN_SEPARATOR) && !spec.contains('/');
    if bare {
        let dir = Path::new(TRACE_DIR);
        for candidate in [
            dir.join(format!("{spec}.{}", direction.short())),
            dir.join(spec),
        ] {
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "rate trace `{spec}`: no such file{}; known names: {} (in {TRACE_DIR}, `.down` \
             or `.up` by direction)",
            if bare {
                format!(
                    ", nor `{spec}.{}` in the trace directory",
                    direction.short()
                )
            } else {
                String::new()
            },
            KNOWN_TRACES.join(", "),
        ),
    ))
}

/// The rate traces of a link: the downstream direction's (server to client), and
/// optionally the upstream one's (without it, upstream keeps the fixed rate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateTraces {
    /// Server to client.
    pub downstream: RateTrace,
    /// Client to server; `None`: the fixed [`TunConfig::rate_mbit`](super::TunConfig).
    pub upstream: Option<RateTrace>,
    /// Where in the traces the link starts (trace time at the link's start, taken modulo
    /// each trace's period): runs starting at different points see different stretches of
    /// a recording instead of replaying its first seconds every time.
    pub start: Duration,
}

impl RateTraces {
    /// The trace of `direction`, if it has one.
    pub fn get(&self, direction: Direction) -> Option<&RateTrace> {
        match direction {
            Direction::Downstream => Some(&self.downstream),
            Direction::Upstream => self.upstream.as_ref(),
        }
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One direction's bottleneck: when each packet, in arrival order, leaves it (its last
/// byte serialized).
#[derive(Debug)]
pub(super) enum Bottleneck {
    /// `max(arrival, previous departure) + len / rate`.
    Fixed {
        /// The rate, bits per second.
        bits_per_sec: f64,
        /// When the previous packet left.
        free_at: Instant,
    },
    /// At a trace's delivery opportunities.
    Trace(TraceSchedule),
}

impl Bottleneck {
    /// When a packet of `len` bytes arriving at `arrival` (not before the previous one)
    /// leaves.
    pub(super) fn departure(&mut self, arrival: Instant, len: usize) -> Instant {
        match self {
            Bottleneck::Fixed {
                bits_per_sec,
                free_at,
            } => {
                *free_at = (*free_at).max(arrival)
                    + Duration::from_secs_f64(len as f64 * 8.0 / *bits_per_sec);
                *free_at
            }
            Bottleneck::Trace(schedule) => {
                let since = duration_nanos(arrival.saturating_duration_since(schedule.origin));
                let leaves = schedule.departure(since + schedule.start, len);
                schedule.origin + Duration::from_nanos(leaves - schedule.start)
            }
        }
    }
}

/// The departures at a trace's opportunities (see the [module documentation](self)).
#[derive(Debug)]
pub(super) struct TraceSchedule {
    trace: RateTrace,
    /// When trace time was `start` (the link's start).
    origin: Instant,
    /// Trace time at `origin`, ns.
    start: u64,
    /// The first opportunity not used yet.
    next: Cursor,
    /// The opportunity that carried the last byte of the previous packet (ns of trace time)
    /// and the bytes it has left.
    surplus: Option<(u64, usize)>,
}

impl TraceSchedule {
    /// The schedule of `trace`, at trace time `start` (modulo its period) at `origin`.
    pub(super) fn new(trace: RateTrace, origin: Instant, start: Duration) -> TraceSchedule {
        let start = duration_nanos(start) % (trace.period_ms() * NANOS_PER_MS);
        TraceSchedule {
            trace,
            origin,
            start,
            next: (0, 0),
            surplus: None,
        }
    }

    /// When (ns of trace time) a packet of `len` bytes arriving at `arrival` ns leaves.
    fn departure(&mut self, arrival: u64, len: usize) -> u64 {
        let mut need = len;
        // The rest of the opportunity that finished the previous packet, if this one was
        // already waiting then; otherwise that rest was lost.
        if let Some((at, left)) = self.surplus.take() {
            if arrival <= at {
                if need <= left {
                    self.surplus = Some((at, left - need));
                    return at;
                }
                need -= left;
            }
        }
        // Opportunities passing while the queue was empty are lost.
        if self.trace.at(self.next) < arrival {
            self.next = self.trace.first_at_or_after(arrival);
        }
        loop {
            let at = self.trace.at(self.next);
            self.next = self.trace.after(self.next);
            if need <= OPPORTUNITY_BYTES {
                self.surplus = Some((at, OPPORTUNITY_BYTES - need));
                return at;
            }
            need -= OPPORTUNITY_BYTES;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NANOS_PER_MS;

    fn data_trace(name: &str) -> RateTrace {
        RateTrace::resolve(name, Direction::Downstream).expect("trace in the data directory")
    }

    /// Departures (ns) of `sizes` packets arriving at `arrivals` (ns).
    fn schedule(trace: &RateTrace, packets: &[(u64, usize)]) -> Vec<u64> {
        let mut s = TraceSchedule::new(trace.clone(), Instant::now(), Duration::ZERO);
        packets
            .iter()
            .map(|&(at, len)| s.departure(at, len))
            .collect()
    }

    #[test]
    fn parsing_rejects_malformed_traces() {
        let ok = RateTrace::parse("ok", "0\n0\n5\r\n10\n").unwrap();
        assert_eq!(
            (ok.opportunities(), ok.period()),
            (4, Duration::from_millis(10))
        );
        assert_eq!(ok.mean_rate_mbit(), 4.0 * 1500.0 * 8.0 / 0.01 / 1e6);
        for (text, says) in [
            ("", "no delivery opportunity"),
            ("0\n0\n", "lasts 0 ms"),
            ("1\n\n2\n", "line 2: `` is not a whole number"),
            ("1\n2.5\n", "line 2: `2.5` is not a whole number"),
            ("1\n-3\n", "line 2: `-3`"),
            ("abc\n", "line 1: `abc`"),
            ("5\n7\n6\n", "line 3: 6 ms comes after 7 ms"),
        ] {
            let err = RateTrace::parse("t", text).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            let err = err.to_string();
            assert!(err.starts_with("rate trace t"), "{err}");
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn names_resolve_against_the_data_directory() {
        let down = RateTrace::resolve("Verizon-LTE-short", Direction::Downstream).unwrap();
        let up = RateTrace::resolve("Verizon-LTE-short", Direction::Upstream).unwrap();
        assert_eq!(down.name(), "Verizon-LTE-short.down");
        assert_eq!(up.name(), "Verizon-LTE-short.up");
        assert!((down.mean_rate_mbit() - 5.03).abs() < 0.01, "{down:?}");
        let path = format!("{TRACE_DIR}/TMobile-LTE-short.up");
        let by_path = RateTrace::resolve(&path, Direction::Downstream).unwrap();
        assert_eq!(by_path.name(), "TMobile-LTE-short.up");
        let err = RateTrace::resolve("Nowhere-LTE", Direction::Downstream)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Verizon-LTE-short, TMobile-LTE-short"),
            "{err}"
        );
        assert!(RateTrace::resolve("/no/such/trace", Direction::Upstream).is_err());
    }

    #[test]
    fn opportunities_carry_bytes_and_unused_ones_are_lost() {
        // Opportunities at 1, 2, 3 ms and 10 ms; period 10 ms.
        let trace = RateTrace::parse("t", "1\n2\n3\n10\n").unwrap();
        // Three 500-byte packets share the first opportunity; the fourth takes the next.
        assert_eq!(
            schedule(&trace, &[(0, 500), (0, 500), (0, 500), (0, 500)]),
            [MS, MS, MS, 2 * MS]
        );
        // 1000 + 1000: the second takes what the first left and finishes at the next one.
        assert_eq!(schedule(&trace, &[(0, 1000), (0, 1000)]), [MS, 2 * MS]);
        // A packet arriving after an opportunity passed unused waits for the next one, and
        // the previous opportunity's rest is lost (it was not waiting then).
        assert_eq!(
            schedule(&trace, &[(0, 100), (MS + 1, 100), (4 * MS, 100)]),
            [MS, 2 * MS, 10 * MS]
        );
        // A 3000-byte packet spans two opportunities; the trace loops after 10 ms (the
        // next cycle's opportunities at 11, 12, 13 and 20 ms).
        assert_eq!(
            schedule(&trace, &[(9 * MS, 3000), (10 * MS, 1500)]),
            [11 * MS, 12 * MS]
        );
        assert_eq!(
            trace.capacity_bytes(Duration::ZERO, Duration::from_millis(10)),
            4500
        );
        assert_eq!(
            trace.capacity_bytes(Duration::ZERO, Duration::from_micros(10_001)),
            6000
        );
        assert_eq!(
            trace.capacity_bytes(Duration::from_millis(2), Duration::from_millis(22)),
            8 * 1500
        );
    }

    /// Bytes delivered in `[from, to)` (ns) by a queue kept full with `QUEUE` packets of
    /// `size(i)` bytes: each packet arrives when the one `QUEUE` ahead of it leaves.
    fn saturated(trace: &RateTrace, to: u64, size: impl Fn(usize) -> usize) -> Vec<(u64, usize)> {
        const QUEUE: usize = 1000;
        let mut s = TraceSchedule::new(trace.clone(), Instant::now(), Duration::ZERO);
        let mut departures: Vec<(u64, usize)> = Vec::new();
        for i in 0.. {
            let arrival = if i < QUEUE {
                0
            } else {
                departures[i - QUEUE].0
            };
            let len = size(i);
            let at = s.departure(arrival, len);
            assert!(departures.last().is_none_or(|&(d, _)| d <= at), "FIFO");
            if at >= to {
                break;
            }
            departures.push((at, len));
        }
        departures
    }

    fn delivered(departures: &[(u64, usize)], from: u64, to: u64) -> u64 {
        departures
            .iter()
            .filter(|&&(at, _)| (from..to).contains(&at))
            .map(|&(_, len)| len as u64)
            .sum()
    }

    #[test]
    fn a_saturated_queue_replays_the_trace_at_its_rate() {
        for name in KNOWN_TRACES {
            let trace = data_trace(name);
            let period = duration_nanos(trace.period());
            let ten_s = 10_000 * MS;
            let end = period + 20_000 * MS;
            // Full-sized packets, and a mix with ACK-sized ones sharing opportunities.
            let full = saturated(&trace, end, |_| 1500);
            let mixed = saturated(&trace, end, |i| if i % 3 == 2 { 52 } else { 1500 });
            for departures in [&full, &mixed] {
                // Over 10 s windows (one across the loop): the trace's own rate there.
                for from in [0, 30_000 * MS, period - 5_000 * MS, period + 7_000 * MS] {
                    let got = delivered(departures, from, from + ten_s);
                    let want = trace.capacity_bytes(
                        Duration::from_nanos(from),
                        Duration::from_nanos(from + ten_s),
                    );
                    let mbit = |b: u64| b as f64 * 8.0 / 10.0 / 1e6;
                    eprintln!(
                        "{name}: [{:.0} s, +10 s): {:.3} Mbit/s delivered, trace {:.3}",
                        from as f64 / 1e9,
                        mbit(got),
                        mbit(want)
                    );
                    assert!(
                        (got as f64 - want as f64).abs() <= want as f64 * 0.02,
                        "{name} from {from} ns: {got} bytes delivered, trace has {want}"
                    );
                }
                // Over a whole period: the trace's mean rate.
                let got = delivered(departures, 0, period) as f64 * 8.0
                    / trace.period().as_secs_f64()
                    / 1e6;
                let want = trace.mean_rate_mbit();
                assert!(
                    (got - want).abs() <= want * 0.02,
                    "{name}: {got:.3} Mbit/s over a period, mean {want:.3}"
                );
            }
        }
    }

    #[test]
    fn the_fixed_rate_serializes_back_to_back() {
        let t0 = Instant::now();
        let mut fixed = Bottleneck::Fixed {
            bits_per_sec: 20e6,
            free_at: t0,
        };
        assert_eq!(fixed.departure(t0, 1500), t0 + Duration::from_micros(600));
        assert_eq!(fixed.departure(t0, 1500), t0 + Duration::from_micros(1200));
        let later = t0 + Duration::from_millis(5);
        assert_eq!(
            fixed.departure(later, 500),
            later + Duration::from_micros(200)
        );
        let trace = RateTrace::parse("t", "1\n2\n").unwrap();
        let mut traced = Bottleneck::Trace(TraceSchedule::new(trace, t0, Duration::ZERO));
        assert_eq!(traced.departure(t0, 1500), t0 + Duration::from_millis(1));
        assert_eq!(traced.departure(t0, 1500), t0 + Duration::from_millis(2));
        assert_eq!(traced.departure(t0, 1500), t0 + Duration::from_millis(3));
    }

    #[test]
    fn a_schedule_can_start_anywhere_in_its_trace() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let trace = RateTrace::parse("t", "10\n20\n30\n40\n").unwrap();
        // Link time 0 is trace time 15: the first opportunity is the one at 20.
        let mut late = Bottleneck::Trace(TraceSchedule::new(trace.clone(), t0, ms(15)));
        assert_eq!(late.departure(t0, 1500), t0 + ms(5));
        assert_eq!(late.departure(t0, 1500), t0 + ms(15));
        assert_eq!(late.departure(t0, 1500), t0 + ms(25));
        // Then the loop: the opportunity at 10 of the next cycle (trace time 50).
        assert_eq!(late.departure(t0, 1500), t0 + ms(35));
        // A start beyond the period wraps: 95 is 15 of the third cycle.
        let mut wrapped = Bottleneck::Trace(TraceSchedule::new(trace, t0, ms(95)));
        assert_eq!(wrapped.departure(t0, 1500), t0 + ms(5));
    }
}
