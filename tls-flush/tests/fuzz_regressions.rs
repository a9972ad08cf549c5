//! Fuzz regressions: inputs found or kept by the cargo-fuzz targets in `fuzz/`, replayed on
//! stable Rust through exactly the targets' own logic and invariant checks. Both the fuzz
//! targets and these tests call the `tls-flush-testkit` crate (`testkit/`: input decoders,
//! fault-injecting transport, polling driver, checks), so they cannot drift apart (see
//! `fuzz/README.md`).
//!
//! - `corpus_*` replay the inputs under `tests/fuzz_corpus/<target>/` (the latest campaign's
//!   corpus minimized with `cargo fuzz cmin`, plus the minimized input of each finding and
//!   the named inputs of earlier campaigns) through the target's checks: every whole frame
//!   must be delivered, those of a header block left unfinished at the end included.
//! - The findings (frames written inside or across unfinished header blocks, which h2 never
//!   does, lost or reordered bytes and once spun forever; a header block still unfinished
//!   when h2 shut down was dropped) are regression tests, each with the minimized fuzz input
//!   and a hand-written version of the same frame sequence. Fixed by queueing an interrupted
//!   header block as it is (`write_path.rs`, `close_interrupted_block`), and an unfinished
//!   one at shutdown the same way (`queue_open_block`, called by `poll_shutdown`).

use std::path::{Path, PathBuf};

use tls_flush::Policy;
use tls_flush_testkit::{
    observer_model, run_priority_parse, run_priority_update_parse, run_read_case,
    run_read_observer, run_write_case, run_write_pipeline, CountingAlloc, Frame, Preface, ReadCase,
    ReadPlan, Shape, WriteCase, CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS, PING,
    PREFACE, PRIORITY_UPDATE,
};

/// Counts this thread's heap bytes, for the read observer's memory bound.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files
}

fn replay(target: &str, check: impl Fn(&[u8]) -> Result<(), String>) {
    let mut failures = Vec::new();
    for path in corpus(target) {
        let data = std::fs::read(&path).expect("readable corpus file");
        if let Err(e) = check(&data) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn corpus_write_pipeline() {
    // Every whole frame delivered, which holds the fixed findings to their fix.
    replay("write_pipeline", run_write_pipeline);
}

#[test]
fn corpus_read_observer() {
    replay("read_observer", run_read_observer);
}

#[test]
fn corpus_priority_parse() {
    replay("priority_parse", run_priority_parse);
}

#[test]
fn corpus_priority_update_parse() {
    replay("priority_update_parse", run_priority_update_parse);
}

// ---------------------------------------------------------------------------------------
// Findings of write_pipeline (the first four on f393709, fixed by 63d75e0, the last one
// fixed by queueing an unfinished block at shutdown; the comments describe the bug as
// found). All need h2 to write header blocks that break RFC 9113
// §6.2/§6.10 (a HEADERS or PUSH_PROMISE without END_HEADERS must be followed at once by
// CONTINUATIONs of the same stream), which h2 does not do; but the wrapper's contract is to
// never lose, duplicate or reorder a stream's bytes, and to never spin, whatever it is given.
// ---------------------------------------------------------------------------------------

fn headers(stream: u32, flags: u8, block: &[u8]) -> Frame {
    Frame::new(HEADERS, flags, stream, block)
}

fn continuation(stream: u32, flags: u8, block: &[u8]) -> Frame {
    Frame::new(CONTINUATION, flags, stream, block)
}

fn data(stream: u32, len: usize) -> Frame {
    Frame::new(DATA, 0, stream, vec![stream as u8; len])
}

/// Runs the minimized fuzz input `tests/fuzz_corpus/write_pipeline/<finding>` and a
/// readable case of the same finding with the target's checks: every stream's frames
/// delivered exactly once, in the written order, with identical bytes, without stalling.
fn assert_delivered(finding: &str, case: &WriteCase) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_corpus/write_pipeline")
        .join(finding);
    let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let violations: Vec<String> = [
        run_write_pipeline(&input).map_err(|e| format!("minimized input: {e}")),
        run_write_case(case).map_err(|e| format!("readable case: {e}")),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n\n"));
}

#[test]
fn unfinished_header_block_replaced_by_the_next_one_is_lost() {
    // write_path.rs `collect_unit`: a HEADERS/PUSH_PROMISE without END_HEADERS is stored in
    // `open_block`, overwriting a block already open there. The first HEADERS never reaches
    // the wire (and `queued_bytes` drops by its size without anything being written).
    let case = WriteCase::plain(
        Policy::EarlyFlush,
        vec![
            headers(1, 0, &[0x88]),
            headers(3, 0, &[0x88]),
            continuation(3, END_HEADERS, &[]),
        ],
    );
    assert_delivered("finding-lost", &case);
}

#[test]
fn frame_inside_an_unfinished_header_block_overtakes_it() {
    // `collect_unit` queues every non-CONTINUATION frame at once, while the open block is
    // queued only when its END_HEADERS arrives: stream 1's DATA leaves before stream 1's
    // HEADERS, in every policy (here the in-order one).
    let case = WriteCase::plain(
        Policy::EarlyFlush,
        vec![
            headers(1, 0, &[0x88]),
            data(1, 10),
            continuation(1, END_HEADERS, &[]),
        ],
    );
    assert_delivered("finding-overtaken", &case);
}

#[test]
fn continuation_of_another_stream_joins_the_open_block() {
    // `collect_unit` appends any CONTINUATION to the open block without comparing stream
    // ids; the unit is scheduled as stream 1's, so under `scheduled` (header blocks before
    // DATA) stream 3's CONTINUATION leaves before stream 3's earlier DATA.
    let case = WriteCase::plain(
        Policy::Scheduled,
        vec![
            headers(1, 0, &[0x88]),
            data(3, 10),
            continuation(3, END_HEADERS, &[]),
        ],
    );
    assert_delivered("finding-cross", &case);
}

#[test]
fn refused_frame_behind_an_unfinished_header_block_spins_forever() {
    // `admit` counts the open block as queued and refuses what does not fit under the hard
    // limit, but the open block can only leave once its END_HEADERS arrives, which h2 would
    // send after the refused frame. `poll_write_h2` then returns Pending after waking the
    // task, forever: a busy loop at 100% CPU on a connection that never progresses. Here
    // with limits of 0 bytes (any frame is refused while the block is open); with the
    // default 1 MiB hard limit a 1 MiB DATA frame after the open block does the same.
    let mut case = WriteCase::plain(
        Policy::EarlyFlush,
        vec![
            headers(1, 0, &[0x88]),
            Frame::new(PING, 0, 0, [0; 8]),
            continuation(1, END_HEADERS, &[]),
        ],
    );
    case.knobs.limits = Some((0, 0));
    assert_delivered("finding-stall", &case);
}

#[test]
fn unfinished_header_block_at_shutdown_is_delivered() {
    // `poll_shutdown` drained the queues and then dropped `open_block` (a HEADERS or
    // PUSH_PROMISE without END_HEADERS and the CONTINUATIONs so far), logging "shutdown with
    // a partially written frame from h2; its bytes are dropped"; `queued_bytes` kept
    // counting them: the one place where whole frames written by h2 never reached the wire.
    // (h2 always finishes a block, so only a writer breaking RFC 9113 §6.10 gets here.)
    // Fixed: `poll_shutdown` queues the open block as it is before draining, as an
    // interrupted block is queued (`WritePath::queue_open_block`).
    let case = WriteCase::plain(
        Policy::Scheduled,
        vec![
            headers(1, END_HEADERS, &[0x88]),
            data(1, 10),
            headers(3, 0, &[0x88]),
        ],
    );
    assert_delivered("finding-unfinished-at-shutdown", &case);
}

// ---------------------------------------------------------------------------------------
// Documented behaviour the checks rely on (passing)
// ---------------------------------------------------------------------------------------

/// A truncated last frame (h2 shut down mid-frame) is dropped, every whole frame before it
/// is delivered: those of the header block the truncated CONTINUATION would have finished
/// too (queued as it is at shutdown), and nothing stays counted in `queued_bytes`.
#[test]
fn truncated_final_frame_delivers_every_complete_unit_before_it() {
    let block = [0x88, 0x40, 1, b'a', 1, b'b'];
    let mut case = WriteCase::plain(
        Policy::Scheduled,
        vec![
            headers(1, END_HEADERS, &block),
            data(1, 100),
            headers(3, 0, &block[..2]),
            continuation(3, 0, &block[2..4]),
            continuation(3, END_HEADERS, &block[4..]),
        ],
    );
    case.truncate = Some(3);
    run_write_case(&case).expect("complete units delivered");
    case.shape = Shape::Grammar;
    case.frames[1] = Frame::new(DATA, END_STREAM, 1, vec![7; 20_000]);
    run_write_case(&case).expect("complete units delivered");
    // Cut inside the header of the last CONTINUATION rather than its payload: the same.
    case.truncate = Some(9);
    run_write_case(&case).expect("complete units delivered");
}

/// A flood of PRIORITY_UPDATE frames for idle streams, read a few bytes at a time: every
/// frame is counted exactly once (at most `max_early_updates` buffered, the rest ignored),
/// and the observer's memory does not grow with their number.
#[test]
fn priority_update_flood_for_idle_streams_stays_bounded() {
    let mut client = PREFACE.to_vec();
    for i in 0..5000u32 {
        let mut payload = (2 * i + 1).to_be_bytes().to_vec();
        payload.extend_from_slice(b"u=0");
        Frame::new(PRIORITY_UPDATE, 0, 0, payload).encode_into(&mut client);
    }
    let case = ReadCase {
        policy: Policy::Scheduled,
        max_early_updates: Some(16),
        anticipate: None,
        preface: Preface::Valid,
        read_plan: ReadPlan {
            chunks: vec![7, 4096, 1],
            eof: true,
        },
        read_sizes: vec![(13, 0), (1000, 3)],
        writes: Vec::new(),
        client,
    };
    let model = observer_model(&case.client, 16, false);
    assert_eq!(model.updates, 5000);
    assert_eq!(model.outcomes, Some((0, 16, 4984)));
    if let Err(violation) = run_read_case(&case) {
        panic!("{violation}");
    }
}
