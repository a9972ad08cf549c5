//! The read-side observer over arbitrary client bytes (after a valid client preface, a
//! partial or corrupt one, or none), handed to `FlushStream::poll_read` in arbitrary chunks
//! and buffer sizes, with h2-like server writes interleaved. Checks that every byte passes
//! through unchanged, that the PRIORITY_UPDATE counters match a reference parse of the
//! client's frames, that nothing is queued or written when nothing was written, that memory
//! stays bounded, and that the server's frames are delivered intact. The logic is
//! `tls-flush-testkit` (`read_case.rs`, `read_run.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tls_flush_testkit::{run_read_observer, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_read_observer(data) {
        panic!("read_observer invariant violated: {violation}");
    }
});
