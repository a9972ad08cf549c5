//! Which HTTP/2 stream each response body answers, so that the gate follows the client's
//! PRIORITY_UPDATE frames (RFC 9218 §7.1) as the wire scheduler does.
//!
//! Why: a body the client raised after its request would otherwise stay at its request's
//! urgency at the source, held behind a sibling the wire scheduler now puts after it (the
//! wrapper would have none of its frames to send first).
//!
//! hyper does not tell a service its request's stream id. It calls the service for the
//! streams h2 accepts, in the order their HEADERS arrived: h2 queues every stream it does
//! not refuse, streams the client reset before acceptance included. The wrapper reads those
//! HEADERS before h2 does, so the n-th request the service sees is the n-th stream the
//! wrapper saw open, unless h2 refused one (more concurrent streams than it allows,
//! malformed headers, a CONNECT with a body). A claim therefore takes the oldest unclaimed
//! stream whose request `priority` (as the wrapper parsed it) is the request's, and
//! forgets older unclaimed ones that differ: a refused stream costs a claim only where its
//! priority equals the next request's, and then only the updates of that connection's
//! misbehaving client go to the wrong body (never a byte).
//!
//! Bounded: at most [`MAX_UNREGISTERED_STREAMS`] unclaimed and as many claimed streams
//! (a few bytes each); past it the oldest unclaimed one is forgotten, and a claim finds
//! no stream (its body then keeps its request's urgency).

use std::collections::VecDeque;

use foldhash::HashMap;
use tower_priority::Priority;

/// The most streams kept between the wrapper seeing their HEADERS and their response
/// body's registration: the wrapper's default bound on the streams it tracks
/// (`FlushConfig`'s `max_tracked_streams`), well above h2's concurrency limit (100 here).
pub(crate) const MAX_UNREGISTERED_STREAMS: usize = 1024;

/// Streams whose response body is not registered yet.
#[derive(Debug, Default)]
pub(super) struct Streams {
    /// Opened, not yet claimed by a request, in arrival order (ascending ids): id, the
    /// request's `priority`, the client's latest update.
    unclaimed: VecDeque<(u32, Priority, Option<Priority>)>,
    /// Claimed by a request whose response is not registered yet: the client's latest
    /// update.
    claimed: HashMap<u32, Option<Priority>>,
}

impl Streams {
    /// The wrapper saw `stream`'s request HEADERS, with `header` in its `priority` field
    /// and `update` sent before them.
    pub(super) fn opened(&mut self, stream: u32, header: Priority, update: Option<Priority>) {
        if self.unclaimed.len() >= MAX_UNREGISTERED_STREAMS {
            self.unclaimed.pop_front();
        }
        self.unclaimed.push_back((stream, header, update));
    }

    /// The stream of the next request the service sees, whose `priority` header is
    /// `header`.
    pub(super) fn claim(&mut self, header: Priority) -> Option<u32> {
        if self.claimed.len() >= MAX_UNREGISTERED_STREAMS {
            return None;
        }
        let at = self.unclaimed.iter().position(|&(_, h, _)| h == header)?;
        let (stream, _, update) = self.unclaimed.drain(..=at).next_back()?;
        self.claimed.insert(stream, update);
        Some(stream)
    }

    /// The client's latest update to the claimed `stream`, whose body registers now.
    pub(super) fn register(&mut self, stream: u32) -> Option<Priority> {
        self.claimed.remove(&stream).flatten()
    }

    /// The client updated `stream` to `client`; false when no body of it is to come here
    /// (registered already, or unknown).
    pub(super) fn update(&mut self, stream: u32, client: Priority) -> bool {
        if let Some(update) = self.claimed.get_mut(&stream) {
            *update = Some(client);
            return true;
        }
        match self
            .unclaimed
            .binary_search_by_key(&stream, |&(id, _, _)| id)
        {
            Ok(at) => {
                self.unclaimed[at].2 = Some(client);
                true
            }
            Err(_) => false,
        }
    }

    /// `stream` is over: a request that claimed it will not register a body. (An
    /// unclaimed stream stays: h2 still hands a stream the client reset to hyper.)
    pub(super) fn closed(&mut self, stream: u32) {
        self.claimed.remove(&stream);
    }

    /// No stream waits for its body.
    pub(super) fn is_empty(&self) -> bool {
        self.unclaimed.is_empty() && self.claimed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(value: &str) -> Priority {
        Priority::parse(value)
    }

    #[test]
    fn requests_claim_streams_in_order_and_keep_their_updates() {
        let mut s = Streams::default();
        s.opened(1, p("u=5"), None);
        s.opened(3, p("u=5"), Some(p("u=1")));
        assert!(s.update(1, p("u=0")));
        assert_eq!(s.claim(p("u=5")), Some(1));
        assert!(s.update(1, p("u=2")), "claimed, not registered");
        assert_eq!(s.register(1), Some(p("u=2")));
        assert!(
            !s.update(1, p("u=0")),
            "registered: the gate's body follows it"
        );
        assert_eq!(s.claim(p("u=5")), Some(3));
        assert_eq!(s.register(3), Some(p("u=1")), "sent before the request");
        assert_eq!(s.claim(p("u=5")), None);
    }

    #[test]
    fn a_stream_that_never_reached_the_service_is_skipped_by_its_priority() {
        let mut s = Streams::default();
        s.opened(1, p("u=0"), None); // refused by h2: never claimed
        s.opened(3, p("u=5, i"), None);
        assert_eq!(s.claim(p("u=5, i")), Some(3));
        assert!(!s.update(1, p("u=2")), "forgotten");
        assert_eq!(s.claim(p("u=0")), None);
    }

    #[test]
    fn closed_claims_are_forgotten_and_everything_is_bounded() {
        let mut s = Streams::default();
        s.opened(1, p("u=3"), None);
        assert_eq!(s.claim(p("u=3")), Some(1));
        s.closed(1);
        assert!(!s.update(1, p("u=0")));
        for id in 0..2 * MAX_UNREGISTERED_STREAMS as u32 {
            s.opened(2 * id + 3, Priority::default(), None);
        }
        assert_eq!(s.unclaimed.len(), MAX_UNREGISTERED_STREAMS);
        while s.claim(Priority::default()).is_some() {}
        assert_eq!(s.claimed.len(), MAX_UNREGISTERED_STREAMS);
        s.opened(1_000_001, Priority::default(), None);
        assert_eq!(
            s.claim(Priority::default()),
            None,
            "claimed ones are bounded too"
        );
    }
}
