//! The HTTP/2 frame model: frame type and flag constants, [`Frame`] (encode, parse, print
//! without payloads) and builders for the frames the tests and fuzz cases write (SETTINGS,
//! PRIORITY_UPDATE, DATA with distinctive payloads, header blocks split into HEADERS and
//! CONTINUATIONs, a response's HEADERS, a client's preface and requests).

use std::fmt;

use crate::hpack::{request_block, response_block};

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const PRIORITY_UPDATE: u8 = 0x10;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const HEADER_LEN: usize = 9;
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_NO_RFC7540_PRIORITIES = 1, as the wrapper appends it to the first SETTINGS.
pub const NO_RFC7540_PRIORITIES: [u8; 6] = [0, 9, 0, 0, 0, 1];

/// `FlushConfig`'s documented default hard limit (1 MiB).
pub const DEFAULT_HARD_LIMIT: usize = 1024 * 1024;
/// The largest TLS record payload.
pub const MAX_RECORD: usize = 16384;

/// One HTTP/2 frame with its payload; `raw_stream` keeps the reserved bit as written.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame {
    pub raw_stream: u32,
    pub kind: u8,
    pub flags: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(kind: u8, flags: u8, stream: u32, payload: impl Into<Vec<u8>>) -> Self {
        Frame {
            raw_stream: stream,
            kind,
            flags,
            payload: payload.into(),
        }
    }

    /// The stream id, reserved bit cleared.
    pub fn stream(&self) -> u32 {
        self.raw_stream & 0x7fff_ffff
    }

    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let len = u32::try_from(self.payload.len()).expect("small frame");
        assert!(len < 1 << 24, "frame payload too long");
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.raw_stream.to_be_bytes());
        out.extend_from_slice(&self.payload);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.wire_len());
        self.encode_into(&mut out);
        out
    }

    pub fn starts_header_block(&self) -> bool {
        matches!(self.kind, HEADERS | PUSH_PROMISE)
    }

    pub fn is_header_frame(&self) -> bool {
        matches!(self.kind, HEADERS | PUSH_PROMISE | CONTINUATION)
    }

    pub fn end_headers(&self) -> bool {
        self.flags & END_HEADERS != 0
    }

    pub fn is_data(&self) -> bool {
        self.kind == DATA
    }

    pub fn is_settings(&self) -> bool {
        self.kind == SETTINGS
    }

    /// END_STREAM on DATA/HEADERS, or RST_STREAM (the write side closes such streams).
    pub fn ends_stream(&self) -> bool {
        (matches!(self.kind, DATA | HEADERS) && self.flags & END_STREAM != 0)
            || self.kind == RST_STREAM
    }
}

/// Frames are printed without their payloads, so that failures stay readable.
impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DATA => "DATA",
            HEADERS => "HEADERS",
            PRIORITY => "PRIORITY",
            RST_STREAM => "RST_STREAM",
            SETTINGS => "SETTINGS",
            PUSH_PROMISE => "PUSH_PROMISE",
            PING => "PING",
            GOAWAY => "GOAWAY",
            WINDOW_UPDATE => "WINDOW_UPDATE",
            CONTINUATION => "CONTINUATION",
            PRIORITY_UPDATE => "PRIORITY_UPDATE",
            _ => "UNKNOWN",
        };
        write!(
            f,
            "{kind}[{:#x}](s={}{}, flags={:#x}, len={})",
            self.kind,
            self.stream(),
            if self.raw_stream & 0x8000_0000 != 0 {
                "+R"
            } else {
                ""
            },
            self.flags,
            self.payload.len()
        )
    }
}

pub fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frames.iter().map(Frame::wire_len).sum());
    for f in frames {
        f.encode_into(&mut out);
    }
    out
}

/// Parses `bytes` as whole frames; returns them and the length of an incomplete tail.
pub fn parse_frames_lenient(bytes: &[u8]) -> (Vec<Frame>, usize) {
    let mut frames = Vec::new();
    let mut rest = bytes;
    while rest.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < HEADER_LEN + len {
            break;
        }
        let raw_stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        frames.push(Frame::new(
            rest[3],
            rest[4],
            raw_stream,
            &rest[HEADER_LEN..HEADER_LEN + len],
        ));
        rest = &rest[HEADER_LEN + len..];
    }
    (frames, rest.len())
}

/// Parses `bytes` as a sequence of whole frames; anything left over is an error.
pub fn parse_frames(bytes: &[u8]) -> Result<Vec<Frame>, String> {
    let (frames, tail) = parse_frames_lenient(bytes);
    if tail != 0 {
        return Err(format!(
            "output ends with {tail} bytes of an incomplete frame after {} whole frames",
            frames.len()
        ));
    }
    Ok(frames)
}

// ---------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------

/// A SETTINGS frame (`ACK` in `flags` for an acknowledgement) with these settings.
pub fn settings_frame(flags: u8, list: &[(u16, u32)]) -> Frame {
    let mut payload = Vec::new();
    for (id, value) in list {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    Frame::new(SETTINGS, flags, 0, payload)
}

/// A well-formed PRIORITY_UPDATE (on stream 0) for `stream`.
pub fn priority_update(stream: u32, value: &str) -> Frame {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend_from_slice(value.as_bytes());
    Frame::new(PRIORITY_UPDATE, 0, 0, payload)
}

/// Distinctive DATA content: differs per stream, per frame and per offset.
pub fn data_payload(stream: u32, frame_index: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| ((stream as usize * 131 + frame_index * 17 + j) % 251) as u8)
        .collect()
}

/// DATA frame number `frame_index` of `stream`, with a [`data_payload`].
pub fn data(stream: u32, frame_index: usize, len: usize, end_stream: bool) -> Frame {
    let flags = if end_stream { END_STREAM } else { 0 };
    Frame::new(DATA, flags, stream, data_payload(stream, frame_index, len))
}

/// A header block split into `parts` frames: HEADERS then CONTINUATIONs, END_HEADERS on the
/// last one.
pub fn header_block(stream: u32, block: &[u8], parts: usize, end_stream: bool) -> Vec<Frame> {
    let parts = parts.max(1);
    (0..parts)
        .map(|i| {
            let piece = &block[i * block.len() / parts..(i + 1) * block.len() / parts];
            let mut flags = if i + 1 == parts { END_HEADERS } else { 0 };
            if i == 0 {
                if end_stream {
                    flags |= END_STREAM;
                }
                Frame::new(HEADERS, flags, stream, piece)
            } else {
                Frame::new(CONTINUATION, flags, stream, piece)
            }
        })
        .collect()
}

/// A response's header block in one HEADERS frame (`:status 200`, END_HEADERS) on `stream`,
/// without a `priority` header: the response follows the client's signal.
pub fn response_headers(stream: u32) -> Frame {
    Frame::new(HEADERS, END_HEADERS, stream, response_block(None, 0))
}

/// [`response_headers`] carrying the `priority` response header `priority`: the
/// application pinned the response's priority (as `tower_priority::PriorityLayer` does).
pub fn pinned_response_headers(stream: u32, priority: &str) -> Frame {
    Frame::new(
        HEADERS,
        END_HEADERS,
        stream,
        response_block(Some(priority), 0),
    )
}

/// A client's bytes: the preface, an empty SETTINGS, then one request (HEADERS with
/// END_STREAM) per `(stream, priority)`, carrying a `priority` header when given.
pub fn client_with_requests(requests: &[(u32, Option<&str>)]) -> Vec<u8> {
    let mut bytes = PREFACE.to_vec();
    settings_frame(0, &[]).encode_into(&mut bytes);
    for &(id, priority) in requests {
        Frame::new(
            HEADERS,
            END_HEADERS | END_STREAM,
            id,
            request_block(priority.map(str::as_bytes)),
        )
        .encode_into(&mut bytes);
    }
    bytes
}
