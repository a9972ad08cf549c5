//! The reference for the read observer: [`observer_model`] parses the client's bytes as
//! frames and follows the stream table as documented in `read_observer.rs` and
//! `priorities.rs` (RFC 9218 §7.1 for an update's validity), to tell what the PRIORITY_UPDATE
//! counters must say, and counts the header-block bytes the observer may copy (for the
//! memory bound). Also the observer's documented limits.

use std::collections::VecDeque;

use crate::frame::{
    CONTINUATION, END_HEADERS, HEADERS, HEADER_LEN, PADDED, PREFACE, PRIORITY_FLAG,
    PRIORITY_UPDATE, RST_STREAM,
};

/// `FlushConfig`'s default `max_early_updates` and its (fixed) bound on tracked streams.
pub const DEFAULT_MAX_EARLY_UPDATES: usize = 128;
pub const MAX_TRACKED_STREAMS: usize = 1024;
/// What the read observer copies at most (`read_observer.rs`).
pub const OBSERVER_MAX_HEADER_BLOCK: usize = 64 * 1024;
pub const OBSERVER_MAX_SMALL_PAYLOAD: usize = 4 + 1024;
/// The observer's cap on one block's decoded `priority` lines.
pub const OBSERVER_MAX_PRIORITY_VALUE: usize = 1024;

/// What the observer must have counted, from a reference parse of the client's bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ObserverModel {
    /// The client's bytes start with the full preface.
    pub http2: bool,
    /// Complete PRIORITY_UPDATE frames after the preface.
    pub updates: u64,
    /// Of those, malformed ones (RFC 9218 §7.1, or longer than the observer copies).
    pub invalid: u64,
    /// `(applied, buffered, ignored)` when the stream table can be followed exactly.
    pub outcomes: Option<(u64, u64, u64)>,
    /// Header-block frames (HEADERS/CONTINUATION, a last incomplete one included), for the
    /// memory bound.
    pub header_frames: u64,
    /// Payload bytes of those frames present in the input (the observer may copy them).
    pub header_bytes: u64,
}

/// The reference: a frame parser plus a model of the stream table, as documented in
/// `read_observer.rs` and `priorities.rs` (RFC 9218 §7.1 for the update's validity).
pub fn observer_model(
    client: &[u8],
    max_early_updates: usize,
    server_closes: bool,
) -> ObserverModel {
    let Some(mut rest) = client.strip_prefix(PREFACE) else {
        return ObserverModel::default();
    };
    let mut t = StreamTable::new(max_early_updates, server_closes);
    while rest.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < HEADER_LEN + len {
            // The input ends inside this frame: a header frame's bytes so far are copied
            // (the observer reassembles header blocks), so they count for the memory bound.
            if matches!(rest[3], HEADERS | CONTINUATION) {
                t.m.header_frames += 1;
                t.m.header_bytes += (rest.len() - HEADER_LEN) as u64;
            }
            break;
        }
        let kind = rest[3];
        let flags = rest[4];
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        let payload = &rest[HEADER_LEN..HEADER_LEN + len];
        rest = &rest[HEADER_LEN + len..];
        match kind {
            PRIORITY_UPDATE => t.priority_update(stream, payload),
            RST_STREAM => t.open.retain(|&s| s != stream),
            HEADERS | CONTINUATION => t.header_frame(kind, flags, stream, payload),
            _ => {}
        }
    }
    t.finish()
}

/// The model's state while it follows the client's frames.
struct StreamTable {
    m: ObserverModel,
    max_early_updates: usize,
    /// The stream table, followed exactly unless a header frame's fragment is malformed
    /// (whether it opens the stream then depends on the HPACK decoder's state) or the
    /// server closes streams (timing of its writes).
    exact: bool,
    open: Vec<u32>,
    early: VecDeque<u32>,
    highest: u32,
    in_block: Option<u32>,
    applied: u64,
    buffered: u64,
    ignored: u64,
}

impl StreamTable {
    fn new(max_early_updates: usize, server_closes: bool) -> Self {
        StreamTable {
            m: ObserverModel {
                http2: true,
                ..ObserverModel::default()
            },
            max_early_updates,
            exact: !server_closes,
            open: Vec::new(),
            early: VecDeque::new(),
            highest: 0,
            in_block: None,
            applied: 0,
            buffered: 0,
            ignored: 0,
        }
    }

    fn priority_update(&mut self, stream: u32, payload: &[u8]) {
        self.m.updates += 1;
        let valid = stream == 0
            && payload.len() <= OBSERVER_MAX_SMALL_PAYLOAD
            && payload.len() >= 4
            && u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff
                != 0
            && payload[4..].is_ascii();
        if !valid {
            self.m.invalid += 1;
            return;
        }
        let id = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        if self.open.contains(&id) {
            self.applied += 1;
        } else if id.is_multiple_of(2) || id <= self.highest {
            self.ignored += 1;
        } else if self.early.contains(&id) {
            self.buffered += 1;
        } else if self.early.len() >= self.max_early_updates {
            self.ignored += 1;
        } else {
            self.early.push_back(id);
            self.buffered += 1;
        }
    }

    fn header_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.m.header_frames += 1;
        self.m.header_bytes += payload.len() as u64;
        if kind == HEADERS {
            self.in_block = Some(stream);
        } else if self.in_block != Some(stream) {
            return;
        }
        if payload.len() > OBSERVER_MAX_HEADER_BLOCK / 2 || !fragment_ok(kind, flags, payload) {
            self.exact = false;
        }
        if flags & END_HEADERS == 0 {
            return;
        }
        self.in_block = None;
        if stream == 0 || stream.is_multiple_of(2) || stream <= self.highest {
            return;
        }
        self.highest = stream;
        if self.open.len() >= MAX_TRACKED_STREAMS {
            return;
        }
        self.early.retain(|&s| s != stream);
        self.open.push(stream);
    }

    fn finish(mut self) -> ObserverModel {
        if self.exact {
            self.m.outcomes = Some((self.applied, self.buffered, self.ignored));
        }
        self.m
    }
}

/// Whether a HEADERS/CONTINUATION payload is long enough for its padding and priority
/// fields (`tls-flush`'s `header_block_fragment` returns `Some`).
fn fragment_ok(kind: u8, flags: u8, payload: &[u8]) -> bool {
    let mut body = payload;
    let mut pad = 0usize;
    if kind == HEADERS && flags & PADDED != 0 {
        let Some((&p, rest)) = body.split_first() else {
            return false;
        };
        pad = usize::from(p);
        body = rest;
    }
    if kind == HEADERS && flags & PRIORITY_FLAG != 0 {
        if body.len() < 5 {
            return false;
        }
        body = &body[5..];
    }
    body.len() >= pad
}
