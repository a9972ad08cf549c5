//! The command line shared by both example servers.
//!
//! ```text
//! --addr IP:PORT        address to listen on (default 127.0.0.1:8443; port 0 picks one)
//! --cert PEM --key PEM  certificate chain and private key (default: a generated self-signed
//!                       certificate for `localhost` and `127.0.0.1`)
//! --policy NAME         how responses reach the wire: stock, or a `tls_flush::Policy`
//!                       (early-flush, dynamic, scheduled: the default)
//! --record-size N       rustls `max_fragment_size`, in bytes including the 5-byte header
//! --memory-budget BYTES a `tls_flush::MemoryBudget` of BYTES shared by all connections
//!                       (default: the process-wide one, an eighth of the machine's memory);
//!                       its usage is printed on stdout when its high-water mark rises
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Parser, ValueEnum};
use tls_flush::Policy;

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
    // `None` is `stock`: plain tokio-rustls under hyper, without tls-flush. The type is
    // spelled out so that clap takes it as the value, not as an optional argument.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = policy_parser(),
        default_value = Policy::default().name(),
    )]
    pub policy: std::option::Option<Policy>,

    /// Maximum TLS record size passed to rustls `ServerConfig::max_fragment_size`
    /// (includes the 5-byte record header; 32..=16389). Default: rustls' maximum.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(32..=16389))]
    pub record_size: Option<u16>,

    /// Memory budget shared by all connections' write queues, in bytes (default: the
    /// process-wide `tls_flush::MemoryBudget::for_machine`). With it, each rise of the
    /// budget's high-water mark prints `memory-budget used=U high_water=H limit=L
    /// connections=C` on stdout, at most once per second.
    #[arg(long, value_name = "BYTES")]
    pub memory_budget: Option<usize>,
}

/// The `--policy` value that serves without `tls_flush` (a stock server).
pub const STOCK: &str = "stock";

/// The `--policy` name of `policy`: [`STOCK`] for `None`, else [`Policy::name`].
///
/// ```
/// use examples::cli::policy_name;
///
/// assert_eq!(policy_name(None), "stock");
/// assert_eq!(policy_name(Some(tls_flush::Policy::EarlyFlush)), "early-flush");
/// ```
pub fn policy_name(policy: Option<Policy>) -> &'static str {
    policy.map_or(STOCK, Policy::name)
}

/// Parses `--policy`: [`STOCK`] or any [`Policy`] by its `clap::ValueEnum` name, so that a
/// policy added to `tls_flush` is a value here too; an unknown name is a usage error that
/// lists them all.
fn policy_parser() -> impl TypedValueParser<Value = Option<Policy>> {
    let stock = PossibleValue::new(STOCK)
        .help("Plain tokio-rustls under hyper, no wrapper: what a stock server does");
    let ours = Policy::value_variants()
        .iter()
        .filter_map(ValueEnum::to_possible_value);
    // `stock` is the one possible value that names no `Policy`.
    PossibleValuesParser::new(std::iter::once(stock).chain(ours))
        .map(|name| <Policy as ValueEnum>::from_str(&name, false).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn defaults() {
        let a = Args::try_parse_from(["x"]).unwrap();
        assert_eq!(a.addr, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(a.policy, Some(Policy::Scheduled));
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
            "--memory-budget",
            "67108864",
        ])
        .unwrap();
        assert_eq!(a.addr, "[::1]:0".parse().unwrap());
        assert_eq!(a.cert.unwrap(), PathBuf::from("c.pem"));
        assert_eq!(a.key.unwrap(), PathBuf::from("k.pem"));
        assert_eq!(a.policy, None);
        assert_eq!(a.record_size, Some(4096));
        assert_eq!(a.memory_budget, Some(64 << 20));
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
    fn every_policy_name_is_a_value() {
        let parse = |name: &str| {
            Args::try_parse_from(["x", "--policy", name])
                .unwrap()
                .policy
        };
        assert_eq!(parse(STOCK), None);
        assert_eq!(policy_name(None), STOCK);
        // clap's names are `Policy::name`, and `value_variants` is `Policy::ALL`.
        assert_eq!(Policy::value_variants(), Policy::ALL);
        let e = Args::try_parse_from(["x", "--policy", "bogus"])
            .unwrap_err()
            .to_string();
        for p in Policy::ALL {
            assert_eq!(p.to_possible_value().unwrap().get_name(), p.name());
            assert_eq!(parse(p.name()), Some(p));
            assert_eq!(policy_name(Some(p)), p.name());
            assert!(e.contains(p.name()), "{e}");
        }
    }

    #[test]
    fn clap_definition_is_valid() {
        Args::command().debug_assert();
    }
}
