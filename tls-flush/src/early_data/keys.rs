//! Which requests of a connection began in early data, whatever the order in which they
//! are marked.
//!
//! The early bytes start at the connection's beginning (preface, SETTINGS, HEADERS...), so
//! a fresh HPACK decoder fed every header block in them, in order, decodes the early
//! requests' blocks exactly as h2 does. Each early request leaves a key: a hash of what h2
//! turns its block into (method, URI, header fields), and
//! [`EarlyRequests::mark`](super::EarlyRequests::mark) marks a request whose key matches
//! one not taken yet. What cannot be keyed (a block cut by the end of early data, one that
//! does not decode, or too large) is marked as before: by count, in call order.

use std::hash::{BuildHasher, RandomState};

use crate::frame::{self, ClientFrames, FrameHeader, FrameSink, Verdict};
use crate::hpack::RequestDecoder;

/// Largest header block decoded, as the read observer's (hyper's h2 refuses header lists
/// over 16 KiB by default): a larger one leaves the connection's later early requests to
/// counting.
const MAX_BLOCK: usize = crate::read_observer::MAX_HEADER_BLOCK;

/// Most keys one connection keeps (8 bytes each); later early requests are counted. The
/// early bytes bound them already (each key takes a HEADERS frame opening a stream, 9 bytes
/// at least, and rustls accepts no more than the server's `max_early_data_size`), but that
/// size is the server's to choose; h2 refuses streams past its concurrency limit (100 under
/// `serve`, 200 by default in hyper), so no real client sends this many early.
pub(super) const MAX_KEYS: usize = 256;

/// Hashes requests into keys, seeded per connection (a client could otherwise pick
/// requests whose keys collide; harmless, as it could only move its own marks, but free to
/// avoid).
#[derive(Debug, Clone, Default)]
pub(super) struct KeyHasher(RandomState);

impl KeyHasher {
    /// One header field line's share of a key. A key adds the shares up, so the order of
    /// the lines does not count: h2's `HeaderMap` groups a name's values together, whatever
    /// their order on the wire.
    fn field(&self, name: &[u8], value: &[u8]) -> u64 {
        self.0.hash_one((name, value))
    }

    fn key(&self, parts: Parts<'_>, fields: u64) -> u64 {
        self.0.hash_one((
            parts.method,
            parts.scheme,
            parts.authority,
            parts.path,
            fields,
        ))
    }

    /// The key of a request as h2 hands it to the app: hyper passes h2's method, URI and
    /// header map on unchanged.
    pub(super) fn of_request<B>(&self, request: &http::Request<B>) -> u64 {
        let uri = request.uri();
        let fields = request.headers().iter().fold(0u64, |sum, (name, value)| {
            sum.wrapping_add(self.field(name.as_str().as_bytes(), value.as_bytes()))
        });
        let parts = Parts {
            method: request.method().as_str().as_bytes(),
            scheme: uri.scheme_str().map(str::as_bytes),
            authority: uri.authority().map(|a| a.as_str().as_bytes()),
            path: uri.path_and_query().map(|p| p.as_str().as_bytes()),
        };
        self.key(parts, fields)
    }

    /// The key of the request whose header block is `block`, decoded by `decoder`, built
    /// as h2 builds the request (`server::Peer::convert_poll_message`): method and
    /// authority as sent, the scheme only with an authority (a URI cannot have one without
    /// it), the path as `PathAndQuery` parses it (which drops a fragment), regular fields
    /// as sent (h2 refuses upper-case names). A block h2 would refuse gets a key no request
    /// will match: harmless, as that request never reaches the app.
    fn of_block(
        &self,
        decoder: &mut RequestDecoder,
        block: &[u8],
    ) -> Result<u64, crate::hpack::DecodeError> {
        let mut pseudo: [Option<Vec<u8>>; 4] = Default::default();
        let mut fields = 0u64;
        decoder.decode(block, |name, value| {
            let slot = match name {
                b":method" => 0,
                b":scheme" => 1,
                b":authority" => 2,
                b":path" => 3,
                // `:protocol` goes to an extension; anything else is refused by h2.
                _ if name.starts_with(b":") => return,
                _ => {
                    fields = fields.wrapping_add(self.field(name, value));
                    return;
                }
            };
            // A repeated pseudo-header makes the request malformed: the first will do.
            pseudo[slot].get_or_insert_with(|| value.to_vec());
        })?;
        let [method, scheme, authority, path] = pseudo;
        let parsed = path
            .as_deref()
            .map(http::uri::PathAndQuery::try_from)
            .and_then(Result::ok);
        let parts = Parts {
            method: method.as_deref().unwrap_or_default(),
            scheme: scheme.as_deref().filter(|_| authority.is_some()),
            authority: authority.as_deref(),
            path: match &parsed {
                Some(parsed) => Some(parsed.as_str().as_bytes()),
                None => path.as_deref(),
            },
        };
        Ok(self.key(parts, fields))
    }
}

/// What a key covers besides the header fields.
struct Parts<'a> {
    method: &'a [u8],
    scheme: Option<&'a [u8]>,
    authority: Option<&'a [u8]>,
    path: Option<&'a [u8]>,
}

/// The marks of one connection's early requests, shared by its stream (which adds them as
/// the early bytes are read) and its service (which takes them).
#[derive(Debug, Default)]
pub(super) struct Marks {
    /// The early bytes were not HTTP/2: every request is early.
    all: bool,
    /// Keys of the early requests not marked yet (at most [`MAX_KEYS`] are ever added).
    keys: Vec<u64>,
    /// Early requests without a key, not marked yet: the next requests that match no key
    /// take these, in call order (the count-based marking).
    unkeyed: usize,
    /// A request began in the early bytes read so far; its key is not known yet.
    pending: bool,
    /// The early data has ended. Before, every request the app gets came from early bytes.
    ended: bool,
    /// Early requests left to counting since the connection began.
    fallbacks: usize,
}

impl Marks {
    /// The next `n` requests are early, by count.
    #[cfg(test)]
    pub(super) fn counted(n: usize) -> Self {
        Marks {
            unkeyed: n,
            ended: true,
            ..Marks::default()
        }
    }

    /// Whether the request whose key is `key()` is early; its mark is taken if so.
    pub(super) fn take(&mut self, key: impl FnOnce() -> u64) -> bool {
        if self.all {
            return true;
        }
        if !self.keys.is_empty() {
            let key = key();
            if let Some(i) = self.keys.iter().position(|&k| k == key) {
                self.keys.swap_remove(i);
                return true;
            }
        }
        if self.unkeyed > 0 {
            self.unkeyed -= 1;
            return true;
        }
        // Matching no key: early only if no later byte has been read yet.
        !self.ended
    }

    /// How many early requests are not marked yet (`usize::MAX`: every request is early).
    pub(super) fn remaining(&self) -> usize {
        if self.all {
            return usize::MAX;
        }
        self.keys
            .len()
            .saturating_add(self.unkeyed)
            .saturating_add(usize::from(self.pending))
    }

    /// Early requests left to counting since the connection began.
    #[cfg(test)]
    pub(super) fn fallbacks(&self) -> usize {
        self.fallbacks
    }

    /// Adds what the early bytes read since the last call said.
    pub(super) fn add(&mut self, found: &mut Found, pending: bool) {
        self.all |= found.all;
        self.keys.append(&mut found.keys);
        self.unkeyed = self.unkeyed.saturating_add(found.unkeyed);
        self.fallbacks = self.fallbacks.saturating_add(found.unkeyed);
        found.unkeyed = 0;
        self.pending = pending;
    }

    /// The early data has ended: a request whose block it cut is counted.
    pub(super) fn end(&mut self) {
        if std::mem::take(&mut self.pending) {
            tracing::debug!("early data ended inside a request's header block; counted");
            self.unkeyed = self.unkeyed.saturating_add(1);
            self.fallbacks = self.fallbacks.saturating_add(1);
        }
        self.ended = true;
    }
}

/// What the early bytes read since the last [`Marks::add`] said.
#[derive(Debug, Default)]
pub(super) struct Found {
    keys: Vec<u64>,
    unkeyed: usize,
    all: bool,
}

/// A header block being reassembled.
#[derive(Debug, Clone, Copy)]
struct Block {
    stream_id: u32,
    /// It opens a request (not trailers, which are decoded only to keep the table).
    opens: bool,
}

/// The frame being read: whether it opens a request, and whether its payload is kept.
#[derive(Debug, Clone, Copy)]
struct Current {
    opens: bool,
    keep: bool,
}

/// Reads the early bytes a piece at a time and keys the requests that begin in them.
/// Memory: one frame's payload and one block, both at most [`MAX_BLOCK`], and the decoder's
/// table (64 KiB at most); dropped when the early data ends.
#[derive(Debug)]
pub(super) struct EarlyParser {
    frames: ClientFrames,
    blocks: KeyedBlocks,
}

/// The early requests' header blocks, reassembled and keyed.
struct KeyedBlocks {
    current: Option<Current>,
    block: Option<Block>,
    fragments: Vec<u8>,
    /// The highest stream opened: a HEADERS frame on a higher one opens a request.
    highest: u32,
    /// `None` once a block could not be decoded: the table is lost, later requests are
    /// counted.
    decoder: Option<RequestDecoder>,
    /// Keys made so far, for [`MAX_KEYS`].
    keyed: usize,
    hasher: KeyHasher,
    found: Found,
}

impl std::fmt::Debug for KeyedBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedBlocks")
            .field("keyed", &self.keyed)
            .field("decoding", &self.decoder.is_some())
            .finish_non_exhaustive()
    }
}

impl EarlyParser {
    pub(super) fn new(hasher: KeyHasher) -> Self {
        EarlyParser {
            frames: ClientFrames::default(),
            blocks: KeyedBlocks {
                current: None,
                block: None,
                fragments: Vec::new(),
                highest: 0,
                decoder: Some(RequestDecoder::new()),
                keyed: 0,
                hasher,
                found: Found::default(),
            },
        }
    }

    /// What the bytes fed since the last call said, for [`Marks::add`].
    pub(super) fn found(&mut self) -> &mut Found {
        &mut self.blocks.found
    }

    /// A request began in the bytes fed so far and has no key (nor count) yet: its block
    /// is not complete, or a frame header is cut before it says it is not a HEADERS frame
    /// (counted as one, to be safe).
    pub(super) fn pending(&self) -> bool {
        let blocks = &self.blocks;
        if blocks.block.is_some_and(|b| b.opens) {
            return true;
        }
        if let Some(current) = blocks.current {
            return current.opens && current.keep;
        }
        let cut = self.frames.partial_header();
        !cut.is_empty()
            && blocks.block.is_none()
            && cut.get(3).is_none_or(|&kind| kind == frame::HEADERS)
    }

    /// Reads the next early bytes.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        self.frames.feed(bytes, &mut self.blocks);
        if self.frames.verdict() == Verdict::NotHttp2 {
            self.blocks.found.all = true;
        }
    }
}

impl FrameSink for KeyedBlocks {
    fn frame_started(&mut self, header: &FrameHeader) -> bool {
        let len = header.length as usize;
        let opens = header.kind == frame::HEADERS && header.stream_id > self.highest;
        if opens {
            self.highest = header.stream_id;
        }
        let keep = match header.kind {
            frame::HEADERS => {
                if self.block.is_some() {
                    self.fail("HEADERS inside a header block");
                }
                self.fragments.clear();
                self.keep_fragment(len)
            }
            frame::CONTINUATION if self.block.is_some_and(|b| b.stream_id == header.stream_id) => {
                self.keep_fragment(self.fragments.len().saturating_add(len))
            }
            // A stray CONTINUATION ends the connection (h2); other frames carry no block.
            _ => false,
        };
        if opens && !keep {
            self.count();
        }
        self.current = Some(Current { opens, keep });
        keep
    }

    fn frame_ended(&mut self, header: FrameHeader, payload: &[u8], kept: bool) {
        let Some(Current { opens, .. }) = self.current.take() else {
            return;
        };
        if !kept {
            return;
        }
        if header.kind == frame::HEADERS {
            self.block = Some(Block {
                stream_id: header.stream_id,
                opens,
            });
        }
        match frame::header_block_fragment(&header, payload) {
            Some(fragment) => self.fragments.extend_from_slice(fragment),
            None => {
                self.fail("malformed header block frame");
                return;
            }
        }
        if header.end_headers() {
            self.complete_block();
        }
    }
}

impl KeyedBlocks {
    /// Whether a header block fragment that makes the block `len` bytes is decoded; when it
    /// is too large, decoding stops for good.
    fn keep_fragment(&mut self, len: usize) -> bool {
        if self.decoder.is_none() {
            return false;
        }
        if len > MAX_BLOCK {
            self.fail("header block larger than the early keys decode");
            return false;
        }
        true
    }

    fn complete_block(&mut self) {
        let (Some(block), Some(decoder)) = (self.block, self.decoder.as_mut()) else {
            return;
        };
        match self.hasher.of_block(decoder, &self.fragments) {
            Ok(key) => {
                self.block = None;
                self.fragments.clear();
                if !block.opens {
                    // Trailers: decoded for the table only.
                } else if self.keyed < MAX_KEYS {
                    self.keyed += 1;
                    self.found.keys.push(key);
                } else {
                    self.count();
                }
            }
            Err(err) => self.fail(&err.to_string()),
        }
    }

    /// Decoding stops for good (the table may differ from the client's): the request whose
    /// block was being read, if any, and every later one are counted.
    fn fail(&mut self, why: &str) {
        if self.decoder.take().is_some() {
            tracing::debug!(why, "early requests: HPACK decoding stopped; counted");
        }
        if self.block.take().is_some_and(|b| b.opens) {
            self.count();
        }
        self.fragments = Vec::new();
    }

    /// One more early request without a key.
    fn count(&mut self) {
        self.found.unkeyed += 1;
    }
}

#[cfg(test)]
mod tests;
