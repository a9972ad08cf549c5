//! The first-request workload: what a client's first flight costs on a new connection, and
//! how many such connections a client makes per second.
//!
//! One run opens a TCP connection through an emulated link (the relay of [`crate::link`] or
//! the kernel-faithful [`crate::tun`] link), does the TLS handshake, speaks HTTP/2 with
//! hyper's client (`hyper::client::conn::http2`), sends one small request (`GET /critical`,
//! 4096 bytes of the fixture's pattern, checked byte for byte) and closes. It measures:
//!
//! - `first_response_ms`: from the start of the TCP connect to the arrival of the first
//!   response byte (the client read that delivered the response's HEADERS: the last read
//!   before hyper handed over the response head);
//! - `first_flight_records`: the TLS records carrying application data (the HTTP/2
//!   preface, SETTINGS, WINDOW_UPDATE, the request's HEADERS, in as many records as the
//!   client wrote) that the client wrote before that arrival, and before it read anything
//!   after the first of them (what it writes then, such as the ACK of the server's
//!   SETTINGS when those arrive before the response, answers the server). The client's TCP stream is
//!   wrapped in [`RecordCounter`], which parses the TLS record headers the client writes;
//!   the handshake's own records (ClientHello, ChangeCipherSpec, and in TLS 1.3 the
//!   encrypted Finished, plus EndOfEarlyData when early data was accepted) are not counted.
//!   In TLS 1.3 every encrypted record says `application_data` outside, so the handshake's
//!   encrypted records are told apart by position: records written before the client read
//!   anything from the server are early data (0-RTT); the first one (two when early data
//!   was accepted) written after it are the handshake's;
//! - `first_flight_segments`, on the tun link only: the client-to-server TCP segments with
//!   payload that carried any byte of those records, from the emulator's packet log (by TCP
//!   sequence number, retransmissions counted once);
//! - `resumed`: whether the handshake actually resumed a session (rustls
//!   [`HandshakeKind::Resumed`](rustls::HandshakeKind::Resumed)).
//!
//! Cases ([`ClientCase`]): `stock-client`, hyper's HTTP/2 client over tokio-rustls as
//! people use it (no `TCP_NODELAY`, like hyper-util's `HttpConnector` by default), and the
//! coalescing client of `tls-flush` (`coalesced`, and `coalesced-0rtt` with TLS 1.3 early
//! data), which [`client_stream`] builds: the one place where a client case becomes a TLS
//! stream. Each runs on a fresh connection or a resumed one ([`Connection`]): for `resumed`,
//! a priming connection to the same server first fills the client's session store (rustls'
//! default in-memory [`rustls::client::Resumption`]), and the measured connection shares its
//! `ClientConfig`.
//!
//! Servers ([`FirstRequestServer`]): `ours`, the demo app in-process behind `tls-flush`
//! (`tls_flush::serve_connection`) with TLS 1.3 resumption and early data accepted (up to
//! [`OURS_MAX_EARLY_DATA`]; `serve_connection` reads it through `tls_flush::EarlyDataStream`,
//! since tokio-rustls' server stream alone never reads rustls' early-data buffer);
//! `nginx-0rtt` (tickets and `ssl_early_data on`) and `nginx-no-early` (tickets,
//! `ssl_early_data off`: early data is rejected and must be sent again).
//!
//! [`connection_rate`] is the other half: one connection after the other (TCP, TLS,
//! HTTP/2, one small request, close), sequentially, for a number of seconds, counting
//! completed connections per second, as HAProxy measures connection rates.

//! # Layout
//!
//! - `cases`: [`ClientCase`], [`Connection`], [`FirstRequestServer`] and their names;
//! - `client`: one measured connection ([`one_connection`]), the client cases' TLS
//!   ([`client_config`], [`client_stream`]) and what TLS said ([`TlsInfo`]);
//! - `counter`: [`RecordCounter`], the log of the records the client writes;
//! - `flight`: counting the first flight in that log ([`first_flight`]) and its TCP
//!   segments in the tun link's packet log ([`segments_carrying`]);
//! - `servers`: `ours` ([`start_ours`]) and the peers, started for one run;
//! - `runner`: the shape every run has (server, link, client thread, teardown), behind
//!   [`run_relay`], [`run_tun`], [`connection_rate`] and [`connection_rate_tun`];
//! - `results`: what the runs report ([`FirstRequestResult`], [`RateResult`]).

mod cases;
mod client;
mod counter;
mod flight;
mod results;
mod runner;
mod servers;

use std::time::Duration;

use crate::workload::{CRITICAL_LEN, CRITICAL_PATH};

pub use cases::{ClientCase, Connection, FirstRequestServer};
pub use client::{
    client_config, client_stream, one_connection, one_connection_to, ClientTls, ConnectionOutcome,
    TlsInfo,
};
pub use counter::{RecordCounter, WireLog, WrittenRecord};
pub use flight::{first_flight, segments_carrying, FirstFlight};
pub use results::{FirstRequestResult, RateResult};
pub use runner::{connection_rate, connection_rate_tun, run_relay, run_tun};
pub use servers::{start_ours, OURS_MAX_EARLY_DATA};

/// The request of every run: the fixture's critical resource.
pub const REQUEST_PATH: &str = CRITICAL_PATH;
/// Its body length.
pub const RESPONSE_LEN: u64 = CRITICAL_LEN;
/// A run (or one connection of a rate run) fails after this long.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(20);
