//! What the emulator records about the packets it carries: the occupancy of each
//! direction's queue ([`QueueGauge`]), the client-to-server packets with TCP payload and
//! the server-to-client queue when each reached the server ([`PayloadArrival`]), and, when
//! asked for, every packet's IP and TCP header fields ([`PacketEvent`]). All bounded: the
//! logs keep their first entries and stop recording when full.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The client-to-server packets with TCP payload the emulator logs per link (the first
/// ones: a run's requests come early).
pub const MAX_PAYLOAD_ARRIVALS: usize = 4096;

/// Which way a packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Client to server.
    Upstream,
    /// Server to client.
    Downstream,
}

impl Direction {
    /// `up` or `down`.
    pub fn short(self) -> &'static str {
        match self {
            Direction::Upstream => "up",
            Direction::Downstream => "down",
        }
    }
}

/// One packet the emulator read from a TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketEvent {
    /// When the emulator read it (the sender's kernel handed it over).
    pub at: Instant,
    /// When it is due at the receiver (serialization and one-way delay done); `at` when
    /// dropped.
    pub due: Instant,
    /// Which way.
    pub direction: Direction,
    /// IP packet length.
    pub ip_len: u16,
    /// TCP fields, when it is a TCP packet over IPv4.
    pub tcp: Option<TcpFields>,
    /// Dropped at a full queue (tail drop).
    pub dropped: bool,
    /// Bytes in this direction's queue (waiting or being serialized) after it was queued.
    pub queue_bytes: u32,
}

/// The TCP header fields a trace shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFields {
    /// Source port (which connection a packet belongs to, with the direction).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    pub flags: u8,
    /// Sequence number (absolute).
    pub seq: u32,
    /// Acknowledgment number (absolute).
    pub ack: u32,
    /// Payload bytes.
    pub payload: u16,
}

impl TcpFields {
    /// The fields of an IPv4 packet carrying TCP; `None` for anything else or a truncated
    /// packet.
    pub fn parse(packet: &[u8]) -> Option<TcpFields> {
        if packet.len() < 20 || packet[0] >> 4 != 4 || packet[9] != 6 {
            return None;
        }
        let ihl = usize::from(packet[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([packet[2], packet[3]])).min(packet.len());
        let tcp = packet.get(ihl..total)?;
        if tcp.len() < 20 {
            return None;
        }
        let offset = usize::from(tcp[12] >> 4) * 4;
        let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
        Some(TcpFields {
            src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
            dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
            flags: tcp[13],
            seq: word(4),
            ack: word(8),
            payload: tcp.len().saturating_sub(offset) as u16,
        })
    }

    /// The flags as letters, e.g. `S`, `SA`, `PA`, `FA` (`.` for none).
    pub fn flag_letters(&self) -> String {
        let letters: String = [
            (0x02, 'S'),
            (0x01, 'F'),
            (0x04, 'R'),
            (0x08, 'P'),
            (0x10, 'A'),
        ]
        .into_iter()
        .filter(|(bit, _)| self.flags & bit != 0)
        .map(|(_, c)| c)
        .collect();
        if letters.is_empty() {
            ".".into()
        } else {
            letters
        }
    }
}

/// A client-to-server packet with TCP payload, as it reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadArrival {
    /// When the emulator read it from the client's device.
    pub sent: Instant,
    /// Bytes in the server-to-client queue when it was delivered to the server.
    pub downstream_queue_bytes: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The packets of one direction in its queue (waiting or being serialized): each one's
/// serialization end and length, oldest first.
#[derive(Debug, Default)]
pub(super) struct QueueGauge {
    queue: Mutex<VecDeque<(Instant, u32)>>,
}

impl QueueGauge {
    /// Queues a packet of `len` bytes arriving `now` whose serialization ends at
    /// `departure`, unless `limit` packets are queued already (then `None`); returns the
    /// bytes queued with it.
    pub(super) fn admit(
        &self,
        now: Instant,
        len: usize,
        limit: usize,
        departure: impl FnOnce() -> Instant,
    ) -> Option<(usize, u64)> {
        let mut queue = lock(&self.queue);
        while queue.front().is_some_and(|&(d, _)| d <= now) {
            queue.pop_front();
        }
        if queue.len() >= limit {
            return None;
        }
        queue.push_back((departure(), len as u32));
        Some((queue.len(), queue.iter().map(|&(_, l)| u64::from(l)).sum()))
    }

    /// Bytes still queued at `now`.
    pub(super) fn bytes_at(&self, now: Instant) -> u64 {
        lock(&self.queue)
            .iter()
            .filter(|&&(d, _)| d > now)
            .map(|&(_, l)| u64::from(l))
            .sum()
    }
}

/// The link's logs, shared by the emulator's threads.
#[derive(Debug)]
pub(super) struct Recorder {
    arrivals: Mutex<Vec<PayloadArrival>>,
    trace_limit: usize,
    trace: Mutex<Vec<PacketEvent>>,
}

impl Recorder {
    pub(super) fn new(trace_limit: usize) -> Recorder {
        Recorder {
            arrivals: Mutex::default(),
            trace_limit,
            trace: Mutex::default(),
        }
    }

    /// A client-to-server packet read at `sent` was delivered with `downstream_queue_bytes`
    /// queued the other way; logged when it carries TCP payload.
    pub(super) fn delivered_upstream(&self, sent: Instant, packet: &[u8], queue: &QueueGauge) {
        if TcpFields::parse(packet).is_none_or(|t| t.payload == 0) {
            return;
        }
        let mut arrivals = lock(&self.arrivals);
        if arrivals.len() < MAX_PAYLOAD_ARRIVALS {
            arrivals.push(PayloadArrival {
                sent,
                downstream_queue_bytes: queue.bytes_at(Instant::now()),
            });
        }
    }

    /// Logs a packet when tracing is on and the trace is not full.
    pub(super) fn packet(&self, event: impl FnOnce() -> PacketEvent) {
        if self.trace_limit == 0 {
            return;
        }
        let mut trace = lock(&self.trace);
        if trace.len() < self.trace_limit {
            trace.push(event());
        }
    }

    pub(super) fn arrivals(&self) -> Vec<PayloadArrival> {
        lock(&self.arrivals).clone()
    }

    pub(super) fn trace(&self) -> Vec<PacketEvent> {
        lock(&self.trace).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn tcp_fields_of_an_ipv4_packet() {
        let mut packet = vec![0u8; 20 + 32 + 100];
        packet[0] = 0x45;
        let len = packet.len() as u16;
        packet[2..4].copy_from_slice(&len.to_be_bytes());
        packet[9] = 6;
        packet[20..22].copy_from_slice(&40000u16.to_be_bytes());
        packet[22..24].copy_from_slice(&443u16.to_be_bytes());
        packet[24..28].copy_from_slice(&1000u32.to_be_bytes());
        packet[28..32].copy_from_slice(&7u32.to_be_bytes());
        packet[32] = 8 << 4;
        packet[33] = 0x18;
        let tcp = TcpFields::parse(&packet).unwrap();
        assert_eq!((tcp.seq, tcp.ack, tcp.payload), (1000, 7, 100));
        assert_eq!((tcp.src_port, tcp.dst_port), (40000, 443));
        assert_eq!(tcp.flag_letters(), "PA");
        packet[9] = 17;
        assert_eq!(TcpFields::parse(&packet), None);
        assert_eq!(TcpFields::parse(&packet[..10]), None);
    }

    #[test]
    fn the_gauge_counts_what_has_not_left() {
        let gauge = QueueGauge::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(gauge.admit(t0, 1500, 2, || at(10)), Some((1, 1500)));
        assert_eq!(gauge.admit(t0, 500, 2, || at(20)), Some((2, 2000)));
        assert_eq!(gauge.admit(t0, 100, 2, || at(30)), None, "tail drop");
        assert_eq!(gauge.bytes_at(at(15)), 500);
        assert_eq!(gauge.admit(at(15), 100, 2, || at(30)), Some((2, 600)));
        assert_eq!(gauge.bytes_at(at(40)), 0);
    }
}
