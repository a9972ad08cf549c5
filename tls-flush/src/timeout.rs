//! The bound on every connect and handshake the crate waits for (the server's accept paths,
//! the client's TCP connect and TLS handshake): the operation, or a `TimedOut` error that
//! says what did not finish.

use std::future::Future;
use std::io;
use std::time::Duration;

/// `fut`, or once `timeout` has passed an [`io::ErrorKind::TimedOut`] error reading
/// "`what` within `timeout`".
pub(crate) async fn within<T>(
    timeout: Duration,
    what: &str,
    fut: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} within {timeout:?}"),
            ))
        })
}
