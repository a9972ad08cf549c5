//! The parameters a `priority` field value actually carries, for callers that must know
//! which ones were present (a server's pinned response header), not only the result.

use sfv::{BareItem, Dictionary, ListEntry, Parser};

use crate::priority::{Priority, MAX_URGENCY};

/// The valid `u` and `i` members of one `priority` field value; `None` for a member that
/// is absent or ignored (wrong type, out of range), as RFC 9218 §4 requires.
///
/// ```
/// use tower_priority::{Priority, PriorityParams};
///
/// let pinned = PriorityParams::parse(b"u=0");
/// assert_eq!(pinned, PriorityParams { urgency: Some(0), incremental: None });
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
}

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
        params
    }

    /// `base` with the parameters present here replacing its own.
    ///
    /// ```
    /// use tower_priority::{Priority, PriorityParams};
    ///
    /// let none = PriorityParams::default();
    /// assert_eq!(none.apply_to(Priority::parse("u=6")), Priority::parse("u=6"));
    /// ```
    pub fn apply_to(self, base: Priority) -> Priority {
        Priority {
            urgency: self.urgency.unwrap_or(base.urgency),
            incremental: self.incremental.unwrap_or(base.incremental),
        }
    }
}
