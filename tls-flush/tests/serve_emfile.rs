//! `tls_flush::serve` keeps accepting after the process ran out of file descriptors.
//!
//! This lowers the process's `RLIMIT_NOFILE` and fills every free descriptor, so it lives
//! in its own test binary (with a single test) where it cannot disturb other tests.

mod serve_support;

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use serve_support::*;
use tokio::net::TcpStream;

/// The log lines written by the `tracing` subscriber, in memory (no file descriptor needed).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn get_nofile() -> libc::rlimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(rc, 0, "getrlimit: {}", io::Error::last_os_error());
    limit
}

fn set_nofile(limit: libc::rlimit) {
    // SAFETY: `limit` is a valid rlimit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", io::Error::last_os_error());
}

/// The highest file descriptor open in this process.
fn highest_fd() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(2)
}

/// With every descriptor in use, a connection waiting in the listen queue makes `accept`
/// fail with EMFILE: the server logs a warning and retries with a growing pause instead of
/// ending. Once descriptors are free again it accepts that same connection and serves a
/// request over it; then it still shuts down gracefully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_survives_running_out_of_file_descriptors() {
    let logs = Logs::default();
    let sink = logs.clone();
    tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .init();

    let mut server = start(|s| s).await;
    let (addr, client) = (server.addr, server.client.clone());
    // The server works before.
    let mut before = h2_connect(addr, client.clone(), None).await;
    assert_eq!(before.get("/small").await.0, StatusCode::OK);
    drop(before);

    // Lower the soft limit a little above what is open, and fill every free descriptor.
    let original = get_nofile();
    let soft = (highest_fd() + 64).min(original.rlim_max);
    set_nofile(libc::rlimit {
        rlim_cur: soft,
        rlim_max: original.rlim_max,
    });
    let mut fillers = Vec::new();
    let exhausted = loop {
        match File::open("/dev/null") {
            Ok(f) => fillers.push(f),
            Err(e) => break e,
        }
        assert!(fillers.len() < 100_000, "RLIMIT_NOFILE not in effect");
    };
    assert_eq!(exhausted.raw_os_error(), Some(libc::EMFILE), "{exhausted}");

    // One descriptor for the client's socket; the connection completes in the kernel's
    // listen queue, and the server's accept has no descriptor left for it.
    drop(fillers.pop());
    let tcp = TcpStream::connect(addr).await;
    let waited = tokio::time::timeout(TIMEOUT, async {
        loop {
            let text = logs.text();
            // Two failures in a row: the pause doubled (5 ms, then 10 ms).
            if text.contains("retry_in=10ms") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    // Restore before asserting anything, so a failure still leaves a usable process.
    drop(fillers);
    set_nofile(original);
    let tcp = tcp.expect("client connect with the descriptor left free");
    let text = logs.text();
    assert!(waited.is_ok(), "no repeated accept failure logged: {text}");
    assert!(
        text.contains("WARN") && text.contains("accept failed"),
        "accept failure not logged as a warning: {text}"
    );
    assert!(
        text.contains("Too many open files"),
        "the logged failure is not EMFILE: {text}"
    );
    assert!(!server.task.is_finished(), "serve ended on EMFILE");

    // The connection that waited through the failures is served.
    let mut after = h2_over(tcp, client.clone(), None).await;
    let (status, body) = after.get("/big").await;
    assert_eq!(status, StatusCode::OK);
    assert_pattern(&body, BIG_LEN, "/big after EMFILE");
    // And new ones too.
    let mut fresh = h2_connect(addr, client.clone(), None).await;
    assert_eq!(fresh.get("/small").await.0, StatusCode::OK);

    drop(after);
    drop(fresh);
    server.stop();
    let result = server.finished().await;
    assert!(result.is_ok(), "{result:?}");
}
