//! Which peers there are ([`PeerKind`]): their names, the programs and Debian packages
//! behind them, and whether this machine has them ([`PeerKind::binary`], [`NotInstalled`]).
//!
//! Invariant: the names of [`PeerKind::ALL`] (the priority workloads' lab cases) and of
//! [`PeerKind::RESUMING`] (the first-request workload's) are unique, and
//! [`PeerKind::from_name`] finds only the former, so that a priority-workload command line
//! never picks a peer that sends tickets.

use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::INSTALL_HINT;

/// Where Debian's Apache keeps its modules.
pub const APACHE_MODULES: &str = "/usr/lib/apache2/modules";
/// The Apache modules the configuration loads (mod_mime: the static sites' content types,
/// see [`SITE_CONTENT_TYPES`](super::SITE_CONTENT_TYPES)).
pub(super) const APACHE_MODULE_FILES: [(&str, &str); 5] = [
    ("mpm_event_module", "mod_mpm_event.so"),
    ("authz_core_module", "mod_authz_core.so"),
    ("ssl_module", "mod_ssl.so"),
    ("http2_module", "mod_http2.so"),
    ("mime_module", "mod_mime.so"),
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
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
