//! TLS 1.3 early data answered in the server's first flight (0.5-RTT, RFC 8446 §2.3).
//!
//! tokio-rustls returns a server stream only once the handshake has completed, that is
//! once the client's Finished has arrived: a request sent as early data (0-RTT) is then
//! answered one round trip after it could be. [`HalfRttAcceptor`] drives rustls'
//! `ServerConnection` itself and, when the client's early data was accepted, returns a
//! [`HalfRttStream`] as soon as the server's flight (ServerHello to Finished) has been
//! written: hyper reads the early requests at once and its responses leave as 0.5-RTT
//! data (`ServerConfig::send_half_rtt_data`), before the client's Finished. Where early
//! data is not offered, rejected or refused, the stream is returned after the handshake,
//! as tokio-rustls would.
//!
//! What it guarantees is documented on [`HalfRttAcceptor`].
//!
//! ```no_run
//! # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
//! use tls_flush::{HalfRttAcceptor, DEFAULT_MAX_EARLY_DATA_SIZE};
//!
//! let acceptor = HalfRttAcceptor::new(tls_config, DEFAULT_MAX_EARLY_DATA_SIZE);
//! assert_eq!(acceptor.refusal(), None, "early data on");
//! let stream = acceptor.accept(tcp).await?;
//! let early = stream.early_requests(); // mark each request: early.mark(&mut request)
//! # Ok(())
//! # }
//! ```

mod stream;

use std::future::{poll_fn, Future};
use std::io;
use std::sync::Arc;

use rustls::server::StoresServerSessions;
use rustls::{ServerConfig, ServerConnection};
use tokio::io::{AsyncRead, AsyncWrite};

pub use stream::HalfRttStream;

/// A default for [`HalfRttAcceptor::new`]'s `max_early_data_size`: one TLS record's
/// plaintext (2^14 bytes, RFC 8446 §5.1), room for an HTTP/2 preface, SETTINGS and a
/// few requests' HEADERS. BoringSSL accepts 14,336 bytes.
pub const DEFAULT_MAX_EARLY_DATA_SIZE: u32 = 16 * 1024;

/// The bytes one session takes in rustls' session store, measured in
/// `tests/half_rtt.rs` (TLS 1.3 with TLS13_AES_256_GCM_SHA384, SNI `localhost`, no ALPN,
/// no client certificate): the 32-byte ticket id and the encoded session (its 48-byte
/// secret and parameters). A longer server name and an ALPN protocol add their lengths
/// (at most 255 bytes each). rustls' default cache holds 256 sessions: about 28 KiB.
pub const SESSION_ENTRY_BYTES: usize = 113;

/// How a server answers TLS 1.3 early data; see [`Serve::early_data`](crate::Serve::early_data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EarlyDataMode {
    /// As the rustls config says: early data is accepted when its `max_early_data_size`
    /// is above zero, and its requests are served after the handshake (tokio-rustls'
    /// accept, then [`EarlyDataStream`](crate::EarlyDataStream)).
    #[default]
    AfterHandshake,
    /// 0.5-RTT: up to `max_early_data_size` bytes of early data are accepted (the
    /// config's own setting is replaced) and answered before the client's Finished,
    /// through [`HalfRttAcceptor`]; non-idempotent early requests get `425 Too Early`.
    HalfRtt {
        /// The early data accepted per connection, in bytes (0: none).
        max_early_data_size: u32,
    },
}

impl EarlyDataMode {
    /// [`EarlyDataMode::HalfRtt`] with [`DEFAULT_MAX_EARLY_DATA_SIZE`].
    ///
    /// ```
    /// assert!(matches!(tls_flush::EarlyDataMode::half_rtt(), tls_flush::EarlyDataMode::HalfRtt { .. }));
    /// ```
    pub fn half_rtt() -> Self {
        EarlyDataMode::HalfRtt {
            max_early_data_size: DEFAULT_MAX_EARLY_DATA_SIZE,
        }
    }
}

/// Why a [`HalfRttAcceptor`] accepts no early data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlyDataRefusal {
    /// `max_early_data_size` is 0.
    Disabled,
    /// The config's client certificate verifier offers client authentication: a 0.5-RTT
    /// response would leave before the client's certificate is checked.
    ClientAuth,
    /// Resumption is stateless (`ServerConfig::ticketer` is enabled): its tickets can be
    /// used again within their lifetime, so a replay is not bounded (rustls refuses early
    /// data then too).
    StatelessTickets,
    /// The session store keeps nothing (no resumption, so no early data).
    NoSessionStore,
    /// The session store returned a session twice from `take`: its tickets are not single
    /// use, so early data could be replayed.
    ReusableSessions,
}

/// Accepts TLS connections whose early data is answered in the server's first flight
/// (0.5-RTT).
///
/// # Replay and authentication (RFC 8446 §8, RFC 8470)
///
/// Early data can be replayed by an attacker who recorded it, and a 0.5-RTT response is
/// written before the client's Finished proves that the peer holds the keys. So:
///
/// - **Single-use tickets.** Early data is accepted only on resumption with a *stateful*
///   session store whose `take` removes the session: rustls' default
///   `ServerSessionMemoryCache` does, so a ticket resumes once; a replayed ClientHello finds
///   no session, gets a full handshake, and rustls skips its early data (trial
///   decryption) without handing it on. The window is therefore not bounded by time but by
///   the store: a ticket evicted from the cache is refused, never replayed. rustls' default
///   cache holds 256 sessions of [`SESSION_ENTRY_BYTES`] (113) bytes each with a short
///   server name and no ALPN, plus the name's and ALPN protocol's length (at most 255
///   bytes each): about 28 KiB, at most about 156 KiB. A store shared by several servers
///   must make `take` atomic across them. The acceptor checks a custom store when it is
///   built (it puts a probe session, takes it, and takes it again; a store that returns
///   it twice, or that stores nothing, has early data refused) and refuses early data
///   with a stateless `Ticketer` (rustls refuses it too: such tickets can be replayed
///   within their lifetime).
/// - **Client certificates.** With client authentication configured (any client
///   certificate verifier other than `with_no_client_auth()`'s), early data is refused
///   ([`EarlyDataRefusal::ClientAuth`]): a response must not leave before the client's
///   certificate and Finished have been checked. Such connections are served after the
///   handshake.
/// - **Idempotent methods.** Requests that began in early data carry
///   [`EarlyData`](crate::EarlyData) (see [`HalfRttStream::early_requests`]), and
///   [`serve`](fn@crate::serve) with 0.5-RTT answers the non-idempotent ones with
///   `425 Too Early` ([`TooEarlyLayer`](crate::TooEarlyLayer)); the client retries them
///   after the handshake (RFC 8470 §5.2). So do `FlushListener::half_rtt` with
///   `HalfRttMakeService` (feature `axum`) and `FlushAcceptor::half_rtt` (feature
///   `axum-server`); a service that marks requests itself wraps them in
///   [`MarkEarly`](crate::MarkEarly).
///
///
/// ```no_run
/// # async fn run(tls_config: std::sync::Arc<rustls::ServerConfig>, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
/// let acceptor = tls_flush::HalfRttAcceptor::new(tls_config, 16 * 1024);
/// let stream = acceptor.accept(tcp).await?;
/// let stream = tls_flush::FlushStream::new(stream, tls_flush::FlushConfig::default());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct HalfRttAcceptor {
    config: Arc<ServerConfig>,
    refusal: Option<EarlyDataRefusal>,
}

impl HalfRttAcceptor {
    /// An acceptor on a copy of `config` with `max_early_data_size` and
    /// `send_half_rtt_data` set; or, when early data cannot be made safe
    /// ([`refusal`](Self::refusal)), with early data off (connections are served after the
    /// handshake). A custom session store is probed once here (see the module
    /// documentation).
    ///
    /// ```no_run
    /// # fn run(tls_config: std::sync::Arc<rustls::ServerConfig>) {
    /// let acceptor = tls_flush::HalfRttAcceptor::new(tls_config, tls_flush::DEFAULT_MAX_EARLY_DATA_SIZE);
    /// if let Some(why) = acceptor.refusal() {
    ///     eprintln!("no early data: {why:?}");
    /// }
    /// # }
    /// ```
    pub fn new(config: Arc<ServerConfig>, max_early_data_size: u32) -> Self {
        let refusal = refusal(&config, max_early_data_size);
        let mut config = Arc::unwrap_or_clone(config);
        match refusal {
            None => {
                config.max_early_data_size = max_early_data_size;
                config.send_half_rtt_data = true;
            }
            Some(why) => {
                tracing::debug!(reason = ?why, "tls-flush: early data refused");
                config.max_early_data_size = 0;
                config.send_half_rtt_data = false;
            }
        }
        HalfRttAcceptor {
            config: Arc::new(config),
            refusal,
        }
    }

    /// Why early data is off, if it is.
    ///
    /// ```no_run
    /// # fn run(acceptor: tls_flush::HalfRttAcceptor) {
    /// assert_eq!(acceptor.refusal(), None);
    /// # }
    /// ```
    pub fn refusal(&self) -> Option<EarlyDataRefusal> {
        self.refusal
    }

    /// The rustls config the connections use.
    ///
    /// ```no_run
    /// # fn run(acceptor: tls_flush::HalfRttAcceptor) {
    /// println!("{} bytes of early data", acceptor.config().max_early_data_size);
    /// # }
    /// ```
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }

    /// Handshakes on `io`: resolves once the handshake has completed, or, when the
    /// client's early data was accepted, as soon as the server's flight has been written.
    /// Not bounded in time: wrap it in a timeout.
    ///
    /// ```no_run
    /// # async fn run(acceptor: tls_flush::HalfRttAcceptor, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
    /// let stream = tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp))
    ///     .await??;
    /// # Ok(())
    /// # }
    /// ```
    pub fn accept<IO>(&self, io: IO) -> impl Future<Output = io::Result<HalfRttStream<IO>>> + Send
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let conn = ServerConnection::new(self.config.clone());
        async move {
            let conn = conn.map_err(io::Error::other)?;
            let mut stream = HalfRttStream::new(io, conn);
            poll_fn(|cx| stream.poll_handshake(cx)).await?;
            Ok(stream)
        }
    }
}

/// Why `config` cannot accept early data safely, if it cannot.
fn refusal(config: &ServerConfig, max_early_data_size: u32) -> Option<EarlyDataRefusal> {
    if max_early_data_size == 0 {
        Some(EarlyDataRefusal::Disabled)
    } else if offers_client_auth(config) {
        Some(EarlyDataRefusal::ClientAuth)
    } else if config.ticketer.enabled() {
        Some(EarlyDataRefusal::StatelessTickets)
    } else if !config.session_storage.can_cache() {
        Some(EarlyDataRefusal::NoSessionStore)
    } else {
        probe_single_use(config.session_storage.as_ref(), config)
    }
}

/// Whether `config` may ask for a client certificate: its verifier (a private field) is
/// anything but rustls' `NoClientAuth`, which `with_no_client_auth()` installs. The field's
/// name and value are read from the config's `Debug` (derived in rustls 0.23): should that
/// text change, every verifier counts as client authentication, and early data is refused
/// (a test checks that a config without client authentication still accepts it).
fn offers_client_auth(config: &ServerConfig) -> bool {
    !format!("{config:?}").contains("verifier: NoClientAuth,")
}

/// Puts a probe session under a fresh random key, then takes it twice: the second `take`
/// must find nothing.
fn probe_single_use(
    store: &dyn StoresServerSessions,
    config: &ServerConfig,
) -> Option<EarlyDataRefusal> {
    // Not a ticket id rustls could issue (those are 32 random bytes): the probe cannot
    // shadow a real session.
    let mut key = b"tls-flush single-use probe ".to_vec();
    let mut nonce = [0u8; 16];
    if config
        .crypto_provider()
        .secure_random
        .fill(&mut nonce)
        .is_err()
    {
        return Some(EarlyDataRefusal::ReusableSessions);
    }
    key.extend_from_slice(&nonce);
    if !store.put(key.clone(), b"probe".to_vec()) {
        return Some(EarlyDataRefusal::NoSessionStore);
    }
    let first = store.take(&key);
    let second = store.take(&key);
    match (first, second) {
        (Some(_), None) => None,
        (None, _) => Some(EarlyDataRefusal::NoSessionStore),
        (Some(_), Some(_)) => Some(EarlyDataRefusal::ReusableSessions),
    }
}
