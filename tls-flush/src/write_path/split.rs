//! Splitting a DATA frame where a record ends.
//!
//! Nothing can go between the bytes of one frame: once a DATA frame's first bytes are in a
//! record, its rest has to follow before any other frame, however urgent. Where the write
//! budget sizes records to what TCP can send soon (a segment or a few while the congestion
//! window is small), a 16 KiB frame spans many records and round trips, and a more urgent
//! response that arrives meanwhile waited behind its rest (behind a competitor's queue,
//! 14.7 KB of a background frame went ahead of a `late` critical response and delayed it
//! by two round trips, 385 ms instead of 136). A DATA frame that does not fit the record
//! is split there instead: the record ends with a whole frame, and the rest goes back to
//! the scheduler as a frame of its own, where a more urgent one may overtake it.
//!
//! Invariants: the two frames carry the original payload in full and in order, on the same
//! stream; END_STREAM only on the second; padded frames are never split (their padding is
//! counted in the payload), so HTTP/2 flow control sees the same bytes (RFC 9113 §6.1: a
//! DATA frame's whole payload counts, and frame boundaries carry no meaning).

use bytes::{BufMut, BytesMut};

use crate::frame::{FrameHeader, FLAG_END_STREAM, FLAG_PADDED, HEADER_LEN};
use crate::scheduler::QueuedFrame;

/// The smallest first part worth a split: below it the record ends before the frame
/// instead (a frame header of 9 bytes for a few bytes of payload is not worth it).
pub(super) const MIN_SPLIT_PAYLOAD: usize = 512;

/// True when `frame` is DATA that may be split (unpadded, with a payload).
pub(super) fn is_splittable(frame: &QueuedFrame) -> bool {
    frame.is_data() && frame.header.flags & FLAG_PADDED == 0 && frame.header.length > 0
}

/// Splits a splittable DATA `frame` into a first frame of `room` wire bytes and the rest;
/// the frame back when that leaves less than [`MIN_SPLIT_PAYLOAD`] of payload in the first
/// or nothing in the second. The first is a copy; the rest reuses the frame's buffer where
/// nothing else holds it (the nine bytes before its payload become its header).
pub(super) fn split_data(
    frame: QueuedFrame,
    room: usize,
) -> Result<(QueuedFrame, QueuedFrame), QueuedFrame> {
    debug_assert!(is_splittable(&frame));
    let payload = frame.bytes.len().saturating_sub(HEADER_LEN);
    let first = room.saturating_sub(HEADER_LEN);
    if first < MIN_SPLIT_PAYLOAD || first >= payload {
        return Err(frame);
    }
    let (Ok(first_len), Ok(rest_len)) = (u32::try_from(first), u32::try_from(payload - first))
    else {
        return Err(frame);
    };
    let head_header = FrameHeader {
        length: first_len,
        flags: frame.header.flags & !FLAG_END_STREAM,
        ..frame.header
    };
    let rest_header = FrameHeader {
        length: rest_len,
        ..frame.header
    };
    let mut head = BytesMut::with_capacity(HEADER_LEN + first);
    head.put_slice(&head_header.encode());
    head.put_slice(&frame.bytes[HEADER_LEN..HEADER_LEN + first]);
    let rest = match frame.bytes.try_into_mut() {
        Ok(mut whole) => {
            // The head's payload is copied: the bytes before the rest's payload are free.
            whole[first..first + HEADER_LEN].copy_from_slice(&rest_header.encode());
            whole.split_off(first).freeze()
        }
        Err(shared) => {
            let mut rest = BytesMut::with_capacity(HEADER_LEN + payload - first);
            rest.put_slice(&rest_header.encode());
            rest.put_slice(&shared[HEADER_LEN + first..]);
            rest.freeze()
        }
    };
    let head = QueuedFrame {
        header: head_header,
        bytes: head.freeze(),
        seq: frame.seq,
        ends_stream: false,
    };
    let rest = QueuedFrame {
        header: rest_header,
        bytes: rest,
        seq: frame.seq,
        ends_stream: frame.ends_stream,
    };
    Ok((head, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::DATA;
    use bytes::Bytes;

    fn data_frame(len: usize, flags: u8) -> QueuedFrame {
        let header = FrameHeader {
            length: len as u32,
            kind: DATA,
            flags,
            stream_id: 5,
        };
        let mut bytes = header.encode().to_vec();
        bytes.extend((0..len).map(|i| i as u8));
        QueuedFrame {
            header,
            bytes: bytes.into(),
            seq: 7,
            ends_stream: flags & FLAG_END_STREAM != 0,
        }
    }

    #[test]
    fn the_two_frames_carry_the_payload_in_order_and_end_the_stream_once() {
        for shared in [false, true] {
            let frame = data_frame(16_384, FLAG_END_STREAM);
            let original = frame.bytes.clone();
            // A second reference to the buffer: the rest is then a copy.
            let frame = if shared {
                frame
            } else {
                QueuedFrame {
                    bytes: Bytes::copy_from_slice(&original),
                    ..frame
                }
            };
            let (head, rest) = split_data(frame, 1426).expect("splits");
            assert_eq!(head.bytes.len(), 1426, "the first part fills the room");
            for part in [&head, &rest] {
                assert_eq!(FrameHeader::parse(&part.bytes), Some(part.header));
                assert_eq!(part.header.frame_len(), part.bytes.len());
                assert_eq!((part.header.kind, part.header.stream_id), (DATA, 5));
                assert_eq!(part.seq, 7, "both keep h2's order");
            }
            assert_eq!(head.header.length, 1417);
            assert!(!head.header.end_stream() && !head.ends_stream);
            assert!(
                rest.header.end_stream() && rest.ends_stream,
                "END_STREAM on the last"
            );
            let mut payload = head.bytes[HEADER_LEN..].to_vec();
            payload.extend_from_slice(&rest.bytes[HEADER_LEN..]);
            assert_eq!(
                payload,
                original[HEADER_LEN..],
                "no byte lost, doubled or moved"
            );
        }
    }

    #[test]
    fn tiny_first_parts_whole_frames_and_padded_frames_are_not_split() {
        let frame = || data_frame(16_384, 0);
        assert!(split_data(frame(), HEADER_LEN + MIN_SPLIT_PAYLOAD - 1).is_err());
        assert!(split_data(frame(), HEADER_LEN + MIN_SPLIT_PAYLOAD).is_ok());
        let whole = split_data(frame(), 16_384 + HEADER_LEN).expect_err("it fits");
        assert_eq!(whole.bytes, frame().bytes, "given back untouched");
        assert!(split_data(frame(), 4).is_err());
        assert!(!is_splittable(&data_frame(16_384, FLAG_PADDED)));
        assert!(!is_splittable(&data_frame(0, FLAG_END_STREAM)));
    }
}
