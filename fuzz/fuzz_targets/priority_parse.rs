//! `Priority::parse` on arbitrary input: never panics, always yields a valid priority that
//! round-trips through its canonical form (checks in `tls-flush-testkit`, `parsers.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tls_flush_testkit::run_priority_parse;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = run_priority_parse(data) {
        panic!("priority_parse invariant violated: {violation}");
    }
});
