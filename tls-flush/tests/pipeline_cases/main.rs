//! Deterministic tests of the HTTP/2 write pipeline of `tls-flush` under backpressure: a
//! transport blocked before h2's first write (late binding of the schedule), stale write
//! readiness, anticipation, the soft and hard limits with refused writes, header blocks
//! larger than the limit, frames larger than the limit, the urgent cut and its flush. The
//! randomized properties of the same pipeline are in `pipeline_props.rs`; both drive the
//! wrapper through the `tls-flush-testkit` crate (`testkit/`): the fault-injecting
//! transport, which the tests can block and unblock, the polling driver, which fails on a
//! `Pending` without a wake-up and on a livelock, and the output checks. The building blocks
//! these cases share (configurations, harnesses in a known state, reading what was delivered)
//! are the testkit's `cases`.
//!
//! | module | concern |
//! |---|---|
//! | [`ordering`] | what the scheduler sends first: late binding once a blocked transport opens, and h2's order kept by the in-order policies |
//! | [`records`] | where records end and how they are written: the urgent cut and its flush, the first flight, wide writes on unpaced paths |
//! | [`backpressure`] | admission at the soft limit: which writes are refused, and how a refused write is taken later |
//! | [`bounds`] | the hard limit as a memory bound: open header blocks counted, header blocks and frames larger than the limit |
//! | [`budget`] | the memory budget shared by connections: its bound with stalled connections, the floor, release on drop |
//! | [`holds`] | anticipation: DATA held for a more urgent response, its bound, and the room granted to h2 meanwhile |
//!
//! Invariants every case keeps:
//! - the announcement of `SETTINGS_NO_RFC7540_PRIORITIES` is off, so the output holds only
//!   h2's frames and a case about delivery compares it with h2's input frame for frame (each
//!   frame exactly once, per stream in order);
//! - a hang is a failure, not a timeout: the driver fails a `Pending` that comes without a
//!   wake-up, and a pipeline that keeps polling without progress;
//! - nothing is randomized; the only clock a case depends on is the anticipation bound, and
//!   where it does (`holds`) it asserts only what holds however late the test runs.
//!
//! Tests named after a fixed bug say so in their documentation (`Regression:`).

mod backpressure;
mod bounds;
mod budget;
mod holds;
mod ordering;
mod records;
