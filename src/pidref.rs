//! pidref: guardian's process handle, modelled on systemd's `PidRef`. A handle carries the
//! pid and, where the kernel allows, a pidfd, so every signal reaches the process that was
//! meant. Without a pidfd a handle may only name an unreaped direct child of guardian (whose
//! pid cannot be reused before guardian reaps it); `kill(pid)` is used for nothing else.
//!
//! `pidfd_send_signal` is probed once at start ([`probe_pidfd_signal`]): a seccomp policy may
//! refuse it while `pidfd_open` and `clone3(CLONE_PIDFD)` work. When it is refused, every
//! handle signals as if it had no pidfd (unreaped direct children only), and teardown peels
//! the tree from the top instead of opening pidfds it could not use.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::events::Events;
use crate::sys;

/// `pidfd_send_signal` was refused (ENOSYS/EPERM on a process guardian may always signal).
static PIDFD_SIGNAL_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether pidfds can be used to signal (false after a refused probe).
pub fn pidfd_signal_usable() -> bool {
    !PIDFD_SIGNAL_REFUSED.load(Ordering::Relaxed)
}

/// Sends signal 0 through `fd`, a pidfd on guardian itself or on its unreaped child (which
/// guardian is always permitted to signal). ENOSYS or EPERM means the interface is refused:
/// a `fallback` event is emitted and handles fall back to `kill()` on unreaped children.
pub fn probe_pidfd_signal(fd: BorrowedFd<'_>, events: &mut Events) {
    if let Err(e) = sys::pidfd_send_signal(fd, 0, 0) {
        if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
            PIDFD_SIGNAL_REFUSED.store(true, Ordering::Relaxed);
            events.fallback("pidfd_send_signal", &e, "kill() on unreaped direct children only");
        } else {
            crate::log::debug!("pidfd_send_signal probe failed: {e}");
        }
    }
}

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
        if let Some(fd) = self.pidfd.as_ref().filter(|_| pidfd_signal_usable()) {
            match sys::pidfd_send_signal(fd.as_fd(), sig, 0) {
                // Refused after the probe (a policy change): an unreaped child is still safe
                // to signal by pid.
                Err(e) if self.unreaped_child && matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {}
                other => return other,
            }
        }
        if self.unreaped_child { sys::kill(self.pid, sig) } else { Err(io::Error::from_raw_os_error(libc::ESRCH)) }
    }

    /// Sends `sig` to this process's process group. Through the pidfd with
    /// `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9), else `killpg` while the unreaped leader pins
    /// the group id; never after the leader was reaped (the pgid may have been recycled).
    pub fn signal_group(&self, sig: i32) -> io::Result<()> {
        if let Some(fd) = self.pidfd.as_ref().filter(|_| pidfd_signal_usable()) {
            match sys::pidfd_send_signal(fd.as_fd(), sig, sys::PIDFD_SIGNAL_PROCESS_GROUP) {
                // EINVAL: kernel before 6.9 (no group flag); ENOSYS: refused after the probe.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {}
                other => return other,
            }
        }
        if self.unreaped_child { sys::kill(-self.pid, sig) } else { Err(io::Error::from_raw_os_error(libc::ESRCH)) }
    }
}
