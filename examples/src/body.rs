//! The deterministic body pattern and a lazy streaming body that produces it.
//!
//! Every body byte at offset `i` is `(i % 251) as u8`. 251 is prime and not a power of two,
//! so a dropped, duplicated or reordered chunk shows up in a byte-by-byte check.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Size of the chunks a [`PatternBody`] yields: 16 KiB, one full HTTP/2 DATA frame.
pub const CHUNK_SIZE: usize = 16 * 1024;

/// Period of the pattern.
const PERIOD: usize = 251;

/// The pattern from offset 0 for one chunk plus one period, so that any chunk starting at
/// any offset is a zero-copy slice of it.
static PATTERN: [u8; CHUNK_SIZE + PERIOD] = {
    let mut a = [0u8; CHUNK_SIZE + PERIOD];
    let mut i = 0;
    while i < a.len() {
        a[i] = (i % PERIOD) as u8;
        i += 1;
    }
    a
};

/// The body byte at offset `i`: `(i % 251) as u8`.
pub fn pattern_byte(i: u64) -> u8 {
    (i % PERIOD as u64) as u8
}

/// The pattern bytes for offsets `offset..offset + len`, with `len <= CHUNK_SIZE`,
/// as a zero-copy slice of a static buffer.
///
/// # Panics
///
/// If `len > CHUNK_SIZE`.
pub fn pattern_chunk(offset: u64, len: usize) -> Bytes {
    assert!(len <= CHUNK_SIZE, "pattern_chunk: len {len} > {CHUNK_SIZE}");
    let start = (offset % PERIOD as u64) as usize;
    Bytes::from_static(&PATTERN[start..start + len])
}

/// A response body of `len` pattern bytes, produced lazily in [`CHUNK_SIZE`] chunks.
///
/// Nothing is allocated: each chunk is a slice of a static buffer. The exact length is
/// reported through [`Body::size_hint`], so servers send `content-length`.
#[derive(Debug, Clone)]
pub struct PatternBody {
    offset: u64,
    end: u64,
}

impl PatternBody {
    /// A body of `len` bytes starting at pattern offset 0.
    pub fn new(len: u64) -> Self {
        Self {
            offset: 0,
            end: len,
        }
    }

    /// Bytes not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.end - self.offset
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let remaining = self.remaining();
        if remaining == 0 {
            return Poll::Ready(None);
        }
        let len = remaining.min(CHUNK_SIZE as u64) as usize;
        let chunk = pattern_chunk(self.offset, len);
        self.offset += len as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn collect(len: u64) -> (Vec<usize>, Vec<u8>) {
        let mut body = PatternBody::new(len);
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            sizes.push(data.len());
            all.extend_from_slice(&data);
        }
        (sizes, all)
    }

    #[tokio::test]
    async fn chunks_and_bytes() {
        for len in [0u64, 1, 250, 251, 4096, 16384, 16385, 100_000, 1 << 20] {
            let (sizes, all) = collect(len).await;
            assert_eq!(all.len() as u64, len);
            assert!(sizes.iter().all(|&s| s > 0 && s <= CHUNK_SIZE));
            // All chunks but the last are full.
            if let Some((_, init)) = sizes.split_last() {
                assert!(init.iter().all(|&s| s == CHUNK_SIZE));
            }
            for (i, b) in all.iter().enumerate() {
                assert_eq!(*b, pattern_byte(i as u64), "len {len} offset {i}");
            }
        }
    }

    #[test]
    fn size_hint_is_exact() {
        let body = PatternBody::new(12345);
        assert_eq!(body.size_hint().exact(), Some(12345));
        assert!(!body.is_end_stream());
        assert!(PatternBody::new(0).is_end_stream());
    }

    #[test]
    fn chunk_at_any_offset() {
        for offset in [0u64, 1, 250, 251, 252, 1 << 40] {
            let c = pattern_chunk(offset, CHUNK_SIZE);
            for (k, b) in c.iter().enumerate() {
                assert_eq!(*b, pattern_byte(offset + k as u64));
            }
        }
    }
}
