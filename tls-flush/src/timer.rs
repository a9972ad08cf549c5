//! One reusable Tokio sleep: the task waits on a timer, never on self-wakes.
//!
//! Invariant: outside a Tokio runtime (a hand-rolled executor) a wait asks to be polled
//! again instead, so it never hangs.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

#[derive(Default)]
pub(crate) struct Timer {
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("armed", &self.sleep.is_some())
            .finish()
    }
}

impl Timer {
    /// Ready once `until` has passed; otherwise the task is woken then.
    pub(crate) fn poll_until(&mut self, cx: &mut Context<'_>, until: Instant) -> Poll<()> {
        if crate::clock::now() >= until {
            return Poll::Ready(());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            // No Tokio runtime to time the wait: ask to be polled again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let deadline = tokio::time::Instant::from_std(until);
        match &mut self.sleep {
            Some(sleep) if sleep.deadline() == deadline => {}
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        match self.sleep.as_mut().map(|s| s.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }

    /// True while a sleep is allocated (armed, or fired and kept for reuse).
    pub(crate) fn is_allocated(&self) -> bool {
        self.sleep.is_some()
    }

    /// Drops the sleep (its allocation too).
    pub(crate) fn cancel(&mut self) {
        self.sleep = None;
    }
}
