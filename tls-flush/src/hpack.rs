//! A passive HPACK decoder that mirrors one direction's encoder, so the observers can
//! read `priority` fields. A failure turns it off for good: the traffic is untouched and
//! streams fall back to default priorities (an observer never breaks a connection).
//!
//! The decoder is our own (RFC 7541): [`huffman`] decodes the canonical Huffman code with a
//! byte lookup and per-length tables, [`table`] holds the static and dynamic tables, and
//! [`decoder`] reads header blocks. It never panics on any input, and its memory is bounded
//! by the dynamic table's size limit (64 KiB) plus scratch buffers for one block.

mod decoder;
mod huffman;
mod table;

/// The decoder's internals for the crate's own benchmark (`benches/hpack.rs`); not an API.
#[cfg(feature = "bench-internals")]
pub mod bench {
    /// The header block decoder the observers use.
    pub struct Decoder(super::decoder::Decoder);

    impl Decoder {
        /// A decoder with a dynamic table of `initial_size` bytes that accepts size updates
        /// up to `max_allowed`.
        pub fn new(initial_size: usize, max_allowed: usize) -> Self {
            Decoder(super::decoder::Decoder::new(initial_size, max_allowed))
        }

        /// Decodes `block`, calling `field` with each name and value.
        pub fn decode(
            &mut self,
            block: &[u8],
            field: impl FnMut(&[u8], &[u8]),
        ) -> Result<(), String> {
            self.0.decode(block, field).map_err(|e| format!("{e:?}"))
        }
    }

    /// Appends the decoding of the Huffman-coded `src` to `out`.
    pub fn huffman_decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        super::huffman::decode(src, out).map_err(|e| format!("{e:?}"))
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use crate::stats::ConnectionStats;

/// Why a header block did not decode (for [`RequestDecoder`]'s callers).
#[cfg(feature = "serve")]
pub(crate) use decoder::Error as DecodeError;

/// Initial dynamic table size (RFC 7540 §6.5.2, SETTINGS_HEADER_TABLE_SIZE default).
const INITIAL_TABLE_SIZE: usize = 4096;
/// Largest dynamic table we agree to mirror; bigger size updates disable the observer
/// rather than let a peer grow our memory.
const MAX_TABLE_SIZE: usize = 64 * 1024;

pub(crate) struct PassiveDecoder {
    decoder: Context,
    direction: &'static str,
    stats: ConnectionStats,
    /// The `priority` lines of the last block, joined; never longer than
    /// [`MAX_PRIORITY_VALUE`], whatever the block references.
    priority: Vec<u8>,
}

/// A direction's mirrored decoding context.
enum Context {
    /// No header block yet: the context is made at the first one, so that an idle
    /// connection keeps 16 bytes per direction here instead of the context's 104.
    NotYet {
        table_size: usize,
    },
    Decoding(Box<decoder::Decoder>),
    /// Decoding failed: the mirrored state is lost for good.
    Failed,
}

/// Longest `priority` value the observers keep, all field lines of one header block joined
/// with `", "` (RFC 9651 §4.2). A real one is a few bytes; a header block of indexed
/// references to one large dynamic-table entry must not cost more than the block itself.
pub(crate) const MAX_PRIORITY_VALUE: usize = 1024;

/// The `priority` field of one header block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PriorityField<'a> {
    /// No `priority` field line.
    Absent,
    /// The field lines, joined.
    Value(&'a [u8]),
    /// Longer than [`MAX_PRIORITY_VALUE`]: counted, and treated as absent by the callers.
    TooLong,
}

/// The `:method` of a connection's first request header block, decoded with a fresh
/// dynamic table (the encoder's state at the start of a connection). `None` when the block
/// does not decode or has no `:method`; at most one method value is kept (the first).
#[cfg(feature = "client")]
pub(crate) fn first_request_method(block: &[u8]) -> Option<Vec<u8>> {
    let mut decoder = decoder::Decoder::new(INITIAL_TABLE_SIZE, MAX_TABLE_SIZE);
    let mut method = None;
    decoder
        .decode(block, |name, value| {
            if name == b":method" && method.is_none() {
                method = Some(value.to_vec());
            }
        })
        .ok()?;
    method
}

/// Decodes a client's request header blocks from the start of its connection, for the
/// early requests' keys: the table starts at the default size (the client cannot have seen
/// the server's SETTINGS yet) and may be resized up to [`MAX_TABLE_SIZE`], as the observers
/// allow. After an error its table is lost: the caller must stop using it.
#[cfg(feature = "serve")]
pub(crate) struct RequestDecoder(decoder::Decoder);

#[cfg(feature = "serve")]
impl RequestDecoder {
    pub(crate) fn new() -> Self {
        RequestDecoder(decoder::Decoder::new(INITIAL_TABLE_SIZE, MAX_TABLE_SIZE))
    }

    /// Decodes one complete header block, calling `field(name, value)` for each line in
    /// order.
    pub(crate) fn decode(
        &mut self,
        block: &[u8],
        field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        self.0.decode(block, field)
    }
}

impl std::fmt::Debug for PassiveDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassiveDecoder")
            .field("direction", &self.direction)
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

/// The `content-length` lines of a header block, as far as read.
#[derive(Debug, Clone, Copy)]
enum ContentLength {
    Absent,
    Value(u64),
    /// Not a number, or more than one line.
    Invalid,
}

impl ContentLength {
    /// Another `content-length` line with `value`.
    fn and(self, value: &[u8]) -> Self {
        let parsed = std::str::from_utf8(value)
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse().ok());
        match (self, parsed) {
            (ContentLength::Absent, Some(n)) => ContentLength::Value(n),
            _ => ContentLength::Invalid,
        }
    }

    fn value(self) -> Option<u64> {
        match self {
            ContentLength::Value(n) => Some(n),
            _ => None,
        }
    }
}

impl PassiveDecoder {
    pub(crate) fn new(direction: &'static str, stats: ConnectionStats) -> Self {
        Self::with_table_size(direction, stats, INITIAL_TABLE_SIZE)
    }

    /// A decoder whose dynamic table starts at `size` octets (RFC 7541 C.5 and C.6 use 256).
    fn with_table_size(direction: &'static str, stats: ConnectionStats, size: usize) -> Self {
        PassiveDecoder {
            decoder: Context::NotYet { table_size: size },
            direction,
            stats,
            priority: Vec::new(),
        }
    }

    /// The decoding context, once made and while it works.
    #[cfg(test)]
    fn context(&self) -> Option<&decoder::Decoder> {
        match &self.decoder {
            Context::Decoding(decoder) => Some(decoder),
            _ => None,
        }
    }

    pub(crate) fn is_enabled(&self) -> bool {
        !matches!(self.decoder, Context::Failed)
    }

    /// Decodes one complete header block and returns its `priority` field: the values of
    /// every `priority` line, joined, copied into one buffer capped at
    /// [`MAX_PRIORITY_VALUE`]. `None` once the decoder has failed (now or earlier).
    pub(crate) fn priority_field(&mut self, block: &[u8]) -> Option<PriorityField<'_>> {
        self.head_fields(block).map(|(priority, _)| priority)
    }

    /// [`priority_field`](Self::priority_field), and the block's `content-length` where it
    /// has exactly one valid line.
    pub(crate) fn head_fields(&mut self, block: &[u8]) -> Option<(PriorityField<'_>, Option<u64>)> {
        let mut joined = std::mem::take(&mut self.priority);
        joined.clear();
        let (mut lines, mut too_long) = (0usize, false);
        let mut length = ContentLength::Absent;
        let decoded = self.decode(block, |name, value| {
            if name == b"content-length" {
                length = length.and(value);
                return;
            }
            if name != b"priority" || too_long {
                return;
            }
            let separator: &[u8] = if lines > 0 { b", " } else { b"" };
            lines += 1;
            if joined.len() + separator.len() + value.len() > MAX_PRIORITY_VALUE {
                too_long = true;
                return;
            }
            joined.extend_from_slice(separator);
            joined.extend_from_slice(value);
        });
        self.priority = joined;
        decoded?;
        let priority = match (lines, too_long) {
            (_, true) => {
                self.stats.add_priority_value_too_long(1);
                PriorityField::TooLong
            }
            (0, _) => PriorityField::Absent,
            _ => PriorityField::Value(&self.priority),
        };
        Some((priority, length.value()))
    }

    /// [`priority_field`](Self::priority_field), owned: `Some(None)` for absent,
    /// `Some(Some(value))`, or `Some(Some(b"<too long>"))`.
    #[cfg(test)]
    pub(crate) fn priority_value(&mut self, block: &[u8]) -> Option<Option<Vec<u8>>> {
        Some(match self.priority_field(block)? {
            PriorityField::Absent => None,
            PriorityField::Value(v) => Some(v.to_vec()),
            PriorityField::TooLong => Some(b"<too long>".to_vec()),
        })
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
        if let Context::NotYet { table_size } = self.decoder {
            let decoder = decoder::Decoder::new(table_size, MAX_TABLE_SIZE);
            self.decoder = Context::Decoding(Box::new(decoder));
        }
        let Context::Decoding(decoder) = &mut self.decoder else {
            return None;
        };
        let result = decoder.decode(block, field);
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
        if !matches!(
            std::mem::replace(&mut self.decoder, Context::Failed),
            Context::Failed
        ) {
            self.stats.add_hpack_failure(1);
            tracing::warn!(
                direction = self.direction,
                reason,
                "HPACK observer failed; priority tracking is off for this connection"
            );
        }
    }
}
