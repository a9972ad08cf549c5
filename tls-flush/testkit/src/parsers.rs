//! The `priority_parse` and `priority_update_parse` targets (tower-priority's parsers):
//! never a panic, and the result agrees with RFC 9218 (urgency in range, the canonical form
//! round-trips, a PRIORITY_UPDATE verdict that matches the §7.1 layout).

/// `Priority::parse` on arbitrary input: never panics, always yields a valid priority that
/// round-trips through its canonical form.
pub fn run_priority_parse(data: &[u8]) -> Result<(), String> {
    use tower_priority::Priority;
    let input = String::from_utf8_lossy(data);
    let p = Priority::parse(&input);
    if p.urgency > 7 {
        return Err(format!("urgency out of range: {p:?} from {input:?}"));
    }
    let again = Priority::parse(&p.to_string());
    if again != p {
        return Err(format!(
            "round trip of {input:?}: {p:?} printed as {:?} parses as {again:?}",
            p.to_string()
        ));
    }
    Ok(())
}

/// `PriorityUpdate::parse` on arbitrary payloads: never panics, and its verdict agrees with
/// the frame layout of RFC 9218 §7.1.
pub fn run_priority_update_parse(data: &[u8]) -> Result<(), String> {
    use tower_priority::{Priority, PriorityUpdate, PriorityUpdateError};
    let ok = match PriorityUpdate::parse(data) {
        Ok(update) => {
            data.len() >= 4
                && update.prioritized_stream_id != 0
                && update.prioritized_stream_id <= 0x7FFF_FFFF
                && update.priority.urgency <= 7
                // The field value is ASCII, hence UTF-8, and parses like a header.
                && std::str::from_utf8(&data[4..])
                    .is_ok_and(|field| update.priority == Priority::parse(field))
        }
        Err(PriorityUpdateError::TooShort) => data.len() < 4,
        Err(PriorityUpdateError::ZeroStreamId) => data[0] & 0x7F == 0 && data[1..4] == [0, 0, 0],
        Err(PriorityUpdateError::NonAscii) => !data[4..].is_ascii(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "PriorityUpdate::parse({data:02x?}) = {:?} disagrees with RFC 9218 §7.1",
            PriorityUpdate::parse(data)
        ))
    }
}
