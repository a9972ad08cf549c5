//! HTTP/2 frame headers (RFC 9113 §4.1): just enough to find frame boundaries,
//! classify frames and read the few payloads the observers care about.

mod client_frames;
pub(crate) use client_frames::{ClientFrames, FrameSink, Verdict};

/// Length of the fixed frame header.
pub(crate) const HEADER_LEN: usize = 9;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PUSH_PROMISE: u8 = 0x5;
pub(crate) const CONTINUATION: u8 = 0x9;
pub(crate) const PRIORITY_UPDATE: u8 = 0x10;

pub(crate) const FLAG_END_STREAM: u8 = 0x1;
pub(crate) const FLAG_ACK: u8 = 0x1;
pub(crate) const FLAG_END_HEADERS: u8 = 0x4;
pub(crate) const FLAG_PADDED: u8 = 0x8;
pub(crate) const FLAG_PRIORITY: u8 = 0x20;

pub(crate) const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 0x9;

/// A parsed 9-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) length: u32,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream_id: u32,
}

impl FrameHeader {
    /// Parses the first nine bytes of `bytes`; `None` if there are fewer.
    pub(crate) fn parse(bytes: &[u8]) -> Option<FrameHeader> {
        let h: &[u8; HEADER_LEN] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
        Some(FrameHeader {
            length: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream_id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// Serializes the header.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let l = self.length.to_be_bytes();
        let s = self.stream_id.to_be_bytes();
        [
            l[1], l[2], l[3], self.kind, self.flags, s[0], s[1], s[2], s[3],
        ]
    }

    /// Total size on the wire, header included.
    pub(crate) fn frame_len(&self) -> usize {
        HEADER_LEN + self.length as usize
    }

    /// True for frames that carry (part of) an HPACK header block.
    pub(crate) fn is_header_block(&self) -> bool {
        matches!(self.kind, HEADERS | PUSH_PROMISE | CONTINUATION)
    }

    pub(crate) fn end_headers(&self) -> bool {
        self.flags & FLAG_END_HEADERS != 0
    }

    /// END_STREAM is only meaningful on DATA and HEADERS.
    pub(crate) fn end_stream(&self) -> bool {
        matches!(self.kind, DATA | HEADERS) && self.flags & FLAG_END_STREAM != 0
    }
}

/// The header block fragment inside a HEADERS, PUSH_PROMISE or CONTINUATION
/// payload, without padding and priority fields. `None` when the payload is
/// shorter than its own padding/priority fields say (a malformed frame).
pub(crate) fn header_block_fragment<'a>(
    header: &FrameHeader,
    payload: &'a [u8],
) -> Option<&'a [u8]> {
    let mut body = payload;
    let mut pad = 0usize;
    if matches!(header.kind, HEADERS | PUSH_PROMISE) && header.flags & FLAG_PADDED != 0 {
        pad = *body.first()? as usize;
        body = &body[1..];
    }
    if header.kind == HEADERS && header.flags & FLAG_PRIORITY != 0 {
        body = body.get(5..)?;
    }
    if header.kind == PUSH_PROMISE {
        body = body.get(4..)?;
    }
    body.get(..body.len().checked_sub(pad)?)
}

/// Iterates over the (identifier, value) pairs of a SETTINGS payload.
pub(crate) fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(6).map(|s| {
        (
            u16::from_be_bytes([s[0], s[1]]),
            u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
        )
    })
}

/// A whole frame as it goes on the wire: its header, then `payload` (input for tests).
#[cfg(test)]
pub(crate) fn encoded_frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = FrameHeader {
        length: payload.len() as u32,
        kind,
        flags,
        stream_id,
    }
    .encode()
    .to_vec();
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = FrameHeader {
            length: 16384,
            kind: DATA,
            flags: FLAG_END_STREAM,
            stream_id: 0x7fff_ffff,
        };
        assert_eq!(FrameHeader::parse(&h.encode()), Some(h));
        assert_eq!(h.frame_len(), 16393);
        assert!(h.end_stream());
        assert_eq!(FrameHeader::parse(&[0; 8]), None);
    }

    #[test]
    fn reserved_bit_is_masked() {
        let mut raw = FrameHeader {
            length: 0,
            kind: 0x6,
            flags: 0,
            stream_id: 1,
        }
        .encode();
        raw[5] |= 0x80;
        assert_eq!(FrameHeader::parse(&raw).unwrap().stream_id, 1);
    }

    #[test]
    fn fragment_strips_padding_and_priority() {
        let h = FrameHeader {
            length: 0,
            kind: HEADERS,
            flags: FLAG_PADDED | FLAG_PRIORITY,
            stream_id: 1,
        };
        let payload = [2, 0, 0, 0, 0, 16, 0xaa, 0xbb, 0, 0];
        assert_eq!(header_block_fragment(&h, &payload), Some(&[0xaa, 0xbb][..]));
        // Padding longer than the payload is malformed, not a panic.
        assert_eq!(header_block_fragment(&h, &[200, 0, 0, 0, 0, 0]), None);
        assert_eq!(header_block_fragment(&h, &[]), None);
    }

    #[test]
    fn settings_pairs() {
        let p = [0, 1, 0, 0, 0x10, 0, 0, 9, 0, 0, 0, 1, 0xff];
        let v: Vec<_> = settings(&p).collect();
        assert_eq!(v, vec![(1, 4096), (9, 1)]);
    }
}
