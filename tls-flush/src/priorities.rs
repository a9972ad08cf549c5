//! What the wrapper knows about each stream's priority: the client's signals (request
//! header, then PRIORITY_UPDATE frames in order) overlaid by what the server pinned in
//! its `priority` response header. Bounded whatever the peer sends.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tower_priority::{Priority, PriorityParams, PriorityUpdate};

use crate::stats::ConnectionStats;

#[derive(Debug, Clone, Copy)]
struct StreamEntry {
    client: Priority,
    pinned: PriorityParams,
    /// The response's first header block has been written by h2.
    response_started: bool,
    /// When the request's header block was read.
    arrived: Instant,
}

/// Outcome of one PRIORITY_UPDATE, for tests and tracing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateOutcome {
    Applied,
    Buffered,
    Ignored,
    Invalid,
}

/// Per-connection table of stream priorities.
#[derive(Debug)]
pub(crate) struct StreamPriorities {
    open: HashMap<u32, StreamEntry>,
    /// Updates that arrived before their stream opened (RFC 9218 §7.1 allows this).
    early_updates: VecDeque<(u32, Priority)>,
    max_early_updates: usize,
    max_open: usize,
    /// Highest client-initiated stream id seen: lower ids not in `open` are closed.
    highest_client_stream: u32,
    stats: ConnectionStats,
}

impl StreamPriorities {
    pub(crate) fn new(max_early_updates: usize, max_open: usize, stats: ConnectionStats) -> Self {
        StreamPriorities {
            open: HashMap::new(),
            early_updates: VecDeque::new(),
            max_early_updates,
            max_open,
            highest_client_stream: 0,
            stats,
        }
    }

    /// A request header block opened `stream_id` with the given client signal.
    pub(crate) fn open_request(&mut self, stream_id: u32, client: Priority) {
        if stream_id == 0 || stream_id.is_multiple_of(2) {
            return;
        }
        if stream_id <= self.highest_client_stream {
            // Trailers or a reused id: the stream is known or closed; the request
            // header of an open stream was already applied.
            return;
        }
        self.highest_client_stream = stream_id;
        if self.open.len() >= self.max_open {
            // h2 enforces its own concurrency limit; this bound only protects our memory.
            return;
        }
        let mut entry = StreamEntry {
            client,
            pinned: PriorityParams::default(),
            response_started: false,
            arrived: Instant::now(),
        };
        // Updates sent before the request apply in arrival order, after the header.
        self.early_updates.retain(|&(id, p)| {
            if id == stream_id {
                entry.client = p;
                false
            } else {
                true
            }
        });
        self.open.insert(stream_id, entry);
    }

    /// Applies one PRIORITY_UPDATE payload received on `frame_stream_id`.
    pub(crate) fn apply_update(&mut self, frame_stream_id: u32, payload: &[u8]) -> UpdateOutcome {
        let outcome = self.classify_update(frame_stream_id, payload);
        match outcome {
            UpdateOutcome::Applied => self.stats.add_update_applied(1),
            UpdateOutcome::Buffered => self.stats.add_update_buffered(1),
            UpdateOutcome::Ignored => self.stats.add_update_ignored(1),
            UpdateOutcome::Invalid => self.stats.add_update_invalid(1),
        }
        tracing::trace!(
            frame_stream_id,
            ?outcome,
            len = payload.len(),
            "PRIORITY_UPDATE"
        );
        outcome
    }

    fn classify_update(&mut self, frame_stream_id: u32, payload: &[u8]) -> UpdateOutcome {
        // RFC 9218 §7.1: PRIORITY_UPDATE is sent on stream 0 in HTTP/2.
        if frame_stream_id != 0 {
            return UpdateOutcome::Invalid;
        }
        let update = match PriorityUpdate::parse(payload) {
            Ok(u) => u,
            // Short payload, stream id 0, non-ASCII value: all malformed (§7.1).
            Err(_) => return UpdateOutcome::Invalid,
        };
        let id = update.prioritized_stream_id;
        if let Some(entry) = self.open.get_mut(&id) {
            entry.client = update.priority;
            return UpdateOutcome::Applied;
        }
        if id.is_multiple_of(2) || id <= self.highest_client_stream {
            // Server-initiated (hyper never pushes) or already closed.
            return UpdateOutcome::Ignored;
        }
        if let Some(slot) = self.early_updates.iter_mut().find(|(i, _)| *i == id) {
            slot.1 = update.priority;
            return UpdateOutcome::Buffered;
        }
        if self.early_updates.len() >= self.max_early_updates {
            return UpdateOutcome::Ignored;
        }
        self.early_updates.push_back((id, update.priority));
        UpdateOutcome::Buffered
    }

    /// h2 wrote the first response header block of `stream_id`, with this `priority`
    /// response header (if any): what the server pinned.
    pub(crate) fn response_started(&mut self, stream_id: u32, pinned: Option<PriorityParams>) {
        if let Some(entry) = self.open.get_mut(&stream_id) {
            if !entry.response_started {
                entry.response_started = true;
                if let Some(p) = pinned {
                    entry.pinned = p;
                }
            }
        }
    }

    /// The stream is finished (response ended, or reset in either direction).
    pub(crate) fn close(&mut self, stream_id: u32) {
        self.open.remove(&stream_id);
    }

    /// The effective priority of `stream_id`: client signals overlaid by server pins.
    pub(crate) fn effective(&self, stream_id: u32) -> Priority {
        self.open
            .get(&stream_id)
            .map(|e| e.pinned.apply_to(e.client))
            .unwrap_or_default()
    }

    /// True while a request more urgent than `urgency` arrived less than `bound` ago and its
    /// response has not begun: DATA of that urgency should wait for it (DESIGN: anticipate).
    pub(crate) fn awaiting_more_urgent(&self, urgency: u8, bound: Duration, now: Instant) -> bool {
        self.open.values().any(|e| {
            !e.response_started
                && e.pinned.apply_to(e.client).urgency < urgency
                && now.saturating_duration_since(e.arrived) < bound
        })
    }

    #[cfg(test)]
    pub(crate) fn open_streams(&self) -> usize {
        self.open.len()
    }

    #[cfg(test)]
    pub(crate) fn early_updates(&self) -> usize {
        self.early_updates.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(id: u32, value: &str) -> Vec<u8> {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(value.as_bytes());
        p
    }

    fn table() -> StreamPriorities {
        StreamPriorities::new(4, 100, ConnectionStats::default())
    }

    #[test]
    fn update_applies_to_open_stream_and_pins_win() {
        let mut t = table();
        t.open_request(1, Priority::parse("u=5, i"));
        assert_eq!(t.effective(1), Priority::parse("u=5, i"));
        assert_eq!(t.apply_update(0, &update(1, "u=0")), UpdateOutcome::Applied);
        assert_eq!(t.effective(1).urgency, 0);
        t.response_started(1, Some(PriorityParams::parse(b"u=2")));
        assert_eq!(
            t.effective(1),
            Priority {
                urgency: 2,
                incremental: false
            }
        );
    }

    #[test]
    fn early_update_is_buffered_then_applied_and_bounded() {
        let mut t = table();
        assert_eq!(
            t.apply_update(0, &update(3, "u=1")),
            UpdateOutcome::Buffered
        );
        t.open_request(3, Priority::parse("u=6"));
        assert_eq!(t.effective(3).urgency, 1);
        assert_eq!(t.early_updates(), 0);
        for id in [5, 7, 9, 11] {
            assert_eq!(
                t.apply_update(0, &update(id, "u=1")),
                UpdateOutcome::Buffered
            );
        }
        assert_eq!(
            t.apply_update(0, &update(13, "u=1")),
            UpdateOutcome::Ignored
        );
        // Re-updating a buffered stream replaces its entry instead of growing the queue.
        assert_eq!(
            t.apply_update(0, &update(5, "u=2")),
            UpdateOutcome::Buffered
        );
        assert_eq!(t.early_updates(), 4);
    }

    #[test]
    fn closed_and_invalid_updates() {
        let mut t = table();
        t.open_request(1, Priority::default());
        t.close(1);
        assert_eq!(t.apply_update(0, &update(1, "u=0")), UpdateOutcome::Ignored);
        assert_eq!(t.apply_update(0, &[0, 0, 1]), UpdateOutcome::Invalid);
        assert_eq!(t.apply_update(0, &update(0, "u=0")), UpdateOutcome::Invalid);
        assert_eq!(
            t.apply_update(0, &[0, 0, 0, 5, 0xff]),
            UpdateOutcome::Invalid
        );
        assert_eq!(t.apply_update(1, &update(5, "u=0")), UpdateOutcome::Invalid);
        let s = t.stats.snapshot();
        assert_eq!(
            (s.priority_updates_ignored, s.priority_updates_invalid),
            (1, 4)
        );
    }

    #[test]
    fn anticipation_lasts_until_the_response_starts_or_the_bound() {
        let mut t = table();
        let bound = Duration::from_millis(5);
        t.open_request(1, Priority::parse("u=5, i"));
        t.open_request(3, Priority::parse("u=0"));
        let now = Instant::now();
        assert!(t.awaiting_more_urgent(5, bound, now));
        assert!(
            !t.awaiting_more_urgent(0, bound, now),
            "nothing is more urgent than u=0"
        );
        assert!(!t.awaiting_more_urgent(5, bound, now + Duration::from_millis(6)));
        t.response_started(3, None);
        assert!(!t.awaiting_more_urgent(5, bound, now));
    }

    #[test]
    fn open_streams_are_bounded() {
        let mut t = StreamPriorities::new(4, 2, ConnectionStats::default());
        for id in [1, 3, 5] {
            t.open_request(id, Priority::default());
        }
        assert_eq!(t.open_streams(), 2);
    }
}
