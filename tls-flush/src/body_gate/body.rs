//! A response body behind its connection's [`BodyGate`](super::BodyGate).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

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

/// How long the last piece of a body of known length waits for the body to say it has
/// ended, so that h2 sends END_STREAM on that piece's DATA frame: otherwise hyper asks
/// h2 for an empty DATA frame of its own, which the wrapper must send in a TLS record and
/// a TCP segment of its own. tower-http's `ServeDir` learns the end from one more file read
/// (tens of microseconds to 2 ms in the browser lab); where the congestion window had room
/// for the answer's body only, its end waited a round trip for the next ACK (the browser
/// lab's demo answer, 4 KiB: 45-50 ms instead of 27-30). As long as the first flight's
/// wait (2 ms).
const LAST_PIECE_WAIT: Duration = Duration::from_millis(2);

pin_project! {
    /// `inner`, whose DATA passes its connection's gate in pieces of at most
    /// [`GATE_PIECE`] bytes. Without a ticket (HTTP/1.1, or a policy that does not
    /// reorder) its frames pass as they are.
    ///
    /// Invariant: bytes leave in `inner`'s order, unchanged, and trailers after all DATA;
    /// at most one of `inner`'s DATA frames is held, and at most one frame of it read
    /// ahead (`next`, only once its declared length has been read). The data is handed
    /// on as `Bytes` (`Buf::copy_to_bytes`: no copy when `inner`'s data is `Bytes`, as
    /// axum's and tower-http's bodies are). A body that fails after its declared length
    /// fails before its last piece (its stream is reset either way).
    pub(crate) struct GatedBody<B: Body> {
        #[pin]
        inner: B,
        ticket: Option<Ticket>,
        rest: Option<B::Data>,
        recheck: Option<Pin<Box<Sleep>>>,
        // Bytes of the declared length not yet read from `inner`.
        unread: Option<u64>,
        // What `inner` yielded after its declared length (trailers).
        next: Option<Frame<B::Data>>,
        end: End,
    }
}

/// What is known of the end of a gated body's `inner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Not reached, or not asked yet.
    Unknown,
    /// The last piece waits for it until then.
    AwaitedUntil(Instant),
    /// `inner` returned `None`.
    Reached,
}

impl<B: Body> GatedBody<B> {
    /// `inner` behind `ticket`; `length`, where known, lets its end go with its last DATA.
    pub(crate) fn new(inner: B, ticket: Option<Ticket>, length: Option<u64>) -> Self {
        GatedBody {
            inner,
            ticket,
            rest: None,
            recheck: None,
            unread: length,
            next: None,
            end: End::Unknown,
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
        let mut this = self.project();
        let Some(ticket) = this.ticket.as_ref() else {
            return this.inner.poll_frame(cx).map_ok(into_bytes);
        };
        let now = Instant::now();
        if this.rest.is_none() {
            if *this.end == End::Reached {
                return Poll::Ready(None);
            }
            let polled = match this.next.take() {
                Some(next) => Poll::Ready(Some(Ok(next))),
                None => this.inner.as_mut().poll_frame(cx),
            };
            match polled {
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
                    let data = frame.into_data().ok();
                    if let (Some(unread), Some(data)) = (this.unread.as_mut(), &data) {
                        *unread = unread.saturating_sub(data.remaining() as u64);
                    }
                    *this.rest = data;
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
        if len == rest.remaining() && *this.unread == Some(0) && *this.end != End::Reached {
            // The last piece: ask for the end first, so that it goes with it.
            if this.next.is_none() {
                match this.inner.as_mut().poll_frame(cx) {
                    Poll::Ready(None) => *this.end = End::Reached,
                    Poll::Ready(Some(Ok(next))) => *this.next = Some(next),
                    Poll::Ready(Some(Err(error))) => {
                        // The body failed: its stream is reset, the last piece with it.
                        *this.ticket = None;
                        *this.rest = None;
                        return Poll::Ready(Some(Err(error)));
                    }
                    Poll::Pending => {
                        let until = match *this.end {
                            End::AwaitedUntil(until) => until,
                            _ => now + LAST_PIECE_WAIT,
                        };
                        if now < until {
                            *this.end = End::AwaitedUntil(until);
                            let sleep = this
                                .recheck
                                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
                            if sleep.deadline() != until {
                                sleep.as_mut().reset(until);
                            }
                            if sleep.as_mut().poll(cx).is_pending() {
                                return Poll::Pending;
                            }
                        }
                    }
                }
            }
        }
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
        self.rest.is_none()
            && self.next.is_none()
            && (self.end == End::Reached || self.inner.is_end_stream())
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
            None,
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
        let body = GatedBody::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            None,
            None,
        );
        assert_eq!(
            body.collect().await.unwrap().to_bytes().as_ref(),
            expected.as_slice()
        );
    }

    /// Polls `body` to its end: each frame, and whether the body said it had ended right
    /// after it (what hyper asks before sending the frame, to set END_STREAM on it).
    async fn frames_and_ends<B>(mut body: Pin<&mut GatedBody<B>>) -> Vec<(Frame<Bytes>, bool)>
    where
        B: Body,
        B::Error: std::fmt::Debug,
    {
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            out.push((frame.unwrap(), body.is_end_stream()));
        }
        out
    }

    /// A body of known length whose end comes one poll after its last bytes (as
    /// tower-http's `ServeDir` finds a file's end one read late): the end is known when
    /// the last piece is handed on, so h2 sends END_STREAM on that DATA frame rather than
    /// on an empty one of its own. Every byte arrives once, in order.
    #[tokio::test]
    async fn the_end_goes_with_the_last_piece() {
        let gate = BodyGate::default();
        let frames = chunks(3, 1);
        let length = 3 * 16_384;
        let body = GatedBody::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            Some(gate.register(3, Some(length))),
            Some(length),
        );
        let body = std::pin::pin!(body);
        let out = frames_and_ends(body).await;
        let ends: Vec<bool> = out.iter().map(|(_, end)| *end).collect();
        assert_eq!(ends, [false, false, true]);
        let bytes: Vec<u8> = out
            .iter()
            .flat_map(|(f, _)| f.data_ref().unwrap().to_vec())
            .collect();
        let expected: Vec<u8> = (0..3u8).flat_map(|i| vec![1 + i; 16_384]).collect();
        assert_eq!(bytes, expected);
    }

    /// Trailers after the declared length still pass, after every byte: the body had
    /// not ended with its last piece.
    #[tokio::test]
    async fn trailers_after_the_declared_length_pass() {
        let gate = BodyGate::default();
        let mut frames = chunks(1, 5);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        frames.push(Ok(Frame::trailers(trailers)));
        let body = GatedBody::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            Some(gate.register(3, Some(16_384))),
            Some(16_384),
        );
        let body = std::pin::pin!(body);
        let out = frames_and_ends(body).await;
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0.data_ref().map(Bytes::len), Some(16_384));
        assert!(!out[0].1, "trailers follow: not the end");
        assert!(out[1].0.is_trailers());
    }

    /// An end that does not come soon holds the last piece no longer than
    /// [`LAST_PIECE_WAIT`]: the piece goes on without it, and the end follows when it
    /// comes.
    #[tokio::test(start_paused = true)]
    async fn a_late_end_holds_the_last_piece_only_briefly() {
        use futures_util::StreamExt;
        let gate = BodyGate::default();
        let late_end = futures_util::stream::once(tokio::time::sleep(Duration::from_millis(50)))
            .filter_map(|()| async { None::<Item> });
        let stream = futures_util::stream::iter(chunks(1, 9)).chain(late_end);
        let body = GatedBody::new(
            StreamBody::new(stream),
            Some(gate.register(3, Some(16_384))),
            Some(16_384),
        );
        let mut body = std::pin::pin!(body);
        let started = Instant::now();
        let piece = body.frame().await.unwrap().unwrap();
        assert_eq!(piece.data_ref().map(Bytes::len), Some(16_384));
        assert_eq!(Instant::now() - started, LAST_PIECE_WAIT);
        assert!(!body.is_end_stream());
        assert!(body.frame().await.is_none());
        assert_eq!(Instant::now() - started, Duration::from_millis(50));
    }
}
