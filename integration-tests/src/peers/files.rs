//! A peer's files: where they are ([`Layout`]), the fixture it serves ([`write_fixture`]),
//! its certificate ([`self_signed_pem`]) and its fresh directory.
//!
//! Invariant: everything a peer reads is world-readable (directories `0755`, files `0644`)
//! except its private key (`0600`), so that servers that drop privileges to another user
//! can serve it, and the key is still the starting user's alone.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::pki_types::CertificateDer;

use examples::body::pattern_byte;
use examples::responses::{BG_LEN, CRITICAL_LEN, CRITICAL_PATH, FIXTURE_BG_PATHS};

use super::PeerKind;

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

/// Writes `bytes` to a new file at `path` with the permissions `mode`.
pub(super) fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
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

/// A fresh directory for one peer, `0755` (servers that drop privileges must traverse it).
pub(super) fn temp_dir(kind: PeerKind) -> io::Result<PathBuf> {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::ServerName;

    use super::*;

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
        let is_pattern = |bytes: &[u8]| {
            bytes
                .iter()
                .enumerate()
                .all(|(i, &b)| b == pattern_byte(i as u64))
        };
        assert_eq!(critical.len() as u64, CRITICAL_LEN);
        assert_eq!(bg2.len() as u64, BG_LEN);
        assert!(is_pattern(&critical));
        assert!(is_pattern(&bg2));
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
}
