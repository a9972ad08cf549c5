//! [`MarkEarly`]: one connection's service with its early requests marked and the 425 rule
//! applied, for servers where this crate does not own the accept loop (`axum::serve`,
//! axum-server).

use std::task::{Context, Poll};

use super::{EarlyRequests, TooEarly, TooEarlyLayer};

/// One connection's service: each request that began in early data gets
/// [`EarlyData`](crate::EarlyData) ([`EarlyRequests::mark`]), then passes
/// [`TooEarlyLayer`]'s rule (`425 Too Early` for the methods it does not let through).
///
/// Which requests it marks does not depend on the order it is called in: behind
/// hyper-util's `TowerToHyperService` (as under `axum::serve` and axum-server), requests
/// h2 accepted together are called in whatever order the runtime runs their tasks, and each
/// early request is still the one marked, matched by its method, URI and header fields
/// ([`EarlyRequests::mark`], which also says what happens to requests the early bytes could
/// not key).
///
/// [`HalfRttMakeService`](crate::HalfRttMakeService) (axum) and
/// [`HalfRttTlsAcceptor`](crate::HalfRttTlsAcceptor) (axum-server) build it; for a
/// [`HalfRttStream`](crate::HalfRttStream) served by hand:
///
/// ```no_run
/// # async fn run(acceptor: tls_flush::HalfRttAcceptor, tcp: tokio::net::TcpStream) -> std::io::Result<()> {
/// use hyper_util::rt::{TokioExecutor, TokioIo};
/// use hyper_util::service::TowerToHyperService;
/// use tls_flush::{MarkEarly, TooEarlyLayer};
///
/// let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
/// let stream = acceptor.accept(tcp).await?;
/// let service = MarkEarly::new(app, stream.early_requests(), &TooEarlyLayer::new());
/// hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
///     .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
///     .await
///     .map_err(std::io::Error::other)
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MarkEarly<S> {
    inner: TooEarly<S>,
    early: EarlyRequests,
}

impl<S> MarkEarly<S> {
    /// `inner` behind `too_early`, with the requests `early` says began early marked.
    ///
    /// ```
    /// use tls_flush::{EarlyRequests, MarkEarly, TooEarlyLayer};
    /// let app: axum::Router = axum::Router::new();
    /// let _service = MarkEarly::new(app, EarlyRequests::none(), &TooEarlyLayer::new());
    /// ```
    pub fn new(inner: S, early: EarlyRequests, too_early: &TooEarlyLayer) -> Self {
        MarkEarly {
            inner: tower::Layer::layer(too_early, inner),
            early,
        }
    }

    /// The connection's early requests (those not yet marked).
    ///
    /// ```
    /// # use tls_flush::{EarlyRequests, MarkEarly, TooEarlyLayer};
    /// # let service = MarkEarly::new(axum::Router::<()>::new(), EarlyRequests::none(), &TooEarlyLayer::new());
    /// assert_eq!(service.early_requests().remaining(), 0);
    /// ```
    pub fn early_requests(&self) -> &EarlyRequests {
        &self.early
    }
}

impl<S, B> tower::Service<http::Request<B>> for MarkEarly<S>
where
    TooEarly<S>: tower::Service<http::Request<B>>,
{
    type Response = <TooEarly<S> as tower::Service<http::Request<B>>>::Response;
    type Error = <TooEarly<S> as tower::Service<http::Request<B>>>::Error;
    type Future = <TooEarly<S> as tower::Service<http::Request<B>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // Behind hyper-util's `TowerToHyperService` (axum::serve and axum-server use it)
        // this call comes when the request's task first runs, in any order on a
        // multi-threaded runtime. `mark` matches the request against the early requests'
        // keys, so the early ones are marked whatever the order; only requests the early
        // bytes could not key (a header block cut or not decodable) are marked by count,
        // in this call's order.
        self.early.mark(&mut request);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::early_data::EarlyCounter;
    use std::convert::Infallible;
    use tower::ServiceExt;

    fn echo(
    ) -> impl tower::Service<http::Request<()>, Response = http::Response<String>, Error = Infallible>
           + Clone {
        tower::service_fn(|request: http::Request<()>| async move {
            let early = request.extensions().get::<crate::EarlyData>().is_some();
            Ok::<_, Infallible>(http::Response::new(format!("early={early}")))
        })
    }

    #[tokio::test]
    async fn marks_then_applies_the_rule() {
        // Early bytes that are not HTTP/2: every request of the connection is early.
        let mut counter = EarlyCounter::default();
        counter.feed(b"POST / HTTP/1.1\r\n");
        let service = MarkEarly::new(echo(), counter.requests(), &TooEarlyLayer::new());
        let post = http::Request::post("/").body(()).unwrap();
        let response = service.clone().oneshot(post).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::TOO_EARLY);
        let get = http::Request::get("/").body(()).unwrap();
        let response = service.oneshot(get).await.unwrap();
        assert_eq!(response.into_body(), "early=true");

        // Nothing early: untouched.
        let service = MarkEarly::new(echo(), EarlyRequests::none(), &TooEarlyLayer::new());
        let post = http::Request::post("/").body(()).unwrap();
        let response = service.oneshot(post).await.unwrap();
        assert_eq!(response.into_body(), "early=false");
    }
}
