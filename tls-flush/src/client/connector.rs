//! Resolution and TCP connect (happy eyeballs, `TCP_NODELAY`, a connect timeout), TLS with
//! ALPN `h2` (early data when the config allows it, a handshake timeout), and the coalescing
//! stream: as a function, and as a `tower::Service<Uri>` for hyper-util.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::tcp::TcpConnect;
use super::{ClientTransport, FirstFlightConfig, FlushClientStream};

/// How long the TLS handshake may take, by default: as long as
/// [`DEFAULT_CONNECT_TIMEOUT`](super::DEFAULT_CONNECT_TIMEOUT), for the same reason (a
/// server that accepted the connection and never answers must not hold it for minutes).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to HTTPS servers for HTTP/2: resolves the host and connects with happy eyeballs
/// and `TCP_NODELAY` (hyper-util's `HttpConnector`), TLS with the given
/// `rustls::ClientConfig` and ALPN `h2` only, then [`FlushClientStream`]. With
/// `enable_early_data` and a resumption store in the config (rustls keeps one by default),
/// a resumed connection sends an idempotent first request as TLS 1.3 early data.
///
/// Resolution and TCP connect are bounded by [`connect_timeout`](Self::connect_timeout)
/// (10 s by default), the TLS handshake by [`handshake_timeout`](Self::handshake_timeout)
/// (10 s); both fail with [`io::ErrorKind::TimedOut`]. For cleartext HTTP/2 see
/// [`H2cConnector`](super::H2cConnector).
///
/// A `tower::Service<Uri>` for `hyper_util::client::legacy::Client` (the connection reports
/// HTTP/2 when ALPN chose it, or while an early-data handshake is pending), or use
/// [`connect`](Self::connect) and `hyper::client::conn::http2::handshake` directly.
///
/// ```no_run
/// use std::sync::Arc;
/// use tls_flush::client::FlushConnector;
///
/// # async fn run(mut tls: rustls::ClientConfig) -> Result<(), Box<dyn std::error::Error>> {
/// tls.enable_early_data = true;
/// let connector = FlushConnector::new(Arc::new(tls));
/// let stream = connector.connect(&"https://localhost:8443/".parse()?).await?;
/// let (mut sender, conn) = hyper::client::conn::http2::handshake(
///     hyper_util::rt::TokioExecutor::new(),
///     hyper_util::rt::TokioIo::new(stream),
/// )
/// .await?;
/// tokio::spawn(conn);
/// let request = http::Request::get("https://localhost:8443/")
///     .body(http_body_util::Empty::<bytes::Bytes>::new())?;
/// let response = sender.send_request(request).await?;
/// # let _ = response;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FlushConnector {
    tls: Arc<rustls::ClientConfig>,
    early_data: bool,
    first_flight: FirstFlightConfig,
    tcp: TcpConnect,
    handshake_timeout: Option<Duration>,
}

impl FlushConnector {
    /// A connector with `tls`; early data is on when `tls.enable_early_data` is.
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// let connector = tls_flush::client::FlushConnector::new(tls);
    /// # let _ = connector;
    /// # }
    /// ```
    pub fn new(tls: Arc<rustls::ClientConfig>) -> Self {
        FlushConnector {
            early_data: tls.enable_early_data,
            tls,
            first_flight: FirstFlightConfig::default(),
            tcp: TcpConnect::default(),
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
        }
    }

    /// Whether a resumed connection may send its first flight as early data (it also needs
    /// `enable_early_data` in the rustls config, and a server that offered it).
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// let connector = tls_flush::client::FlushConnector::new(tls).early_data(false);
    /// # let _ = connector;
    /// # }
    /// ```
    #[must_use]
    pub fn early_data(mut self, enabled: bool) -> Self {
        self.early_data = enabled;
        self
    }

    /// How the first flight is held, and which first requests may go early.
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// use tls_flush::client::{FirstFlightConfig, FlushConnector};
    /// let connector = FlushConnector::new(tls)
    ///     .first_flight(FirstFlightConfig::default().early_methods([http::Method::GET]));
    /// # let _ = connector;
    /// # }
    /// ```
    #[must_use]
    pub fn first_flight(mut self, config: FirstFlightConfig) -> Self {
        self.first_flight = config;
        self
    }

    /// The bound on name resolution and TCP connect together
    /// ([`DEFAULT_CONNECT_TIMEOUT`](super::DEFAULT_CONNECT_TIMEOUT), 10 s); `None` for
    /// none. The TLS handshake has its own, [`handshake_timeout`](Self::handshake_timeout).
    /// When the name has several addresses of a family, each one tried gets an equal share
    /// (hyper-util's rule), so that a dead first address leaves time for the next.
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// use std::time::Duration;
    /// use tls_flush::client::FlushConnector;
    /// let connector = FlushConnector::new(tls.clone()).connect_timeout(Duration::from_secs(3));
    /// let unbounded = FlushConnector::new(tls).connect_timeout(None);
    /// # let _ = (connector, unbounded);
    /// # }
    /// ```
    #[must_use]
    pub fn connect_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.tcp.set_connect_timeout(timeout.into());
        self
    }

    /// How long the first address family has before the other one is tried in parallel
    /// (happy eyeballs, RFC 8305;
    /// [`DEFAULT_HAPPY_EYEBALLS_DELAY`](super::DEFAULT_HAPPY_EYEBALLS_DELAY), 250 ms). The
    /// first family is that of the resolver's first address; within a family, addresses are
    /// tried in turn. The first connection wins and the other attempt is dropped. `None`:
    /// all addresses in turn.
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// use std::time::Duration;
    /// let connector = tls_flush::client::FlushConnector::new(tls)
    ///     .happy_eyeballs_delay(Duration::from_millis(100));
    /// # let _ = connector;
    /// # }
    /// ```
    #[must_use]
    pub fn happy_eyeballs_delay(mut self, delay: impl Into<Option<Duration>>) -> Self {
        self.tcp.set_happy_eyeballs_delay(delay.into());
        self
    }

    /// Resolves host names with `resolver` instead of getaddrinfo (hyper-util's
    /// `GaiResolver`): any `tower::Service` from hyper-util's `Name` to socket addresses.
    /// A port the resolver returns is used when the URI has none; IP literals are not
    /// resolved.
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// use std::net::SocketAddr;
    /// use hyper_util::client::legacy::connect::dns::Name;
    ///
    /// // Every name is this host's loopback addresses, IPv6 first.
    /// let resolver = tower::service_fn(|_name: Name| async {
    ///     let addrs: [SocketAddr; 2] = ["[::1]:8443".parse()?, "127.0.0.1:8443".parse()?];
    ///     Ok::<_, std::net::AddrParseError>(addrs.into_iter())
    /// });
    /// let connector = tls_flush::client::FlushConnector::new(tls).resolver(resolver);
    /// # let _ = connector;
    /// # }
    /// ```
    #[must_use]
    pub fn resolver<R>(mut self, resolver: R) -> Self
    where
        R: tower::Service<Name> + Clone + Send + Sync + 'static,
        R::Response: Iterator<Item = SocketAddr>,
        R::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        R::Future: Send + 'static,
    {
        self.tcp.set_resolver(resolver);
        self
    }

    /// The bound on the TLS handshake ([`DEFAULT_HANDSHAKE_TIMEOUT`], 10 s); `None` for
    /// none. When early data is possible, tokio-rustls returns the stream before the
    /// ClientHello leaves, so this bounds nothing: the handshake then completes with the
    /// first flight, under the request's own deadlines.
    ///
    /// ```
    /// # fn make(tls: std::sync::Arc<rustls::ClientConfig>) {
    /// use std::time::Duration;
    /// let connector = tls_flush::client::FlushConnector::new(tls)
    ///     .handshake_timeout(Duration::from_secs(5));
    /// # let _ = connector;
    /// # }
    /// ```
    #[must_use]
    pub fn handshake_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.handshake_timeout = timeout.into();
        self
    }

    /// Connects to `uri`'s host and port (443 by default); `https` only.
    ///
    /// ```no_run
    /// # async fn run(connector: tls_flush::client::FlushConnector) -> std::io::Result<()> {
    /// let stream = connector.connect(&"https://localhost:8443/".parse().unwrap()).await?;
    /// # let _ = stream;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(&self, uri: &Uri) -> io::Result<FlushClientStream<TlsStream<TcpStream>>> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
        if uri.scheme_str() != Some("https") {
            return Err(invalid("FlushConnector: only https URIs"));
        }
        let host = uri
            .host()
            .ok_or_else(|| invalid("FlushConnector: URI without host"))?;
        // IPv6 literals come bracketed in URIs, and bare in server names and addresses.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| invalid("FlushConnector: invalid server name"))?;
        let tcp = self.tcp.connect(uri).await?;
        self.handshake(tcp, name).await
    }

    /// Connects to `addr`, naming the server `server_name` (SNI and certificate check).
    ///
    /// ```no_run
    /// # async fn run(connector: tls_flush::client::FlushConnector) -> std::io::Result<()> {
    /// let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    /// let stream = connector.connect_addr("127.0.0.1:8443".parse().unwrap(), name).await?;
    /// # let _ = stream;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_addr(
        &self,
        addr: SocketAddr,
        server_name: ServerName<'static>,
    ) -> io::Result<FlushClientStream<TlsStream<TcpStream>>> {
        self.handshake(self.tcp.connect_addr(addr).await?, server_name)
            .await
    }

    async fn handshake(
        &self,
        tcp: TcpStream,
        name: ServerName<'static>,
    ) -> io::Result<FlushClientStream<TlsStream<TcpStream>>> {
        let connector =
            tokio_rustls::TlsConnector::from(self.tls.clone()).early_data(self.early_data);
        // With early data possible this returns before the handshake; the ClientHello then
        // leaves with the first flight.
        let handshake = connector.with_alpn(vec![b"h2".to_vec()]).connect(name, tcp);
        let tls = match self.handshake_timeout {
            None => handshake.await?,
            Some(timeout) => {
                crate::timeout::within(timeout, "FlushConnector: no TLS handshake", handshake)
                    .await?
            }
        };
        Ok(FlushClientStream::with_config(tls, self.first_flight.clone()).only_h2())
    }
}

/// The future of [`FlushConnector`]'s `Service::call`.
pub type FlushConnecting = Pin<
    Box<dyn Future<Output = io::Result<TokioIo<FlushClientStream<TlsStream<TcpStream>>>>> + Send>,
>;

impl tower::Service<Uri> for FlushConnector {
    type Response = TokioIo<FlushClientStream<TlsStream<TcpStream>>>;
    type Error = io::Error;
    type Future = FlushConnecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.connect(&uri).await.map(TokioIo::new) })
    }
}

impl<IO> Connection for FlushClientStream<TlsStream<IO>>
where
    IO: Connection + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    fn connected(&self) -> Connected {
        let connected = self.inner.get_ref().0.connected();
        let h2 = match self.inner.alpn_protocol() {
            Some(protocol) => protocol == b"h2",
            None => self.only_h2 && self.inner.is_handshaking(),
        };
        if h2 {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}
