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

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};

use examples::body::pattern_byte;
use examples::responses::{BG_LEN, CRITICAL_LEN, CRITICAL_PATH, FIXTURE_BG_PATHS};

use crate::BoxError;

/// What to run to install the peers.
pub const INSTALL_HINT: &str = "run scripts/install-peers.sh";
/// How long [`PeerServer::start`] waits for the port to complete a TLS handshake.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopping peer gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Where Debian's Apache keeps its modules.
pub const APACHE_MODULES: &str = "/usr/lib/apache2/modules";
/// The Apache modules the configuration loads.
const APACHE_MODULE_FILES: [(&str, &str); 4] = [
    ("mpm_event_module", "mod_mpm_event.so"),
    ("authz_core_module", "mod_authz_core.so"),
    ("ssl_module", "mod_ssl.so"),
    ("http2_module", "mod_http2.so"),
];
/// Directories searched for a peer's binary after `PATH` (nginx, nghttpd and apache2 are in
/// `/usr/sbin`, which a non-root `PATH` often lacks).
const EXTRA_BIN_DIRS: [&str; 3] = ["/usr/sbin", "/sbin", "/usr/bin"];

/// A peer server configuration: one lab case each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerKind {
    /// nginx with `ssl_buffer_size 16k` (its default).
    Nginx,
    /// nginx with `ssl_buffer_size 4k` (small records, nginx's remedy for time to first
    /// byte).
    Nginx4k,
    /// nghttpd (nghttp2's server), started with `--no-rfc7540-pri` so that it schedules by
    /// RFC 9218 (the `priority` request header) instead of the RFC 7540 tree.
    Nghttpd,
    /// h2o with one thread.
    H2o,
    /// Apache httpd with the event MPM, mod_ssl and mod_http2.
    Apache,
    /// nginx with session tickets on (OpenSSL's default two TLS 1.3 tickets) and
    /// `ssl_early_data on;`: accepts 0-RTT requests on a resumed connection. For the
    /// first-request workload only ([`PeerKind::RESUMING`]).
    Nginx0rtt,
    /// nginx with session tickets on and `ssl_early_data off;`: resumes, but rejects early
    /// data (the client must send its requests again after the handshake). For the
    /// first-request workload only ([`PeerKind::RESUMING`]).
    NginxNoEarly,
}

impl PeerKind {
    /// Every peer, in table order.
    pub const ALL: [PeerKind; 5] = [
        PeerKind::Nginx,
        PeerKind::Nginx4k,
        PeerKind::Nghttpd,
        PeerKind::H2o,
        PeerKind::Apache,
    ];

    /// The peers that send session tickets, for the first-request workload
    /// ([`crate::first_request`]); not lab cases of the priority workloads.
    pub const RESUMING: [PeerKind; 2] = [PeerKind::Nginx0rtt, PeerKind::NginxNoEarly];

    /// The case name on command lines, in tables and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Nginx => "nginx",
            PeerKind::Nginx0rtt => "nginx-0rtt",
            PeerKind::NginxNoEarly => "nginx-no-early",
            PeerKind::Nginx4k => "nginx-4k",
            PeerKind::Nghttpd => "nghttpd",
            PeerKind::H2o => "h2o",
            PeerKind::Apache => "apache",
        }
    }

    /// The program run.
    pub fn program(self) -> &'static str {
        match self {
            PeerKind::Nginx | PeerKind::Nginx4k | PeerKind::Nginx0rtt | PeerKind::NginxNoEarly => {
                "nginx"
            }
            PeerKind::Nghttpd => "nghttpd",
            PeerKind::H2o => "h2o",
            PeerKind::Apache => "apache2",
        }
    }

    /// The Debian package that has [`program`](Self::program).
    pub fn package(self) -> &'static str {
        match self {
            PeerKind::Nginx | PeerKind::Nginx4k | PeerKind::Nginx0rtt | PeerKind::NginxNoEarly => {
                "nginx"
            }
            PeerKind::Nghttpd => "nghttp2-server",
            PeerKind::H2o => "h2o",
            // The binary and its modules, without the apache2 package's system service.
            PeerKind::Apache => "apache2-bin",
        }
    }

    /// The kind named `name` among [`PeerKind::ALL`] (the priority workloads' peers), if any.
    pub fn from_name(name: &str) -> Option<PeerKind> {
        PeerKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether it sends TLS session tickets (the [`PeerKind::RESUMING`] variants).
    pub fn resumes(self) -> bool {
        PeerKind::RESUMING.contains(&self)
    }

    /// The peer's binary, or why it cannot run (for Apache, the modules are checked too).
    pub fn binary(self) -> Result<PathBuf, NotInstalled> {
        let not_installed = |detail: String| NotInstalled { kind: self, detail };
        let binary = find_program(self.program()).ok_or_else(|| {
            not_installed(format!(
                "no `{}` in PATH, {}",
                self.program(),
                EXTRA_BIN_DIRS.join(", ")
            ))
        })?;
        if self == PeerKind::Apache {
            for (_, file) in APACHE_MODULE_FILES {
                let path = Path::new(APACHE_MODULES).join(file);
                if !path.is_file() {
                    return Err(not_installed(format!("no {}", path.display())));
                }
            }
        }
        Ok(binary)
    }

    /// Whether [`binary`](Self::binary) finds what the peer needs.
    pub fn is_installed(self) -> bool {
        self.binary().is_ok()
    }

    /// The configuration file the peer reads (its name in the directory, and its text) for a
    /// server laid out as `layout`; `None` for nghttpd, which takes flags only (see
    /// [`args`](Self::args)).
    pub fn config(self, layout: &Layout) -> Option<(&'static str, String)> {
        let (name, template) = match self {
            PeerKind::Nginx | PeerKind::Nginx4k | PeerKind::Nginx0rtt | PeerKind::NginxNoEarly => {
                ("nginx.conf", NGINX_CONF)
            }
            PeerKind::Nghttpd => return None,
            PeerKind::H2o => ("h2o.conf", H2O_CONF),
            PeerKind::Apache => ("httpd.conf", APACHE_CONF),
        };
        let buffer = if self == PeerKind::Nginx4k {
            "4k"
        } else {
            "16k"
        };
        // The resuming variants log their requests (to count deliveries).
        let resuming = format!(
            "        ssl_session_tickets on;\n        access_log {};",
            layout.access_log().display()
        );
        let sessions = match self {
            // OpenSSL's defaults: stateless tickets, two TLS 1.3 tickets per handshake.
            PeerKind::Nginx0rtt => format!("{resuming}\n        ssl_early_data on;"),
            PeerKind::NginxNoEarly => format!("{resuming}\n        ssl_early_data off;"),
            _ => "        # No TLS session tickets: without NumTickets 0, OpenSSL still sends two\n        \
                 # TLS 1.3 tickets (stateful ones) after the handshake.\n        \
                 ssl_session_tickets off;\n        ssl_conf_command NumTickets 0;"
                .to_string(),
        };
        let modules: Vec<String> = APACHE_MODULE_FILES
            .iter()
            .map(|(module, file)| format!("LoadModule {module} {APACHE_MODULES}/{file}"))
            .collect();
        let listen = layout.listen();
        let text = fill(
            template,
            &[
                ("NAME", self.name().to_string()),
                ("DIR", layout.dir.display().to_string()),
                ("HTDOCS", layout.htdocs().display().to_string()),
                ("CERT", layout.cert().display().to_string()),
                ("KEY", layout.key().display().to_string()),
                ("LISTEN", listen.to_string()),
                ("HOST", listen.ip().to_string()),
                ("PORT", listen.port().to_string()),
                ("BUFFER", buffer.to_string()),
                ("SESSIONS", sessions),
                ("MODULES", modules.join("\n")),
            ],
        );
        Some((name, text))
    }

    /// The arguments after the binary (the configuration file is at `config`, when there is
    /// one).
    pub fn args(self, layout: &Layout, config: Option<&Path>) -> Vec<OsString> {
        let dir = layout.dir.as_os_str();
        let os = |s: &str| OsString::from(s);
        let path = |p: &Path| p.as_os_str().to_owned();
        let config = config.map(path).unwrap_or_default();
        match self {
            PeerKind::Nginx | PeerKind::Nginx4k | PeerKind::Nginx0rtt | PeerKind::NginxNoEarly => {
                let mut prefix = dir.to_owned();
                prefix.push("/");
                vec![
                    os("-c"),
                    config,
                    os("-p"),
                    prefix,
                    os("-e"),
                    path(&layout.error_log()),
                ]
            }
            PeerKind::Nghttpd => {
                let listen = layout.listen();
                vec![
                    os(&format!("--address={}", listen.ip())),
                    os("--htdocs"),
                    path(&layout.htdocs()),
                    // Schedule by RFC 9218 (the `priority` header), not the RFC 7540 tree.
                    os("--no-rfc7540-pri"),
                    os(&listen.port().to_string()),
                    path(&layout.key()),
                    path(&layout.cert()),
                ]
            }
            PeerKind::H2o => vec![os("-c"), config],
            PeerKind::Apache => vec![
                os("-d"),
                dir.to_owned(),
                os("-f"),
                config,
                os("-DFOREGROUND"),
            ],
        }
    }

    /// Extra environment of the peer's process: for nghttpd and h2o, an OpenSSL configuration
    /// with `NumTickets = 0` (written by [`PeerServer::start`] as `openssl.cnf`).
    fn env(self, layout: &Layout) -> Vec<(&'static str, OsString)> {
        match self {
            PeerKind::Nghttpd | PeerKind::H2o => vec![(
                "OPENSSL_CONF",
                layout.dir.join("openssl.cnf").into_os_string(),
            )],
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The configuration templates, in `integration-tests/peers/`: `@NAME@` (the case), `@DIR@`
/// (the peer's directory), `@HTDOCS@`, `@CERT@`, `@KEY@`, `@LISTEN@` (`HOST:PORT`), `@HOST@`,
/// `@PORT@`, `@BUFFER@` (nginx's `ssl_buffer_size`), `@SESSIONS@` (nginx's session
/// ticket and early data lines) and `@MODULES@` (Apache's `LoadModule`
/// lines) are filled in by [`PeerKind::config`].
const NGINX_CONF: &str = include_str!("../peers/nginx.conf");
/// h2o's template (see [`NGINX_CONF`]).
const H2O_CONF: &str = include_str!("../peers/h2o.conf");
/// Apache httpd's template (see [`NGINX_CONF`]).
const APACHE_CONF: &str = include_str!("../peers/httpd.conf");
/// The OpenSSL configuration nghttpd and h2o read through `OPENSSL_CONF`: no TLS 1.3 session
/// tickets. (Debian's own `/etc/ssl/openssl.cnf` has no `system_default` section, so nothing
/// else changes.)
const OPENSSL_CONF: &str = include_str!("../peers/openssl.cnf");

/// `template` with every `@NAME@` of `values` replaced by its value.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    values
        .iter()
        .fold(template.to_string(), |text, (name, value)| {
            text.replace(&format!("@{name}@"), value)
        })
}
/// A peer that cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotInstalled {
    /// The peer.
    pub kind: PeerKind,
    /// What is missing.
    pub detail: String,
}

impl fmt::Display for NotInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} not installed: {INSTALL_HINT} (case {}, Debian package {}; {})",
            self.kind.program(),
            self.kind.name(),
            self.kind.package(),
            self.detail
        )
    }
}

impl std::error::Error for NotInstalled {}

/// Finds an executable named `name` in `PATH` or [`EXTRA_BIN_DIRS`].
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_BIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| {
            fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Where a peer's files are, and where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The peer's directory (configuration, certificate, logs, `htdocs/`).
    pub dir: PathBuf,
    /// The address it listens on.
    pub listen: SocketAddr,
}

impl Layout {
    /// The document root.
    pub fn htdocs(&self) -> PathBuf {
        self.dir.join("htdocs")
    }

    /// The certificate (PEM).
    pub fn cert(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    /// The private key (PEM, PKCS#8).
    pub fn key(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    /// The server's error log (nginx, h2o, Apache).
    pub fn error_log(&self) -> PathBuf {
        self.dir.join("error.log")
    }

    /// The access log of the resuming nginx variants ([`PeerKind::RESUMING`]; the others
    /// log no requests): one line per request, `$request` among its fields.
    pub fn access_log(&self) -> PathBuf {
        self.dir.join("access.log")
    }

    /// The listening address.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }
}

/// Writes the fixture under `htdocs`: `critical` ([`CRITICAL_LEN`] bytes) and `bg/1`,
/// `bg/2` ([`BG_LEN`] bytes each), byte `i` being [`pattern_byte`]`(i)`; directories
/// `0755` and files `0644`, so that servers that drop privileges to another user (nginx's,
/// h2o's and Apache's workers when started as root) can read them.
pub fn write_fixture(htdocs: &Path) -> io::Result<()> {
    let files = FIXTURE_BG_PATHS
        .iter()
        .map(|path| (*path, BG_LEN))
        .chain([(CRITICAL_PATH, CRITICAL_LEN)]);
    for (path, len) in files {
        let file = htdocs.join(path.trim_start_matches('/'));
        let dir = file.parent().unwrap_or(htdocs);
        fs::create_dir_all(dir)?;
        for dir in [htdocs, dir] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
        }
        let bytes: Vec<u8> = (0..len).map(pattern_byte).collect();
        write_file(&file, &bytes, 0o644)?;
    }
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// A self-signed certificate for `localhost` and `127.0.0.1`, the same kind as our servers'
/// ([`examples::tls::self_signed_pem`]): the certificate (DER), the certificate (PEM) and the
/// private key (PEM, PKCS#8).
pub fn self_signed_pem() -> Result<(CertificateDer<'static>, String, String), rcgen::Error> {
    examples::tls::self_signed_pem()
}

/// How and where to start a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOptions {
    /// The address to listen on (default `127.0.0.1`). The readiness probe connects to it,
    /// or to `127.0.0.1` when it is unspecified (`0.0.0.0`).
    pub bind: IpAddr,
    /// The port; `None` picks a free one (and retries with another when it was taken
    /// meanwhile).
    pub port: Option<u16>,
    /// Words put before the binary, e.g. `["ip", "netns", "exec", "lab-server"]`.
    pub command_prefix: Vec<OsString>,
    /// How long to wait for the first successful handshake.
    pub start_timeout: Duration,
}

impl Default for PeerOptions {
    fn default() -> Self {
        PeerOptions {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            command_prefix: Vec::new(),
            start_timeout: START_TIMEOUT,
        }
    }
}

/// A running peer server; stopped (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and its
/// directory removed when dropped.
#[derive(Debug)]
pub struct PeerServer {
    kind: PeerKind,
    layout: Layout,
    certificate: CertificateDer<'static>,
    child: Option<Child>,
}

impl PeerServer {
    /// Starts `kind` on 127.0.0.1 and a free port (see the [module](self) docs); fails with
    /// [`NotInstalled`] (`nginx not installed: run scripts/install-peers.sh ...`) when the
    /// binary is missing.
    pub fn start(kind: PeerKind) -> Result<PeerServer, BoxError> {
        PeerServer::start_with(kind, &PeerOptions::default())
    }

    /// Starts `kind` with `options`.
    pub fn start_with(kind: PeerKind, options: &PeerOptions) -> Result<PeerServer, BoxError> {
        let binary = kind.binary()?;
        let attempts = if options.port.is_some() { 1 } else { 3 };
        let mut last = None;
        for _ in 0..attempts {
            let port = match options.port {
                Some(port) => port,
                None => free_port(options.bind)?,
            };
            match PeerServer::try_start(kind, &binary, options, SocketAddr::new(options.bind, port))
            {
                Ok(server) => return Ok(server),
                // Someone else took the port between the probe and the start: try another.
                Err(StartError::PortTaken(e)) => last = Some(e),
                Err(StartError::Other(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| "no attempt".into()))
    }

    fn try_start(
        kind: PeerKind,
        binary: &Path,
        options: &PeerOptions,
        listen: SocketAddr,
    ) -> Result<PeerServer, StartError> {
        let dir = temp_dir(kind).map_err(|e| format!("{kind}: creating a directory: {e}"))?;
        let layout = Layout { dir, listen };
        // From here on, dropping `server` stops the child (if any) and removes the directory.
        let mut server = PeerServer {
            kind,
            layout,
            certificate: CertificateDer::from(Vec::new()),
            child: None,
        };
        server.prepare().map_err(|e| format!("{kind}: {e}"))?;
        let config = match kind.config(&server.layout) {
            Some((name, text)) => {
                let path = server.layout.dir.join(name);
                write_file(&path, text.as_bytes(), 0o644)
                    .map_err(|e| format!("{kind}: {}: {e}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        let (program, args) = {
            let mut words: Vec<OsString> = options.command_prefix.clone();
            words.push(binary.as_os_str().to_owned());
            words.extend(kind.args(&server.layout, config.as_deref()));
            let program = words.remove(0);
            (program, words)
        };
        let output = |name: &str| -> Result<Stdio, BoxError> {
            let path = server.layout.dir.join(name);
            Ok(File::create(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .into())
        };
        let mut command = Command::new(&program);
        command
            .args(&args)
            .envs(kind.env(&server.layout))
            .current_dir(&server.layout.dir)
            .stdin(Stdio::null())
            .stdout(output("stdout.log")?)
            .stderr(output("stderr.log")?);
        let child = command
            .spawn()
            .map_err(|e| format!("{kind}: starting {}: {e}", Path::new(&program).display()))?;
        server.child = Some(child);
        server.wait_ready(options.start_timeout)?;
        Ok(server)
    }

    /// Writes the fixture, the certificate and the OpenSSL configuration of nghttpd and h2o.
    fn prepare(&mut self) -> Result<(), BoxError> {
        write_fixture(&self.layout.htdocs())?;
        let (der, cert, key) = self_signed_pem()?;
        write_file(&self.layout.cert(), cert.as_bytes(), 0o644)?;
        write_file(&self.layout.key(), key.as_bytes(), 0o600)?;
        self.certificate = der;
        if matches!(self.kind, PeerKind::Nghttpd | PeerKind::H2o) {
            write_file(
                &self.layout.dir.join("openssl.cnf"),
                OPENSSL_CONF.as_bytes(),
                0o644,
            )?;
        }
        Ok(())
    }

    /// Waits until the port completes a TLS 1.3 handshake with ALPN h2, the child exits, or
    /// `timeout` passes.
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), StartError> {
        let kind = self.kind;
        let probe = probe_addr(self.layout.listen);
        let config =
            Arc::new(client_config(&self.certificate).map_err(|e| format!("{kind}: {e}"))?);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .expect("started")
                .try_wait()
                .map_err(|e| format!("{kind}: {e}"))?
            {
                let logs = self.logs();
                let message = format!("{kind} exited at start ({status}); {logs}");
                return Err(if logs.contains("in use") {
                    StartError::PortTaken(message.into())
                } else {
                    StartError::Other(message.into())
                });
            }
            let last_error = match handshake(probe, config.clone()) {
                Ok(()) => return Ok(()),
                Err(Probe::Wrong(e)) => {
                    return Err(format!("{kind} at {probe}: {e}; {}", self.logs()).into())
                }
                Err(Probe::NotYet(e)) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "{kind} at {probe}: no TLS handshake within {timeout:?} (last: {last_error}); {}",
                    self.logs()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The peer.
    pub fn kind(&self) -> PeerKind {
        self.kind
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.layout.listen
    }

    /// Its certificate, to trust in clients (it is valid for `localhost` and `127.0.0.1`).
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.certificate
    }

    /// Its files.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The process id of the server (nginx's and Apache's master).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of the server's logs, for error messages.
    pub fn logs(&self) -> String {
        let mut parts = Vec::new();
        for name in ["error.log", "stderr.log", "stdout.log"] {
            let path = self.layout.dir.join(name);
            let Ok(text) = fs::read_to_string(&path) else {
                continue;
            };
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            if lines.is_empty() {
                continue;
            }
            let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
            parts.push(format!("{name}:\n  {tail}"));
        }
        if parts.is_empty() {
            "its logs are empty".into()
        } else {
            parts.join("\n")
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and returns how it
    /// ended; the directory is removed when `self` is dropped.
    pub fn stop(&mut self) -> io::Result<Option<ExitStatus>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        terminate(child.id());
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill()?;
        child.wait().map(Some)
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        if let Err(err) = self.stop() {
            tracing::warn!(%err, peer = %self.kind, "stopping a peer server");
        }
        let _ = fs::remove_dir_all(&self.layout.dir);
    }
}

enum StartError {
    /// The listening port was taken: another port may work.
    PortTaken(BoxError),
    Other(BoxError),
}

impl<E: Into<BoxError>> From<E> for StartError {
    fn from(e: E) -> Self {
        StartError::Other(e.into())
    }
}

/// Sends SIGTERM to `pid` (nginx: fast shutdown; Apache: stop, children included; h2o and
/// nghttpd: exit).
/// `pid` is our own child, not yet reaped, so not recycled: the signal reaches it.
fn terminate(pid: u32) {
    use rustix::process::{kill_process, Pid, Signal};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        // An error means it is gone already; `stop` then reaps it.
        let _ = kill_process(pid, Signal::TERM);
    }
}

/// A fresh directory for one peer, `0755` (servers that drop privileges must traverse it).
fn temp_dir(kind: PeerKind) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "lab-peer-{}-{}-{}-{nanos:x}",
        kind.name(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir(&dir)?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// A port that was free on `ip` a moment ago.
fn free_port(ip: IpAddr) -> io::Result<u16> {
    Ok(TcpListener::bind(SocketAddr::new(ip, 0))?
        .local_addr()?
        .port())
}

fn probe_addr(listen: SocketAddr) -> SocketAddr {
    if listen.ip().is_unspecified() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
    } else {
        listen
    }
}

fn client_config(certificate: &CertificateDer<'static>) -> Result<rustls::ClientConfig, BoxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certificate.clone())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

enum Probe {
    /// Not listening yet (or not answering yet): try again.
    NotYet(String),
    /// Listening, but not as configured: give up.
    Wrong(String),
}

/// One TLS handshake with the server at `addr`, which must pick TLS 1.3 and ALPN h2.
fn handshake(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<(), Probe> {
    let not_yet = |e: io::Error| Probe::NotYet(e.to_string());
    let mut tcp = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).map_err(not_yet)?;
    tcp.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(not_yet)?;
    tcp.set_write_timeout(Some(Duration::from_secs(2)))
        .map_err(not_yet)?;
    let name = ServerName::try_from("localhost").expect("a valid name");
    let mut tls = rustls::ClientConnection::new(config, name)
        .map_err(|e| Probe::Wrong(format!("client setup: {e}")))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).map_err(|e| {
            if e.kind() == io::ErrorKind::InvalidData {
                Probe::Wrong(format!("TLS handshake: {e}"))
            } else {
                Probe::NotYet(format!("TLS handshake: {e}"))
            }
        })?;
    }
    if tls.alpn_protocol() != Some(b"h2") {
        return Err(Probe::Wrong("the server did not negotiate ALPN h2".into()));
    }
    if tls.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
        return Err(Probe::Wrong(format!(
            "the server negotiated {:?}, not TLS 1.3",
            tls.protocol_version()
        )));
    }
    tls.send_close_notify();
    while tls.wants_write() {
        if tls.write_tls(&mut tcp).is_err() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            dir: PathBuf::from("/tmp/lab-peer-x"),
            listen: "127.0.0.1:8443".parse().unwrap(),
        }
    }

    #[test]
    fn names_are_the_lab_cases() {
        let names: Vec<&str> = PeerKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["nginx", "nginx-4k", "nghttpd", "h2o", "apache"]);
        for kind in PeerKind::ALL {
            assert_eq!(PeerKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(PeerKind::from_name("stock"), None);
    }

    #[test]
    fn configs_say_what_the_lab_needs() {
        let l = layout();
        let (name, nginx) = PeerKind::Nginx.config(&l).unwrap();
        assert_eq!(name, "nginx.conf");
        for line in [
            "daemon off;",
            "access_log off;",
            "listen 127.0.0.1:8443 ssl http2;",
            "ssl_protocols TLSv1.2 TLSv1.3;",
            "ssl_buffer_size 16k;",
            "ssl_session_tickets off;",
            "ssl_conf_command NumTickets 0;",
            "pid /tmp/lab-peer-x/nginx.pid;",
            "root /tmp/lab-peer-x/htdocs;",
            "ssl_certificate /tmp/lab-peer-x/cert.pem;",
        ] {
            assert!(nginx.contains(line), "{line} in\n{nginx}");
        }
        let (_, nginx4k) = PeerKind::Nginx4k.config(&l).unwrap();
        assert!(nginx4k.contains("ssl_buffer_size 4k;"), "{nginx4k}");
        let (_, h2o) = PeerKind::H2o.config(&l).unwrap();
        for line in [
            "num-threads: 1",
            "  port: 8443",
            "file.dir: /tmp/lab-peer-x/htdocs",
            "  mode: off",
        ] {
            assert!(h2o.contains(line), "{line} in\n{h2o}");
        }
        let (_, apache) = PeerKind::Apache.config(&l).unwrap();
        for line in [
            "LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so",
            "LoadModule http2_module /usr/lib/apache2/modules/mod_http2.so",
            "Protocols h2 http/1.1",
            "Listen 127.0.0.1:8443 https",
            "ServerRoot /tmp/lab-peer-x",
            "PidFile /tmp/lab-peer-x/httpd.pid",
            "SSLOpenSSLConfCmd NumTickets 0",
        ] {
            assert!(apache.contains(line), "{line} in\n{apache}");
        }
        assert!(PeerKind::Nghttpd.config(&l).is_none());
        for (kind, early) in [
            (PeerKind::Nginx0rtt, "ssl_early_data on;"),
            (PeerKind::NginxNoEarly, "ssl_early_data off;"),
        ] {
            let (_, text) = kind.config(&l).unwrap();
            assert!(text.contains(early), "{text}");
            assert!(text.contains("ssl_session_tickets on;"), "{text}");
            assert!(!text.contains("NumTickets"), "{text}");
            assert!(kind.resumes() && PeerKind::from_name(kind.name()).is_none());
        }
        // Every placeholder of every template is filled in.
        for kind in PeerKind::ALL.into_iter().chain(PeerKind::RESUMING) {
            if let Some((name, text)) = kind.config(&l) {
                let left: Vec<&str> = text.split('@').skip(1).step_by(2).collect();
                assert!(left.is_empty(), "{name}: {left:?} not filled in:\n{text}");
            }
        }
        let args = PeerKind::Nghttpd.args(&l, None);
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--address=127.0.0.1",
                "--htdocs",
                "/tmp/lab-peer-x/htdocs",
                "--no-rfc7540-pri",
                "8443",
                "/tmp/lab-peer-x/key.pem",
                "/tmp/lab-peer-x/cert.pem",
            ]
        );
        let args = PeerKind::Nginx.args(&l, Some(Path::new("/tmp/lab-peer-x/nginx.conf")));
        assert_eq!(
            args[..4],
            ["-c", "/tmp/lab-peer-x/nginx.conf", "-p", "/tmp/lab-peer-x/"]
        );
    }

    #[test]
    fn fixture_files_are_the_pattern() {
        let dir = temp_dir(PeerKind::Nginx).unwrap();
        let htdocs = dir.join("htdocs");
        write_fixture(&htdocs).unwrap();
        let critical = fs::read(htdocs.join("critical")).unwrap();
        let bg2 = fs::read(htdocs.join("bg/2")).unwrap();
        let mode = fs::metadata(htdocs.join("bg/1"))
            .unwrap()
            .permissions()
            .mode();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(critical.len() as u64, CRITICAL_LEN);
        assert_eq!(bg2.len() as u64, BG_LEN);
        assert!(critical
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern_byte(i as u64)));
        assert!(bg2
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern_byte(i as u64)));
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn certificate_is_a_leaf_for_localhost() {
        use rustls::client::danger::ServerCertVerifier;
        let (der, cert, key) = self_signed_pem().unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der.clone()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        for name in ["localhost", "127.0.0.1"] {
            verifier
                .verify_server_cert(
                    &der,
                    &[],
                    &ServerName::try_from(name).unwrap(),
                    &[],
                    rustls::pki_types::UnixTime::now(),
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_missing_program_says_how_to_install_it() {
        assert!(find_program("no-such-peer-server-binary").is_none());
        assert!(find_program("sh").is_some());
        let err = NotInstalled {
            kind: PeerKind::Nginx4k,
            detail: "no `nginx` in PATH".into(),
        }
        .to_string();
        assert!(
            err.starts_with("nginx not installed: run scripts/install-peers.sh"),
            "{err}"
        );
        assert!(err.contains("nginx-4k"), "{err}");
    }
}
