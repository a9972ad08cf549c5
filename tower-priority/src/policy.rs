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

use crate::Priority;

/// The parameters a server decided, as opposed to those it took from the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pins {
    pub(crate) urgency: Option<u8>,
    pub(crate) incremental: Option<bool>,
}

impl Pins {
    /// `inner`'s pins override `self`'s; what `inner` leaves open stays as `self` pinned it.
    fn overlaid_by(self, inner: Pins) -> Pins {
        Pins {
            urgency: inner.urgency.or(self.urgency),
            incremental: inner.incremental.or(self.incremental),
        }
    }

    /// The response `priority` header value naming exactly the pinned parameters, or `None`
    /// when nothing is pinned. Static strings: no allocation per response.
    pub(crate) fn header_value(self) -> Option<HeaderValue> {
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
            // Only a clamp that changed something is a server decision worth announcing.
            if clamped != effective.urgency {
                effective.urgency = clamped;
                pins.urgency = Some(clamped);
            }
        }
        if let Some(u) = self.urgency {
            effective.urgency = u;
            pins.urgency = Some(u);
        }
        if let Some(i) = self.incremental {
            effective.incremental = i;
            pins.incremental = Some(i);
        }
        if self.ignore_client {
            pins.urgency = Some(effective.urgency);
            pins.incremental = Some(effective.incremental);
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
        assert_eq!(inside.pins, Pins::default());
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
                incremental: Some(false)
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
                incremental: Some(true)
            }
        );
    }
}
