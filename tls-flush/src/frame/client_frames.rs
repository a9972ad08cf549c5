//! [`ClientFrames`]: the bytes a client sends, cut into HTTP/2 frames as they arrive, a
//! piece at a time, for the readers that follow them without changing them (the read-side
//! observer, the early requests' keys).
//!
//! Invariants: a payload is copied only when its reader asks to keep it (DATA passes
//! uncopied), at most one frame's payload is held at a time, and nothing after a preface
//! that does not match is examined.

use super::{FrameHeader, CLIENT_PREFACE, HEADER_LEN};

/// What [`ClientFrames`] tells its reader, frame by frame.
pub(crate) trait FrameSink {
    /// A frame's header arrived: whether to keep (copy) its payload.
    fn frame_started(&mut self, header: &FrameHeader) -> bool;
    /// The frame's payload arrived: all of it when it was kept, empty otherwise.
    fn frame_ended(&mut self, header: FrameHeader, payload: &[u8], kept: bool);
}

/// Whether the bytes are HTTP/2, as far as the preface tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Still reading the client preface.
    Undecided,
    /// The preface matched: this is HTTP/2.
    Http2,
    /// Not HTTP/2: bytes are no longer examined.
    NotHttp2,
}

#[derive(Debug)]
enum State {
    Preface {
        matched: usize,
    },
    Header {
        buf: [u8; HEADER_LEN],
        len: usize,
    },
    /// Reading a payload: `keep` means copy it.
    Payload {
        header: FrameHeader,
        remaining: usize,
        keep: bool,
    },
    NotHttp2,
}

impl State {
    fn next_header() -> Self {
        State::Header {
            buf: [0; HEADER_LEN],
            len: 0,
        }
    }
}

/// Cuts one connection's client-to-server bytes into frames.
#[derive(Debug)]
pub(crate) struct ClientFrames {
    state: State,
    payload: Vec<u8>,
}

impl Default for ClientFrames {
    fn default() -> Self {
        ClientFrames {
            state: State::Preface { matched: 0 },
            payload: Vec::new(),
        }
    }
}

impl ClientFrames {
    /// What the preface said so far.
    pub(crate) fn verdict(&self) -> Verdict {
        match self.state {
            State::Preface { .. } => Verdict::Undecided,
            State::NotHttp2 => Verdict::NotHttp2,
            _ => Verdict::Http2,
        }
    }

    /// The start of a frame header the bytes so far cut short (empty between frames).
    // Only the early requests' keys (feature `serve`) ask.
    #[cfg_attr(not(feature = "serve"), allow(dead_code))]
    pub(crate) fn partial_header(&self) -> &[u8] {
        match &self.state {
            State::Header { buf, len } => &buf[..*len],
            _ => &[],
        }
    }

    /// Reads the next bytes the client sent, in order, telling `sink` of each frame.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], sink: &mut impl FrameSink) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::NotHttp2 => return,
                State::Preface { matched } => {
                    let want = CLIENT_PREFACE.get(*matched..).unwrap_or_default();
                    let n = want.len().min(bytes.len());
                    if bytes[..n] != want[..n] {
                        self.state = State::NotHttp2;
                        return;
                    }
                    *matched += n;
                    bytes = &bytes[n..];
                    if *matched == CLIENT_PREFACE.len() {
                        self.state = State::next_header();
                    }
                }
                State::Header { buf, len } => {
                    let n = (HEADER_LEN - *len).min(bytes.len());
                    buf[*len..*len + n].copy_from_slice(&bytes[..n]);
                    *len += n;
                    bytes = &bytes[n..];
                    if let Some(header) = FrameHeader::parse(&buf[..*len]) {
                        let keep = sink.frame_started(&header);
                        self.payload.clear();
                        self.state = State::Payload {
                            header,
                            remaining: header.length as usize,
                            keep,
                        };
                        if header.length == 0 {
                            self.end_frame(sink);
                        }
                    }
                }
                State::Payload {
                    remaining, keep, ..
                } => {
                    let n = (*remaining).min(bytes.len());
                    if *keep {
                        self.payload.extend_from_slice(&bytes[..n]);
                    }
                    *remaining -= n;
                    bytes = &bytes[n..];
                    if *remaining == 0 {
                        self.end_frame(sink);
                    }
                }
            }
        }
    }

    fn end_frame(&mut self, sink: &mut impl FrameSink) {
        let State::Payload { header, keep, .. } =
            std::mem::replace(&mut self.state, State::next_header())
        else {
            return;
        };
        let payload: &[u8] = if keep { &self.payload } else { &[] };
        sink.frame_ended(header, payload, keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encoded_frame, DATA, HEADERS};

    /// Records what it is told; keeps HEADERS payloads only.
    #[derive(Default)]
    struct Seen(Vec<(u8, Vec<u8>, bool)>);

    impl FrameSink for Seen {
        fn frame_started(&mut self, header: &FrameHeader) -> bool {
            header.kind == HEADERS
        }
        fn frame_ended(&mut self, header: FrameHeader, payload: &[u8], kept: bool) {
            self.0.push((header.kind, payload.to_vec(), kept));
        }
    }

    #[test]
    fn frames_byte_by_byte_keep_only_what_the_reader_asks_for() {
        let mut wire = CLIENT_PREFACE.to_vec();
        wire.extend(encoded_frame(HEADERS, 0, 1, b"abc"));
        wire.extend(encoded_frame(DATA, 0, 1, &[7; 100]));
        wire.extend(encoded_frame(HEADERS, 0, 3, b""));
        let (mut frames, mut seen) = (ClientFrames::default(), Seen::default());
        for (i, b) in wire.iter().enumerate() {
            frames.feed(std::slice::from_ref(b), &mut seen);
            let expected = if i + 1 < CLIENT_PREFACE.len() {
                Verdict::Undecided
            } else {
                Verdict::Http2
            };
            assert_eq!(frames.verdict(), expected, "byte {i}");
        }
        assert_eq!(
            seen.0,
            [
                (HEADERS, b"abc".to_vec(), true),
                (DATA, vec![], false),
                (HEADERS, vec![], true)
            ]
        );
        assert!(frames.partial_header().is_empty());
        frames.feed(&[0, 0], &mut seen);
        assert_eq!(frames.partial_header(), [0, 0]);
    }

    #[test]
    fn a_preface_that_does_not_match_stops_the_reading() {
        let (mut frames, mut seen) = (ClientFrames::default(), Seen::default());
        frames.feed(b"GET / HTTP/1.1\r\n", &mut seen);
        assert_eq!(frames.verdict(), Verdict::NotHttp2);
        frames.feed(&encoded_frame(HEADERS, 0, 1, b"abc"), &mut seen);
        assert!(seen.0.is_empty());
    }
}
