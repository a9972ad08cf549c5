//! The response future that puts each response body of a connection behind its gate.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::{HeaderMap, Response};
use pin_project_lite::pin_project;
use tower_priority::{Priority, PriorityParams};

use super::body::GatedBody;
use super::BodyGate;

/// What the gate needs of a request to register its response's body: the request's
/// `priority` header and the HTTP/2 stream it came on (where the gate can tell).
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    gate: BodyGate,
    requested: Priority,
    stream: Option<u32>,
}

impl BodyGate {
    /// Claims the HTTP/2 stream of the request whose headers are `headers`
    /// ([`BodyGate::claim_stream`]). Call once per request, in the order h2 accepted their
    /// streams: from a hyper service, which hyper calls in that order (a tower service
    /// behind `TowerToHyperService` runs when its task first does, in the runtime's order).
    pub(crate) fn claim(&self, headers: &HeaderMap) -> Claim {
        let requested = Priority::from_headers(headers);
        Claim {
            gate: self.clone(),
            requested,
            stream: self.claim_stream(requested),
        }
    }
}

pin_project! {
    /// A response future whose body passes the gate `claim` names (none: untouched), at
    /// the priority the wire scheduler gives it: the request's `priority` header, or the
    /// client's latest PRIORITY_UPDATE for its stream, overlaid by the response's (what
    /// the server pinned, e.g. with `tower_priority::PriorityLayer`).
    pub(crate) struct GatedFuture<F> {
        #[pin]
        inner: F,
        claim: Option<Claim>,
    }
}

impl<F> GatedFuture<F> {
    pub(crate) fn new(inner: F, claim: Option<Claim>) -> Self {
        GatedFuture { inner, claim }
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
        let length = body_length(&response);
        let ticket = this.claim.take().map(|claim| {
            let pinned = PriorityParams::from_headers(response.headers());
            claim
                .gate
                .register_response(claim.stream, claim.requested, pinned, length)
        });
        Poll::Ready(Ok(response.map(|body| GatedBody::new(body, ticket, length))))
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
