//! The server frames of a `write_pipeline` case, decoded from fuzz input ([`FrameGen`]):
//! DATA (padded or not, up to 70 KB), header blocks (HEADERS or PUSH_PROMISE and
//! CONTINUATIONs, padded, with priority fields, valid-ish HPACK with `priority` fields,
//! dynamic-table inserts and size updates, or random bytes), SETTINGS (some carrying id 9,
//! some malformed), SETTINGS ACK, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY and raw
//! frames of any type, on colliding stream ids. In [`Shape::Free`] also stray CONTINUATIONs
//! and single HEADERS/PUSH_PROMISE frames with arbitrary flags.

use crate::frame::{
    Frame, ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PADDED, PING,
    PRIORITY, PRIORITY_FLAG, PRIORITY_UPDATE, PUSH_PROMISE, RST_STREAM, SETTINGS, WINDOW_UPDATE,
};
use crate::hpack::{hpack_int, literal};
use crate::input::{Input, MAX_FRAMES, MAX_INPUT_BYTES, PRIORITY_VALUES, STREAM_IDS};
use crate::write_case::Shape;

/// Builds frames from the input; `seq` makes DATA payloads distinct.
pub struct FrameGen<'a, 'b> {
    inp: &'b mut Input<'a>,
    seq: usize,
    shape: Shape,
}

impl<'a, 'b> FrameGen<'a, 'b> {
    pub fn new(inp: &'b mut Input<'a>, shape: Shape) -> Self {
        FrameGen { inp, seq: 0, shape }
    }

    /// Frames until the input is used up or the caps ([`MAX_FRAMES`] frames,
    /// [`MAX_INPUT_BYTES`] bytes) are reached.
    pub fn frames(mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut total = 0;
        while frames.len() < MAX_FRAMES && total < MAX_INPUT_BYTES {
            let before = frames.len();
            if !self.next(&mut frames) {
                break;
            }
            total += frames[before..].iter().map(Frame::wire_len).sum::<usize>();
        }
        frames
    }

    fn stream(&mut self) -> u32 {
        let b = self.inp.u8();
        let id = STREAM_IDS[usize::from(b & 0x7f) % STREAM_IDS.len()];
        // Now and then the reserved bit, which must pass through untouched.
        if b & 0x80 != 0 && b & 0x40 != 0 {
            id | 0x8000_0000
        } else {
            id
        }
    }

    fn block_stream(&mut self) -> u32 {
        let s = self.stream();
        if self.shape == Shape::Grammar && s & 0x7fff_ffff == 0 {
            1
        } else {
            s
        }
    }

    fn data_len(&mut self) -> usize {
        match self.inp.u8() % 16 {
            0..=5 => self.inp.below(64),
            6..=11 => self.inp.below(4200),
            12..=14 => self.inp.below(20_000),
            _ => self.inp.below(70_000),
        }
    }

    /// Distinctive DATA content: differs per frame and per offset.
    fn data_payload(&mut self, len: usize) -> Vec<u8> {
        self.seq += 1;
        let seq = self.seq;
        (0..len)
            .map(|j| ((seq * 131 + j * 7 + j / 251) % 251) as u8)
            .collect()
    }

    /// An HPACK block: a response, trailers, raw bytes, or pieces that change the
    /// dynamic table.
    fn hpack_block(&mut self) -> Vec<u8> {
        let mut block = Vec::new();
        match self.inp.u8() % 6 {
            0 => {}
            1 => block.extend_from_slice(self.inp.bytes_upto(40)),
            2 => literal(&mut block, false, b"grpc-status", b"0"),
            _ => block.push(0x88 + (self.inp.u8() % 7)),
        }
        let extras = self.inp.below(4);
        for _ in 0..extras {
            self.hpack_extra(&mut block);
        }
        block
    }

    /// One more piece of an HPACK block.
    fn hpack_extra(&mut self, block: &mut Vec<u8>) {
        match self.inp.u8() % 8 {
            0 | 1 => {
                let v = self.inp.pick(&PRIORITY_VALUES);
                literal(block, false, b"priority", v.as_bytes());
            }
            2 => {
                let v = self.inp.bytes_upto(16).to_vec();
                literal(block, self.inp.bool(), b"priority", &v);
            }
            3 => {
                let v = self.inp.pick(&PRIORITY_VALUES);
                literal(block, true, b"priority", v.as_bytes());
            }
            4 => {
                // An indexed field from the static or dynamic table.
                let index = 1 + self.inp.below(70);
                hpack_int(block, 0x80, 7, index);
            }
            5 => {
                // A dynamic table size update.
                let size = self.inp.below(70_000);
                hpack_int(block, 0x20, 5, size);
            }
            6 => {
                let pad = vec![b'p'; self.inp.below(3000)];
                literal(block, self.inp.bool(), b"x-pad", &pad);
            }
            _ => block.extend_from_slice(self.inp.bytes_upto(8)),
        }
    }

    /// A header block split into 1-4 frames: HEADERS or PUSH_PROMISE, then CONTINUATIONs.
    fn header_block(&mut self, out: &mut Vec<Frame>, push: bool) {
        let stream = self.block_stream();
        let block = self.hpack_block();
        let parts = 1 + self.inp.below(4);
        let opts = self.inp.u8();
        let end_stream = opts & 1 != 0;
        let padded = opts & 2 != 0;
        let priority = opts & 4 != 0;
        let malformed_pad = opts & 0x18 == 0x18;
        for i in 0..parts {
            let piece = &block[i * block.len() / parts..(i + 1) * block.len() / parts];
            let mut flags = if i + 1 == parts { END_HEADERS } else { 0 };
            if i > 0 {
                out.push(Frame::new(CONTINUATION, flags, stream, piece));
                continue;
            }
            let mut payload = Vec::new();
            let pad = if padded { self.inp.below(20) } else { 0 };
            if padded {
                flags |= PADDED;
                payload.push(if malformed_pad { 0xff } else { pad as u8 });
            }
            let kind = if push {
                payload.extend_from_slice(&STREAM_IDS[self.inp.below(8)].to_be_bytes());
                PUSH_PROMISE
            } else {
                if end_stream {
                    flags |= END_STREAM;
                }
                if priority {
                    flags |= PRIORITY_FLAG;
                    payload.extend_from_slice(&[0, 0, 0, 3, 15]);
                }
                HEADERS
            };
            payload.extend_from_slice(piece);
            payload.resize(payload.len() + pad, 0);
            out.push(Frame::new(kind, flags, stream, payload));
        }
    }

    fn settings_payload(&mut self) -> Vec<u8> {
        let n = self.inp.below(5);
        let mut payload = Vec::new();
        for _ in 0..n {
            let id = match self.inp.u8() % 8 {
                0 => 9,
                k => u16::from(k),
            };
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&self.inp.u32().to_be_bytes());
        }
        if self.inp.u8().is_multiple_of(16) {
            // Not a multiple of six: malformed, but whole at the framing level.
            payload.push(0x42);
        }
        payload
    }

    /// Appends the next frame (or header block); `false` when the input is used up.
    fn next(&mut self, out: &mut Vec<Frame>) -> bool {
        if self.inp.is_empty() {
            return false;
        }
        let op = self.inp.u8();
        let free_ops = if self.shape == Shape::Free { 3 } else { 0 };
        match op % (14 + free_ops) {
            0..=2 => out.push(self.data_frame()),
            3 | 4 => self.header_block(out, false),
            5 => self.header_block(out, true),
            6 => {
                let payload = self.settings_payload();
                out.push(Frame::new(SETTINGS, 0, 0, payload));
            }
            7 => out.push(Frame::new(SETTINGS, ACK, 0, Vec::new())),
            8 => {
                let payload = self.data_payload(8);
                out.push(Frame::new(PING, self.inp.u8() & ACK, 0, payload));
            }
            9 => {
                let stream = self.stream();
                let inc = self.inp.u32();
                out.push(Frame::new(WINDOW_UPDATE, 0, stream, inc.to_be_bytes()));
            }
            10 => {
                let stream = self.stream();
                let code = u32::from(self.inp.u8() % 14);
                out.push(Frame::new(RST_STREAM, 0, stream, code.to_be_bytes()));
            }
            11 => out.push(self.goaway()),
            12 => {
                let stream = self.stream();
                out.push(Frame::new(PRIORITY, 0, stream, [0, 0, 0, 1, 200]));
            }
            13 => out.push(self.raw_frame()),
            14 => out.push(self.lone_continuation()),
            _ => out.push(self.lone_header_frame()),
        }
        true
    }

    fn data_frame(&mut self) -> Frame {
        let stream = self.stream();
        let len = self.data_len();
        let flags = self.inp.u8() & (END_STREAM | PADDED);
        let mut payload = self.data_payload(len);
        if flags & PADDED != 0 {
            payload.insert(0, 0);
        }
        Frame::new(DATA, flags, stream, payload)
    }

    fn goaway(&mut self) -> Frame {
        let mut payload = STREAM_IDS[self.inp.below(7)].to_be_bytes().to_vec();
        payload.extend_from_slice(&[0, 0, 0, self.inp.u8() % 14]);
        let n = self.inp.below(16);
        let debug = self.data_payload(n);
        payload.extend_from_slice(&debug);
        Frame::new(GOAWAY, 0, 0, payload)
    }

    /// Any other frame type (unknown types, PRIORITY_UPDATE, ...), raw; never a header
    /// frame in [`Shape::Grammar`].
    fn raw_frame(&mut self) -> Frame {
        let mut kind = self.inp.u8();
        if self.shape == Shape::Grammar && matches!(kind, HEADERS | PUSH_PROMISE) {
            kind = 0x20;
        }
        if self.shape == Shape::Grammar && kind == CONTINUATION {
            kind = PRIORITY_UPDATE;
        }
        let flags = self.inp.u8();
        let stream = self.stream();
        let mut payload = self.inp.bytes_upto(32).to_vec();
        let n = self.inp.below(4);
        payload.extend(self.data_payload(n));
        Frame::new(kind, flags, stream, payload)
    }

    /// A lone CONTINUATION, any flags.
    fn lone_continuation(&mut self) -> Frame {
        let stream = self.stream();
        let flags = self.inp.u8();
        let block = self.hpack_block();
        Frame::new(CONTINUATION, flags, stream, block)
    }

    /// A single HEADERS / PUSH_PROMISE frame with arbitrary flags (perhaps no END_HEADERS),
    /// perhaps on stream 0.
    fn lone_header_frame(&mut self) -> Frame {
        let kind = if self.inp.bool() {
            PUSH_PROMISE
        } else {
            HEADERS
        };
        let stream = self.stream();
        let flags = self.inp.u8() & !(PADDED | PRIORITY_FLAG);
        let mut payload = Vec::new();
        if kind == PUSH_PROMISE {
            payload.extend_from_slice(&[0, 0, 0, 2]);
        }
        payload.extend(self.hpack_block());
        Frame::new(kind, flags, stream, payload)
    }
}
