//! Socket options the standard library and socket2 do not expose, `TCP_INFO`, and the
//! congestion control's name.

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

/// Reads `TCP_INFO`: the fields of [`PathState`](crate::PathState).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn tcp_info(stream: std::os::fd::BorrowedFd<'_>) -> io::Result<crate::PathState> {
    use std::os::fd::AsRawFd;
    // SAFETY: `tcp_info` is plain old data (integers only), so all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the fd is a valid, open descriptor borrowed for the duration of the call (a
    // non-socket fails with ENOTSOCK); `info` is a writable buffer of `len` bytes on our
    // stack, and the kernel writes at most `len` bytes (older kernels fewer, leaving the
    // rest zero).
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(crate::PathState {
        cwnd: info.tcpi_snd_cwnd,
        unacked: info.tcpi_unacked,
        mss: info.tcpi_snd_mss,
        notsent: info.tcpi_notsent_bytes,
        min_rtt: std::time::Duration::from_micros(u64::from(info.tcpi_min_rtt)),
        delivery_rate: info.tcpi_delivery_rate,
        ssthresh: info.tcpi_snd_ssthresh,
        srtt: std::time::Duration::from_micros(u64::from(info.tcpi_rtt)),
        retransmits: info.tcpi_total_retrans,
    })
}

/// Elsewhere `TCP_INFO` is not read; writes are not limited by it.
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
pub(crate) fn tcp_info(_stream: std::os::fd::BorrowedFd<'_>) -> io::Result<crate::PathState> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_INFO"))
}

/// Reads `TCP_CONGESTION`: the name of the socket's congestion control.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn congestion_control(stream: &TcpStream) -> io::Result<crate::CongestionControl> {
    let name = socket2::SockRef::from(stream).tcp_congestion()?;
    Ok(crate::CongestionControl::from_name(&name))
}

/// Elsewhere the name is not read; the write budget assumes a loss-based control.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn congestion_control(_stream: &TcpStream) -> io::Result<crate::CongestionControl> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_CONGESTION"))
}
