//! The server's TCP retransmissions: `tcpi_total_retrans` from Linux `TCP_INFO` on each
//! accepted socket, read through a duplicate descriptor while the connection lives and
//! once more when its task ends (the count then stays), so that it is known both during a
//! run and after the server stopped.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// One accepted connection's socket: open (a duplicate of its descriptor), or closed with
/// its last count, or unknown (the duplicate could not be made, or `TCP_INFO` failed).
#[derive(Debug)]
enum Socket {
    Open(OwnedFd),
    Closed(u32),
    Unknown,
}

impl Socket {
    fn retransmits(&self) -> Option<u32> {
        match self {
            Socket::Open(fd) => total_retrans(fd.as_fd()).ok(),
            Socket::Closed(n) => Some(*n),
            Socket::Unknown => None,
        }
    }
}

/// Every connection a server accepted, for their retransmissions (cheap to clone: shared).
#[derive(Debug, Clone, Default)]
pub(crate) struct Retransmits(Arc<Mutex<Vec<Arc<Mutex<Socket>>>>>);

impl Retransmits {
    /// Starts watching an accepted socket; the returned guard, held by the connection's
    /// task, reads the final count and closes the duplicate when dropped.
    pub(crate) fn watch(&self, tcp: &impl AsFd) -> Watch {
        let socket = match tcp.as_fd().try_clone_to_owned() {
            Ok(fd) => Socket::Open(fd),
            Err(error) => {
                tracing::debug!(%error, "no duplicate of an accepted socket");
                Socket::Unknown
            }
        };
        let socket = Arc::new(Mutex::new(socket));
        self.0.lock().expect("poisoned").push(socket.clone());
        Watch(socket)
    }

    /// Segments retransmitted on every connection so far (each one's count now, or when it
    /// closed); `None` before the first connection, or when a count is unknown.
    pub(crate) fn total(&self) -> Option<u64> {
        let sockets = self.0.lock().expect("poisoned");
        if sockets.is_empty() {
            return None;
        }
        sockets
            .iter()
            .map(|s| s.lock().expect("poisoned").retransmits().map(u64::from))
            .sum()
    }
}

/// Held by a connection's task (see [`Retransmits::watch`]).
#[derive(Debug)]
pub(crate) struct Watch(Arc<Mutex<Socket>>);

impl Drop for Watch {
    fn drop(&mut self) {
        let mut socket = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let last = socket.retransmits();
        *socket = last.map_or(Socket::Unknown, Socket::Closed);
    }
}

/// `tcpi_total_retrans` of a TCP socket.
fn total_retrans(fd: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(tls_flush::PathState::read(&fd)?.retransmits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_open_and_closed_connections() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let retransmits = Retransmits::default();
        assert_eq!(retransmits.total(), None, "no connection yet");
        let watch = retransmits.watch(&accepted);
        assert_eq!(retransmits.total(), Some(0), "loopback retransmits nothing");
        drop(accepted);
        drop(watch);
        assert!(matches!(
            *retransmits.0.lock().unwrap()[0].lock().unwrap(),
            Socket::Closed(0)
        ));
        assert_eq!(retransmits.total(), Some(0));
        drop(client);
    }
}
