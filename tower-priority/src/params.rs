//! The parameters a `priority` field value actually carries, for callers that must know
//! which ones were present (a server's pinned response header), not only the result.

use http::HeaderMap;
use sfv::{BareItem, Dictionary, ListEntry, Parser};

use crate::priority::{Priority, MAX_URGENCY, PRIORITY};

/// The valid `u` and `i` members of one `priority` field value; `None` for a member that
/// is absent or ignored (wrong type, out of range), as RFC 9218 §4 requires.
///
/// A server's response header may also carry [`URGENCY_RANGE_MEMBER`] (`u-range=(MIN MAX)`),
/// written by `PriorityLayer::clamp_urgency`: the range the server keeps the client's
/// urgency in, so that a component that later sees the client change its urgency (a
/// PRIORITY_UPDATE frame) can keep applying the clamp. Clients' own fields never carry one
/// that counts: [`Priority::parse`] ignores it, as it ignores every unknown member.
///
/// ```
/// use tower_priority::{Priority, PriorityParams};
///
/// let pinned = PriorityParams::parse(b"u=0");
/// assert_eq!(pinned, PriorityParams { urgency: Some(0), ..PriorityParams::default() });
/// let client = Priority::parse("u=5, i");
/// assert_eq!(pinned.apply_to(client), Priority { urgency: 0, incremental: true });
/// assert_eq!(PriorityParams::parse(b"u=9, x"), PriorityParams::default());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PriorityParams {
    /// The urgency, when the value carries a valid one.
    pub urgency: Option<u8>,
    /// The incremental flag, when the value carries a valid one.
    pub incremental: Option<bool>,
    /// The server's urgency clamp, `(min, max)` with `min <= max <= 7`, when the value
    /// carries a valid [`URGENCY_RANGE_MEMBER`].
    pub urgency_range: Option<(u8, u8)>,
}

/// The dictionary member that carries a server's urgency clamp in a `priority` response
/// header: an inner list of two integers, `u-range=(1 7)`. RFC 9218 §4 lets recipients
/// ignore unknown members, so clients and intermediaries that do not know it are unaffected.
///
/// ```
/// use tower_priority::{PriorityParams, URGENCY_RANGE_MEMBER};
///
/// let value = format!("u=1, {URGENCY_RANGE_MEMBER}=(1 7)");
/// assert_eq!(PriorityParams::parse(value.as_bytes()).urgency_range, Some((1, 7)));
/// ```
pub const URGENCY_RANGE_MEMBER: &str = "u-range";

impl PriorityParams {
    /// Parses a field value leniently: an unparsable value carries no parameters.
    ///
    /// ```
    /// use tower_priority::PriorityParams;
    ///
    /// assert_eq!(PriorityParams::parse(b"i").incremental, Some(true));
    /// assert_eq!(PriorityParams::parse(b"i=?0, u=2, u=1").urgency, Some(1));
    /// assert_eq!(PriorityParams::parse(b"u=1,,"), PriorityParams::default());
    /// ```
    pub fn parse(field_value: &[u8]) -> PriorityParams {
        Self::parse_common(field_value).unwrap_or_else(|| Self::parse_structured(field_value))
    }

    /// The values clients and servers send nearly always (`u=N`, `i`, `u=N, i`, `i, u=N`,
    /// with N a valid urgency), read without building sfv's dictionary: parsing one cost a
    /// server about 400 cycles and three allocations per request. `None` for anything else,
    /// which [`Self::parse_structured`] reads; on these exact values the two agree.
    fn parse_common(field_value: &[u8]) -> Option<PriorityParams> {
        let urgency = |d: u8| d.checked_sub(b'0').filter(|&u| u <= MAX_URGENCY);
        let (urgency, incremental) = match *field_value {
            [b'u', b'=', d] => (Some(urgency(d)?), None),
            [b'i'] => (None, Some(true)),
            [b'u', b'=', d, b',', b' ', b'i'] | [b'u', b'=', d, b',', b'i'] => {
                (Some(urgency(d)?), Some(true))
            }
            [b'i', b',', b' ', b'u', b'=', d] | [b'i', b',', b'u', b'=', d] => {
                (Some(urgency(d)?), Some(true))
            }
            _ => return None,
        };
        Some(PriorityParams {
            urgency,
            incremental,
            urgency_range: None,
        })
    }

    /// Parses a field value as a Structured Fields dictionary (RFC 9651) and reads its
    /// members.
    fn parse_structured(field_value: &[u8]) -> PriorityParams {
        let mut params = PriorityParams::default();
        let Ok(dict) = Parser::new(field_value).parse::<Dictionary>() else {
            return params;
        };
        // sfv's Dictionary is an IndexMap: a repeated key overwrites the earlier value,
        // which gives "last duplicate wins" (RFC 9651 §4.2.2).
        if let Some(ListEntry::Item(item)) = dict.get("u") {
            if let BareItem::Integer(n) = item.bare_item {
                params.urgency = u8::try_from(i64::from(n))
                    .ok()
                    .filter(|u| *u <= MAX_URGENCY);
            }
        }
        if let Some(ListEntry::Item(item)) = dict.get("i") {
            if let BareItem::Boolean(b) = item.bare_item {
                params.incremental = Some(b);
            }
        }
        if let Some(ListEntry::InnerList(list)) = dict.get(URGENCY_RANGE_MEMBER) {
            let urgency = |i: usize| match list.items.get(i).map(|item| &item.bare_item) {
                Some(BareItem::Integer(n)) => u8::try_from(i64::from(*n))
                    .ok()
                    .filter(|u| *u <= MAX_URGENCY),
                _ => None,
            };
            if let (2, Some(min), Some(max)) = (list.items.len(), urgency(0), urgency(1)) {
                params.urgency_range = (min <= max).then_some((min, max));
            }
        }
        params
    }

    /// Parses the `priority` header lines of `headers` (a response's, for what its server
    /// pinned; [`Priority::from_headers`] reads a request's the same way).
    ///
    /// Several lines are combined into one list, joined by `", "`, before parsing, as
    /// Structured Fields require (RFC 9651 §4.2), and as HTTP/2 peers see them. A line
    /// that is not visible ASCII makes the whole field invalid: no parameters, as with no
    /// header at all.
    ///
    /// ```
    /// use http::{HeaderMap, HeaderValue};
    /// use tower_priority::PriorityParams;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.append("priority", HeaderValue::from_static("u=1"));
    /// headers.append("priority", HeaderValue::from_static("i"));
    /// let params = PriorityParams::from_headers(&headers);
    /// assert_eq!((params.urgency, params.incremental), (Some(1), Some(true)));
    ///
    /// headers.append("priority", HeaderValue::from_static(""));
    /// assert_eq!(PriorityParams::from_headers(&headers), PriorityParams::default());
    /// ```
    pub fn from_headers(headers: &HeaderMap) -> PriorityParams {
        let mut lines = headers.get_all(PRIORITY).iter();
        let Some(first) = lines.next() else {
            return PriorityParams::default();
        };
        let Some(second) = lines.next() else {
            // The common case: one line, no allocation.
            return Self::parse(first.as_bytes());
        };
        let mut joined = Vec::with_capacity(first.len() + second.len() + 2);
        joined.extend_from_slice(first.as_bytes());
        for line in std::iter::once(second).chain(lines) {
            // Always separate, even after an empty line: the combined value must be exactly
            // what the peer's lines join to (an empty line makes it invalid).
            joined.extend_from_slice(b", ");
            joined.extend_from_slice(line.as_bytes());
        }
        Self::parse(&joined)
    }

    /// `base` (the client's priority) with the parameters present here replacing its own.
    ///
    /// With an [`urgency_range`](Self::urgency_range), the urgency is `base`'s clamped to
    /// it: the `u` a clamp wrote was derived from the client's urgency at the time, and the
    /// range keeps applying when the client's urgency changes later.
    ///
    /// ```
    /// use tower_priority::{Priority, PriorityParams};
    ///
    /// let none = PriorityParams::default();
    /// assert_eq!(none.apply_to(Priority::parse("u=6")), Priority::parse("u=6"));
    /// let clamped = PriorityParams::parse(b"u=3, u-range=(3 7)");
    /// assert_eq!(clamped.apply_to(Priority::parse("u=0")).urgency, 3);
    /// assert_eq!(clamped.apply_to(Priority::parse("u=5")).urgency, 5);
    /// ```
    pub fn apply_to(self, base: Priority) -> Priority {
        let urgency = match self.urgency_range {
            Some((min, max)) => base.urgency.clamp(min, max),
            None => self.urgency.unwrap_or(base.urgency),
        };
        Priority {
            urgency,
            incremental: self.incremental.unwrap_or(base.incremental),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of up to six bytes over the bytes the fast path looks at (and near
    /// misses: an urgency out of range, doubled separators): where the fast path answers,
    /// it answers as the Structured Fields parser does.
    #[test]
    fn the_common_forms_parse_as_structured_fields_do() {
        const ALPHABET: &[u8] = b"ui=078, ";
        let mut value = Vec::new();
        let mut answered = 0;
        for len in 0..=6u32 {
            for mut n in 0..ALPHABET.len().pow(len) {
                value.clear();
                for _ in 0..len {
                    value.push(ALPHABET[n % ALPHABET.len()]);
                    n /= ALPHABET.len();
                }
                if let Some(fast) = PriorityParams::parse_common(&value) {
                    answered += 1;
                    let structured = PriorityParams::parse_structured(&value);
                    assert_eq!(fast, structured, "{:?}", String::from_utf8_lossy(&value));
                }
            }
        }
        // u=0, u=7, i, and the four two-member forms for each of the two urgencies.
        assert_eq!(answered, 2 + 1 + 4 * 2);
    }

    #[test]
    fn the_common_forms_take_the_fast_path() {
        for value in ["u=0", "u=7", "i", "u=3, i", "u=3,i", "i, u=5", "i,u=5"] {
            assert!(
                PriorityParams::parse_common(value.as_bytes()).is_some(),
                "{value}"
            );
        }
        for value in ["u=8", "u=0 ", " i", "i=?1", "u=00", "u=1, i, i", "u=1,  i"] {
            assert!(
                PriorityParams::parse_common(value.as_bytes()).is_none(),
                "{value}"
            );
        }
    }
}
