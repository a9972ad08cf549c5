//! [`OrEmpty`]: a response body that may be empty, so that a layer answering on its own
//! (`425 Too Early`) can sit above any service.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    /// The service's body, or none (the default: an empty body).
    #[derive(Debug)]
    pub(crate) struct OrEmpty<B> {
        #[pin]
        inner: Option<B>,
    }
}

impl<B> OrEmpty<B> {
    pub(crate) fn new(inner: B) -> Self {
        OrEmpty { inner: Some(inner) }
    }
}

impl<B> Default for OrEmpty<B> {
    fn default() -> Self {
        OrEmpty { inner: None }
    }
}

impl<B: Body> Body for OrEmpty<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.project().inner.as_pin_mut() {
            Some(inner) => inner.poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}
