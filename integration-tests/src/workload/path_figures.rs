//! What a run's connection got from the path: the fixture's goodput, its share of the
//! bottleneck against cross traffic, the link's drops and the server's retransmissions
//! ([`PathFigures`], flattened into [`super::RunResult`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Workload, BACKGROUND_LEN, CRITICAL_LEN};

/// What the path gave the run's connection. `None` (JSON `null`) where not known:
/// `bottleneck_share` and `cross_bytes` only with cross traffic (`--cross`, tun link),
/// `link_drops` only behind the tun link, `server_retransmits` only for our in-process
/// servers (not for a peer or an external server). Missing keys read as their default, so
/// results written before these figures existed still parse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PathFigures {
    /// The fixture's body bytes ([`fixture_body_bytes`]: 2 MiB + 4 KiB, or 4 KiB `alone`)
    /// over `fixture_transfer_ms`, in Mbit/s (10^6 bits per second). Body bytes only: TLS,
    /// HTTP/2 and TCP/IP headers are not counted, so it stays below the link's rate.
    pub fixture_goodput_mbit: f64,
    /// The goodput's interval: from the first request leaving the client (a background
    /// request, or the critical one `alone`) to the last byte of all bodies arriving
    /// (`fixture_complete_ms` minus the time from connection start to the first request).
    pub fixture_transfer_ms: f64,
    /// Bytes the cross traffic's sink received during `fixture_transfer_ms`.
    pub cross_bytes: Option<u64>,
    /// The fixture's share of what the bottleneck delivered during `fixture_transfer_ms`:
    /// body bytes / (body bytes + `cross_bytes`) (both application payload).
    pub bottleneck_share: Option<f64>,
    /// Packets the tun link's server-to-client direction dropped while the fixture ran
    /// (from just before its connect to just after its last byte; the cross traffic's head
    /// start is not counted), of every flow, the fixture's and the cross traffic's: tail
    /// drops plus random losses (`DirectionStats::dropped` + `lost`).
    pub link_drops: Option<u64>,
    /// Segments our server's TCP retransmitted on the run's connection (Linux
    /// `tcpi_total_retrans` when the connection ended).
    pub server_retransmits: Option<u64>,
    /// Times the write budget made bulk data wait on a timer (tls-flush cases: the
    /// wrapper's `budget_waits`, summed over the server's connections).
    pub budget_waits: Option<u64>,
    /// Times the write budget lifted its in-flight cap because another flow filled the
    /// bottleneck queue (tls-flush cases: the wrapper's `budget_cap_lifts`).
    pub budget_cap_lifts: Option<u64>,
}

impl PathFigures {
    /// The goodput of `workload`'s fixture, whose bodies took `transfer` from the first
    /// request leaving the client to their last byte; the other figures unknown.
    pub fn of_fixture(workload: Workload, transfer: Duration) -> PathFigures {
        PathFigures {
            fixture_goodput_mbit: goodput_mbit(fixture_body_bytes(workload), transfer),
            fixture_transfer_ms: transfer.as_secs_f64() * 1e3,
            ..PathFigures::default()
        }
    }

    /// Sets what our in-process server knows: its retransmits, and the write budget's
    /// decisions over its wrapped connections (none for a stock server).
    pub fn from_server(&mut self, server: &crate::server::ServerStats) {
        self.server_retransmits = server.server_retransmits();
        let connections: Vec<_> = server.connections().iter().map(|c| c.snapshot()).collect();
        if !connections.is_empty() {
            self.budget_waits = Some(connections.iter().map(|c| c.budget_waits).sum());
            self.budget_cap_lifts = Some(connections.iter().map(|c| c.budget_cap_lifts).sum());
        }
    }

    /// Sets `cross_bytes` and the `bottleneck_share` they leave the fixture of `workload`.
    pub fn with_cross(&mut self, workload: Workload, cross_bytes: u64) {
        self.cross_bytes = Some(cross_bytes);
        self.bottleneck_share = Some(bottleneck_share(fixture_body_bytes(workload), cross_bytes));
    }
}

/// The body bytes of `workload`'s fixture: two backgrounds and the critical response, or
/// the critical response alone.
pub fn fixture_body_bytes(workload: Workload) -> u64 {
    if workload.has_background() {
        2 * BACKGROUND_LEN + CRITICAL_LEN
    } else {
        CRITICAL_LEN
    }
}

/// `bytes` over `interval` in Mbit/s (10^6 bits per second); 0 for an empty interval.
pub fn goodput_mbit(bytes: u64, interval: Duration) -> f64 {
    let secs = interval.as_secs_f64();
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

/// `ours / (ours + theirs)`: 1 when neither moved a byte.
pub fn bottleneck_share(ours: u64, theirs: u64) -> f64 {
    match ours + theirs {
        0 => 1.0,
        total => ours as f64 / total as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goodput_and_share_arithmetic() {
        assert_eq!(
            fixture_body_bytes(Workload::Simultaneous),
            2 * 1048576 + 4096
        );
        assert_eq!(fixture_body_bytes(Workload::Late), 2 * 1048576 + 4096);
        assert_eq!(fixture_body_bytes(Workload::Alone), 4096);
        // 1,000,000 bytes in one second: 8 Mbit/s.
        assert_eq!(goodput_mbit(1_000_000, Duration::from_secs(1)), 8.0);
        assert_eq!(goodput_mbit(1_000_000, Duration::from_millis(500)), 16.0);
        assert_eq!(goodput_mbit(1, Duration::ZERO), 0.0);
        assert_eq!(bottleneck_share(1, 3), 0.25);
        assert_eq!(bottleneck_share(5, 0), 1.0);
        assert_eq!(bottleneck_share(0, 5), 0.0);
        assert_eq!(bottleneck_share(0, 0), 1.0);
        // The fixture in 1.1 s, against a flow that moved as much meanwhile.
        let mut path = PathFigures::of_fixture(Workload::Simultaneous, Duration::from_millis(1100));
        let body = 2_101_248u64;
        assert!((path.fixture_goodput_mbit - body as f64 * 8.0 / 1.1e6).abs() < 1e-9);
        assert!((path.fixture_transfer_ms - 1100.0).abs() < 1e-9);
        assert_eq!((path.bottleneck_share, path.cross_bytes), (None, None));
        path.with_cross(Workload::Simultaneous, body);
        assert_eq!(path.bottleneck_share, Some(0.5));
        assert_eq!(path.cross_bytes, Some(body));
    }

    #[test]
    fn missing_keys_read_as_defaults() {
        let path: PathFigures = serde_json::from_str("{}").unwrap();
        assert_eq!(path, PathFigures::default());
        let json = serde_json::to_value(PathFigures::default()).unwrap();
        assert!(json["bottleneck_share"].is_null(), "{json}");
        assert!(json["server_retransmits"].is_null(), "{json}");
    }
}
