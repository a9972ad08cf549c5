//! The clock of anticipation holds (the scheduled policy holds less urgent DATA for a
//! moment while a complete, more urgent request waits for its response to begin).
//!
//! Invariants:
//! - a hold ends at the earliest of: the urgent response's first DATA frame, the
//!   request's bound (armed when the request is complete, and once more when its response's
//!   HEADERS leave), the connection's budget;
//! - the budget caps the total time DATA is held per connection in each one-second window,
//!   so urgent requests that keep arriving cannot starve less urgent responses;
//! - a hold waits on a timer (Tokio's time driver), never on self-wakes: an idle hold costs
//!   no CPU. Outside a Tokio runtime (a hand-rolled executor) it asks to be polled again.

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::stats::ConnectionStats;
use crate::timer::Timer;

/// The window over which the hold budget applies.
const WINDOW: Duration = Duration::from_secs(1);

/// Accounts hold time against the per-second budget and sleeps until a hold ends.
pub(crate) struct HoldClock {
    window_start: Option<Instant>,
    spent: Duration,
    holding_since: Option<Instant>,
    timer: Timer,
}

impl std::fmt::Debug for HoldClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldClock")
            .field("spent", &self.spent)
            .field("holding", &self.holding_since.is_some())
            .finish()
    }
}

impl HoldClock {
    pub(crate) fn new() -> Self {
        HoldClock {
            window_start: None,
            spent: Duration::ZERO,
            holding_since: None,
            timer: Timer::default(),
        }
    }

    /// True while DATA is held (the hold's time is being spent).
    pub(crate) fn is_holding(&self) -> bool {
        self.holding_since.is_some()
    }

    /// The read side wants DATA held until `wanted` (or not at all): returns until when it
    /// is held, within `budget` per second, and accounts the time (a new hold counted in
    /// `stats`).
    pub(crate) fn update(
        &mut self,
        wanted: Option<Instant>,
        now: Instant,
        budget: Duration,
        stats: &ConnectionStats,
    ) -> Option<Instant> {
        let window_start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(window_start) >= WINDOW {
            self.window_start = Some(now);
            self.spent = Duration::ZERO;
            if self.holding_since.is_some() {
                self.holding_since = Some(now);
            }
        }
        let held = self
            .holding_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        let remaining = budget.saturating_sub(self.spent + held);
        match wanted {
            Some(until) if until > now && !remaining.is_zero() => {
                if self.holding_since.is_none() {
                    self.holding_since = Some(now);
                    stats.add_anticipation_hold(1);
                    tracing::trace!(?until, "holding DATA for an urgent response");
                }
                Some(until.min(now + remaining))
            }
            _ => {
                if let Some(since) = self.holding_since.take() {
                    self.spent += now.saturating_duration_since(since);
                }
                self.timer.cancel();
                None
            }
        }
    }

    /// Ready once `until` has passed; otherwise the task is woken then.
    pub(crate) fn poll_until(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        self.timer.poll_until(cx, until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_stop_when_the_budget_of_the_window_is_spent() {
        let stats = ConnectionStats::default();
        let mut clock = HoldClock::new();
        let budget = Duration::from_millis(100);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(
            clock.update(Some(t0 + ms(5)), t0, budget, &stats),
            Some(t0 + ms(5))
        );
        assert_eq!(stats.snapshot().anticipation_holds, 1);
        // Still holding later on: the budget caps the hold's end.
        assert_eq!(
            clock.update(Some(t0 + ms(500)), t0 + ms(60), budget, &stats),
            Some(t0 + ms(100))
        );
        assert_eq!(
            clock.update(Some(t0 + ms(500)), t0 + ms(100), budget, &stats),
            None
        );
        assert!(!clock.is_holding());
        assert_eq!(
            clock.update(Some(t0 + ms(500)), t0 + ms(200), budget, &stats),
            None,
            "spent"
        );
        // A new window, a new budget.
        assert_eq!(
            clock.update(Some(t0 + ms(1050)), t0 + ms(1001), budget, &stats),
            Some(t0 + ms(1050))
        );
        assert_eq!(clock.update(None, t0 + ms(1010), budget, &stats), None);
        assert_eq!(stats.snapshot().anticipation_holds, 2);
    }

    #[tokio::test]
    async fn a_hold_sleeps_on_the_timer_without_waking_itself() {
        let mut clock = HoldClock::new();
        let until = Instant::now() + Duration::from_millis(50);
        let wakes = std::sync::Arc::new(WakeCount::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(clock.poll_until(&mut cx, until).is_pending());
        assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(wakes.0.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    }

    #[derive(Default)]
    struct WakeCount(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for WakeCount {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
