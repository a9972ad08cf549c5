//! Orders absorbed frames for the wire.
//!
//! Only DATA frames of different streams change order. Everything else keeps the
//! invariants h2 relies on:
//! - a stream's frames keep their order (HEADERS, DATA, trailers, RST_STREAM);
//! - header blocks keep their relative order across streams (HPACK state) and each
//!   leaves as one unit (HEADERS + CONTINUATIONs, contiguous);
//! - SETTINGS (and SETTINGS ACK) is a barrier: what was queued before it goes first,
//!   what was queued after it goes after;
//! - connection-level control frames (PING, WINDOW_UPDATE, GOAWAY) go ahead of DATA.
//!
//! Barriers are modelled as epochs: frames queued between two SETTINGS frames form an
//! epoch, only the oldest epoch is served, and its closing SETTINGS leaves last.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tower_priority::Priority;

use crate::frame::{self, FrameHeader};
use crate::priorities::StreamPriorities;

/// One schedulable unit: a frame, or a whole header block (HEADERS + CONTINUATIONs).
#[derive(Debug, Clone)]
pub(crate) struct QueuedFrame {
    /// Header of the first frame of the unit.
    pub(crate) header: FrameHeader,
    /// The unit's wire bytes, frame headers included.
    pub(crate) bytes: Bytes,
    /// Order in which h2 wrote it.
    pub(crate) seq: u64,
    /// The unit ends the stream (END_STREAM on its frame, or RST_STREAM).
    pub(crate) ends_stream: bool,
}

impl QueuedFrame {
    pub(crate) fn is_data(&self) -> bool {
        self.header.kind == frame::DATA
    }
}

/// How frames are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ordering {
    /// As h2 wrote them.
    InOrder,
    /// RFC 9218 §10 for DATA, invariants above for everything else.
    Rfc9218,
}

/// What `pop` returns besides the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Popped {
    /// A DATA frame written earlier by h2 is still queued behind this one.
    pub(crate) overtook: bool,
}

#[derive(Debug, Default)]
struct Epoch {
    conn: VecDeque<QueuedFrame>,
    streams: BTreeMap<u32, VecDeque<QueuedFrame>>,
    /// Sequence numbers of queued header blocks, oldest first.
    header_order: VecDeque<u64>,
    /// The SETTINGS frame that closes this epoch; `None` for the newest epoch.
    barrier: Option<QueuedFrame>,
}

impl Epoch {
    fn is_drained(&self) -> bool {
        self.conn.is_empty() && self.streams.is_empty()
    }
}

/// The frame queues of one connection.
#[derive(Debug)]
pub(crate) struct Scheduler {
    ordering: Ordering,
    fifo: VecDeque<QueuedFrame>,
    epochs: VecDeque<Epoch>,
    /// Per urgency, the last incremental stream served (round-robin cursor).
    round_robin: [u32; 8],
    queued_bytes: usize,
    next_seq: u64,
}

impl Scheduler {
    pub(crate) fn new(ordering: Ordering) -> Self {
        Scheduler {
            ordering,
            fifo: VecDeque::new(),
            epochs: VecDeque::from([Epoch::default()]),
            round_robin: [0; 8],
            queued_bytes: 0,
            next_seq: 0,
        }
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queued_bytes == 0
            && self.fifo.is_empty()
            && self
                .epochs
                .iter()
                .all(|e| e.is_drained() && e.barrier.is_none())
    }

    /// Queues a unit h2 wrote; `ends_stream` as in [`QueuedFrame`].
    pub(crate) fn push(&mut self, header: FrameHeader, bytes: Bytes) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued_bytes += bytes.len();
        let ends_stream = header.end_stream() || header.kind == frame::RST_STREAM;
        let unit = QueuedFrame {
            header,
            bytes,
            seq,
            ends_stream,
        };
        if self.ordering == Ordering::InOrder {
            self.fifo.push_back(unit);
            return;
        }
        let epoch = self
            .epochs
            .back_mut()
            .expect("there is always an open epoch");
        if header.kind == frame::SETTINGS {
            epoch.barrier = Some(unit);
            self.epochs.push_back(Epoch::default());
        } else if header.stream_id == 0 {
            epoch.conn.push_back(unit);
        } else {
            if header.is_header_block() {
                epoch.header_order.push_back(seq);
            }
            epoch
                .streams
                .entry(header.stream_id)
                .or_default()
                .push_back(unit);
        }
    }

    /// True when a DATA frame of `stream_id` is queued where it can go next (at the head of
    /// its stream in the oldest epoch, or anywhere in the in-order queue).
    pub(crate) fn has_data_ready(&self, stream_id: u32) -> bool {
        match self.ordering {
            Ordering::InOrder => self
                .fifo
                .front()
                .is_some_and(|f| f.is_data() && f.header.stream_id == stream_id),
            Ordering::Rfc9218 => self
                .epochs
                .front()
                .and_then(|e| e.streams.get(&stream_id))
                .and_then(|q| q.front())
                .is_some_and(QueuedFrame::is_data),
        }
    }

    /// The least urgent priority among streams with queued DATA (for admission).
    pub(crate) fn least_urgent_queued(&self, priorities: &StreamPriorities) -> Option<u8> {
        let from_fifo = self
            .fifo
            .iter()
            .filter(|f| f.is_data())
            .map(|f| f.header.stream_id);
        let from_epochs = self.epochs.iter().flat_map(|e| e.streams.keys().copied());
        from_fifo
            .chain(from_epochs)
            .map(|id| priorities.effective(id).urgency)
            .max()
    }

    /// Takes the next unit to put on the wire.
    pub(crate) fn pop(&mut self, priorities: &StreamPriorities) -> Option<(QueuedFrame, Popped)> {
        let popped = match self.ordering {
            Ordering::InOrder => self
                .fifo
                .pop_front()
                .map(|f| (f, Popped { overtook: false })),
            Ordering::Rfc9218 => self.pop_rfc9218(priorities),
        }?;
        self.queued_bytes -= popped.0.bytes.len();
        Some(popped)
    }

    fn pop_rfc9218(&mut self, priorities: &StreamPriorities) -> Option<(QueuedFrame, Popped)> {
        let not_reordered = Popped { overtook: false };
        let epoch = self.epochs.front_mut()?;
        if epoch.is_drained() {
            // The epoch's barrier leaves last; the newest epoch has none and waits.
            epoch.barrier.as_ref()?;
            let barrier = self.epochs.pop_front().and_then(|e| e.barrier);
            if self.epochs.is_empty() {
                self.epochs.push_back(Epoch::default());
            }
            return barrier.map(|b| (b, not_reordered));
        }
        if let Some(unit) = epoch.conn.pop_front() {
            return Some((unit, not_reordered));
        }
        let chosen = Self::next_stream(epoch, &self.round_robin, priorities)?;
        let p = priorities.effective(chosen);
        if p.incremental
            && epoch.streams[&chosen]
                .front()
                .is_some_and(QueuedFrame::is_data)
        {
            self.round_robin[usize::from(p.urgency.min(7))] = chosen;
        }
        let oldest_data = epoch
            .streams
            .values()
            .filter_map(|q| q.front())
            .filter(|f| f.is_data())
            .map(|f| f.seq)
            .min();
        let queue = epoch
            .streams
            .get_mut(&chosen)
            .expect("chosen stream has a queue");
        let unit = queue.pop_front().expect("chosen stream has a frame");
        if queue.is_empty() {
            epoch.streams.remove(&chosen);
        }
        if unit.header.is_header_block() {
            epoch.header_order.pop_front();
        }
        let overtook = unit.is_data() && oldest_data.is_some_and(|s| s < unit.seq);
        Some((unit, Popped { overtook }))
    }

    /// The urgency of the DATA frame `pop` would return next, if the next unit is DATA.
    pub(crate) fn next_data_urgency(&self, priorities: &StreamPriorities) -> Option<u8> {
        let stream = match self.ordering {
            Ordering::InOrder => self.fifo.front().filter(|f| f.is_data())?.header.stream_id,
            Ordering::Rfc9218 => {
                let epoch = self.epochs.front()?;
                if !epoch.conn.is_empty() {
                    return None;
                }
                let id = Self::next_stream(epoch, &self.round_robin, priorities)?;
                epoch.streams[&id].front().filter(|f| f.is_data())?;
                id
            }
        };
        Some(priorities.effective(stream).urgency)
    }

    /// The stream whose head unit goes next in `epoch` (stream-0 frames aside).
    fn next_stream(
        epoch: &Epoch,
        round_robin: &[u32; 8],
        priorities: &StreamPriorities,
    ) -> Option<u32> {
        let header_turn = epoch.header_order.front().copied();
        // Non-DATA heads go first, oldest first; a header block only in its turn.
        let control = epoch
            .streams
            .iter()
            .filter_map(|(&id, q)| q.front().map(|f| (id, f)))
            .filter(|(_, f)| {
                !f.is_data() && (!f.header.is_header_block() || Some(f.seq) == header_turn)
            })
            .min_by_key(|(_, f)| f.seq)
            .map(|(id, _)| id);
        // Without a control frame there is DATA: the oldest header block is either at the
        // head of its stream (then it is a control candidate) or behind that stream's DATA.
        match control {
            Some(id) => Some(id),
            None => Self::choose_data(epoch, header_turn, round_robin, priorities),
        }
    }

    /// Picks the stream whose DATA goes next (RFC 9218 §10).
    fn choose_data(
        epoch: &Epoch,
        header_turn: Option<u64>,
        round_robin: &[u32; 8],
        priorities: &StreamPriorities,
    ) -> Option<u32> {
        // A header block waiting behind its own stream's DATA (trailers) blocks every later
        // header block: that stream inherits the highest priority until it is through.
        if let Some(turn) = header_turn {
            let blocker = epoch
                .streams
                .iter()
                .find(|(_, q)| q.iter().any(|f| f.seq == turn))
                .map(|(&id, _)| id);
            if let Some(id) = blocker {
                if epoch.streams[&id].front().is_some_and(|f| f.is_data()) {
                    return Some(id);
                }
            }
        }
        let candidates: Vec<(u32, Priority)> = epoch
            .streams
            .iter()
            .filter(|(_, q)| q.front().is_some_and(|f| f.is_data()))
            .map(|(&id, _)| (id, priorities.effective(id)))
            .collect();
        let urgency = candidates.iter().map(|(_, p)| p.urgency).min()?;
        let level = candidates.iter().filter(|(_, p)| p.urgency == urgency);
        // Non-incremental responses one at a time, lowest stream id first (the map is sorted).
        if let Some(&(id, _)) = level.clone().find(|(_, p)| !p.incremental) {
            return Some(id);
        }
        // Incremental ones share the link frame by frame, after the last one served.
        let last = round_robin[usize::from(urgency.min(7))];
        level
            .clone()
            .map(|(id, _)| *id)
            .find(|&id| id > last)
            .or_else(|| level.map(|(id, _)| *id).next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ConnectionStats;

    const PING: u8 = 0x6;

    fn unit(kind: u8, flags: u8, stream_id: u32, len: u32) -> (FrameHeader, Bytes) {
        let header = FrameHeader {
            length: len,
            kind,
            flags,
            stream_id,
        };
        let mut bytes = header.encode().to_vec();
        bytes.resize(9 + len as usize, stream_id as u8);
        (header, Bytes::from(bytes))
    }

    fn drain(s: &mut Scheduler, p: &StreamPriorities) -> Vec<(u8, u32)> {
        std::iter::from_fn(|| s.pop(p).map(|(f, _)| (f.header.kind, f.header.stream_id))).collect()
    }

    fn priorities(list: &[(u32, &str)]) -> StreamPriorities {
        let mut p = StreamPriorities::new(8, 100, ConnectionStats::default());
        for (id, v) in list {
            p.open_request(*id, Priority::parse(v));
        }
        p
    }

    #[test]
    fn urgent_data_overtakes_bulk_but_headers_keep_order() {
        let p = priorities(&[(1, "u=5, i"), (3, "u=5, i"), (5, "u=0")]);
        let mut s = Scheduler::new(Ordering::Rfc9218);
        for (h, b) in [
            unit(frame::HEADERS, 4, 1, 10),
            unit(frame::DATA, 0, 1, 100),
            unit(frame::HEADERS, 4, 3, 10),
            unit(frame::DATA, 0, 3, 100),
            unit(frame::DATA, 0, 1, 100),
            unit(frame::HEADERS, 4, 5, 10),
            unit(frame::DATA, 1, 5, 100),
        ] {
            s.push(h, b);
        }
        let order = drain(&mut s, &p);
        assert_eq!(
            order,
            vec![
                (frame::HEADERS, 1),
                (frame::HEADERS, 3),
                (frame::HEADERS, 5),
                (frame::DATA, 5),
                (frame::DATA, 1),
                (frame::DATA, 3),
                (frame::DATA, 1),
            ]
        );
        assert_eq!(s.queued_bytes(), 0);
        assert!(s.is_empty());
    }

    #[test]
    fn settings_is_a_barrier() {
        let p = priorities(&[(1, "u=5"), (3, "u=0")]);
        let mut s = Scheduler::new(Ordering::Rfc9218);
        s.push(unit(frame::DATA, 0, 1, 10).0, unit(frame::DATA, 0, 1, 10).1);
        let (h, b) = unit(frame::SETTINGS, frame::FLAG_ACK, 0, 0);
        s.push(h, b);
        let (h, b) = unit(frame::DATA, 0, 3, 10);
        s.push(h, b);
        let (h, b) = unit(PING, 0, 0, 8);
        s.push(h, b);
        assert_eq!(
            drain(&mut s, &p),
            vec![
                (frame::DATA, 1),
                (frame::SETTINGS, 0),
                (PING, 0),
                (frame::DATA, 3)
            ]
        );
    }

    #[test]
    fn trailers_blocking_header_order_lift_their_stream() {
        let p = priorities(&[(1, "u=7"), (3, "u=0")]);
        let mut s = Scheduler::new(Ordering::Rfc9218);
        for (h, b) in [
            unit(frame::DATA, 0, 1, 10),
            unit(frame::HEADERS, 5, 1, 3), // trailers
            unit(frame::HEADERS, 4, 3, 3),
            unit(frame::DATA, 1, 3, 10),
        ] {
            s.push(h, b);
        }
        assert_eq!(
            drain(&mut s, &p),
            vec![
                (frame::DATA, 1),
                (frame::HEADERS, 1),
                (frame::HEADERS, 3),
                (frame::DATA, 3)
            ]
        );
    }

    #[test]
    fn incremental_round_robin_and_non_incremental_in_id_order() {
        let p = priorities(&[(1, "u=3, i"), (3, "u=3, i"), (5, "u=3"), (7, "u=3")]);
        let mut s = Scheduler::new(Ordering::Rfc9218);
        for id in [1, 3, 1, 3, 7, 5, 7, 5] {
            let (h, b) = unit(frame::DATA, 0, id, 10);
            s.push(h, b);
        }
        let ids: Vec<u32> = drain(&mut s, &p).into_iter().map(|(_, id)| id).collect();
        assert_eq!(ids, vec![5, 5, 7, 7, 1, 3, 1, 3]);
    }

    #[test]
    fn next_data_urgency_peeks_without_changing_the_turn() {
        let p = priorities(&[(1, "u=5, i"), (3, "u=5, i"), (5, "u=2")]);
        let mut s = Scheduler::new(Ordering::Rfc9218);
        for (h, b) in [
            unit(frame::HEADERS, 4, 1, 3),
            unit(frame::DATA, 0, 1, 10),
            unit(frame::DATA, 0, 3, 10),
        ] {
            s.push(h, b);
        }
        // A header block goes next: no DATA to hold.
        assert_eq!(s.next_data_urgency(&p), None);
        s.pop(&p);
        assert_eq!(s.next_data_urgency(&p), Some(5));
        assert_eq!(s.next_data_urgency(&p), Some(5));
        let (h, b) = unit(frame::DATA, 1, 5, 10);
        s.push(h, b);
        assert_eq!(s.next_data_urgency(&p), Some(2));
        let order: Vec<u32> = drain(&mut s, &p).into_iter().map(|(_, id)| id).collect();
        assert_eq!(
            order,
            vec![5, 1, 3],
            "peeking did not move the round-robin turn"
        );
    }

    #[test]
    fn in_order_keeps_h2_order() {
        let p = priorities(&[(1, "u=7"), (3, "u=0")]);
        let mut s = Scheduler::new(Ordering::InOrder);
        for id in [1, 3, 1] {
            let (h, b) = unit(frame::DATA, 0, id, 10);
            s.push(h, b);
        }
        let ids: Vec<u32> = drain(&mut s, &p).into_iter().map(|(_, id)| id).collect();
        assert_eq!(ids, vec![1, 3, 1]);
    }
}
