//! `PriorityUpdate::parse` on arbitrary payloads: never panics, and its verdict agrees with
//! the frame layout of RFC 9218 §7.1 (checks in `src/harness.rs`).
#![no_main]

use fuzz_harness::harness::run_priority_update_parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_priority_update_parse(data) {
        panic!("priority_update_parse invariant violated: {violation}");
    }
});
