//! The indexing tables (RFC 7541 §2.3): the static table and a dynamic table that mirrors
//! the encoder's, with the size accounting and eviction of §4.

use std::collections::VecDeque;

/// RFC 7541 Appendix A: indexes 1..=61.
pub(crate) const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// Per-entry overhead counted in a table's size (RFC 7541 §4.1).
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// One dynamic table entry: name and value in a single allocation.
pub(crate) struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    /// Copies `name` and `value`.
    pub(crate) fn new(name: &[u8], value: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        Entry {
            bytes: bytes.into_boxed_slice(),
            name_len: name.len(),
        }
    }

    fn name(&self) -> &[u8] {
        self.bytes.get(..self.name_len).unwrap_or_default()
    }

    fn value(&self) -> &[u8] {
        self.bytes.get(self.name_len..).unwrap_or_default()
    }

    fn size(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD
    }
}

/// The dynamic table: newest entry first. Its memory is bounded by `max_size` (each entry
/// counts its octets plus 32, which covers our per-entry overhead).
pub(crate) struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub(crate) fn new(max_size: usize) -> Self {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    /// Sum of the entries' sizes (RFC 7541 §4.1).
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    #[cfg(test)]
    pub(crate) fn max_size(&self) -> usize {
        self.max_size
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A new maximum size (RFC 7541 §4.3): evicts the oldest entries until the table fits.
    pub(crate) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Adds an entry (RFC 7541 §4.4): evicts the oldest entries to make room; an entry
    /// larger than the maximum size empties the table and is not added. The entry is
    /// built (copied) before anything is evicted, so its name may come from an entry that
    /// this insertion evicts.
    pub(crate) fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.max_size {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.entries.push_front(entry);
        self.size += size;
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some(oldest) => self.size -= oldest.size(),
                None => {
                    // Unreachable: the size is the sum over the entries.
                    self.size = 0;
                }
            }
        }
    }

    /// Entry `i` (0 = newest) as `(name, value)`.
    pub(crate) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|e| (e.name(), e.value()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(t: &DynamicTable) -> Vec<(&[u8], &[u8])> {
        (0..t.len()).map(|i| t.get(i).unwrap()).collect()
    }

    #[test]
    fn static_table_ends() {
        assert_eq!(STATIC_TABLE[0], (&b":authority"[..], &b""[..]));
        assert_eq!(STATIC_TABLE[1], (&b":method"[..], &b"GET"[..]));
        assert_eq!(
            STATIC_TABLE[15],
            (&b"accept-encoding"[..], &b"gzip, deflate"[..])
        );
        assert_eq!(STATIC_TABLE[60], (&b"www-authenticate"[..], &b""[..]));
    }

    #[test]
    fn insert_evicts_oldest_first() {
        // Each entry: 1 + 1 + 32 = 34.
        let mut t = DynamicTable::new(100);
        t.insert(Entry::new(b"a", b"1"));
        t.insert(Entry::new(b"b", b"2"));
        assert_eq!(t.size(), 68);
        t.insert(Entry::new(b"c", b"3"));
        assert_eq!(contents(&t), [(&b"c"[..], &b"3"[..]), (b"b", b"2")]);
        assert_eq!(t.size(), 68);
        // Exactly fitting.
        t.insert(Entry::new(b"dd", b""));
        assert_eq!(t.size(), 68);
        t.set_max_size(34);
        assert_eq!(contents(&t), [(&b"dd"[..], &b""[..])]);
        assert_eq!(t.size(), 34);
        // An entry as large as the whole table fits.
        let mut exact = DynamicTable::new(34);
        exact.insert(Entry::new(b"a", b"1"));
        exact.insert(Entry::new(b"b", b"2"));
        assert_eq!(contents(&exact), [(&b"b"[..], &b"2"[..])]);
        // Too large for the table: empties it.
        t.insert(Entry::new(b"abc", b""));
        assert_eq!(t.len(), 0);
        assert_eq!(t.size(), 0);
        t.set_max_size(0);
        t.insert(Entry::new(b"", b""));
        assert_eq!(t.len(), 0);
        assert_eq!(t.max_size(), 0);
    }
}
