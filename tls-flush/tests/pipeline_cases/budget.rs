//! The memory budget shared by connections: stalled connections together stay within
//! `max(limit, connections × BUDGET_FLOOR)` (all of them open before the downloads begin),
//! every frame is delivered once they drain, a budget smaller than the floors still lets
//! every connection progress on its floor, and a dropped connection returns its charge.

use std::task::Poll;

use tls_flush::{MemoryBudget, Policy, BUDGET_FLOOR};
use tls_flush_testkit::{
    client_with_requests, comparable_preset, data, delivered, encode_all, response_headers,
    settings_frame, started, Buffering, Frame, Harness, Wire,
};

/// A 4 MiB download on stream 1, as h2 writes it: SETTINGS, the response's HEADERS, then
/// 256 full DATA frames.
fn download() -> Vec<Frame> {
    let mut frames = vec![settings_frame(0, &[]), response_headers(1)];
    frames.extend((0..256).map(|i| data(1, i, 16384, i == 255)));
    frames
}

/// `scheduled` sharing `budget`, with the whole soft limit kept while the transport is
/// blocked (so that without the budget each stalled connection would queue 256 KiB).
fn connection(budget: &MemoryBudget) -> Harness {
    let config = comparable_preset(Policy::Scheduled)
        .blocked_soft_limit(None)
        .memory_budget(Some(budget.clone()));
    started(
        config,
        Wire::open(Buffering::Off, client_with_requests(&[(1, None)])),
    )
}

/// Offers `frames[*next..]` one `poll_write` at a time until the wrapper refuses one
/// (returns `Pending`) or all are taken; advances `next` past the frames taken.
fn offer_until_refused(h: &mut Harness, frames: &[Frame], next: &mut usize) {
    while let Some(f) = frames.get(*next) {
        let bytes = f.encode();
        match h.offer(&bytes).unwrap() {
            Poll::Ready(Ok(n)) => assert_eq!(n, bytes.len(), "a whole frame per write"),
            Poll::Ready(Err(e)) => panic!("{e}"),
            Poll::Pending => return,
        }
        *next += 1;
    }
}

/// 50 connections each download 4 MiB from behind a blocked transport (a client that does
/// not read), with a 2 MiB budget: however h2 offers their frames (here each in turn until
/// refused, three rounds), the bytes queued in all of them stay within the budget (50
/// floors are 1.6 MB, under it), while without the budget they would reach 50 × 256 KiB.
/// The first connections take more than their floor (the budget was empty). Once the
/// transports drain every frame is delivered once, in order, and the budget is empty again.
#[test]
fn stalled_connections_stay_within_the_shared_budget() {
    const CONNECTIONS: usize = 50;
    let limit = 2 << 20;
    let budget = MemoryBudget::new(limit);
    let input = download();
    let mut conns: Vec<(Harness, usize)> =
        (0..CONNECTIONS).map(|_| (connection(&budget), 0)).collect();
    for (h, next) in &mut conns {
        h.set_blocked(true);
        // A connection registers with its first frame: h2's SETTINGS, written as soon as
        // the connection is up (so all 50 are open before any download begins).
        offer_until_refused(h, &input[..1], next);
    }
    for _round in 0..3 {
        for (h, next) in &mut conns {
            offer_until_refused(h, &input, next);
            assert!(
                *next < input.len(),
                "a stalled download is never taken whole"
            );
        }
    }
    let bound = limit.max(CONNECTIONS * BUDGET_FLOOR);
    assert!(
        budget.high_water() <= bound,
        "high water {} over {bound}",
        budget.high_water()
    );
    assert_eq!(budget.connections(), CONNECTIONS);
    let queued: u64 = conns.iter().map(|(h, _)| h.stats().queued_bytes).sum();
    assert!(
        queued as usize <= budget.used(),
        "{queued} > {}",
        budget.used()
    );
    let first = conns[0].0.stats().queued_memory_high_water as usize;
    assert!(
        first > BUDGET_FLOOR,
        "the first connection got past its floor: {first}"
    );

    for (h, next) in &mut conns {
        h.set_blocked(false);
        h.write_all(&encode_all(&input[*next..])).unwrap();
        delivered(h, &input);
    }
    assert_eq!(budget.used(), 0);
    drop(conns);
    assert_eq!(budget.connections(), 0);
}

/// A budget smaller than the connections' floors: each connection still takes frames up to
/// its floor (two full DATA frames), never more, and every download completes.
#[test]
fn every_connection_keeps_its_floor_when_the_budget_is_exhausted() {
    let budget = MemoryBudget::new(0);
    let input = download();
    let mut conns: Vec<(Harness, usize)> = (0..4).map(|_| (connection(&budget), 0)).collect();
    for (h, next) in &mut conns {
        h.set_blocked(true);
        offer_until_refused(h, &input, next);
        assert!(
            *next >= 3,
            "SETTINGS, HEADERS and a DATA frame at least: {}",
            *next
        );
        let memory = h.stats().queued_memory_high_water as usize;
        assert!(memory <= BUDGET_FLOOR, "{memory}");
    }
    assert!(budget.high_water() <= 4 * BUDGET_FLOOR);
    for (h, next) in &mut conns {
        h.set_blocked(false);
        h.write_all(&encode_all(&input[*next..])).unwrap();
        delivered(h, &input);
    }
    assert_eq!(budget.used(), 0);
}

/// A connection dropped with frames queued (its task aborted, its client gone) returns
/// everything it charged, and its floor.
#[test]
fn a_dropped_connection_returns_its_charge() {
    let budget = MemoryBudget::new(8 << 20);
    let input = download();
    let mut h = connection(&budget);
    h.set_blocked(true);
    let mut next = 0;
    offer_until_refused(&mut h, &input, &mut next);
    assert!(budget.used() > BUDGET_FLOOR, "{}", budget.used());
    assert_eq!(budget.connections(), 1);
    drop(h);
    assert_eq!((budget.used(), budget.connections()), (0, 0));
}
