//! What the first-request runs report: [`FirstRequestResult`] for one measured connection
//! and [`RateResult`] for a connection-rate run, both serialised as the lab's JSON.
//!
//! Invariant: every time is in milliseconds from the start of the TCP connect (never
//! negative: an instant before the connect counts as 0), and the names are those of
//! [`ClientCase::name`], [`FirstRequestServer::name`] and the link (`relay` or `tun`).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    first_flight, segments_carrying, ClientCase, Connection, ConnectionOutcome, FirstRequestServer,
};
use crate::tun::PacketEvent;

/// What one first-request run measured. Times in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstRequestResult {
    /// [`ClientCase::name`].
    pub case: String,
    /// [`FirstRequestServer::name`].
    pub server: String,
    /// `relay` or `tun`.
    pub link: String,
    /// What was asked for: a fresh or a resumed connection.
    pub connection: Connection,
    /// Which repeat (0 outside the lab).
    pub repeat: usize,
    /// Whether the handshake actually resumed a session.
    pub resumed: bool,
    /// Whether the server accepted early data.
    pub early_data_accepted: bool,
    /// Whether the client sent early data (application data before it read anything),
    /// accepted or not.
    pub early_data_sent: bool,
    /// `TLSv1_3`, `TLSv1_2`.
    pub tls_version: String,
    /// TLS records carrying application data the client wrote before the first response
    /// byte arrived.
    pub first_flight_records: usize,
    /// Client-to-server TCP segments that carried them (tun link only; `null` on the relay).
    pub first_flight_segments: Option<usize>,
    /// Every TLS record the client wrote before the first response byte arrived, the
    /// handshake's included.
    pub client_records: usize,
    /// From the start of the TCP connect to the arrival of the first response byte.
    pub first_response_ms: f64,
    /// From the start of the TCP connect to the client's TLS stream being ready for hyper.
    pub tls_ready_ms: f64,
    /// From the start of the TCP connect to the last response byte.
    pub response_complete_ms: f64,
}

/// Milliseconds from `from` to `to`; 0 when `to` is not later.
pub(super) fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1e3
}

impl FirstRequestResult {
    /// The result of the measured connection `outcome` of `case` against `server` through
    /// `link`, its first flight's segments counted in `trace` (the tun link's packet log).
    pub(super) fn new(
        case: ClientCase,
        server: FirstRequestServer,
        link: &str,
        connection: Connection,
        outcome: &ConnectionOutcome,
        trace: Option<&[PacketEvent]>,
    ) -> FirstRequestResult {
        let flight = first_flight(&outcome.wire, &outcome.tls, outcome.first_response_at);
        FirstRequestResult {
            case: case.name().to_string(),
            server: server.name().to_string(),
            link: link.to_string(),
            connection,
            repeat: 0,
            resumed: outcome.tls.resumed(),
            early_data_accepted: outcome.tls.early_data_accepted,
            early_data_sent: outcome.sent_early_data(),
            tls_version: outcome
                .tls
                .version
                .map_or_else(|| "unknown".into(), |v| format!("{v:?}")),
            first_flight_records: flight.records,
            first_flight_segments: trace
                .and_then(|t| segments_carrying(t, outcome.local_port, flight.bytes)),
            client_records: flight.client_records,
            first_response_ms: ms(outcome.connect_start, outcome.first_response_at),
            tls_ready_ms: ms(outcome.connect_start, outcome.stream_ready_at),
            response_complete_ms: ms(outcome.connect_start, outcome.complete_at),
        }
    }
}

/// What a connection-rate run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateResult {
    /// [`ClientCase::name`].
    pub case: String,
    /// [`FirstRequestServer::name`].
    pub server: String,
    /// `relay` or `tun`.
    pub link: String,
    /// Which repeat (0 outside the lab).
    pub repeat: usize,
    /// How long the loop ran, in seconds (the last connection finishes after the duration
    /// asked for).
    pub elapsed_s: f64,
    /// Connections completed (each: TCP connect, TLS handshake, HTTP/2, one request, body
    /// checked, close).
    pub connections: usize,
    /// Of which resumed a session.
    pub resumed_connections: usize,
    /// `connections / elapsed_s`.
    pub connections_per_s: f64,
    /// Median time from connect start to the first response byte, in milliseconds.
    pub median_first_response_ms: f64,
}

/// What the client of a rate run counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RateTally {
    /// Connections completed.
    pub connections: usize,
    /// Of which resumed a session.
    pub resumed: usize,
    /// How long the loop ran.
    pub elapsed: Duration,
    /// Median time from connect start to the first response byte, in milliseconds.
    pub median_first_response_ms: f64,
}

impl RateResult {
    /// The result of the rate run `tally` of `case` against `server` through `link`.
    pub(super) fn new(
        case: ClientCase,
        server: FirstRequestServer,
        link: &str,
        tally: RateTally,
    ) -> RateResult {
        let elapsed_s = tally.elapsed.as_secs_f64();
        RateResult {
            case: case.name().to_string(),
            server: server.name().to_string(),
            link: link.to_string(),
            repeat: 0,
            elapsed_s,
            connections: tally.connections,
            resumed_connections: tally.resumed,
            connections_per_s: if elapsed_s > 0.0 {
                tally.connections as f64 / elapsed_s
            } else {
                0.0
            },
            median_first_response_ms: tally.median_first_response_ms,
        }
    }
}
