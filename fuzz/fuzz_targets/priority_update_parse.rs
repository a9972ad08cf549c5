//! `PriorityUpdate::parse` on arbitrary payloads: never panics, and its verdict agrees with
//! the frame layout of RFC 9218 §7.1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_priority::{Priority, PriorityUpdate, PriorityUpdateError};

fuzz_target!(|data: &[u8]| {
    match PriorityUpdate::parse(data) {
        Ok(update) => {
            assert!(data.len() >= 4);
            assert!(update.prioritized_stream_id != 0);
            assert!(update.prioritized_stream_id <= 0x7FFF_FFFF);
            assert!(update.priority.urgency <= 7);
            // The field value is ASCII, hence UTF-8, and parses like a header.
            let field = std::str::from_utf8(&data[4..]).expect("ASCII is UTF-8");
            assert_eq!(update.priority, Priority::parse(field));
        }
        Err(PriorityUpdateError::TooShort) => assert!(data.len() < 4),
        Err(PriorityUpdateError::ZeroStreamId) => {
            assert_eq!(data[0] & 0x7F, 0);
            assert_eq!(&data[1..4], &[0, 0, 0]);
        }
        Err(PriorityUpdateError::NonAscii) => assert!(!data[4..].is_ascii()),
    }
});
