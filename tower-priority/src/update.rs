use std::{error::Error, fmt};

use crate::Priority;

/// The payload of an HTTP/2 `PRIORITY_UPDATE` frame (type `0x10`, RFC 9218 §7.1).
///
/// ```
/// use tower_priority::{Priority, PriorityUpdate};
///
/// let update = PriorityUpdate::parse(b"\x00\x00\x00\x05u=0, i").unwrap();
/// assert_eq!(update.prioritized_stream_id, 5);
/// assert_eq!(update.priority, Priority { urgency: 0, incremental: true });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PriorityUpdate {
    /// The stream the update applies to (31 bits; never 0 once parsed).
    pub prioritized_stream_id: u32,
    /// The priority carried by the frame's field value, parsed leniently.
    pub priority: Priority,
}

/// Why a `PRIORITY_UPDATE` payload was rejected.
///
/// RFC 9218 §7.1 makes a zero stream id a connection error; which action to take is up to
/// the caller (the HTTP/2 implementation that owns the connection).
///
/// ```
/// use tower_priority::{PriorityUpdate, PriorityUpdateError};
///
/// assert_eq!(PriorityUpdate::parse(b"\x00\x01"), Err(PriorityUpdateError::TooShort));
/// assert_eq!(
///     PriorityUpdate::parse(b"\x00\x00\x00\x00u=1"),
///     Err(PriorityUpdateError::ZeroStreamId),
/// );
/// assert_eq!(
///     PriorityUpdate::parse(b"\x00\x00\x00\x01u=\xff"),
///     Err(PriorityUpdateError::NonAscii),
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PriorityUpdateError {
    /// The payload is shorter than the 4-byte prioritized stream id.
    TooShort,
    /// The prioritized stream id is 0 (RFC 9218 §7.1: a `PROTOCOL_ERROR`).
    ZeroStreamId,
    /// The priority field value contains a byte outside ASCII.
    NonAscii,
}

impl fmt::Display for PriorityUpdateError {
    /// A short human-readable reason.
    ///
    /// ```
    /// use tower_priority::PriorityUpdateError;
    /// assert_eq!(
    ///     PriorityUpdateError::ZeroStreamId.to_string(),
    ///     "PRIORITY_UPDATE prioritized stream id is 0",
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PriorityUpdateError::TooShort => "PRIORITY_UPDATE payload shorter than 4 bytes",
            PriorityUpdateError::ZeroStreamId => "PRIORITY_UPDATE prioritized stream id is 0",
            PriorityUpdateError::NonAscii => "PRIORITY_UPDATE priority field value is not ASCII",
        })
    }
}

impl Error for PriorityUpdateError {}

impl PriorityUpdate {
    /// Parses a `PRIORITY_UPDATE` frame payload (the bytes after the 9-byte frame header).
    ///
    /// The first 4 bytes are the prioritized stream id, big-endian, whose reserved top bit
    /// is ignored; the rest is the priority field value. A field value that is ASCII but not
    /// a valid dictionary yields the default priority, like a malformed `priority` header.
    ///
    /// # Errors
    ///
    /// [`PriorityUpdateError::TooShort`] for fewer than 4 bytes,
    /// [`PriorityUpdateError::ZeroStreamId`] for stream id 0, and
    /// [`PriorityUpdateError::NonAscii`] when the field value has a byte above `0x7F`.
    ///
    /// ```
    /// use tower_priority::{Priority, PriorityUpdate};
    ///
    /// // The reserved bit is masked off; an empty field value means the defaults.
    /// let update = PriorityUpdate::parse(b"\x80\x00\x00\x07").unwrap();
    /// assert_eq!(update.prioritized_stream_id, 7);
    /// assert_eq!(update.priority, Priority::default());
    /// ```
    pub fn parse(frame_payload: &[u8]) -> Result<PriorityUpdate, PriorityUpdateError> {
        let (prioritized_stream_id, field_value) = Self::split(frame_payload)?;
        Ok(PriorityUpdate {
            prioritized_stream_id,
            priority: Priority::parse_bytes(field_value),
        })
    }

    /// Checks a payload as [`parse`](Self::parse) does and returns the prioritized stream id
    /// and the field value, without parsing the value: for callers that decide from the
    /// stream id whether the value matters (an update for a closed stream is dropped).
    ///
    /// # Errors
    ///
    /// The same as [`parse`](Self::parse), in the same order.
    ///
    /// ```
    /// use tower_priority::{PriorityUpdate, PriorityUpdateError};
    ///
    /// assert_eq!(PriorityUpdate::split(b"\x00\x00\x00\x09u=2"), Ok((9, &b"u=2"[..])));
    /// assert_eq!(PriorityUpdate::split(b"\x00"), Err(PriorityUpdateError::TooShort));
    /// ```
    pub fn split(frame_payload: &[u8]) -> Result<(u32, &[u8]), PriorityUpdateError> {
        let Some((id, field_value)) = frame_payload.split_first_chunk::<4>() else {
            return Err(PriorityUpdateError::TooShort);
        };
        let prioritized_stream_id = u32::from_be_bytes(*id) & 0x7FFF_FFFF;
        if prioritized_stream_id == 0 {
            return Err(PriorityUpdateError::ZeroStreamId);
        }
        if !field_value.is_ascii() {
            return Err(PriorityUpdateError::NonAscii);
        }
        Ok((prioritized_stream_id, field_value))
    }
}
