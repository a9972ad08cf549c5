//! Cuts h2's writes into frames. h2 may split a frame across writes (or put many frames in
//! one); this reassembles them, and stops at each frame header so the caller can decide
//! whether to take the frame now or leave it in h2's own buffer.
//!
//! A frame the caller chooses to stream (one too large to hold whole: a client may let h2
//! write DATA frames of up to 16 MiB) comes out in pieces of at most [`PIECE`] wire bytes,
//! the first starting with the frame header; the concatenated pieces are the frame.

use bytes::{Bytes, BytesMut};

use crate::config::MAX_RECORD_PAYLOAD;
use crate::frame::{FrameHeader, HEADER_LEN};

/// Wire bytes per piece of a streamed frame: one full record.
pub(crate) const PIECE: usize = MAX_RECORD_PAYLOAD;

/// Incremental frame reassembly for one direction.
#[derive(Debug, Default)]
pub(crate) struct FrameAssembler {
    header: [u8; HEADER_LEN],
    /// Bytes of `header` received (at most [`HEADER_LEN`]).
    header_len: u8,
    filling: Filling,
}

/// The frame an assembler is filling, if any: one state, not two options (an idle
/// connection keeps this inline).
#[derive(Debug, Default)]
enum Filling {
    /// Between frames: the next header's bytes go to `header`.
    #[default]
    Header,
    /// An admitted frame, its header already in the buffer.
    Whole {
        header: FrameHeader,
        frame: BytesMut,
    },
    /// A streamed frame: its header, wire bytes not yet in a piece, the piece.
    Streamed {
        header: FrameHeader,
        remaining: usize,
        piece: BytesMut,
    },
}

/// What one call to [`FrameAssembler::step`] did; each variant says how many input bytes
/// it consumed.
#[derive(Debug)]
pub(crate) enum Step {
    /// Everything offered was consumed and more is needed.
    NeedInput(usize),
    /// A frame header is complete; call [`FrameAssembler::admit`] to take the frame.
    Header(usize, FrameHeader),
    /// A frame is complete, header included.
    Frame(usize, FrameHeader, Bytes),
    /// A piece of a streamed frame; `true` for its last piece.
    Piece(usize, FrameHeader, Bytes, bool),
}

impl FrameAssembler {
    /// True when no frame is partially received.
    pub(crate) fn is_idle(&self) -> bool {
        self.header_len == 0 && matches!(self.filling, Filling::Header)
    }

    /// Memory held for a frame partly received: an admitted frame's whole length (its
    /// buffer is allocated at once), or a streamed frame's piece so far.
    pub(crate) fn pending_memory(&self) -> usize {
        match &self.filling {
            Filling::Header => 0,
            Filling::Whole { header, .. } => header.frame_len(),
            Filling::Streamed { piece, .. } => piece.len(),
        }
    }

    /// True while a streamed frame's pieces are being cut.
    pub(crate) fn is_streaming(&self) -> bool {
        matches!(self.filling, Filling::Streamed { .. })
    }

    /// Consumes bytes until the next event.
    pub(crate) fn step(&mut self, buf: &[u8]) -> Step {
        match &mut self.filling {
            Filling::Streamed {
                header,
                remaining,
                piece,
            } => {
                let target = PIECE.min(piece.len() + *remaining);
                let n = (target - piece.len()).min(buf.len());
                piece.extend_from_slice(&buf[..n]);
                *remaining -= n;
                if piece.len() < target {
                    return Step::NeedInput(n);
                }
                let (header, last, bytes) = (*header, *remaining == 0, piece.split().freeze());
                if last {
                    self.filling = Filling::Header;
                }
                Step::Piece(n, header, bytes, last)
            }
            Filling::Whole { header, frame } => {
                let n = (header.frame_len() - frame.len()).min(buf.len());
                frame.extend_from_slice(&buf[..n]);
                if frame.len() < header.frame_len() {
                    return Step::NeedInput(n);
                }
                let (header, frame) = (*header, std::mem::take(frame));
                self.filling = Filling::Header;
                Step::Frame(n, header, frame.freeze())
            }
            Filling::Header => {
                let at = usize::from(self.header_len);
                let n = (HEADER_LEN - at).min(buf.len());
                self.header[at..at + n].copy_from_slice(&buf[..n]);
                self.header_len += n as u8;
                match FrameHeader::parse(&self.header[..at + n]) {
                    Some(header) => Step::Header(n, header),
                    None => Step::NeedInput(n),
                }
            }
        }
    }

    /// Gives back the last `n` header bytes taken (a refused frame's, from the current
    /// write), so the caller can report them as not written.
    pub(crate) fn retreat(&mut self, n: usize) {
        debug_assert!(matches!(self.filling, Filling::Header) && n <= usize::from(self.header_len));
        self.header_len -= n.min(usize::from(self.header_len)) as u8;
    }

    /// Takes the frame whose header [`step`](Self::step) last reported, to be handed out
    /// in pieces rather than whole.
    pub(crate) fn admit_streaming(&mut self) {
        let header = self.take_header();
        let mut piece = BytesMut::with_capacity(PIECE.min(header.frame_len()));
        piece.extend_from_slice(&self.header);
        self.filling = Filling::Streamed {
            header,
            remaining: header.length as usize,
            piece,
        };
    }

    /// Takes the frame whose header [`step`](Self::step) last reported.
    pub(crate) fn admit(&mut self) {
        let header = self.take_header();
        let mut frame = BytesMut::with_capacity(header.frame_len());
        frame.extend_from_slice(&self.header);
        self.filling = Filling::Whole { header, frame };
    }

    /// The complete header [`step`](Self::step) last reported; the next one starts anew.
    fn take_header(&mut self) -> FrameHeader {
        let header = FrameHeader::parse(&self.header[..usize::from(self.header_len)])
            .expect("a complete header is pending");
        self.header_len = 0;
        header
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    fn frame(kind: u8, stream_id: u32, len: usize) -> Vec<u8> {
        let mut v = FrameHeader {
            length: len as u32,
            kind,
            flags: 0,
            stream_id,
        }
        .encode()
        .to_vec();
        v.resize(HEADER_LEN + len, 0xab);
        v
    }

    /// Feeds `buf`, admitting frames while `admit` says so; returns bytes taken.
    fn feed(
        a: &mut FrameAssembler,
        buf: &[u8],
        admit: impl Fn(&FrameHeader) -> bool,
        out: &mut Vec<Bytes>,
    ) -> usize {
        let mut taken = 0;
        loop {
            match a.step(&buf[taken..]) {
                Step::NeedInput(n) => return taken + n,
                Step::Header(n, h) => {
                    if !admit(&h) {
                        a.retreat(n);
                        return taken;
                    }
                    taken += n;
                    a.admit();
                }
                Step::Frame(n, _, b) | Step::Piece(n, _, b, _) => {
                    taken += n;
                    out.push(b);
                }
            }
        }
    }

    #[test]
    fn streamed_frames_come_out_in_pieces_at_every_split() {
        let big = frame(frame::DATA, 1, 3 * PIECE + 100);
        let wire = [big.clone(), frame(frame::DATA, 3, 5)].concat();
        for cut in [
            0,
            1,
            9,
            10,
            PIECE - 1,
            PIECE,
            PIECE + 1,
            big.len() - 1,
            big.len(),
            big.len() + 3,
        ] {
            let mut a = FrameAssembler::default();
            let mut out = Vec::new();
            let mut lasts = 0;
            let mut taken = 0;
            for part in [&wire[..cut], &wire[cut..]] {
                let mut at = 0;
                loop {
                    match a.step(&part[at..]) {
                        Step::NeedInput(n) => {
                            at += n;
                            break;
                        }
                        Step::Header(n, h) => {
                            at += n;
                            if h.length as usize > PIECE {
                                a.admit_streaming();
                            } else {
                                a.admit();
                            }
                        }
                        Step::Frame(n, _, b) => {
                            at += n;
                            out.push(b);
                        }
                        Step::Piece(n, h, b, last) => {
                            at += n;
                            assert!(b.len() <= PIECE);
                            assert_eq!(h.stream_id, 1);
                            lasts += usize::from(last);
                            out.push(b);
                        }
                    }
                }
                taken += at;
            }
            assert_eq!(taken, wire.len());
            assert_eq!(lasts, 1);
            assert!(a.is_idle());
            assert_eq!(out.concat(), wire, "cut at {cut}");
            assert_eq!(out.len(), 5);
        }
    }

    #[test]
    fn refusal_after_a_split_header_keeps_only_earlier_bytes() {
        let wire = frame(frame::DATA, 1, 0);
        let mut a = FrameAssembler::default();
        let mut out = Vec::new();
        assert_eq!(feed(&mut a, &wire[..5], |_| false, &mut out), 5);
        // The last four header bytes come in a later write and are refused: only they go back.
        assert_eq!(feed(&mut a, &wire[5..], |_| false, &mut out), 0);
        assert_eq!(feed(&mut a, &wire[5..], |_| true, &mut out), 4);
        assert_eq!(out.concat(), wire);
    }

    #[test]
    fn reassembles_split_frames_at_every_offset() {
        let wire = [
            frame(frame::DATA, 1, 20),
            frame(0x6, 0, 8),
            frame(frame::DATA, 3, 0),
        ]
        .concat();
        for cut in 0..=wire.len() {
            let mut a = FrameAssembler::default();
            let mut out = Vec::new();
            let n1 = feed(&mut a, &wire[..cut], |_| true, &mut out);
            let n2 = feed(&mut a, &wire[cut..], |_| true, &mut out);
            assert_eq!(n1 + n2, wire.len());
            assert!(a.is_idle());
            assert_eq!(out.concat(), wire);
            assert_eq!(out.len(), 3);
        }
    }

    #[test]
    fn refusal_gives_the_header_back_and_stops() {
        let wire = [frame(frame::DATA, 1, 4), frame(frame::DATA, 3, 4)].concat();
        let mut a = FrameAssembler::default();
        let mut out = Vec::new();
        let n = feed(&mut a, &wire, |h| h.stream_id == 1, &mut out);
        assert_eq!((n, out.len()), (13, 1));
        assert!(a.is_idle(), "the refused header is left with the writer");
        assert_eq!(feed(&mut a, &wire[n..], |_| false, &mut out), 0);
        assert_eq!(feed(&mut a, &wire[n..], |_| true, &mut out), 13);
        assert_eq!(out.len(), 2);
        assert_eq!(out.concat(), wire);
    }
}
