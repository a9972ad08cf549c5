//! The demo app as an axum 0.8 `Router` (served by `--example axum`).
//!
//! Routes (see `examples::responses`):
//! - `GET /` a small HTML page loading `/critical` and two `/bg/...` resources, pinned `u=0`;
//! - `GET /critical` 4096 bytes, pinned `u=0`;
//! - `GET /bg/{name}` 1048576 bytes in 16 KiB chunks, following the client's priority;
//! - `GET /size/{n}` `n` bytes (`n <= 67108864`, else 400 with a plain-text reason);
//! - `GET /delay/{ms}` the 4096 bytes of `/critical` after `ms` milliseconds (`ms <= 10000`,
//!   else 400 with a plain-text reason), following the client's priority.
//!
//! The whole router is under `PriorityLayer::new()`, so every handler sees the effective
//! `Priority` in its request extensions; per-route layers pin `u=0`.

use crate::responses::{
    delay_response, index_response, not_found, pattern_response, size_response, BG_LEN,
    CRITICAL_LEN, CRITICAL_URGENCY,
};
use axum::extract::{Path, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use tower::util::MapRequestLayer;
use tower_priority::{Priority, PriorityLayer};
use tracing::debug;

/// The application: routes, per-route pins, and the outer layer that follows the client.
///
/// ```
/// let app: axum::Router = examples::axum_app::router();
/// # let _ = app;
/// ```
pub fn router() -> Router {
    let pinned = || PriorityLayer::new().urgency(CRITICAL_URGENCY);
    Router::new()
        .route("/", get(index).layer(pinned()))
        .route("/critical", get(critical).layer(pinned()))
        .route("/bg/{name}", get(bg))
        .route("/size/{n}", get(size))
        .route("/delay/{ms}", get(delay))
        .fallback(|| async { not_found() })
        .layer(PriorityLayer::new())
        .layer(MapRequestLayer::new(|req: Request| {
            let raw: Vec<_> = req.headers().get_all("priority").iter().collect();
            let (path, version) = (req.uri().path(), req.version());
            debug!(path = %path, version = ?version, priority = ?raw, "request priority header");
            req
        }))
}

/// [`router`] plus `GET /stats`: the connection's counters, from the `ConnectionStats`
/// request extension that `tls_flush::serve`, `FlushAcceptor` and a hand-written loop put
/// there (the stock server has none, and answers 500).
///
/// ```
/// let app: axum::Router = examples::axum_app::router_with_stats();
/// # let _ = app;
/// ```
pub fn router_with_stats() -> Router {
    router().route(
        crate::responses::STATS_PATH,
        get(
            |Extension(stats): Extension<tls_flush::ConnectionStats>| async move {
                crate::responses::stats_response(stats.snapshot())
            },
        ),
    )
}

async fn index(Extension(priority): Extension<Priority>) -> Response {
    debug!(%priority, "GET /");
    index_response().into_response()
}

async fn critical(Extension(priority): Extension<Priority>) -> Response {
    debug!(%priority, "GET /critical");
    pattern_response(CRITICAL_LEN).into_response()
}

async fn bg(Path(name): Path<String>, Extension(priority): Extension<Priority>) -> Response {
    debug!(%priority, name, "GET /bg/{{name}}");
    pattern_response(BG_LEN).into_response()
}

async fn size(Path(n): Path<String>, Extension(priority): Extension<Priority>) -> Response {
    debug!(%priority, n, "GET /size/{{n}}");
    size_response(&n).into_response()
}

async fn delay(Path(ms): Path<String>, Extension(priority): Extension<Priority>) -> Response {
    debug!(%priority, ms, "GET /delay/{{ms}}");
    delay_response(&ms).await.into_response()
}
