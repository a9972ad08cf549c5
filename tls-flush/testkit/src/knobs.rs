//! [`Knobs`]: the `FlushConfig` a write case runs with, as a policy preset and the
//! overrides a case chose, and what the checks derive from it (hard limit, record payload,
//! whether DATA is reordered, whether records are cut after urgent frames).

use std::time::Duration;

use tls_flush::{FlushConfig, Policy, RecordSizing, UrgentCut};

use crate::checks::CounterBounds;
use crate::frame::{DEFAULT_HARD_LIMIT, MAX_RECORD};

/// A policy's preset and the overrides of one case; `None` keeps the preset's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knobs {
    pub policy: Policy,
    pub announce: bool,
    pub cork: bool,
    pub pack: bool,
    /// `Some(on)` overrides the preset's reordering.
    pub reorder: Option<bool>,
    /// `(soft, hard)`.
    pub limits: Option<(usize, usize)>,
    /// `tls_max_fragment_size`.
    pub fragment: Option<usize>,
    /// `None`: the preset; `Some(None)`: no cut; `Some(Some(..))`: this cut.
    pub urgent_cut: Option<Option<(u8, usize)>>,
    /// `None`: the preset; `Some(bound)`: `anticipate(bound)`.
    pub anticipate: Option<Option<Duration>>,
    pub record_sizing: Option<RecordSizing>,
    pub max_early_updates: Option<usize>,
}

impl Knobs {
    /// `policy`'s preset with the announcement off (so that the output can be compared
    /// with the input frame for frame), cork and packing on.
    pub fn new(policy: Policy) -> Self {
        Knobs {
            policy,
            announce: false,
            cork: true,
            pack: true,
            reorder: None,
            limits: None,
            fragment: None,
            urgent_cut: None,
            anticipate: None,
            record_sizing: None,
            max_early_updates: None,
        }
    }

    pub fn config(&self) -> FlushConfig {
        let mut c = FlushConfig::for_policy(self.policy)
            .announce_no_rfc7540_priorities(self.announce)
            .cork(self.cork)
            .pack_records(self.pack)
            .tls_max_fragment_size(self.fragment);
        if let Some(on) = self.reorder {
            c = c.reorder(on);
        }
        if let Some((soft, hard)) = self.limits {
            c = c.soft_limit(soft).hard_limit(hard);
        }
        match self.urgent_cut {
            None => {}
            Some(None) => c = c.urgent_cut(None),
            Some(Some((max_urgency, max_payload))) => {
                c = c.urgent_cut(Some(UrgentCut {
                    max_urgency,
                    max_payload,
                }))
            }
        }
        if let Some(bound) = self.anticipate {
            c = c.anticipate(bound);
        }
        if let Some(sizing) = self.record_sizing {
            c = c.record_sizing(sizing);
        }
        if let Some(n) = self.max_early_updates {
            c = c.max_early_updates(n);
        }
        c
    }

    /// Whether DATA may be reordered (`scheduled`'s preset, or the override).
    pub fn reorders(&self) -> bool {
        self.reorder.unwrap_or(self.policy == Policy::Scheduled)
    }

    pub fn hard_limit(&self) -> usize {
        self.limits
            .map_or(DEFAULT_HARD_LIMIT, |(soft, hard)| hard.max(soft))
    }

    /// The payload of a full TLS record.
    pub fn record_payload(&self) -> usize {
        self.fragment
            .map_or(MAX_RECORD, |n| n.saturating_sub(5).clamp(1, MAX_RECORD))
    }

    /// Whether records are cut after urgent frames (every preset, unless switched off).
    pub fn has_urgent_cut(&self) -> bool {
        match self.urgent_cut {
            None => true,
            Some(cut) => cut.is_some(),
        }
    }

    /// The bounds of [`crate::check_counters`] for this configuration: any DATA frame may
    /// end a record early.
    pub fn counter_bounds(&self) -> CounterBounds {
        CounterBounds {
            hard_limit: self.config().queue_limit(),
            record_payload: self.record_payload(),
            reorders: self.reorders(),
            urgent_cut: self.has_urgent_cut(),
            cut_data_max: usize::MAX,
        }
    }
}
