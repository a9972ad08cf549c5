//! Follows the bytes an HTTP/2 client writes first (preface, SETTINGS, WINDOW_UPDATE, the
//! first request) far enough to say when its first request has been written.
//!
//! Invariants: it only reads the bytes it is given (they are never changed); the caller
//! never gives it more than its bound, so the header block it copies is bounded too; any
//! input, however odd, yields a verdict and never a panic.

use crate::frame::{self, FrameHeader, CLIENT_PREFACE, CONTINUATION, DATA, HEADERS};

/// What the held bytes say so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// Not an HTTP/2 client preface: pass everything through.
    NotHttp2,
    /// The first request is not complete yet.
    Incomplete,
    /// The first request's header block ended and the request ended (END_STREAM).
    RequestComplete,
}

/// The scanner's state across writes; `held` only ever grows between calls.
#[derive(Debug, Default)]
pub(crate) struct Scanner {
    /// Where the next frame starts in the held bytes (0 until the preface is complete).
    pos: usize,
    /// The first request's stream, once its HEADERS frame was seen.
    first_stream: Option<u32>,
    /// Its header block fragments, joined.
    block: Vec<u8>,
    /// Its `:method`, once the header block is complete (`None` if it did not decode).
    method: Option<Vec<u8>>,
    headers_done: bool,
    end_stream: bool,
    /// A header block fragment that does not fit its frame: nothing more is learned.
    malformed: bool,
}

impl Scanner {
    /// The first request's method, once its header block is complete and decoded.
    pub(crate) fn method(&self) -> Option<&[u8]> {
        self.method.as_deref()
    }

    /// Reads the frames of `held` that are complete and not read yet.
    pub(crate) fn scan(&mut self, held: &[u8]) -> Scan {
        if self.pos == 0 {
            let n = held.len().min(CLIENT_PREFACE.len());
            if held[..n] != CLIENT_PREFACE[..n] {
                return Scan::NotHttp2;
            }
            if n < CLIENT_PREFACE.len() {
                return Scan::Incomplete;
            }
            self.pos = CLIENT_PREFACE.len();
        }
        while !(self.malformed || self.headers_done && self.end_stream) {
            let rest = held.get(self.pos..).unwrap_or_default();
            let Some(header) = FrameHeader::parse(rest) else {
                break;
            };
            let Some(payload) = rest.get(frame::HEADER_LEN..header.frame_len()) else {
                break;
            };
            self.pos += header.frame_len();
            self.frame(&header, payload);
        }
        if self.headers_done && self.end_stream {
            Scan::RequestComplete
        } else {
            Scan::Incomplete
        }
    }

    fn frame(&mut self, header: &FrameHeader, payload: &[u8]) {
        let first = match self.first_stream {
            None if header.kind == HEADERS && header.stream_id != 0 => {
                self.first_stream = Some(header.stream_id);
                true
            }
            Some(id) => id == header.stream_id,
            None => false,
        };
        if !first {
            return;
        }
        match header.kind {
            HEADERS | CONTINUATION if !self.headers_done => {
                if header.kind == HEADERS {
                    self.end_stream = header.end_stream();
                }
                match frame::header_block_fragment(header, payload) {
                    Some(fragment) => self.block.extend_from_slice(fragment),
                    None => {
                        self.malformed = true;
                        return;
                    }
                }
                if header.end_headers() {
                    self.headers_done = true;
                    self.method = crate::hpack::first_request_method(&self.block);
                    self.block = Vec::new();
                }
            }
            DATA if header.end_stream() => self.end_stream = true,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encoded_frame, FLAG_END_HEADERS, FLAG_END_STREAM, SETTINGS};

    /// `:method GET` (static index 2), `:path /` (4), `:scheme https` (7).
    const GET_BLOCK: &[u8] = &[0x82, 0x84, 0x87];
    /// `:method POST` (static index 3).
    const POST_BLOCK: &[u8] = &[0x83, 0x84, 0x87];

    fn flight(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut out = CLIENT_PREFACE.to_vec();
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }

    #[test]
    fn get_complete_at_end_headers_with_end_stream() {
        let bytes = flight(&[
            encoded_frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0]),
            encoded_frame(HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 1, GET_BLOCK),
        ]);
        let mut s = Scanner::default();
        // Fed one byte more at a time, it is incomplete until the last byte.
        for end in 0..bytes.len() {
            assert_eq!(s.scan(&bytes[..end]), Scan::Incomplete, "at {end}");
        }
        assert_eq!(s.scan(&bytes), Scan::RequestComplete);
        assert_eq!(s.method(), Some(&b"GET"[..]));
    }

    #[test]
    fn post_waits_for_its_body_and_continuation() {
        let mut s = Scanner::default();
        let head = flight(&[
            encoded_frame(HEADERS, 0, 1, &POST_BLOCK[..1]),
            encoded_frame(CONTINUATION, FLAG_END_HEADERS, 1, &POST_BLOCK[1..]),
        ]);
        assert_eq!(s.scan(&head), Scan::Incomplete);
        assert_eq!(s.method(), Some(&b"POST"[..]));
        let mut all = head.clone();
        all.extend(encoded_frame(DATA, 0, 1, b"abc"));
        all.extend(encoded_frame(DATA, FLAG_END_STREAM, 3, b""));
        assert_eq!(
            s.scan(&all),
            Scan::Incomplete,
            "another stream's END_STREAM"
        );
        all.extend(encoded_frame(DATA, FLAG_END_STREAM, 1, b"d"));
        assert_eq!(s.scan(&all), Scan::RequestComplete);
    }

    #[test]
    fn not_a_preface() {
        assert_eq!(
            Scanner::default().scan(b"GET / HTTP/1.1\r\n"),
            Scan::NotHttp2
        );
        assert_eq!(Scanner::default().scan(b"PRI * HTTP/1.1"), Scan::NotHttp2);
        assert_eq!(Scanner::default().scan(b"PRI"), Scan::Incomplete);
        assert_eq!(Scanner::default().scan(b""), Scan::Incomplete);
    }

    #[test]
    fn malformed_and_undecodable_blocks_never_complete_early() {
        // Padding longer than the payload: nothing more is learned.
        let bad = flight(&[encoded_frame(
            HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM | frame::FLAG_PADDED,
            1,
            &[200, 0x82],
        )]);
        let mut s = Scanner::default();
        assert_eq!(s.scan(&bad), Scan::Incomplete);
        assert_eq!(s.method(), None);
        // A block that does not decode (index 0) completes without a method.
        let zero = flight(&[encoded_frame(
            HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM,
            1,
            &[0x80],
        )]);
        let mut s = Scanner::default();
        assert_eq!(s.scan(&zero), Scan::RequestComplete);
        assert_eq!(s.method(), None);
    }
}
