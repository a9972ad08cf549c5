//! RFC 7541 Appendix C vectors, error cases and `priority` extraction.

use super::decoder::Error;
use super::huffman::HuffmanError;
use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn owned(fields: &[(&str, &str)]) -> Fields {
    fields
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// The dynamic table (newest first) and its size.
fn table_of(d: &PassiveDecoder) -> (Fields, usize) {
    let t = d.context().expect("decoder enabled").table();
    let entries = (0..t.len())
        .map(|i| {
            let (n, v) = t.get(i).unwrap();
            (n.to_vec(), v.to_vec())
        })
        .collect();
    (entries, t.size())
}

fn decoder() -> PassiveDecoder {
    PassiveDecoder::new("test", ConnectionStats::default())
}

fn decoder_256() -> PassiveDecoder {
    PassiveDecoder::with_table_size("test", ConnectionStats::default(), 256)
}

/// One step of an Appendix C example: a block, its header list, the table after it.
struct Step {
    block: &'static str,
    fields: &'static [(&'static str, &'static str)],
    table: &'static [(&'static str, &'static str)],
    size: usize,
}

/// Runs the steps on `d` and on loona-hpack (as a cross-check of the vectors themselves).
fn run(mut d: PassiveDecoder, mut loona: loona_hpack::Decoder<'static>, steps: &[Step]) {
    for (i, step) in steps.iter().enumerate() {
        let block = hex(step.block);
        let want = owned(step.fields);
        assert_eq!(d.fields(&block).as_ref(), Some(&want), "step {i}");
        assert_eq!(table_of(&d), (owned(step.table), step.size), "step {i}");
        assert_eq!(loona.decode(&block).unwrap(), want, "loona, step {i}");
    }
}

fn loona_with_size(size: usize) -> loona_hpack::Decoder<'static> {
    let mut loona = loona_hpack::Decoder::new();
    loona.set_max_allowed_table_size(MAX_TABLE_SIZE);
    loona.set_max_table_size(size);
    loona
}

const AUTHORITY: (&str, &str) = (":authority", "www.example.com");
const NO_CACHE: (&str, &str) = ("cache-control", "no-cache");
const CUSTOM: (&str, &str) = ("custom-key", "custom-value");

/// RFC 7541 C.3 and C.4: the same requests without and with Huffman coding.
fn requests(blocks: [&'static str; 3]) -> [Step; 3] {
    [
        Step {
            block: blocks[0],
            fields: &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                AUTHORITY,
            ],
            table: &[AUTHORITY],
            size: 57,
        },
        Step {
            block: blocks[1],
            fields: &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                AUTHORITY,
                NO_CACHE,
            ],
            table: &[NO_CACHE, AUTHORITY],
            size: 110,
        },
        Step {
            block: blocks[2],
            fields: &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                AUTHORITY,
                CUSTOM,
            ],
            table: &[CUSTOM, NO_CACHE, AUTHORITY],
            size: 164,
        },
    ]
}

const LOCATION: (&str, &str) = ("location", "https://www.example.com");
const DATE_21: (&str, &str) = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
const DATE_22: (&str, &str) = ("date", "Mon, 21 Oct 2013 20:13:22 GMT");
const PRIVATE: (&str, &str) = ("cache-control", "private");
const COOKIE: (&str, &str) = (
    "set-cookie",
    "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
);

/// RFC 7541 C.5 and C.6: the same responses without and with Huffman coding, with a
/// 256-octet table, so entries are evicted.
fn responses(blocks: [&'static str; 3]) -> [Step; 3] {
    [
        Step {
            block: blocks[0],
            fields: &[(":status", "302"), PRIVATE, DATE_21, LOCATION],
            table: &[LOCATION, DATE_21, PRIVATE, (":status", "302")],
            size: 222,
        },
        Step {
            block: blocks[1],
            fields: &[(":status", "307"), PRIVATE, DATE_21, LOCATION],
            table: &[(":status", "307"), LOCATION, DATE_21, PRIVATE],
            size: 222,
        },
        Step {
            block: blocks[2],
            fields: &[
                (":status", "200"),
                PRIVATE,
                DATE_22,
                LOCATION,
                ("content-encoding", "gzip"),
                COOKIE,
            ],
            table: &[COOKIE, ("content-encoding", "gzip"), DATE_22],
            size: 215,
        },
    ]
}

const C3: [&str; 3] = [
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
];

const C4: [&str; 3] = [
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
];

const C5: [&str; 3] = [
    "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a32
     3120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
    "4803333037c1c0bf",
    "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a6970
     7738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d61
     67653d333630303b2076657273696f6e3d31",
];

const C6: [&str; 3] = [
    "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad
     171863c78f0b97c8e9ae82ae43d3",
    "4883640effc1c0bf",
    "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2
     e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
];

#[test]
fn rfc7541_c2_field_representations() {
    // C.2.1: literal with indexing.
    let mut d = decoder();
    let block = hex("400a637573746f6d2d6b65790d637573746f6d2d686561646572");
    assert_eq!(
        d.fields(&block),
        Some(owned(&[("custom-key", "custom-header")]))
    );
    assert_eq!(
        table_of(&d),
        (owned(&[("custom-key", "custom-header")]), 55)
    );
    // C.2.2: literal without indexing.
    let mut d = decoder();
    let block = hex("040c2f73616d706c652f70617468");
    assert_eq!(d.fields(&block), Some(owned(&[(":path", "/sample/path")])));
    assert_eq!(table_of(&d), (vec![], 0));
    // C.2.3: literal never indexed.
    let mut d = decoder();
    let block = hex("100870617373776f726406736563726574");
    assert_eq!(d.fields(&block), Some(owned(&[("password", "secret")])));
    assert_eq!(table_of(&d), (vec![], 0));
    // C.2.4: indexed.
    let mut d = decoder();
    assert_eq!(d.fields(&[0x82]), Some(owned(&[(":method", "GET")])));
    assert_eq!(table_of(&d), (vec![], 0));
}

#[test]
fn rfc7541_c3_requests_without_huffman() {
    run(decoder(), loona_with_size(4096), &requests(C3));
}

#[test]
fn rfc7541_c4_requests_with_huffman() {
    run(decoder(), loona_with_size(4096), &requests(C4));
}

#[test]
fn rfc7541_c5_responses_without_huffman() {
    run(decoder_256(), loona_with_size(256), &responses(C5));
}

#[test]
fn rfc7541_c6_responses_with_huffman() {
    run(decoder_256(), loona_with_size(256), &responses(C6));
}

#[test]
fn rfc7541_c5_c6_with_a_size_update() {
    // The same, starting from the default 4096 octets, with a size update to 256
    // (0x3f 0xe1 0x01) opening the first block.
    for blocks in [C5, C6] {
        let mut steps = responses(blocks);
        let first = format!("3fe101{}", steps[0].block);
        steps[0].block = Box::leak(first.into_boxed_str());
        run(decoder(), loona_with_size(4096), &steps);
    }
}

#[test]
fn decodes_rfc7541_c3_requests_in_sequence() {
    // RFC 7541 C.3: three requests without Huffman coding, sharing the dynamic table.
    let mut d = decoder();
    for b in C3 {
        assert_eq!(d.priority_value(&hex(b)), Some(None));
    }
}

#[test]
fn failure_disables_and_counts() {
    let stats = ConnectionStats::default();
    let mut d = PassiveDecoder::new("test", stats.clone());
    // Indexed field 0x7f+ far beyond both tables.
    assert_eq!(d.priority_value(&[0xff, 0xff, 0x7f]), None);
    assert!(!d.is_enabled());
    assert_eq!(d.priority_value(&[0x82]), None);
    assert_eq!(stats.snapshot().hpack_failures, 1);
    d.give_up("again");
    assert_eq!(stats.snapshot().hpack_failures, 1);
}

/// A 4000-byte `priority` value in the dynamic table, then a block of 16,000 one-byte
/// references to it: the observer keeps at most `MAX_PRIORITY_VALUE` bytes, counts the
/// block as too long, and keeps decoding later blocks.
#[test]
fn referenced_values_are_capped_not_copied() {
    let stats = ConnectionStats::default();
    let mut d = PassiveDecoder::new("test", stats.clone());
    let value = vec![b'a'; 4000];
    let mut insert = vec![0x82, 0x40, 0x08];
    insert.extend(b"priority");
    // 4000 = 127 + 3873: string length with a 7-bit prefix.
    insert.extend([0x7f, 0xa1, 0x1e]);
    insert.extend(&value);
    assert_eq!(
        d.priority_value(&insert),
        Some(Some(b"<too long>".to_vec()))
    );
    let mut amplify = vec![0x82];
    amplify.extend(std::iter::repeat_n(0xbe, 16_000));
    assert_eq!(
        d.priority_value(&amplify),
        Some(Some(b"<too long>".to_vec()))
    );
    assert!(d.priority.capacity() <= super::MAX_PRIORITY_VALUE * 2);
    assert_eq!(stats.snapshot().priority_values_too_long, 2);
    // Lines are joined up to the cap, and short ones still work.
    let mut two = vec![0x82, 0x00, 0x08];
    two.extend(b"priority");
    two.extend([0x03]);
    two.extend(b"u=1");
    two.extend([0x00, 0x08]);
    two.extend(b"priority");
    two.extend([0x01, b'i']);
    assert_eq!(d.priority_value(&two), Some(Some(b"u=1, i".to_vec())));
    assert_eq!(stats.snapshot().hpack_failures, 0);
}

/// A literal field line without indexing, `name: value` (both short).
fn line(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x00, name.len() as u8];
    out.extend(name);
    out.push(value.len() as u8);
    out.extend(value);
    out
}

#[test]
fn content_length_is_read_when_one_line_holds_a_number() {
    let mut d = decoder();
    let length = |d: &mut PassiveDecoder, lines: &[Vec<u8>]| {
        let mut block = vec![0x88];
        lines.iter().for_each(|l| block.extend(l));
        d.head_fields(&block).map(|(_, length)| length)
    };
    let cl = |v: &[u8]| line(b"content-length", v);
    assert_eq!(length(&mut d, &[cl(b"4096")]), Some(Some(4096)));
    assert_eq!(length(&mut d, &[]), Some(None), "absent");
    assert_eq!(
        length(&mut d, &[cl(b"4096"), cl(b"4096")]),
        Some(None),
        "two lines"
    );
    assert_eq!(length(&mut d, &[cl(b"-1")]), Some(None), "not a number");
    assert_eq!(length(&mut d, &[cl(b"")]), Some(None), "empty");
    assert_eq!(
        length(&mut d, &[cl(b"99999999999999999999999")]),
        Some(None),
        "too large"
    );
    // The priority field comes with it.
    let mut block = vec![0x88];
    block.extend(cl(b"10"));
    block.extend(line(b"priority", b"u=1"));
    let (priority, length) = d.head_fields(&block).unwrap();
    assert!(matches!(priority, PriorityField::Value(b"u=1")));
    assert_eq!(length, Some(10));
}

/// Decodes `block` with a fresh decoder and returns the error.
fn error_of(block: &[u8]) -> Error {
    let mut d = super::decoder::Decoder::new(INITIAL_TABLE_SIZE, MAX_TABLE_SIZE);
    d.decode(block, |_, _| {}).unwrap_err()
}

#[test]
fn integers() {
    let mut d = decoder();
    // 127 with a redundant continuation octet: decoded, and past the tables.
    assert_eq!(error_of(&[0xff, 0x80, 0x00]), Error::IndexOutOfRange(127));
    // RFC 7541 C.1.2 (1337 with a 5-bit prefix) as a size update: 1337 is allowed.
    assert_eq!(
        d.fields(&[0x3f, 0x9a, 0x0a, 0x82]),
        Some(owned(&[(":method", "GET")]))
    );
    assert_eq!(d.context().unwrap().table().max_size(), 1337);
    // Truncated: no octet after a full prefix, or a continuation bit on the last octet.
    assert_eq!(error_of(&[0xff]), Error::IntegerTruncated);
    assert_eq!(error_of(&[0xff, 0x80]), Error::IntegerTruncated);
    assert_eq!(error_of(&[0x40]), Error::IntegerTruncated);
    assert_eq!(error_of(&[0x3f]), Error::IntegerTruncated);
    // Four continuation octets is the most: 127 + (2^28 - 1).
    assert_eq!(
        error_of(&[0xff, 0xff, 0xff, 0xff, 0x7f]),
        Error::IndexOutOfRange(127 + (1 << 28) - 1)
    );
    assert_eq!(
        error_of(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x00]),
        Error::IntegerTooLong
    );
    assert_eq!(
        error_of(&[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        Error::IntegerTooLong
    );
    // A huge string length.
    assert_eq!(
        error_of(&[0x00, 0x7f, 0xff, 0xff, 0xff, 0x7f]),
        Error::StringTruncated
    );
}

#[test]
fn indexes() {
    assert_eq!(error_of(&[0x80]), Error::IndexZero);
    // 62 is the first dynamic entry: empty table.
    assert_eq!(error_of(&[0x80 | 62]), Error::IndexOutOfRange(62));
    assert_eq!(error_of(&[0xbe]), Error::IndexOutOfRange(62));
    // Literal names indexed past the tables, with and without indexing.
    assert_eq!(error_of(&[0x7e, 0x00]), Error::IndexOutOfRange(62));
    assert_eq!(error_of(&[0x0f, 0x2f, 0x00]), Error::IndexOutOfRange(62));
    assert_eq!(error_of(&[0x1f, 0x2f, 0x00]), Error::IndexOutOfRange(62));
    // 61 is the last static entry.
    let mut d = decoder();
    assert_eq!(
        d.fields(&[0x80 | 61]),
        Some(owned(&[("www-authenticate", "")]))
    );
    // One dynamic entry: 62 resolves, 63 does not.
    let mut d = decoder();
    let block = [&[0x40, 0x01, b'a', 0x01, b'b', 0xbe][..]].concat();
    assert_eq!(d.fields(&block), Some(owned(&[("a", "b"), ("a", "b")])));
    assert_eq!(d.fields(&[0xbf]), None);
}

#[test]
fn strings() {
    // A literal value longer than the block.
    assert_eq!(error_of(&[0x04, 0x05, b'/', b'a']), Error::StringTruncated);
    // The name's length is missing.
    assert_eq!(error_of(&[0x00]), Error::IntegerTruncated);
    // A value's length is missing.
    assert_eq!(error_of(&[0x04]), Error::IntegerTruncated);
    // Empty Huffman strings are fine: 0x80 is length 0 with H set.
    let mut d = decoder();
    assert_eq!(d.fields(&[0x00, 0x80, 0x80]), Some(owned(&[("", "")])));
    // Huffman errors.
    assert_eq!(
        error_of(&[0x04, 0x81, 0xff]),
        Error::Huffman(HuffmanError::PaddingTooLong)
    );
    assert_eq!(
        error_of(&[0x04, 0x81, 0x18]),
        Error::Huffman(HuffmanError::PaddingNotEos)
    );
    assert_eq!(
        error_of(&[0x04, 0x84, 0xff, 0xff, 0xff, 0xff]),
        Error::Huffman(HuffmanError::EosInString)
    );
}

#[test]
fn size_updates() {
    let mut d = decoder();
    // Two updates at the start are fine (RFC 7541 §4.2: the smallest, then the final).
    assert_eq!(
        d.fields(&[0x20, 0x3f, 0xe1, 0x1f, 0x82]).map(|f| f.len()),
        Some(1)
    );
    assert_eq!(d.context().unwrap().table().max_size(), 4096);
    // Up to 64 KiB: 65536 = 31 + 97 + 127 * 128 + 3 * 16384.
    let max = [0x3f, 0xe1, 0xff, 0x03, 0x82];
    assert_eq!(d.fields(&max).map(|f| f.len()), Some(1));
    assert_eq!(d.context().unwrap().table().max_size(), 65536);
    assert_eq!(
        error_of(&[0x3f, 0xe2, 0xff, 0x03, 0x82]),
        Error::SizeUpdateTooLarge(65537)
    );
    // After a field line, or at the end of a block.
    assert_eq!(error_of(&[0x82, 0x20, 0x84]), Error::SizeUpdateNotAtStart);
    assert_eq!(error_of(&[0x82, 0x20]), Error::SizeUpdateNotAtStart);
    assert_eq!(error_of(&[0x20]), Error::SizeUpdateAtEnd);
    assert_eq!(error_of(&[0x20, 0x3f, 0xe1, 0x1f]), Error::SizeUpdateAtEnd);
    // Shrinking evicts; 0 empties the table.
    let mut d = decoder();
    let block = [&[0x40, 0x01, b'a', 0x01, b'b', 0x40, 0x01, b'c', 0x01, b'd'][..]].concat();
    d.fields(&block).unwrap();
    assert_eq!(table_of(&d).1, 68);
    d.fields(&[0x3f, 0x03, 0x82]).unwrap(); // 34
    assert_eq!(table_of(&d), (owned(&[("c", "d")]), 34));
    d.fields(&[0x20, 0x82]).unwrap();
    assert_eq!(table_of(&d), (vec![], 0));
    // An empty block is fine (and changes nothing).
    assert_eq!(d.fields(&[]), Some(vec![]));
}

#[test]
fn literal_name_from_an_entry_it_evicts() {
    // Table of 40 octets holds one "a: b" (34). Inserting "a: bcd" with the name taken
    // from that entry (index 62) evicts it first (RFC 7541 §4.4).
    let mut d = PassiveDecoder::with_table_size("test", ConnectionStats::default(), 40);
    let block = [
        0x40, 0x01, b'a', 0x01, b'b', 0x7e, 0x03, b'b', b'c', b'd', 0xbe,
    ];
    assert_eq!(
        d.fields(&block),
        Some(owned(&[("a", "b"), ("a", "bcd"), ("a", "bcd")]))
    );
    assert_eq!(table_of(&d), (owned(&[("a", "bcd")]), 36));
}

#[test]
fn priority_fields_in_every_representation() {
    let mut d = decoder();
    let huffman_name = super::huffman::tests::encode(b"priority");
    let huffman_value = super::huffman::tests::encode(b"u=0, i");
    let mut block = vec![0x82, 0x87, 0x84];
    // Literal with indexing, raw.
    block.extend([0x40, 0x08]);
    block.extend(b"priority");
    block.extend([0x03]);
    block.extend(b"u=1");
    // Without indexing, Huffman name and value.
    block.push(0x00);
    block.push(0x80 | huffman_name.len() as u8);
    block.extend(&huffman_name);
    block.push(0x80 | huffman_value.len() as u8);
    block.extend(&huffman_value);
    // Never indexed, name from the dynamic table (62).
    block.extend([0x1f, 0x2f, 0x01, b'i']);
    // Not `priority`.
    block.extend([0x00, 0x09]);
    block.extend(b"priority2");
    block.extend([0x01, b'x']);
    assert_eq!(
        d.priority_value(&block),
        Some(Some(b"u=1, u=0, i, i".to_vec()))
    );
    // Indexed from the dynamic table in a later block.
    assert_eq!(d.priority_value(&[0x82, 0xbe]), Some(Some(b"u=1".to_vec())));
    assert_eq!(d.priority_value(&[0x82]), Some(None));
}

#[test]
fn the_decoding_context_is_made_at_the_first_block() {
    let mut d = PassiveDecoder::new("test", ConnectionStats::default());
    assert!(d.context().is_none(), "an idle connection keeps none");
    assert!(d.is_enabled());
    assert_eq!(
        d.fields(&[0x82]).unwrap(),
        vec![(b":method".to_vec(), b"GET".to_vec())]
    );
    assert!(d.context().is_some());
}
