//! The read-side observer: follows the client's decrypted bytes on their way to h2,
//! without changing them, and records the priority signals they carry.
//!
//! It needs only frame headers, plus the payloads of header blocks, PRIORITY_UPDATE
//! and RST_STREAM; DATA payloads are skipped without being copied.

use tower_priority::Priority;

use crate::frame::{self, ClientFrames, FrameHeader, FrameSink, Verdict};
use crate::hpack::{PassiveDecoder, PriorityField};
use crate::priorities::StreamPriorities;
use crate::stats::ConnectionStats;

/// Largest header block we reassemble; a bigger one turns tracking off (hyper's h2 refuses
/// header lists over 16 KiB by default, and HPACK rarely makes a block larger than its list).
pub(crate) const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// Longest PRIORITY_UPDATE field value we copy; a longer one is counted invalid unread.
pub(crate) const MAX_UPDATE_VALUE: usize = 1024;

/// Follows one connection's client-to-server byte stream.
#[derive(Debug)]
pub(crate) struct ReadObserver {
    frames: ClientFrames,
    blocks: Blocks,
}

/// The header blocks of a connection's requests, as they are reassembled and decoded.
#[derive(Debug)]
struct Blocks {
    /// Header block being reassembled: stream id and fragments so far.
    block_stream: u32,
    block: Vec<u8>,
    in_block: bool,
    /// The block's HEADERS frame carried END_STREAM: the request is complete with it.
    block_ends_stream: bool,
    decoder: PassiveDecoder,
}

/// What the frames tell the observer, with the priorities they update.
struct Signals<'a> {
    blocks: &'a mut Blocks,
    priorities: &'a mut StreamPriorities,
}

impl ReadObserver {
    pub(crate) fn new(stats: ConnectionStats) -> Self {
        ReadObserver {
            frames: ClientFrames::default(),
            blocks: Blocks {
                block_stream: 0,
                block: Vec::new(),
                in_block: false,
                block_ends_stream: false,
                decoder: PassiveDecoder::new("request", stats),
            },
        }
    }

    pub(crate) fn verdict(&self) -> Verdict {
        self.frames.verdict()
    }

    /// Feeds bytes the client sent, in order.
    pub(crate) fn observe(&mut self, bytes: &[u8], priorities: &mut StreamPriorities) {
        let mut signals = Signals {
            blocks: &mut self.blocks,
            priorities,
        };
        self.frames.feed(bytes, &mut signals);
    }
}

impl FrameSink for Signals<'_> {
    fn frame_started(&mut self, header: &FrameHeader) -> bool {
        let len = header.length as usize;
        match header.kind {
            frame::HEADERS | frame::CONTINUATION => {
                self.blocks.decoder.is_enabled()
                    && self.blocks.block.len() + len <= MAX_HEADER_BLOCK
            }
            frame::PRIORITY_UPDATE => len <= 4 + MAX_UPDATE_VALUE,
            _ => false,
        }
    }

    fn frame_ended(&mut self, header: FrameHeader, payload: &[u8], kept: bool) {
        let priorities = &mut *self.priorities;
        match header.kind {
            frame::HEADERS | frame::CONTINUATION => self
                .blocks
                .header_fragment(header, payload, kept, priorities),
            // Not kept (longer than we copy) it is empty: certainly not a sensible value.
            frame::PRIORITY_UPDATE => {
                priorities.apply_update(header.stream_id, payload);
            }
            frame::DATA if header.end_stream() => priorities.request_complete(header.stream_id),
            frame::RST_STREAM => priorities.close(header.stream_id),
            _ => {}
        }
    }
}

impl Blocks {
    fn header_fragment(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        kept: bool,
        priorities: &mut StreamPriorities,
    ) {
        if header.kind == frame::HEADERS {
            self.block.clear();
            self.block_stream = header.stream_id;
            self.block_ends_stream = header.end_stream();
            self.in_block = true;
        } else if !self.in_block || header.stream_id != self.block_stream {
            // A stray CONTINUATION: h2 will treat it as a connection error.
            return;
        }
        if self.decoder.is_enabled() {
            if !kept {
                // Too large to reassemble: HPACK state is lost for good.
                self.block.clear();
                self.in_block = false;
                self.decoder
                    .give_up("header block larger than the observer reassembles");
                return;
            }
            match frame::header_block_fragment(&header, payload) {
                Some(fragment) => self.block.extend_from_slice(fragment),
                None => {
                    self.in_block = false;
                    return;
                }
            }
        }
        if !header.end_headers() {
            return;
        }
        self.in_block = false;
        let stream_id = self.block_stream;
        let block = std::mem::take(&mut self.block);
        let client = match self.decoder.priority_field(&block) {
            // A client's value is parsed as a client's: a server-only member means nothing.
            Some(PriorityField::Value(value)) => std::str::from_utf8(value)
                .map(Priority::parse)
                .unwrap_or_default(),
            Some(PriorityField::Absent | PriorityField::TooLong) | None => Priority::default(),
        };
        self.block = block;
        self.block.clear();
        priorities.open_request(stream_id, client);
        if self.block_ends_stream {
            priorities.request_complete(stream_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encoded_frame, CLIENT_PREFACE};

    /// A literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2).
    fn literal(name: &str, value: &str) -> Vec<u8> {
        let mut out = vec![0x00, name.len() as u8];
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
        out
    }

    fn setup() -> (ReadObserver, StreamPriorities, ConnectionStats) {
        let stats = ConnectionStats::default();
        (
            ReadObserver::new(stats.clone()),
            StreamPriorities::new(16, 128, None, stats.clone()),
            stats,
        )
    }

    #[test]
    fn request_priority_and_update_byte_by_byte() {
        let (mut obs, mut prio, stats) = setup();
        let mut wire = CLIENT_PREFACE.to_vec();
        wire.extend(encoded_frame(frame::SETTINGS, 0, 0, &[]));
        let mut block = vec![0x82, 0x87, 0x84]; // :method GET, :scheme https, :path /
        block.extend(literal("priority", "u=5, i"));
        // Split across HEADERS + CONTINUATION.
        wire.extend(encoded_frame(frame::HEADERS, 0, 1, &block[..4]));
        wire.extend(encoded_frame(
            frame::CONTINUATION,
            frame::FLAG_END_HEADERS,
            1,
            &block[4..],
        ));
        wire.extend(encoded_frame(frame::DATA, 0, 1, &[7; 100]));
        let mut upd = 1u32.to_be_bytes().to_vec();
        upd.extend_from_slice(b"u=1");
        wire.extend(encoded_frame(frame::PRIORITY_UPDATE, 0, 0, &upd));
        for b in &wire {
            obs.observe(std::slice::from_ref(b), &mut prio);
        }
        assert_eq!(obs.verdict(), Verdict::Http2);
        assert_eq!(
            prio.effective(1),
            Priority {
                urgency: 1,
                incremental: false
            }
        );
        assert_eq!(stats.snapshot().priority_updates_applied, 1);
    }

    #[test]
    fn duplicate_priority_lines_combine() {
        let (mut obs, mut prio, _) = setup();
        let mut wire = CLIENT_PREFACE.to_vec();
        let mut block = vec![0x82];
        block.extend(literal("priority", "u=2"));
        block.extend(literal("priority", "i"));
        wire.extend(encoded_frame(
            frame::HEADERS,
            frame::FLAG_END_HEADERS,
            3,
            &block,
        ));
        obs.observe(&wire, &mut prio);
        assert_eq!(
            prio.effective(3),
            Priority {
                urgency: 2,
                incremental: true
            }
        );
    }

    #[test]
    fn http1_is_not_h2() {
        let (mut obs, mut prio, _) = setup();
        obs.observe(b"GET / HTTP/1.1\r\n", &mut prio);
        assert_eq!(obs.verdict(), Verdict::NotHttp2);
    }

    #[test]
    fn bad_hpack_falls_back_to_defaults_and_keeps_going() {
        let (mut obs, mut prio, stats) = setup();
        let mut wire = CLIENT_PREFACE.to_vec();
        wire.extend(encoded_frame(
            frame::HEADERS,
            frame::FLAG_END_HEADERS,
            1,
            &[0xff, 0xff, 0x7f],
        ));
        let mut upd = 1u32.to_be_bytes().to_vec();
        upd.extend_from_slice(b"u=0");
        wire.extend(encoded_frame(frame::PRIORITY_UPDATE, 0, 0, &upd));
        obs.observe(&wire, &mut prio);
        assert_eq!(stats.snapshot().hpack_failures, 1);
        // The stream is still known, so PRIORITY_UPDATE keeps working.
        assert_eq!(prio.effective(1).urgency, 0);
    }

    #[test]
    fn reset_closes_stream() {
        let (mut obs, mut prio, _) = setup();
        let mut wire = CLIENT_PREFACE.to_vec();
        let mut block = vec![0x82];
        block.extend(literal("priority", "u=0"));
        wire.extend(encoded_frame(
            frame::HEADERS,
            frame::FLAG_END_HEADERS,
            1,
            &block,
        ));
        wire.extend(encoded_frame(frame::RST_STREAM, 0, 1, &[0, 0, 0, 8]));
        obs.observe(&wire, &mut prio);
        assert_eq!(prio.effective(1), Priority::default());
    }
}
