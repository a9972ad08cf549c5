//! Our own servers serving a static site, as their users would: tower-http's `ServeDir`
//! as an axum fallback, under [`PriorityLayer`] (as the demo app,
//! [`examples::axum_app::router`], applies it), started like every in-process server
//! ([`TestServer::start_on`]: stock, or wrapped by `tls-flush` with a policy).
//!
//! Invariants: a file's URL path is its path relative to the site directory (`ServeDir`
//! also answers a directory with its `index.html`); a file whose extension is in
//! [`SITE_CONTENT_TYPES`] is sent with that `Content-Type`, the one the peers send
//! ([`crate::peers`]), whatever `mime_guess` (which `ServeDir` asks) says; every file
//! response carries `Last-Modified` (from `ServeDir`), so that a browser may cache it.
//!
//! [`SITE_CONTENT_TYPES`]: crate::peers::SITE_CONTENT_TYPES

use std::net::SocketAddr;
use std::path::Path;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use http::header::CONTENT_TYPE;
use http::HeaderValue;
use tower_http::services::ServeDir;
use tower_priority::PriorityLayer;

use crate::peers::site_content_type;
use crate::server::ServerSetup;
use crate::{BoxError, TestServer};

/// Starts a server on `addr` (port 0: a free one) with `setup` that serves the directory
/// `site` (see [`site_router`]); fails when `site` is not a directory.
///
/// ```no_run
/// # async fn f() -> Result<(), integration_tests::BoxError> {
/// use integration_tests::server::ServerSetup;
/// use integration_tests::site_server::start_site_server;
/// let setup = ServerSetup::with_policy(tls_flush::Policy::Scheduled);
/// let addr = "127.0.0.1:0".parse()?;
/// let server = start_site_server(setup, std::path::Path::new("site"), addr).await?;
/// println!("https://localhost:{}/index.html", server.addr.port());
/// # Ok(())
/// # }
/// ```
pub async fn start_site_server(
    setup: ServerSetup,
    site: &Path,
    addr: SocketAddr,
) -> Result<TestServer, BoxError> {
    if !site.is_dir() {
        return Err(format!("site server: {} is not a directory", site.display()).into());
    }
    TestServer::start_on(setup, site_router(site), addr).await
}

/// The application: `ServeDir` over `site` as the fallback of an empty router, its file
/// responses typed by [`SITE_CONTENT_TYPES`], everything under [`PriorityLayer::new`].
///
/// [`SITE_CONTENT_TYPES`]: crate::peers::SITE_CONTENT_TYPES
pub fn site_router(site: &Path) -> Router {
    Router::new()
        .fallback_service(ServeDir::new(site))
        .layer(middleware::from_fn(with_site_content_type))
        .layer(PriorityLayer::new())
}

/// Runs the request, then sets the `Content-Type` of a typed response (a file's: `ServeDir`
/// types nothing else) from [`site_content_type`] of the request's path: `mime_guess` 2.0.5
/// agrees on every extension of [`SITE_CONTENT_TYPES`], but the peers are configured from
/// the table, and another `mime_guess` need not agree.
///
/// [`SITE_CONTENT_TYPES`]: crate::peers::SITE_CONTENT_TYPES
async fn with_site_content_type(request: Request, next: Next) -> Response {
    let content_type = site_content_type(request.uri().path());
    let mut response = next.run(request).await;
    if let (Some(typed), Some(content_type)) =
        (response.headers_mut().get_mut(CONTENT_TYPE), content_type)
    {
        *typed = HeaderValue::from_static(content_type);
    }
    response
}
