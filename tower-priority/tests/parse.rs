//! `Priority::parse`, `Priority::from_headers` and `Display`: RFC 9218 examples and the
//! lenient-parsing edge cases of RFC 9218 §4 and RFC 9651.

use http::{HeaderMap, HeaderValue};
use tower_priority::{Priority, PriorityParams};

fn p(urgency: u8, incremental: bool) -> Priority {
    Priority {
        urgency,
        incremental,
    }
}

const DEFAULT: Priority = Priority {
    urgency: 3,
    incremental: false,
};

#[test]
fn default_is_u3_not_incremental() {
    assert_eq!(Priority::default(), DEFAULT);
}

// RFC 9218 §4.1: a CSS request with urgency 0.
#[test]
fn rfc9218_4_1_urgency_example() {
    assert_eq!(Priority::parse("u=0"), p(0, false));
}

// RFC 9218 §4.2: a JPEG request, urgency 5, incremental.
#[test]
fn rfc9218_4_2_incremental_example() {
    assert_eq!(Priority::parse("u=5, i"), p(5, true));
}

// RFC 9218 §4: omitted parameters keep their defaults.
#[test]
fn rfc9218_4_omitted_parameters_are_defaults() {
    assert_eq!(Priority::parse(""), DEFAULT);
    assert_eq!(Priority::parse("u=1"), p(1, false));
    assert_eq!(Priority::parse("i"), p(3, true));
    assert_eq!(Priority::parse("i=?0"), p(3, false));
}

#[test]
fn every_urgency_in_range_parses() {
    for u in 0..=7u8 {
        assert_eq!(Priority::parse(&format!("u={u}")), p(u, false));
        assert_eq!(Priority::parse(&format!("u={u}, i")), p(u, true));
        assert_eq!(Priority::parse(&format!("i, u={u}")), p(u, true));
    }
}

#[test]
fn bare_i_means_true() {
    assert_eq!(Priority::parse("i"), Priority::parse("i=?1"));
    assert_eq!(Priority::parse("u=2,i"), p(2, true));
}

// RFC 9218 §4.1: out-of-range or wrongly typed `u` is ignored, the rest still applies.
#[test]
fn bad_urgency_is_ignored_not_fatal() {
    for bad in [
        "u=8",
        "u=-1",
        "u=1.5",
        "u=\"0\"",
        "u=?1",
        "u=tok",
        "u=:AA==:",
        "u=(1 2)",
        "u=()",
        "u",
        "u=999999999999999",
        "u=@1",
    ] {
        assert_eq!(Priority::parse(bad), DEFAULT, "{bad}");
        let with_i = format!("{bad}, i");
        assert_eq!(Priority::parse(&with_i), p(3, true), "{with_i}");
    }
}

// RFC 9218 §4.2: `i` must be a boolean.
#[test]
fn bad_incremental_is_ignored_not_fatal() {
    for bad in ["i=1", "i=3", "i=0", "i=tok", "i=\"?1\"", "i=1.0", "i=(?1)"] {
        assert_eq!(Priority::parse(bad), DEFAULT, "{bad}");
        let with_u = format!("u=1, {bad}");
        assert_eq!(Priority::parse(&with_u), p(1, false), "{with_u}");
    }
}

// RFC 9218 §4: unknown parameters are ignored; RFC 9651 parameters on members are ignored.
#[test]
fn unknown_members_and_parameters_are_ignored() {
    assert_eq!(Priority::parse("x=1, u=2, foo=(a b), i"), p(2, true));
    assert_eq!(Priority::parse("u=2;foo=bar, i;x=?0"), p(2, true));
    assert_eq!(Priority::parse("u=2;u=7"), p(2, false));
    assert_eq!(Priority::parse("i=?1;a;b=2"), p(3, true));
    assert_eq!(Priority::parse("foo"), DEFAULT);
}

// RFC 9651 §4.2.2: with duplicate dictionary keys, the last one wins.
#[test]
fn last_duplicate_wins() {
    assert_eq!(Priority::parse("u=1, u=6"), p(6, false));
    assert_eq!(Priority::parse("i, i=?0"), p(3, false));
    assert_eq!(Priority::parse("i=?0, u=0, i"), p(0, true));
    // The last duplicate wins even when it is invalid: it overwrote the earlier value in the
    // dictionary, and an invalid value keeps the default.
    assert_eq!(Priority::parse("u=1, u=9"), DEFAULT);
    assert_eq!(Priority::parse("i, i=5"), DEFAULT);
}

// RFC 9218 §4 / RFC 9651 §4.2: a field that fails to parse is ignored as a whole.
#[test]
fn unparsable_dictionary_yields_defaults() {
    for bad in [
        "u=1,",
        ",u=1",
        "u=1,,i",
        "u=1 i",
        "u=1;",
        "U=1",
        "u=1, I",
        "u==1",
        "=1",
        "u=01x",
        "u=1, i=?2",
        "u=\"unterminated",
        "u=1\t,\ti", // HTAB is OWS around the comma: this one is valid
        "u=ü",
        "ü",
        "u=0\0",
    ] {
        let expected = if bad == "u=1\t,\ti" {
            p(1, true)
        } else {
            DEFAULT
        };
        assert_eq!(Priority::parse(bad), expected, "{bad:?}");
    }
}

#[test]
fn surrounding_spaces_are_allowed() {
    // RFC 9651 §4.2: leading and trailing SP are discarded.
    assert_eq!(Priority::parse("  u=4 ,  i  "), p(4, true));
}

#[test]
fn display_is_canonical() {
    assert_eq!(p(0, false).to_string(), "u=0");
    assert_eq!(p(5, true).to_string(), "u=5, i");
    assert_eq!(DEFAULT.to_string(), "u=3");
}

#[test]
fn display_round_trips_all_sixteen_values() {
    for u in 0..=7u8 {
        for i in [false, true] {
            let priority = p(u, i);
            assert_eq!(Priority::parse(&priority.to_string()), priority);
        }
    }
}

fn headers(lines: &[&[u8]]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in lines {
        map.append("priority", HeaderValue::from_bytes(line).unwrap());
    }
    map
}

#[test]
fn from_headers_absent_is_default() {
    assert_eq!(Priority::from_headers(&HeaderMap::new()), DEFAULT);
    let mut other = HeaderMap::new();
    other.insert("x-priority", HeaderValue::from_static("u=0"));
    assert_eq!(Priority::from_headers(&other), DEFAULT);
}

#[test]
fn from_headers_single_line() {
    assert_eq!(Priority::from_headers(&headers(&[b"u=5, i"])), p(5, true));
}

// RFC 9651 §4.2: lines are combined into one comma-separated value.
#[test]
fn from_headers_combines_lines() {
    assert_eq!(
        Priority::from_headers(&headers(&[b"u=1", b"i"])),
        p(1, true)
    );
    assert_eq!(
        Priority::from_headers(&headers(&[b"u=1", b"x=2", b"i"])),
        p(1, true)
    );
    // Last duplicate wins across lines too.
    assert_eq!(
        Priority::from_headers(&headers(&[b"u=1, i", b"u=6"])),
        p(6, true)
    );
}

#[test]
fn from_headers_one_bad_line_spoils_the_field() {
    // Combined as "u=1, u=1,": a trailing comma, so the whole field is invalid.
    assert_eq!(
        Priority::from_headers(&headers(&[b"u=1", b"u=1,"])),
        DEFAULT
    );
    assert_eq!(Priority::from_headers(&headers(&[b"u=1", b";"])), DEFAULT);
    // An empty line combines into a trailing comma as well (RFC 9651 §4.2 is strict).
    assert_eq!(Priority::from_headers(&headers(&[b"u=1", b""])), DEFAULT);
    // ... and a leading empty line into a leading comma (found by proptest).
    assert_eq!(Priority::from_headers(&headers(&[b"", b"u=4"])), DEFAULT);
    assert_eq!(Priority::from_headers(&headers(&[b""])), DEFAULT);
}

#[test]
fn from_headers_non_visible_ascii_is_unparsable() {
    // obs-text is a valid header value byte for `http`, but not Structured Fields input.
    assert_eq!(Priority::from_headers(&headers(&[b"u=1, i\xff"])), DEFAULT);
    assert_eq!(
        Priority::from_headers(&headers(&[b"u=1", b"\xc3\xbc"])),
        DEFAULT
    );
    // HTAB is allowed in header values but only as OWS around commas in Structured Fields.
    assert_eq!(Priority::from_headers(&headers(&[b"u=1\ti"])), DEFAULT);
}

#[test]
fn from_headers_name_is_case_insensitive() {
    let mut map = HeaderMap::new();
    map.insert("Priority", HeaderValue::from_static("u=2"));
    assert_eq!(Priority::from_headers(&map), p(2, false));
}

// `PriorityParams` is the same lenient parser, but keeps which members were present.
#[test]
fn params_report_only_valid_present_members() {
    let params = |s: &str| PriorityParams::parse(s.as_bytes());
    assert_eq!(params(""), PriorityParams::default());
    assert_eq!(
        params("u=0"),
        PriorityParams {
            urgency: Some(0),
            incremental: None,
            urgency_range: None,
        }
    );
    assert_eq!(
        params("i=?0"),
        PriorityParams {
            urgency: None,
            incremental: Some(false),
            urgency_range: None,
        }
    );
    assert_eq!(
        params("u=8, i"),
        PriorityParams {
            urgency: None,
            incremental: Some(true),
            urgency_range: None,
        }
    );
    assert_eq!(params("u=1.5, i=1"), PriorityParams::default());
    assert_eq!(params("u=1,,"), PriorityParams::default());
    assert_eq!(params("u=2, u=4").urgency, Some(4));
    // A server's clamp range: two integers in 0..=7, min <= max; anything else ignored.
    assert_eq!(params("u-range=(1 7)").urgency_range, Some((1, 7)));
    assert_eq!(params("u=2, u-range=(2 2)").urgency_range, Some((2, 2)));
    for bad in [
        "u-range=(7 1)",
        "u-range=(1 8)",
        "u-range=(1)",
        "u-range=(1 2 3)",
        "u-range=1",
        "u-range=(1 \"7\")",
    ] {
        assert_eq!(params(bad).urgency_range, None, "{bad}");
    }
    // In a client's field it is an unknown member like any other.
    assert_eq!(Priority::parse("u-range=(0 0)"), Priority::default());
    for s in ["u=5, i", "", "i", "u=9", "x, u=1;a=b", "u=1,,"] {
        assert_eq!(
            params(s).apply_to(Priority::default()),
            Priority::parse(s),
            "{s}"
        );
    }
}
