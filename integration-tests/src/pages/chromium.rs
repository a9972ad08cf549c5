//! Headless Chromium for the lab: one browser per page load, with a fresh profile,
//! optionally inside a network namespace, driven over the DevTools protocol.
//!
//! Invariants: the browser runs in a process group of its own, which is killed (browser,
//! zygote, renderers, utilities) when the [`Chromium`] is shut down or dropped, on every
//! path; its profile directory is removed afterwards. No virtual time: timings are the
//! wall clock's. Every wait is bounded by the caller's deadline.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::Browser;
use futures_util::StreamExt;
use rustls::pki_types::CertificateDer;
use rustls::server::ParsedCertificate;
use sha2::{Digest, Sha256};
use tls_flush_testkit::CHROMIUM_FLAGS;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::BoxError;

/// The browser binary (Debian's package `chromium`).
pub const CHROMIUM: &str = "chromium";

/// How much nicer than the lab the browser runs (`nice -n`): enough that the scheduler
/// gives the emulator and the servers the CPU first (weight 1024 against 110).
pub const BROWSER_NICENESS: i32 = 10;

/// What to do when [`CHROMIUM`] is missing.
const INSTALL_HINT: &str = "install it with scripts/install-test-tools.sh";

/// With the shared [`CHROMIUM_FLAGS`] (no sandbox, GPU, QUIC or background traffic;
/// certificates not checked, see also [`Launch::trusted_spki`]): headless (the new headless
/// mode: the full browser without a window); no default apps either; the DevTools endpoint
/// on a free port, printed on stderr. No virtual-time flag: virtual time distorts every
/// timing.
const FLAGS: &[&str] = &[
    "--headless=new",
    "--disable-default-apps",
    "--remote-debugging-port=0",
    // A laptop's window, so that what is above the fold does not depend on the headless
    // default (the viewport is 1280x713 CSS pixels in Chromium 156).
    "--window-size=1280,800",
];

/// The line Chromium prints on stderr once its DevTools endpoint listens, before the URL.
const DEVTOOLS_LINE: &str = "DevTools listening on ";

/// Lines of Chromium's stderr kept for error messages.
const STDERR_TAIL: usize = 30;

/// How long to wait for the browser to exit after it was killed.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// `chromium --version` (e.g. `Chromium 156.0.8078.114 ...`), or an error naming the
/// install script.
pub fn chromium_version() -> Result<String, BoxError> {
    let output = std::process::Command::new(CHROMIUM)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{CHROMIUM}` ({e}): {INSTALL_HINT}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find(|line| line.starts_with("Chromium"))
        .map(|line| line.trim().to_owned())
        .ok_or_else(|| {
            format!(
                "`{CHROMIUM} --version` printed no version ({}; stderr {:?}): {INSTALL_HINT}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )
            .into()
        })
}

/// How to launch the browser.
#[derive(Debug, Clone, Default)]
pub(crate) struct Launch {
    /// Run it inside this network namespace (`ip netns exec NAME`); the caller's thread
    /// must have entered it too, for the DevTools connection to its 127.0.0.1.
    pub(crate) namespace: Option<String>,
    /// `--ignore-certificate-errors-spki-list`: base64 SHA-256 of the servers' public
    /// keys. Chromium then treats their certificates as valid, which matters beyond the
    /// handshake: it does not cache responses that came with a certificate error.
    pub(crate) trusted_spki: Vec<String>,
}

impl Launch {
    /// Trusts the public keys of `certificates` ([`Launch::trusted_spki`]).
    pub(crate) fn trusting(
        mut self,
        certificates: &[CertificateDer<'_>],
    ) -> Result<Launch, BoxError> {
        for certificate in certificates {
            let parsed = ParsedCertificate::try_from(certificate)
                .map_err(|e| format!("parsing a server certificate: {e}"))?;
            let spki = parsed.subject_public_key_info();
            self.trusted_spki
                .push(base64(&Sha256::digest(spki.as_ref())));
        }
        Ok(self)
    }

    /// The browser's command line. It runs [`BROWSER_NICENESS`] steps nicer than the lab:
    /// page loads share the machine's cores with the link emulator and the server under
    /// test, which on a real link are other machines, and Chromium's rendering (software
    /// GL in headless mode) kept them off the CPU for milliseconds at a time (the tun
    /// link's server thread waited on the run queue for about twice the time it ran).
    fn command(&self, profile: &ProfileDir) -> Command {
        let niceness = BROWSER_NICENESS.to_string();
        let mut command = match &self.namespace {
            Some(name) => {
                let mut ip = Command::new("ip");
                ip.args(["netns", "exec", name, "nice", "-n", &niceness, CHROMIUM]);
                ip
            }
            None => {
                let mut nice = Command::new("nice");
                nice.args(["-n", &niceness, CHROMIUM]);
                nice
            }
        };
        command
            .args(FLAGS)
            .args(CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.0.display()));
        if !self.trusted_spki.is_empty() {
            command.arg(format!(
                "--ignore-certificate-errors-spki-list={}",
                self.trusted_spki.join(",")
            ));
        }
        command
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        command
    }
}

/// A running browser and the DevTools connection to it.
pub(crate) struct Chromium {
    browser: Browser,
    handler: JoinHandle<()>,
    process: BrowserProcess,
}

impl Chromium {
    /// Starts the browser with a fresh profile and connects to it, by `deadline`.
    pub(crate) async fn launch(launch: &Launch, deadline: Instant) -> Result<Chromium, BoxError> {
        let profile = ProfileDir::new()?;
        let mut child = launch.command(&profile).spawn().map_err(|e| {
            format!(
                "cannot start `{CHROMIUM}` ({e}): {INSTALL_HINT} (and iproute2 for a namespace)"
            )
        })?;
        let stderr = child
            .stderr
            .take()
            .ok_or("chromium's stderr is not piped")?;
        let tail = StderrTail::default();
        let (url_tx, url_rx) = oneshot::channel();
        tokio::spawn(read_stderr(stderr, tail.clone(), url_tx));
        let mut process = BrowserProcess {
            child,
            profile,
            tail,
        };
        match connect(&process, url_rx, deadline).await {
            Ok((browser, handler)) => Ok(Chromium {
                browser,
                handler,
                process,
            }),
            Err(err) => {
                process.shutdown().await;
                Err(err)
            }
        }
    }

    /// The DevTools client.
    pub(crate) fn browser(&self) -> &Browser {
        &self.browser
    }

    /// Kills the browser's process group and waits (briefly) for the browser to exit;
    /// dropping then removes the profile.
    pub(crate) async fn shutdown(mut self) {
        self.handler.abort();
        self.process.shutdown().await;
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        self.handler.abort();
    }
}

/// The browser's process, its profile directory and its recent stderr.
struct BrowserProcess {
    child: Child,
    profile: ProfileDir,
    tail: StderrTail,
}

impl BrowserProcess {
    /// Kills the process group (the browser's pid is its id, and stays ours until reaped).
    fn kill_group(&mut self) {
        use rustix::process::{kill_process_group, Pid, Signal};
        let pid = self.child.id().and_then(|id| i32::try_from(id).ok());
        if let Some(pid) = pid.and_then(Pid::from_raw) {
            // An error means the group is gone already.
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = self.child.start_kill();
    }

    /// Kills the process group and reaps the browser (waiting at most [`EXIT_WAIT`]).
    async fn shutdown(&mut self) {
        self.kill_group();
        let _ = tokio::time::timeout(EXIT_WAIT, self.child.wait()).await;
    }

    /// An error saying what went wrong, with the end of the browser's stderr.
    fn failure(&self, what: &str) -> BoxError {
        format!(
            "{CHROMIUM} {what}; profile {}; its stderr ends with:\n{}",
            self.profile.0.display(),
            self.tail.text()
        )
        .into()
    }
}

impl Drop for BrowserProcess {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Waits for the DevTools URL on `url`, connects to it and runs the connection's handler
/// on a task, by `deadline`.
async fn connect(
    process: &BrowserProcess,
    url: oneshot::Receiver<String>,
    deadline: Instant,
) -> Result<(Browser, JoinHandle<()>), BoxError> {
    let url = match tokio::time::timeout_at(deadline, url).await {
        Ok(Ok(url)) => url,
        Ok(Err(_)) => return Err(process.failure("exited before its DevTools endpoint listened")),
        Err(_) => return Err(process.failure("timed out waiting for its DevTools endpoint")),
    };
    let config = HandlerConfig {
        request_timeout: deadline.saturating_duration_since(Instant::now()),
        ..HandlerConfig::default()
    };
    let connecting = Browser::connect_with_config(url.clone(), config);
    let (browser, mut handler) = match tokio::time::timeout_at(deadline, connecting).await {
        Ok(Ok(connected)) => connected,
        Ok(Err(e)) => return Err(process.failure(&format!("connecting to {url}: {e}"))),
        Err(_) => return Err(process.failure(&format!("timed out connecting to {url}"))),
    };
    let handler = tokio::spawn(async move {
        while let Some(event) = handler.next().await {
            if let Err(err) = event {
                tracing::debug!(%err, "chromium's DevTools connection ended");
                break;
            }
        }
    });
    Ok((browser, handler))
}

/// The last [`STDERR_TAIL`] lines of Chromium's stderr.
#[derive(Debug, Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == STDERR_TAIL {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Reads Chromium's stderr to its end (so that the browser never blocks on a full pipe):
/// sends the DevTools URL on `url` and keeps the last lines in `tail`.
async fn read_stderr(stderr: ChildStderr, tail: StderrTail, url: oneshot::Sender<String>) {
    let mut reader = BufReader::new(stderr);
    let mut url = Some(url);
    let mut line = Vec::new();
    // Bytes, not `lines()`: one line of invalid UTF-8 must not stop the reading.
    while reader
        .read_until(b'\n', &mut line)
        .await
        .is_ok_and(|n| n > 0)
    {
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if let Some(found) = text.strip_prefix(DEVTOOLS_LINE) {
            if let Some(url) = url.take() {
                let _ = url.send(found.trim().to_owned());
            }
        }
        tail.push(text);
        line.clear();
    }
}

/// A fresh `--user-data-dir` (a cold profile: empty cache, no connections), removed when
/// dropped.
struct ProfileDir(PathBuf);

impl ProfileDir {
    fn new() -> Result<ProfileDir, BoxError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "lab-chromium-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("creating the profile {}: {e}", dir.display()))?;
        Ok(ProfileDir(dir))
    }
}

impl Drop for ProfileDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Standard base64 (RFC 4648 section 4, with padding), as Chromium's SPKI list wants it.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 0x3f]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in vectors {
            assert_eq!(base64(input.as_bytes()), expected, "{input:?}");
        }
    }

    #[test]
    fn trusting_a_certificate_adds_its_key_hash() {
        let identity = examples::tls::self_signed().unwrap();
        let launch = Launch::default().trusting(&identity.chain[..1]).unwrap();
        assert_eq!(launch.trusted_spki.len(), 1);
        // SHA-256 is 32 bytes: 44 base64 characters with one `=`.
        assert_eq!(launch.trusted_spki[0].len(), 44);
    }
}
