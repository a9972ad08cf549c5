//! The `write_pipeline` case: [`WriteCase`] (configuration, transport schedule, write plan,
//! the client's bytes and the server's frames) and its decoder from fuzz input,
//! [`decode_write_case`]. The server frames come from [`crate::frame_gen`]; running a case is
//! [`crate::write_run`].

use std::time::Duration;

use tls_flush::{Policy, RecordSizing};

use crate::frame::{
    encode_all, Frame, END_HEADERS, END_STREAM, HEADERS, PREFACE, PRIORITY_UPDATE, SETTINGS,
};
use crate::frame_gen::FrameGen;
use crate::hpack::request_block;
use crate::input::{decode_policy, Input, PRIORITY_VALUES, STREAM_IDS};
use crate::knobs::Knobs;
use crate::transport::{Buffering, Step};
use crate::write_run::WriteOp;

/// How the frame sequence is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Header blocks as h2 writes them (contiguous, END_HEADERS last, never on stream 0);
    /// everything else arbitrary.
    Grammar,
    /// Anything well-formed at the framing level: stray and interleaved CONTINUATIONs,
    /// unfinished blocks, blocks on stream 0. The same checks, less the contiguity of
    /// header blocks in the output (they are not contiguous in the input either).
    Free,
}

/// A decoded `write_pipeline` case.
#[derive(Clone, Debug)]
pub struct WriteCase {
    pub knobs: Knobs,
    pub buffering: Buffering,
    pub schedule: Vec<Step>,
    pub fail_write_at: Option<usize>,
    pub plan: Vec<WriteOp>,
    pub read_first: usize,
    pub shape: Shape,
    /// Cut the encoded input this many bytes before its end (inside the last frame).
    pub truncate: Option<usize>,
    pub client: Vec<u8>,
    pub frames: Vec<Frame>,
}

impl WriteCase {
    /// A readable case: `frames` written in one go by `policy`'s preset (anticipation off)
    /// into a transport that takes everything, the client having sent its preface and an
    /// empty SETTINGS.
    pub fn plain(policy: Policy, frames: Vec<Frame>) -> Self {
        let mut client = PREFACE.to_vec();
        Frame::new(SETTINGS, 0, 0, Vec::new()).encode_into(&mut client);
        WriteCase {
            knobs: Knobs {
                anticipate: Some(None),
                ..Knobs::new(policy)
            },
            buffering: Buffering::Off,
            schedule: vec![Step::Accept(usize::MAX)],
            fail_write_at: None,
            plan: vec![WriteOp {
                size: 1 << 20,
                slices: 1,
                split_seed: 0,
                flush_after: false,
                read_before: 0,
            }],
            read_first: 0,
            shape: Shape::Free,
            truncate: None,
            client,
            frames,
        }
    }
}

/// Decodes a `write_pipeline` case from fuzz input.
pub fn decode_write_case(data: &[u8]) -> WriteCase {
    let mut inp = Input::new(data);
    let policy = decode_policy(inp.u8());
    let bits = inp.u8();
    let buffering = match inp.u8() % 3 {
        0 => Buffering::Off,
        1 => Buffering::Reported,
        _ => Buffering::Silent,
    };
    let mut knobs = decode_knobs(&mut inp, policy, bits);
    let schedule = decode_schedule(&mut inp);
    let fail_write_at = match inp.u8() % 16 {
        0 => Some(inp.below(64)),
        _ => None,
    };
    let plan = decode_plan(&mut inp);
    let read_first = inp.below(128);
    let client = decode_client(&mut inp);
    let truncate = (bits & 0x40 != 0).then(|| 1 + inp.below(4096));
    let shape = if bits & 0x20 != 0 {
        Shape::Free
    } else {
        Shape::Grammar
    };
    let frames = FrameGen::new(&mut inp, shape).frames();
    bound_records(&mut knobs, frames.iter().map(Frame::wire_len).sum());
    WriteCase {
        knobs,
        buffering,
        schedule,
        fail_write_at,
        plan,
        read_first,
        shape,
        truncate,
        client,
        frames,
    }
}

/// Records a case may take at most: 1-byte records over a 150 KB case made it cost 600 ms
/// with coverage instrumentation (a typical case takes about 2), and every record size's
/// code paths are as well covered on a small case.
pub const MAX_RECORDS_PER_CASE: usize = 256;

/// Raises a record size or TLS fragment size the input chose so that `input_len` bytes
/// take at most [`MAX_RECORDS_PER_CASE`] records.
fn bound_records(knobs: &mut Knobs, input_len: usize) {
    let least = input_len / MAX_RECORDS_PER_CASE;
    if let Some(RecordSizing::Fixed(n)) = &mut knobs.record_sizing {
        *n = (*n).max(least);
    }
    if let Some(fragment) = &mut knobs.fragment {
        // The payload is the fragment less 5 bytes (see `Knobs::record_payload`).
        *fragment = (*fragment).max(least + 5);
    }
}

/// The configuration: flags from `bits`, then limits, fragment size, urgent cut,
/// anticipation, record sizing and `max_early_updates` from the input.
fn decode_knobs(inp: &mut Input<'_>, policy: Policy, bits: u8) -> Knobs {
    let reorder = match (bits >> 3) & 3 {
        1 => Some(true),
        2 => Some(false),
        _ => None,
    };
    let limits = match inp.u8() % 4 {
        0 | 1 => None,
        2 => {
            let soft = inp.below(70_000);
            Some((soft, soft + inp.below(70_000)))
        }
        _ => {
            let soft = inp.below(256);
            Some((soft, soft + inp.below(256)))
        }
    };
    let fragment = match inp.u8() % 4 {
        0 | 1 => None,
        2 => Some(inp.below(64)),
        _ => Some(inp.below(17_000)),
    };
    let urgent_cut = match inp.u8() % 4 {
        0 | 1 => None,
        2 => Some(None),
        _ => Some(Some((inp.u8() % 9, inp.below(20_000)))),
    };
    let anticipate = decode_anticipate(inp);
    let record_sizing = match inp.u8() % 4 {
        0 | 1 => None,
        2 => Some(RecordSizing::Fixed(inp.below(20_000))),
        _ => Some(RecordSizing::Dynamic {
            idle_reset: Duration::from_micros(inp.below(2000) as u64),
        }),
    };
    let max_early_updates = match inp.u8() % 4 {
        0 => Some(inp.below(4)),
        _ => None,
    };
    Knobs {
        policy,
        announce: bits & 1 != 0,
        cork: bits & 2 == 0,
        pack: bits & 4 == 0,
        reorder,
        limits,
        fragment,
        urgent_cut,
        anticipate,
        record_sizing,
        max_early_updates,
    }
}

fn decode_anticipate(inp: &mut Input<'_>) -> Option<Option<Duration>> {
    match inp.u8() % 4 {
        // The preset's 5 ms hold makes each case slow; rarer.
        0 => Some(None),
        1 => Some(Some(Duration::ZERO)),
        2 => Some(Some(Duration::from_micros(inp.below(300) as u64))),
        _ => {
            if inp.u8().is_multiple_of(4) {
                None
            } else {
                Some(None)
            }
        }
    }
}

fn decode_schedule(inp: &mut Input<'_>) -> Vec<Step> {
    let n = 1 + inp.below(16);
    (0..n)
        .map(|_| match inp.u8() % 12 {
            0 | 1 => Step::Accept(usize::MAX),
            2 | 3 => Step::Pending,
            4 => Step::Accept(1),
            5 => Step::Accept(1 + inp.below(32)),
            6 | 7 => Step::Accept(1 + inp.below(4096)),
            8 => Step::Accept(1 + inp.below(65536)),
            9 => Step::Block,
            10 => Step::BlockStale,
            _ => Step::Accept(usize::MAX),
        })
        .collect()
}

fn decode_plan(inp: &mut Input<'_>) -> Vec<WriteOp> {
    let n = 1 + inp.below(8);
    (0..n)
        .map(|_| {
            let size = match inp.size() {
                usize::MAX => 1 << 20,
                s => s,
            };
            let shape = inp.u8();
            WriteOp {
                size,
                slices: 1 + usize::from(shape & 3),
                split_seed: u64::from(inp.u16()),
                flush_after: shape & 4 != 0,
                read_before: if shape & 8 != 0 { inp.below(64) } else { 0 },
            }
        })
        .collect()
}

/// The client's bytes for `write_pipeline`: preface, SETTINGS, requests with a `priority`
/// header and PRIORITY_UPDATEs, so that the scheduler has urgencies to act on.
fn decode_client(inp: &mut Input<'_>) -> Vec<u8> {
    let mut frames = vec![Frame::new(SETTINGS, 0, 0, Vec::new())];
    let n = inp.below(8);
    for _ in 0..n {
        let stream = STREAM_IDS[inp.below(7)];
        match inp.u8() % 4 {
            0 => {
                let value = inp.pick(&PRIORITY_VALUES);
                let mut payload = STREAM_IDS[inp.below(7)].to_be_bytes().to_vec();
                payload.extend_from_slice(value.as_bytes());
                frames.push(Frame::new(PRIORITY_UPDATE, 0, 0, payload));
            }
            1 => frames.push(Frame::new(
                HEADERS,
                END_HEADERS | END_STREAM,
                stream,
                request_block(None),
            )),
            _ => {
                let value = inp.pick(&PRIORITY_VALUES);
                frames.push(Frame::new(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    stream,
                    request_block(Some(value.as_bytes())),
                ));
            }
        }
    }
    let mut bytes = PREFACE.to_vec();
    bytes.extend(encode_all(&frames));
    bytes
}
