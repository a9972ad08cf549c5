//! A running peer ([`PeerServer`]): started as a child process in a fresh directory
//! ([`PeerOptions`] say where and how, and which static site it serves besides the
//! fixture), awaited until it completes a TLS handshake, and stopped (SIGTERM, then SIGKILL
//! after [`STOP_GRACE`]) and its directory removed when dropped.
//!
//! Invariants: from the moment its directory exists, a [`PeerServer`] owns it and the child
//! (so that every failed start cleans up after itself); the child's output goes to files in
//! the directory, never to the terminal; starting is synchronous, so that it happens in the
//! network namespace of the calling thread.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;

use super::config::{mime_types_file, OPENSSL_CONF, OPENSSL_CONF_FILE};
use super::files::{
    copy_site, self_signed_pem, temp_dir, write_file, write_fixture, PUBLIC_FILE_MODE,
};
use super::probe::{handshake, probe_addr, probe_config, Probe};
use super::{Layout, PeerKind, START_TIMEOUT, STOP_GRACE};
use crate::BoxError;

/// How often a starting peer is probed.
const START_POLL: Duration = Duration::from_millis(20);
/// How often a stopping peer is checked.
const STOP_POLL: Duration = Duration::from_millis(10);
/// Starts with a port of our choosing: another free port after one that was taken meanwhile.
const START_ATTEMPTS: usize = 3;
/// Log lines quoted per log file in errors.
const LOG_TAIL_LINES: usize = 8;

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
    /// A directory whose contents the peer serves too, under its document root and beside
    /// the fixture (a file at `SITE/a/b.css` is `/a/b.css`), typed by
    /// [`SITE_CONTENT_TYPES`](super::SITE_CONTENT_TYPES). It is linked or copied into the
    /// peer's own directory at start (see [`copy_site`]): files added to
    /// it later are not served, and its files must not change while the peer runs (a
    /// hard-linked file is the same file). A file at a fixture path fails the start.
    pub site: Option<PathBuf>,
}

impl Default for PeerOptions {
    fn default() -> Self {
        PeerOptions {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            command_prefix: Vec::new(),
            start_timeout: START_TIMEOUT,
            site: None,
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

/// Why a start failed.
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

impl PeerServer {
    /// Starts `kind` on 127.0.0.1 and a free port (see the [module](super) docs); fails with
    /// [`NotInstalled`](super::NotInstalled) (`nginx not installed: run
    /// scripts/install-peers.sh ...`) when the binary is missing.
    pub fn start(kind: PeerKind) -> Result<PeerServer, BoxError> {
        PeerServer::start_with(kind, &PeerOptions::default())
    }

    /// Starts `kind` with `options`.
    pub fn start_with(kind: PeerKind, options: &PeerOptions) -> Result<PeerServer, BoxError> {
        let binary = kind.binary()?;
        let attempts = if options.port.is_some() {
            1
        } else {
            START_ATTEMPTS
        };
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

    /// One start on `listen`: its directory and files, the child, the wait until it is up.
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
        server
            .prepare(options.site.as_deref())
            .map_err(|e| format!("{kind}: {e}"))?;
        let config = server.write_config()?;
        let mut command = server.command(binary, options, config.as_deref())?;
        let child = command.spawn().map_err(|e| {
            let program = Path::new(command.get_program()).display();
            format!("{kind}: starting {program}: {e}")
        })?;
        server.child = Some(child);
        server.wait_ready(options.start_timeout)?;
        Ok(server)
    }

    /// Writes the fixture and `site`'s files, the certificate, the OpenSSL configuration of
    /// nghttpd and h2o, and the media types file of nghttpd and Apache.
    fn prepare(&mut self, site: Option<&Path>) -> Result<(), BoxError> {
        write_fixture(&self.layout.htdocs())?;
        if let Some(site) = site {
            copy_site(site, &self.layout.htdocs()).map_err(|e| format!("copying the site: {e}"))?;
        }
        let (der, cert, key) = self_signed_pem()?;
        write_file(&self.layout.cert(), cert.as_bytes(), 0o644)?;
        write_file(&self.layout.key(), key.as_bytes(), 0o600)?;
        self.certificate = der;
        if self.kind.reads_openssl_conf() {
            write_file(
                &self.layout.dir.join(OPENSSL_CONF_FILE),
                OPENSSL_CONF.as_bytes(),
                0o644,
            )?;
        }
        if self.kind.reads_mime_types() {
            let text = mime_types_file();
            write_file(&self.layout.mime_types(), text.as_bytes(), PUBLIC_FILE_MODE)?;
        }
        Ok(())
    }

    /// Writes the peer's configuration file, if it has one, and says where.
    fn write_config(&self) -> Result<Option<PathBuf>, BoxError> {
        let kind = self.kind;
        let Some((name, text)) = kind.config(&self.layout) else {
            return Ok(None);
        };
        let path = self.layout.dir.join(name);
        write_file(&path, text.as_bytes(), 0o644)
            .map_err(|e| format!("{kind}: {}: {e}", path.display()))?;
        Ok(Some(path))
    }

    /// The command that runs the peer: `options`' prefix, `binary` and the peer's arguments,
    /// in its directory, its output to `stdout.log` and `stderr.log` there.
    fn command(
        &self,
        binary: &Path,
        options: &PeerOptions,
        config: Option<&Path>,
    ) -> Result<Command, BoxError> {
        let mut words: Vec<OsString> = options.command_prefix.clone();
        words.push(binary.as_os_str().to_owned());
        words.extend(self.kind.args(&self.layout, config));
        let program = words.remove(0);
        let mut command = Command::new(program);
        command
            .args(words)
            .envs(self.kind.env(&self.layout))
            .current_dir(&self.layout.dir)
            .stdin(Stdio::null())
            .stdout(self.output_file("stdout.log")?)
            .stderr(self.output_file("stderr.log")?);
        Ok(command)
    }

    /// A new file `name` in the directory, for the child's output.
    fn output_file(&self, name: &str) -> Result<Stdio, BoxError> {
        let path = self.layout.dir.join(name);
        Ok(File::create(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .into())
    }

    /// Waits until the port completes a TLS 1.3 handshake with ALPN h2, the child exits, or
    /// `timeout` passes.
    fn wait_ready(&mut self, timeout: Duration) -> Result<(), StartError> {
        let kind = self.kind;
        let probe = probe_addr(self.layout.listen);
        let config = probe_config(&self.certificate).map_err(|e| format!("{kind}: {e}"))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status().map_err(|e| format!("{kind}: {e}"))? {
                return Err(self.exited_at_start(status));
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
            std::thread::sleep(START_POLL);
        }
    }

    /// How the child ended, if it has (`None` too when there is no child).
    fn exit_status(&mut self) -> io::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => child.try_wait(),
            None => Ok(None),
        }
    }

    /// The error of a child that exited while starting: [`StartError::PortTaken`] when its
    /// logs say the port was in use.
    fn exited_at_start(&self, status: ExitStatus) -> StartError {
        let logs = self.logs();
        let message = format!("{} exited at start ({status}); {logs}", self.kind);
        if logs.contains("in use") {
            StartError::PortTaken(message.into())
        } else {
            StartError::Other(message.into())
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
        let parts: Vec<String> = ["error.log", "stderr.log", "stdout.log"]
            .into_iter()
            .filter_map(|name| self.log_tail(name))
            .collect();
        if parts.is_empty() {
            "its logs are empty".into()
        } else {
            parts.join("\n")
        }
    }

    /// The last non-empty lines of the log `name`, headed by its name; `None` when it is
    /// missing or empty.
    fn log_tail(&self, name: &str) -> Option<String> {
        let text = fs::read_to_string(self.layout.dir.join(name)).ok()?;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            return None;
        }
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n  ");
        Some(format!("{name}:\n  {tail}"))
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
            std::thread::sleep(STOP_POLL);
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

/// A port that was free on `ip` a moment ago.
fn free_port(ip: IpAddr) -> io::Result<u16> {
    Ok(TcpListener::bind(SocketAddr::new(ip, 0))?
        .local_addr()?
        .port())
}
