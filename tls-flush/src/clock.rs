//! The wrapper's clock: where every deadline it sets is read from (anticipation holds, the
//! first flight's wait, the idle gap of dynamic record sizes, the write budget's rounds and
//! the timer that waits for them).
//!
//! Invariant: in every build but the project's fuzz targets this is `Instant::now()`. Fuzz
//! builds (`--cfg fuzzing`, set by cargo-fuzz) add a per-thread offset that the fuzz
//! harness moves forward while the wrapper only waits for time to pass, so that a 5 ms hold
//! costs a few polls instead of 5 ms of spinning (the `write_pipeline` target ran at 36
//! cases per second on real time).

/// Now, as the wrapper's deadlines see it.
#[cfg(not(fuzzing))]
pub(crate) fn now() -> std::time::Instant {
    std::time::Instant::now()
}

#[cfg(fuzzing)]
pub(crate) use fuzz_clock::now;

/// The fuzz harness's control of the clock (fuzz builds only; not an API).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz_clock {
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    thread_local! {
        static OFFSET: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// Now: the real clock plus what [`advance`] added on this thread.
    pub fn now() -> Instant {
        Instant::now() + OFFSET.with(Cell::get)
    }

    /// Moves this thread's clock forward by `by`.
    pub fn advance(by: Duration) {
        OFFSET.with(|o| o.set(o.get() + by));
    }
}
