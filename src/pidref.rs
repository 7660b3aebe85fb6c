//! pidref: guardian's process handle, modelled on systemd's `PidRef`. A handle carries the
//! pid and, where the kernel allows, a pidfd, so every signal reaches the process that was
//! meant. Without a pidfd a handle may only name an unreaped direct child of guardian (whose
//! pid cannot be reused before guardian reaps it); `kill(pid)` is used for nothing else.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys;

pub struct PidRef {
    pub pid: i32,
    pidfd: Option<OwnedFd>,
    /// Direct child of guardian, not yet reaped: `kill(pid)` is safe.
    unreaped_child: bool,
}

impl PidRef {
    /// A direct child guardian has not reaped, with its pidfd when one could be had.
    pub fn child(pid: i32, pidfd: Option<OwnedFd>) -> PidRef {
        PidRef { pid, pidfd, unreaped_child: true }
    }

    /// Any process, named by a pidfd whose identity the caller has verified.
    pub fn verified(pid: i32, pidfd: OwnedFd) -> PidRef {
        PidRef { pid, pidfd: Some(pidfd), unreaped_child: false }
    }

    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|fd| fd.as_fd())
    }

    /// Guardian reaped this child: from now on its pid may belong to someone else.
    pub fn mark_reaped(&mut self) {
        self.unreaped_child = false;
    }

    /// Sends `sig` to this process only.
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        match (&self.pidfd, self.unreaped_child) {
            (Some(fd), _) => sys::pidfd_send_signal(fd.as_fd(), sig, 0),
            (None, true) => sys::kill(self.pid, sig),
            (None, false) => Err(io::Error::from_raw_os_error(libc::ESRCH)),
        }
    }

    /// Sends `sig` to this process's process group. Through the pidfd with
    /// `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9), else `killpg` while the unreaped leader pins
    /// the group id; never after the leader was reaped (the pgid may have been recycled).
    pub fn signal_group(&self, sig: i32) -> io::Result<()> {
        if let Some(fd) = &self.pidfd {
            match sys::pidfd_send_signal(fd.as_fd(), sig, sys::PIDFD_SIGNAL_PROCESS_GROUP) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                other => return other,
            }
        }
        if self.unreaped_child { sys::kill(-self.pid, sig) } else { Err(io::Error::from_raw_os_error(libc::ESRCH)) }
    }
}
