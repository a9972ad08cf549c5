//! A response body behind its connection's [`BodyGate`](super::BodyGate).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::{Ticket, Verdict};

/// The largest piece of a body that passes the gate at once: one default-sized HTTP/2 DATA
/// frame (RFC 9113 §6.5.2). hyper hands h2 what the body yields in one piece, so the gate
/// cuts larger chunks (tower-http's `ServeDir` reads 64 KiB) to keep what sits in h2, out
/// of the wrapper's reach, to about a frame per stream: a body then ends only when nearly
/// all of it has reached the wrapper, and holds less urgent bodies back until then.
pub(crate) const GATE_PIECE: usize = 16_384;

pin_project! {
    /// `inner`, whose DATA passes its connection's gate in pieces of at most
    /// [`GATE_PIECE`] bytes. Without a ticket (HTTP/1.1, or a policy that does not
    /// reorder) its frames pass as they are.
    ///
    /// Invariant: bytes leave in `inner`'s order, unchanged, and trailers after all DATA;
    /// at most one of `inner`'s DATA frames is held. The data is handed on as `Bytes`
    /// (`Buf::copy_to_bytes`: no copy when `inner`'s data is `Bytes`, as axum's and
    /// tower-http's bodies are).
    pub(crate) struct GatedBody<B: Body> {
        #[pin]
        inner: B,
        ticket: Option<Ticket>,
        rest: Option<B::Data>,
        recheck: Option<Pin<Box<Sleep>>>,
    }
}

impl<B: Body> GatedBody<B> {
    pub(crate) fn new(inner: B, ticket: Option<Ticket>) -> Self {
        GatedBody {
            inner,
            ticket,
            rest: None,
            recheck: None,
        }
    }
}

impl<B: Body> Body for GatedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let Some(ticket) = this.ticket.as_ref() else {
            return this.inner.poll_frame(cx).map_ok(into_bytes);
        };
        let now = Instant::now();
        if this.rest.is_none() {
            match this.inner.poll_frame(cx) {
                Poll::Pending => {
                    ticket.waiting(now);
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if !frame.data_ref().is_some_and(Buf::has_remaining) {
                        // Trailers or an empty DATA frame: nothing to share out.
                        ticket.polled(now);
                        return Poll::Ready(Some(Ok(into_bytes(frame))));
                    }
                    *this.rest = frame.into_data().ok();
                }
                Poll::Ready(Some(Err(error))) => {
                    *this.ticket = None;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    // Ended: it holds nothing back any more.
                    *this.ticket = None;
                    return Poll::Ready(None);
                }
            }
        }
        let rest = this.rest.as_mut().expect("set above");
        let len = rest.remaining().min(GATE_PIECE);
        match ticket.offer(len, now, cx.waker()) {
            Verdict::Pass => {
                *this.recheck = None;
                let piece = rest.copy_to_bytes(len);
                if !rest.has_remaining() {
                    *this.rest = None;
                }
                Poll::Ready(Some(Ok(Frame::data(piece))))
            }
            Verdict::Held { recheck_at } => {
                let sleep = this
                    .recheck
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(recheck_at)));
                if sleep.deadline() != recheck_at {
                    sleep.as_mut().reset(recheck_at);
                }
                ready!(sleep.as_mut().poll(cx));
                // The deadline passed between the verdict and now: ask again at once.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.as_ref().map_or(0, |data| data.remaining() as u64);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// `frame` with its data as `Bytes` (no copy when it already is).
fn into_bytes<D: Buf>(frame: Frame<D>) -> Frame<Bytes> {
    frame.map_data(|mut data| data.copy_to_bytes(data.remaining()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body_gate::BodyGate;
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};

    type Item = Result<Frame<Bytes>, std::convert::Infallible>;
    type Frames = Vec<Item>;
    type Source = StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Item>>>;

    fn chunks(n: usize, byte: u8) -> Frames {
        (0..n)
            .map(|i| {
                Ok(Frame::data(Bytes::from(vec![
                    byte.wrapping_add(i as u8);
                    16_384
                ])))
            })
            .collect()
    }

    fn gated(gate: &BodyGate, urgency: u8, frames: Frames) -> GatedBody<Source> {
        GatedBody::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            Some(gate.register(urgency, None)),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_body_resumes_when_the_urgent_one_stalls_and_loses_nothing() {
        let gate = BodyGate::default();
        let mut urgent = gated(&gate, 0, chunks(4, 1));
        let bulk_frames = chunks(8, 100);
        let expected: Vec<u8> = bulk_frames
            .iter()
            .flat_map(|f| f.as_ref().unwrap().data_ref().unwrap().to_vec())
            .collect();
        let bulk = gated(&gate, 5, bulk_frames);
        // The urgent body produces, then is not polled again (h2 has no room for it).
        let first = urgent.frame().await.unwrap().unwrap();
        assert_eq!(first.data_ref().unwrap().len(), 16_384);
        let started = Instant::now();
        let collected = bulk.collect().await.unwrap().to_bytes();
        assert_eq!(collected.as_ref(), expected.as_slice());
        // Its first chunk waited for the urgent body to become stale, and no longer.
        assert_eq!(Instant::now() - started, super::super::STALE_AFTER);
    }

    #[tokio::test]
    async fn without_a_ticket_the_body_is_untouched() {
        let frames = chunks(3, 7);
        let expected: Vec<u8> = frames
            .iter()
            .flat_map(|f| f.as_ref().unwrap().data_ref().unwrap().to_vec())
            .collect();
        let body = GatedBody::new(StreamBody::new(futures_util::stream::iter(frames)), None);
        assert_eq!(
            body.collect().await.unwrap().to_bytes().as_ref(),
            expected.as_slice()
        );
    }
}
