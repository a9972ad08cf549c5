//! A transport for benchmarks, where the fault-injecting one would measure itself: [`Sink`]
//! accepts and counts everything at once, or, built with [`Sink::gated`], refuses everything
//! (writes and write readiness `Pending`) while its gate is closed. It never wakes a task:
//! callers poll it with a no-op waker, or in a runtime that never waits on it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tls_flush::Transport;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Discards what it is given and counts it; reads are `Pending` forever. See the module
/// docs.
#[derive(Debug, Default)]
pub struct Sink {
    /// Bytes written so far.
    pub bytes: u64,
    /// While this is set, writes and write readiness are `Pending`.
    gate: Option<Arc<AtomicBool>>,
}

impl Sink {
    /// A sink that starts closed, and the flag that opens it (`store(false)`). It reports
    /// ALPN `h2`, as a TLS stream that negotiated HTTP/2 does; a plain sink reports none and
    /// the wrapper decides from the first bytes.
    pub fn gated() -> (Sink, Arc<AtomicBool>) {
        let closed = Arc::new(AtomicBool::new(true));
        let sink = Sink {
            bytes: 0,
            gate: Some(Arc::clone(&closed)),
        };
        (sink, closed)
    }

    fn is_closed(&self) -> bool {
        self.gate
            .as_ref()
            .is_some_and(|g| g.load(Ordering::Relaxed))
    }
}

impl AsyncRead for Sink {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

impl AsyncWrite for Sink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.is_closed() {
            return Poll::Pending;
        }
        self.bytes += buf.len() as u64;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Transport for Sink {
    fn alpn_protocol(&self) -> Option<&[u8]> {
        self.gate.is_some().then_some(b"h2")
    }

    fn poll_write_ready(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.is_closed() {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }
}
