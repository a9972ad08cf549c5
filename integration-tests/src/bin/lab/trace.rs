//! `--trace`: one CSV packet timeline per run from the tun link's emulator, with the TLS
//! records and HTTP/2 streams each server-to-client packet carried (from the client's taps:
//! both count the server's bytes from the start of the connection), and whether the record
//! that carried the critical response's last byte left in one burst or straddled a
//! congestion window (its packets more than half an RTT apart).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use integration_tests::tun::{Direction, PacketEvent};
use integration_tests::workload::TunRun;
use integration_tests::BoxError;

/// Bytes of a TLS record header; a TLS 1.3 record's body is the plaintext, its content
/// type byte and a 16-byte AEAD tag.
const RECORD_HEADER: u64 = 5;
const RECORD_BODY_OVERHEAD: u64 = 17;
const FRAME_HEADER: u64 = 9;

/// One server-to-client TLS record as the client's tap saw it, placed in the server's byte
/// stream.
struct Record {
    /// Offset of its header in the server's TCP byte stream.
    wire_start: u64,
    /// Its length on the wire (header included).
    wire_len: u64,
    /// For an application-data record after the handshake: the offset of its plaintext in
    /// the decrypted stream, and the plaintext length.
    plain: Option<(u64, u64)>,
}

fn records(run: &TunRun) -> Vec<Record> {
    let mut wire = 0;
    let mut plain = 0;
    run.client_log
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let len = r.len as u64;
            let record = Record {
                wire_start: wire,
                wire_len: RECORD_HEADER + len,
                plain: (i >= run.handshake_records && r.content_type == 23)
                    .then(|| (plain, len.saturating_sub(RECORD_BODY_OVERHEAD))),
            };
            wire += record.wire_len;
            if let Some((_, n)) = record.plain {
                plain += n;
            }
            record
        })
        .collect()
}

/// The records overlapping wire bytes `[start, end)` (indices), and the streams of the
/// frames whose bytes among them are in that range.
fn carried(records: &[Record], run: &TunRun, start: u64, end: u64) -> (Vec<usize>, Vec<u32>) {
    let mut indices = Vec::new();
    let mut streams = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if r.wire_start >= end || r.wire_start + r.wire_len <= start {
            continue;
        }
        indices.push(i);
        let Some((plain_start, plain_len)) = r.plain else {
            continue;
        };
        // The plaintext sits right after the header, byte for byte in the ciphertext.
        let body = r.wire_start + RECORD_HEADER;
        let from = start.max(body).saturating_sub(body).min(plain_len) + plain_start;
        let to = end.saturating_sub(body).min(plain_len) + plain_start;
        for f in &run.client_log.frames {
            let frame_start = f.end_offset - FRAME_HEADER - f.len as u64;
            if frame_start < to && f.end_offset > from && !streams.contains(&f.stream_id) {
                streams.push(f.stream_id);
            }
        }
    }
    (indices, streams)
}

fn ms(origin: Instant, at: Instant) -> f64 {
    at.saturating_duration_since(origin).as_secs_f64() * 1e3
}

/// The connection under test among the packets of a run (with `--cross` the link also
/// carries the cross-traffic flows): the one the client opened, whose SYN went upstream
/// (a cross-traffic sender connects from the server's side), named by the client's port.
#[derive(Debug, Clone, Copy)]
struct Fixture {
    client_port: u16,
    /// Initial sequence numbers, upstream (the SYN) and downstream (the SYN-ACK).
    up_isn: u32,
    down_isn: Option<u32>,
}

impl Fixture {
    fn of(trace: &[PacketEvent]) -> Option<Fixture> {
        // SYN alone opens a connection, SYN with ACK answers it.
        let syn = |p: &&PacketEvent, direction, flags| {
            p.direction == direction && p.tcp.is_some_and(|t| t.flags & 0x12 == flags)
        };
        let (client_port, up_isn) = trace
            .iter()
            .find(|p| syn(p, Direction::Upstream, 0x02))
            .and_then(|p| p.tcp)
            .map(|t| (t.src_port, t.seq))?;
        let down_isn = trace
            .iter()
            .filter(|p| syn(p, Direction::Downstream, 0x12))
            .filter_map(|p| p.tcp)
            .find(|t| t.dst_port == client_port)
            .map(|t| t.seq);
        Some(Fixture {
            client_port,
            up_isn,
            down_isn,
        })
    }

    /// The packet belongs to the connection under test.
    fn carries(&self, p: &PacketEvent) -> bool {
        p.tcp.is_some_and(|t| match p.direction {
            Direction::Upstream => t.src_port == self.client_port,
            Direction::Downstream => t.dst_port == self.client_port,
        })
    }
}

/// The CSV of one run's trace.
pub fn render_csv(run: &TunRun) -> String {
    let records = records(run);
    let fixture = Fixture::of(&run.trace);
    let (up, down) = (fixture.map(|f| f.up_isn), fixture.and_then(|f| f.down_isn));
    let relative = |n: u32, isn: Option<u32>| isn.map_or(n, |isn| n.wrapping_sub(isn));
    let mut out = String::from(
        "t_ms,due_ms,dir,flow,ip_len,flags,seq,ack,payload,queue_bytes,dropped,records,streams\n",
    );
    for p in &run.trace {
        let ours = fixture.is_some_and(|f| f.carries(p));
        let (own, other) = match (ours, p.direction) {
            (false, _) => (None, None),
            (true, Direction::Upstream) => (up, down),
            (true, Direction::Downstream) => (down, up),
        };
        let _ = write!(
            out,
            "{:.3},{:.3},{},{},{},",
            ms(run.link_started, p.at),
            ms(run.link_started, p.due),
            p.direction.short(),
            if ours { "fixture" } else { "cross" },
            p.ip_len
        );
        let Some(tcp) = p.tcp else {
            let _ = writeln!(out, ",,,,{},{},,", p.queue_bytes, u8::from(p.dropped));
            continue;
        };
        let seq = relative(tcp.seq, own);
        let (mut carried_records, mut carried_streams) = (String::new(), String::new());
        if ours && p.direction == Direction::Downstream && tcp.payload > 0 && down.is_some() {
            // The SYN takes sequence number 0: byte 0 of the stream is seq 1.
            let start = u64::from(seq.wrapping_sub(1));
            let (indices, streams) = carried(&records, run, start, start + u64::from(tcp.payload));
            carried_records = join(&indices);
            carried_streams = join(&streams);
        }
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{}",
            tcp.flag_letters(),
            seq,
            if tcp.flags & 0x10 != 0 {
                relative(tcp.ack, other).to_string()
            } else {
                String::new()
            },
            tcp.payload,
            p.queue_bytes,
            u8::from(p.dropped),
            carried_records,
            carried_streams
        );
    }
    out
}

fn join<T: ToString>(items: &[T]) -> String {
    items.iter().map(T::to_string).collect::<Vec<_>>().join(" ")
}

/// How the record carrying the critical response's last byte left the server.
#[derive(Debug, Clone, PartialEq)]
pub struct CriticalRecord {
    /// Its index among the connection's records.
    pub record: usize,
    /// Its length on the wire.
    pub wire_len: u64,
    /// Packets that carried its bytes (first transmissions and retransmissions).
    pub packets: usize,
    /// From the first to the last of those packets entering the link, ms.
    pub spread_ms: f64,
    /// The spread exceeded half the RTT: its tail waited for acknowledgments (the record
    /// straddled a congestion-window boundary).
    pub straddled: bool,
}

/// The record that carried the critical response's last DATA byte, from the trace.
pub fn critical_record(run: &TunRun, rtt: Duration) -> Option<CriticalRecord> {
    let critical = run.critical_stream;
    let last = run
        .client_log
        .frames
        .iter()
        .filter(|f| f.stream_id == critical && f.kind == 0 && f.len > 0)
        .map(|f| f.end_offset)
        .max()?;
    let records = records(run);
    let index = records.iter().position(|r| {
        r.plain
            .is_some_and(|(start, len)| start < last && last <= start + len)
    })?;
    let r = &records[index];
    let fixture = Fixture::of(&run.trace)?;
    let down = fixture.down_isn?;
    let times: Vec<Instant> = run
        .trace
        .iter()
        .filter(|p| p.direction == Direction::Downstream && !p.dropped && fixture.carries(p))
        .filter_map(|p| {
            let tcp = p.tcp.filter(|t| t.payload > 0)?;
            let start = u64::from(tcp.seq.wrapping_sub(down).wrapping_sub(1));
            let end = start + u64::from(tcp.payload);
            (start < r.wire_start + r.wire_len && end > r.wire_start).then_some(p.at)
        })
        .collect();
    let first = *times.iter().min()?;
    let spread = times.iter().max()?.saturating_duration_since(first);
    Some(CriticalRecord {
        record: index,
        wire_len: r.wire_len,
        packets: times.len(),
        spread_ms: spread.as_secs_f64() * 1e3,
        straddled: spread > rtt / 2,
    })
}

/// The file of the `index`th run in `dir`.
pub fn trace_path(dir: &Path, index: usize, run: &TunRun) -> PathBuf {
    let r = &run.result;
    dir.join(format!(
        "{index:03}-{}-{}-{}-r{}.csv",
        r.case, r.workload, r.urgencies, r.repeat
    ))
}

/// Writes the run's CSV to `dir` and returns the file's path.
pub fn write_trace(dir: &Path, index: usize, run: &TunRun) -> Result<PathBuf, BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = trace_path(dir, index, run);
    std::fs::write(&path, render_csv(run)).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use integration_tests::tun::TcpFields;

    fn packet(
        direction: Direction,
        src_port: u16,
        dst_port: u16,
        flags: u8,
        seq: u32,
    ) -> PacketEvent {
        let at = Instant::now();
        PacketEvent {
            at,
            due: at,
            direction,
            ip_len: 60,
            tcp: Some(TcpFields {
                src_port,
                dst_port,
                flags,
                seq,
                ack: 0,
                payload: 0,
            }),
            dropped: false,
            queue_bytes: 0,
        }
    }

    /// Cross traffic connects first and from the server's side; the fixture is the
    /// connection the client opened, and only its packets count as its own.
    #[test]
    fn the_fixture_is_the_connection_the_client_opened() {
        let (sink, sender, client, server) = (40_000, 50_000, 41_000, 443);
        let trace = [
            packet(Direction::Downstream, sender, sink, 0x02, 7),
            packet(Direction::Upstream, sink, sender, 0x12, 9),
            packet(Direction::Upstream, client, server, 0x02, 100),
            packet(Direction::Downstream, sender, sink, 0x10, 8),
            packet(Direction::Downstream, server, client, 0x12, 200),
        ];
        let fixture = Fixture::of(&trace).expect("a fixture");
        assert_eq!(
            (fixture.client_port, fixture.up_isn, fixture.down_isn),
            (client, 100, Some(200))
        );
        let ours: Vec<bool> = trace.iter().map(|p| fixture.carries(p)).collect();
        assert_eq!(ours, [false, false, true, false, true]);
    }
}
