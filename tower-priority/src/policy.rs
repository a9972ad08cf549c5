//! What a [`PriorityLayer`](crate::PriorityLayer) decides, and how nested layers combine.
//!
//! Nesting works through a private request extension, [`Applied`]: the outermost layer starts
//! from the client's `priority` header; every layer nested inside starts from the effective
//! priority the layer around it decided, applies its own policy and merges its pins over the
//! outer pins. So an inner layer overrides an outer one exactly for the parameters it pins.
//! Each layer writes the merged pins it knows of into the response only when no `priority`
//! header is there yet; the innermost writes first, so its (complete) view wins, and a header
//! set by the handler wins over all of them.

use http::HeaderValue;

use crate::{Priority, URGENCY_RANGE_MEMBER};

/// The parameters a server decided, as opposed to those it took from the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pins {
    /// With `urgency_range`, the clamped client urgency (a hint for intermediaries);
    /// without, a fixed urgency that no client signal changes.
    pub(crate) urgency: Option<u8>,
    pub(crate) incremental: Option<bool>,
    /// The clamp the client's urgency stays in, while the urgency follows the client.
    pub(crate) urgency_range: Option<(u8, u8)>,
}

impl Pins {
    /// `inner`'s pins override `self`'s; what `inner` leaves open stays as `self` pinned it.
    /// Clamps compose: clamping to `outer` then to `inner` is clamping to one range.
    fn overlaid_by(self, inner: Pins) -> Pins {
        let outer_fixed = self.urgency.is_some() && self.urgency_range.is_none();
        let urgency_range = match (self.urgency_range, inner.urgency_range) {
            // A fixed urgency (inner's own, or outer's that inner only clamped) ends the clamp.
            (_, None) if inner.urgency.is_some() => None,
            (_, Some(_)) if outer_fixed => None,
            (outer, None) => outer,
            (None, Some(inner)) => Some(inner),
            (Some((a, b)), Some((c, d))) => Some((a.clamp(c, d), b.clamp(c, d))),
        };
        Pins {
            urgency: inner.urgency.or(self.urgency),
            incremental: inner.incremental.or(self.incremental),
            urgency_range,
        }
    }

    /// The response `priority` header value naming exactly the pinned parameters, or `None`
    /// when nothing is pinned. Static strings (no allocation per response) unless a clamp
    /// adds its range.
    pub(crate) fn header_value(self) -> Option<HeaderValue> {
        let Some((min, max)) = self.urgency_range else {
            return self.fixed_header_value();
        };
        let mut value = self
            .fixed_header_value()
            .and_then(|v| v.to_str().ok().map(|s| format!("{s}, ")))
            .unwrap_or_default();
        value.push_str(&format!("{URGENCY_RANGE_MEMBER}=({min} {max})"));
        HeaderValue::try_from(value).ok()
    }

    fn fixed_header_value(self) -> Option<HeaderValue> {
        const U: [&str; 8] = ["u=0", "u=1", "u=2", "u=3", "u=4", "u=5", "u=6", "u=7"];
        const U_I: [&str; 8] = [
            "u=0, i", "u=1, i", "u=2, i", "u=3, i", "u=4, i", "u=5, i", "u=6, i", "u=7, i",
        ];
        const U_NOT_I: [&str; 8] = [
            "u=0, i=?0",
            "u=1, i=?0",
            "u=2, i=?0",
            "u=3, i=?0",
            "u=4, i=?0",
            "u=5, i=?0",
            "u=6, i=?0",
            "u=7, i=?0",
        ];
        let s = match (self.urgency, self.incremental) {
            (None, None) => return None,
            (None, Some(true)) => "i",
            (None, Some(false)) => "i=?0",
            // Pinned urgencies are validated at configuration time; `get` keeps a bug from
            // ever turning into a panic at request time.
            (Some(u), None) => U.get(usize::from(u))?,
            (Some(u), Some(true)) => U_I.get(usize::from(u))?,
            (Some(u), Some(false)) => U_NOT_I.get(usize::from(u))?,
        };
        Some(HeaderValue::from_static(s))
    }
}

/// Left in the request extensions by each layer, for the layers nested inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    /// The priority after this layer's policy (also inserted as a plain [`Priority`]).
    pub(crate) effective: Priority,
    /// Everything pinned by this layer and the layers around it.
    pub(crate) pins: Pins,
}

/// One layer's configuration. All values are validated by the builder methods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    pub(crate) urgency: Option<u8>,
    pub(crate) incremental: Option<bool>,
    pub(crate) clamp: Option<(u8, u8)>,
    pub(crate) ignore_client: bool,
}

impl Policy {
    /// Applies this policy to `incoming` (the client's priority, or the outer layer's
    /// effective one) and merges the resulting pins over `outer`.
    pub(crate) fn apply(&self, incoming: Priority, outer: Pins) -> Applied {
        let mut effective = if self.ignore_client {
            Priority::default()
        } else {
            incoming
        };
        let mut pins = Pins::default();
        if let Some((min, max)) = self.clamp {
            let clamped = effective.urgency.clamp(min, max);
            // The clamped value is announced only when the clamp changed something; the
            // range always is, so that a later PRIORITY_UPDATE stays within it.
            if clamped != effective.urgency {
                effective.urgency = clamped;
                pins.urgency = Some(clamped);
            }
            pins.urgency_range = Some((min, max));
        }
        if let Some(u) = self.urgency {
            effective.urgency = u;
            pins.urgency = Some(u);
            pins.urgency_range = None;
        }
        if let Some(i) = self.incremental {
            effective.incremental = i;
            pins.incremental = Some(i);
        }
        if self.ignore_client {
            pins.urgency = Some(effective.urgency);
            pins.incremental = Some(effective.incremental);
            pins.urgency_range = None;
        }
        Applied {
            effective,
            pins: outer.overlaid_by(pins),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(urgency: u8, incremental: bool) -> Priority {
        Priority {
            urgency,
            incremental,
        }
    }

    #[test]
    fn header_values_name_exactly_the_pins() {
        let hv = |urgency, incremental| {
            Pins {
                urgency,
                incremental,
                urgency_range: None,
            }
            .header_value()
            .map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(hv(None, None), None);
        assert_eq!(hv(None, Some(true)).as_deref(), Some("i"));
        assert_eq!(hv(None, Some(false)).as_deref(), Some("i=?0"));
        for u in 0..=7u8 {
            assert_eq!(hv(Some(u), None), Some(format!("u={u}")));
            assert_eq!(hv(Some(u), Some(true)), Some(format!("u={u}, i")));
            assert_eq!(hv(Some(u), Some(false)), Some(format!("u={u}, i=?0")));
        }
        // Out of range never panics (cannot be configured, but stays total).
        assert_eq!(hv(Some(8), None), None);
    }

    #[test]
    fn header_values_parse_back_to_the_pins() {
        for u in 0..=7u8 {
            for i in [false, true] {
                let v = Pins {
                    urgency: Some(u),
                    incremental: Some(i),
                    urgency_range: None,
                }
                .header_value()
                .unwrap();
                assert_eq!(Priority::parse(v.to_str().unwrap()), p(u, i));
            }
        }
    }

    // tls-flush learns the server's decision by reading this header back with
    // `PriorityParams::parse`: it must recover exactly the pins, no more, no less.
    #[test]
    fn header_values_read_back_as_exactly_the_pins() {
        let urgencies = std::iter::once(None).chain((0..=7u8).map(Some));
        for urgency in urgencies {
            for incremental in [None, Some(false), Some(true)] {
                let pins = Pins {
                    urgency,
                    incremental,
                    urgency_range: None,
                };
                let read_back = pins
                    .header_value()
                    .map(|v| crate::PriorityParams::parse(v.as_bytes()))
                    .unwrap_or_default();
                assert_eq!(read_back.urgency, urgency);
                assert_eq!(read_back.incremental, incremental);
            }
        }
    }

    #[test]
    fn follow_client_pins_nothing() {
        let a = Policy::default().apply(p(6, true), Pins::default());
        assert_eq!(a.effective, p(6, true));
        assert_eq!(a.pins, Pins::default());
    }

    #[test]
    fn clamp_pins_only_when_it_changes_the_value() {
        let policy = Policy {
            clamp: Some((1, 5)),
            ..Policy::default()
        };
        let inside = policy.apply(p(3, true), Pins::default());
        assert_eq!(inside.effective, p(3, true));
        assert_eq!(
            inside.pins,
            Pins {
                urgency_range: Some((1, 5)),
                ..Pins::default()
            }
        );
        let below = policy.apply(p(0, false), Pins::default());
        assert_eq!(below.effective, p(1, false));
        assert_eq!(below.pins.urgency, Some(1));
        let above = policy.apply(p(7, true), Pins::default());
        assert_eq!(above.effective, p(5, true));
        assert_eq!(above.pins.urgency, Some(5));
        assert_eq!(above.pins.incremental, None);
    }

    #[test]
    fn explicit_urgency_wins_over_clamp() {
        let policy = Policy {
            urgency: Some(7),
            clamp: Some((0, 2)),
            ..Policy::default()
        };
        let a = policy.apply(p(3, false), Pins::default());
        assert_eq!(a.effective.urgency, 7);
        assert_eq!(a.pins.urgency, Some(7));
        assert_eq!(a.pins.urgency_range, None, "a fixed urgency needs no clamp");
    }

    #[test]
    fn clamp_ranges_read_back_and_keep_clamping() {
        let policy = Policy {
            clamp: Some((3, 7)),
            ..Policy::default()
        };
        for (client, header) in [(0, "u=3, u-range=(3 7)"), (5, "u-range=(3 7)")] {
            let a = policy.apply(p(client, false), Pins::default());
            let value = a.pins.header_value().unwrap();
            assert_eq!(value.to_str().unwrap(), header);
            let read_back = crate::PriorityParams::parse(value.as_bytes());
            assert_eq!(read_back.urgency_range, Some((3, 7)));
            // A later client signal (PRIORITY_UPDATE) asking for u=0 stays clamped.
            assert_eq!(read_back.apply_to(p(0, false)).urgency, 3);
            assert_eq!(read_back.apply_to(p(6, false)).urgency, 6);
        }
    }

    #[test]
    fn nested_clamps_compose_and_fixed_urgencies_end_them() {
        let clamp = |min, max| Policy {
            clamp: Some((min, max)),
            ..Policy::default()
        };
        // Outer 1..=7, inner 4..=5: one range, 4..=5.
        let outer = clamp(1, 7).apply(p(0, false), Pins::default());
        let inner = clamp(4, 5).apply(outer.effective, outer.pins);
        assert_eq!(inner.pins.urgency_range, Some((4, 5)));
        assert_eq!(inner.effective.urgency, 4);
        // Disjoint ranges compose to a constant, still expressed as a range.
        let inner = clamp(6, 7).apply(
            p(1, false),
            clamp(0, 2).apply(p(1, false), Pins::default()).pins,
        );
        assert_eq!(inner.pins.urgency_range, Some((6, 6)));
        // An outer fixed urgency clamped by an inner layer stays fixed.
        let fixed = Policy {
            urgency: Some(0),
            ..Policy::default()
        }
        .apply(p(5, false), Pins::default());
        let inner = clamp(2, 7).apply(fixed.effective, fixed.pins);
        assert_eq!(
            (inner.pins.urgency, inner.pins.urgency_range),
            (Some(2), None)
        );
        // An inner fixed urgency ends an outer clamp.
        let clamped = clamp(2, 7).apply(p(5, false), Pins::default());
        let inner = Policy {
            urgency: Some(6),
            ..Policy::default()
        }
        .apply(clamped.effective, clamped.pins);
        assert_eq!(
            (inner.pins.urgency, inner.pins.urgency_range),
            (Some(6), None)
        );
    }

    #[test]
    fn ignore_client_starts_from_defaults_and_pins_both() {
        let policy = Policy {
            ignore_client: true,
            ..Policy::default()
        };
        let a = policy.apply(p(0, true), Pins::default());
        assert_eq!(a.effective, Priority::default());
        assert_eq!(
            a.pins,
            Pins {
                urgency: Some(3),
                incremental: Some(false),
                urgency_range: None,
            }
        );
        // Clamping applies to the defaults it starts from.
        let clamped = Policy {
            ignore_client: true,
            clamp: Some((5, 7)),
            ..Policy::default()
        }
        .apply(p(0, true), Pins::default());
        assert_eq!(clamped.effective, p(5, false));
    }

    #[test]
    fn inner_pins_override_outer_pins_per_parameter() {
        let outer = Pins {
            urgency: Some(1),
            incremental: Some(true),
            urgency_range: None,
        };
        let inner = Policy {
            urgency: Some(6),
            ..Policy::default()
        };
        let a = inner.apply(p(1, true), outer);
        assert_eq!(a.effective, p(6, true));
        assert_eq!(
            a.pins,
            Pins {
                urgency: Some(6),
                incremental: Some(true),
                urgency_range: None,
            }
        );
    }
}
