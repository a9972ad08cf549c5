//! A passive HPACK decoder that mirrors one direction's encoder, so the observers can
//! read `priority` fields. A failure turns it off for good: the traffic is untouched and
//! streams fall back to default priorities (DESIGN: an observer never breaks a connection).
//!
//! The decoder is our own (RFC 7541): [`huffman`] decodes the canonical Huffman code with a
//! byte lookup and per-length tables, [`table`] holds the static and dynamic tables, and
//! [`decoder`] reads header blocks. It never panics on any input, and its memory is bounded
//! by the dynamic table's size limit (64 KiB) plus scratch buffers for one block.

mod decoder;
mod huffman;
mod table;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use crate::stats::ConnectionStats;

/// Initial dynamic table size (RFC 7540 §6.5.2, SETTINGS_HEADER_TABLE_SIZE default).
const INITIAL_TABLE_SIZE: usize = 4096;
/// Largest dynamic table we agree to mirror; bigger size updates disable the observer
/// rather than let a peer grow our memory.
const MAX_TABLE_SIZE: usize = 64 * 1024;

pub(crate) struct PassiveDecoder {
    decoder: Option<decoder::Decoder>,
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
        Self::with_table_size(direction, stats, INITIAL_TABLE_SIZE)
    }

    /// A decoder whose dynamic table starts at `size` octets (RFC 7541 C.5 and C.6 use 256).
    fn with_table_size(direction: &'static str, stats: ConnectionStats, size: usize) -> Self {
        PassiveDecoder {
            decoder: Some(decoder::Decoder::new(size, MAX_TABLE_SIZE)),
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
        let mut values = Vec::new();
        self.decode(block, |name, value| {
            if name == b"priority" {
                values.push(value.to_vec());
            }
        })?;
        Some(values)
    }

    /// Every field line of one complete header block, as `(name, value)`.
    #[cfg(test)]
    pub(crate) fn fields(&mut self, block: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut fields = Vec::new();
        self.decode(block, |name, value| {
            fields.push((name.to_vec(), value.to_vec()));
        })?;
        Some(fields)
    }

    fn decode(&mut self, block: &[u8], field: impl FnMut(&[u8], &[u8])) -> Option<()> {
        let result = self.decoder.as_mut()?.decode(block, field);
        match result {
            Ok(()) => Some(()),
            Err(err) => {
                self.give_up(&err.to_string());
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
