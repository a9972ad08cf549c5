//! Cleartext HTTP/2 with prior knowledge (h2c, RFC 9113 §3.3): the same resolution and TCP
//! connect as `FlushConnector`, no TLS, and the coalescing stream over the `TcpStream`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::tcp::TcpConnect;
use super::{FirstFlightConfig, FlushClientStream};

/// Connects to cleartext HTTP/2 servers by prior knowledge (h2c, `http://` URIs): resolves
/// the host and connects with happy eyeballs and `TCP_NODELAY` as
/// [`FlushConnector`](super::FlushConnector) does, then wraps the `TcpStream` in
/// [`FlushClientStream`], so that the preface, SETTINGS and the first request leave in one
/// TCP segment. There is no early data without TLS.
///
/// A `tower::Service<Uri>` for `hyper_util::client::legacy::Client` (its connections report
/// HTTP/2, so the client speaks nothing else), or use [`connect`](Self::connect) and
/// `hyper::client::conn::http2::handshake` directly. Only for servers known to speak
/// HTTP/2 on that port: there is no upgrade from HTTP/1.1.
///
/// ```no_run
/// use http_body_util::Empty;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use tls_flush::client::H2cConnector;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client: Client<_, Empty<bytes::Bytes>> =
///     Client::builder(TokioExecutor::new()).build(H2cConnector::new());
/// let response = client.get("http://localhost:8080/".parse()?).await?;
/// assert_eq!(response.version(), http::Version::HTTP_2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct H2cConnector {
    tcp: TcpConnect,
    first_flight: FirstFlightConfig,
}

impl H2cConnector {
    /// A connector with the default timeouts and first flight.
    ///
    /// ```
    /// let connector = tls_flush::client::H2cConnector::new();
    /// # let _ = connector;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The bound on name resolution and TCP connect together
    /// ([`DEFAULT_CONNECT_TIMEOUT`](super::DEFAULT_CONNECT_TIMEOUT), 10 s); `None` for
    /// none. Each address of a family that is tried gets an equal share of it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let connector = tls_flush::client::H2cConnector::new().connect_timeout(Duration::from_secs(3));
    /// # let _ = connector;
    /// ```
    #[must_use]
    pub fn connect_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.tcp.set_connect_timeout(timeout.into());
        self
    }

    /// How long the first address family has before the other one is tried in parallel
    /// (happy eyeballs, RFC 8305;
    /// [`DEFAULT_HAPPY_EYEBALLS_DELAY`](super::DEFAULT_HAPPY_EYEBALLS_DELAY), 250 ms);
    /// `None`: all addresses in turn.
    ///
    /// ```
    /// let connector = tls_flush::client::H2cConnector::new().happy_eyeballs_delay(None);
    /// # let _ = connector;
    /// ```
    #[must_use]
    pub fn happy_eyeballs_delay(mut self, delay: impl Into<Option<Duration>>) -> Self {
        self.tcp.set_happy_eyeballs_delay(delay.into());
        self
    }

    /// Resolves host names with `resolver` instead of getaddrinfo; see
    /// [`FlushConnector::resolver`](super::FlushConnector::resolver).
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use hyper_util::client::legacy::connect::dns::Name;
    ///
    /// let resolver = tower::service_fn(|_name: Name| async {
    ///     Ok::<_, std::convert::Infallible>(std::iter::once(SocketAddr::from(([127, 0, 0, 1], 8080))))
    /// });
    /// let connector = tls_flush::client::H2cConnector::new().resolver(resolver);
    /// # let _ = connector;
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

    /// How the first flight is held (its early-data methods do not matter here).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tls_flush::client::{FirstFlightConfig, H2cConnector};
    /// let connector = H2cConnector::new()
    ///     .first_flight(FirstFlightConfig::default().hold(Duration::from_millis(5)));
    /// # let _ = connector;
    /// ```
    #[must_use]
    pub fn first_flight(mut self, config: FirstFlightConfig) -> Self {
        self.first_flight = config;
        self
    }

    /// Connects to `uri`'s host and port (80 by default); `http` only.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let connector = tls_flush::client::H2cConnector::new();
    /// let stream = connector.connect(&"http://localhost:8080/".parse()?).await?;
    /// let (mut sender, conn) = hyper::client::conn::http2::handshake(
    ///     hyper_util::rt::TokioExecutor::new(),
    ///     hyper_util::rt::TokioIo::new(stream),
    /// )
    /// .await?;
    /// tokio::spawn(conn);
    /// let request = http::Request::get("http://localhost:8080/")
    ///     .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    /// let response = sender.send_request(request).await?;
    /// # let _ = response;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(&self, uri: &Uri) -> io::Result<FlushClientStream<TcpStream>> {
        if uri.scheme_str() != Some("http") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "H2cConnector: only http URIs",
            ));
        }
        Ok(self.wrap(self.tcp.connect(uri).await?))
    }

    /// Connects to `addr`.
    ///
    /// ```no_run
    /// # async fn run(connector: tls_flush::client::H2cConnector) -> std::io::Result<()> {
    /// let stream = connector.connect_addr("127.0.0.1:8080".parse().unwrap()).await?;
    /// # let _ = stream;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_addr(&self, addr: SocketAddr) -> io::Result<FlushClientStream<TcpStream>> {
        Ok(self.wrap(self.tcp.connect_addr(addr).await?))
    }

    fn wrap(&self, tcp: TcpStream) -> FlushClientStream<TcpStream> {
        FlushClientStream::with_config(tcp, self.first_flight.clone()).only_h2()
    }
}

/// The future of [`H2cConnector`]'s `Service::call`.
pub type H2cConnecting =
    Pin<Box<dyn Future<Output = io::Result<TokioIo<FlushClientStream<TcpStream>>>> + Send>>;

impl tower::Service<Uri> for H2cConnector {
    type Response = TokioIo<FlushClientStream<TcpStream>>;
    type Error = io::Error;
    type Future = H2cConnecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.connect(&uri).await.map(TokioIo::new) })
    }
}

/// HTTP/2 when an [`H2cConnector`] made the stream (prior knowledge), otherwise what the
/// `TcpStream` says.
impl Connection for FlushClientStream<TcpStream> {
    fn connected(&self) -> Connected {
        let connected = self.inner.connected();
        if self.only_h2 {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}
