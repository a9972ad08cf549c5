//! Checks on the recorded output, frame by frame: what the wrapper must output for what h2
//! wrote ([`expected_frames`]), every stream's frames exactly once, in order, byte for byte
//! ([`match_frames`], which also maps each output frame to its written index; DATA frames
//! the wrapper split where a record ended are joined first, [`merge_split_data`]), header blocks
//! contiguous and in HPACK order, SETTINGS barriers, control frames never behind later DATA,
//! in-order policies keeping h2's order, the announcement changing only the first SETTINGS,
//! and the counters ([`check_counters`]). Also the shape of what was written: whether it
//! follows h2's header-block grammar, its largest header block, and a header block left
//! unfinished at the end.

use std::collections::HashMap;

use tls_flush::StatsSnapshot;

use crate::frame::{Frame, ACK, CONTINUATION, END_STREAM, HEADERS, NO_RFC7540_PRIORITIES};

/// The frames the wrapper must output for `input`: the same frames, with
/// SETTINGS_NO_RFC7540_PRIORITIES appended to the first non-ACK SETTINGS when announcing and
/// that frame does not carry it yet.
pub fn expected_frames(input: &[Frame], announce: bool) -> Vec<Frame> {
    let mut out = input.to_vec();
    if announce {
        if let Some(first) = out
            .iter_mut()
            .find(|f| f.is_settings() && f.flags & ACK == 0)
        {
            let already = first
                .payload
                .chunks_exact(6)
                .any(|s| u16::from_be_bytes([s[0], s[1]]) == 9);
            if !already {
                first.payload.extend_from_slice(&NO_RFC7540_PRIORITIES);
                // The grown frame's header is re-encoded, which clears the reserved bit
                // (RFC 9113 §4.1: it must be unset when sending; h2 never sets it).
                first.raw_stream &= 0x7fff_ffff;
            }
        }
    }
    out
}

/// `out` with the parts of each DATA frame the wrapper split where a record ended joined
/// again, at the last part's place (where the frame was complete; what went between its
/// parts overtook it): a DATA frame of `expected` may leave as several whose payloads, in
/// order, make up its payload, with its flags on the last part (END_STREAM only there).
/// Anything else is left as it is, for [`match_frames`] to judge; so are the parts of a
/// frame that never completes.
pub fn merge_split_data(expected: &[Frame], out: Vec<Frame>) -> Vec<Frame> {
    let mut upcoming: HashMap<u32, std::collections::VecDeque<&Frame>> = HashMap::new();
    for f in expected {
        upcoming.entry(f.stream()).or_default().push_back(f);
    }
    let mut merged: Vec<Frame> = Vec::with_capacity(out.len());
    // Per stream: the parts of the frame being joined, as they came.
    let mut open: HashMap<u32, Vec<Frame>> = HashMap::new();
    for f in out {
        let stream = f.stream();
        let want = upcoming.get(&stream).and_then(|q| q.front().copied());
        if let (Some(parts), Some(want)) = (open.get_mut(&stream), want) {
            let so_far: usize = parts.iter().map(|p| p.payload.len()).sum();
            if f.is_data() && want.payload[so_far..].starts_with(&f.payload) {
                let complete = so_far + f.payload.len() == want.payload.len();
                parts.push(f);
                if complete {
                    let parts = open.remove(&stream).expect("open");
                    merged.push(join_parts(parts));
                    upcoming.get_mut(&stream).map(|q| q.pop_front());
                }
                continue;
            }
        }
        if let Some(parts) = open.remove(&stream) {
            merged.extend(parts);
        }
        let begins_split = want.is_some_and(|w| {
            f.is_data()
                && w.is_data()
                && f.flags & END_STREAM == 0
                && f.payload.len() < w.payload.len()
                && w.payload.starts_with(&f.payload)
        });
        if begins_split {
            open.insert(stream, vec![f]);
        } else {
            if let Some(q) = upcoming.get_mut(&stream) {
                q.pop_front();
            }
            merged.push(f);
        }
    }
    let mut unfinished: Vec<(u32, Vec<Frame>)> = open.into_iter().collect();
    unfinished.sort_by_key(|(stream, _)| *stream);
    merged.extend(unfinished.into_iter().flat_map(|(_, parts)| parts));
    merged
}

/// The parts of a split DATA frame as one frame: their payloads in order, the last part's
/// flags.
fn join_parts(parts: Vec<Frame>) -> Frame {
    let mut parts = parts.into_iter();
    let mut joined = parts.next().expect("a split frame has parts");
    for part in parts {
        joined.payload.extend_from_slice(&part.payload);
        joined.flags = part.flags;
    }
    joined
}

/// Maps each output frame to its index in `expected`, checking that every stream's frames
/// (stream 0 included) come out in exactly the written order with identical bytes, and that
/// nothing is lost, duplicated or invented.
pub fn match_frames(expected: &[Frame], out: &[Frame]) -> Result<Vec<usize>, String> {
    let mut by_stream: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, f) in expected.iter().enumerate() {
        by_stream.entry(f.stream()).or_default().push(i);
    }
    let mut cursor: HashMap<u32, usize> = HashMap::new();
    let mut perm = Vec::with_capacity(out.len());
    for (pos, f) in out.iter().enumerate() {
        let Some(list) = by_stream.get(&f.stream()) else {
            return Err(format!(
                "output frame #{pos} {f:?} is on a stream never written"
            ));
        };
        let k = cursor.entry(f.stream()).or_default();
        let Some(&idx) = list.get(*k) else {
            return Err(format!(
                "output frame #{pos} {f:?} is extra: stream {} had only {} frames \
                 (duplicated bytes?)",
                f.stream(),
                list.len()
            ));
        };
        if expected[idx] != *f {
            let same_elsewhere = list.iter().any(|&j| expected[j] == *f);
            return Err(format!(
                "stream {}: its frame #{} should be {:?} (written as frame #{idx}) but output \
                 frame #{pos} is {f:?}{}",
                f.stream(),
                *k,
                expected[idx],
                if same_elsewhere {
                    " (a frame of this stream out of order)"
                } else {
                    " (bytes differ from every frame of this stream)"
                }
            ));
        }
        *k += 1;
        perm.push(idx);
    }
    let mut streams: Vec<_> = by_stream.iter().collect();
    streams.sort();
    for (stream, list) in streams {
        let got = cursor.get(stream).copied().unwrap_or(0);
        if got != list.len() {
            return Err(format!(
                "stream {stream}: {} frames written, {got} output; first lost: {:?} \
                 (written as frame #{})",
                list.len(),
                expected[list[got]],
                list[got]
            ));
        }
    }
    Ok(perm)
}

/// Header blocks are contiguous and keep their relative order across streams.
pub fn check_header_blocks(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    check_header_blocks_to_end(out, perm, OutputEnd::AfterWholeBlocks)
}

/// How the output must end, as far as header blocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputEnd {
    /// Every header block in it is finished.
    AfterWholeBlocks,
    /// Inside its last header block: the writer stopped there, and shutdown sent the
    /// block's whole frames as they are.
    InsideLastBlock,
}

/// [`check_header_blocks`], the output ending as `end` says.
pub fn check_header_blocks_to_end(
    out: &[Frame],
    perm: &[usize],
    end: OutputEnd,
) -> Result<(), String> {
    let mut open: Option<u32> = None;
    let mut last_block: Option<usize> = None;
    for (pos, f) in out.iter().enumerate() {
        if let Some(stream) = open {
            if f.kind != CONTINUATION || f.stream() != stream {
                return Err(format!(
                    "output frame #{pos} {f:?} sits inside the header block of stream {stream}"
                ));
            }
            if f.end_headers() {
                open = None;
            }
            continue;
        }
        if f.kind == CONTINUATION {
            return Err(format!(
                "output frame #{pos} {f:?} is a CONTINUATION outside any header block"
            ));
        }
        if f.starts_header_block() {
            if let Some(prev) = last_block {
                if perm[pos] < prev {
                    return Err(format!(
                        "header block {f:?} (written as frame #{}) was output after a header \
                         block written later (frame #{prev}): HPACK order broken",
                        perm[pos]
                    ));
                }
            }
            last_block = Some(perm[pos]);
            if !f.end_headers() {
                open = Some(f.stream());
            }
        }
    }
    match (open, end) {
        (Some(stream), OutputEnd::AfterWholeBlocks) => Err(format!(
            "the output ends inside the header block of stream {stream}"
        )),
        (None, OutputEnd::InsideLastBlock) => {
            Err("the output does not end with the unfinished header block".into())
        }
        _ => Ok(()),
    }
}

/// SETTINGS (ACK or not) is a barrier: everything written before it is output before it,
/// everything written after it is output after it.
pub fn check_settings_barriers(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let n = perm.len();
    let mut suffix_min = vec![usize::MAX; n + 1];
    for p in (0..n).rev() {
        suffix_min[p] = suffix_min[p + 1].min(perm[p]);
    }
    let mut prefix_max: Option<usize> = None;
    for (p, f) in out.iter().enumerate() {
        if f.is_settings() {
            if let Some(m) = prefix_max.filter(|&m| m > perm[p]) {
                return Err(format!(
                    "{f:?} (written as frame #{}) was overtaken by frame #{m} written after it",
                    perm[p]
                ));
            }
            if suffix_min[p + 1] < perm[p] {
                return Err(format!(
                    "{f:?} (written as frame #{}) went out before frame #{} written ahead of it",
                    perm[p],
                    suffix_min[p + 1]
                ));
            }
        }
        prefix_max = Some(prefix_max.map_or(perm[p], |m| m.max(perm[p])));
    }
    Ok(())
}

/// Connection-level frames are never stuck behind DATA: no DATA frame written after a
/// stream-0 frame is output before it.
pub fn check_control_not_overtaken(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    let mut max_data_perm: Option<(usize, usize)> = None;
    for (p, f) in out.iter().enumerate() {
        if f.stream() == 0 {
            if let Some((q, m)) = max_data_perm.filter(|&(_, m)| m > perm[p]) {
                return Err(format!(
                    "control frame {f:?} (written as frame #{}) was output after {:?} written \
                     later (frame #{m})",
                    perm[p], out[q]
                ));
            }
        }
        if f.is_data() && max_data_perm.is_none_or(|(_, m)| perm[p] > m) {
            max_data_perm = Some((p, perm[p]));
        }
    }
    Ok(())
}

/// In-order policies output exactly the written order.
pub fn check_in_order(out: &[Frame], perm: &[usize]) -> Result<(), String> {
    match perm.iter().enumerate().find(|&(p, &i)| p != i) {
        Some((p, &i)) => Err(format!(
            "output frame #{p} {:?} was written as frame #{i}: an in-order policy reordered",
            out[p]
        )),
        None => Ok(()),
    }
}

/// DATA frames output ahead of a DATA frame written before them.
pub fn inverted_data_frames(out: &[Frame], perm: &[usize]) -> usize {
    let mut later_min = usize::MAX;
    let mut inverted = 0;
    for p in (0..out.len()).rev() {
        if out[p].is_data() {
            if later_min < perm[p] {
                inverted += 1;
            }
            later_min = later_min.min(perm[p]);
        }
    }
    inverted
}

/// With the announcement on: the first non-ACK SETTINGS grew by exactly the 6 bytes of
/// SETTINGS_NO_RFC7540_PRIORITIES = 1 (unless it already carried it), and every other
/// SETTINGS is untouched.
pub fn check_first_settings_grew(input: &[Frame], out: &[Frame]) -> Result<(), String> {
    let first = |f: &&Frame| f.is_settings() && f.flags & ACK == 0;
    let Some(first_in) = input.iter().find(first) else {
        return Ok(());
    };
    let Some(first_out) = out.iter().find(first) else {
        return Err("no non-ACK SETTINGS output".into());
    };
    let already = first_in.payload.chunks_exact(6).any(|s| s[..2] == [0, 9]);
    let mut want = first_in.payload.clone();
    if !already {
        want.extend_from_slice(&NO_RFC7540_PRIORITIES);
    }
    if first_out.payload != want {
        return Err(format!(
            "first SETTINGS payload {:02x?}, expected {want:02x?}",
            first_out.payload
        ));
    }
    let others = |frames: &[Frame], first: &Frame| -> Vec<Frame> {
        frames
            .iter()
            .filter(|f| f.is_settings() && !std::ptr::eq(*f, first))
            .cloned()
            .collect()
    };
    if others(input, first_in) != others(out, first_out) {
        return Err("a SETTINGS frame other than the first changed".into());
    }
    Ok(())
}

/// Whether `frames` follows h2's header-block grammar: every HEADERS/PUSH_PROMISE without
/// END_HEADERS is followed at once by CONTINUATIONs of its stream up to one with
/// END_HEADERS, there is no other CONTINUATION, and no header block is on stream 0.
/// (`truncated`: the sequence may stop inside the last block.)
pub fn follows_header_grammar(frames: &[Frame], truncated: bool) -> bool {
    let mut open: Option<u32> = None;
    for f in frames {
        match open {
            Some(stream) => {
                if f.kind != CONTINUATION || f.stream() != stream {
                    return false;
                }
                if f.end_headers() {
                    open = None;
                }
            }
            None => {
                if f.kind == CONTINUATION || (f.starts_header_block() && f.stream() == 0) {
                    return false;
                }
                if f.starts_header_block() && !f.end_headers() {
                    open = Some(f.stream());
                }
            }
        }
    }
    open.is_none() || truncated
}

/// The wire size of the largest header block as the wrapper groups them: a HEADERS or
/// PUSH_PROMISE and the CONTINUATIONs of its stream that follow it at once, up to
/// END_HEADERS or to the first other frame (which interrupts the block).
pub fn largest_header_unit(frames: &[Frame]) -> usize {
    let mut largest = 0;
    let mut open: Option<(u32, usize)> = None;
    for f in frames {
        if let Some((stream, size)) = open {
            if f.kind == CONTINUATION && f.stream() == stream {
                let size = size + f.wire_len();
                largest = largest.max(size);
                open = (!f.end_headers()).then_some((stream, size));
                continue;
            }
            open = None;
        }
        if f.starts_header_block() {
            largest = largest.max(f.wire_len());
            if !f.end_headers() {
                open = Some((f.stream(), f.wire_len()));
            }
        }
    }
    largest
}

/// How many of the whole frames `frames[..whole]` form a header block still unfinished
/// when h2 stops writing: a HEADERS/PUSH_PROMISE without END_HEADERS followed only by
/// CONTINUATIONs of its stream without END_HEADERS. The wrapper keeps such a block through
/// h2's last flush (h2 could still finish it) and sends it as it is at shutdown. Anything
/// else after it (any other frame, a CONTINUATION of another stream, or the header of a
/// truncated last frame that does not continue the block, `tail_header`) interrupts the
/// block, which the wrapper then queues as it is at once.
pub fn unfinished_block_at_end(frames: &[Frame], whole: usize, tail_header: bool) -> usize {
    let mut open: Option<(u32, usize)> = None;
    for (i, f) in frames[..whole].iter().enumerate() {
        if let Some((stream, _)) = open {
            if f.kind == CONTINUATION && f.stream() == stream {
                if f.end_headers() {
                    open = None;
                }
                continue;
            }
            open = None;
        }
        if f.starts_header_block() && !f.end_headers() {
            open = Some((f.stream(), i));
        }
    }
    let Some((stream, start)) = open else {
        return 0;
    };
    if tail_header {
        let next = &frames[whole];
        if next.kind != CONTINUATION || next.stream() != stream {
            return 0;
        }
    }
    whole - start
}

// ---------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------

/// What the counters of a complete run are checked against.
#[derive(Clone, Copy, Debug)]
pub struct CounterBounds {
    /// The configured queue limit (`FlushConfig::queue_limit`: the hard limit, plus what
    /// an anticipation hold may take past it).
    pub hard_limit: usize,
    /// The payload of a full TLS record.
    pub record_payload: usize,
    /// The configuration reorders DATA.
    pub reorders: bool,
    /// The configuration ends records early after urgent frames.
    pub urgent_cut: bool,
    /// DATA frames with a payload up to this can end a record early (`usize::MAX`: any).
    pub cut_data_max: usize,
}

/// The counters after a complete run: nothing queued, the queue's high water within the
/// hard limit plus one header block (or one frame), records that can hold the bytes,
/// reordered DATA only when reordering and at most the DATA frames actually output ahead of
/// older DATA, early cuts only with an urgent cut and at most one per frame that can end a
/// record.
pub fn check_counters(
    b: &CounterBounds,
    expected: &[Frame],
    out: &[Frame],
    perm: &[usize],
    s: &StatsSnapshot,
) -> Result<(), String> {
    check_queue_counters(b, expected, s)?;
    check_order_counters(b, out, perm, s)
}

fn check_queue_counters(
    b: &CounterBounds,
    expected: &[Frame],
    s: &StatsSnapshot,
) -> Result<(), String> {
    if s.queued_bytes != 0 {
        return Err(format!(
            "stats.queued_bytes = {} after shutdown (0 expected)",
            s.queued_bytes
        ));
    }
    // Admission checks every frame against everything queued (an unfinished header block
    // too), so the queue stays within the hard limit, or within one frame admitted into an
    // empty queue; a header block already begun is taken whole (it cannot leave until
    // complete), so one block may come on top. The first SETTINGS grows by 6 bytes after
    // admission.
    let largest_frame = expected.iter().map(Frame::wire_len).max().unwrap_or(0);
    let largest_block = largest_header_unit(expected);
    let bound = (b.hard_limit + largest_block).max(largest_frame) + NO_RFC7540_PRIORITIES.len();
    if s.queued_bytes_high_water > bound as u64 {
        return Err(format!(
            "stats.queued_bytes_high_water = {} > max(hard limit + largest header block, \
             largest frame) = {bound}",
            s.queued_bytes_high_water
        ));
    }
    if s.records_written * (b.record_payload as u64) < s.bytes_written {
        return Err(format!(
            "{} records cannot hold {} bytes",
            s.records_written, s.bytes_written
        ));
    }
    Ok(())
}

fn check_order_counters(
    b: &CounterBounds,
    out: &[Frame],
    perm: &[usize],
    s: &StatsSnapshot,
) -> Result<(), String> {
    let inverted = inverted_data_frames(out, perm) as u64;
    if !b.reorders && s.data_frames_reordered != 0 {
        return Err(format!(
            "in-order configuration counted {} reordered DATA frames",
            s.data_frames_reordered
        ));
    }
    if s.data_frames_reordered > inverted {
        return Err(format!(
            "stats.data_frames_reordered = {} but only {inverted} DATA frames were output \
             ahead of older DATA",
            s.data_frames_reordered
        ));
    }
    if !b.urgent_cut && s.early_cuts != 0 {
        return Err(format!("no urgent cut, yet {} early cuts", s.early_cuts));
    }
    // A record ends early after a (small) DATA frame of an urgent stream, or after an
    // urgent stream's HEADERS whose DATA is not queued yet.
    let cut_points = out
        .iter()
        .filter(|f| (f.is_data() && f.payload.len() <= b.cut_data_max) || f.kind == HEADERS)
        .count() as u64;
    if s.early_cuts > cut_points {
        return Err(format!(
            "{} early cuts but only {cut_points} DATA (payload up to {}) and HEADERS frames",
            s.early_cuts, b.cut_data_max
        ));
    }
    Ok(())
}
