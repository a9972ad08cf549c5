//! Socket options the standard library and socket2 do not expose.

use std::io;
use tokio::net::TcpStream;

/// Sets `TCP_NOTSENT_LOWAT`: the socket reports writable only while fewer than `bytes`
/// are queued and not yet sent, so unsent data waits in the wrapper, where priority still
/// decides, instead of in the kernel.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn set_notsent_lowat(stream: &TcpStream, bytes: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is a valid, open socket owned by `stream` for the duration of the
    // call; the option value is a c_int living on our stack and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere the option is not available; the wrapper still bounds its own queues.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn set_notsent_lowat(_stream: &TcpStream, _bytes: u32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TCP_NOTSENT_LOWAT",
    ))
}
