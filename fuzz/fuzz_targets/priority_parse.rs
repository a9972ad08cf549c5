//! `Priority::parse` on arbitrary input: never panics, always yields a valid priority that
//! round-trips through its canonical form (checks in `src/harness.rs`).
#![no_main]

use fuzz_harness::harness::run_priority_parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_priority_parse(data) {
        panic!("priority_parse invariant violated: {violation}");
    }
});
