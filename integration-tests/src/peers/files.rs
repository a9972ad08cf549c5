//! A peer's files: where they are ([`Layout`]), the fixture it serves ([`write_fixture`]),
//! the static site it may serve besides ([`copy_site`], typed by [`SITE_CONTENT_TYPES`]),
//! its certificate ([`self_signed_pem`]) and its fresh directory.
//!
//! Invariants: everything a peer reads is world-readable (directories `0755`, files `0644`)
//! except its private key (`0600`), so that servers that drop privileges to another user
//! can serve it, and the key is still the starting user's alone. A copied site never
//! replaces a fixture file, and copying it never changes the caller's files (a file is
//! hard-linked only when it already has the mode a peer's files have).

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

/// The mode of every directory a peer reads: others must traverse it.
pub(super) const PUBLIC_DIR_MODE: u32 = 0o755;
/// The mode of every file a peer reads, except its key: others must read it.
pub(super) const PUBLIC_FILE_MODE: u32 = 0o644;

/// The file extensions of the browser lab's static sites and the `Content-Type` every
/// server of the lab sends for them: the peers' configurations ([`PeerKind::config`]) and
/// our site server ([`crate::site_server`]) are made from this table, so that a page is
/// typed alike everywhere.
///
/// The values are the IANA registrations browsers check (`text/javascript` per RFC 9239,
/// `font/woff2` per RFC 8081; Chromium refuses a stylesheet that is not `text/css`), with
/// no `charset` parameter, as nginx, Apache and `mime_guess` send them by default. None
/// holds whitespace: they are also written to `mime.types` files (nghttpd, Apache).
pub const SITE_CONTENT_TYPES: &[(&str, &str)] = &[
    ("html", "text/html"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("woff2", "font/woff2"),
    ("png", "image/png"),
    ("mp4", "video/mp4"),
    ("json", "application/json"),
    ("bin", "application/octet-stream"),
];

/// The [`SITE_CONTENT_TYPES`] entry of `path`'s extension (a URL path or a file name; the
/// extension is matched ignoring ASCII case, as nginx, Apache and `mime_guess` do), if any.
pub fn site_content_type(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let (_, extension) = name.rsplit_once('.')?;
    SITE_CONTENT_TYPES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(extension))
        .map(|&(_, content_type)| content_type)
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

    /// The media types file of the peers that read one (nghttpd's `--mime-types-file`,
    /// Apache's `TypesConfig`): [`SITE_CONTENT_TYPES`].
    pub fn mime_types(&self) -> PathBuf {
        self.dir.join("mime.types")
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
            fs::set_permissions(dir, fs::Permissions::from_mode(PUBLIC_DIR_MODE))?;
        }
        let bytes: Vec<u8> = (0..len).map(pattern_byte).collect();
        write_file(&file, &bytes, PUBLIC_FILE_MODE)?;
    }
    Ok(())
}

/// Copies what is in the directory `site` into `htdocs` (created if missing), so that a
/// file at `site/a/b.css` is served as `/a/b.css`: directories `0755`, and each file
/// hard-linked when it is `0644` already (cheap, and the caller's file is not changed),
/// copied and made `0644` otherwise (or when the link fails: another file system, or
/// `fs.protected_hardlinks` on another user's file).
///
/// Fails, leaving what was copied so far, on a file that exists in `htdocs` already (a
/// fixture path: the fixture must stay what it is) and on anything in `site` that is
/// neither a file nor a directory (symbolic links are not followed).
pub fn copy_site(site: &Path, htdocs: &Path) -> io::Result<()> {
    make_public_dir(htdocs)?;
    for entry in fs::read_dir(site).map_err(|e| with_path(site, e))? {
        let entry = entry?;
        let (from, to) = (entry.path(), htdocs.join(entry.file_name()));
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            copy_site(&from, &to)?;
        } else if file_type.is_file() {
            link_or_copy(&from, &to)?;
        } else {
            let message = "neither a file nor a directory (links are not followed)";
            return Err(with_path(&from, io::Error::other(message)));
        }
    }
    Ok(())
}

/// Creates `dir` (if missing) and gives it [`PUBLIC_DIR_MODE`].
fn make_public_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|e| with_path(dir, e))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(PUBLIC_DIR_MODE))
        .map_err(|e| with_path(dir, e))
}

/// Makes `to` a new file with `from`'s bytes and [`PUBLIC_FILE_MODE`] (see [`copy_site`]).
fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    if to.symlink_metadata().is_ok() {
        let message = "exists already (a site file may not replace a fixture file)";
        return Err(with_path(
            to,
            io::Error::new(io::ErrorKind::AlreadyExists, message),
        ));
    }
    let mode = fs::metadata(from)
        .map_err(|e| with_path(from, e))?
        .permissions()
        .mode();
    // Only a file that has the mode already is linked: setting it on a link would change
    // the caller's file too.
    if mode & 0o7777 == PUBLIC_FILE_MODE && fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    fs::copy(from, to).map_err(|e| with_path(from, e))?;
    fs::set_permissions(to, fs::Permissions::from_mode(PUBLIC_FILE_MODE))
        .map_err(|e| with_path(to, e))
}

/// `error`, its message prefixed with `path`.
fn with_path(path: &Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
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
    fs::set_permissions(&dir, fs::Permissions::from_mode(PUBLIC_DIR_MODE))?;
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

    /// The mode bits of `path`.
    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_site_is_linked_or_copied_beside_the_fixture() {
        use std::os::unix::fs::MetadataExt;
        let dir = temp_dir(PeerKind::Nginx).unwrap();
        let (site, htdocs) = (dir.join("site"), dir.join("htdocs"));
        fs::create_dir_all(site.join("a/b")).unwrap();
        write_file(&site.join("a/style.css"), b"body {}", PUBLIC_FILE_MODE).unwrap();
        write_file(&site.join("a/b/private.bin"), b"\x00\x01", 0o600).unwrap();
        write_fixture(&htdocs).unwrap();
        copy_site(&site, &htdocs).unwrap();
        let (linked, copied) = (htdocs.join("a/style.css"), htdocs.join("a/b/private.bin"));
        let same_file = |a: &Path, b: &Path| {
            let (a, b) = (fs::metadata(a).unwrap(), fs::metadata(b).unwrap());
            (a.dev(), a.ino()) == (b.dev(), b.ino())
        };
        assert!(same_file(&linked, &site.join("a/style.css")));
        assert!(!same_file(&copied, &site.join("a/b/private.bin")));
        assert_eq!(fs::read(&copied).unwrap(), b"\x00\x01");
        assert_eq!(mode(&copied), PUBLIC_FILE_MODE);
        assert_eq!(
            mode(&site.join("a/b/private.bin")),
            0o600,
            "the caller's file"
        );
        assert_eq!(mode(&htdocs.join("a/b")), PUBLIC_DIR_MODE);
        assert!(htdocs.join("critical").is_file(), "the fixture stays");
        // A site file may not replace a fixture file.
        let clashing = dir.join("clashing");
        fs::create_dir(&clashing).unwrap();
        write_file(&clashing.join("critical"), b"not it", PUBLIC_FILE_MODE).unwrap();
        let clash = copy_site(&clashing, &htdocs).unwrap_err();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(clash.kind(), io::ErrorKind::AlreadyExists, "{clash}");
    }

    #[test]
    fn site_content_types_go_by_extension() {
        assert_eq!(site_content_type("/article/style.css"), Some("text/css"));
        assert_eq!(
            site_content_type("/app/api/3.JSON"),
            Some("application/json")
        );
        assert_eq!(site_content_type("hero.png"), Some("image/png"));
        assert_eq!(site_content_type("/critical"), None);
        assert_eq!(site_content_type("/v1.2/readme"), None);
        for (extension, content_type) in SITE_CONTENT_TYPES {
            assert!(!extension.contains('.'), "{extension}");
            assert!(
                !content_type.contains(char::is_whitespace),
                "{content_type}"
            );
        }
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
