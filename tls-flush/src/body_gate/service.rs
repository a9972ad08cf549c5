//! The service wrapper that puts each response body of a connection behind its gate.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_priority::{Priority, PriorityParams};

use super::body::GatedBody;
use super::BodyGate;

/// `inner`, whose response bodies pass `gate` (none: untouched) at the priority the wire
/// scheduler gives them: the request's `priority` header, or the client's latest
/// PRIORITY_UPDATE for its stream, overlaid by the response's (what the server pinned,
/// e.g. with `tower_priority::PriorityLayer`).
#[derive(Debug, Clone)]
pub(crate) struct GatedService<S> {
    inner: S,
    gate: Option<BodyGate>,
}

impl<S> GatedService<S> {
    pub(crate) fn new(inner: S, gate: Option<BodyGate>) -> Self {
        GatedService { inner, gate }
    }
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for GatedService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body,
{
    type Response = Response<GatedBody<ResBody>>;
    type Error = S::Error;
    type Future = GatedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let claimed = req.extensions_mut().remove::<ClaimedStream>();
        let gate = self.gate.clone().map(|gate| {
            let ClaimedStream { requested, stream } = claimed.unwrap_or_else(|| ClaimedStream {
                requested: Priority::from_headers(req.headers()),
                stream: None,
            });
            (gate, requested, stream)
        });
        GatedFuture {
            inner: self.inner.call(req),
            gate,
        }
    }
}

/// A request's `priority` header and the HTTP/2 stream it came on (where the gate can
/// tell), as [`BodyGate::claim_stream_of`] tells [`GatedService`].
#[derive(Debug, Clone, Copy)]
struct ClaimedStream {
    requested: Priority,
    stream: Option<u32>,
}

impl BodyGate {
    /// Notes in `req`'s extensions its `priority` header and the HTTP/2 stream it came on
    /// ([`BodyGate::claim_stream`]), for [`GatedService`]. Call once per request, in the
    /// order h2 accepted their streams: from a hyper service, which hyper calls in that
    /// order.
    pub(crate) fn claim_stream_of<B>(&self, req: &mut Request<B>) {
        let requested = Priority::from_headers(req.headers());
        let stream = self.claim_stream(requested);
        req.extensions_mut()
            .insert(ClaimedStream { requested, stream });
    }
}

pin_project! {
    /// The response future of [`GatedService`].
    pub(crate) struct GatedFuture<F> {
        #[pin]
        inner: F,
        gate: Option<(BodyGate, Priority, Option<u32>)>,
    }
}

impl<F, B, E> Future for GatedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body,
{
    type Output = Result<Response<GatedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let ticket = this.gate.take().map(|(gate, requested, stream)| {
            let pinned = PriorityParams::from_headers(response.headers());
            gate.register_response(stream, requested, pinned, body_length(&response))
        });
        Poll::Ready(Ok(response.map(|body| GatedBody::new(body, ticket))))
    }
}

/// The length of `response`'s body, where it is known: the body's exact size hint, else its
/// `Content-Length` (tower-http's `ServeDir` streams a file with the length in the header
/// only).
fn body_length<B: http_body::Body>(response: &Response<B>) -> Option<u64> {
    response.body().size_hint().exact().or_else(|| {
        response
            .headers()
            .get(http::header::CONTENT_LENGTH)?
            .to_str()
            .ok()?
            .parse()
            .ok()
    })
}
