//! Resolution and TCP connect for both connectors: hyper-util's `HttpConnector` does the
//! work (getaddrinfo or an injected resolver, happy eyeballs between the address families,
//! a share of the connect timeout per address, `TCP_NODELAY`), under one deadline that also
//! covers resolution.

use std::error::Error;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use std::vec;

use http::Uri;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::net::TcpStream;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

type BoxError = Box<dyn Error + Send + Sync>;

/// Any resolver, boxed: the connector types stay free of a resolver parameter, for one
/// allocation per name lookup (IP literals are not looked up).
type Resolver = BoxCloneSyncService<Name, vec::IntoIter<SocketAddr>, BoxError>;

/// How long name resolution and the TCP connect may take together, by default.
///
/// 10 s, not unbounded: Linux gives up on an unanswered SYN only after about 2 minutes
/// (`tcp_syn_retries` = 6), and a dead first address of a name must leave time for the
/// next (each address gets a share of this, see `connect_timeout`). 10 s still allows for
/// two lost SYNs (retransmitted after 1 s and 3 s) and a slow resolver.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the first address family has before the other one is tried in parallel: the
/// Connection Attempt Delay that RFC 8305 §8 recommends (hyper-util's own default is RFC
/// 6555's 300 ms).
pub const DEFAULT_HAPPY_EYEBALLS_DELAY: Duration = Duration::from_millis(250);

/// The resolution and TCP settings shared by [`FlushConnector`](super::FlushConnector) and
/// [`H2cConnector`](super::H2cConnector).
#[derive(Clone, Debug)]
pub(crate) struct TcpConnect {
    resolver: Resolver,
    connect_timeout: Option<Duration>,
    happy_eyeballs_delay: Option<Duration>,
}

impl Default for TcpConnect {
    fn default() -> Self {
        TcpConnect {
            resolver: boxed(GaiResolver::new()),
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            happy_eyeballs_delay: Some(DEFAULT_HAPPY_EYEBALLS_DELAY),
        }
    }
}

fn boxed<R>(resolver: R) -> Resolver
where
    R: Service<Name> + Clone + Send + Sync + 'static,
    R::Response: Iterator<Item = SocketAddr>,
    R::Error: Into<BoxError>,
    R::Future: Send + 'static,
{
    BoxCloneSyncService::new(
        resolver
            .map_response(|addrs| addrs.collect::<Vec<_>>().into_iter())
            .map_err(|e: R::Error| -> BoxError { e.into() }),
    )
}

impl TcpConnect {
    pub(crate) fn set_connect_timeout(&mut self, timeout: Option<Duration>) {
        self.connect_timeout = timeout;
    }

    pub(crate) fn set_happy_eyeballs_delay(&mut self, delay: Option<Duration>) {
        self.happy_eyeballs_delay = delay;
    }

    pub(crate) fn set_resolver<R>(&mut self, resolver: R)
    where
        R: Service<Name> + Clone + Send + Sync + 'static,
        R::Response: Iterator<Item = SocketAddr>,
        R::Error: Into<BoxError>,
        R::Future: Send + 'static,
    {
        self.resolver = boxed(resolver);
    }

    /// Resolves `uri`'s host (unless it is an IP literal) and connects to one of its
    /// addresses; the port is `uri`'s, else the resolver's, else the scheme's (80 or 443).
    /// The caller has checked the scheme.
    pub(crate) async fn connect(&self, uri: &Uri) -> io::Result<TcpStream> {
        // Cheap: one `Arc` of settings; hyper-util's settings live there, ours here.
        let mut http = HttpConnector::new_with_resolver(self.resolver.clone());
        http.enforce_http(false);
        http.set_nodelay(true);
        // hyper-util divides it between the addresses of a family: a dead address takes
        // only its share, and the next one is tried.
        http.set_connect_timeout(self.connect_timeout);
        http.set_happy_eyeballs_timeout(self.happy_eyeballs_delay);
        let connect = async {
            poll_fn(|cx| http.poll_ready(cx)).await.map_err(into_io)?;
            let tcp = http.call(uri.clone()).await.map_err(into_io)?;
            Ok(tcp.into_inner())
        };
        self.within_timeout(connect).await
    }

    /// Connects to `addr`, no resolution.
    pub(crate) async fn connect_addr(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let tcp = self.within_timeout(TcpStream::connect(addr)).await?;
        // The first flight is one write: without Nagle it leaves at once, in one segment.
        tcp.set_nodelay(true)?;
        Ok(tcp)
    }

    async fn within_timeout<T>(
        &self,
        connect: impl Future<Output = io::Result<T>>,
    ) -> io::Result<T> {
        let Some(timeout) = self.connect_timeout else {
            return connect.await;
        };
        crate::timeout::within(timeout, "tls_flush::client: no TCP connection", connect).await
    }
}

/// An `io::Error` of the kind of the first `io::Error` in `error`'s chain (hyper-util wraps
/// them, e.g. a per-address `TimedOut` or `ConnectionRefused`), `Other` without one.
fn into_io(error: impl Into<BoxError>) -> io::Error {
    let error = error.into();
    let mut cause: Option<&(dyn Error + 'static)> = Some(&*error);
    let kind = loop {
        match cause {
            Some(e) => match e.downcast_ref::<io::Error>() {
                Some(io) => break io.kind(),
                None => cause = e.source(),
            },
            None => break io::ErrorKind::Other,
        }
    };
    io::Error::new(kind, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_kinds_survive_wrapping() {
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("tcp connect error")
            }
        }
        impl Error for Wrapper {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = Wrapper(io::ErrorKind::ConnectionRefused.into());
        assert_eq!(into_io(refused).kind(), io::ErrorKind::ConnectionRefused);
        assert_eq!(into_io("no address").kind(), io::ErrorKind::Other);
    }
}
