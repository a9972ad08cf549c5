//! The demo app as a plain tower service for hyper: a hand-written service that matches on
//! method and path, with `tower_priority::PriorityLayer` applied through
//! `tower::ServiceBuilder` (served by `--example hyper`).
//!
//! Same routes and behaviour as the axum example:
//! - `GET /` a small HTML page loading `/critical` and two `/bg/...` resources, pinned `u=0`;
//! - `GET /critical` 4096 bytes, pinned `u=0`;
//! - `GET /bg/{name}` 1048576 bytes in 16 KiB chunks, following the client's priority;
//! - `GET /size/{n}` `n` bytes (`n <= 67108864`, else 400 with a plain-text reason);
//! - `GET /delay/{ms}` the 4096 bytes of `/critical` after `ms` milliseconds (`ms <= 10000`,
//!   else 400 with a plain-text reason), following the client's priority.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::responses::{
    delay_response, index_response, method_not_allowed, not_found, path_param, pattern_response,
    size_response, BoxedBody, BG_LEN, BG_PREFIX, CRITICAL_LEN, CRITICAL_PATH, CRITICAL_URGENCY,
    DELAY_PREFIX, SIZE_PREFIX,
};
use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use tower::util::BoxCloneService;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_priority::{Priority, PriorityLayer, PriorityService};
use tracing::debug;

type Body = BoxedBody;
type Req = Request<Incoming>;
/// The response type of [`App`].
pub type Res = Response<Body>;
/// A route's handler with its route-specific layers.
type Route = BoxCloneService<Req, Res, Infallible>;

fn boxed<B>(res: Response<B>) -> Res
where
    B: http_body::Body<Data = Bytes, Error = Infallible> + Send + Sync + 'static,
{
    res.map(BodyExt::boxed)
}

/// The effective priority the outer `PriorityLayer` (and any route layer) put in extensions.
fn priority(req: &Req) -> Priority {
    req.extensions()
        .get::<Priority>()
        .copied()
        .unwrap_or_default()
}

/// A route pinned at `u=0`, like `get(h).layer(PriorityLayer::new().urgency(0))` in axum.
fn pinned<F, Fut>(handler: F) -> Route
where
    F: Fn(Req) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Res, Infallible>> + Send + 'static,
{
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(PriorityLayer::new().urgency(CRITICAL_URGENCY))
            .service(service_fn(handler)),
    )
}

/// The router: matches on method and path, dispatching pinned routes to their layered
/// services and answering the others directly.
#[derive(Clone)]
pub struct App {
    index: Route,
    critical: Route,
}

impl App {
    /// The routes, with `/` and `/critical` pinned at `u=0`.
    pub fn new() -> Self {
        App {
            index: pinned(|req: Req| async move {
                debug!(priority = %priority(&req), "GET /");
                Ok(boxed(index_response()))
            }),
            critical: pinned(|req: Req| async move {
                debug!(priority = %priority(&req), "GET /critical");
                Ok(boxed(pattern_response(CRITICAL_LEN)))
            }),
        }
    }
}

impl Service<Req> for App {
    type Response = Res;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Res, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let path = req.uri().path().to_owned();
        let raw: Vec<_> = req.headers().get_all("priority").iter().collect();
        debug!(path = %path, version = ?req.version(), priority = ?raw, "request priority header");
        let known = path == "/"
            || path == CRITICAL_PATH
            || path_param(&path, BG_PREFIX).is_some()
            || path_param(&path, SIZE_PREFIX).is_some()
            || path_param(&path, DELAY_PREFIX).is_some();
        let head = req.method() == Method::HEAD;
        if !known {
            return Box::pin(async { Ok(boxed(not_found())) });
        }
        if req.method() != Method::GET && !head {
            return Box::pin(async { Ok(boxed(method_not_allowed())) });
        }
        let p = priority(&req);
        let fut: Self::Future = if path == "/" {
            Box::pin(self.index.clone().oneshot(req))
        } else if path == CRITICAL_PATH {
            Box::pin(self.critical.clone().oneshot(req))
        } else if let Some(name) = path_param(&path, BG_PREFIX) {
            debug!(priority = %p, name, "GET /bg/{{name}}");
            let res = boxed(pattern_response(BG_LEN));
            Box::pin(async { Ok(res) })
        } else if let Some(n) = path_param(&path, SIZE_PREFIX) {
            debug!(priority = %p, n, "GET /size/{{n}}");
            let res = size_response(n);
            Box::pin(async { Ok(res) })
        } else {
            let ms = path_param(&path, DELAY_PREFIX)
                .unwrap_or_default()
                .to_owned();
            debug!(priority = %p, ms, "GET /delay/{{ms}}");
            Box::pin(async move { Ok(delay_response(&ms).await) })
        };
        if !head {
            return fut;
        }
        // HEAD: the GET response's status and headers, without a body.
        Box::pin(async move {
            let res = fut.await?;
            Ok(res.map(|_| Empty::new().boxed()))
        })
    }
}

impl Default for App {
    fn default() -> Self {
        App::new()
    }
}

/// The whole service: [`App`] under an outer `PriorityLayer` that follows the client.
///
/// ```
/// let service = examples::hyper_app::service();
/// let _hyper = hyper_util::service::TowerToHyperService::new(service);
/// ```
pub fn service() -> PriorityService<App> {
    ServiceBuilder::new()
        .layer(PriorityLayer::new())
        .service(App::new())
}
