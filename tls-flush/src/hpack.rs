//! A passive HPACK decoder that mirrors one direction's encoder, so the observers can
//! read `priority` fields. A failure turns it off for good: the traffic is untouched and
//! streams fall back to default priorities (DESIGN: an observer never breaks a connection).

use crate::stats::ConnectionStats;

/// Largest dynamic table we agree to mirror; bigger size updates disable the observer
/// rather than let a peer grow our memory.
const MAX_TABLE_SIZE: usize = 64 * 1024;

pub(crate) struct PassiveDecoder {
    decoder: Option<loona_hpack::Decoder<'static>>,
    direction: &'static str,
    stats: ConnectionStats,
}

impl std::fmt::Debug for PassiveDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassiveDecoder")
            .field("direction", &self.direction)
            .field("enabled", &self.decoder.is_some())
            .finish()
    }
}

impl PassiveDecoder {
    pub(crate) fn new(direction: &'static str, stats: ConnectionStats) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(MAX_TABLE_SIZE);
        PassiveDecoder {
            decoder: Some(decoder),
            direction,
            stats,
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.decoder.is_some()
    }

    /// Decodes one complete header block and returns the values of its `priority`
    /// fields, in order. `None` once the decoder has failed (now or earlier).
    pub(crate) fn priority_fields(&mut self, block: &[u8]) -> Option<Vec<Vec<u8>>> {
        let decoder = self.decoder.as_mut()?;
        let mut values = Vec::new();
        let result = decoder.decode_with_cb(block, |name, value| {
            if name.as_ref() == b"priority" {
                values.push(value.into_owned());
            }
        });
        match result {
            Ok(()) => Some(values),
            Err(err) => {
                self.give_up(&format!("{err:?}"));
                None
            }
        }
    }

    /// Stops decoding for good (the mirrored HPACK state is lost), once.
    pub(crate) fn give_up(&mut self, reason: &str) {
        if self.decoder.take().is_some() {
            self.stats.add_hpack_failure(1);
            tracing::warn!(
                direction = self.direction,
                reason,
                "HPACK observer failed; priority tracking is off for this connection"
            );
        }
    }
}

/// Joins several `priority` field lines into one list value (RFC 9651 §4.2).
pub(crate) fn join_field_lines(values: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_rfc7541_c3_requests_in_sequence() {
        // RFC 7541 C.3: three requests without Huffman coding, sharing the dynamic table.
        let blocks = [
            "828684410f7777772e6578616d706c652e636f6d",
            "828684be58086e6f2d6361636865",
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ];
        let mut d = PassiveDecoder::new("test", ConnectionStats::default());
        for b in blocks {
            let bytes: Vec<u8> = (0..b.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&b[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(d.priority_fields(&bytes), Some(vec![]));
        }
    }

    #[test]
    fn failure_disables_and_counts() {
        let stats = ConnectionStats::default();
        let mut d = PassiveDecoder::new("test", stats.clone());
        // Indexed field 0x7f+ far beyond both tables.
        assert_eq!(d.priority_fields(&[0xff, 0xff, 0x7f]), None);
        assert!(!d.is_enabled());
        assert_eq!(d.priority_fields(&[0x82]), None);
        assert_eq!(stats.snapshot().hpack_failures, 1);
    }

    #[test]
    fn joins_lines() {
        assert_eq!(
            join_field_lines(&[b"u=1".to_vec(), b"i".to_vec()]),
            b"u=1, i"
        );
    }
}
