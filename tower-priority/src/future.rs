use std::{
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
};

use http::{HeaderValue, Response};
use pin_project_lite::pin_project;

use crate::priority::PRIORITY;

pin_project! {
    /// The response future of [`PriorityService`](crate::PriorityService): adds the
    /// server-pinned `priority` header to the inner service's response, unless the response
    /// already has one.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::{service_fn, Service, ServiceExt};
    /// use tower_priority::{PriorityLayer, PriorityService, ResponseFuture};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let mut svc = PriorityService::new(
    ///     service_fn(|_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) }),
    ///     PriorityLayer::new().incremental(false),
    /// );
    /// let future: ResponseFuture<_> = svc.ready().await.unwrap().call(http::Request::new(()));
    /// assert_eq!(future.await.unwrap().headers()["priority"], "i=?0");
    /// # }
    /// ```
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        header: Option<HeaderValue>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: F, header: Option<HeaderValue>) -> Self {
        ResponseFuture { inner, header }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(value) = this.header.take() {
            // A header already present was set by the handler or by a nested PriorityLayer
            // (which knew our pins too): either way it is the more specific decision.
            if !response.headers().contains_key(PRIORITY) {
                response.headers_mut().insert(PRIORITY, value);
            }
        }
        Poll::Ready(Ok(response))
    }
}
