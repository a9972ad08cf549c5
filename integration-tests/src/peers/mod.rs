//! Real peer servers from Debian (nginx, nghttpd, h2o, Apache httpd), started as child
//! processes serving the experiment's fixture over TLS + HTTP/2, so that the lab measures
//! them behind the same link as our own cases ([`crate::workload::Case::Peer`]).
//!
//! The fixture is the demo app's ([`examples::responses`]): the critical resource and the
//! two background downloads, whose bytes follow [`examples::body::pattern_byte`].
//!
//! `scripts/install-peers.sh` installs them. [`PeerServer::start`] writes everything a peer
//! needs into a fresh temporary directory (removed again when the server is dropped):
//!
//! - `htdocs/critical` (4096 bytes) and `htdocs/bg/1`, `htdocs/bg/2` (1 MiB each), byte `i`
//!   being `(i % 251) as u8`, so that `/critical`, `/bg/1` and `/bg/2` are static files;
//! - with [`PeerOptions::site`], a static site's files in `htdocs/` beside the fixture (for
//!   the browser lab), typed by [`SITE_CONTENT_TYPES`] (nghttpd and Apache read those from
//!   a `mime.types` of their own; every peer has them, site or not);
//! - `cert.pem` and `key.pem`: a self-signed ECDSA P-256 certificate for `localhost` and
//!   `127.0.0.1`, `CA:FALSE` (webpki rejects a CA certificate used as the end entity), made
//!   like the in-process servers' ([`examples::tls::self_signed`]);
//! - the peer's configuration (see [`PeerKind::config`]), filled in from a template in
//!   `integration-tests/peers/` (`nginx.conf`, `h2o.conf`, `httpd.conf`, and `openssl.cnf`
//!   for nghttpd and h2o): a minimal one that keeps the server's own defaults except where
//!   stated there.
//!
//! It then starts the server on a free port, waits until the port completes a TLS 1.3
//! handshake with ALPN `h2` against that certificate, and stops it (SIGTERM, then SIGKILL
//! after [`STOP_GRACE`]) when the [`PeerServer`] is dropped. The servers' output goes to
//! files in the directory (quoted in errors), never to the terminal.
//!
//! Every peer sends **no TLS session tickets**, like the in-process servers, so that every
//! application-data record after the handshake is HTTP/2 bytes and `tls_records` counts the
//! same thing for every case. Turning tickets off in the servers' own terms is not enough:
//! OpenSSL then still sends two (stateful, 57-byte) TLS 1.3 tickets after the handshake,
//! unless its `NumTickets` is 0. So nginx has `ssl_session_tickets off;` and
//! `ssl_conf_command NumTickets 0;`, Apache `SSLSessionTickets off` and
//! `SSLOpenSSLConfCmd NumTickets 0`, and h2o (`ssl-session-resumption: {mode: off}`) and
//! nghttpd (which has no option for it) get an OpenSSL configuration file with
//! `NumTickets = 0` through `OPENSSL_CONF`. `tests/peers.rs` checks that no ticket arrives.
//!
//! The exceptions are the two nginx variants of the first-request workload
//! ([`crate::first_request`]), which measures resumed connections and TLS 1.3 early data:
//! `nginx-0rtt` (session tickets on, `ssl_early_data on;`) and `nginx-no-early` (tickets on,
//! `ssl_early_data off;`: OpenSSL's tickets then allow no early data, and early data offered
//! with another server's ticket is rejected). They are not in [`PeerKind::ALL`], the peers
//! of the priority workloads, whose record counts assume no tickets. They log their
//! requests ([`Layout::access_log`]), so that tests can count deliveries.
//!
//! # In another network namespace
//!
//! [`PeerServer::start_with`] takes [`PeerOptions`]: the address to listen on, a fixed port,
//! and a command prefix (for example `ip netns exec NAME`). Starting is synchronous on purpose:
//! called from a thread that entered a network namespace (`setns`), the port probe, the child
//! process and the readiness handshake all happen in that namespace.
//!
//! ```no_run
//! use integration_tests::peers::{PeerKind, PeerServer};
//! let nginx = PeerServer::start(PeerKind::Nginx)?;
//! println!("nginx listens on {}", nginx.addr());
//! drop(nginx); // stops it and removes its directory
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! # Layout
//!
//! - `kind`: [`PeerKind`], which peers there are, and whether they are installed
//!   ([`NotInstalled`]);
//! - `config`: what a peer is told (its configuration file, arguments and environment);
//! - `files`: its files ([`Layout`], [`write_fixture`], [`copy_site`], [`self_signed_pem`])
//!   and the static sites' content types ([`SITE_CONTENT_TYPES`]);
//! - `server`: the running process ([`PeerServer`], [`PeerOptions`]);
//! - `probe`: the readiness handshake.

mod config;
mod files;
mod kind;
mod probe;
mod server;

use std::time::Duration;

pub use files::{
    copy_site, self_signed_pem, site_content_type, write_fixture, Layout, SITE_CONTENT_TYPES,
};
pub use kind::{NotInstalled, PeerKind, APACHE_MODULES};
pub use server::{PeerOptions, PeerServer};

/// What to run to install the peers.
pub const INSTALL_HINT: &str = "run scripts/install-peers.sh";
/// How long [`PeerServer::start`] waits for the port to complete a TLS handshake.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopping peer gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
