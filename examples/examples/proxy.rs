//! A small HTTPS reverse proxy: axum in front (served like the other examples, with the
//! wrapper's `--policy`), and behind it hyper-util's legacy client over
//! `tls_flush::client::FlushConnector`, so that each upstream connection's first flight
//! (preface, SETTINGS, first request) is one TLS record, and with TLS 1.3 resumption an
//! idempotent first request goes as early data.
//!
//! ```text
//! cargo run --release -p examples --example proxy -- --upstream https://127.0.0.1:8443 \
//!     --upstream-ca cert.pem [--addr IP:PORT] [--cert PEM --key PEM] [--policy NAME]
//! ```
//!
//! Requests keep their method, path, query, headers (less the hop-by-hop ones) and body;
//! an upstream failure is `502 Bad Gateway`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use clap::Parser;
use http::uri::{PathAndQuery, Uri};
use http::{header, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tls_flush::client::FlushConnector;

/// Command line: the example servers' (`--addr`, `--cert`, `--key`, `--policy`,
/// `--record-size`) plus the upstream.
#[derive(Debug, Parser)]
#[command(about = "HTTPS reverse proxy whose upstream HTTP/2 client uses tls_flush::client")]
struct ProxyArgs {
    #[command(flatten)]
    server: examples::Args,

    /// Upstream base URL (https), e.g. https://127.0.0.1:8443.
    #[arg(long, value_name = "URL")]
    upstream: Uri,

    /// PEM file with the certificates to trust for the upstream (its self-signed
    /// certificate, or its CA).
    #[arg(long, value_name = "PEM")]
    upstream_ca: PathBuf,
}

type Upstream = Client<FlushConnector, Body>;

#[derive(Clone)]
struct Proxy {
    client: Upstream,
    base: Uri,
}

/// Headers that belong to one hop (RFC 9110 §7.6.1) and are not forwarded; HTTP/2
/// upstream requests carry the authority in the URI, not in `host`.
const HOP_BY_HOP: [header::HeaderName; 6] = [
    header::CONNECTION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
    header::PROXY_AUTHORIZATION,
];

async fn forward(State(proxy): State<Proxy>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut uri = proxy.base.clone().into_parts();
    uri.path_and_query = Some(path);
    parts.uri = match Uri::from_parts(uri) {
        Ok(uri) => uri,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    parts.version = http::Version::HTTP_2;
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    match proxy
        .client
        .request(http::Request::from_parts(parts, body))
        .await
    {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            for name in HOP_BY_HOP {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => {
            tracing::warn!(error = %e, "upstream request failed");
            StatusCode::BAD_GATEWAY.into_response()
        }
    }
}

fn upstream_tls(ca: &PathBuf) -> Result<Arc<rustls::ClientConfig>, examples::BoxError> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca)?;
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(cert?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    // Resumed upstream connections send an idempotent first request as early data.
    config.enable_early_data = true;
    Ok(Arc::new(config))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = ProxyArgs::parse();
    examples::logging::init();
    let result = async {
        if args.upstream.scheme_str() != Some("https") || args.upstream.authority().is_none() {
            return Err("--upstream must be an https URL with a host".into());
        }
        let connector = FlushConnector::new(upstream_tls(&args.upstream_ca)?);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let proxy = Proxy {
            client,
            base: args.upstream,
        };
        let app = axum::Router::new().fallback(forward).with_state(proxy);
        examples::run(args.server, app).await
    }
    .await;
    examples::exit_code(result)
}
