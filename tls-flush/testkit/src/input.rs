//! Decoding fuzz input by hand ([`Input`]): it reads the input front to back and yields
//! zeros past its end, so every byte string is a valid case and an all-zero tail means
//! "defaults" (no `arbitrary`, so the kit builds on stable and on nightly alike). Also the
//! value tables and caps the case decoders share.

use tls_flush::Policy;

/// Caps that keep one fuzz case fast.
pub const MAX_FRAMES: usize = 128;
pub const MAX_INPUT_BYTES: usize = 128 * 1024;

/// Stream ids the generators pick from: collisions between frames are what matters.
pub const STREAM_IDS: [u32; 10] = [1, 3, 5, 7, 9, 11, 13, 2, 0x7fff_ffff, 0];

/// `priority` field values, valid and not.
pub const PRIORITY_VALUES: [&str; 12] = [
    "u=0", "u=1", "u=2, i", "u=3", "u=5, i", "u=6, i", "u=7", "i", "u=9", "u=0;x", "?", "",
];

/// The policy a byte selects.
pub fn decode_policy(b: u8) -> Policy {
    Policy::ALL[usize::from(b) % Policy::ALL.len()]
}

/// Reads a fuzz input front to back; past the end every read yields zeros.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn remaining(&self) -> usize {
        self.data.len()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A number in `0..n` (`0` when `n <= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => usize::from(self.u8()) % n,
            257..=65536 => usize::from(self.u16()) % n,
            _ => self.u32() as usize % n,
        }
    }

    /// Up to `n` raw bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Up to `max - 1` raw bytes, the count drawn from the input.
    pub fn bytes_upto(&mut self, max: usize) -> &'a [u8] {
        let n = self.below(max);
        self.bytes(n)
    }

    /// An element of `table`, drawn with [`Input::below`].
    pub fn pick<T: Copy>(&mut self, table: &[T]) -> T {
        table[self.below(table.len())]
    }

    /// Everything that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// A size drawn from a few classes: tiny, small, up to a record, beyond a record.
    pub fn size(&mut self) -> usize {
        match self.u8() % 8 {
            0 => 1,
            1 | 2 => 1 + self.below(16),
            3 | 4 => 1 + self.below(2048),
            5 | 6 => 1 + self.below(40_000),
            _ => usize::MAX,
        }
    }
}
