//! What a first-request run is made of: the client case ([`ClientCase`]), a fresh or a
//! resumed connection ([`Connection`]) and the server ([`FirstRequestServer`]).
//!
//! Each has a fixed list of values (`ALL`, in table order) and a name per value, the one
//! command lines, tables and JSON use. Invariant: names are unique within a type, and
//! parsing a name (surrounding white space ignored) gives back the value it names; an
//! unknown name is an [`UnknownName`] that lists the known ones.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::peers::PeerKind;
use crate::workload::{by_name, UnknownName};

/// `Display` as the value's name, and `FromStr` by name among the type's `ALL` values
/// (`$what` says what kind of name it is, in the error): one home for the three types.
macro_rules! named_values {
    ($type:ty, $what:literal) => {
        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $type {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                by_name($what, s, &<$type>::ALL, <$type>::name)
            }
        }
    };
}

/// How the client builds its connection.
///
/// ```
/// use integration_tests::first_request::ClientCase;
/// assert_eq!("coalesced-0rtt".parse(), Ok(ClientCase::Coalesced0Rtt));
/// assert!("stock".parse::<ClientCase>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientCase {
    /// hyper's HTTP/2 client over tokio-rustls, as people use it: `TCP_NODELAY` off (the
    /// default of hyper-util's `HttpConnector`), hyper's default HTTP/2 settings, no early
    /// data.
    StockClient,
    /// `tls-flush`'s client wrapper: the HTTP/2 preface, SETTINGS, WINDOW_UPDATE and the
    /// first HEADERS in one TLS record.
    Coalesced,
    /// [`ClientCase::Coalesced`] with TLS 1.3 early data (0-RTT) on resumed connections.
    #[serde(rename = "coalesced-0rtt")]
    Coalesced0Rtt,
}

impl ClientCase {
    /// Every case, stock (the baseline of the ratios) first.
    pub const ALL: [ClientCase; 3] = [
        ClientCase::StockClient,
        ClientCase::Coalesced,
        ClientCase::Coalesced0Rtt,
    ];

    /// The name on command lines, in tables and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ClientCase::StockClient => "stock-client",
            ClientCase::Coalesced => "coalesced",
            ClientCase::Coalesced0Rtt => "coalesced-0rtt",
        }
    }

    /// Whether its `ClientConfig` enables TLS 1.3 early data.
    pub fn early_data(self) -> bool {
        self == ClientCase::Coalesced0Rtt
    }
}

named_values!(ClientCase, "client case");

/// A fresh connection (empty session store) or a resumed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Connection {
    /// A full handshake: the client has no session for the server.
    Fresh,
    /// A priming connection to the same server ran first, so the client offers its session.
    Resumed,
}

impl Connection {
    /// Both, in table order.
    pub const ALL: [Connection; 2] = [Connection::Fresh, Connection::Resumed];

    /// `fresh` or `resumed`.
    pub fn name(self) -> &'static str {
        match self {
            Connection::Fresh => "fresh",
            Connection::Resumed => "resumed",
        }
    }
}

named_values!(Connection, "connection");

/// The server of the first-request workload.
///
/// ```
/// use integration_tests::first_request::FirstRequestServer;
/// use integration_tests::peers::PeerKind;
/// assert_eq!("nginx-0rtt".parse(), Ok(FirstRequestServer::Peer(PeerKind::Nginx0rtt)));
/// assert!("nginx".parse::<FirstRequestServer>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FirstRequestServer {
    /// The demo app in-process behind `tls-flush` (its default policy), with TLS 1.3
    /// resumption and early data (see the [module documentation](super)).
    Ours,
    /// A peer that resumes: [`PeerKind::Nginx0rtt`] or [`PeerKind::NginxNoEarly`].
    Peer(PeerKind),
}

impl FirstRequestServer {
    /// Every server, in table order.
    pub const ALL: [FirstRequestServer; 3] = [
        FirstRequestServer::Ours,
        FirstRequestServer::Peer(PeerKind::Nginx0rtt),
        FirstRequestServer::Peer(PeerKind::NginxNoEarly),
    ];

    /// `ours`, `nginx-0rtt` or `nginx-no-early`.
    pub fn name(self) -> &'static str {
        match self {
            FirstRequestServer::Ours => "ours",
            FirstRequestServer::Peer(kind) => kind.name(),
        }
    }

    /// The peer it starts, if it is one.
    pub fn peer(self) -> Option<PeerKind> {
        match self {
            FirstRequestServer::Ours => None,
            FirstRequestServer::Peer(kind) => Some(kind),
        }
    }
}

named_values!(FirstRequestServer, "server");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for case in ClientCase::ALL {
            assert_eq!(case.name().parse(), Ok(case));
        }
        for server in FirstRequestServer::ALL {
            assert_eq!(server.name().parse(), Ok(server));
        }
        for c in Connection::ALL {
            assert_eq!(c.name().parse(), Ok(c));
        }
        let err = "stock".parse::<ClientCase>().unwrap_err().to_string();
        assert!(
            err.contains("stock-client, coalesced, coalesced-0rtt"),
            "{err}"
        );
        assert_eq!(
            serde_json::to_string(&ClientCase::Coalesced0Rtt).unwrap(),
            "\"coalesced-0rtt\""
        );
    }
}
