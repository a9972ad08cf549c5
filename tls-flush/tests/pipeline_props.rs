//! Property tests for the HTTP/2 write pipeline of `tls-flush` under backpressure
//! (docs/ARCHITECTURE.md, "The write path" and "Invariants"). The deterministic tests of the same
//! pipeline are in `pipeline_cases/`; the machinery both use (and the fuzz targets in
//! `fuzz/`) is the `tls-flush-testkit` crate (`testkit/`).
//!
//! A fault-injecting transport ([`FaultyTransport`](tls_flush_testkit::FaultyTransport)) answers every `poll_write`, `poll_flush`
//! and `poll_shutdown` with `Pending` (waking the task itself) or with a partial write of an
//! arbitrary size, following a generated schedule, and records every byte it accepts. It can
//! also hold accepted bytes until flushed (reporting `has_buffered_output()`), and it supplies
//! the client's bytes through `poll_read` (preface, requests carrying a `priority` header,
//! PRIORITY_UPDATE frames) so that the scheduler has different urgencies to act on. A test
//! can block it: writes, flushes and shutdown are then `Pending`, and so is
//! `Transport::poll_write_ready`, which registers the waker and is woken when the test
//! unblocks the transport (or, to model a readiness that went stale, keeps saying `Ready`).
//!
//! A generator produces h2-like server output over many streams: SETTINGS first, then header
//! blocks (HEADERS + CONTINUATIONs), DATA, trailers or RST_STREAM per stream, interleaved
//! with PING, WINDOW_UPDATE, SETTINGS and SETTINGS ACK on stream 0. It is written to
//! [`FlushStream`](tls_flush::FlushStream) the way h2 writes: random-sized (vectored) writes
//! that split frames anywhere, re-offering what was not taken (a refused frame is `Pending`,
//! or a short count, and h2 offers it again), with flushes at random points, then a final
//! flush polled the way an executor polls h2's task (again whenever it asked to be woken)
//! and `poll_shutdown` until it is ready. The recorded output is then checked frame by frame.
//!
//! In HTTP/2 mode `poll_flush` returns `Ready` even while the transport is `Pending` (the
//! frames stay queued in the wrapper) and may hold a short record for one turn
//! (`FlushConfig::cork`), so a single flush promises nothing about the output. The tests
//! only rely on: a flush that returns `Ready` *without* asking to be polled again has
//! delivered every complete frame it holds; `poll_shutdown` delivers everything.
//!
//! Every `Pending` must come with a wake-up (the task woken, or a waker kept by the blocked
//! transport), or the test fails: the task would hang. Every transport call is counted; a
//! wrapper poll that makes 100 000 transport calls without the transport making progress is
//! reported as a livelock (a panic) instead of hanging.
//!
//! `scheduled` anticipates: DATA waits, the wrapper re-polling itself, for up to 5 ms while a
//! more urgent request's response has not begun. The generated scenarios read the client's
//! requests lazily, so this happens; the stuck-pipeline detection allows for it, and tests that
//! check what a single flush delivers turn it off.

use std::collections::VecDeque;
use std::task::Poll;
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use tls_flush::Policy;
use tls_flush_testkit::{
    check_counters, check_delivery, check_ordering, data, encode_all, expected_frames, finish,
    header_block, inverted_data_frames, literal, match_frames, merge_split_data, parse_frames,
    parse_frames_lenient, priority_update, request_block, response_block, settings_frame,
    write_call, write_input, Buffering, CounterBounds, Frame, Harness, Knobs, OrderChecks,
    OutputEnd, SimulatedPath, Step, Wire, WriteOp, ACK, CONTINUATION, END_HEADERS, END_STREAM,
    HEADERS, PING, PREFACE, PRIORITY_UPDATE, RST_STREAM, WINDOW_UPDATE,
};
use tokio::io::AsyncWrite;

// ---------------------------------------------------------------------------------------
// Generated scenarios
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum End {
    /// The last DATA frame (or the HEADERS, without DATA) carries END_STREAM.
    Finish,
    /// Trailers (HEADERS with END_STREAM, split into `parts` frames) after the DATA.
    Trailers { parts: usize },
    /// RST_STREAM instead of finishing.
    Reset,
}

#[derive(Clone, Debug)]
struct StreamSpec {
    request_priority: Option<&'static str>,
    response_priority: Option<&'static str>,
    /// Length of an `x-pad` response header, to make header blocks of various sizes.
    pad: usize,
    header_parts: usize,
    data: Vec<usize>,
    end: End,
}

#[derive(Clone, Debug)]
enum Control {
    Ping { ack: bool, seed: u8 },
    WindowUpdate(u32),
    SettingsAck,
    Settings(Vec<(u16, u32)>),
}

#[derive(Clone, Debug)]
struct Update {
    stream_index: usize,
    value: &'static str,
    /// Sent before the request of the stream with this index (so possibly early).
    before_request: usize,
    malformed: bool,
}

#[derive(Clone, Debug)]
struct Scenario {
    first_settings: Vec<(u16, u32)>,
    streams: Vec<StreamSpec>,
    controls: Vec<Control>,
    picks: Vec<u16>,
    updates: Vec<Update>,
    read_first: usize,
    plan: Vec<WriteOp>,
    schedule: Vec<Step>,
    buffering: Buffering,
}

fn priority_value() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "u=0", "u=1", "u=2, i", "u=3", "u=5, i", "u=6, i", "u=7", "i",
    ])
}

fn data_len() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0..64usize, 3 => 0..4096usize, 2 => 0..20000usize]
}

fn stream_spec() -> impl Strategy<Value = StreamSpec> {
    (
        prop::option::weighted(0.8, priority_value()),
        prop::option::weighted(0.3, priority_value()),
        prop_oneof![6 => Just(0usize), 3 => 0..200usize, 1 => 0..3000usize],
        1..=4usize,
        vec(data_len(), 0..5),
        prop_oneof![
            6 => Just(End::Finish),
            2 => (1..=2usize).prop_map(|parts| End::Trailers { parts }),
            2 => Just(End::Reset),
        ],
    )
        .prop_map(
            |(request_priority, response_priority, pad, header_parts, data, end)| StreamSpec {
                request_priority,
                response_priority,
                pad,
                header_parts,
                data,
                end,
            },
        )
}

fn settings_list() -> impl Strategy<Value = Vec<(u16, u32)>> {
    vec((1..=6u16, any::<u32>()), 0..4)
}

fn control() -> impl Strategy<Value = Control> {
    prop_oneof![
        3 => (any::<bool>(), any::<u8>()).prop_map(|(ack, seed)| Control::Ping { ack, seed }),
        3 => (1..=0x7fff_ffffu32).prop_map(Control::WindowUpdate),
        2 => Just(Control::SettingsAck),
        1 => settings_list().prop_map(Control::Settings),
    ]
}

fn update() -> impl Strategy<Value = Update> {
    (
        0..12usize,
        priority_value(),
        0..=12usize,
        prop::bool::weighted(0.15),
    )
        .prop_map(|(stream_index, value, before_request, malformed)| Update {
            stream_index,
            value,
            before_request,
            malformed,
        })
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(1usize),
        2 => 1..16usize,
        3 => 1..2048usize,
        3 => 1..40000usize,
    ]
}

fn write_op() -> impl Strategy<Value = WriteOp> {
    (
        size(),
        prop_oneof![3 => Just(1usize), 2 => 2..=4usize],
        any::<u64>(),
        prop::bool::weighted(0.2),
        prop_oneof![8 => Just(0usize), 2 => 1..64usize],
    )
        .prop_map(
            |(size, slices, split_seed, flush_after, read_before)| WriteOp {
                size,
                slices,
                split_seed,
                flush_after,
                read_before,
            },
        )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Pending),
        2 => Just(Step::Accept(1)),
        2 => (1..32usize).prop_map(Step::Accept),
        2 => (1..2048usize).prop_map(Step::Accept),
        3 => (1..65536usize).prop_map(Step::Accept),
    ]
}

/// Up to 40 steps, cycled: at most 40 consecutive `Pending`s.
fn schedule() -> impl Strategy<Value = Vec<Step>> {
    vec(step(), 1..40).prop_map(|mut s| {
        if !s.iter().any(|st| matches!(st, Step::Accept(_))) {
            s.push(Step::Accept(1));
        }
        s
    })
}

prop_compose! {
    // Each field next to its strategy.
    fn scenario()(
        first_settings in prop_oneof![
            9 => settings_list(),
            1 => settings_list().prop_map(|mut v| {
                v.push((9, 1));
                v
            }),
        ],
        streams in vec(stream_spec(), 1..=12),
        controls in vec(control(), 0..8),
        picks in vec(any::<u16>(), 1..32),
        updates in vec(update(), 0..6),
        read_first in 0..96usize,
        plan in vec(write_op(), 1..24),
        schedule in schedule(),
        buffering in prop_oneof![
            Just(Buffering::Off),
            Just(Buffering::Reported),
            Just(Buffering::Silent)
        ],
    ) -> Scenario {
        Scenario {
            first_settings,
            streams,
            controls,
            picks,
            updates,
            read_first,
            plan,
            schedule,
            buffering,
        }
    }
}

/// A stream's units in order: its header block, DATA frames, then trailers or RST_STREAM.
fn stream_units(id: u32, spec: &StreamSpec) -> Vec<Vec<Frame>> {
    let headers_only = spec.data.is_empty() && matches!(spec.end, End::Finish);
    let block = response_block(spec.response_priority, spec.pad);
    let mut units = vec![header_block(id, &block, spec.header_parts, headers_only)];
    for (k, &len) in spec.data.iter().enumerate() {
        let end_stream = k + 1 == spec.data.len() && matches!(spec.end, End::Finish);
        units.push(vec![data(id, k, len, end_stream)]);
    }
    match spec.end {
        End::Finish => {}
        End::Trailers { parts } => {
            let mut trailers = Vec::new();
            literal(&mut trailers, false, b"grpc-status", b"0");
            units.push(header_block(id, &trailers, parts, true));
        }
        End::Reset => units.push(vec![Frame::new(RST_STREAM, 0, id, 8u32.to_be_bytes())]),
    }
    units
}

fn control_frame(c: &Control) -> Frame {
    match c {
        Control::Ping { ack, seed } => {
            let payload: Vec<u8> = (0..8u8).map(|i| seed.wrapping_add(i)).collect();
            Frame::new(PING, if *ack { ACK } else { 0 }, 0, payload)
        }
        Control::WindowUpdate(n) => Frame::new(WINDOW_UPDATE, 0, 0, n.to_be_bytes()),
        Control::SettingsAck => settings_frame(ACK, &[]),
        Control::Settings(list) => settings_frame(0, list),
    }
}

/// The server's frames in the order h2 writes them: SETTINGS, then the streams' units and
/// the control frames interleaved (each header block staying whole, as h2 writes it).
fn server_frames(scn: &Scenario) -> Vec<Frame> {
    let mut sources: Vec<VecDeque<Vec<Frame>>> = scn
        .streams
        .iter()
        .enumerate()
        .map(|(i, spec)| stream_units(stream_id(i), spec).into())
        .collect();
    sources.push(
        scn.controls
            .iter()
            .map(|c| vec![control_frame(c)])
            .collect(),
    );
    let mut frames = vec![settings_frame(0, &scn.first_settings)];
    for turn in 0.. {
        let active: Vec<usize> = (0..sources.len())
            .filter(|&i| !sources[i].is_empty())
            .collect();
        if active.is_empty() {
            break;
        }
        let pick = usize::from(scn.picks[turn % scn.picks.len()]) % active.len();
        frames.extend(sources[active[pick]].pop_front().expect("active source"));
    }
    frames
}

/// The client's bytes: preface, SETTINGS, one request per stream in id order (carrying its
/// `priority`), and PRIORITY_UPDATE frames among them (some early, some malformed).
fn client_bytes(scn: &Scenario) -> Vec<u8> {
    let n = scn.streams.len();
    let mut frames = vec![settings_frame(0, &[])];
    for i in 0..=n {
        for u in scn.updates.iter().filter(|u| u.before_request.min(n) == i) {
            frames.push(if u.malformed {
                Frame::new(PRIORITY_UPDATE, 0, 0, vec![0, 0])
            } else {
                priority_update(stream_id(u.stream_index % n), u.value)
            });
        }
        if let Some(spec) = scn.streams.get(i) {
            frames.push(Frame::new(
                HEADERS,
                END_HEADERS | END_STREAM,
                stream_id(i),
                request_block(spec.request_priority.map(str::as_bytes)),
            ));
        }
    }
    let mut bytes = PREFACE.to_vec();
    bytes.extend(encode_all(&frames));
    bytes
}

fn stream_id(index: usize) -> u32 {
    2 * index as u32 + 1
}

/// How a generated scenario is run.
#[derive(Clone, Copy, Debug)]
struct Setup {
    policy: Policy,
    /// `(soft, hard)`; `None` for the defaults.
    limits: Option<(usize, usize)>,
    announce: bool,
    /// `tls_max_fragment_size`.
    fragment: Option<usize>,
    /// `FlushConfig::cork` (on by default).
    cork: bool,
    /// `FlushConfig::pack_records` (on in every preset).
    pack: bool,
    /// Keep the preset's anticipation (5 ms for `scheduled`); `false`: `anticipate(None)`.
    anticipate: bool,
    /// A congestion window the transport reports, for the write budget.
    path: Option<SimulatedPath>,
}

impl Setup {
    /// A policy's preset with the announcement off, default limits, records and cork.
    fn new(policy: Policy) -> Self {
        Setup {
            policy,
            limits: None,
            announce: false,
            fragment: None,
            cork: true,
            pack: true,
            anticipate: true,
            path: None,
        }
    }

    /// The same configuration as the testkit's [`Knobs`].
    fn knobs(&self) -> Knobs {
        Knobs {
            limits: self.limits,
            announce: self.announce,
            fragment: self.fragment,
            cork: self.cork,
            pack: self.pack,
            anticipate: (!self.anticipate).then_some(None),
            ..Knobs::new(self.policy)
        }
    }
}

/// Writes the scenario's server output the way h2 does and checks every property.
fn run_scenario(scn: &Scenario, setup: Setup) -> Result<(), TestCaseError> {
    run_scenario_inner(scn, setup).map_err(|e| fail(setup, e))
}

/// A failed case, naming its setup.
fn fail(setup: Setup, e: String) -> TestCaseError {
    TestCaseError::fail(format!("[{setup:?}] {e}"))
}

/// [`run_scenario`] under every policy, each preset adjusted by `adjust`.
fn run_every_policy(scn: &Scenario, adjust: impl Fn(Setup) -> Setup) -> Result<(), TestCaseError> {
    for policy in Policy::ALL {
        run_scenario(scn, adjust(Setup::new(policy)))?;
    }
    Ok(())
}

fn run_scenario_inner(scn: &Scenario, setup: Setup) -> Result<(), String> {
    let input_frames = server_frames(scn);
    let input = encode_all(&input_frames);
    let client = client_bytes(scn);
    let knobs = setup.knobs();
    let mut wire = Wire::new(scn.schedule.clone(), scn.buffering, client.clone());
    wire.path = setup.path;
    let mut h = Harness::new(knobs.config(), wire);

    // h2's side: random-sized (vectored) writes re-offering the rest, random flushes,
    // client bytes read in between.
    let written = write_input(&mut h, &scn.plan, scn.read_first, &input_frames, &input)?;
    if written.failed {
        return Err(format!("a write or flush failed at byte {}", written.taken));
    }
    let expected = expected_frames(&input_frames, setup.announce);

    // h2's last flush, polled as long as it asks to be, then shutdown: (6) after
    // poll_shutdown returned Ready(Ok), every byte was delivered.
    let finished = finish(&mut h)?.ok_or("the transport failed")?;
    if written.read != client {
        return Err("the read side changed the client's bytes".into());
    }
    if !h.is_http2() {
        return Err("the wrapper did not run the HTTP/2 pipeline".into());
    }

    // (1) Whole frames; (2) per-stream order, identical bytes; (6a) once h2's last flush
    // returned Ready without asking to be polled again, everything h2 wrote was on the
    // socket: nothing held, nothing queued.
    let s = h.stats();
    let (out, perm) = check_delivery(&finished, &expected, 0, &s)?;
    // (3) header blocks, (4) SETTINGS barriers, control frames ahead of later DATA, (5)
    // in-order policies.
    let order = OrderChecks {
        header_blocks: true,
        end: OutputEnd::AfterWholeBlocks,
        in_order: !knobs.reorders(),
        announced: setup.announce.then_some(&input_frames[..]),
    };
    check_ordering(&out, &perm, order)?;

    // (7) counters; a record ends early only after a small DATA frame (up to 4 KiB) or a
    // HEADERS frame, and DATA output ahead of older DATA is counted.
    let bounds = CounterBounds {
        cut_data_max: 4096,
        ..knobs.counter_bounds()
    };
    check_counters(&bounds, &expected, &out, &perm, &s)?;
    let inverted = inverted_data_frames(&out, &perm);
    if inverted > 0 && s.data_frames_reordered == 0 {
        return Err(format!(
            "{inverted} DATA frames were output ahead of older DATA, but \
             stats.data_frames_reordered = 0"
        ));
    }
    Ok(())
}

/// A path between a first flight (10 segments, no rate yet) and a wide, measured one, on
/// a 20 ms or a sub-millisecond RTT, in slow start or congestion avoidance, acknowledging
/// from a byte to a window per look.
fn simulated_path() -> impl Strategy<Value = SimulatedPath> {
    (
        prop::sample::select(vec![1u32, 10, 40, 400]),
        prop::sample::select(vec![536u32, 1448, 65483]),
        prop::sample::select(vec![0u64, 20_000, 500]),
        prop::sample::select(vec![0u64, 2_500_000]),
        prop::sample::select(vec![1usize, 100, 1448, 16384]),
        prop::sample::select(vec![0u32, 2, 20]),
        prop::sample::select(vec![0u32, 1]),
    )
        .prop_map(
            |(cwnd, mss, rtt_us, delivery_rate, acked_per_read, ssthresh, retransmits)| {
                SimulatedPath {
                    cwnd,
                    mss,
                    min_rtt: Duration::from_micros(rtt_us),
                    delivery_rate,
                    ssthresh,
                    acked_per_read,
                    retransmits,
                }
            },
        )
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

/// `cases` per property, or `PROPTEST_CASES` when set (for a deeper run).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // Keep failing inputs out of the source tree; a failure prints the minimal input.
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    }
}

/// Frames `..n` of `frames` that form complete units within the first `pos` bytes: whole
/// frames, less a header block whose END_HEADERS is not among them.
fn complete_frames(frames: &[Frame], pos: usize) -> usize {
    let mut end = 0;
    let mut whole = 0;
    let mut open_block = None;
    for (i, f) in frames.iter().enumerate() {
        end += f.wire_len();
        if end > pos {
            break;
        }
        whole = i + 1;
        if f.starts_header_block() || f.kind == CONTINUATION {
            open_block = if f.end_headers() {
                None
            } else {
                open_block.or(Some(i))
            };
        }
    }
    open_block.unwrap_or(whole)
}

/// Frames of `expected` not in `out` (as multisets).
fn missing_frames<'a>(expected: &'a [Frame], out: &[Frame]) -> Vec<&'a Frame> {
    let mut out: Vec<&Frame> = out.iter().collect();
    let mut missing = Vec::new();
    for f in expected {
        match out.iter().position(|o| *o == f) {
            Some(i) => {
                out.swap_remove(i);
            }
            None => missing.push(f),
        }
    }
    missing
}

/// Writes the scenario as h2 does into an always-writable transport and checks, after each
/// of h2's flushes, what the flush delivered: every frame the wrapper took completely is on
/// the socket, except, with `cork`, one short record of bulk DATA (DATA without END_STREAM)
/// held for one turn, for which the flush woke the task; the flush of that next turn sends
/// it; and the connection's first record of control frames and header blocks, held for at
/// most [`FIRST_FLIGHT_WAIT`]. Without `cork` nothing is ever held.
fn run_flush_latency(scn: &Scenario, setup: Setup) -> Result<(), TestCaseError> {
    run_flush_latency_inner(scn, setup).map_err(|e| fail(setup, e))
}

fn run_flush_latency_inner(scn: &Scenario, setup: Setup) -> Result<(), String> {
    assert!(
        !setup.announce,
        "the output is compared with the input bytes"
    );
    let input_frames = server_frames(scn);
    let input = encode_all(&input_frames);
    let knobs = setup.knobs();
    let mut h = Harness::new(knobs.config(), Wire::open(scn.buffering, client_bytes(scn)));
    // Every request is read first, so that a response's pinned urgency applies from its
    // HEADERS on (the wrapper tracks streams whose request it has seen).
    h.read_all_client()?;
    let mut pos = 0;
    let mut calls = 0usize;
    let mut held_turns = 0;
    let urgent = pinned_urgent(scn);
    while pos < input.len() {
        let (op, _, written) = write_call(&mut h, &scn.plan, calls, &input_frames, &input, pos)?;
        calls += 1;
        pos += written.map_err(|e| format!("write failed: {e}"))?;
        if !op.flush_after && pos < input.len() {
            continue;
        }
        let complete = &input_frames[..complete_frames(&input_frames, pos)];
        held_turns += flush_and_check(&mut h, setup, complete, pos, &urgent)?;
    }
    h.shutdown()?;
    let out = merge_split_data(&input_frames, parse_frames(&h.output())?);
    match_frames(&input_frames, &out)?;
    if !setup.cork && held_turns > 0 {
        return Err("a record was held with cork off".into());
    }
    Ok(())
}

/// The streams whose response pins `u=0`: every unit of theirs is urgent from their
/// HEADERS on, whatever the client signalled.
fn pinned_urgent(scn: &Scenario) -> Vec<u32> {
    (scn.streams.iter().enumerate())
        .filter(|(_, spec)| spec.response_priority == Some("u=0"))
        .map(|(i, _)| stream_id(i))
        .collect()
}

/// One of h2's flushes after `pos` bytes were taken (`complete`: the frames the wrapper
/// took completely) and, when it held a record back, the flush of the next turn; checks
/// what each delivered. Returns how many turns held a record (0 or 1). `urgent`: streams
/// whose frames must never wait.
fn flush_and_check(
    h: &mut Harness,
    setup: Setup,
    complete: &[Frame],
    pos: usize,
    urgent: &[u32],
) -> Result<usize, String> {
    let want: usize = complete.iter().map(Frame::wire_len).sum();
    for turn in 0..2 {
        match h.poll_once("poll_flush", |s, cx| s.poll_flush(cx))? {
            Poll::Ready(Ok(())) => {}
            other => return Err(format!("flush returned {other:?}")),
        }
        let w = h.wire.borrow();
        let (accepted, flushed) = (w.accepted.len(), w.flushed);
        if flushed != accepted {
            return Err(format!(
                "a flush returned Ready with {} of {accepted} written bytes flushed",
                flushed
            ));
        }
        if accepted == want {
            return Ok(turn);
        }
        let what = format!(
            "after {pos} bytes taken and {} flush(es), {accepted} of the {want} bytes of \
             complete frames are on the socket",
            turn + 1
        );
        if turn == 1 || !setup.cork {
            return Err(what);
        }
        if !h.last_poll_woke {
            return Err(format!(
                "{what}, and the flush held them without waking the task"
            ));
        }
        let record = setup.knobs().record_payload();
        if want - accepted >= record {
            return Err(format!(
                "{what}: more than a short record ({record} bytes) held"
            ));
        }
        // Whole frames output; a frame split across records counts as held.
        let (out, _) = parse_frames_lenient(&w.accepted);
        let held = missing_frames(complete, &out);
        if w.accepted.is_empty() && held.iter().all(|f| !f.is_data() && !f.ends_stream()) {
            // The first flight: control frames and header blocks wait a moment for DATA to
            // share their record, then go on their own.
            drop(w);
            std::thread::sleep(FIRST_FLIGHT_WAIT);
            return flush_and_check_once(h, complete).map(|()| 1);
        }
        if let Some(f) = held.iter().find(|f| urgent.contains(&f.stream())) {
            return Err(format!(
                "{what}: the held record has {f:?}, which must never wait (held: {held:?})"
            ));
        }
    }
    unreachable!("the second turn delivers everything or fails")
}

/// How long the connection's first record may wait for DATA (a little more than the
/// wrapper's own bound).
const FIRST_FLIGHT_WAIT: std::time::Duration = std::time::Duration::from_millis(3);

/// One flush that must deliver every complete frame.
fn flush_and_check_once(h: &mut Harness, complete: &[Frame]) -> Result<(), String> {
    let want: usize = complete.iter().map(Frame::wire_len).sum();
    match h.poll_once("poll_flush", |s, cx| s.poll_flush(cx))? {
        Poll::Ready(Ok(())) => {}
        other => return Err(format!("flush returned {other:?}")),
    }
    let accepted = h.wire.borrow().accepted.len();
    if accepted != want {
        return Err(format!(
            "after the first flight's wait, {accepted} of the {want} bytes of complete \
             frames are on the socket"
        ));
    }
    Ok(())
}

fn limits() -> impl Strategy<Value = Option<(usize, usize)>> {
    prop::sample::select(vec![None, Some((8 * 1024, 32 * 1024)), Some((1024, 4096))])
}

proptest! {
    #![proptest_config(config(128))]

    /// Properties (1)-(7) for every policy with the default limits (256 KiB / 1 MiB),
    /// announcement off so the output must equal the input frame for frame; default cork.
    #[test]
    fn every_policy_delivers_exact_streams_with_default_limits(scn in scenario()) {
        run_every_policy(&scn, |setup| setup)?;
    }

    /// Properties (1)-(7) for every policy while the transport reports a congestion window
    /// (small or wide, measured rate or not, paced or sub-millisecond RTT): the write budget
    /// sizes and delays records but every byte still arrives, once, in order.
    #[test]
    fn a_reported_congestion_window_keeps_every_stream_exact(
        scn in scenario(),
        path in simulated_path(),
    ) {
        run_every_policy(&scn, |setup| Setup { path: Some(path), ..setup })?;
    }

    /// Properties (1)-(7) for every policy with small limits (8 KiB soft / 32 KiB hard), so
    /// that writes are refused past the soft limit and only frames that go ahead get in.
    #[test]
    fn every_policy_delivers_exact_streams_with_small_limits(scn in scenario()) {
        run_every_policy(&scn, |setup| Setup { limits: Some((8 * 1024, 32 * 1024)), ..setup })?;
    }

    /// The same properties with SETTINGS_NO_RFC7540_PRIORITIES announced (the default):
    /// the first SETTINGS grows by exactly those 6 bytes and nothing else changes. Limits
    /// and record sizes vary, down to a 1 KiB soft limit and 507-byte records.
    #[test]
    fn announcing_no_rfc7540_priorities_changes_only_the_first_settings(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
        fragment in prop::sample::select(vec![None, Some(4096), Some(512)]),
    ) {
        run_scenario(&scn, Setup { limits, announce: true, fragment, ..Setup::new(policy) })?;
    }

    /// Under tight limits (down to 1 KiB soft / 4 KiB hard) writes are refused all the time,
    /// often with the queue draining in the same poll, and zero-length frames (empty
    /// END_STREAM DATA, SETTINGS ACK) are refused too. Driven as h2 drives the wrapper (no
    /// retry of failed writes, no extra empty write), every refused frame is taken later and
    /// everything is delivered: properties (1)-(7) for every policy.
    #[test]
    fn refused_frames_are_taken_later_under_tight_limits(
        scn in scenario(),
        limits in prop::sample::select(vec![(8 * 1024, 32 * 1024), (1024, 4096)]),
    ) {
        run_every_policy(&scn, |setup| Setup { limits: Some(limits), ..setup })?;
    }

    /// Properties (1)-(7) with `FlushConfig::cork(false)`: a flush never holds a short
    /// record. Records packed or (as stock hyper writes) one frame per write.
    #[test]
    fn cork_off_delivers_exact_streams(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
        pack in any::<bool>(),
    ) {
        run_scenario(&scn, Setup { limits, cork: false, pack, ..Setup::new(policy) })?;
    }

    /// With `FlushConfig::cork(false)` and an always-writable transport, each flush h2 makes
    /// puts every frame the wrapper took completely on the socket. (Anticipation, which
    /// holds DATA for a few ms on its own terms, is off.) With the default cork, a flush
    /// holds back at most one short record, never one with a frame of a stream pinned to
    /// `u=0`, wakes the task, and the next flush sends it.
    #[test]
    fn each_flush_delivers_every_complete_frame_but_at_most_one_corked_record(
        scn in scenario(),
        policy in policy(),
        limits in limits(),
        cork in any::<bool>(),
    ) {
        run_flush_latency(&scn, Setup { limits, cork, anticipate: false, ..Setup::new(policy) })?;
    }
}
