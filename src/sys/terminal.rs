//! sys::terminal: the controlling terminal's foreground process group, for the hand-off to
//! the provider and back. `tcgetpgrp` stays a libc call: rustix's turns a foreground group of
//! 0 into an error, which would change what guardian decides about an orphaned terminal.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::cvt;

/// Whether fd is a terminal.
pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty only queries the fd.
    unsafe { libc::isatty(fd) == 1 }
}

/// `tcgetpgrp(fd)`.
pub fn tcgetpgrp(fd: RawFd) -> io::Result<i32> {
    // SAFETY: plain ioctl wrapper, no memory passed.
    cvt(unsafe { libc::tcgetpgrp(fd) })
}

/// `tcsetpgrp(fd, pgrp)`; the caller blocks SIGTTOU.
pub fn tcsetpgrp(fd: RawFd, pgrp: i32) -> io::Result<()> {
    // SAFETY: plain ioctl wrapper, no memory passed.
    cvt(unsafe { libc::tcsetpgrp(fd, pgrp) }).map(drop)
}

/// `getpgrp()`: guardian's process group as its PID namespace sees it, 0 when the group
/// lives outside that namespace (`unshare -pf`, `nsenter -p`: the group's leader is in an
/// ancestor namespace). A libc call: rustix's `getpgrp` builds a non-zero `Pid` from the 0.
pub fn getpgrp() -> i32 {
    // SAFETY: getpgrp takes nothing and cannot fail.
    unsafe { libc::getpgrp() }
}

/// `setpgid(pid, pgid)`; 0 for either means the caller, as in C.
pub fn setpgid(pid: i32, pgid: i32) -> io::Result<()> {
    let arg = |n: i32| match n {
        ..0 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        n => Ok(rustix::process::Pid::from_raw(n)),
    };
    Ok(rustix::process::setpgid(arg(pid)?, arg(pgid)?)?)
}

/// guardian's controlling terminal, opened through `/dev/tty` (read-write, no new
/// controlling terminal, close-on-exec) whatever fds 0-2 are. `Ok(None)`: guardian has no
/// controlling terminal (ENXIO).
pub fn open_controlling_terminal() -> io::Result<Option<OwnedFd>> {
    use std::os::unix::fs::OpenOptionsExt;
    // std opens with O_CLOEXEC.
    match std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open("/dev/tty") {
        Ok(f) => Ok(Some(OwnedFd::from(f))),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `fd` is guardian's controlling terminal: `tcgetpgrp` answers only on it (ENOTTY
/// on any other terminal or file). An fd opened through `/dev/tty` cannot be compared by
/// `fstat` (it names /dev/tty itself).
pub fn is_controlling_terminal(fd: BorrowedFd<'_>) -> bool {
    tcgetpgrp(fd.as_raw_fd()).is_ok()
}

/// Whether the caller's process group is the foreground of its controlling terminal `fd`,
/// asked by a zero-length `read`: the kernel's job-control check answers EIO to a background
/// reader that blocks or ignores SIGTTIN (guardian blocks it), and lets a foreground one
/// through to read nothing. No input is consumed and nothing blocks. It works where
/// `tcgetpgrp` cannot answer: when the foreground group and the caller's both lie outside
/// the caller's PID namespace, both read as 0.
pub fn in_foreground(fd: BorrowedFd<'_>) -> io::Result<bool> {
    match rustix::io::read(fd, &mut [0u8; 0]) {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::IO) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
