//! [`HalfRttStream`]: a server TLS stream over rustls' `ServerConnection` that can be used
//! before the handshake has completed, when the client's early data was accepted.
//!
//! The I/O loop follows tokio-rustls 0.26's `common::Stream` and `server::TlsStream`
//! (MIT/Apache-2.0): `read_tls` + `process_new_packets` to read, `write_tls` until
//! `wants_write` is false to write, a last-gasp write of the alert when processing fails,
//! close_notify on shutdown, `NotConnected` on shutdown taken as success. What differs:
//! reads yield the early data rustls keeps aside (`ServerConnection::early_data`) first,
//! and keep driving the handshake (the client's EndOfEarlyData and Finished) until the
//! application data that follows; output rustls queues while reading (the session
//! tickets once the handshake completes) is written at once rather than with the next
//! write.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{ready, Context, Poll};

use rustls::ServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::early_data::{EarlyCounter, EarlyRequests};
use crate::Transport;

/// A server TLS 1.3 stream returned by [`HalfRttAcceptor`](crate::HalfRttAcceptor): when
/// the client's early data was accepted it is returned right after the server's flight
/// (ServerHello to Finished) was written, while the client's Finished is still on its way.
/// Reads yield the early data first, then what follows once the handshake completes;
/// writes go out at once, as 0.5-RTT data while the handshake is still in progress
/// (`ServerConfig::send_half_rtt_data`). Without accepted early data it is returned after
/// the handshake, like tokio-rustls' server stream.
///
/// ```
/// fn accepts<T: tls_flush::Transport>() {}
/// accepts::<tls_flush::HalfRttStream<tokio::net::TcpStream>>(); // FlushStream can wrap it
/// ```
#[derive(Debug)]
pub struct HalfRttStream<IO> {
    pub(super) io: IO,
    pub(super) conn: ServerConnection,
    /// The peer closed its side of TCP (`read_tls` returned 0).
    pub(super) eof: bool,
    /// A clean close_notify was read (or the read side failed for good): reads yield 0.
    pub(super) read_closed: bool,
    /// close_notify was queued by `poll_shutdown`.
    pub(super) write_closed: bool,
    /// Bytes were written to `io` since its last flush.
    pub(super) need_flush: bool,
    pub(super) early: EarlyCounter,
    /// Whether the stream was handed over before the handshake completed.
    pub(super) half_rtt: bool,
    /// Early data waits for the handshake to complete (see
    /// [`hold_early_data`](Self::hold_early_data)); atomic because axum hands the make
    /// service that releases it only `&Io`.
    early_held: AtomicBool,
}

impl<IO> HalfRttStream<IO> {
    pub(super) fn new(io: IO, conn: ServerConnection) -> Self {
        HalfRttStream {
            io,
            conn,
            eof: false,
            read_closed: false,
            write_closed: false,
            need_flush: false,
            early: EarlyCounter::default(),
            half_rtt: false,
            early_held: AtomicBool::new(false),
        }
    }

    /// Early data stays unread until the handshake has completed, as on tokio-rustls'
    /// path, until [`release_early_data`](Self::release_early_data): for a stream handed to
    /// a service that may not mark early requests nor apply the 425 rule (the listener's
    /// connections before the app is known to be wrapped).
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn hold_early_data(&self) {
        self.early_held.store(true, Ordering::Release);
    }

    /// Early data may be read at once (0.5-RTT): whoever calls this marks the requests
    /// that [`early_requests`](Self::early_requests) counts. A read already waiting for the
    /// client's Finished is not woken: its requests are served once the Finished arrives.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn release_early_data(&self) {
        self.early_held.store(false, Ordering::Release);
    }

    /// The requests that began in early data, for [`EarlyRequests::mark`]: each is keyed
    /// as the early bytes are read, before hyper sees it.
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::HalfRttStream<tokio::net::TcpStream>) {
    /// let early = stream.early_requests();
    /// # }
    /// ```
    pub fn early_requests(&self) -> EarlyRequests {
        self.early.requests()
    }

    /// True when the stream was returned before the client's Finished (early data was
    /// accepted); what is written before the handshake completes is 0.5-RTT data.
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::HalfRttStream<tokio::net::TcpStream>) {
    /// println!("0.5-RTT: {}", stream.is_half_rtt());
    /// # }
    /// ```
    pub fn is_half_rtt(&self) -> bool {
        self.half_rtt
    }

    /// Early data bytes read from the stream so far.
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::HalfRttStream<tokio::net::TcpStream>) {
    /// println!("{} early bytes", stream.early_bytes());
    /// # }
    /// ```
    pub fn early_bytes(&self) -> usize {
        self.early.bytes()
    }

    /// The socket and the rustls connection.
    ///
    /// ```no_run
    /// # fn check(stream: &tls_flush::HalfRttStream<tokio::net::TcpStream>) {
    /// let handshaking = stream.get_ref().1.is_handshaking();
    /// # }
    /// ```
    pub fn get_ref(&self) -> (&IO, &ServerConnection) {
        (&self.io, &self.conn)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> HalfRttStream<IO> {
    /// One `read_tls` and `process_new_packets`; the number of bytes read (0: EOF).
    fn read_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let n = match self.conn.read_tls(&mut SyncReadAdapter {
            io: &mut self.io,
            cx,
        }) {
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(err) => return Poll::Ready(Err(err)),
        };
        if let Err(err) = self.conn.process_new_packets() {
            // The alert describing the error, if any: a last-gasp write that must not
            // hide the error.
            let _ = self.write_io(cx);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, err)));
        }
        Poll::Ready(Ok(n))
    }

    /// One `write_tls`.
    fn write_io(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut writer = SyncWriteAdapter {
            io: &mut self.io,
            cx,
        };
        match self.conn.write_tls(&mut writer) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            Ok(n) => {
                self.need_flush |= n > 0;
                Poll::Ready(Ok(n))
            }
            result => Poll::Ready(result),
        }
    }

    /// Writes what rustls queued until the socket stops taking it. Ready(Ok) once nothing
    /// is queued; Pending when the socket is full (the waker is registered).
    fn poll_write_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            if ready!(self.write_io(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Drives the handshake until it completes, or, when the client's early data was
    /// accepted, until the server's flight has been written and flushed.
    pub(super) fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut blocked = false;
            match self.poll_write_queued(cx) {
                Poll::Ready(result) => result?,
                Poll::Pending => blocked = true,
            }
            if self.need_flush {
                match Pin::new(&mut self.io).poll_flush(cx) {
                    Poll::Ready(result) => {
                        result?;
                        self.need_flush = false;
                    }
                    Poll::Pending => blocked = true,
                }
            }
            let written = !blocked && !self.conn.wants_write();
            if !self.conn.is_handshaking() && written {
                return Poll::Ready(Ok(()));
            }
            if self.conn.is_handshaking() && written && self.conn.early_data().is_some() {
                self.half_rtt = true;
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "tls handshake eof",
                )));
            }
            if !self.conn.wants_read() || !self.conn.is_handshaking() {
                // Only the flush is left to wait for.
                return Poll::Pending;
            }
            match self.read_io(cx) {
                Poll::Ready(Ok(0)) => self.eof = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Copies early data (after the handshake if it is held), then (after the handshake)
    /// application data into `buf`; `Ok(true)` when it copied something or the stream ended
    /// cleanly.
    fn take_plaintext(&mut self, buf: &mut ReadBuf<'_>) -> io::Result<bool> {
        // Held early data waits for the handshake; rustls keeps it aside until then.
        let early_readable =
            !self.early_held.load(Ordering::Acquire) || !self.conn.is_handshaking();
        if let Some(mut early) = self.conn.early_data().filter(|_| early_readable) {
            let n = early.read(buf.initialize_unfilled())?;
            if n > 0 {
                let start = buf.filled().len();
                buf.advance(n);
                self.early.feed(&buf.filled()[start..]);
                return Ok(true);
            }
        }
        if self.conn.is_handshaking() {
            return Ok(false);
        }
        // Every early byte has been handed on (the client's EndOfEarlyData came before its
        // Finished): what follows is not early.
        self.early.end();
        match self.conn.reader().read(buf.initialize_unfilled()) {
            Ok(0) => {
                // close_notify: the end of the stream.
                self.read_closed = true;
                Ok(true)
            }
            Ok(n) => {
                buf.advance(n);
                Ok(true)
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(err) => Err(err),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for HalfRttStream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.read_closed || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            if this.take_plaintext(buf)? {
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // rustls saw the TCP EOF: its reader has answered above (an error without
                // close_notify); during the handshake, nothing more can come.
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "tls handshake eof",
                )));
            }
            if !this.conn.wants_read() {
                // rustls' buffers are full of what this stream has yet to hand out, which
                // take_plaintext did above; try again rather than stall.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            match this.read_io(cx) {
                Poll::Ready(Ok(0)) => this.eof = true,
                Poll::Ready(Ok(_)) => {
                    // Session tickets after the client's Finished, key updates: out now,
                    // not with the next write. A full socket or an error is met again
                    // by the next write.
                    let _ = this.poll_write_queued(cx);
                }
                Poll::Ready(Err(err)) => {
                    if err.kind() == io::ErrorKind::ConnectionAborted {
                        this.read_closed = true;
                    }
                    return Poll::Ready(Err(err));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for HalfRttStream<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut pos = 0;
        while pos != buf.len() {
            let n = this.conn.writer().write(&buf[pos..])?;
            pos += n;
            if n == 0 && !this.conn.wants_write() {
                // rustls takes no plaintext and has nothing to send (it cannot happen
                // once traffic keys exist): ask again later rather than spin.
                cx.waker().wake_by_ref();
                return if pos == 0 {
                    Poll::Pending
                } else {
                    Poll::Ready(Ok(pos))
                };
            }
            let blocked = match this.poll_write_queued(cx) {
                Poll::Ready(Ok(())) => false,
                Poll::Ready(Err(err)) if err.kind() == io::ErrorKind::WriteZero => true,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => true,
            };
            if blocked {
                return match pos {
                    0 => Poll::Pending,
                    n => Poll::Ready(Ok(n)),
                };
            }
        }
        Poll::Ready(Ok(pos))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if bufs.iter().all(|buf| buf.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        loop {
            let written = this.conn.writer().write_vectored(bufs)?;
            let blocked = match this.poll_write_queued(cx) {
                Poll::Ready(Ok(())) => false,
                Poll::Ready(Err(err)) if err.kind() == io::ErrorKind::WriteZero => true,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => true,
            };
            match (written, blocked) {
                (0, true) => return Poll::Pending,
                (0, false) => continue,
                (n, _) => return Poll::Ready(Ok(n)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn.writer().flush()?;
        ready!(this.poll_write_queued(cx))?;
        ready!(Pin::new(&mut this.io).poll_flush(cx))?;
        this.need_flush = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.write_closed {
            this.conn.send_close_notify();
            this.write_closed = true;
        }
        ready!(this.poll_write_queued(cx))?;
        Poll::Ready(match ready!(Pin::new(&mut this.io).poll_shutdown(cx)) {
            // Not being connected any more is fine for a shutdown.
            Err(err) if err.kind() != io::ErrorKind::NotConnected => Err(err),
            _ => Ok(()),
        })
    }
}

impl<T: Transport> Transport for HalfRttStream<T> {
    fn has_buffered_output(&self) -> bool {
        self.conn.wants_write()
    }

    /// As tokio-rustls' stream: the next `poll_write_vectored` sends the kept record with
    /// its own.
    fn seal_record_ahead(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.conn.writer().write_vectored(bufs)
    }

    fn seals_records_ahead(&self) -> bool {
        true
    }

    fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    fn tcp_stream(&self) -> Option<&TcpStream> {
        self.io.tcp_stream()
    }
}

/// `Read` over an `AsyncRead` in a poll: `Pending` becomes `WouldBlock` (as tokio-rustls').
struct SyncReadAdapter<'a, 'b, T> {
    io: &'a mut T,
    cx: &'a mut Context<'b>,
}

impl<T: AsyncRead + Unpin> Read for SyncReadAdapter<'_, '_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut buf = ReadBuf::new(buf);
        match Pin::new(&mut self.io).poll_read(self.cx, &mut buf) {
            Poll::Ready(Ok(())) => Ok(buf.filled().len()),
            Poll::Ready(Err(err)) => Err(err),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// `Write` over an `AsyncWrite` in a poll: `Pending` becomes `WouldBlock`.
struct SyncWriteAdapter<'a, 'b, T> {
    io: &'a mut T,
    cx: &'a mut Context<'b>,
}

impl<T: AsyncWrite + Unpin> Write for SyncWriteAdapter<'_, '_, T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut self.io).poll_write(self.cx, buf) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match Pin::new(&mut self.io).poll_flush(self.cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}
