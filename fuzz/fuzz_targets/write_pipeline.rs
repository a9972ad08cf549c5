//! The HTTP/2 write pipeline over arbitrary server frame sequences (DATA, header blocks
//! with valid-ish or random HPACK, SETTINGS/ACK, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY,
//! unknown types; h2-shaped header blocks or anything well-formed at the framing level; a
//! truncated last frame), written in arbitrary (vectored) chunks against an arbitrary fault
//! schedule on the transport (Pending, partial writes, blocked sockets, stale readiness,
//! buffered output, a failing write), with arbitrary policy and limits, then flushed and
//! shut down. Checks the output frame by frame, not only for panics. The logic is
//! `tls-flush-testkit` (`write_case.rs`, `frame_gen.rs`, `write_run.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tls_flush_testkit::{run_write_pipeline, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_write_pipeline(data) {
        panic!("write_pipeline invariant violated: {violation}");
    }
});
