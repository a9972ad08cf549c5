//! Just enough HPACK (RFC 7541) to write header blocks by hand: integers with a prefix,
//! string literals without Huffman coding, literal fields with or without indexing, static
//! table indices, and the request and response blocks the tests send.

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1); `first` holds the flag bits.
pub fn hpack_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// An HPACK string literal without Huffman coding (RFC 7541 §5.2).
pub fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A literal header field with a literal name: `0x00` without indexing (RFC 7541 §6.2.2),
/// `0x40` with incremental indexing (it then enters the dynamic table, on both sides).
pub fn literal(out: &mut Vec<u8>, indexing: bool, name: &[u8], value: &[u8]) {
    out.push(if indexing { 0x40 } else { 0x00 });
    hpack_string(out, name);
    hpack_string(out, value);
}

/// A request header block: `:method GET`, `:scheme https`, `:path /`, optional `priority`.
pub fn request_block(priority: Option<&[u8]>) -> Vec<u8> {
    let mut block = vec![0x82, 0x87, 0x84];
    if let Some(p) = priority {
        literal(&mut block, false, b"priority", p);
    }
    block
}

/// A response header block: `:status 200`, optional `priority`, and an `x-pad` header of
/// `pad` bytes when `pad > 0` (to make header blocks of various sizes).
pub fn response_block(priority: Option<&str>, pad: usize) -> Vec<u8> {
    let mut block = vec![0x88];
    if let Some(p) = priority {
        literal(&mut block, false, b"priority", p.as_bytes());
    }
    if pad > 0 {
        literal(&mut block, false, b"x-pad", &vec![b'p'; pad]);
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_rfc_7541_c_1() {
        let mut out = Vec::new();
        hpack_int(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        out.clear();
        hpack_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
        out.clear();
        hpack_int(&mut out, 0, 8, 42);
        assert_eq!(out, [42]);
    }
}
