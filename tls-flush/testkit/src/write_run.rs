//! Running server frames through the write path the way h2 writes them, and checking what
//! came out: [`write_input`] (random-sized, vectored, randomly split writes re-offering the
//! rest, flushes and client reads in between), [`finish`] (h2's final flush polled as an
//! executor would, then `poll_shutdown`), [`check_delivery`] and [`check_ordering`]. The
//! property tests compose these steps with their own scenarios; [`run_write_case`] composes
//! them for a `write_pipeline` fuzz case ([`run_write_pipeline`]).

use std::io;

use tls_flush::StatsSnapshot;

use crate::checks::{
    check_control_not_overtaken, check_counters, check_first_settings_grew,
    check_header_blocks_to_end, check_in_order, check_settings_barriers, expected_frames,
    follows_header_grammar, match_frames, merge_split_data, unfinished_block_at_end, OutputEnd,
};
use crate::driver::{Harness, FUZZ_STALL_TIME};
use crate::frame::{encode_all, parse_frames, Frame, HEADER_LEN};
use crate::transport::{Sizes, Wire};
use crate::write_case::{decode_write_case, WriteCase};

/// One write call of the plan.
#[derive(Clone, Debug)]
pub struct WriteOp {
    /// Bytes offered (fewer at the end).
    pub size: usize,
    /// Slices of a vectored write (1: plain `poll_write`).
    pub slices: usize,
    pub split_seed: u64,
    pub flush_after: bool,
    /// Client bytes read before this write.
    pub read_before: usize,
}

/// Splits `chunk` into `slices` pieces (some possibly empty) at pseudo-random points.
pub fn split(chunk: &[u8], slices: usize, seed: u64) -> Vec<&[u8]> {
    if slices <= 1 {
        return vec![chunk];
    }
    let mut x = seed | 1;
    let mut cuts: Vec<usize> = (1..slices)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (chunk.len() as u64 + 1)) as usize
        })
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::with_capacity(slices);
    let mut at = 0;
    for cut in cuts {
        pieces.push(&chunk[at..cut]);
        at = cut;
    }
    pieces.push(&chunk[at..]);
    pieces
}

/// Where byte `pos` of the encoded `frames` falls, for error messages.
pub fn locate(frames: &[Frame], pos: usize) -> String {
    let mut start = 0;
    for (i, f) in frames.iter().enumerate() {
        if pos < start + f.wire_len() {
            let before = &frames[i.saturating_sub(3)..i];
            return format!(
                "writing byte {} of frame #{i} {f:?}, after {before:?}",
                pos - start
            );
        }
        start += f.wire_len();
    }
    format!("all {} frames written", frames.len())
}

/// The outcome of writing: what h2 managed to write, and whether an error ended it.
pub struct Written {
    /// Input bytes the wrapper took.
    pub taken: usize,
    /// The client's bytes read meanwhile.
    pub read: Vec<u8>,
    /// A write or flush failed (then `taken` is where).
    pub failed: bool,
}

/// Write call number `call` of `plan` (cycled) with `input[pos..]` left to write: reads the
/// client bytes the call asks for first, then offers the next `size` bytes, split into
/// `slices` slices (re-offering is the caller's business). Returns the call, the client
/// bytes read, and what the write returned; a violation names the frame being written.
pub fn write_call<'p>(
    h: &mut Harness,
    plan: &'p [WriteOp],
    call: usize,
    frames: &[Frame],
    input: &[u8],
    pos: usize,
) -> Result<(&'p WriteOp, Vec<u8>, io::Result<usize>), String> {
    let op = &plan[call % plan.len()];
    let read = h.read(op.read_before)?;
    let size = h.wire.borrow().sizes.apply(op.size, call);
    let chunk = &input[pos..pos.saturating_add(size).min(input.len())];
    let written = h
        .write_io(&split(chunk, op.slices, op.split_seed))
        .map_err(|e| format!("{e} ({})", locate(frames, pos)))?;
    Ok((op, read, written))
}

/// h2's side: reads `read_first` client bytes, then writes `input` (the encoded `frames`,
/// perhaps truncated) in the calls of `plan` (cycled), re-offering what was not taken,
/// reading client bytes before each call and flushing after those that say so; then reads
/// the rest of the client's bytes.
pub fn write_input(
    h: &mut Harness,
    plan: &[WriteOp],
    read_first: usize,
    frames: &[Frame],
    input: &[u8],
) -> Result<Written, String> {
    let mut read = h.read(read_first)?;
    let mut pos = 0;
    let mut calls = 0usize;
    while pos < input.len() {
        let (op, more, written) = write_call(h, plan, calls, frames, input, pos)?;
        calls += 1;
        read.extend(more);
        let failed = match written {
            Ok(n) => {
                pos += n;
                op.flush_after && h.flush_io()?.is_err()
            }
            Err(_) => true,
        };
        if failed {
            return Ok(Written {
                taken: pos,
                read,
                failed: true,
            });
        }
    }
    read.extend(h.read_all_client()?);
    Ok(Written {
        taken: pos,
        read,
        failed: false,
    })
}

/// What the transport holds after [`finish`].
pub struct Finished {
    /// `(accepted, flushed, queued_bytes)` once h2's last flush settled.
    pub settled: (usize, usize, u64),
    /// Every byte accepted, all flushed, the transport shut down.
    pub output: Vec<u8>,
}

/// h2's last flush, polled as long as it asks to be, then `poll_shutdown`; checks that
/// the transport was shut down with everything flushed. `None` when an injected write
/// failure ended it (only the absence of panics and hangs is required then).
pub fn finish(h: &mut Harness) -> Result<Option<Finished>, String> {
    if let Err(e) = h.settle_io()? {
        if h.wire.borrow().failed {
            let _ = h.shutdown_io()?;
            return Ok(None);
        }
        return Err(format!("the final flush failed: {e}"));
    }
    let settled = {
        let w = h.wire.borrow();
        (w.accepted.len(), w.flushed, h.stats().queued_bytes)
    };
    if let Err(e) = h.shutdown_io()? {
        if h.wire.borrow().failed {
            return Ok(None);
        }
        return Err(format!("shutdown failed: {e}"));
    }
    let w = h.wire.borrow();
    if !w.shut_down {
        return Err("the transport was not shut down".into());
    }
    if w.flushed != w.accepted.len() {
        return Err("bytes left unflushed in the transport at shutdown".into());
    }
    Ok(Some(Finished {
        settled,
        output: w.accepted.clone(),
    }))
}

/// The output is whole frames, `bytes_written` counts it, every stream's frames of
/// `expected` came out exactly once, in order, byte for byte, and once h2's last flush
/// returned `Ready` without asking to be polled again everything was on the socket but the
/// `unfinished` bytes of a header block h2 left unfinished at the end, still queued then
/// (h2 could have finished it; only shutdown sends it as it is). Returns the output frames
/// and their written indices.
pub fn check_delivery(
    fin: &Finished,
    expected: &[Frame],
    unfinished: u64,
    s: &StatsSnapshot,
) -> Result<(Vec<Frame>, Vec<usize>), String> {
    let raw = parse_frames(&fin.output)?;
    // Each split adds a frame header.
    let raw_frames = raw.len();
    let out = merge_split_data(expected, raw);
    let split_headers = (raw_frames - out.len()) * HEADER_LEN;
    if s.bytes_written != fin.output.len() as u64 {
        return Err(format!(
            "stats.bytes_written = {} but the transport accepted {} bytes",
            s.bytes_written,
            fin.output.len()
        ));
    }
    let perm = match_frames(expected, &out)?;
    let expected_len: usize = expected.iter().map(Frame::wire_len).sum::<usize>() + split_headers;
    if fin.output.len() != expected_len {
        return Err(format!(
            "{} bytes output, {expected_len} expected",
            fin.output.len()
        ));
    }
    let sent = expected_len - unfinished as usize;
    if fin.settled != (sent, sent, unfinished) {
        return Err(format!(
            "the final flush settled with {} of {expected_len} bytes written, {} flushed and \
             {} still queued ({unfinished} expected: an unfinished header block)",
            fin.settled.0, fin.settled.1, fin.settled.2
        ));
    }
    Ok((out, perm))
}

/// Which ordering checks apply to an output.
#[derive(Clone, Copy, Debug)]
pub struct OrderChecks<'a> {
    /// The input follows h2's header-block grammar: blocks must be contiguous and in order.
    pub header_blocks: bool,
    /// Where the output ends: inside its last header block when h2 stopped there after
    /// whole frames of it (shutdown sends the block as it is).
    pub end: OutputEnd,
    /// The configuration does not reorder: the output keeps the written order exactly.
    pub in_order: bool,
    /// With the announcement on, the input whose first SETTINGS grew.
    pub announced: Option<&'a [Frame]>,
}

/// Header blocks (when they apply), SETTINGS barriers, control frames ahead of later DATA,
/// the written order (in-order configurations), the first SETTINGS (announcing).
pub fn check_ordering(out: &[Frame], perm: &[usize], o: OrderChecks<'_>) -> Result<(), String> {
    if o.header_blocks {
        // Outside h2's grammar (stray CONTINUATIONs, interrupted blocks) the input's blocks
        // are not contiguous to begin with.
        check_header_blocks_to_end(out, perm, o.end)?;
    }
    check_settings_barriers(out, perm)?;
    check_control_not_overtaken(out, perm)?;
    if o.in_order {
        check_in_order(out, perm)?;
    }
    if let Some(input) = o.announced {
        check_first_settings_grew(input, out)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// write_pipeline
// ---------------------------------------------------------------------------------------

/// Runs one `write_pipeline` input; `Err` describes a violated invariant. Every whole
/// frame must be delivered, those of a header block left unfinished at the end included.
pub fn run_write_pipeline(data: &[u8]) -> Result<(), String> {
    let case = decode_write_case(data);
    run_write_case(&case).map_err(|e| {
        let k = &case.knobs;
        format!(
            "{e}\n  policy={:?} shape={:?} reorder={} announce={} cork={} pack={} limits={:?} \
             fragment={:?} urgent_cut={:?} anticipate={:?} sizing={:?} buffering={:?} \
             truncate={:?}\n  frames={:?}",
            k.policy,
            case.shape,
            k.reorders(),
            k.announce,
            k.cork,
            k.pack,
            k.limits,
            k.fragment,
            k.urgent_cut,
            k.anticipate,
            k.record_sizing,
            case.buffering,
            case.truncate,
            case.frames
        )
    })
}

/// Runs a `write_pipeline` case: its frames written as h2 writes them against its fault
/// schedule, then flushed and shut down, and every check on the output.
pub fn run_write_case(case: &WriteCase) -> Result<(), String> {
    let (input, truncated_by) = truncated_input(case);
    let mut wire = Wire::new(case.schedule.clone(), case.buffering, case.client.clone());
    wire.fail_write_at = case.fail_write_at;
    wire.sizes = Sizes::GrowingFloor;
    let mut h = Harness::new(case.knobs.config(), wire).with_stall_time(FUZZ_STALL_TIME);

    let written = write_input(&mut h, &case.plan, case.read_first, &case.frames, &input)?;
    if written.failed {
        // After a transport error only absence of panics and hangs is required; h2 would
        // shut the connection down.
        let _ = h.shutdown_io()?;
        return Ok(());
    }
    check_written(case, &h, &written, &input)?;
    let exp = Expected::new(case, truncated_by);
    let Some(finished) = finish(&mut h)? else {
        return Ok(());
    };
    let s = h.stats();
    let (out, perm) = check_delivery(&finished, &exp.frames, exp.unfinished, &s)?;
    let ordering = OrderChecks {
        header_blocks: follows_header_grammar(&case.frames, truncated_by > 0),
        end: if exp.unfinished > 0 {
            OutputEnd::InsideLastBlock
        } else {
            OutputEnd::AfterWholeBlocks
        },
        in_order: !case.knobs.reorders(),
        announced: case.knobs.announce.then(|| &case.frames[..exp.whole]),
    };
    check_ordering(&out, &perm, ordering)?;
    let bounds = case.knobs.counter_bounds();
    check_counters(&bounds, &exp.frames, &out, &perm, &s)?;
    check_decoder_counters(case, &s)
}

/// The encoded frames, the last one cut `truncate` bytes before its end (at least one of
/// its bytes kept); and by how many bytes.
fn truncated_input(case: &WriteCase) -> (Vec<u8>, usize) {
    let mut input = encode_all(&case.frames);
    let full_len = input.len();
    match case.truncate {
        Some(n) if !case.frames.is_empty() => {
            let last = case.frames.last().map_or(0, Frame::wire_len);
            let cut = n.min(last - 1);
            input.truncate(full_len - cut);
            (input, cut)
        }
        _ => (input, 0),
    }
}

/// Without an error the wrapper took everything, passed the client's bytes through and
/// ran the HTTP/2 pipeline.
fn check_written(
    case: &WriteCase,
    h: &Harness,
    written: &Written,
    input: &[u8],
) -> Result<(), String> {
    if written.taken != input.len() {
        return Err(format!(
            "took {} of {} bytes without an error",
            written.taken,
            input.len()
        ));
    }
    if written.read != case.client {
        return Err("the read side changed the client's bytes".into());
    }
    if !input.is_empty() && !h.is_http2() {
        return Err("the wrapper did not run the HTTP/2 pipeline".into());
    }
    Ok(())
}

/// What a write case must deliver.
struct Expected {
    /// The frames the output must consist of.
    frames: Vec<Frame>,
    /// How many of the case's frames they stand for: all but a truncated last one.
    whole: usize,
    /// Bytes of a header block left unfinished at the end: still queued after h2's last
    /// flush, sent at shutdown.
    unfinished: u64,
}

impl Expected {
    /// Every whole frame must be delivered, those of a header block still unfinished when
    /// h2 shuts down included (`poll_shutdown` queues it as it is); only a truncated last
    /// frame is dropped.
    fn new(case: &WriteCase, truncated_by: usize) -> Self {
        let whole = case.frames.len() - usize::from(truncated_by > 0);
        let tail_header =
            truncated_by > 0 && case.frames[whole].wire_len() - truncated_by >= HEADER_LEN;
        let open = unfinished_block_at_end(&case.frames, whole, tail_header);
        let unfinished: usize = case.frames[whole - open..whole]
            .iter()
            .map(Frame::wire_len)
            .sum();
        Expected {
            frames: expected_frames(&case.frames[..whole], case.knobs.announce),
            whole,
            unfinished: unfinished as u64,
        }
    }
}

/// The counters the client's side moves: at most one HPACK failure on the write side, no
/// more PRIORITY_UPDATE outcomes than the client sent frames.
fn check_decoder_counters(case: &WriteCase, s: &StatsSnapshot) -> Result<(), String> {
    if s.hpack_failures > 1 {
        return Err(format!(
            "{} HPACK failures on the write side alone (the decoder gives up once)",
            s.hpack_failures
        ));
    }
    if s.priority_updates_applied
        + s.priority_updates_buffered
        + s.priority_updates_ignored
        + s.priority_updates_invalid
        > case.client.len() as u64 / HEADER_LEN as u64
    {
        return Err("more PRIORITY_UPDATE outcomes than client frames".into());
    }
    Ok(())
}
