use std::fmt;

use http::{HeaderMap, HeaderName};

use crate::PriorityParams;

/// The `priority` header field name (RFC 9218 §5).
pub(crate) const PRIORITY: HeaderName = HeaderName::from_static("priority");

/// Largest valid urgency (RFC 9218 §4.1: `u` ranges over 0..=7, 0 is the most urgent).
pub(crate) const MAX_URGENCY: u8 = 7;

/// The priority parameters of an HTTP response (RFC 9218 §4).
///
/// `urgency` ranges over `0..=7`, 0 being the most urgent; `incremental` says whether the
/// client can use partial responses, so that bandwidth may be shared with other incremental
/// responses of the same urgency. The default is `u=3` and non-incremental.
///
/// ```
/// use tower_priority::Priority;
///
/// let p = Priority::default();
/// assert_eq!(p, Priority { urgency: 3, incremental: false });
/// assert_eq!(p.to_string(), "u=3");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Priority {
    /// Urgency, `0..=7`; lower is more urgent. Values above 7 are not valid RFC 9218
    /// priorities; the parsers in this crate never produce them.
    pub urgency: u8,
    /// Whether the response can be processed incrementally.
    pub incremental: bool,
}

impl Default for Priority {
    /// `u=3`, not incremental (RFC 9218 §4.1, §4.2).
    ///
    /// ```
    /// use tower_priority::Priority;
    /// assert_eq!(Priority::default(), Priority { urgency: 3, incremental: false });
    /// ```
    fn default() -> Self {
        Priority {
            urgency: 3,
            incremental: false,
        }
    }
}

impl Priority {
    /// Parses a `priority` field value (a Structured Fields dictionary), leniently as
    /// RFC 9218 §4 requires; this never fails.
    ///
    /// - A value that is not a valid dictionary yields the defaults.
    /// - `u` must be an integer in `0..=7` and `i` a boolean (`i` alone means `i=?1`); a
    ///   member of the wrong type or out of range is ignored and keeps its default.
    /// - Unknown members and all parameters are ignored; of duplicate members, the last wins.
    ///
    /// ```
    /// use tower_priority::Priority;
    ///
    /// assert_eq!(Priority::parse("u=0"), Priority { urgency: 0, incremental: false });
    /// assert_eq!(Priority::parse("i"), Priority { urgency: 3, incremental: true });
    /// // Out of range: ignored, the rest still applies.
    /// assert_eq!(Priority::parse("u=8, i"), Priority { urgency: 3, incremental: true });
    /// // Not a dictionary at all: defaults.
    /// assert_eq!(Priority::parse("u=1,,"), Priority::default());
    /// ```
    pub fn parse(field_value: &str) -> Priority {
        Self::parse_bytes(field_value.as_bytes())
    }

    /// Shared by the `&str` and header-value entry points; sfv rejects any non-ASCII byte.
    /// The member-level leniency lives in [`PriorityParams::parse`], so that the client's
    /// priority and a server's pinned parameters are read by one parser.
    pub(crate) fn parse_bytes(field_value: &[u8]) -> Priority {
        Self::from_client_params(PriorityParams::parse(field_value))
    }

    /// A client's parameters over the defaults. A client's `u-range` member is an unknown
    /// member like any other: ignored.
    fn from_client_params(params: PriorityParams) -> Priority {
        PriorityParams {
            urgency_range: None,
            ..params
        }
        .apply_to(Priority::default())
    }

    /// Determines the client's priority from the `priority` header lines of a request.
    ///
    /// Several lines are combined into one list, joined by `", "`, before parsing, as
    /// Structured Fields require (RFC 9651 §4.2); so `u=1` and `i` on two lines mean
    /// `u=1, i`. A line that is not visible ASCII makes the whole field invalid, which
    /// yields the defaults, as does an absent header.
    ///
    /// ```
    /// use http::{HeaderMap, HeaderValue};
    /// use tower_priority::Priority;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.append("priority", HeaderValue::from_static("u=1"));
    /// headers.append("priority", HeaderValue::from_static("i"));
    /// assert_eq!(Priority::from_headers(&headers), Priority { urgency: 1, incremental: true });
    ///
    /// assert_eq!(Priority::from_headers(&HeaderMap::new()), Priority::default());
    /// ```
    pub fn from_headers(headers: &HeaderMap) -> Priority {
        Self::from_client_params(PriorityParams::from_headers(headers))
    }
}

impl fmt::Display for Priority {
    /// Writes the canonical field value: `u=N`, followed by `, i` when incremental.
    ///
    /// ```
    /// use tower_priority::Priority;
    ///
    /// assert_eq!(Priority { urgency: 0, incremental: false }.to_string(), "u=0");
    /// assert_eq!(Priority { urgency: 5, incremental: true }.to_string(), "u=5, i");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "u={}", self.urgency)?;
        if self.incremental {
            f.write_str(", i")?;
        }
        Ok(())
    }
}
