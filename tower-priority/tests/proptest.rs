//! Property tests: the parsers are total, Display/parse round-trips, and several header
//! lines mean the same as their comma-joined value.

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use tower_priority::{Priority, PriorityParams, PriorityUpdate, PriorityUpdateError};

fn priority() -> impl Strategy<Value = Priority> {
    (0..=7u8, any::<bool>()).prop_map(|(urgency, incremental)| Priority {
        urgency,
        incremental,
    })
}

/// Strings that look like priority fields, so that the interesting paths are exercised
/// more often than with uniformly random text.
fn fieldish() -> impl Strategy<Value = String> {
    let member = prop_oneof![
        (0..=9i64).prop_map(|u| format!("u={u}")),
        (-3..12i64).prop_map(|u| format!("u={u}")),
        Just("i".to_owned()),
        Just("i=?0".to_owned()),
        Just("i=?1".to_owned()),
        Just("i=1".to_owned()),
        Just("u=1.5".to_owned()),
        Just("u=\"0\"".to_owned()),
        Just("u=(1 2)".to_owned()),
        Just("x=tok;p=1".to_owned()),
        "[a-z]{1,3}(=[0-9?]{1,2})?",
        "[ -~]{0,4}",
    ];
    prop::collection::vec(member, 0..5).prop_map(|m| m.join(", "))
}

proptest! {
    // No failure persistence: proptest cannot locate the crate root from tests/; a failing
    // case it finds is turned into an explicit test in parse.rs instead.
    #![proptest_config(ProptestConfig {
        cases: 2048,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn parse_never_panics_and_stays_in_range(s in any::<String>()) {
        let p = Priority::parse(&s);
        prop_assert!(p.urgency <= 7);
    }

    #[test]
    fn parse_of_fieldish_input_is_canonicalizable(s in fieldish()) {
        let p = Priority::parse(&s);
        prop_assert!(p.urgency <= 7);
        prop_assert_eq!(Priority::parse(&p.to_string()), p);
    }

    #[test]
    fn params_agree_with_priority(s in prop_oneof![fieldish(), any::<String>()]) {
        let params = PriorityParams::parse(s.as_bytes());
        prop_assert!(params.urgency.is_none_or(|u| u <= 7));
        prop_assert_eq!(params.apply_to(Priority::default()), Priority::parse(&s));
    }

    #[test]
    fn update_parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        match PriorityUpdate::parse(&bytes) {
            Ok(u) => {
                prop_assert!(bytes.len() >= 4);
                prop_assert!(u.prioritized_stream_id != 0);
                prop_assert!(u.prioritized_stream_id <= 0x7FFF_FFFF);
                prop_assert!(u.priority.urgency <= 7);
                prop_assert!(bytes[4..].is_ascii());
            }
            Err(PriorityUpdateError::TooShort) => prop_assert!(bytes.len() < 4),
            Err(PriorityUpdateError::ZeroStreamId) => {
                prop_assert_eq!(u32::from_be_bytes(bytes[..4].try_into().unwrap()) & 0x7FFF_FFFF, 0);
            }
            Err(PriorityUpdateError::NonAscii) => prop_assert!(!bytes[4..].is_ascii()),
        }
    }

    #[test]
    fn update_parse_agrees_with_header_parse(id in 1..=0x7FFF_FFFFu32, r in any::<bool>(), s in fieldish()) {
        let mut bytes = (id | if r { 0x8000_0000 } else { 0 }).to_be_bytes().to_vec();
        bytes.extend_from_slice(s.as_bytes());
        let u = PriorityUpdate::parse(&bytes).unwrap();
        prop_assert_eq!(u.prioritized_stream_id, id);
        prop_assert_eq!(u.priority, Priority::parse(&s));
    }

    #[test]
    fn display_parse_round_trip(p in priority()) {
        prop_assert_eq!(Priority::parse(&p.to_string()), p);
    }

    #[test]
    fn from_headers_equals_parse_of_joined_lines(
        lines in prop::collection::vec(prop_oneof![fieldish(), "[ -~]{0,8}"], 1..5)
    ) {
        let mut headers = HeaderMap::new();
        let mut kept = Vec::new();
        for line in &lines {
            // `http` strips nothing but refuses some bytes; only test what a peer can send.
            if let Ok(v) = HeaderValue::from_str(line) {
                headers.append("priority", v);
                kept.push(line.as_str());
            }
        }
        let expected = if kept.is_empty() {
            Priority::default()
        } else {
            Priority::parse(&kept.join(", "))
        };
        prop_assert_eq!(Priority::from_headers(&headers), expected);
    }

    #[test]
    fn from_headers_never_panics_on_raw_bytes(
        lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..16), 0..4)
    ) {
        let mut headers = HeaderMap::new();
        for line in &lines {
            if let Ok(v) = HeaderValue::from_bytes(line) {
                headers.append("priority", v);
            }
        }
        prop_assert!(Priority::from_headers(&headers).urgency <= 7);
    }
}
