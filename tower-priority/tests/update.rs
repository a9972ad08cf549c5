//! `PriorityUpdate::parse`: the HTTP/2 PRIORITY_UPDATE payload of RFC 9218 §7.1.

use std::error::Error;

use tower_priority::{Priority, PriorityUpdate, PriorityUpdateError};

fn payload(id: u32, field: &[u8]) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(field);
    v
}

// RFC 9218 §7.1: Prioritized Stream ID (31 bits after a reserved bit), then the field value.
#[test]
fn rfc9218_7_1_layout() {
    let update = PriorityUpdate::parse(&payload(1, b"u=5, i")).unwrap();
    assert_eq!(
        update,
        PriorityUpdate {
            prioritized_stream_id: 1,
            priority: Priority {
                urgency: 5,
                incremental: true
            },
        }
    );
}

#[test]
fn stream_id_is_big_endian_31_bits() {
    let u = PriorityUpdate::parse(&payload(0x0102_0304, b"u=0")).unwrap();
    assert_eq!(u.prioritized_stream_id, 0x0102_0304);
    let max = PriorityUpdate::parse(&payload(0x7FFF_FFFF, b"")).unwrap();
    assert_eq!(max.prioritized_stream_id, 0x7FFF_FFFF);
}

// RFC 9218 §7.1: the reserved bit is ignored.
#[test]
fn reserved_bit_is_masked() {
    let u = PriorityUpdate::parse(&payload(0x8000_0003, b"u=2")).unwrap();
    assert_eq!(u.prioritized_stream_id, 3);
    assert_eq!(u.priority.urgency, 2);
}

#[test]
fn empty_field_value_is_default() {
    let u = PriorityUpdate::parse(&payload(9, b"")).unwrap();
    assert_eq!(u.priority, Priority::default());
}

#[test]
fn too_short() {
    for len in 0..4 {
        assert_eq!(
            PriorityUpdate::parse(&[1u8; 4][..len]),
            Err(PriorityUpdateError::TooShort),
            "len {len}"
        );
    }
}

#[test]
fn zero_stream_id() {
    assert_eq!(
        PriorityUpdate::parse(&payload(0, b"u=1")),
        Err(PriorityUpdateError::ZeroStreamId)
    );
    // Zero once the reserved bit is masked off.
    assert_eq!(
        PriorityUpdate::parse(&payload(0x8000_0000, b"")),
        Err(PriorityUpdateError::ZeroStreamId)
    );
}

#[test]
fn non_ascii_field_value() {
    for field in [&b"u=1\x80"[..], b"\xff", "u=ü".as_bytes()] {
        assert_eq!(
            PriorityUpdate::parse(&payload(5, field)),
            Err(PriorityUpdateError::NonAscii)
        );
    }
}

#[test]
fn error_checks_happen_in_order() {
    // Short beats everything; a zero id is reported before the field is looked at.
    assert_eq!(
        PriorityUpdate::parse(b"\0\0\0"),
        Err(PriorityUpdateError::TooShort)
    );
    assert_eq!(
        PriorityUpdate::parse(&payload(0, b"\xff")),
        Err(PriorityUpdateError::ZeroStreamId)
    );
}

#[test]
fn ascii_but_invalid_dictionary_is_default() {
    for field in [&b"u=1,"[..], b"\x00\x01", b";;;", b"u=1\ti", b"u=9"] {
        let u = PriorityUpdate::parse(&payload(7, field)).unwrap();
        assert_eq!(u.priority, Priority::default(), "{field:?}");
    }
}

#[test]
fn lenient_members_like_the_header() {
    let u = PriorityUpdate::parse(&payload(11, b"u=8, i, x=1")).unwrap();
    assert_eq!(
        u.priority,
        Priority {
            urgency: 3,
            incremental: true
        }
    );
}

#[test]
fn errors_are_distinct_and_displayable() {
    let all = [
        PriorityUpdateError::TooShort,
        PriorityUpdateError::ZeroStreamId,
        PriorityUpdateError::NonAscii,
    ];
    let messages: Vec<String> = all.iter().map(|e| e.to_string()).collect();
    for (i, a) in messages.iter().enumerate() {
        assert!(!a.is_empty());
        for b in &messages[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // Usable as a boxed std error.
    let boxed: Box<dyn Error + Send + Sync> = Box::new(PriorityUpdateError::NonAscii);
    assert!(boxed.source().is_none());
}
