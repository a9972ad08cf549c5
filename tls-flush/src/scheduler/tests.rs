//! The scheduler's ordering invariants, unit by unit.

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

/// A scheduler in `ordering` with `units` pushed in turn.
fn queued(
    ordering: Ordering,
    p: &mut StreamPriorities,
    units: impl IntoIterator<Item = (FrameHeader, Bytes)>,
) -> Scheduler {
    let mut s = Scheduler::new(ordering);
    for (h, b) in units {
        s.push(h, b, p);
    }
    s
}

fn drain(s: &mut Scheduler, p: &mut StreamPriorities) -> Vec<(u8, u32)> {
    std::iter::from_fn(|| s.pop(p).map(|(f, _)| (f.header.kind, f.header.stream_id))).collect()
}

/// The stream ids of the frames [`drain`] pops, in order.
fn drain_ids(s: &mut Scheduler, p: &mut StreamPriorities) -> Vec<u32> {
    drain(s, p).into_iter().map(|(_, id)| id).collect()
}

fn priorities(list: &[(u32, &str)]) -> StreamPriorities {
    let mut p = StreamPriorities::new(8, 100, None, ConnectionStats::default());
    for (id, v) in list {
        p.open_request(*id, Priority::parse(v));
    }
    p
}

#[test]
fn urgent_data_overtakes_bulk_but_headers_keep_order() {
    let mut p = priorities(&[(1, "u=5, i"), (3, "u=5, i"), (5, "u=0")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [
            unit(frame::HEADERS, 4, 1, 10),
            unit(frame::DATA, 0, 1, 100),
            unit(frame::HEADERS, 4, 3, 10),
            unit(frame::DATA, 0, 3, 100),
            unit(frame::DATA, 0, 1, 100),
            unit(frame::HEADERS, 4, 5, 10),
            unit(frame::DATA, 1, 5, 100),
        ],
    );
    let order = drain(&mut s, &mut p);
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
fn an_idle_scheduler_gives_its_queues_back_and_queues_again() {
    let mut p = priorities(&[(1, "u=3")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [
            unit(frame::SETTINGS, 0, 0, 6),
            unit(frame::HEADERS, 4, 1, 10),
        ],
    );
    // Room for the served epoch and the one after the barrier, not the four a
    // growing deque would take.
    assert_eq!(s.queues.as_ref().map(|q| q.epochs.capacity()), Some(2));
    s.release_idle();
    assert_ne!(
        s.queues.as_ref().map_or(0, |q| q.epochs.capacity()),
        0,
        "nothing is released while units are queued"
    );
    assert_eq!(
        drain(&mut s, &mut p),
        vec![(frame::SETTINGS, 0), (frame::HEADERS, 1)]
    );
    s.release_idle();
    assert!(!s.is_allocated());
    assert!(s.is_empty());
    // The next unit finds a served epoch again, and barriers still order.
    s.push(
        unit(frame::HEADERS, 4, 1, 10).0,
        unit(frame::HEADERS, 4, 1, 10).1,
        &mut p,
    );
    s.push(
        unit(frame::SETTINGS, 0, 0, 6).0,
        unit(frame::SETTINGS, 0, 0, 6).1,
        &mut p,
    );
    s.push(
        unit(frame::DATA, 1, 1, 10).0,
        unit(frame::DATA, 1, 1, 10).1,
        &mut p,
    );
    assert_eq!(
        drain(&mut s, &mut p),
        vec![(frame::HEADERS, 1), (frame::SETTINGS, 0), (frame::DATA, 1)]
    );
}

#[test]
fn settings_is_a_barrier() {
    let mut p = priorities(&[(1, "u=5"), (3, "u=0")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [
            unit(frame::DATA, 0, 1, 10),
            unit(frame::SETTINGS, frame::FLAG_ACK, 0, 0),
            unit(frame::DATA, 0, 3, 10),
            unit(PING, 0, 0, 8),
        ],
    );
    assert_eq!(
        drain(&mut s, &mut p),
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
    let mut p = priorities(&[(1, "u=7"), (3, "u=0")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [
            unit(frame::DATA, 0, 1, 10),
            unit(frame::HEADERS, 5, 1, 3), // trailers
            unit(frame::HEADERS, 4, 3, 3),
            unit(frame::DATA, 1, 3, 10),
        ],
    );
    assert_eq!(
        drain(&mut s, &mut p),
        vec![
            (frame::DATA, 1),
            (frame::HEADERS, 1),
            (frame::HEADERS, 3),
            (frame::DATA, 3)
        ]
    );
}

/// Non-incremental responses one at a time in stream order; incremental ones (at and
/// below the default urgency) in the order h2 wrote them, which is the body gate's order
/// or h2's own round-robin: a response queued whole before the next one began is not
/// interleaved with it again.
#[test]
fn incremental_in_the_order_written_and_non_incremental_in_id_order() {
    let mut p = priorities(&[(1, "u=3, i"), (3, "u=3, i"), (5, "u=3"), (7, "u=3")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [1, 3, 1, 3, 7, 5, 7, 5].map(|id| unit(frame::DATA, 0, id, 10)),
    );
    let ids = drain_ids(&mut s, &mut p);
    assert_eq!(ids, vec![5, 5, 7, 7, 1, 3, 1, 3]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [3, 3, 3, 1, 3, 1].map(|id| unit(frame::DATA, 0, id, 10)),
    );
    assert_eq!(drain_ids(&mut s, &mut p), vec![3, 3, 3, 1, 3, 1]);
}

/// Above the default urgency, incremental responses go one at a time too, in stream order
/// whatever order h2 wrote them in: a page's hero image (`u=2, i`, requested first) ends
/// before the images after it begin.
#[test]
fn incremental_responses_above_the_default_go_one_at_a_time() {
    let mut p = priorities(&[(1, "u=2, i"), (3, "u=2, i"), (5, "u=3, i"), (7, "u=3, i")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [3, 1, 3, 1].map(|id| unit(frame::DATA, 0, id, 10)),
    );
    assert_eq!(drain_ids(&mut s, &mut p), vec![1, 1, 3, 3]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [5, 7, 5, 7].map(|id| unit(frame::DATA, 0, id, 10)),
    );
    assert_eq!(drain_ids(&mut s, &mut p), vec![5, 7, 5, 7]);
}

/// A long download at `u=3, i` does not starve a `u=4` response (a web font, as
/// Chromium asks for it): one frame of it for every two of the download.
#[test]
fn a_less_urgent_response_is_not_starved_by_a_long_download() {
    let mut p = priorities(&[(1, "u=3, i"), (3, "u=4")]);
    let frames = [1; 48]
        .into_iter()
        .chain([3; 3])
        .map(|id| unit(frame::DATA, 0, id, 16_384));
    let mut s = queued(Ordering::Rfc9218, &mut p, frames);
    let ids = drain_ids(&mut s, &mut p);
    let font_at: Vec<usize> = (0..ids.len()).filter(|&i| ids[i] == 3).collect();
    assert_eq!(font_at, [2, 5, 8], "{ids:?}");
}

/// The browser lab's demo page: a `u=3` download's frame put back (its record had no room
/// for it) keeps its share turn; a `u=1` answer's first piece leaves and its rest is queued
/// again; the download's turn comes next. While the write budget holds the download, the
/// answer's rest goes instead, and the turn is the download's again once it is not held.
#[test]
fn a_level_the_write_budget_holds_takes_no_turn_from_a_more_urgent_one() {
    let mut p = priorities(&[(1, "u=3, i"), (3, "u=1")]);
    let download = (0..3).map(|_| unit(frame::DATA, 0, 1, 16_384));
    let mut s = queued(Ordering::Rfc9218, &mut p, download);
    let (put_back, _) = s.pop(&mut p).expect("the download's frame");
    s.requeue_front(put_back, &mut p);
    let (h, b) = unit(frame::DATA, 0, 3, 4096);
    s.push(h, b, &mut p);
    let (answer, _) = s.pop(&mut p).expect("the answer");
    assert_eq!(
        answer.header.stream_id, 3,
        "the more urgent level goes first"
    );
    let (h, b) = unit(frame::DATA, 0, 3, 2700);
    let rest = QueuedFrame {
        header: h,
        bytes: b,
        seq: answer.seq,
        ends_stream: false,
    };
    s.requeue_front(rest, &mut p);
    assert_eq!(
        s.next_stream_id(&mut p),
        Some(1),
        "the download's share turn"
    );
    s.budget_holds(Some(3));
    assert_eq!(s.next_data_urgency(&mut p), Some(1));
    let (next, _) = s.pop(&mut p).expect("the answer's rest");
    assert_eq!(next.header.stream_id, 3);
    s.budget_holds(None);
    assert_eq!(s.next_stream_id(&mut p), Some(1));
    // Held, with nothing more urgent queued, the held level goes as before.
    s.budget_holds(Some(3));
    assert_eq!(drain_ids(&mut s, &mut p), vec![1, 1, 1]);
}

#[test]
fn next_data_urgency_only_peeks() {
    let mut p = priorities(&[(1, "u=5, i"), (3, "u=5, i"), (5, "u=2")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [
            unit(frame::HEADERS, 4, 1, 3),
            unit(frame::DATA, 0, 1, 10),
            unit(frame::DATA, 0, 3, 10),
        ],
    );
    // A header block goes next: no DATA to hold.
    assert_eq!(s.next_data_urgency(&mut p), None);
    s.pop(&mut p);
    assert_eq!(s.next_data_urgency(&mut p), Some(5));
    assert_eq!(s.next_data_urgency(&mut p), Some(5));
    let (h, b) = unit(frame::DATA, 1, 5, 10);
    s.push(h, b, &mut p);
    assert_eq!(s.next_data_urgency(&mut p), Some(2));
    let order = drain_ids(&mut s, &mut p);
    assert_eq!(order, vec![5, 1, 3], "peeking changed nothing");
}

#[test]
fn a_priority_change_moves_queued_data_without_rescanning() {
    let mut p = priorities(&[(1, "u=5"), (3, "u=4"), (5, "u=6, i")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [1, 3, 5, 1, 3, 5].map(|id| unit(frame::DATA, 0, id, 10)),
    );
    assert_eq!(s.least_urgent_queued(&mut p), Some(6));
    // PRIORITY_UPDATE raises stream 5 above the others; a pin lowers stream 3.
    let mut update = 5u32.to_be_bytes().to_vec();
    update.extend_from_slice(b"u=0");
    p.apply_update(0, &update);
    p.response_started(3, Some(tower_priority::PriorityParams::parse(b"u=7")), None);
    assert_eq!(s.next_data_urgency(&mut p), Some(0));
    assert_eq!(s.least_urgent_queued(&mut p), Some(7));
    let ids = drain_ids(&mut s, &mut p);
    assert_eq!(ids, vec![5, 5, 1, 1, 3, 3]);
    assert_eq!(s.least_urgent_queued(&mut p), None);
    assert!(s.is_empty());
}

#[test]
fn a_later_epoch_is_indexed_with_the_priorities_of_when_it_is_served() {
    let mut p = priorities(&[(1, "u=5"), (3, "u=4")]);
    let mut s = queued(
        Ordering::Rfc9218,
        &mut p,
        [
            unit(frame::DATA, 0, 1, 10),
            unit(frame::SETTINGS, frame::FLAG_ACK, 0, 0),
            unit(frame::DATA, 0, 1, 10),
            unit(frame::DATA, 0, 3, 10),
        ],
    );
    // Stream 1 becomes the most urgent while its frames wait behind the barrier.
    let mut update = 1u32.to_be_bytes().to_vec();
    update.extend_from_slice(b"u=0");
    p.apply_update(0, &update);
    assert_eq!(
        drain(&mut s, &mut p),
        vec![
            (frame::DATA, 1),
            (frame::SETTINGS, 0),
            (frame::DATA, 1),
            (frame::DATA, 3)
        ]
    );
    assert!(s.is_empty());
}

#[test]
fn in_order_keeps_h2_order() {
    let mut p = priorities(&[(1, "u=7"), (3, "u=0")]);
    let mut s = queued(
        Ordering::InOrder,
        &mut p,
        [1, 3, 1].map(|id| unit(frame::DATA, 0, id, 10)),
    );
    let ids = drain_ids(&mut s, &mut p);
    assert_eq!(ids, vec![1, 3, 1]);
}
