//! Activity on a connection's socket and the idle check that reads it: every read or write
//! that moves a byte sets a flag ([`Tracked`] around the TCP stream), and [`idle_for`]
//! looks at it once every quarter of the idle timeout. No clock read per socket operation,
//! and one small timer per connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::transport::Transport;

/// Whether a byte moved on a connection's socket since the idle check last looked: one
/// relaxed flag per read or write, where a clock read per socket operation would cost more
/// than the check it serves.
#[derive(Debug, Default)]
pub(super) struct ActivityClock {
    moved: AtomicBool,
}

impl ActivityClock {
    pub(super) fn new() -> Self {
        ActivityClock::default()
    }

    pub(super) fn touch(&self) {
        // A load first: the flag's cache line is written once per check, not per byte.
        if !self.moved.load(Ordering::Relaxed) {
            self.moved.store(true, Ordering::Relaxed);
        }
    }

    /// True when a byte moved since the last call.
    fn take(&self) -> bool {
        self.moved.swap(false, Ordering::Relaxed)
    }
}

/// Completes once no byte moved for `timeout`: between `timeout` and `timeout` plus a
/// quarter of it after the last activity (the check looks every quarter).
pub(super) fn idle_for(clock: &ActivityClock, timeout: Duration) -> IdleFor<'_> {
    let tick = (timeout / 4).max(Duration::from_millis(1));
    let ticks = timeout.as_nanos().div_ceil(tick.as_nanos());
    IdleFor {
        clock,
        tick,
        quiet_ticks: 0,
        ticks: u32::try_from(ticks).unwrap_or(u32::MAX),
        sleep: Instant::now()
            .checked_add(tick)
            .map(tokio::time::sleep_until),
    }
}

pin_project_lite::pin_project! {
    /// [`idle_for`]'s future: a struct, not an async fn, because every open connection
    /// keeps one (144 bytes; the async fn took 200).
    pub(super) struct IdleFor<'a> {
        clock: &'a ActivityClock,
        tick: Duration,
        // Checks in a row that found nothing moved, and how many make the timeout.
        quiet_ticks: u32,
        ticks: u32,
        // `None` when the next check is beyond what `Instant` can represent: never.
        #[pin]
        sleep: Option<tokio::time::Sleep>,
    }
}

impl Future for IdleFor<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        loop {
            let Some(mut sleep) = this.sleep.as_mut().as_pin_mut() else {
                return Poll::Pending;
            };
            std::task::ready!(sleep.as_mut().poll(cx));
            if this.clock.take() {
                *this.quiet_ticks = 0;
            } else {
                *this.quiet_ticks += 1;
                if *this.quiet_ticks >= *this.ticks {
                    return Poll::Ready(());
                }
            }
            match Instant::now().checked_add(*this.tick) {
                Some(at) => sleep.reset(at),
                None => this.sleep.set(None),
            }
        }
    }
}

/// The TCP stream under TLS, recording when a byte moves in either direction.
#[derive(Debug)]
pub(super) struct Tracked<T> {
    pub(super) io: T,
    pub(super) clock: Arc<ActivityClock>,
}

impl<T: Unpin> Tracked<T> {
    /// Passes a read or a write to the stream (`call` returns how many bytes it moved),
    /// touching the clock if it moved any.
    fn track(
        self: Pin<&mut Self>,
        call: impl FnOnce(Pin<&mut T>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = call(Pin::new(&mut this.io));
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            this.clock.touch();
        }
        res
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = self.track(|io| {
            let res = io.poll_read(cx, buf);
            res.map_ok(|()| buf.filled().len().saturating_sub(before))
        });
        read.map_ok(|_| ())
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.track(|io| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.track(|io| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl Transport for Tracked<TcpStream> {
    fn tcp_stream(&self) -> Option<&TcpStream> {
        Some(&self.io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_deadline_follows_activity() {
        let clock = ActivityClock::new();
        let timeout = Duration::from_millis(200);
        let start = Instant::now();
        let idle = idle_for(&clock, timeout);
        let touching = async {
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                clock.touch();
            }
            Instant::now()
        };
        let ((), last) = tokio::join!(idle, touching);
        let waited = start.elapsed();
        // Never before `timeout` after the last activity (generous upper bound: a loaded CI).
        assert!(last.elapsed() >= timeout, "{:?}", last.elapsed());
        assert!(waited >= Duration::from_millis(400), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }

    #[tokio::test]
    async fn an_unrepresentable_timeout_never_fires() {
        let clock = ActivityClock::new();
        let never = idle_for(&clock, Duration::MAX);
        let r = tokio::time::timeout(Duration::from_millis(100), never).await;
        assert!(r.is_err());
    }
}
