//! The system calls the link needs that std does not wrap: entering a network namespace
//! (`setns(2)`) and waiting on two descriptors (`poll(2)`), both through rustix's safe
//! wrappers, and attaching a TUN device (the `TUNSETIFF` `ioctl(2)`), which has no safe
//! wrapper: the link's only `unsafe` code, kept in [`tun_set_iff`].

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// Moves the calling thread into the network namespace `namespace` refers to (a file under
/// `/run/netns`, as made by `ip netns add`). It changes only the calling thread's network
/// namespace.
pub(super) fn setns_net(namespace: &File) -> io::Result<()> {
    move_into_link_name_space(namespace.as_fd(), Some(LinkNameSpaceType::Network))?;
    Ok(())
}

/// Attaches `device` (an open `/dev/net/tun`) to a new TUN interface named `name` in the
/// calling thread's network namespace, without packet information: reads and writes are
/// bare IP packets. The interface lives until `device` is closed.
pub(super) fn tun_set_iff(device: &File, name: &str) -> io::Result<()> {
    // SAFETY: `ifreq` is plain old data (a name and a union of integers and plain structs),
    // for which all-zero bytes are a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= request.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name `{name}`"),
        ));
    }
    for (dst, &src) in request.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // The name stays NUL-terminated: it is shorter than the zeroed array.
    request.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `request` is, valid and
    // exclusively borrowed for the duration of the call; the descriptor is open since
    // `device` is borrowed.
    let rc = unsafe { libc::ioctl(device.as_raw_fd(), libc::TUNSETIFF, &mut request) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Blocks until `fd` has a packet to read (`true`) or `stop` is readable or closed at its
/// other end (`false`).
pub(super) fn wait_readable(fd: BorrowedFd<'_>, stop: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fds = [
        PollFd::from_borrowed_fd(fd, PollFlags::IN),
        PollFd::from_borrowed_fd(stop, PollFlags::IN),
    ];
    loop {
        poll(&mut fds, None)?;
        if !fds[1].revents().is_empty() {
            return Ok(false);
        }
        let device = fds[0].revents();
        if device.contains(PollFlags::IN) {
            return Ok(true);
        }
        if !device.is_empty() {
            return Err(io::Error::other(format!(
                "TUN device poll events {:#x}",
                device.bits()
            )));
        }
    }
}
