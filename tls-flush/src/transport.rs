//! What the wrapper needs from the stream below it, beyond reading and writing.

use std::io;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream the wrapper can sit on: plain TCP (h2c) or TLS over TCP.
///
/// ```
/// fn accepts<T: tls_flush::Transport>() {}
/// accepts::<tokio::net::TcpStream>();
/// accepts::<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>();
/// ```
pub trait Transport: AsyncRead + AsyncWrite + Unpin {
    /// True while a lower layer holds bytes it accepted but has not yet handed to the
    /// socket (rustls ciphertext). The wrapper writes nothing new until it is false.
    fn has_buffered_output(&self) -> bool {
        false
    }

    /// Makes `bufs` a TLS record of their own and keeps its ciphertext for the next write,
    /// which sends it together with that write's record in one system call: a record
    /// boundary that costs no packet of its own. Returns the bytes taken; 0 where the
    /// transport has no records (plain TCP) or keeps nothing (the caller then writes
    /// `bufs` as usual). The caller writes next, or flushes.
    fn seal_record_ahead(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let _ = bufs;
        Ok(0)
    }

    /// True when [`seal_record_ahead`](Self::seal_record_ahead) keeps records: the wrapper
    /// then ends a record where the connection's first DATA begins. Elsewhere it builds
    /// its records as if the method did not exist.
    fn seals_records_ahead(&self) -> bool {
        false
    }

    /// The ALPN protocol negotiated, if this transport negotiates one.
    fn alpn_protocol(&self) -> Option<&[u8]> {
        None
    }

    /// The TCP socket underneath, for socket options.
    fn tcp_stream(&self) -> Option<&TcpStream> {
        None
    }

    /// What TCP reports about the path now, read before each record to size the writes
    /// (see [`PathState`](crate::PathState)); `None` when unknown (no TCP socket, or an OS
    /// without `TCP_INFO`), and then writes are not limited by it. A test transport may
    /// report a congestion window of its own.
    fn path_state(&self) -> Option<crate::PathState> {
        #[cfg(unix)]
        return self
            .tcp_stream()
            .and_then(|tcp| crate::PathState::read(tcp).ok());
        #[cfg(not(unix))]
        None
    }

    /// The socket's congestion control (`TCP_CONGESTION`), read once per connection by
    /// the write budget: a model-based one (BBR) keeps what is in flight near the path's
    /// bandwidth-delay product itself, so the budget does not cap it a second time.
    /// `None` when unknown, and then the cap applies.
    fn congestion_control(&self) -> Option<crate::CongestionControl> {
        self.tcp_stream()
            .and_then(|tcp| crate::socket::congestion_control(tcp).ok())
    }

    /// Asks the kernel to pace the socket's segments (Linux TCP pacing, at about 1.2
    /// congestion windows per RTT), once per connection, when the write budget finds a
    /// paced path (minimum RTT of [`MIN_PACED_RTT`](crate::MIN_PACED_RTT) or more) under a
    /// [loss-based](crate::CongestionControl::LossBased) congestion control: a record the
    /// budget releases then does not leave as one burst. Without a TCP socket, or where
    /// the kernel cannot pace, nothing changes.
    fn enable_pacing(&self) -> io::Result<()> {
        match self.tcp_stream() {
            Some(tcp) => crate::socket::enable_pacing(tcp),
            None => Ok(()),
        }
    }

    /// Ready when the socket underneath can take more bytes. The wrapper picks the next
    /// frames only then, so that they are chosen as late as possible.
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.tcp_stream() {
            Some(tcp) => tcp.poll_write_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl Transport for TcpStream {
    fn tcp_stream(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl<T: Transport> Transport for tokio_rustls::server::TlsStream<T> {
    fn has_buffered_output(&self) -> bool {
        self.get_ref().1.wants_write()
    }

    /// rustls encrypts what one `write_vectored` call gives it into records at once;
    /// tokio-rustls' next write sends every record waiting in one vectored write.
    fn seal_record_ahead(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        use std::io::Write;
        self.get_mut().1.writer().write_vectored(bufs)
    }

    fn seals_records_ahead(&self) -> bool {
        true
    }

    fn alpn_protocol(&self) -> Option<&[u8]> {
        self.get_ref().1.alpn_protocol()
    }

    fn tcp_stream(&self) -> Option<&TcpStream> {
        self.get_ref().0.tcp_stream()
    }
}
