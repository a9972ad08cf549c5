//! The pieces of an `h2` test client that the tests against real servers share (the
//! `tls_flush::serve` tests and the example servers' tests): a bound on every wait, the
//! HTTP/2 handshake with test-sized windows, and body readers. Behind the `h2-client`
//! feature, so that the fuzz crate does not build h2.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use h2::client::{Connection, SendRequest};
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite};

/// Bound for anything a test waits on.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Awaits `fut` or panics after [`TIMEOUT`], naming `what`.
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// The HTTP/2 client handshake over `io` (a TLS stream that negotiated `h2`). With
/// `window`, the stream windows stay at that size (capacity is released only by the
/// caller, which lets a test stall a download); without, the stream and connection windows
/// are large (8 and 32 MiB) so that flow control never holds a test up.
pub async fn h2_handshake<T>(io: T, window: Option<u32>) -> (SendRequest<Bytes>, Connection<T>)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::client::Builder::new();
    match window {
        Some(w) => builder.initial_window_size(w),
        None => builder
            .initial_window_size(8 << 20)
            .initial_connection_window_size(32 << 20),
    };
    within("h2 handshake", builder.handshake(io))
        .await
        .expect("h2 handshake")
}

/// Reads up to `limit` bytes (at least; whole DATA frames) or to the end of `body`,
/// releasing flow-control capacity as it goes.
pub async fn read_all(body: &mut RecvStream, limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(chunk) = body.data().await else {
            break;
        };
        let chunk = chunk.expect("h2 DATA");
        body.flow_control()
            .release_capacity(chunk.len())
            .expect("release capacity");
        out.extend_from_slice(&chunk);
    }
    out
}

/// Reads at least `len` bytes of `body` without releasing flow-control capacity: with a
/// window of `len` or a little more, the server's download then stalls mid-body (the caller
/// releases the capacity later). Each DATA frame is awaited within [`TIMEOUT`].
pub async fn read_unreleased(body: &mut RecvStream, len: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < len {
        let chunk = within("DATA", body.data())
            .await
            .expect("the body ended early")
            .expect("h2 DATA");
        got.extend_from_slice(&chunk);
    }
    got
}
