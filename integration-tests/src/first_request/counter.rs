//! [`RecordCounter`]: an I/O wrapper under the client's TLS that logs the TLS records the
//! client writes (from their 5-byte headers) and when it reads.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tls_flush_testkit::poll_read_observed;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One TLS record the client wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenRecord {
    /// When the write that carried its header returned.
    pub at: Instant,
    /// The outer content type (22 handshake, 20 ChangeCipherSpec, 21 alert, 23
    /// application data: every TLS 1.3 encrypted record).
    pub content_type: u8,
    /// Its length after the header.
    pub len: u16,
    /// The offset of its header in the client's byte stream.
    pub offset: u64,
}

/// What a [`RecordCounter`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireLog {
    /// Every record written, in order.
    pub records: Vec<WrittenRecord>,
    /// When the first read returned bytes.
    pub first_read_at: Option<Instant>,
    /// When each read that returned bytes returned.
    pub reads: Vec<Instant>,
    /// Bytes written.
    pub bytes_written: u64,
}

/// Follows the record headers in the written bytes.
#[derive(Debug, Default)]
struct Parser {
    header: [u8; 5],
    have: usize,
    /// Body bytes of the current record still to come.
    skip: u64,
}

impl WireLog {
    fn written(&mut self, parser: &mut Parser, mut bytes: &[u8], at: Instant) {
        while !bytes.is_empty() {
            if parser.skip > 0 {
                let n = (parser.skip as usize).min(bytes.len());
                parser.skip -= n as u64;
                self.bytes_written += n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = (5 - parser.have).min(bytes.len());
            parser.header[parser.have..parser.have + n].copy_from_slice(&bytes[..n]);
            parser.have += n;
            self.bytes_written += n as u64;
            bytes = &bytes[n..];
            if parser.have == 5 {
                let len = u16::from_be_bytes([parser.header[3], parser.header[4]]);
                self.records.push(WrittenRecord {
                    at,
                    content_type: parser.header[0],
                    len,
                    offset: self.bytes_written - 5,
                });
                parser.have = 0;
                parser.skip = u64::from(len);
            }
        }
    }
}

/// An I/O object that passes everything through to `inner` and logs, in a shared
/// [`WireLog`], the TLS records written (parsed from their headers) and the reads.
#[derive(Debug)]
pub struct RecordCounter<T> {
    inner: T,
    parser: Parser,
    log: Arc<Mutex<WireLog>>,
}

impl<T> RecordCounter<T> {
    /// Wraps `inner`; the log can be read while the wrapper is in use (by hyper).
    pub fn new(inner: T) -> (RecordCounter<T>, Arc<Mutex<WireLog>>) {
        let log = Arc::new(Mutex::new(WireLog::default()));
        (
            RecordCounter {
                inner,
                parser: Parser::default(),
                log: log.clone(),
            },
            log,
        )
    }

    /// The wrapped I/O object.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn wrote(&mut self, bufs: &[&[u8]], mut n: usize) {
        let now = Instant::now();
        let mut log = self.log.lock().expect("wire log poisoned");
        for buf in bufs {
            if n == 0 {
                break;
            }
            let take = n.min(buf.len());
            log.written(&mut self.parser, &buf[..take], now);
            n -= take;
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for RecordCounter<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let RecordCounter { inner, log, .. } = &mut *self;
        poll_read_observed(inner, cx, buf, |new| {
            if !new.is_empty() {
                let now = Instant::now();
                let mut log = log.lock().expect("wire log poisoned");
                log.first_read_at.get_or_insert(now);
                log.reads.push(now);
            }
        })
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for RecordCounter<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            self.wrote(&[buf], n);
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = poll {
            let slices: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
            self.wrote(&slices, n);
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_across_writes_are_parsed() {
        let mut log = WireLog::default();
        let mut parser = Parser::default();
        let now = Instant::now();
        // A 3-byte handshake record, then a 2-byte application-data record whose header
        // is split over two writes.
        log.written(&mut parser, &[22, 3, 1, 0, 3, 1, 2], now);
        log.written(&mut parser, &[3, 23, 3], now);
        log.written(&mut parser, &[3, 0, 2, 9, 9], now);
        let types: Vec<(u8, u16, u64)> = log
            .records
            .iter()
            .map(|r| (r.content_type, r.len, r.offset))
            .collect();
        assert_eq!(types, [(22, 3, 0), (23, 2, 8)]);
        assert_eq!(log.bytes_written, 15);
    }
}
