//! `PriorityUpdate::parse` on arbitrary payloads: never panics, and its verdict agrees with
//! the frame layout of RFC 9218 §7.1 (checks in `tls-flush-testkit`, `parsers.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tls_flush_testkit::run_priority_update_parse;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_priority_update_parse(data) {
        panic!("priority_update_parse invariant violated: {violation}");
    }
});
