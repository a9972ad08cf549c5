//! The record being built: slices of queued units, handed to the transport in one
//! vectored write, so that a unit's bytes are not copied once more on their way to TLS.
//!
//! Invariant: the whole chunk goes to the transport as one write call (rustls makes one
//! record of what one call gives it), except a head marked to be a record of its own
//! ([`Chunk::end_record_ahead`]), which the transport seals just before that call and
//! sends with it. A transport without vectored writes gets a copy of the chunk in one
//! buffer instead of one slice at a time.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;

use crate::Transport;

/// Parts whose slices are gathered on the stack rather than in a new `Vec`.
const STACK_SLICES: usize = 16;

#[derive(Debug, Default)]
pub(super) struct Chunk {
    parts: Vec<Bytes>,
    len: usize,
    /// The chunk in one buffer, for transports without vectored writes (reused).
    flat: Vec<u8>,
    /// The first `ahead` parts, `ahead_len` bytes, make a record of their own (0: the
    /// chunk is one record).
    ahead: usize,
    ahead_len: usize,
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
        self.ahead = 0;
        self.ahead_len = 0;
    }

    /// Bytes of the record being filled: those after a head of its own.
    pub(super) fn record_len(&self) -> usize {
        self.len - self.ahead_len
    }

    /// What the chunk holds so far becomes a record of its own, sent in the same write
    /// as the rest where the transport can ([`Transport::seal_record_ahead`]).
    pub(super) fn end_record_ahead(&mut self) {
        self.ahead = self.parts.len();
        self.ahead_len = self.len;
    }

    /// The TLS records the chunk makes with records of `payload` bytes at most.
    pub(super) fn records(&self, payload: usize) -> usize {
        usize::from(self.ahead != 0) + self.record_len().div_ceil(payload)
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

    /// Writes what is left of the chunk from byte `written` on, in one call (after sealing
    /// the head of its own, if any, at the start).
    pub(super) fn poll_write_from<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        written: usize,
    ) -> Poll<io::Result<usize>> {
        if written == 0 && self.ahead != 0 {
            return self.poll_write_with_head(cx, io);
        }
        self.poll_write_rest(cx, io, written)
    }

    /// Seals the head as a record of its own, then writes the rest: both leave in the
    /// rest's write. A transport that keeps nothing gets the whole chunk as one record.
    fn poll_write_with_head<T: Transport>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
    ) -> Poll<io::Result<usize>> {
        let head: Vec<IoSlice<'_>> = self.parts[..self.ahead]
            .iter()
            .map(|part| IoSlice::new(part))
            .collect();
        let kept = io.seal_record_ahead(&head)?;
        if kept == 0 {
            // One record after all.
            self.ahead = 0;
            self.ahead_len = 0;
            return self.poll_write_rest(cx, io, 0);
        }
        if kept < self.ahead_len {
            return Poll::Ready(Ok(kept));
        }
        match self.poll_write_rest(cx, io, kept) {
            Poll::Ready(Ok(n)) => Poll::Ready(Ok(kept + n)),
            // The kept record goes with the transport's flush.
            Poll::Pending => Poll::Ready(Ok(kept)),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
        }
    }

    fn poll_write_rest<T: AsyncWrite + Unpin>(
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

    /// A head of its own is kept by the transport and the rest written in the same call;
    /// a transport keeping part of it, nothing, or blocked on the rest still gets every
    /// byte once, in order.
    #[test]
    fn a_head_of_its_own_is_sealed_ahead_of_the_rest() {
        for (keeps, max) in [(100, 1000), (4, 1000), (0, 1000), (100, 0)] {
            let mut chunk = Chunk::default();
            chunk.push(Bytes::from_static(b"set"));
            chunk.push(Bytes::from_static(b"head"));
            chunk.end_record_ahead();
            chunk.push(Bytes::from_static(b"data"));
            assert_eq!((chunk.record_len(), chunk.records(1000)), (4, 2));
            let mut sink = LimitedSink::with_limits(vec![max]);
            sink.keeps_ahead = keeps;
            sink.vectored = true;
            write_all(&mut chunk, &mut sink);
            assert_eq!(sink.out, b"setheaddata", "keeps {keeps}, max {max}");
            match (keeps, max) {
                (100, 1000) => assert_eq!((&sink.kept[..], &sink.writes[..]), (&[7][..], &[4][..])),
                (4, _) => assert_eq!(sink.kept, [4]),
                (0, _) => assert_eq!(sink.writes, [11], "one record, one write"),
                _ => assert_eq!(sink.kept, [7], "kept before the blocked write"),
            }
            let records = if keeps == 0 { 1 } else { 2 };
            assert_eq!(chunk.records(1000), records, "keeps {keeps}");
            chunk.clear();
            assert_eq!(chunk.records(1000), 0);
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
