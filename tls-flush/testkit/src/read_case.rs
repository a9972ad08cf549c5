//! The `read_observer` case: [`ReadCase`] (configuration, the client's bytes and how the
//! transport hands them over, read buffer sizes, server writes interleaved) and its decoder
//! from fuzz input, [`decode_read_case`]. The client's bytes follow a valid client preface,
//! a partial or corrupt one, or none, and are raw or built from frame descriptors
//! (PRIORITY_UPDATE valid and malformed, request header blocks split, padded or truncated,
//! dynamic-table updates, stray CONTINUATIONs, DATA, RST_STREAM, unknown frames).

use std::time::Duration;

use tls_flush::{FlushConfig, Policy};

use crate::frame::{
    Frame, ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, PADDED, PING, PREFACE,
    PRIORITY_FLAG, PRIORITY_UPDATE, RST_STREAM, SETTINGS, WINDOW_UPDATE,
};
use crate::hpack::{hpack_int, literal, request_block};
use crate::input::{decode_policy, Input, MAX_INPUT_BYTES, PRIORITY_VALUES, STREAM_IDS};
use crate::observer_model::{DEFAULT_MAX_EARLY_UPDATES, OBSERVER_MAX_SMALL_PAYLOAD};
use crate::transport::ReadPlan;

/// How the client's bytes begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preface {
    /// The client preface, then the body.
    Valid,
    /// The body alone.
    None,
    /// The first `n` bytes of the preface, then the body.
    Partial(usize),
    /// The preface with byte `at` changed, then the body.
    Corrupt(usize),
}

/// One server write interleaved with the reads.
#[derive(Clone, Debug)]
pub struct ServerWrite {
    /// Before the read with this index.
    pub before_read: usize,
    pub frames: Vec<Frame>,
}

/// A decoded `read_observer` case.
#[derive(Clone, Debug)]
pub struct ReadCase {
    pub policy: Policy,
    pub max_early_updates: Option<usize>,
    pub anticipate: Option<Duration>,
    pub preface: Preface,
    pub read_plan: ReadPlan,
    /// Sizes of the buffers passed to `poll_read`, cycled, and bytes already in them.
    pub read_sizes: Vec<(usize, usize)>,
    pub writes: Vec<ServerWrite>,
    pub client: Vec<u8>,
}

impl ReadCase {
    pub fn config(&self) -> FlushConfig {
        let mut c = FlushConfig::for_policy(self.policy)
            .anticipate(self.anticipate)
            .announce_no_rfc7540_priorities(false);
        if let Some(n) = self.max_early_updates {
            c = c.max_early_updates(n);
        }
        c
    }

    pub fn max_early_updates(&self) -> usize {
        self.max_early_updates.unwrap_or(DEFAULT_MAX_EARLY_UPDATES)
    }
}

/// Decodes a `read_observer` case from fuzz input.
pub fn decode_read_case(data: &[u8]) -> ReadCase {
    let mut inp = Input::new(data);
    let policy = decode_policy(inp.u8());
    let bits = inp.u8();
    let preface = decode_preface(&mut inp, bits);
    let structured = bits & 4 == 0;
    let max_early_updates = match (bits >> 3) & 3 {
        0 => None,
        1 => Some(0),
        _ => Some(inp.below(8)),
    };
    let anticipate = match inp.u8() % 4 {
        0 => Some(Duration::ZERO),
        1 => Some(Duration::from_micros(inp.below(200) as u64)),
        _ => None,
    };
    let read_plan = decode_read_plan(&mut inp);
    let read_sizes = decode_read_sizes(&mut inp);
    let n_writes = if bits & 0x20 != 0 { inp.below(6) } else { 0 };
    let writes = decode_server_writes(&mut inp, n_writes);
    let body = if structured {
        client_frames(&mut inp)
    } else {
        inp.rest().to_vec()
    };
    let mut client = preface_bytes(preface);
    client.extend(body);
    ReadCase {
        policy,
        max_early_updates,
        anticipate,
        preface,
        read_plan,
        read_sizes,
        writes,
        client,
    }
}

fn decode_preface(inp: &mut Input<'_>, bits: u8) -> Preface {
    match bits & 3 {
        0 | 1 => Preface::Valid,
        2 => Preface::None,
        _ => {
            if inp.bool() {
                Preface::Partial(inp.below(PREFACE.len()))
            } else {
                Preface::Corrupt(inp.below(PREFACE.len()))
            }
        }
    }
}

fn preface_bytes(preface: Preface) -> Vec<u8> {
    match preface {
        Preface::Valid => PREFACE.to_vec(),
        Preface::None => Vec::new(),
        Preface::Partial(n) => PREFACE[..n].to_vec(),
        Preface::Corrupt(at) => {
            let mut p = PREFACE.to_vec();
            p[at] ^= 0x20;
            p
        }
    }
}

/// Chunk sizes for the transport's `poll_read` (some `Pending`, never only those) and
/// whether the client's bytes end with EOF.
fn decode_read_plan(inp: &mut Input<'_>) -> ReadPlan {
    let n = 1 + inp.below(8);
    let mut chunks: Vec<usize> = (0..n)
        .map(|_| match inp.u8() % 8 {
            0 => 0,
            1 => 1,
            2 | 3 => 1 + inp.below(16),
            4 | 5 => 1 + inp.below(512),
            6 => 1 + inp.below(20_000),
            _ => usize::MAX,
        })
        .collect();
    if chunks.iter().all(|&c| c == 0) {
        chunks.push(usize::MAX);
    }
    let eof = inp.bool();
    ReadPlan { chunks, eof }
}

/// Read buffer sizes and the bytes already in each.
fn decode_read_sizes(inp: &mut Input<'_>) -> Vec<(usize, usize)> {
    let n = 1 + inp.below(4);
    (0..n)
        .map(|_| {
            let size = match inp.u8() % 4 {
                0 => 1 + inp.below(9),
                1 => 1 + inp.below(100),
                _ => 1 + inp.below(20_000),
            };
            let prefill = if inp.u8().is_multiple_of(4) {
                inp.below(32)
            } else {
                0
            };
            (size, prefill)
        })
        .collect()
}

/// h2-like server writes: SETTINGS first, then SETTINGS ACK, PING ACK with WINDOW_UPDATE,
/// or a response (HEADERS, perhaps with a `priority` header, and DATA).
fn decode_server_writes(inp: &mut Input<'_>, n: usize) -> Vec<ServerWrite> {
    let mut writes = Vec::new();
    let mut seq = 0u8;
    for i in 0..n {
        let before_read = inp.below(64);
        let mut frames = Vec::new();
        if i == 0 {
            frames.push(Frame::new(SETTINGS, 0, 0, [0, 3, 0, 0, 0, 100]));
        }
        let stream = STREAM_IDS[inp.below(7)];
        match inp.u8() % 5 {
            0 => frames.push(Frame::new(SETTINGS, ACK, 0, Vec::new())),
            1 => {
                seq = seq.wrapping_add(1);
                frames.push(Frame::new(PING, ACK, 0, [seq; 8]));
                frames.push(Frame::new(WINDOW_UPDATE, 0, 0, 65_535u32.to_be_bytes()));
            }
            _ => server_response(inp, stream, &mut seq, &mut frames),
        }
        writes.push(ServerWrite {
            before_read,
            frames,
        });
    }
    writes
}

fn server_response(inp: &mut Input<'_>, stream: u32, seq: &mut u8, frames: &mut Vec<Frame>) {
    let mut block = vec![0x88];
    if inp.bool() {
        let v = inp.pick(&PRIORITY_VALUES);
        literal(&mut block, false, b"priority", v.as_bytes());
    }
    frames.push(Frame::new(HEADERS, END_HEADERS, stream, block));
    let parts = inp.below(4);
    for k in 0..parts {
        *seq = seq.wrapping_add(1);
        let len = inp.below(9000);
        let flags = if k + 1 == parts && inp.bool() {
            END_STREAM
        } else {
            0
        };
        frames.push(Frame::new(DATA, flags, stream, vec![*seq; len]));
    }
}

// ---------------------------------------------------------------------------------------
// Structured client frames
// ---------------------------------------------------------------------------------------

/// Structured client frames, so that the observer's deeper paths are reached quickly.
fn client_frames(inp: &mut Input<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    while !inp.is_empty() && out.len() < MAX_INPUT_BYTES {
        let stream = inp.pick(&STREAM_IDS);
        match inp.u8() % 12 {
            0..=2 => client_priority_update(inp, stream, &mut out),
            3..=5 => client_request(inp, stream, &mut out),
            6 => {
                let len = inp.below(3000);
                Frame::new(DATA, inp.u8(), stream, vec![0xd0; len]).encode_into(&mut out);
            }
            7 => {
                Frame::new(RST_STREAM, 0, stream, [0, 0, 0, 8]).encode_into(&mut out);
            }
            8 => {
                // A stray or interleaved CONTINUATION.
                let payload = inp.bytes_upto(16).to_vec();
                Frame::new(CONTINUATION, inp.u8(), stream, payload).encode_into(&mut out);
            }
            9 => {
                let kind = inp.u8();
                let flags = inp.u8();
                let payload = inp.bytes_upto(24).to_vec();
                Frame::new(kind, flags, stream, payload).encode_into(&mut out);
            }
            10 => client_table_update(inp, stream, &mut out),
            _ => {
                // Raw bytes: whatever the fuzzer wants, framing included.
                out.extend_from_slice(inp.bytes_upto(64));
            }
        }
    }
    out
}

/// A PRIORITY_UPDATE: mostly well-formed, on stream 0; sometimes short, with any id, on
/// another stream or longer than the observer copies.
fn client_priority_update(inp: &mut Input<'_>, stream: u32, out: &mut Vec<u8>) {
    let mode = inp.u8();
    let frame_stream = if mode & 0x80 != 0 { stream } else { 0 };
    let mut payload = match mode % 8 {
        0 => inp.bytes_upto(6).to_vec(),
        1 => {
            let mut p = inp.u32().to_be_bytes().to_vec();
            p.extend_from_slice(inp.bytes_upto(24));
            p
        }
        _ => {
            let mut p = inp.pick(&STREAM_IDS).to_be_bytes().to_vec();
            p.extend_from_slice(inp.pick(&PRIORITY_VALUES).as_bytes());
            p
        }
    };
    if mode & 0x40 != 0 && mode & 0x20 != 0 {
        payload.resize(OBSERVER_MAX_SMALL_PAYLOAD + 1, b' ');
    }
    Frame::new(PRIORITY_UPDATE, inp.u8(), frame_stream, payload).encode_into(out);
}

/// A request header block, perhaps split, padded or with a priority field.
fn client_request(inp: &mut Input<'_>, stream: u32, out: &mut Vec<u8>) {
    let value = match inp.u8() % 4 {
        0 => None,
        1 => Some(inp.bytes_upto(12).to_vec()),
        _ => Some(inp.pick(&PRIORITY_VALUES).as_bytes().to_vec()),
    };
    let mut block = request_block(value.as_deref());
    if inp.u8().is_multiple_of(4) {
        block.extend_from_slice(inp.bytes_upto(12));
    }
    let parts = 1 + inp.below(3);
    let opts = inp.u8();
    for i in 0..parts {
        let piece = &block[i * block.len() / parts..(i + 1) * block.len() / parts];
        let flags = if i + 1 == parts { END_HEADERS } else { 0 };
        if i > 0 {
            Frame::new(CONTINUATION, flags, stream, piece).encode_into(out);
        } else {
            request_headers(stream, flags, opts, piece).encode_into(out);
        }
    }
}

/// The HEADERS frame of a request block, with the padding and priority fields `opts`
/// asks for (sometimes malformed or truncated).
fn request_headers(stream: u32, mut flags: u8, opts: u8, piece: &[u8]) -> Frame {
    flags |= opts & END_STREAM;
    let mut payload = Vec::new();
    if opts & 2 != 0 {
        flags |= PADDED;
        payload.push(if opts & 0x18 == 0x18 { 0xee } else { 3 });
    }
    if opts & 4 != 0 {
        flags |= PRIORITY_FLAG;
        payload.extend_from_slice(&[0, 0, 0, 0, 7]);
    }
    payload.extend_from_slice(piece);
    if opts & 2 != 0 {
        payload.extend_from_slice(&[0, 0, 0]);
    }
    if opts & 0x30 == 0x30 {
        // Truncated: the padding/priority fields claim more than there is.
        payload.truncate(1);
    }
    Frame::new(HEADERS, flags, stream, payload)
}

/// Dynamic table: size updates where RFC 7541 §4.2 allows them (at the start of a block;
/// sometimes to 0 first, which empties the table, sometimes above the 64 KiB the observer
/// accepts, sometimes alone, which is an error), then a literal with incremental indexing
/// and an indexed field that may refer to it.
fn client_table_update(inp: &mut Input<'_>, stream: u32, out: &mut Vec<u8>) {
    let mode = inp.u8();
    let mut block = Vec::new();
    let size = (mode & 1 == 1).then(|| inp.below(100_000) % 72_000);
    if let Some(size) = size {
        if mode & 4 != 0 {
            hpack_int(&mut block, 0x20, 5, 0);
        }
        hpack_int(&mut block, 0x20, 5, size);
    }
    let mut fields = vec![0x82, 0x87, 0x84];
    literal(&mut fields, true, b"priority", inp.bytes_upto(10));
    hpack_int(&mut fields, 0x80, 7, 62 + inp.below(3));
    if size.is_none() || mode & 0x18 != 0x18 {
        block.extend(fields);
    }
    Frame::new(HEADERS, END_HEADERS, stream, block).encode_into(out);
}
