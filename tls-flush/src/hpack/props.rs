//! Property and differential tests: the decoder never panics, agrees with loona-hpack on
//! any input (valid or not), and decodes what two independent encoders produce
//! (loona-hpack's, with raw strings and its own indexing choices, and hpack_codec's, with
//! Huffman coding and every literal form).

use hpack_codec::field::LiteralHeaderField;
use hpack_codec::literal::HpackString;
use hpack_codec::table::Index;
use proptest::prelude::*;
// The test kit's HPACK integer and string encoders, which the other tests and the attack
// client use too (pure byte helpers: that its tls-flush is a separate copy does not matter).
use tls_flush_testkit::{hpack_int, hpack_string};

use super::decoder::{Decoder, Error};
use super::huffman::{self, HuffmanError};
use super::*;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// hpack_codec's Huffman encoder (independent of our code table).
fn codec_huffman(data: &[u8]) -> Vec<u8> {
    match LiteralHeaderField::new(b"", data)
        .with_huffman_encoded_value()
        .value()
    {
        HpackString::Huffman(coded) => coded.to_vec(),
        HpackString::Plain(_) => unreachable!("asked for Huffman"),
    }
}

fn string(out: &mut Vec<u8>, s: &[u8], huffman: bool) {
    if huffman {
        let coded = codec_huffman(s);
        hpack_int(out, 0x80, 7, coded.len());
        out.extend(coded);
    } else {
        hpack_string(out, s);
    }
}

/// Decodes with our decoder, collecting every field.
fn ours(d: &mut Decoder, block: &[u8]) -> Result<Fields, Error> {
    let mut fields = Vec::new();
    d.decode(block, |n, v| fields.push((n.to_vec(), v.to_vec())))
        .map(|()| fields)
}

fn loona() -> loona_hpack::Decoder<'static> {
    let mut d = loona_hpack::Decoder::new();
    d.set_max_allowed_table_size(MAX_TABLE_SIZE);
    d
}

/// What `PassiveDecoder::priority_value` must return for `fields`.
fn priorities(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<Vec<u8>> {
    let lines: Vec<&[u8]> = fields
        .iter()
        .filter(|(n, _)| n == b"priority")
        .map(|(_, v)| v.as_slice())
        .collect();
    let joined = lines.join(&b", "[..]);
    match (lines.is_empty(), joined.len() > super::MAX_PRIORITY_VALUE) {
        (true, _) => None,
        (false, true) => Some(b"<too long>".to_vec()),
        (false, false) => Some(joined),
    }
}

/// Piece of a block, valid or not.
#[derive(Debug, Clone)]
enum Piece {
    Indexed(usize),
    Literal {
        form: u8,
        name_index: usize,
        name: Vec<u8>,
        name_huffman: bool,
        value: Vec<u8>,
        value_huffman: bool,
    },
    /// A literal whose value is arbitrary octets flagged as Huffman-coded.
    BadHuffman(Vec<u8>),
    SizeUpdate(usize),
    Raw(Vec<u8>),
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"priority".to_vec()),
        Just(b"x-a".to_vec()),
        Just(b"x-b".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"u=0".to_vec()),
        Just(b"u=5, i".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
        "[ -~]{0,40}".prop_map(String::into_bytes),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        6 => (1usize..62).prop_map(Piece::Indexed),
        3 => (62usize..66).prop_map(Piece::Indexed),
        1 => any::<u16>().prop_map(|i| Piece::Indexed(i.into())),
        10 => (0u8..3, 0usize..70, name(), any::<bool>(), value(), any::<bool>()).prop_map(
            |(form, name_index, name, name_huffman, value, value_huffman)| Piece::Literal {
                form,
                // Mostly literal names.
                name_index: name_index.saturating_sub(30),
                name,
                name_huffman,
                value,
                value_huffman,
            }
        ),
        1 => proptest::collection::vec(any::<u8>(), 0..6).prop_map(Piece::BadHuffman),
        1 => size_update(),
        1 => proptest::collection::vec(any::<u8>(), 0..6).prop_map(Piece::Raw),
    ]
}

fn size_update() -> impl Strategy<Value = Piece> {
    prop_oneof![0usize..300, 0usize..5000, 0usize..70_000].prop_map(Piece::SizeUpdate)
}

/// A block: maybe size updates, then pieces (mostly valid ones).
fn block() -> impl Strategy<Value = Vec<Piece>> {
    (
        proptest::collection::vec(size_update(), 0..3),
        proptest::collection::vec(piece(), 0..12),
    )
        .prop_map(|(mut updates, pieces)| {
            updates.extend(pieces);
            updates
        })
}

fn encode_pieces(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        match p {
            Piece::Indexed(i) => hpack_int(&mut out, 0x80, 7, *i),
            Piece::Literal {
                form,
                name_index,
                name,
                name_huffman,
                value,
                value_huffman,
            } => {
                let (first, prefix) = match form {
                    0 => (0x40, 6),
                    1 => (0x00, 4),
                    _ => (0x10, 4),
                };
                hpack_int(&mut out, first, prefix, *name_index);
                if *name_index == 0 {
                    string(&mut out, name, *name_huffman);
                }
                string(&mut out, value, *value_huffman);
            }
            Piece::BadHuffman(bytes) => {
                out.extend([0x00, 0x01, b'x']);
                hpack_int(&mut out, 0x80, 7, bytes.len());
                out.extend(bytes);
            }
            Piece::SizeUpdate(n) => hpack_int(&mut out, 0x20, 5, *n),
            Piece::Raw(bytes) => out.extend(bytes),
        }
    }
    out
}

/// Our decoder and loona-hpack on the same sequence of blocks: same fields while both
/// succeed, and the same verdict, except that we also refuse a size update after a field
/// line (RFC 7541 §4.2), which loona-hpack accepts.
fn agree_with_loona(blocks: &[Vec<u8>]) {
    let mut d = Decoder::new(INITIAL_TABLE_SIZE, MAX_TABLE_SIZE);
    let mut l = loona();
    for (i, block) in blocks.iter().enumerate() {
        match (ours(&mut d, block), l.decode(block)) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "block {i}: {block:02x?}"),
            (Err(_), Err(_)) | (Err(Error::SizeUpdateNotAtStart), Ok(_)) => return,
            (a, b) => panic!("block {i}: {block:02x?}: ours {a:?}, loona {b:?}"),
        }
    }
}

/// hpack_codec's encoder, told which form to use for each field.
fn codec_encode(
    enc: &mut hpack_codec::Encoder,
    fields: &[(Vec<u8>, Vec<u8>)],
    choices: &[(u8, bool, bool, bool)],
) -> Vec<u8> {
    let mut block = enc.enter_header_block(Vec::new()).unwrap();
    for ((name, value), &(form, huffman_name, huffman_value, use_index)) in
        fields.iter().zip(choices.iter().cycle())
    {
        // Look the field (or its name) up in the encoder's table.
        let (mut full, mut by_name) = (None, None);
        for i in 1..=block.table().len() {
            let index = Index::new(i).unwrap();
            let entry = block.table().get(index).unwrap();
            if entry.name() == &name[..] {
                by_name.get_or_insert(index);
                if entry.value() == &value[..] {
                    full.get_or_insert(index);
                }
            }
        }
        if let (Some(index), true) = (full, use_index) {
            block.encode_field(index).unwrap();
            continue;
        }
        let mut field = match (by_name, use_index) {
            (Some(index), true) => LiteralHeaderField::with_indexed_name(index, value),
            _ => LiteralHeaderField::new(name, value),
        };
        if huffman_name {
            field = field.with_huffman_encoded_name();
        }
        if huffman_value {
            field = field.with_huffman_encoded_value();
        }
        field = match form {
            0 => field.with_indexing(),
            1 => field,
            _ => field.never_indexed(),
        };
        block.encode_field(field).unwrap();
    }
    block.finish()
}

fn header_lists() -> impl Strategy<Value = Vec<Fields>> {
    let field = (
        prop_oneof![
            Just(b"priority".to_vec()),
            Just(b":path".to_vec()),
            Just(b"user-agent".to_vec()),
            Just(b"x-a".to_vec()),
            "[a-z-]{1,12}".prop_map(String::into_bytes),
        ],
        value(),
    );
    proptest::collection::vec(proptest::collection::vec(field, 0..10), 1..6)
}

proptest! {
    #[test]
    fn arbitrary_blocks_never_panic_and_agree_with_loona(
        blocks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..48), 1..6)
    ) {
        agree_with_loona(&blocks);
    }

    #[test]
    fn structured_blocks_agree_with_loona(
        blocks in proptest::collection::vec(block(), 1..6)
    ) {
        let blocks: Vec<Vec<u8>> = blocks.iter().map(|b| encode_pieces(b)).collect();
        agree_with_loona(&blocks);
    }

    #[test]
    fn huffman_agrees_with_loona(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
        let mut out = Vec::new();
        let got = huffman::decode(&bytes, &mut out).map(|()| out);
        let want = loona_hpack::huffman::HuffmanDecoder::new().decode(&bytes);
        use loona_hpack::huffman::HuffmanDecoderError as L;
        match (got, want) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(HuffmanError::EosInString), Err(L::EOSInString))
            | (Err(HuffmanError::PaddingTooLong), Err(L::PaddingTooLarge))
            | (Err(HuffmanError::PaddingNotEos), Err(L::InvalidPadding)) => {}
            (a, b) => prop_assert!(false, "{bytes:02x?}: ours {a:?}, loona {b:?}"),
        }
    }

    #[test]
    fn huffman_round_trips_through_an_independent_encoder(
        data in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        let coded = codec_huffman(&data);
        prop_assert_eq!(&huffman::tests::encode(&data), &coded);
        let mut out = Vec::new();
        huffman::decode(&coded, &mut out).unwrap();
        prop_assert_eq!(out, data);
    }

    #[test]
    fn round_trips_loona_encoder_with_size_updates(
        lists in header_lists(),
        sizes in proptest::collection::vec(prop_oneof![Just(None), (0usize..5000).prop_map(Some)], 6),
    ) {
        let mut enc = loona_hpack::Encoder::new();
        let mut d = PassiveDecoder::new("test", ConnectionStats::default());
        for (fields, size) in lists.iter().zip(&sizes) {
            let mut block = Vec::new();
            if let Some(size) = *size {
                enc.set_max_table_size(size);
                hpack_int(&mut block, 0x20, 5, size);
            }
            block.extend(enc.encode(fields.iter().map(|(n, v)| (&n[..], &v[..]))));
            // A block with nothing but the size update is refused; add a field.
            if fields.is_empty() {
                block.push(0x82);
            }
            let mut want = fields.clone();
            if fields.is_empty() {
                want.push((b":method".to_vec(), b"GET".to_vec()));
            }
            prop_assert_eq!(d.fields(&block), Some(want));
        }
    }

    #[test]
    fn round_trips_hpack_codec_encoder_with_huffman(
        lists in header_lists(),
        table_size in prop_oneof![Just(4096usize), Just(256), Just(100), Just(0)],
        choices in proptest::collection::vec((0u8..3, any::<bool>(), any::<bool>(), any::<bool>()), 1..8),
    ) {
        let mut enc = hpack_codec::Encoder::new(table_size as u16);
        let mut d = PassiveDecoder::with_table_size("test", ConnectionStats::default(), table_size);
        let mut p = PassiveDecoder::with_table_size("test", ConnectionStats::default(), table_size);
        let mut l = loona();
        l.set_max_table_size(table_size);
        for fields in &lists {
            let block = codec_encode(&mut enc, fields, &choices);
            prop_assert_eq!(d.fields(&block), Some(fields.clone()));
            prop_assert_eq!(p.priority_value(&block), Some(priorities(fields)));
            prop_assert_eq!(&l.decode(&block).unwrap(), fields);
        }
    }
}

#[test]
fn every_code_matches_an_independent_encoder() {
    for b in 0..=255u8 {
        assert_eq!(
            huffman::tests::encode(&[b]),
            codec_huffman(&[b]),
            "symbol {b}"
        );
        let mut out = Vec::new();
        huffman::decode(&codec_huffman(&[b, b, b]), &mut out).unwrap();
        assert_eq!(out, [b, b, b]);
    }
}

#[test]
fn table_memory_stays_bounded() {
    // Fill a 64 KiB table with the smallest entries, again and again.
    let mut d = Decoder::new(INITIAL_TABLE_SIZE, MAX_TABLE_SIZE);
    let mut block = Vec::new();
    hpack_int(&mut block, 0x20, 5, MAX_TABLE_SIZE);
    for _ in 0..10_000 {
        block.extend([0x40, 0x00, 0x00]);
    }
    d.decode(&block, |_, _| {}).unwrap();
    assert_eq!(d.table().len(), MAX_TABLE_SIZE / 32);
    assert_eq!(d.table().size(), MAX_TABLE_SIZE);
}
