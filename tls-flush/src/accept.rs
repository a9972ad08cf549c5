//! What an accept error means, and how long to wait before the next `accept`: shared by
//! [`serve`](fn@crate::serve) and [`FlushListener`](crate::FlushListener), so that both treat
//! `EMFILE` and a reset pending connection the same way.
//!
//! Invariant: an error about one pending connection never delays the next one; resource
//! exhaustion (`EMFILE`, `ENFILE`, `ENOBUFS`, ...) backs off exponentially from 5 ms to 1 s,
//! so that a full file table is not retried in a busy loop; the backoff resets at the first
//! successful accept.

use std::future::Future;
use std::io;
use std::time::Duration;

/// The default bound on a TLS handshake.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `handshake`, or a `TimedOut` error once `timeout` has passed: the bound every accept
/// path ([`serve`](fn@crate::serve), [`FlushListener`](crate::FlushListener), the 0.5-RTT
/// acceptor for axum-server) puts on a TLS handshake.
pub(crate) async fn handshake_within<T>(
    timeout: Duration,
    handshake: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    crate::timeout::within(timeout, "TLS handshake not finished", handshake).await
}
const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// What an accept error means for the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcceptError {
    /// About the pending connection only: accept the next one at once.
    Connection,
    /// The listening socket is unusable for good.
    Fatal,
    /// Resource exhaustion or unknown: retry after a backoff.
    Transient,
}

pub(crate) fn classify(err: &io::Error) -> AcceptError {
    match err.raw_os_error() {
        Some(libc::EBADF | libc::ENOTSOCK | libc::EINVAL) => AcceptError::Fatal,
        // Network errors Linux passes on from the pending connection (accept(2)), and a
        // firewall's EPERM.
        Some(
            libc::ECONNABORTED
            | libc::ECONNRESET
            | libc::ECONNREFUSED
            | libc::EPROTO
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::EHOSTUNREACH
            | libc::EOPNOTSUPP
            | libc::ENETUNREACH
            | libc::EPERM,
        ) => AcceptError::Connection,
        Some(_) => AcceptError::Transient,
        None => match err.kind() {
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused => AcceptError::Connection,
            _ => AcceptError::Transient,
        },
    }
}

/// Exponential backoff between failed accepts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Backoff {
    last: Option<Duration>,
}

impl Backoff {
    /// The delay before the next attempt after one more failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self
            .last
            .map_or(MIN_ACCEPT_BACKOFF, |d| (d * 2).min(MAX_ACCEPT_BACKOFF));
        self.last = Some(delay);
        delay
    }

    /// An accept succeeded.
    pub(crate) fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors() {
        let os = io::Error::from_raw_os_error;
        assert_eq!(classify(&os(libc::EMFILE)), AcceptError::Transient);
        assert_eq!(classify(&os(libc::ENFILE)), AcceptError::Transient);
        assert_eq!(classify(&os(libc::ENOBUFS)), AcceptError::Transient);
        assert_eq!(classify(&os(libc::ECONNABORTED)), AcceptError::Connection);
        assert_eq!(classify(&os(libc::EPROTO)), AcceptError::Connection);
        assert_eq!(classify(&os(libc::EBADF)), AcceptError::Fatal);
        assert_eq!(classify(&os(libc::EINVAL)), AcceptError::Fatal);
        let custom = io::Error::new(io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(classify(&custom), AcceptError::Connection);
        assert_eq!(classify(&io::Error::other("?")), AcceptError::Transient);
    }

    #[test]
    fn backoff_doubles_up_to_a_second_and_resets() {
        let mut b = Backoff::default();
        let delays: Vec<_> = (0..10).map(|_| b.next_delay()).collect();
        assert_eq!(delays[0], MIN_ACCEPT_BACKOFF);
        assert_eq!(delays[1], MIN_ACCEPT_BACKOFF * 2);
        assert_eq!(*delays.last().unwrap(), MAX_ACCEPT_BACKOFF);
        b.reset();
        assert_eq!(b.next_delay(), MIN_ACCEPT_BACKOFF);
    }
}
