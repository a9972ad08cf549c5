//! Where `tls_flush::serve` runs each HTTP/2 request's future ([`StreamTasks`]): on its
//! connection's task by default, each on a task of its own with `StreamTasks::Spawned`
//! (hyper-util's `TokioExecutor`, what stock hyper servers use), compared in the same
//! process; and a panicking handler ends only its own stream either way.

mod serve_support;

use std::collections::BTreeSet;

use http::StatusCode;
use serve_support::*;
use tls_flush::StreamTasks;

/// Sends `n` `GET /task` on one connection before reading any response; the task ids the
/// handlers reported.
async fn task_ids(c: &mut H2Client, n: usize) -> Vec<String> {
    let mut pending = Vec::new();
    for _ in 0..n {
        pending.push(c.send("/task").await);
    }
    let mut ids = Vec::new();
    for res in pending {
        let res = within("h2 response", res).await.expect("h2 response");
        assert_eq!(res.status(), StatusCode::OK);
        ids.push(String::from_utf8(body_of(res).await).expect("utf-8"));
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_run_on_their_connections_task_by_default() {
    let mut server = start(|s| s).await;
    let mut first = h2_connect(server.addr, server.client.clone(), None).await;
    let mut second = h2_connect(server.addr, server.client.clone(), None).await;
    let a = task_ids(&mut first, 8).await;
    let b = task_ids(&mut second, 8).await;
    assert!(a.iter().all(|id| id != "none"), "{a:?}");
    assert_eq!(
        a.iter().collect::<BTreeSet<_>>().len(),
        1,
        "one connection, one task: {a:?}"
    );
    assert_eq!(b.iter().collect::<BTreeSet<_>>().len(), 1, "{b:?}");
    assert_ne!(a[0], b[0], "two connections share a task");
    // Later requests on the connection too.
    assert_eq!(task_ids(&mut first, 2).await, vec![a[0].clone(); 2]);
    server.stop();
    drop((first, second));
    server.finished().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_requests_run_on_tasks_of_their_own() {
    let mut server = start(|s| s.stream_tasks(StreamTasks::Spawned)).await;
    let mut c = h2_connect(server.addr, server.client.clone(), None).await;
    let ids = task_ids(&mut c, 8).await;
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 8, "{ids:?}");
    server.stop();
    drop(c);
    server.finished().await.unwrap();
}

/// A handler's panic resets its stream (the client sees the stream end with an error), and
/// the connection goes on serving, as with spawned tasks (where tokio catches the panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_ends_only_its_stream() {
    for tasks in [StreamTasks::Connection, StreamTasks::Spawned] {
        let mut server = start(|s| s.stream_tasks(tasks)).await;
        let mut c = h2_connect(server.addr, server.client.clone(), None).await;
        // Another request in flight on the same connection while the handler panics.
        let trickle = c.send("/trickle").await;
        let res = c.send("/panic").await;
        let outcome = within("the panicking request's end", res).await;
        let err = outcome.expect_err("a panicking handler cannot answer");
        assert!(err.is_reset(), "{tasks:?}: {err:?}");
        let trickle = within("trickle", trickle).await.expect("trickle response");
        let body = body_of(trickle).await;
        assert_pattern(
            &body,
            TRICKLE_CHUNKS * TRICKLE_CHUNK,
            "/trickle beside the panic",
        );
        assert_eq!(
            c.get("/small").await,
            (StatusCode::OK, b"ok".to_vec()),
            "{tasks:?}"
        );
        assert!(
            !c.connection.is_finished(),
            "{tasks:?}: the connection ended"
        );
        server.stop();
        drop(c);
        server.finished().await.unwrap();
    }
}
