use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use crate::{
    policy::{Applied, Pins, Policy},
    Priority, PriorityLayer, ResponseFuture,
};

/// The [`Service`] built by [`PriorityLayer`]; see there for what it does.
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use tower::{service_fn, ServiceExt};
/// use tower_priority::{Priority, PriorityLayer, PriorityService};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let handler = service_fn(|req: Request<()>| async move {
///     let p = *req.extensions().get::<Priority>().unwrap();
///     Ok::<_, Infallible>(Response::new(p.to_string()))
/// });
/// let svc = PriorityService::new(handler, PriorityLayer::new().urgency(1));
///
/// let req = Request::builder().header("priority", "u=5, i").body(()).unwrap();
/// let res = svc.oneshot(req).await.unwrap();
/// assert_eq!(res.headers()["priority"], "u=1");
/// assert_eq!(res.body(), "u=1, i");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PriorityService<S> {
    inner: S,
    policy: Policy,
}

impl<S> PriorityService<S> {
    /// Wraps `inner` with the policy configured in `layer`.
    ///
    /// ```
    /// use tower::service_fn;
    /// use tower_priority::{PriorityLayer, PriorityService};
    ///
    /// let svc = PriorityService::new(
    ///     service_fn(|_: http::Request<()>| async { Ok::<_, std::convert::Infallible>(http::Response::new(())) }),
    ///     PriorityLayer::new().incremental(true),
    /// );
    /// ```
    pub fn new(inner: S, layer: PriorityLayer) -> Self {
        PriorityService {
            inner,
            policy: layer.policy,
        }
    }

    /// A reference to the inner service.
    ///
    /// ```
    /// use tower_priority::{PriorityLayer, PriorityService};
    /// let svc = PriorityService::new(42, PriorityLayer::new());
    /// assert_eq!(*svc.get_ref(), 42);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// A mutable reference to the inner service.
    ///
    /// ```
    /// use tower_priority::{PriorityLayer, PriorityService};
    /// let mut svc = PriorityService::new(42, PriorityLayer::new());
    /// *svc.get_mut() += 1;
    /// assert_eq!(*svc.get_ref(), 43);
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the service, returning the inner one.
    ///
    /// ```
    /// use tower_priority::{PriorityLayer, PriorityService};
    /// let svc = PriorityService::new(42, PriorityLayer::new());
    /// assert_eq!(svc.into_inner(), 42);
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PriorityService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // An outer PriorityLayer already read the client and applied its policy: start from
        // its decision so that pins compose; otherwise the client's header is the start.
        let (incoming, outer_pins) = match req.extensions().get::<Applied>() {
            Some(applied) => (applied.effective, applied.pins),
            None => (Priority::from_headers(req.headers()), Pins::default()),
        };
        let applied = self.policy.apply(incoming, outer_pins);
        req.extensions_mut().insert(applied.effective);
        req.extensions_mut().insert(applied);
        ResponseFuture::new(self.inner.call(req), applied.pins.header_value())
    }
}
