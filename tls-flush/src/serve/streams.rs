//! Where hyper's HTTP/2 stream futures run: on their connection's own task.
//!
//! hyper hands each request's future (the service call and the response body) to its
//! executor; `TokioExecutor` spawns a task per stream. The wrapper writes what is ready
//! when h2 flushes, so a spawned stream's response waits for its task's turn and then for
//! the connection task's: urgent responses that a client asked for together reach the wire
//! in as many records as the runtime took turns to run their tasks, and a busy server
//! serves the connections whose tasks happen to be queued first (h2load `-c 1000 -m 10` on
//! loopback, 4 KiB urgent responses: a third of the requests answered within 20 ms and half
//! in more than 90, where stock hyper answered 11% within 20 ms and half within 80).
//!
//! [`StreamExecutor`] instead collects the futures hyper executes while a [`WithStreams`]
//! polls its connection, and that connection polls them itself, then the connection once
//! more, so that the responses they made ready are written in the same turn.
//!
//! Invariants: a stream future runs on its connection's task only (outside a
//! [`WithStreams`] poll the executor spawns, as `TokioExecutor` does); a stream that panics
//! ends alone (it is dropped, which resets its stream, as a panicking spawned task is), not
//! the connection; the set of a connection's stream futures is allocated while it has any
//! and given back when the last one ends.

use std::cell::RefCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};

/// A stream future hyper executes, boxed (its type is hyper's private `H2Stream`).
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

thread_local! {
    /// While a [`WithStreams`] polls its connection on this thread: the stream futures
    /// hyper executed meanwhile.
    static COLLECTED: RefCell<Option<Vec<StreamFuture>>> = const { RefCell::new(None) };
}

/// Where [`serve`](crate::serve()) runs each HTTP/2 request's future: the service call and
/// the response body, what hyper hands its executor (see
/// [`Serve::stream_tasks`](crate::Serve::stream_tasks)).
///
/// ```no_run
/// # async fn run(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor) -> std::io::Result<()> {
/// let app = axum::Router::new();
/// tls_flush::serve(listener, acceptor, tls_flush::FlushConfig::default(), app)
///     .stream_tasks(tls_flush::StreamTasks::Spawned)
///     .await
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StreamTasks {
    /// On the connection's own task (the default): the responses that requests read
    /// together make ready are written in the same turn, and a connection costs the
    /// runtime one task however many streams it carries. The streams of one connection
    /// then share a worker thread, as the requests of one HTTP/1.1 connection do; a
    /// handler that computes for long should hand that work to
    /// `tokio::task::spawn_blocking` (or spawn it) either way.
    #[default]
    Connection,
    /// Each on a task of its own, as hyper-util's `TokioExecutor` runs them: the streams
    /// of one connection may run on several worker threads at once.
    Spawned,
}

/// hyper's executor for [`serve`](crate::serve())'s connections: with
/// [`StreamTasks::Connection`], stream futures executed while a [`WithStreams`] polls the
/// connection run on that connection's task; any other is spawned on the tokio runtime.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamExecutor {
    pub(crate) tasks: StreamTasks,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        if self.tasks == StreamTasks::Spawned {
            tokio::spawn(fut);
            return;
        }
        let spawn = COLLECTED.with(|collected| match collected.borrow_mut().as_mut() {
            Some(futures) => {
                futures.push(contained(fut));
                None
            }
            None => Some(fut),
        });
        if let Some(fut) = spawn {
            tokio::spawn(fut);
        }
    }
}

pin_project_lite::pin_project! {
    /// A hyper connection and the stream futures it executed (see the module docs).
    pub(super) struct WithStreams<C> {
        #[pin]
        conn: C,
        streams: Option<Box<FuturesUnordered<StreamFuture>>>,
    }
}

impl<C> WithStreams<C> {
    pub(super) fn new(conn: C) -> Self {
        WithStreams {
            conn,
            streams: None,
        }
    }

    /// The connection, to call its own methods (a graceful shutdown).
    pub(super) fn conn(self: Pin<&mut Self>) -> Pin<&mut C> {
        self.project().conn
    }
}

impl<C: Future> Future for WithStreams<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let mut this = self.project();
        // The connection reads requests (hyper executes their futures), the streams make
        // their responses ready, and the connection writes them; twice, so that what the
        // second read executed runs in this turn too.
        for _ in 0..2 {
            let (polled, executed) = collecting(|| this.conn.as_mut().poll(cx));
            if polled.is_ready() {
                return polled;
            }
            if !executed.is_empty() {
                let streams = this.streams.get_or_insert_with(Default::default);
                streams.extend(executed);
            }
            let Some(streams) = this.streams.as_mut() else {
                return Poll::Pending;
            };
            if let Poll::Ready(None) = poll_all(streams, cx) {
                *this.streams = None;
            }
        }
        Poll::Pending
    }
}

/// Runs `poll` with this thread's collection on, and returns what it executed. The
/// collection before it is restored even if `poll` unwinds, so that a later execute on
/// this thread never lands in a collection nobody polls.
fn collecting<T>(poll: impl FnOnce() -> T) -> (T, Vec<StreamFuture>) {
    /// Puts the outer collection back when dropped, after a return or an unwind alike.
    struct Restore(Option<Vec<StreamFuture>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            COLLECTED.with(|c| c.replace(self.0.take()));
        }
    }
    let _restore = Restore(COLLECTED.with(|c| c.replace(Some(Vec::new()))));
    let polled = poll();
    let executed = COLLECTED.with(|c| c.take()).unwrap_or_default();
    (polled, executed)
}

/// Polls every ready stream future; `Ready(None)` once none is left.
///
/// `FuturesUnordered` yields (wakes the task and returns `Pending`) once two of its futures
/// woke themselves while polled, as a response body does while h2 takes its DATA: a
/// request read with two downloads then got its response only after the connection had
/// written theirs, and behind them in the socket (with `early-flush` on the lab's clean
/// link, `simultaneous`'s critical answer took 116 ms against 52 with spawned tasks). So it
/// is asked again, at most once per future, before the connection writes.
fn poll_all(
    streams: &mut FuturesUnordered<StreamFuture>,
    cx: &mut Context<'_>,
) -> Poll<Option<()>> {
    let mut again = streams.len();
    loop {
        match streams.poll_next_unpin(cx) {
            Poll::Ready(Some(())) => continue,
            Poll::Pending if again > 0 => again -= 1,
            other => return other,
        }
    }
}

/// `fut`, ending (and logged) instead of unwinding into the connection if it panics.
fn contained<F: Future<Output = ()> + Send + 'static>(fut: F) -> StreamFuture {
    Box::pin(AssertUnwindSafe(fut).catch_unwind().map(|ended| {
        if ended.is_err() {
            tracing::warn!("tls-flush: a stream's service or body panicked; its stream is reset");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_that_unwinds_leaves_no_collection_behind() {
        let unwound = std::panic::catch_unwind(|| collecting(|| panic!("hyper's bug")));
        assert!(unwound.is_err());
        assert!(COLLECTED.with(|c| c.borrow().is_none()));
    }

    /// A future that wakes itself `times` times, as a body piping into h2 does while h2
    /// takes its DATA, then ends.
    fn waking_itself(times: usize) -> impl Future<Output = ()> + Send {
        let mut left = times;
        std::future::poll_fn(move |cx| {
            if left == 0 {
                return Poll::Ready(());
            }
            left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
    }

    #[test]
    fn a_response_behind_two_busy_bodies_is_ready_before_the_connection_writes() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let exec = StreamExecutor {
            tasks: StreamTasks::Connection,
        };
        let answered = Arc::new(AtomicBool::new(false));
        let answer = answered.clone();
        let mut polls = 0;
        // The connection: its first poll reads three requests (hyper executes their
        // futures), the next writes what they made ready.
        let conn = std::future::poll_fn(move |_| {
            polls += 1;
            if polls == 1 {
                hyper::rt::Executor::execute(&exec, waking_itself(8));
                hyper::rt::Executor::execute(&exec, waking_itself(8));
                let answer = answer.clone();
                hyper::rt::Executor::execute(&exec, async move {
                    answer.store(true, Ordering::SeqCst);
                });
                return Poll::Pending;
            }
            Poll::Ready(answer.load(Ordering::SeqCst))
        });
        let mut with_streams = std::pin::pin!(WithStreams::new(conn));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let written = with_streams.as_mut().poll(&mut cx);
        assert_eq!(
            written,
            Poll::Ready(true),
            "the answer was ready when it wrote"
        );
        assert!(answered.load(Ordering::SeqCst));
    }

    #[test]
    fn what_a_poll_executes_is_collected_and_nothing_after() {
        let exec = StreamExecutor {
            tasks: StreamTasks::Connection,
        };
        let ((), executed) = collecting(|| {
            hyper::rt::Executor::execute(&exec, async {});
            hyper::rt::Executor::execute(&exec, async {});
        });
        assert_eq!(executed.len(), 2);
        assert!(COLLECTED.with(|c| c.borrow().is_none()));
        // Nested: the inner poll's futures are its own, and the outer collection is back.
        let ((), outer) = collecting(|| {
            let ((), inner) = collecting(|| hyper::rt::Executor::execute(&exec, async {}));
            assert_eq!(inner.len(), 1);
            hyper::rt::Executor::execute(&exec, async {});
        });
        assert_eq!(outer.len(), 1);
    }
}
