//! sys::fd: file descriptors guardian did not open itself (the `--events-fd` its caller
//! names), and writes that never block guardian on a reader that stopped reading.
//! `pwritev2` stays a raw system call: rustix's takes no offset of -1 ("the current position").

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

/// Which of fds 0-2 (bit `n`) were closed when guardian started, and so are guardian's own
/// `/dev/null` now, not anything its caller gave it (set once by the entry point,
/// `sys/start.rs`, before anything else runs).
static REOPENED_STD_FDS: AtomicU8 = AtomicU8::new(0);

/// The entry point opened `/dev/null` on the closed standard fd `n` (0 to 2).
#[cfg_attr(test, allow(dead_code))]
pub fn note_reopened_std_fd(n: RawFd) {
    if (0..=2).contains(&n) {
        REOPENED_STD_FDS.fetch_or(1 << n, Ordering::Relaxed);
    }
}

/// Takes ownership of a file descriptor guardian inherited from its caller (`--events-fd`);
/// `None` when that number is not open, judged as the caller gave it: a standard fd that was
/// closed at start is not the caller's, although guardian has `/dev/null` open on it.
pub fn take_inherited_fd(n: RawFd) -> Option<OwnedFd> {
    if n < 0 || (n <= 2 && REOPENED_STD_FDS.load(Ordering::Relaxed) & (1 << n) != 0) {
        return None;
    }
    // SAFETY: fcntl(F_GETFD) only queries the number; it fails with EBADF when not open.
    if unsafe { libc::fcntl(n, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: the fd is open and was inherited from the caller, who handed it to guardian by
    // naming it; nothing else in guardian uses that number, so this is its only owner.
    Some(unsafe { OwnedFd::from_raw_fd(n) })
}

/// `send(fd, buf, MSG_DONTWAIT | MSG_NOSIGNAL)`: a non-blocking write to a socket that does
/// not change the socket's shared file status flags and raises no SIGPIPE.
pub fn send_nonblocking(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    use rustix::net::SendFlags;
    Ok(rustix::net::send(fd, buf, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)?)
}

/// `pwritev2(fd, [buf], -1, RWF_NOWAIT)`: a write that fails with EAGAIN instead of blocking,
/// without changing the description's shared `O_NONBLOCK` flag. Anonymous pipes support it
/// since Linux 6.4; named FIFOs, pipes reopened through /proc and older kernels answer
/// `EOPNOTSUPP`. The system call itself, so its errno is the kernel's (or a seccomp filter's):
/// glibc's wrapper turns `ENOSYS` into `EOPNOTSUPP`, musl's does not.
pub fn write_nowait(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    let iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: pwritev2(fd, iov, iovcnt, pos_l, pos_h, flags) with one iovec describing `buf`,
    // valid for the call; the offset -1 (both halves, for 32-bit ABIs) means "the current
    // position" (pipes have none). It only writes; no memory of ours is changed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_pwritev2,
            fd.as_raw_fd() as libc::c_long,
            &iov as *const libc::iovec,
            1 as libc::c_long,
            -1 as libc::c_long,
            -1 as libc::c_long,
            libc::RWF_NOWAIT as libc::c_long,
        )
    };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}
