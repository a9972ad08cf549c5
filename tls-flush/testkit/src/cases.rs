//! Building blocks of the deterministic write-pipeline cases (`tests/pipeline_cases/`): the
//! configurations they start from, harnesses brought to a known state, and the reading of
//! what was delivered. The property tests and the fuzz targets build their states from
//! generated input instead and do not use these.
//!
//! What a case may rely on:
//! - [`comparable_preset`] turns the announcement of `SETTINGS_NO_RFC7540_PRIORITIES` off, so
//!   the output holds exactly h2's frames and [`delivered`] can pair each with its input;
//! - [`started`] and [`blocked_scheduled`] read all of the client's bytes before h2's first
//!   write: every request's priority is known when the first frame is scheduled;
//! - [`absorb_frame`] (like [`Harness::offer`]) polls once and never retries, so a refusal
//!   (`Pending`) is something the case observes, not something the driver waits out;
//! - the helpers that return no `Result` panic on a violated expectation: they serve
//!   `#[test]` functions only.

use std::io;
use std::task::Poll;

use tls_flush::{FlushConfig, Policy};

use crate::checks::{match_frames, merge_split_data};
use crate::driver::Harness;
use crate::frame::{parse_frames, Frame};
use crate::transport::{Buffering, Wire};

/// `policy`'s preset with the announcement off, so that the output can be compared with
/// the input frame for frame.
pub fn comparable_preset(policy: Policy) -> FlushConfig {
    FlushConfig::for_policy(policy).announce_no_rfc7540_priorities(false)
}

/// A harness that has read the client's bytes (its requests, with their priorities).
///
/// Panics if the wrapper does not hand the client's bytes through.
pub fn started(config: FlushConfig, wire: Wire) -> Harness {
    let mut h = Harness::new(config, wire);
    h.read_all_client().unwrap();
    h
}

/// `scheduled` with the given soft and hard limits (and the announcement off), after
/// reading `client`, its transport blocked before h2's first write.
pub fn blocked_scheduled(client: Vec<u8>, soft: usize, hard: usize) -> Harness {
    let h = started(
        comparable_preset(Policy::Scheduled)
            .soft_limit(soft)
            .hard_limit(hard),
        Wire::open(Buffering::Off, client),
    );
    h.set_blocked(true);
    h
}

/// h2's last flush settled and the stream shut down: the output frames, each matched to
/// its index in `input` (every frame delivered exactly once, per stream in order).
///
/// Panics if the flush or the shutdown fails or the delivery does not match `input`.
pub fn delivered(h: &mut Harness, input: &[Frame]) -> (Vec<Frame>, Vec<usize>) {
    h.settle().unwrap();
    h.shutdown().unwrap();
    let out = merge_split_data(input, parse_frames(&h.output()).unwrap());
    let perm = match_frames(input, &out).unwrap();
    (out, perm)
}

/// Whether a single `poll_write` of `len` bytes took all of them.
pub fn took_all(poll: &Poll<io::Result<usize>>, len: usize) -> bool {
    matches!(poll, Poll::Ready(Ok(n)) if *n == len)
}

/// Offers one frame in a single `poll_write`, expecting it to be absorbed at once.
pub fn absorb_frame(h: &mut Harness, f: &Frame) -> Result<(), String> {
    let bytes = f.encode();
    match h.offer(&bytes)? {
        poll if took_all(&poll, bytes.len()) => Ok(()),
        other => Err(format!("{f:?} was not absorbed at once: {other:?}")),
    }
}

/// The indices of the frames of `out` for which `pred` holds, in output order.
pub fn positions(out: &[Frame], pred: impl Fn(&Frame) -> bool) -> Vec<usize> {
    (0..out.len()).filter(|&p| pred(&out[p])).collect()
}
