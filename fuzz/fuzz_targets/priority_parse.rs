//! `Priority::parse` on arbitrary input: never panics, always yields a valid priority that
//! round-trips through its canonical form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_priority::Priority;

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let p = Priority::parse(&input);
    assert!(p.urgency <= 7, "urgency out of range: {p:?} from {input:?}");
    assert_eq!(
        Priority::parse(&p.to_string()),
        p,
        "round trip of {input:?}"
    );
});
