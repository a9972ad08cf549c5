//! The HTTP/2 write pipeline over arbitrary server frame sequences (DATA, header blocks
//! with valid-ish or random HPACK, SETTINGS/ACK, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY,
//! unknown types; h2-shaped header blocks or anything well-formed at the framing level; a
//! truncated last frame), written in arbitrary (vectored) chunks against an arbitrary fault
//! schedule on the transport (Pending, partial writes, blocked sockets, stale readiness,
//! buffered output, a failing write), with arbitrary policy and limits, then flushed and
//! shut down. Checks the output frame by frame (see `src/harness.rs`), not only for panics.
#![no_main]

use fuzz_harness::harness::{run_write_pipeline, CountingAlloc};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_write_pipeline(data) {
        panic!("write_pipeline invariant violated: {violation}");
    }
});
