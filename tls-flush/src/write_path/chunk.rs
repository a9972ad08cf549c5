//! The record being built: slices of queued units, handed to the transport in one
//! vectored write, so that a unit's bytes are not copied once more on their way to TLS.
//!
//! Invariant: the whole chunk goes to the transport as one write call (rustls makes one
//! record of what one call gives it). A transport without vectored writes gets a copy of
//! the chunk in one buffer instead of one slice at a time.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;

/// Parts whose slices are gathered on the stack rather than in a new `Vec`.
const STACK_SLICES: usize = 16;

#[derive(Debug, Default)]
pub(super) struct Chunk {
    parts: Vec<Bytes>,
    len: usize,
    /// The chunk in one buffer, for transports without vectored writes (reused).
    flat: Vec<u8>,
}

impl Chunk {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        self.parts.push(bytes);
    }

    pub(super) fn clear(&mut self) {
        self.parts.clear();
        self.flat.clear();
        self.len = 0;
    }

    /// True while the chunk's buffers are allocated.
    pub(super) fn holds_memory(&self) -> bool {
        self.parts.capacity() != 0 || self.flat.capacity() != 0
    }

    /// Gives back the memory of an empty chunk (an idle connection's); no-op otherwise.
    pub(super) fn release(&mut self) {
        if self.is_empty() {
            self.parts = Vec::new();
            self.flat = Vec::new();
        }
    }

    /// Writes what is left of the chunk from byte `written` on, in one call.
    pub(super) fn poll_write_from<T: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        written: usize,
    ) -> Poll<io::Result<usize>> {
        if self.parts.len() > 1 && !io.is_write_vectored() {
            if self.flat.is_empty() {
                for part in &self.parts {
                    self.flat.extend_from_slice(part);
                }
            }
            return Pin::new(io).poll_write(cx, &self.flat[written..]);
        }
        let mut skip = written;
        let rest = self.parts.iter().filter_map(|part| {
            if skip >= part.len() {
                skip -= part.len();
                return None;
            }
            let slice = IoSlice::new(&part[skip..]);
            skip = 0;
            Some(slice)
        });
        // Most records have a few parts: their slices stay on the stack (this runs for
        // every record, so an allocation here shows in the per-request cost).
        if self.parts.len() <= STACK_SLICES {
            let mut slices = [IoSlice::new(&[]); STACK_SLICES];
            let mut n = 0;
            for slice in rest {
                slices[n] = slice;
                n += 1;
            }
            return Pin::new(io).poll_write_vectored(cx, &slices[..n]);
        }
        let slices: Vec<IoSlice<'_>> = rest.collect();
        Pin::new(io).poll_write_vectored(cx, &slices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_io::LimitedSink;

    fn write_all(chunk: &mut Chunk, sink: &mut LimitedSink) {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut written = 0;
        while written < chunk.len() {
            match chunk.poll_write_from(&mut cx, sink, written) {
                Poll::Ready(Ok(n)) => written += n,
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_chunk_of_more_parts_than_the_stack_holds_is_written_in_order() {
        for parts in [
            STACK_SLICES - 1,
            STACK_SLICES,
            STACK_SLICES + 1,
            3 * STACK_SLICES,
        ] {
            for max in [5, 1000] {
                let mut chunk = Chunk::default();
                let mut expected = Vec::new();
                for i in 0..parts {
                    let part = vec![i as u8; 1 + i % 4];
                    expected.extend_from_slice(&part);
                    chunk.push(Bytes::from(part));
                }
                let mut sink = LimitedSink::capped(max, true);
                write_all(&mut chunk, &mut sink);
                assert_eq!(sink.out, expected, "{parts} parts, max {max}");
                if max >= expected.len() {
                    assert_eq!(sink.writes.len(), 1, "one call for the whole chunk");
                }
            }
        }
    }

    #[test]
    fn partial_writes_resume_inside_a_part_and_keep_the_bytes_in_order() {
        for vectored in [true, false] {
            for max in [1, 3, 7, 1000] {
                let mut chunk = Chunk::default();
                chunk.push(Bytes::from_static(b"abc"));
                chunk.push(Bytes::new());
                chunk.push(Bytes::from_static(b"defgh"));
                chunk.push(Bytes::from_static(b"ij"));
                let mut sink = LimitedSink::capped(max, vectored);
                write_all(&mut chunk, &mut sink);
                assert_eq!(sink.out, b"abcdefghij", "vectored {vectored}, max {max}");
                if max >= 10 {
                    assert_eq!(sink.writes.len(), 1, "one call for the whole chunk");
                }
                chunk.clear();
                assert!(chunk.is_empty());
            }
        }
    }
}
