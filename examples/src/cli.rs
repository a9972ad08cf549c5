//! The command line shared by both example servers.
//!
//! ```text
//! --addr IP:PORT        address to listen on (default 127.0.0.1:8443; port 0 picks one)
//! --cert PEM --key PEM  certificate chain and private key (default: a generated self-signed
//!                       certificate for `localhost` and `127.0.0.1`)
//! --policy NAME         how responses reach the wire: stock, early-flush, dynamic,
//!                       scheduled (default)
//! --record-size N       rustls `max_fragment_size`, in bytes including the 5-byte header
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{Parser, ValueEnum};

/// Command-line arguments of the example servers.
#[derive(Debug, Clone, Parser)]
#[command(about = "RFC 9218 priorities demo server over rustls (HTTP/2 and HTTP/1.1)")]
pub struct Args {
    /// Address to listen on; port 0 lets the OS pick one (the first stdout line tells which).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:8443")]
    pub addr: SocketAddr,

    /// PEM file with the certificate chain (leaf first); requires --key.
    #[arg(long, value_name = "PEM", requires = "key")]
    pub cert: Option<PathBuf>,

    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1); requires --cert.
    #[arg(long, value_name = "PEM", requires = "cert")]
    pub key: Option<PathBuf>,

    /// How response bytes reach the wire.
    #[arg(long, value_name = "NAME", value_enum, default_value_t = Policy::Scheduled)]
    pub policy: Policy,

    /// Maximum TLS record size passed to rustls `ServerConfig::max_fragment_size`
    /// (includes the 5-byte record header; 32..=16389). Default: rustls' maximum.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(32..=16389))]
    pub record_size: Option<u16>,
}

/// How the server moves response bytes from hyper to the TLS connection.
///
/// ```
/// use examples::Policy;
///
/// assert_eq!("early-flush".parse::<Policy>().unwrap().flush_policy(), Some(tls_flush::Policy::EarlyFlush));
/// assert_eq!(Policy::Stock.flush_policy(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, ValueEnum)]
pub enum Policy {
    /// Plain tokio-rustls under hyper, no wrapper: what a stock server does.
    Stock,
    /// `tls-flush` in h2's order: full records, an urgent small frame ends its record and
    /// is flushed at once, shallow downstream (the seeds' G0A).
    EarlyFlush,
    /// `tls-flush` in h2's order with dynamic record sizes.
    Dynamic,
    /// `tls-flush` with everything: RFC 9218 scheduling, packing, early cuts.
    #[default]
    Scheduled,
}

impl Policy {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self.flush_policy() {
            None => "stock",
            Some(p) => p.name(),
        }
    }

    /// The `tls-flush` preset, or `None` for stock (no wrapper).
    pub fn flush_policy(self) -> Option<tls_flush::Policy> {
        match self {
            Policy::Stock => None,
            Policy::EarlyFlush => Some(tls_flush::Policy::EarlyFlush),
            Policy::Dynamic => Some(tls_flush::Policy::Dynamic),
            Policy::Scheduled => Some(tls_flush::Policy::Scheduled),
        }
    }

    /// Every policy, in the order they are listed in help and error messages.
    pub fn all() -> &'static [Policy] {
        Policy::value_variants()
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown policy name; its message lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPolicy(pub String);

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown policy {:?}; valid policies: ", self.0)?;
        for (i, p) in Policy::all().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(p.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownPolicy {}

impl FromStr for Policy {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        <Policy as ValueEnum>::from_str(s, false).map_err(|_| UnknownPolicy(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn defaults() {
        let a = Args::try_parse_from(["x"]).unwrap();
        assert_eq!(a.addr, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(a.policy, Policy::Scheduled);
        assert!(a.cert.is_none() && a.key.is_none() && a.record_size.is_none());
    }

    #[test]
    fn all_options() {
        let a = Args::try_parse_from([
            "x",
            "--addr",
            "[::1]:0",
            "--cert",
            "c.pem",
            "--key",
            "k.pem",
            "--policy",
            "stock",
            "--record-size",
            "4096",
        ])
        .unwrap();
        assert_eq!(a.addr, "[::1]:0".parse().unwrap());
        assert_eq!(a.cert.unwrap(), PathBuf::from("c.pem"));
        assert_eq!(a.key.unwrap(), PathBuf::from("k.pem"));
        assert_eq!(a.record_size, Some(4096));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for argv in [
            &["x", "--policy", "bogus"][..],
            &["x", "--addr", "localhost"],
            &["x", "--cert", "c.pem"],
            &["x", "--key", "k.pem"],
            &["x", "--record-size", "16390"],
            &["x", "--record-size", "31"],
        ] {
            let e = Args::try_parse_from(argv).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{argv:?}");
        }
        let e = Args::try_parse_from(["x", "--policy", "bogus"]).unwrap_err();
        assert!(e.to_string().contains("stock"), "{e}");
    }

    #[test]
    fn policy_from_str_and_display() {
        assert_eq!("stock".parse::<Policy>().unwrap(), Policy::Stock);
        assert_eq!(Policy::Stock.to_string(), "stock");
        let e = "bogus".parse::<Policy>().unwrap_err();
        assert!(e.to_string().contains("valid policies: stock"), "{e}");
        for p in Policy::all() {
            assert_eq!(p.name().parse::<Policy>().unwrap(), *p);
        }
    }

    #[test]
    fn clap_definition_is_valid() {
        Args::command().debug_assert();
    }
}
