//! sys::terminal: the controlling terminal's foreground process group, for the hand-off to
//! the provider and back. `tcgetpgrp` stays a libc call: rustix's turns a foreground group of
//! 0 into an error, which would change what guardian decides about an orphaned terminal.

use std::io;
use std::os::fd::RawFd;

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

/// `getpgrp()`.
pub fn getpgrp() -> i32 {
    rustix::process::getpgrp().as_raw_nonzero().get()
}

/// `setpgid(pid, pgid)`; 0 for either means the caller, as in C.
pub fn setpgid(pid: i32, pgid: i32) -> io::Result<()> {
    let arg = |n: i32| match n {
        ..0 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        n => Ok(rustix::process::Pid::from_raw(n)),
    };
    Ok(rustix::process::setpgid(arg(pid)?, arg(pgid)?)?)
}
