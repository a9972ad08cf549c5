//! What a peer is told: its configuration file, filled in from a template in
//! `integration-tests/peers/` ([`PeerKind::config`]), its command line ([`PeerKind::args`])
//! and its environment.
//!
//! Invariants: every `@NAME@` placeholder of every template is filled in (a unit test checks
//! each kind); the peers of [`PeerKind::ALL`] send no TLS session tickets, in the servers'
//! own terms and with OpenSSL's `NumTickets` 0 (see the [module documentation](super)),
//! while the [`PeerKind::RESUMING`] variants keep OpenSSL's tickets and log their requests.
//!
//! Every peer types the static sites' files by [`SITE_CONTENT_TYPES`], in its own terms and
//! whether or not it serves a site ([`PeerOptions::site`](super::PeerOptions::site)): the
//! fixture's paths have no extension, so its responses are the same either way. nginx gets
//! a `types` block (inside `http`, after the template's `default_type` line), h2o
//! `file.mime.addtypes` (over its defaults), and nghttpd (`--mime-types-file`) and Apache
//! (mod_mime's `TypesConfig`) a `mime.types` file of their own ([`Layout::mime_types`],
//! [`mime_types_file`]). The templates themselves do not name the types: they are added to
//! the filled-in text here, from the one table.

use std::ffi::OsString;
use std::path::Path;

use super::files::SITE_CONTENT_TYPES;
use super::kind::{APACHE_MODULES, APACHE_MODULE_FILES};
use super::{Layout, PeerKind};

/// The configuration templates, in `integration-tests/peers/`: `@NAME@` (the case), `@DIR@`
/// (the peer's directory), `@HTDOCS@`, `@CERT@`, `@KEY@`, `@LISTEN@` (`HOST:PORT`), `@HOST@`,
/// `@PORT@`, `@BUFFER@` (nginx's `ssl_buffer_size`), `@SESSIONS@` (nginx's session
/// ticket and early data lines) and `@MODULES@` (Apache's `LoadModule`
/// lines) are filled in by [`PeerKind::config`].
const NGINX_CONF: &str = include_str!("../../peers/nginx.conf");
/// h2o's template (see [`NGINX_CONF`]).
const H2O_CONF: &str = include_str!("../../peers/h2o.conf");
/// Apache httpd's template (see [`NGINX_CONF`]).
const APACHE_CONF: &str = include_str!("../../peers/httpd.conf");
/// The OpenSSL configuration nghttpd and h2o read through `OPENSSL_CONF`: no TLS 1.3 session
/// tickets. (Debian's own `/etc/ssl/openssl.cnf` has no `system_default` section, so nothing
/// else changes.)
pub(super) const OPENSSL_CONF: &str = include_str!("../../peers/openssl.cnf");
/// The name of that file in the peer's directory.
pub(super) const OPENSSL_CONF_FILE: &str = "openssl.cnf";
/// The line of [`NGINX_CONF`] (in its `http` block) that its `types` block follows.
const NGINX_TYPES_AFTER: &str = "    default_type application/octet-stream;\n";

impl PeerKind {
    /// The configuration file the peer reads (its name in the directory, and its text) for a
    /// server laid out as `layout`; `None` for nghttpd, which takes flags only (see
    /// [`args`](Self::args)).
    pub fn config(self, layout: &Layout) -> Option<(&'static str, String)> {
        let (name, template) = self.template()?;
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
                ("BUFFER", self.nginx_buffer_size().to_string()),
                ("SESSIONS", self.nginx_session_lines(layout)),
                ("MODULES", apache_load_modules()),
            ],
        );
        Some((name, self.with_content_types(text, layout)))
    }

    /// `config`, the filled-in template, with the lines that type the sites' files by
    /// [`SITE_CONTENT_TYPES`] (see the [module](self) docs).
    fn with_content_types(self, config: String, layout: &Layout) -> String {
        match self {
            PeerKind::Nginx | PeerKind::Nginx4k | PeerKind::Nginx0rtt | PeerKind::NginxNoEarly => {
                // A template change that drops the line is a bug, caught by the unit test.
                assert!(
                    config.contains(NGINX_TYPES_AFTER),
                    "nginx.conf has no `default_type`"
                );
                config.replacen(
                    NGINX_TYPES_AFTER,
                    &format!("{NGINX_TYPES_AFTER}{}", nginx_types()),
                    1,
                )
            }
            PeerKind::H2o => config + &h2o_add_types(),
            PeerKind::Apache => config + &apache_types_config(layout),
            PeerKind::Nghttpd => config,
        }
    }

    /// The configuration file's name and template; `None` for nghttpd.
    fn template(self) -> Option<(&'static str, &'static str)> {
        match self {
            PeerKind::Nginx | PeerKind::Nginx4k | PeerKind::Nginx0rtt | PeerKind::NginxNoEarly => {
                Some(("nginx.conf", NGINX_CONF))
            }
            PeerKind::Nghttpd => None,
            PeerKind::H2o => Some(("h2o.conf", H2O_CONF)),
            PeerKind::Apache => Some(("httpd.conf", APACHE_CONF)),
        }
    }

    /// nginx's `ssl_buffer_size`.
    fn nginx_buffer_size(self) -> &'static str {
        if self == PeerKind::Nginx4k {
            "4k"
        } else {
            "16k"
        }
    }

    /// nginx's session ticket and early data lines.
    fn nginx_session_lines(self, layout: &Layout) -> String {
        // The resuming variants log their requests (to count deliveries).
        let resuming = format!(
            "        ssl_session_tickets on;\n        access_log {};",
            layout.access_log().display()
        );
        match self {
            // OpenSSL's defaults: stateless tickets, two TLS 1.3 tickets per handshake.
            PeerKind::Nginx0rtt => format!("{resuming}\n        ssl_early_data on;"),
            PeerKind::NginxNoEarly => format!("{resuming}\n        ssl_early_data off;"),
            _ => "        # No TLS session tickets: without NumTickets 0, OpenSSL still sends two\n        \
                 # TLS 1.3 tickets (stateful ones) after the handshake.\n        \
                 ssl_session_tickets off;\n        ssl_conf_command NumTickets 0;"
                .to_string(),
        }
    }

    /// The arguments after the binary (the configuration file is at `config`, when there is
    /// one).
    pub fn args(self, layout: &Layout, config: Option<&Path>) -> Vec<OsString> {
        let dir = layout.dir.as_os_str();
        let config = config.map(os_path).unwrap_or_default();
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
                    os_path(&layout.error_log()),
                ]
            }
            PeerKind::Nghttpd => nghttpd_args(layout),
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
    /// with `NumTickets = 0` (written by [`PeerServer::start`](super::PeerServer::start) as
    /// [`OPENSSL_CONF_FILE`]).
    pub(super) fn env(self, layout: &Layout) -> Vec<(&'static str, OsString)> {
        if self.reads_openssl_conf() {
            vec![(
                "OPENSSL_CONF",
                layout.dir.join(OPENSSL_CONF_FILE).into_os_string(),
            )]
        } else {
            Vec::new()
        }
    }

    /// Whether it needs [`OPENSSL_CONF`] to send no tickets (nghttpd has no option for it,
    /// and h2o's own leaves OpenSSL's TLS 1.3 tickets on).
    pub(super) fn reads_openssl_conf(self) -> bool {
        matches!(self, PeerKind::Nghttpd | PeerKind::H2o)
    }

    /// Whether it reads the sites' content types from [`mime_types_file`] (written by
    /// [`PeerServer::start`](super::PeerServer::start) as [`Layout::mime_types`]).
    pub(super) fn reads_mime_types(self) -> bool {
        matches!(self, PeerKind::Nghttpd | PeerKind::Apache)
    }
}

/// The text of a `mime.types` file (the format of Debian's `/etc/mime.types`: a media type,
/// then its extensions) holding [`SITE_CONTENT_TYPES`], for nghttpd and Apache.
pub(super) fn mime_types_file() -> String {
    let mut text = String::from("# The lab's static-site content types (SITE_CONTENT_TYPES).\n");
    for (extension, content_type) in SITE_CONTENT_TYPES {
        text.push_str(&format!("{content_type} {extension}\n"));
    }
    text
}

/// nginx's `types` block (it replaces nginx's built-in list; other extensions get the
/// template's `default_type`).
fn nginx_types() -> String {
    let mut block =
        String::from("    # The static sites' content types (SITE_CONTENT_TYPES).\n    types {\n");
    for (extension, content_type) in SITE_CONTENT_TYPES {
        block.push_str(&format!("        {content_type} {extension};\n"));
    }
    block + "    }\n"
}

/// h2o's global `file.mime.addtypes` (applied to every host, over h2o's own defaults).
fn h2o_add_types() -> String {
    let mut lines = String::from(
        "\n# The static sites' content types (SITE_CONTENT_TYPES).\nfile.mime.addtypes:\n",
    );
    for (extension, content_type) in SITE_CONTENT_TYPES {
        lines.push_str(&format!("  \"{content_type}\": \".{extension}\"\n"));
    }
    lines
}

/// Apache's `TypesConfig`: mod_mime reads the sites' content types from the peer's
/// [`mime_types_file`] (and refuses to start without a types file; its default,
/// `conf/mime.types` under `ServerRoot`, does not exist).
fn apache_types_config(layout: &Layout) -> String {
    format!(
        "\n# The static sites' content types (SITE_CONTENT_TYPES).\nTypesConfig {}\n",
        layout.mime_types().display()
    )
}

/// nghttpd's flags: it has no configuration file.
fn nghttpd_args(layout: &Layout) -> Vec<OsString> {
    let listen = layout.listen();
    vec![
        os(&format!("--address={}", listen.ip())),
        os("--htdocs"),
        os_path(&layout.htdocs()),
        // Schedule by RFC 9218 (the `priority` header), not the RFC 7540 tree.
        os("--no-rfc7540-pri"),
        // The sites' content types, instead of the system's /etc/mime.types.
        os(&format!(
            "--mime-types-file={}",
            layout.mime_types().display()
        )),
        os(&listen.port().to_string()),
        os_path(&layout.key()),
        os_path(&layout.cert()),
    ]
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn os_path(p: &Path) -> OsString {
    p.as_os_str().to_owned()
}

/// Apache's `LoadModule` lines, one per module it needs.
fn apache_load_modules() -> String {
    let lines: Vec<String> = APACHE_MODULE_FILES
        .iter()
        .map(|(module, file)| format!("LoadModule {module} {APACHE_MODULES}/{file}"))
        .collect();
    lines.join("\n")
}

/// `template` with every `@NAME@` of `values` replaced by its value.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    values
        .iter()
        .fold(template.to_string(), |text, (name, value)| {
            text.replace(&format!("@{name}@"), value)
        })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn layout() -> Layout {
        Layout {
            dir: PathBuf::from("/tmp/lab-peer-x"),
            listen: "127.0.0.1:8443".parse().unwrap(),
        }
    }

    /// Asserts that `text` contains every one of `lines`.
    #[track_caller]
    fn assert_has_lines(text: &str, lines: &[&str]) {
        for line in lines {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn configs_say_what_the_lab_needs() {
        let l = layout();
        let (name, nginx) = PeerKind::Nginx.config(&l).unwrap();
        assert_eq!(name, "nginx.conf");
        assert_has_lines(
            &nginx,
            &[
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
            ],
        );
        let (_, nginx4k) = PeerKind::Nginx4k.config(&l).unwrap();
        assert!(nginx4k.contains("ssl_buffer_size 4k;"), "{nginx4k}");
        let (_, h2o) = PeerKind::H2o.config(&l).unwrap();
        assert_has_lines(
            &h2o,
            &[
                "num-threads: 1",
                "  port: 8443",
                "file.dir: /tmp/lab-peer-x/htdocs",
                "  mode: off",
            ],
        );
        let (_, apache) = PeerKind::Apache.config(&l).unwrap();
        assert_has_lines(
            &apache,
            &[
                "LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so",
                "LoadModule http2_module /usr/lib/apache2/modules/mod_http2.so",
                "Protocols h2 http/1.1",
                "Listen 127.0.0.1:8443 https",
                "ServerRoot /tmp/lab-peer-x",
                "PidFile /tmp/lab-peer-x/httpd.pid",
                "SSLOpenSSLConfCmd NumTickets 0",
            ],
        );
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
                "--mime-types-file=/tmp/lab-peer-x/mime.types",
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
    fn every_peer_types_the_site_files() {
        let l = layout();
        for kind in [PeerKind::Nginx, PeerKind::Nginx4k]
            .into_iter()
            .chain(PeerKind::RESUMING)
        {
            let (_, nginx) = kind.config(&l).unwrap();
            let types = nginx
                .find("    types {")
                .unwrap_or_else(|| panic!("{nginx}"));
            // Inside `http`, before the `server` block.
            assert!(nginx.find("http {").unwrap() < types, "{nginx}");
            assert!(types < nginx.find("server {").unwrap(), "{nginx}");
        }
        let (_, nginx) = PeerKind::Nginx.config(&l).unwrap();
        let (_, h2o) = PeerKind::H2o.config(&l).unwrap();
        let mime_types = mime_types_file();
        for (extension, content_type) in SITE_CONTENT_TYPES {
            assert_has_lines(&nginx, &[&format!("        {content_type} {extension};\n")]);
            assert_has_lines(
                &h2o,
                &[&format!("\n  \"{content_type}\": \".{extension}\"\n")],
            );
            assert_has_lines(&mime_types, &[&format!("\n{content_type} {extension}\n")]);
        }
        // Top level in h2o's YAML, so every host has them.
        assert_has_lines(&h2o, &["\nfile.mime.addtypes:\n"]);
        let (_, apache) = PeerKind::Apache.config(&l).unwrap();
        assert_has_lines(
            &apache,
            &[
                "LoadModule mime_module /usr/lib/apache2/modules/mod_mime.so",
                "\nTypesConfig /tmp/lab-peer-x/mime.types\n",
            ],
        );
        assert!(PeerKind::Apache.reads_mime_types() && PeerKind::Nghttpd.reads_mime_types());
    }
}
