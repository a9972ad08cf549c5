//! A minimal PNG encoder for the lab's images: 8-bit RGB, not interlaced, every scanline
//! with filter type 0 (None), and the image data in zlib *stored* (uncompressed) deflate
//! blocks.
//!
//! Stored blocks make the file size a function of the dimensions alone
//! ([`encoded_len`]), so an image of a wanted size is a matter of choosing its dimensions,
//! and the bytes need no compressor. The result is a valid PNG that browsers decode and
//! paint (what Largest Contentful Paint needs), whatever the pixel bytes are.

/// The eight bytes every PNG file starts with (PNG specification, section 5.2).
pub(crate) const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// Bytes per pixel of 8-bit RGB (colour type 2, bit depth 8).
pub(crate) const BYTES_PER_PIXEL: usize = 3;

/// PNG colour type 2: truecolour (RGB) (PNG specification, section 11.2.2).
const COLOUR_TYPE_RGB: u8 = 2;

/// Bits per sample.
const BIT_DEPTH: u8 = 8;

/// Filter type 0 (None), the byte that starts each scanline (section 9.2).
const FILTER_NONE: u8 = 0;

/// Data length of a chunk's length, type and CRC fields together (section 5.3).
const CHUNK_OVERHEAD: usize = 12;

/// Length of the IHDR chunk's data (section 11.2.2).
const IHDR_LEN: usize = 13;

/// The zlib header for deflate with a 32 KiB window and no preset dictionary (RFC 1950:
/// CMF 0x78; FLG 0x01 makes `CMF * 256 + FLG` a multiple of 31).
const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];

/// Largest payload of one stored deflate block (RFC 1951 section 3.2.4: LEN is 16 bits).
const STORED_BLOCK_MAX: usize = 65_535;

/// Per stored block: the header byte (BFINAL, BTYPE 00), then LEN and NLEN.
const STORED_BLOCK_OVERHEAD: usize = 5;

/// The Adler-32 checksum that ends a zlib stream (RFC 1950).
const ADLER_LEN: usize = 4;

/// Adler-32's modulus, the largest prime below 2^16 (RFC 1950 section 8.2).
const ADLER_MOD: u32 = 65_521;

/// The reflected CRC-32 polynomial PNG uses (ISO 3309 / ITU-T V.42; PNG section 5.5).
const CRC_POLYNOMIAL: u32 = 0xedb8_8320;

/// CRC-32 of each byte value, computed at compile time.
const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 {
                CRC_POLYNOMIAL ^ (c >> 1)
            } else {
                c >> 1
            };
            bit += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

/// CRC-32 as PNG computes it over a chunk's type and data.
pub(crate) fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = u32::MAX;
    for part in parts {
        for &byte in *part {
            crc = CRC_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
        }
    }
    crc ^ u32::MAX
}

/// Adler-32 of `data` (RFC 1950 section 8.2).
pub(crate) fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % ADLER_MOD;
        b = (b + a) % ADLER_MOD;
    }
    (b << 16) | a
}

/// Length of one scanline of the image data: its filter byte and its pixels.
fn scanline_len(width: u32) -> usize {
    1 + width as usize * BYTES_PER_PIXEL
}

/// Size in bytes of the file [`encode_rgb`] writes for a `width` x `height` image.
pub(crate) fn encoded_len(width: u32, height: u32) -> usize {
    let raw = scanline_len(width) * height as usize;
    let blocks = raw.div_ceil(STORED_BLOCK_MAX).max(1);
    let zlib = ZLIB_HEADER.len() + raw + blocks * STORED_BLOCK_OVERHEAD + ADLER_LEN;
    SIGNATURE.len() + (CHUNK_OVERHEAD + IHDR_LEN) + (CHUNK_OVERHEAD + zlib) + CHUNK_OVERHEAD
}

/// A PNG file of a `width` x `height` RGB image whose pixels are `pixels` (row by row, three
/// bytes each: `width * height * 3` bytes), or `None` when the length does not match or
/// a dimension is 0.
pub(crate) fn encode_rgb(width: u32, height: u32, pixels: &[u8]) -> Option<Vec<u8>> {
    let row = width as usize * BYTES_PER_PIXEL;
    if width == 0 || height == 0 || pixels.len() != row * height as usize {
        return None;
    }
    let mut file = Vec::with_capacity(encoded_len(width, height));
    file.extend_from_slice(&SIGNATURE);
    write_chunk(&mut file, b"IHDR", &ihdr(width, height));
    write_chunk(&mut file, b"IDAT", &zlib_stored(&scanlines(pixels, row)));
    write_chunk(&mut file, b"IEND", &[]);
    Some(file)
}

/// The IHDR chunk's data: dimensions, 8-bit RGB, deflate, adaptive filtering (method 0),
/// no interlace.
fn ihdr(width: u32, height: u32) -> [u8; IHDR_LEN] {
    let mut data = [0u8; IHDR_LEN];
    data[..4].copy_from_slice(&width.to_be_bytes());
    data[4..8].copy_from_slice(&height.to_be_bytes());
    data[8] = BIT_DEPTH;
    data[9] = COLOUR_TYPE_RGB;
    // Compression method 0, filter method 0, interlace method 0 (none): already zero.
    data
}

/// The image data before compression: each row of `pixels` (`row` bytes) after a filter
/// byte.
fn scanlines(pixels: &[u8], row: usize) -> Vec<u8> {
    let mut raw = Vec::with_capacity(pixels.len() + pixels.len() / row);
    for line in pixels.chunks(row) {
        raw.push(FILTER_NONE);
        raw.extend_from_slice(line);
    }
    raw
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let blocks = data.len().div_ceil(STORED_BLOCK_MAX).max(1);
    let mut out = Vec::with_capacity(
        ZLIB_HEADER.len() + data.len() + blocks * STORED_BLOCK_OVERHEAD + ADLER_LEN,
    );
    out.extend_from_slice(&ZLIB_HEADER);
    let mut chunks = data.chunks(STORED_BLOCK_MAX).peekable();
    if chunks.peek().is_none() {
        // An empty stream still needs one (final, empty) block.
        write_stored_block(&mut out, &[], true);
    }
    while let Some(chunk) = chunks.next() {
        write_stored_block(&mut out, chunk, chunks.peek().is_none());
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

/// One stored block: BFINAL and BTYPE 00 in the first byte (the rest of it is padding to
/// the byte boundary), LEN and its one's complement NLEN little-endian, then the bytes.
fn write_stored_block(out: &mut Vec<u8>, chunk: &[u8], last: bool) {
    // `chunk` comes from `chunks(STORED_BLOCK_MAX)`, so its length fits 16 bits.
    let len = chunk.len() as u16;
    out.push(u8::from(last));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(chunk);
}

/// A chunk: data length (big-endian), type, data, CRC-32 of type and data.
fn write_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    // Our chunks are at most a few MiB, far below PNG's 2^31 - 1 limit.
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoded chunk: its type and data.
    struct Chunk<'a> {
        kind: &'a [u8],
        data: &'a [u8],
    }

    /// Splits a PNG file into its chunks, checking the signature and every CRC.
    fn chunks(file: &[u8]) -> Vec<Chunk<'_>> {
        assert_eq!(file[..8], SIGNATURE, "signature");
        let mut rest = &file[8..];
        let mut chunks = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let (kind, data) = (&rest[4..8], &rest[8..8 + len]);
            let crc = u32::from_be_bytes(rest[8 + len..12 + len].try_into().unwrap());
            assert_eq!(crc, crc32(&[kind, data]), "CRC of {:?}", kind);
            chunks.push(Chunk { kind, data });
            rest = &rest[12 + len..];
        }
        chunks
    }

    /// The bytes of a zlib stream of stored blocks, checking its header and Adler-32.
    fn inflate_stored(stream: &[u8]) -> Vec<u8> {
        assert_eq!(stream[..2], ZLIB_HEADER);
        assert_eq!(u16::from_be_bytes([stream[0], stream[1]]) % 31, 0, "FCHECK");
        let mut at = 2;
        let mut data = Vec::new();
        loop {
            let header = stream[at];
            assert_eq!(header & 0b110, 0, "BTYPE 00 (stored)");
            let len = u16::from_le_bytes([stream[at + 1], stream[at + 2]]);
            let nlen = u16::from_le_bytes([stream[at + 3], stream[at + 4]]);
            assert_eq!(len, !nlen, "NLEN");
            at += STORED_BLOCK_OVERHEAD;
            data.extend_from_slice(&stream[at..at + usize::from(len)]);
            at += usize::from(len);
            if header & 1 == 1 {
                break;
            }
        }
        let adler = u32::from_be_bytes(stream[at..at + 4].try_into().unwrap());
        assert_eq!(adler, adler32(&data), "Adler-32");
        assert_eq!(at + 4, stream.len(), "bytes after the Adler-32");
        data
    }

    #[test]
    fn checksums_match_reference_values() {
        // The CRC-32 check value of the catalogue of parametrised CRCs, and Adler-32's
        // well-known example.
        assert_eq!(crc32(&[b"123456789"]), 0xcbf4_3926);
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xcbf4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        // IEND's CRC as every PNG file ends with it.
        assert_eq!(crc32(&[b"IEND"]), 0xae42_6082);
    }

    #[test]
    fn encodes_a_decodable_rgb_image() {
        let (width, height) = (300u32, 250u32);
        let pixels: Vec<u8> = (0..width * height * 3)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let file = encode_rgb(width, height, &pixels).unwrap();
        assert_eq!(file.len(), encoded_len(width, height));

        let chunks = chunks(&file);
        let kinds: Vec<&[u8]> = chunks.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [&b"IHDR"[..], b"IDAT", b"IEND"]);
        let ihdr = chunks[0].data;
        assert_eq!(ihdr[..4], width.to_be_bytes());
        assert_eq!(ihdr[4..8], height.to_be_bytes());
        assert_eq!(ihdr[8..], [8, 2, 0, 0, 0]);
        assert!(chunks[2].data.is_empty());

        let raw = inflate_stored(chunks[1].data);
        let row = width as usize * 3;
        assert_eq!(raw.len(), (row + 1) * height as usize);
        for (line, expected) in raw.chunks(row + 1).zip(pixels.chunks(row)) {
            assert_eq!(line[0], FILTER_NONE);
            assert_eq!(&line[1..], expected);
        }
    }

    #[test]
    fn splits_large_images_into_stored_blocks() {
        // 3 * 200 * 200 + 200 bytes: two full blocks and a partial one.
        let (width, height) = (200u32, 200u32);
        let pixels = vec![0xa5; (width * height * 3) as usize];
        let file = encode_rgb(width, height, &pixels).unwrap();
        assert_eq!(file.len(), encoded_len(width, height));
        let raw = inflate_stored(chunks(&file)[1].data);
        assert_eq!(raw.len(), 120_200);
    }

    #[test]
    fn rejects_mismatched_pixels() {
        assert!(encode_rgb(2, 2, &[0; 11]).is_none());
        assert!(encode_rgb(0, 2, &[]).is_none());
    }
}
