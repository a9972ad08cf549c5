//! Counting the client's first flight: which TLS records of a connection's [`WireLog`]
//! carried it ([`first_flight`]), and which TCP segments of the tun link's packet log
//! carried those ([`segments_carrying`]).
//!
//! Both are pure functions of logs, so that they are tested without a network. The
//! handshake's own records never count: in TLS 1.3 every encrypted record says
//! `application_data` outside, so they are told apart by position (see the [module
//! documentation](super)).

use std::collections::BTreeSet;
use std::time::Instant;

use rustls::ProtocolVersion;

use super::counter::{WireLog, WrittenRecord};
use super::TlsInfo;
use crate::tun::{self, PacketEvent};

/// The TLS record content type of application data (and of every TLS 1.3 encrypted
/// record).
pub(super) const APPLICATION_DATA: u8 = 23;
/// TCP SYN flag.
const SYN: u8 = 0x02;
/// The length of a TLS record header.
const RECORD_HEADER_LEN: u64 = 5;

/// The client's first flight in a connection's [`WireLog`] (see the [module
/// documentation](super) for which records count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFlight {
    /// Application-data records written before the first response byte arrived and before
    /// the client read anything after the first of them.
    pub records: usize,
    /// Every record written before it, the handshake's included.
    pub client_records: usize,
    /// Stream offsets `[start, end)` of the application-data bytes among them (`start ==
    /// end` when there were none).
    pub bytes: (u64, u64),
}

/// Whether `wire` has application data written before the client read anything from the
/// server: TLS 1.3 early data (0-RTT), accepted or not.
pub(super) fn sent_early_data(wire: &WireLog) -> bool {
    wire.records
        .iter()
        .any(|r| r.content_type == APPLICATION_DATA && written_before_first_read(wire, r))
}

/// Whether `record` was written before the client read anything (so it cannot be the
/// client's encrypted handshake, which answers the server's first flight).
fn written_before_first_read(wire: &WireLog, record: &WrittenRecord) -> bool {
    wire.first_read_at.is_none_or(|read| record.at < read)
}

/// Counts the first flight of `wire`, the first response byte having arrived at
/// `first_response_at`, with `tls` saying whether TLS 1.3 was spoken and early data
/// accepted.
pub fn first_flight(wire: &WireLog, tls: &TlsInfo, first_response_at: Instant) -> FirstFlight {
    let mut handshake_left = encrypted_handshake_records(tls);
    let before: Vec<&WrittenRecord> = wire
        .records
        .iter()
        .filter(|r| r.at < first_response_at)
        .collect();
    let mut app: Vec<&WrittenRecord> = Vec::new();
    // The flight ends at the first read after its first record: what the client writes
    // then (a SETTINGS ACK, say) answers the server, and is no longer its first flight.
    let mut ends_at = first_response_at;
    for record in &before {
        if record.content_type != APPLICATION_DATA || record.at >= ends_at {
            continue;
        }
        if !written_before_first_read(wire, record) && handshake_left > 0 {
            handshake_left -= 1;
            continue;
        }
        if app.is_empty() {
            if let Some(&read) = wire.reads.iter().find(|&&read| read > record.at) {
                ends_at = ends_at.min(read);
            }
        }
        app.push(*record);
    }
    FirstFlight {
        records: app.len(),
        client_records: before.len(),
        bytes: byte_span(&app),
    }
}

/// The client's encrypted handshake records after the server's first flight, which look
/// like application data: in TLS 1.3 its Finished, and EndOfEarlyData before it when early
/// data was accepted; none before TLS 1.3 (the handshake is not encrypted there).
fn encrypted_handshake_records(tls: &TlsInfo) -> usize {
    if tls.version == Some(ProtocolVersion::TLSv1_3) {
        1 + usize::from(tls.early_data_accepted)
    } else {
        0
    }
}

/// Stream offsets `[start, end)` from the header of the first of `records` to the end of
/// the last; `(0, 0)` when there are none.
fn byte_span(records: &[&WrittenRecord]) -> (u64, u64) {
    match (records.first(), records.last()) {
        (Some(first), Some(last)) => (
            first.offset,
            last.offset + RECORD_HEADER_LEN + u64::from(last.len),
        ),
        _ => (0, 0),
    }
}

/// The client-to-server TCP segments with payload of the connection from `client_port`
/// that carried any byte of the client's stream offsets `[start, end)`, in the tun link's
/// packet log (sequence numbers relative to the connection's SYN; a retransmission of the
/// same segment counts once). `None` when the log has no SYN of that connection.
pub fn segments_carrying(
    trace: &[PacketEvent],
    client_port: u16,
    (start, end): (u64, u64),
) -> Option<usize> {
    let ours = trace.iter().filter_map(|p| {
        p.tcp.filter(|t| {
            p.direction == tun::Direction::Upstream && !p.dropped && t.src_port == client_port
        })
    });
    let isn = ours.clone().find(|t| t.flags & SYN != 0)?.seq;
    let mut seen = BTreeSet::new();
    for t in ours.filter(|t| t.payload > 0 && t.flags & SYN == 0) {
        let from = u64::from(t.seq.wrapping_sub(isn.wrapping_add(1)));
        let to = from + u64::from(t.payload);
        if from < end && start < to {
            seen.insert((from, to));
        }
    }
    Some(seen.len())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls::HandshakeKind;

    use super::*;
    use crate::tun::TcpFields;

    const CHANGE_CIPHER_SPEC: u8 = 20;
    const HANDSHAKE: u8 = 22;

    fn record(at: Instant, content_type: u8, offset: u64, len: u16) -> WrittenRecord {
        WrittenRecord {
            at,
            content_type,
            len,
            offset,
        }
    }

    #[test]
    fn the_first_flight_leaves_the_handshake_out() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // ClientHello, (server flight read at 20), CCS, Finished, preface, SETTINGS,
        // HEADERS, then a SETTINGS ACK after the response arrived at 41.
        let wire = WireLog {
            records: vec![
                record(at(0), HANDSHAKE, 0, 500),
                record(at(21), CHANGE_CIPHER_SPEC, 505, 1),
                record(at(21), APPLICATION_DATA, 511, 53),
                record(at(22), APPLICATION_DATA, 569, 41),
                record(at(22), APPLICATION_DATA, 615, 60),
                record(at(23), APPLICATION_DATA, 680, 40),
                record(at(42), APPLICATION_DATA, 725, 26),
            ],
            first_read_at: Some(at(20)),
            reads: vec![at(20), at(41)],
            bytes_written: 756,
        };
        let tls13 = TlsInfo {
            handshake_kind: Some(HandshakeKind::Full),
            early_data_accepted: false,
            version: Some(ProtocolVersion::TLSv1_3),
        };
        let flight = first_flight(&wire, &tls13, at(41));
        assert_eq!(flight.records, 3);
        assert_eq!(flight.client_records, 6);
        assert_eq!(flight.bytes, (569, 725));
        // The server's SETTINGS read at 30, before the response: the ACK written at 31 is
        // not the first flight.
        let mut acked = wire.clone();
        acked.reads = vec![at(20), at(30), at(41)];
        acked.records[6] = record(at(31), APPLICATION_DATA, 725, 26);
        let flight = first_flight(&acked, &tls13, at(41));
        assert_eq!((flight.records, flight.client_records), (3, 7));
        assert_eq!(flight.bytes, (569, 725));
        // 0-RTT accepted: the early record counts, EndOfEarlyData and Finished do not.
        let early = WireLog {
            records: vec![
                record(at(0), HANDSHAKE, 0, 500),
                record(at(0), APPLICATION_DATA, 505, 150),
                record(at(21), APPLICATION_DATA, 660, 19),
                record(at(21), APPLICATION_DATA, 684, 53),
            ],
            first_read_at: Some(at(20)),
            reads: vec![at(20)],
            bytes_written: 742,
        };
        let accepted = TlsInfo {
            early_data_accepted: true,
            ..tls13
        };
        let flight = first_flight(&early, &accepted, at(21) + Duration::from_micros(1));
        assert_eq!((flight.records, flight.bytes), (1, (505, 660)));
    }

    #[test]
    fn segments_are_counted_by_sequence_number() {
        let t0 = Instant::now();
        let packet = |flags, seq: u32, payload, src_port, direction| PacketEvent {
            at: t0,
            due: t0,
            direction,
            ip_len: 52 + payload,
            tcp: Some(TcpFields {
                src_port,
                dst_port: 443,
                flags,
                seq,
                ack: 0,
                payload,
            }),
            dropped: false,
            queue_bytes: 0,
        };
        let up = tun::Direction::Upstream;
        let isn = u32::MAX - 10; // wraps
        let trace = vec![
            packet(SYN, isn, 0, 5000, up),
            packet(0x18, isn.wrapping_add(1), 505, 5000, up),
            packet(0x18, isn.wrapping_add(506), 100, 5000, up),
            packet(0x18, isn.wrapping_add(606), 200, 5000, up),
            packet(0x18, isn.wrapping_add(606), 200, 5000, up), // retransmitted
            packet(0x18, 77, 300, 6000, up),                    // another connection
            packet(0x18, 99, 300, 443, tun::Direction::Downstream),
        ];
        assert_eq!(segments_carrying(&trace, 5000, (505, 700)), Some(2));
        assert_eq!(segments_carrying(&trace, 5000, (0, 505)), Some(1));
        assert_eq!(segments_carrying(&trace, 5000, (900, 900)), Some(0));
        assert_eq!(segments_carrying(&trace, 7000, (0, 10)), None);
    }
}
