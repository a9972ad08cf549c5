//! Running a `read_observer` case ([`run_read_observer`], [`run_read_case`]): the client's
//! bytes handed to `FlushStream::poll_read` in planned chunks and buffer sizes, server
//! writes interleaved, then the checks: every byte passes through unchanged, the
//! PRIORITY_UPDATE counters agree with [`observer_model`], with nothing written every
//! write-side counter stays 0 and heap growth stays within a bound that depends on
//! header-block bytes only, and the server's frames arrive whole and in order.

use tls_flush::StatsSnapshot;

use crate::alloc::{memory_live, memory_mark, memory_peak};
use crate::checks::{
    check_control_not_overtaken, check_header_blocks, check_settings_barriers, match_frames,
    merge_split_data,
};
use crate::driver::{Harness, FUZZ_STALL_TIME};
use crate::frame::{encode_all, parse_frames, Frame, PREFACE};
use crate::observer_model::{
    observer_model, ObserverModel, OBSERVER_MAX_HEADER_BLOCK, OBSERVER_MAX_PRIORITY_VALUE,
    OBSERVER_MAX_SMALL_PAYLOAD,
};
use crate::read_case::{decode_read_case, ReadCase};
use crate::transport::{Buffering, Step, Wire};

/// Runs one `read_observer` input; `Err` describes a violated invariant.
pub fn run_read_observer(data: &[u8]) -> Result<(), String> {
    let case = decode_read_case(data);
    run_read_case(&case).map_err(|e| {
        format!(
            "{e}\n  policy={:?} preface={:?} max_early_updates={:?} read_plan={:?} \
             read_sizes={:?} writes={} client_len={}",
            case.policy,
            case.preface,
            case.max_early_updates,
            case.read_plan,
            case.read_sizes,
            case.writes.len(),
            case.client.len()
        )
    })
}

/// Runs a `read_observer` case and checks everything; see the module docs.
pub fn run_read_case(case: &ReadCase) -> Result<(), String> {
    let mut wire = Wire::new(
        vec![Step::Accept(usize::MAX)],
        Buffering::Off,
        case.client.clone(),
    );
    wire.read_plan = case.read_plan.clone();
    // Plain TCP: the wrapper decides from the first bytes.
    wire.alpn_h2 = false;
    let mut h = Harness::new(case.config(), wire).with_stall_time(FUZZ_STALL_TIME);
    let server_closes = case
        .writes
        .iter()
        .flat_map(|w| &w.frames)
        .any(Frame::ends_stream);
    let model = observer_model(&case.client, case.max_early_updates(), server_closes);

    let run = read_everything(&mut h, case)?;
    check_passed_through(&run.got, &case.client)?;
    let s = h.stats();
    check_update_counters(case, &model, &s, &run)?;
    let hpack_limit = if run.written.is_empty() { 1 } else { 2 };
    if s.hpack_failures > hpack_limit {
        return Err(format!(
            "{} HPACK failures (each direction's decoder gives up once)",
            s.hpack_failures
        ));
    }
    if run.written.is_empty() {
        check_quiet(&s)?;
        return check_memory(case, &model, &run);
    }
    check_server_frames(&mut h, &run.written)
}

/// What reading the case produced.
struct ReadRun {
    /// The bytes `poll_read` delivered.
    got: Vec<u8>,
    /// The server's frames written meanwhile.
    written: Vec<Frame>,
    /// When the server first wrote: how many client bytes had been read, and whether the
    /// write began with the server's SETTINGS (the mode is decided by it).
    first_write: Option<(usize, bool)>,
    /// Heap growth at the peak and retained at the end, with [`crate::CountingAlloc`].
    peak: Option<isize>,
    retained: Option<isize>,
}

/// Reads all the client's bytes through the wrapper in the case's buffer sizes, making the
/// server's writes before the reads they are planned for; measures heap growth meanwhile.
fn read_everything(h: &mut Harness, case: &ReadCase) -> Result<ReadRun, String> {
    let largest_read = case
        .read_sizes
        .iter()
        .map(|&(s, p)| s + p)
        .max()
        .unwrap_or(0);
    let mut run = ReadRun {
        got: Vec::with_capacity(case.client.len() + largest_read),
        written: Vec::new(),
        first_write: None,
        peak: None,
        retained: None,
    };
    let mut scratch = vec![0u8; largest_read.max(16)];
    let baseline = memory_mark();

    let mut reads = 0usize;
    let mut stall = h.stall();
    while h.wire.borrow().client_remaining() > 0 {
        server_writes_before(h, case, reads, &mut run)?;
        let (size, prefill) = case.read_sizes[reads % case.read_sizes.len()];
        reads += 1;
        match h.read_into(&mut scratch[..size + prefill], prefill)? {
            Some(range) => {
                if range.is_empty() && h.wire.borrow().client_remaining() > 0 {
                    return Err("poll_read returned no bytes with client bytes left".into());
                }
                run.got.extend_from_slice(&scratch[range]);
            }
            None => {
                if stall.stuck(&h.wire) {
                    return Err("poll_read stays Pending with client bytes left".into());
                }
            }
        }
    }
    // Once more at the end: EOF (or Pending) must not disturb anything.
    let _ = h.read_into(&mut scratch[..16], 0)?;
    run.peak = baseline.map(|b| memory_peak() - b);
    run.retained = baseline.map(|b| memory_live() - b);
    Ok(run)
}

/// The server's writes planned before read number `reads`.
fn server_writes_before(
    h: &mut Harness,
    case: &ReadCase,
    reads: usize,
    run: &mut ReadRun,
) -> Result<(), String> {
    for w in case.writes.iter().filter(|w| w.before_read == reads) {
        let bytes = encode_all(&w.frames);
        if run.first_write.is_none() && !bytes.is_empty() {
            run.first_write = Some((run.got.len(), is_server_settings(&bytes)));
        }
        if h.write_all_io(&bytes)?.is_err() || h.flush_io()?.is_err() {
            return Err("a server write failed on an open transport".into());
        }
        run.written.extend(w.frames.iter().cloned());
    }
    Ok(())
}

/// True when `bytes` start with a server preface SETTINGS frame (not an ACK, stream 0,
/// whole settings): only a first write like that makes the wrapper speak HTTP/2.
fn is_server_settings(bytes: &[u8]) -> bool {
    bytes.len() >= 9
        && bytes[3] == 0x4
        && bytes[4] & 0x1 == 0
        && bytes[5..9] == [0, 0, 0, 0]
        && u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]).is_multiple_of(6)
}

/// Every byte passed through unchanged.
fn check_passed_through(got: &[u8], client: &[u8]) -> Result<(), String> {
    if got == client {
        return Ok(());
    }
    let at = got
        .iter()
        .zip(client)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(client.len()));
    Err(format!(
        "poll_read delivered {} bytes differing from the client's {} at byte {at}",
        got.len(),
        client.len()
    ))
}

/// How much of the client's bytes the observer followed as HTTP/2.
enum Observed {
    /// All of them.
    All,
    /// Those before the server's first write, which was not its SETTINGS: the connection
    /// passes through from then on.
    UntilFirstWrite,
    /// None: the bytes are not HTTP/2.
    Nothing,
}

/// A server write decided the mode before the client's bytes did: PassThrough stops the
/// observer, HTTP/2 keeps it going on the client's bytes. A first write that is not the
/// server's SETTINGS makes it pass through from then on: what the observer counted before
/// that is a prefix of the model's updates.
fn observed(case: &ReadCase, model: &ObserverModel, run: &ReadRun) -> Observed {
    let preface_seen = match run.first_write {
        Some((r, _)) => {
            let seen = &case.client[..r.min(case.client.len())];
            let n = seen.len().min(PREFACE.len());
            seen[..n] == PREFACE[..n]
        }
        None => true,
    };
    let observed = preface_seen && run.first_write.is_none_or(|(_, settings)| settings);
    if model.http2 && observed {
        Observed::All
    } else if model.http2 && preface_seen {
        Observed::UntilFirstWrite
    } else {
        Observed::Nothing
    }
}

/// The PRIORITY_UPDATE counters against the model.
fn check_update_counters(
    case: &ReadCase,
    model: &ObserverModel,
    s: &StatsSnapshot,
    run: &ReadRun,
) -> Result<(), String> {
    let counted = s.priority_updates_applied
        + s.priority_updates_buffered
        + s.priority_updates_ignored
        + s.priority_updates_invalid;
    match observed(case, model, run) {
        Observed::All => check_all_updates(model, s, counted),
        Observed::UntilFirstWrite => {
            if counted > model.updates || s.priority_updates_invalid > model.invalid {
                return Err(format!(
                    "{counted} PRIORITY_UPDATE outcomes ({} invalid) counted before the \
                     connection passed through, more than the {} ({} malformed) the client \
                     sent",
                    s.priority_updates_invalid, model.updates, model.invalid
                ));
            }
            Ok(())
        }
        Observed::Nothing if counted != 0 => Err(format!(
            "{counted} PRIORITY_UPDATE outcomes counted on a connection whose client bytes \
             are not observed as HTTP/2"
        )),
        Observed::Nothing => Ok(()),
    }
}

/// Every complete PRIORITY_UPDATE counted once, the malformed ones as invalid, and the
/// outcomes of the stream table when it can be followed exactly.
fn check_all_updates(model: &ObserverModel, s: &StatsSnapshot, counted: u64) -> Result<(), String> {
    if counted != model.updates {
        return Err(format!(
            "{counted} PRIORITY_UPDATE outcomes counted (applied {}, buffered {}, ignored \
             {}, invalid {}) for {} complete PRIORITY_UPDATE frames",
            s.priority_updates_applied,
            s.priority_updates_buffered,
            s.priority_updates_ignored,
            s.priority_updates_invalid,
            model.updates
        ));
    }
    if s.priority_updates_invalid != model.invalid {
        return Err(format!(
            "{} PRIORITY_UPDATE frames counted invalid, {} are malformed",
            s.priority_updates_invalid, model.invalid
        ));
    }
    if let Some(want) = model.outcomes {
        let got = (
            s.priority_updates_applied,
            s.priority_updates_buffered,
            s.priority_updates_ignored,
        );
        if got != want {
            return Err(format!(
                "PRIORITY_UPDATE outcomes (applied, buffered, ignored) = {got:?}, the stream \
                 table says {want:?}"
            ));
        }
    }
    Ok(())
}

/// Nothing written: nothing queued, sent or scheduled.
fn check_quiet(s: &StatsSnapshot) -> Result<(), String> {
    let quiet = StatsSnapshot {
        priority_updates_applied: s.priority_updates_applied,
        priority_updates_buffered: s.priority_updates_buffered,
        priority_updates_ignored: s.priority_updates_ignored,
        priority_updates_invalid: s.priority_updates_invalid,
        hpack_failures: s.hpack_failures,
        priority_values_too_long: s.priority_values_too_long,
        bytes_read: s.bytes_read,
        ..StatsSnapshot::default()
    };
    if *s != quiet {
        return Err(format!("counters moved without any write: {s:?}"));
    }
    Ok(())
}

/// Memory: the observer copies header blocks (bounded) and small payloads, keeps the HPACK
/// table (bounded), a bounded stream table and a bounded list of early updates; nothing
/// grows with DATA, PRIORITY_UPDATE or unknown frames.
fn check_memory(case: &ReadCase, model: &ObserverModel, run: &ReadRun) -> Result<(), String> {
    let (Some(peak), Some(retained)) = (run.peak, run.retained) else {
        return Ok(());
    };
    // Reassembly buffers (payload and block, capacity up to twice their content), the
    // HPACK table (its entries come from literals in the header bytes, several times over
    // for small entries, and the table is capped), the decoded priority value (one capped
    // buffer: references to a large table entry are never copied per reference), a map
    // entry per opened stream, the early updates, the small-payload buffer, and slack.
    let header_bytes = model.header_bytes as isize;
    let bound = 16 * 1024
        + 4 * header_bytes.min(OBSERVER_MAX_HEADER_BLOCK as isize)
        + (16 * header_bytes).min(4 * 64 * 1024)
        + 2 * OBSERVER_MAX_PRIORITY_VALUE as isize
        + 256 * model.header_frames as isize
        + 2 * (OBSERVER_MAX_SMALL_PAYLOAD as isize)
        + 64 * case.max_early_updates() as isize;
    if peak > bound || retained > bound {
        return Err(format!(
            "memory grew by {peak} bytes at the peak ({retained} retained) reading {} client \
             bytes; bound {bound} ({} header frames with {} bytes)",
            case.client.len(),
            model.header_frames,
            model.header_bytes
        ));
    }
    Ok(())
}

/// The server's frames: whole, exact, in order, everything delivered (or, when the
/// connection passed through, byte for byte as written).
fn check_server_frames(h: &mut Harness, written: &[Frame]) -> Result<(), String> {
    if h.settle_io()?.is_err() || h.shutdown_io()?.is_err() {
        return Err("flush or shutdown failed on an open transport".into());
    }
    let output = h.output();
    if !h.is_http2() {
        // PassThrough: the bytes as written.
        if output != encode_all(written) {
            return Err("pass-through output differs from what was written".into());
        }
        return Ok(());
    }
    let out = merge_split_data(written, parse_frames(&output)?);
    let perm = match_frames(written, &out)?;
    check_header_blocks(&out, &perm)?;
    check_settings_barriers(&out, &perm)?;
    check_control_not_overtaken(&out, &perm)?;
    if h.stats().queued_bytes != 0 {
        return Err("bytes still queued after shutdown".into());
    }
    Ok(())
}
