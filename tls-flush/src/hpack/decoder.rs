//! Decoding of complete header blocks (RFC 7541 §5, §6), keeping the dynamic table in
//! step with the peer's encoder.
//!
//! Every read is bounds-checked: truncated or oversized input is an [`Error`], never a
//! panic, and memory is bounded by the dynamic table's size limit plus two scratch buffers
//! no larger than the block.

use std::fmt;

use super::huffman::{self, HuffmanError};
use super::table::{DynamicTable, Entry, STATIC_TABLE};

/// Why a header block cannot be decoded. After any of these the mirrored table may differ
/// from the encoder's, so decoding must stop for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Error {
    /// The block ends inside an integer.
    IntegerTruncated,
    /// An integer with more than 4 continuation octets (values stay below 2^28 + 255).
    IntegerTooLong,
    /// A string literal longer than the rest of the block.
    StringTruncated,
    /// A Huffman-coded string literal is invalid.
    Huffman(HuffmanError),
    /// Index 0, which designates no entry.
    IndexZero,
    /// An index past the static and dynamic tables.
    IndexOutOfRange(u32),
    /// A dynamic table size update above the allowed maximum.
    SizeUpdateTooLarge(u32),
    /// A dynamic table size update after a field line (RFC 7541 §4.2: updates come at the
    /// beginning of a block).
    SizeUpdateNotAtStart,
    /// A block that ends with a dynamic table size update.
    SizeUpdateAtEnd,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::IntegerTruncated => f.write_str("integer truncated"),
            Error::IntegerTooLong => f.write_str("integer too long"),
            Error::StringTruncated => f.write_str("string literal truncated"),
            Error::Huffman(HuffmanError::EosInString) => f.write_str("Huffman: EOS in string"),
            Error::Huffman(HuffmanError::PaddingTooLong) => {
                f.write_str("Huffman: padding longer than 7 bits")
            }
            Error::Huffman(HuffmanError::PaddingNotEos) => {
                f.write_str("Huffman: padding is not a prefix of EOS")
            }
            Error::IndexZero => f.write_str("index 0"),
            Error::IndexOutOfRange(i) => write!(f, "index {i} out of range"),
            Error::SizeUpdateTooLarge(n) => {
                write!(f, "dynamic table size update to {n} above the maximum")
            }
            Error::SizeUpdateNotAtStart => {
                f.write_str("dynamic table size update after a field line")
            }
            Error::SizeUpdateAtEnd => f.write_str("dynamic table size update at the end"),
        }
    }
}

impl From<HuffmanError> for Error {
    fn from(e: HuffmanError) -> Self {
        Error::Huffman(e)
    }
}

/// The unread rest of a block.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, tail) = self.rest.split_first()?;
        self.rest = tail;
        Some(b)
    }

    /// An integer with an N-bit prefix (RFC 7541 §5.1), `prefix_bits` in 1..=8, starting
    /// at the next octet. As in loona-hpack, at most 4 continuation octets are accepted
    /// (so the value stays below 2^28 + 255 and cannot overflow); every integer a header
    /// block needs (indexes, lengths within the block, table sizes) is far below that.
    fn integer(&mut self, prefix_bits: u32) -> Result<u32, Error> {
        let max_prefix = (1u32 << prefix_bits) - 1;
        let mut value = u32::from(self.byte().ok_or(Error::IntegerTruncated)?) & max_prefix;
        if value < max_prefix {
            return Ok(value);
        }
        for shift in [0, 7, 14, 21] {
            let b = self.byte().ok_or(Error::IntegerTruncated)?;
            value += u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::IntegerTooLong)
    }

    /// A string literal (RFC 7541 §5.2): whether it is Huffman-coded, and its octets.
    fn string(&mut self) -> Result<(bool, &'a [u8]), Error> {
        let huffman = self.rest.first().is_some_and(|b| b & 0x80 != 0);
        let len = self.integer(7)? as usize;
        if len > self.rest.len() {
            return Err(Error::StringTruncated);
        }
        let (s, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok((huffman, s))
    }
}

/// The octets of a string literal: raw ones as they are, Huffman-coded ones decoded into
/// `scratch`.
fn plain<'a>(
    (huffman, octets): (bool, &'a [u8]),
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], Error> {
    if !huffman {
        return Ok(octets);
    }
    scratch.clear();
    huffman::decode(octets, scratch)?;
    Ok(scratch)
}

/// `(name, value)` of entry `index` of the combined index space (RFC 7541 §2.3.3).
fn lookup(table: &DynamicTable, index: u32) -> Result<(&[u8], &[u8]), Error> {
    let i = index as usize;
    if i == 0 {
        return Err(Error::IndexZero);
    }
    if let Some(&(name, value)) = STATIC_TABLE.get(i - 1) {
        return Ok((name, value));
    }
    table
        .get(i - 1 - STATIC_TABLE.len())
        .ok_or(Error::IndexOutOfRange(index))
}

/// Capacity of a scratch buffer kept from one block to the next.
const SCRATCH_KEPT: usize = 4096;

/// One direction's HPACK decoding context.
pub(crate) struct Decoder {
    table: DynamicTable,
    /// Largest size a dynamic table size update may set.
    max_allowed: usize,
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl Decoder {
    /// A decoder whose table starts at `initial_size` and may be resized up to
    /// `max_allowed`.
    pub(crate) fn new(initial_size: usize, max_allowed: usize) -> Self {
        Decoder {
            table: DynamicTable::new(initial_size),
            max_allowed,
            name_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// Decodes one complete header block, calling `field(name, value)` for each field line
    /// in order. On an error the fields already reported stay reported and the table may
    /// be part-way updated: the caller must stop using this decoder.
    pub(crate) fn decode(
        &mut self,
        block: &[u8],
        field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), Error> {
        let result = self.decode_lines(block, field);
        // Keep what typical field lines need, not what one huge literal once did.
        for buf in [&mut self.name_buf, &mut self.value_buf] {
            if buf.capacity() > SCRATCH_KEPT {
                *buf = Vec::new();
            }
        }
        result
    }

    fn decode_lines(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), Error> {
        let Decoder {
            table,
            max_allowed,
            name_buf,
            value_buf,
        } = self;
        let mut r = Reader { rest: block };
        let mut at_start = true;
        let mut last_was_size_update = false;
        while let Some(&first) = r.rest.first() {
            if first & 0x80 != 0 {
                // Indexed field line (§6.1).
                let (name, value) = lookup(table, r.integer(7)?)?;
                field(name, value);
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3).
                if !at_start {
                    return Err(Error::SizeUpdateNotAtStart);
                }
                let size = r.integer(5)?;
                if size as usize > *max_allowed {
                    return Err(Error::SizeUpdateTooLarge(size));
                }
                table.set_max_size(size as usize);
                last_was_size_update = true;
                continue;
            } else {
                // Literal field line with incremental indexing (§6.2.1, 01xxxxxx), without
                // indexing (§6.2.2, 0000xxxx) or never indexed (§6.2.3, 0001xxxx).
                let indexing = first & 0x40 != 0;
                let index = r.integer(if indexing { 6 } else { 4 })?;
                let name = if index == 0 {
                    plain(r.string()?, name_buf)?
                } else {
                    lookup(table, index)?.0
                };
                let value = plain(r.string()?, value_buf)?;
                field(name, value);
                if indexing {
                    // Copied before anything is evicted: the name may come from an entry
                    // that this insertion evicts (§4.4).
                    let entry = Entry::new(name, value);
                    table.insert(entry);
                }
            }
            at_start = false;
            last_was_size_update = false;
        }
        if last_was_size_update {
            return Err(Error::SizeUpdateAtEnd);
        }
        Ok(())
    }
}
