//! Socket options the standard library and socket2 do not expose, `TCP_INFO`, and the
//! congestion control's name.

use std::io;
use tokio::net::TcpStream;

/// Sets `TCP_NOTSENT_LOWAT`: the socket reports writable only while fewer than `bytes`
/// are queued and not yet sent, so unsent data waits in the wrapper, where priority still
/// decides, instead of in the kernel.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn set_notsent_lowat(stream: &TcpStream, bytes: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_option(stream, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &value)
}

/// `setsockopt` with a plain-integer value.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_option<T: Copy>(
    stream: &TcpStream,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the fd is a valid, open socket owned by `stream` for the duration of the
    // call; the option value is an integer (`T` is only c_int or u64 here) borrowed for the
    // call, and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
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
        sacked: info.tcpi_sacked,
        lost: info.tcpi_lost,
        retransmitting: info.tcpi_retrans,
        pacing_rate: info.tcpi_pacing_rate,
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

/// Turns on the kernel's TCP pacing for this socket (Linux 4.13 and later): a finite
/// `SO_MAX_PACING_RATE` marks the socket as needing pacing, and TCP then spreads its
/// segments at about 1.2 congestion windows per smoothed RTT (twice that in slow start)
/// instead of sending each write as a burst. The rate set here is far above any path's,
/// so it never limits one.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn enable_pacing(stream: &TcpStream) -> io::Result<()> {
    // All ones means "unlimited" and leaves pacing off; one less turns it on. The kernel
    // reads an unsigned long where the size allows.
    set_option(
        stream,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &(u64::MAX - 1),
    )
}

/// Elsewhere the kernel does not pace; the write budget still works without it.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn enable_pacing(_stream: &TcpStream) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SO_MAX_PACING_RATE",
    ))
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    /// The kernel keeps the rate we set: pacing is on, and the rate is not one that limits.
    #[tokio::test]
    async fn pacing_is_enabled_with_a_rate_that_never_binds() {
        use std::os::fd::AsRawFd;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let read = |stream: &TcpStream| {
            let mut value = 0u64;
            let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
            // SAFETY: a valid socket fd for the call; `value` is a writable u64 on our
            // stack and `len` its size.
            let rc = unsafe {
                libc::getsockopt(
                    stream.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_MAX_PACING_RATE,
                    (&mut value as *mut u64).cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0, "{}", io::Error::last_os_error());
            value
        };
        assert_eq!(
            read(&stream),
            u64::MAX,
            "unlimited, and no pacing, by default"
        );
        enable_pacing(&stream).unwrap();
        assert_eq!(read(&stream), u64::MAX - 1);
    }
}
