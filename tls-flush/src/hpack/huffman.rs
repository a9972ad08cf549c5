//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B) and its decoder.
//!
//! The code is canonical: within each length the codes are consecutive in symbol order, and
//! each length's first code continues the previous length's last one (checked at compile
//! time by `is_canonical`). So a code of length `L` is `FIRST[L] + k` for the `k`-th symbol
//! of that length in `(length, symbol)` order, and a decoder needs only per-length tables.
//!
//! Decoding keeps a 64-bit window of input bits. Codes of at most 8 bits (every letter,
//! digit and common punctuation) are resolved by one lookup of the window's top byte;
//! longer ones by walking the lengths 10..=30 of the canonical tables. Nothing allocates
//! beyond the caller's output buffer and no input can make it panic.

/// `(code, length in bits)` of symbols 0..=255 and EOS (256), RFC 7541 Appendix B.
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),     // 0
    (0x7fffd8, 23),   // 1
    (0xfffffe2, 28),  // 2
    (0xfffffe3, 28),  // 3
    (0xfffffe4, 28),  // 4
    (0xfffffe5, 28),  // 5
    (0xfffffe6, 28),  // 6
    (0xfffffe7, 28),  // 7
    (0xfffffe8, 28),  // 8
    (0xffffea, 24),   // 9
    (0x3ffffffc, 30), // 10
    (0xfffffe9, 28),  // 11
    (0xfffffea, 28),  // 12
    (0x3ffffffd, 30), // 13
    (0xfffffeb, 28),  // 14
    (0xfffffec, 28),  // 15
    (0xfffffed, 28),  // 16
    (0xfffffee, 28),  // 17
    (0xfffffef, 28),  // 18
    (0xffffff0, 28),  // 19
    (0xffffff1, 28),  // 20
    (0xffffff2, 28),  // 21
    (0x3ffffffe, 30), // 22
    (0xffffff3, 28),  // 23
    (0xffffff4, 28),  // 24
    (0xffffff5, 28),  // 25
    (0xffffff6, 28),  // 26
    (0xffffff7, 28),  // 27
    (0xffffff8, 28),  // 28
    (0xffffff9, 28),  // 29
    (0xffffffa, 28),  // 30
    (0xffffffb, 28),  // 31
    (0x14, 6),        // 32 ' '
    (0x3f8, 10),      // 33 '!'
    (0x3f9, 10),      // 34 '"'
    (0xffa, 12),      // 35 '#'
    (0x1ff9, 13),     // 36 '$'
    (0x15, 6),        // 37 '%'
    (0xf8, 8),        // 38 '&'
    (0x7fa, 11),      // 39 '''
    (0x3fa, 10),      // 40 '('
    (0x3fb, 10),      // 41 ')'
    (0xf9, 8),        // 42 '*'
    (0x7fb, 11),      // 43 '+'
    (0xfa, 8),        // 44 ','
    (0x16, 6),        // 45 '-'
    (0x17, 6),        // 46 '.'
    (0x18, 6),        // 47 '/'
    (0x0, 5),         // 48 '0'
    (0x1, 5),         // 49 '1'
    (0x2, 5),         // 50 '2'
    (0x19, 6),        // 51 '3'
    (0x1a, 6),        // 52 '4'
    (0x1b, 6),        // 53 '5'
    (0x1c, 6),        // 54 '6'
    (0x1d, 6),        // 55 '7'
    (0x1e, 6),        // 56 '8'
    (0x1f, 6),        // 57 '9'
    (0x5c, 7),        // 58 ':'
    (0xfb, 8),        // 59 ';'
    (0x7ffc, 15),     // 60 '<'
    (0x20, 6),        // 61 '='
    (0xffb, 12),      // 62 '>'
    (0x3fc, 10),      // 63 '?'
    (0x1ffa, 13),     // 64 '@'
    (0x21, 6),        // 65 'A'
    (0x5d, 7),        // 66 'B'
    (0x5e, 7),        // 67 'C'
    (0x5f, 7),        // 68 'D'
    (0x60, 7),        // 69 'E'
    (0x61, 7),        // 70 'F'
    (0x62, 7),        // 71 'G'
    (0x63, 7),        // 72 'H'
    (0x64, 7),        // 73 'I'
    (0x65, 7),        // 74 'J'
    (0x66, 7),        // 75 'K'
    (0x67, 7),        // 76 'L'
    (0x68, 7),        // 77 'M'
    (0x69, 7),        // 78 'N'
    (0x6a, 7),        // 79 'O'
    (0x6b, 7),        // 80 'P'
    (0x6c, 7),        // 81 'Q'
    (0x6d, 7),        // 82 'R'
    (0x6e, 7),        // 83 'S'
    (0x6f, 7),        // 84 'T'
    (0x70, 7),        // 85 'U'
    (0x71, 7),        // 86 'V'
    (0x72, 7),        // 87 'W'
    (0xfc, 8),        // 88 'X'
    (0x73, 7),        // 89 'Y'
    (0xfd, 8),        // 90 'Z'
    (0x1ffb, 13),     // 91 '['
    (0x7fff0, 19),    // 92 '\'
    (0x1ffc, 13),     // 93 ']'
    (0x3ffc, 14),     // 94 '^'
    (0x22, 6),        // 95 '_'
    (0x7ffd, 15),     // 96 '`'
    (0x3, 5),         // 97 'a'
    (0x23, 6),        // 98 'b'
    (0x4, 5),         // 99 'c'
    (0x24, 6),        // 100 'd'
    (0x5, 5),         // 101 'e'
    (0x25, 6),        // 102 'f'
    (0x26, 6),        // 103 'g'
    (0x27, 6),        // 104 'h'
    (0x6, 5),         // 105 'i'
    (0x74, 7),        // 106 'j'
    (0x75, 7),        // 107 'k'
    (0x28, 6),        // 108 'l'
    (0x29, 6),        // 109 'm'
    (0x2a, 6),        // 110 'n'
    (0x7, 5),         // 111 'o'
    (0x2b, 6),        // 112 'p'
    (0x76, 7),        // 113 'q'
    (0x2c, 6),        // 114 'r'
    (0x8, 5),         // 115 's'
    (0x9, 5),         // 116 't'
    (0x2d, 6),        // 117 'u'
    (0x77, 7),        // 118 'v'
    (0x78, 7),        // 119 'w'
    (0x79, 7),        // 120 'x'
    (0x7a, 7),        // 121 'y'
    (0x7b, 7),        // 122 'z'
    (0x7ffe, 15),     // 123 '{'
    (0x7fc, 11),      // 124 '|'
    (0x3ffd, 14),     // 125 '}'
    (0x1ffd, 13),     // 126 '~'
    (0xffffffc, 28),  // 127
    (0xfffe6, 20),    // 128
    (0x3fffd2, 22),   // 129
    (0xfffe7, 20),    // 130
    (0xfffe8, 20),    // 131
    (0x3fffd3, 22),   // 132
    (0x3fffd4, 22),   // 133
    (0x3fffd5, 22),   // 134
    (0x7fffd9, 23),   // 135
    (0x3fffd6, 22),   // 136
    (0x7fffda, 23),   // 137
    (0x7fffdb, 23),   // 138
    (0x7fffdc, 23),   // 139
    (0x7fffdd, 23),   // 140
    (0x7fffde, 23),   // 141
    (0xffffeb, 24),   // 142
    (0x7fffdf, 23),   // 143
    (0xffffec, 24),   // 144
    (0xffffed, 24),   // 145
    (0x3fffd7, 22),   // 146
    (0x7fffe0, 23),   // 147
    (0xffffee, 24),   // 148
    (0x7fffe1, 23),   // 149
    (0x7fffe2, 23),   // 150
    (0x7fffe3, 23),   // 151
    (0x7fffe4, 23),   // 152
    (0x1fffdc, 21),   // 153
    (0x3fffd8, 22),   // 154
    (0x7fffe5, 23),   // 155
    (0x3fffd9, 22),   // 156
    (0x7fffe6, 23),   // 157
    (0x7fffe7, 23),   // 158
    (0xffffef, 24),   // 159
    (0x3fffda, 22),   // 160
    (0x1fffdd, 21),   // 161
    (0xfffe9, 20),    // 162
    (0x3fffdb, 22),   // 163
    (0x3fffdc, 22),   // 164
    (0x7fffe8, 23),   // 165
    (0x7fffe9, 23),   // 166
    (0x1fffde, 21),   // 167
    (0x7fffea, 23),   // 168
    (0x3fffdd, 22),   // 169
    (0x3fffde, 22),   // 170
    (0xfffff0, 24),   // 171
    (0x1fffdf, 21),   // 172
    (0x3fffdf, 22),   // 173
    (0x7fffeb, 23),   // 174
    (0x7fffec, 23),   // 175
    (0x1fffe0, 21),   // 176
    (0x1fffe1, 21),   // 177
    (0x3fffe0, 22),   // 178
    (0x1fffe2, 21),   // 179
    (0x7fffed, 23),   // 180
    (0x3fffe1, 22),   // 181
    (0x7fffee, 23),   // 182
    (0x7fffef, 23),   // 183
    (0xfffea, 20),    // 184
    (0x3fffe2, 22),   // 185
    (0x3fffe3, 22),   // 186
    (0x3fffe4, 22),   // 187
    (0x7ffff0, 23),   // 188
    (0x3fffe5, 22),   // 189
    (0x3fffe6, 22),   // 190
    (0x7ffff1, 23),   // 191
    (0x3ffffe0, 26),  // 192
    (0x3ffffe1, 26),  // 193
    (0xfffeb, 20),    // 194
    (0x7fff1, 19),    // 195
    (0x3fffe7, 22),   // 196
    (0x7ffff2, 23),   // 197
    (0x3fffe8, 22),   // 198
    (0x1ffffec, 25),  // 199
    (0x3ffffe2, 26),  // 200
    (0x3ffffe3, 26),  // 201
    (0x3ffffe4, 26),  // 202
    (0x7ffffde, 27),  // 203
    (0x7ffffdf, 27),  // 204
    (0x3ffffe5, 26),  // 205
    (0xfffff1, 24),   // 206
    (0x1ffffed, 25),  // 207
    (0x7fff2, 19),    // 208
    (0x1fffe3, 21),   // 209
    (0x3ffffe6, 26),  // 210
    (0x7ffffe0, 27),  // 211
    (0x7ffffe1, 27),  // 212
    (0x3ffffe7, 26),  // 213
    (0x7ffffe2, 27),  // 214
    (0xfffff2, 24),   // 215
    (0x1fffe4, 21),   // 216
    (0x1fffe5, 21),   // 217
    (0x3ffffe8, 26),  // 218
    (0x3ffffe9, 26),  // 219
    (0xffffffd, 28),  // 220
    (0x7ffffe3, 27),  // 221
    (0x7ffffe4, 27),  // 222
    (0x7ffffe5, 27),  // 223
    (0xfffec, 20),    // 224
    (0xfffff3, 24),   // 225
    (0xfffed, 20),    // 226
    (0x1fffe6, 21),   // 227
    (0x3fffe9, 22),   // 228
    (0x1fffe7, 21),   // 229
    (0x1fffe8, 21),   // 230
    (0x7ffff3, 23),   // 231
    (0x3fffea, 22),   // 232
    (0x3fffeb, 22),   // 233
    (0x1ffffee, 25),  // 234
    (0x1ffffef, 25),  // 235
    (0xfffff4, 24),   // 236
    (0xfffff5, 24),   // 237
    (0x3ffffea, 26),  // 238
    (0x7ffff4, 23),   // 239
    (0x3ffffeb, 26),  // 240
    (0x7ffffe6, 27),  // 241
    (0x3ffffec, 26),  // 242
    (0x3ffffed, 26),  // 243
    (0x7ffffe7, 27),  // 244
    (0x7ffffe8, 27),  // 245
    (0x7ffffe9, 27),  // 246
    (0x7ffffea, 27),  // 247
    (0x7ffffeb, 27),  // 248
    (0xffffffe, 28),  // 249
    (0x7ffffec, 27),  // 250
    (0x7ffffed, 27),  // 251
    (0x7ffffee, 27),  // 252
    (0x7ffffef, 27),  // 253
    (0x7fffff0, 27),  // 254
    (0x3ffffee, 26),  // 255
    (0x3fffffff, 30), // 256 EOS
];

const EOS: u16 = 256;
/// Longest code (EOS and a few control bytes).
const MAX_LEN: usize = 30;
/// Codes up to this length are found with one lookup in `PRIMARY`.
const PRIMARY_BITS: u32 = 8;

/// Why a Huffman-coded string is invalid (RFC 7541 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HuffmanError {
    /// The EOS symbol appears in the string.
    EosInString,
    /// More than 7 bits are left after the last symbol.
    PaddingTooLong,
    /// The bits left after the last symbol are not a prefix of EOS (all ones).
    PaddingNotEos,
}

/// For each value of the next 8 input bits: `length << 8 | symbol` of the code they start
/// with when that code is at most 8 bits long, else 0.
static PRIMARY: [u16; 256] = build_primary();

const fn build_primary() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut sym = 0;
    while sym < 256 {
        let (code, len) = CODES[sym];
        if len as u32 <= PRIMARY_BITS {
            let free = PRIMARY_BITS - len as u32;
            let base = (code << free) as usize;
            let mut low = 0;
            while low < 1 << free {
                table[base + low] = (len as u16) << 8 | sym as u16;
                low += 1;
            }
        }
        sym += 1;
    }
    table
}

/// Per-length tables of the canonical code.
struct Canonical {
    /// Code of the first symbol of each length.
    first: [u32; MAX_LEN + 1],
    /// Number of symbols of each length.
    count: [u32; MAX_LEN + 1],
    /// Position in `sorted` of the first symbol of each length.
    offset: [u16; MAX_LEN + 1],
    /// Every symbol, in `(length, symbol)` order.
    sorted: [u16; 257],
}

static CANONICAL: Canonical = build_canonical();

const fn build_canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        sorted: [0; 257],
    };
    let mut n = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        c.offset[len] = n as u16;
        let mut sym = 0;
        while sym < 257 {
            if CODES[sym].1 as usize == len {
                if c.count[len] == 0 {
                    c.first[len] = CODES[sym].0;
                }
                c.count[len] += 1;
                c.sorted[n] = sym as u16;
                n += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    c
}

/// Whether `CODES` is the canonical code that `CANONICAL` describes: lengths within
/// 1..=30, the codes of each length consecutive in symbol order, each length's first code
/// right after the previous length's last one (shifted to the new length), starting at
/// 0 and ending at all ones (a complete code: every bit string starts with some code).
const fn is_canonical() -> bool {
    let c = build_canonical();
    let mut sym = 0;
    while sym < 257 {
        let len = CODES[sym].1 as usize;
        if len == 0 || len > MAX_LEN {
            return false;
        }
        sym += 1;
    }
    // `next` is the code the next symbol must have, at length `next_len`.
    let mut next: u64 = 0;
    let mut next_len = 0;
    let mut len = 1;
    while len <= MAX_LEN {
        if c.count[len] > 0 {
            next <<= len - next_len;
            next_len = len;
            let mut k = 0;
            while k < c.count[len] as usize {
                let sym = c.sorted[c.offset[len] as usize + k] as usize;
                if CODES[sym].0 as u64 != next {
                    return false;
                }
                next += 1;
                k += 1;
            }
        }
        len += 1;
    }
    next == 1 << MAX_LEN && next_len == MAX_LEN && CODES[EOS as usize].0 == (1 << MAX_LEN) - 1
}

const _: () = assert!(is_canonical(), "the HPACK Huffman code must be canonical");

/// The code of more than `PRIMARY_BITS` bits at the top of `window`, which holds `avail`
/// valid bits: `(symbol, length)`, or `None` when the valid bits end inside the code.
#[inline(never)]
fn decode_long(window: u64, avail: u32) -> Option<(u16, u32)> {
    let c = &CANONICAL;
    let mut len = PRIMARY_BITS as usize + 1;
    while len <= MAX_LEN {
        if len as u32 > avail {
            return None;
        }
        let code = (window >> (64 - len)) as u32;
        let k = code.wrapping_sub(c.first[len]);
        if k < c.count[len] {
            let at = c.offset[len] as usize + k as usize;
            return c.sorted.get(at).map(|&sym| (sym, len as u32));
        }
        len += 1;
    }
    None
}

/// Tops up `window` (whose top `avail` bits are valid) from `rest`: to at least 57 valid
/// bits, or to the end of the input.
#[inline(always)]
fn refill(window: &mut u64, avail: &mut u32, rest: &mut &[u8]) {
    if let Some(chunk) = rest.first_chunk::<8>() {
        // The next 8 octets go right after the valid bits; the whole ones that fit become
        // valid. The part of the next octet that also lands in the window is the same bits
        // that the following refill puts there again.
        *window |= u64::from_be_bytes(*chunk) >> *avail;
        let whole = (63 - *avail) / 8;
        *rest = rest.get(whole as usize..).unwrap_or_default();
        *avail += whole * 8;
        return;
    }
    while *avail <= 56 {
        let Some((&byte, tail)) = rest.split_first() else {
            break;
        };
        *window |= u64::from(byte) << (56 - *avail);
        *avail += 8;
        *rest = tail;
    }
}

/// Decodes the Huffman-coded `src`, appending the octets to `out`.
pub(crate) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    // The shortest code is 5 bits.
    out.reserve(src.len().saturating_mul(8) / 5);
    // Input bits, the next one in bit 63; the top `avail` of them are valid.
    let mut window: u64 = 0;
    let mut avail: u32 = 0;
    let mut rest = src;
    loop {
        if avail < MAX_LEN as u32 {
            refill(&mut window, &mut avail, &mut rest);
        }
        // With at least 30 valid bits a complete code always matches, so the end of the
        // input is the only place where the loop stops without one.
        let entry = PRIMARY[(window >> 56) as usize];
        let (sym, len) = if entry != 0 {
            (entry & 0xff, u32::from(entry >> 8))
        } else {
            match decode_long(window, avail) {
                Some(found) => found,
                None => break,
            }
        };
        if len > avail {
            break;
        }
        if sym == EOS {
            return Err(HuffmanError::EosInString);
        }
        out.push(sym as u8);
        window <<= len;
        avail -= len;
    }
    // What is left is padding: at most 7 bits, all ones (the start of EOS).
    if avail > 7 {
        return Err(HuffmanError::PaddingTooLong);
    }
    let ones = !(u64::MAX >> avail);
    if window & ones != ones {
        return Err(HuffmanError::PaddingNotEos);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A straightforward encoder for the tests (the padding is the start of EOS).
    pub(crate) fn encode(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut acc: u64 = 0;
        let mut bits = 0;
        for &b in src {
            let (code, len) = CODES[b as usize];
            acc = acc << len | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            out.push((acc << (8 - bits)) as u8 | (0xff >> bits));
        }
        out
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decoded(src: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    #[test]
    fn code_is_canonical_and_complete() {
        assert!(is_canonical());
        // Kraft sum of a complete prefix code is exactly 1.
        let kraft: u64 = CODES.iter().map(|&(_, len)| 1u64 << (30 - len)).sum();
        assert_eq!(kraft, 1 << 30);
        // Spot checks against RFC 7541 Appendix B.
        assert_eq!(CODES[b'0' as usize], (0x0, 5));
        assert_eq!(CODES[b' ' as usize], (0x14, 6));
        assert_eq!(CODES[b'a' as usize], (0x3, 5));
        assert_eq!(CODES[255], (0x3ffffee, 26));
        assert_eq!(CODES[256], (0x3fffffff, 30));
    }

    #[test]
    fn rfc7541_strings() {
        // RFC 7541 C.4.1, C.4.2, C.4.3, C.6.1.
        let cases: [(&str, &[u8]); 7] = [
            ("f1e3c2e5f23a6ba0ab90f4ff", b"www.example.com"),
            ("a8eb10649cbf", b"no-cache"),
            ("25a849e95ba97d7f", b"custom-key"),
            ("25a849e95bb8e8b4bf", b"custom-value"),
            ("6402", b"302"),
            ("aec3771a4b", b"private"),
            (
                "d07abe941054d444a8200595040b8166e082a62d1bff",
                b"Mon, 21 Oct 2013 20:13:21 GMT",
            ),
        ];
        for (coded, plain) in cases {
            assert_eq!(decoded(&hex(coded)).unwrap(), plain);
            assert_eq!(encode(plain), hex(coded));
        }
    }

    #[test]
    fn every_symbol_alone_and_all_together() {
        for b in 0..=255u8 {
            assert_eq!(decoded(&encode(&[b])).unwrap(), [b], "symbol {b}");
        }
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        assert_eq!(decoded(&encode(&all)).unwrap(), all);
        assert_eq!(decoded(&[]).unwrap(), b"");
    }

    #[test]
    fn rejects_eos_and_bad_padding() {
        // EOS alone (30 ones + 2 padding ones).
        assert_eq!(decoded(&[0xff; 4]), Err(HuffmanError::EosInString));
        // 'a' (00011) then 27 ones: not yet EOS, but too much padding; 35 ones: EOS.
        let mut eos_after_a = vec![0b0001_1111, 0xff, 0xff, 0xff];
        assert_eq!(decoded(&eos_after_a), Err(HuffmanError::PaddingTooLong));
        eos_after_a.push(0xff);
        assert_eq!(decoded(&eos_after_a), Err(HuffmanError::EosInString));
        // A byte of ones: 8 bits of padding.
        assert_eq!(decoded(&[0xff]), Err(HuffmanError::PaddingTooLong));
        // '0' (00000) followed by a byte of ones: 11 bits of padding.
        assert_eq!(
            decoded(&[0b0000_0111, 0xff]),
            Err(HuffmanError::PaddingTooLong)
        );
        // 'a' (00011) padded with 0s.
        assert_eq!(decoded(&[0b0001_1000]), Err(HuffmanError::PaddingNotEos));
        // 'a' padded with 110.
        assert_eq!(decoded(&[0b0001_1110]), Err(HuffmanError::PaddingNotEos));
        // 'a' correctly padded with 111.
        assert_eq!(decoded(&[0b0001_1111]).unwrap(), b"a");
        // '0' '0' (10 bits) + 6 ones: fine; with 0s in the padding: not.
        assert_eq!(decoded(&[0x00, 0x3f]).unwrap(), b"00");
        assert_eq!(decoded(&[0x00, 0x3e]), Err(HuffmanError::PaddingNotEos));
        // Codes cut short: 16 ones, and 'a' followed by 19 ones, are longer than 7 bits of
        // padding and no code.
        assert_eq!(decoded(&[0xff, 0xff]), Err(HuffmanError::PaddingTooLong));
        assert_eq!(
            decoded(&[0b0001_1111, 0xff, 0xff]),
            Err(HuffmanError::PaddingTooLong)
        );
    }
}
