//! Watching the bytes a wrapped stream reads: [`poll_read_observed`], for the tests' stream
//! wrappers that log or time what arrives.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Reads from `io` into `buf`, then, when the read is `Ready(Ok)`, hands `arrived` the bytes
/// it added to `buf` (none at EOF).
pub fn poll_read_observed<T: AsyncRead + Unpin>(
    io: &mut T,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    arrived: impl FnOnce(&[u8]),
) -> Poll<io::Result<()>> {
    let before = buf.filled().len();
    let res = Pin::new(io).poll_read(cx, buf);
    if let Poll::Ready(Ok(())) = res {
        arrived(&buf.filled()[before..]);
    }
    res
}
