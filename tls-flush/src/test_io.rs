//! A transport for the unit tests of the write paths: each write takes at most a set number
//! of bytes (partial writes, `Pending`), and what it takes is recorded.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Takes at most `limits[i]` bytes on its i-th write (0: `Pending` after waking the task,
/// then the next limit) and `max` once the limits are used up, and records each write. A
/// vectored write takes from several slices only when `vectored` (otherwise from the first
/// non-empty one, as tokio's default does). Reads are at their end at once.
#[derive(Debug)]
pub(crate) struct LimitedSink {
    limits: Vec<usize>,
    next: usize,
    max: usize,
    pub(crate) vectored: bool,
    /// Every byte taken, in order.
    pub(crate) out: Vec<u8>,
    /// The bytes each write took.
    pub(crate) writes: Vec<usize>,
    /// At most this many bytes are kept by each [`seal_record_ahead`](crate::Transport::seal_record_ahead)
    /// (0: it keeps nothing, as a transport without records).
    pub(crate) keeps_ahead: usize,
    /// The bytes each `seal_record_ahead` kept.
    pub(crate) kept: Vec<usize>,
}

impl Default for LimitedSink {
    fn default() -> Self {
        LimitedSink {
            limits: Vec::new(),
            next: 0,
            max: usize::MAX,
            vectored: false,
            out: Vec::new(),
            writes: Vec::new(),
            keeps_ahead: 0,
            kept: Vec::new(),
        }
    }
}

impl LimitedSink {
    /// Takes at most `limits[i]` bytes on its i-th write (0: `Pending`), then any number.
    // Used by the client's tests only.
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    pub(crate) fn with_limits(limits: Vec<usize>) -> Self {
        LimitedSink {
            limits,
            ..LimitedSink::default()
        }
    }

    /// Takes at most `max` bytes on every write, from several slices when `vectored`.
    pub(crate) fn capped(max: usize, vectored: bool) -> Self {
        LimitedSink {
            max,
            vectored,
            ..LimitedSink::default()
        }
    }

    /// One write: up to the next limit of the bytes of `bufs`, in order.
    fn take<'a>(
        &mut self,
        cx: &mut Context<'_>,
        bufs: impl IntoIterator<Item = &'a [u8]>,
    ) -> Poll<io::Result<usize>> {
        let limit = self.limits.get(self.next).copied().unwrap_or(self.max);
        self.next += 1;
        if limit == 0 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut left = limit;
        for buf in bufs {
            let n = buf.len().min(left);
            self.out.extend_from_slice(&buf[..n]);
            left -= n;
        }
        self.writes.push(limit - left);
        Poll::Ready(Ok(limit - left))
    }
}

impl AsyncRead for LimitedSink {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for LimitedSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.take(cx, [buf])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.vectored {
            let buf = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
            return self.take(cx, [buf]);
        }
        self.take(cx, bufs.iter().map(|b| &b[..]))
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl crate::Transport for LimitedSink {
    fn seal_record_ahead(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut left = self.keeps_ahead;
        for buf in bufs {
            let n = buf.len().min(left);
            self.out.extend_from_slice(&buf[..n]);
            left -= n;
        }
        let kept = self.keeps_ahead - left;
        if kept != 0 {
            self.kept.push(kept);
        }
        Ok(kept)
    }

    fn seals_records_ahead(&self) -> bool {
        self.keeps_ahead != 0
    }
}
