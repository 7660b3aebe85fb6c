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

use crate::events::Events;
use crate::sys;

/// Sends signal 0 through `fd`, a pidfd on guardian itself or on its unreaped child (which
/// guardian is always permitted to signal). ENOSYS or EPERM means the interface is refused:
/// a `fallback` event is emitted, and the caller's handles fall back to `kill()` on unreaped
/// children ([`PidRef::refuse_pidfd_signals`]; the teardown is told the same). Returns whether
/// pidfds may signal.
pub fn probe_pidfd_signal(fd: BorrowedFd<'_>, events: &mut Events) -> bool {
    match sys::pidfd_send_signal(fd, 0, 0) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
            events.fallback("pidfd_send_signal", &e, "kill() on unreaped direct children only");
            false
        }
        Err(e) => {
            crate::log::debug!("pidfd_send_signal probe failed: {e}");
            true
        }
        Ok(()) => true,
    }
}

/// Sends the stop signal `sig` through `send`, then SIGCONT, so a stopped process acts on it
/// (the SIGCONT's own failure is not the caller's: the stop signal was delivered). The one
/// place the stop signal's SIGCONT is sent from.
pub fn and_cont(send: impl Fn(i32) -> io::Result<()>, sig: i32) -> io::Result<()> {
    send(sig)?;
    let _ = send(libc::SIGCONT);
    Ok(())
}

pub struct PidRef {
    pub pid: i32,
    pidfd: Option<OwnedFd>,
    /// Direct child of guardian, not yet reaped: `kill(pid)` is safe.
    unreaped_child: bool,
    /// Signals go through the pidfd (false after a refused probe: `kill()` on an unreaped
    /// child only).
    pidfd_signals: bool,
}

impl PidRef {
    /// A direct child guardian has not reaped, with its pidfd when one could be had.
    pub fn child(pid: i32, pidfd: Option<OwnedFd>) -> PidRef {
        PidRef { pid, pidfd, unreaped_child: true, pidfd_signals: true }
    }

    /// Any process, named by a pidfd whose identity the caller has verified.
    pub fn verified(pid: i32, pidfd: OwnedFd) -> PidRef {
        PidRef { pid, pidfd: Some(pidfd), unreaped_child: false, pidfd_signals: true }
    }

    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|fd| fd.as_fd())
    }

    /// The start-up probe found `pidfd_send_signal` refused: the pidfd is kept for polling only.
    pub fn refuse_pidfd_signals(&mut self) {
        self.pidfd_signals = false;
    }

    /// Guardian reaped this child: from now on its pid may belong to someone else.
    pub fn mark_reaped(&mut self) {
        self.unreaped_child = false;
    }

    /// Sends `sig` to this process only.
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        if let Some(fd) = self.pidfd.as_ref().filter(|_| self.pidfd_signals) {
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
        if let Some(fd) = self.pidfd.as_ref().filter(|_| self.pidfd_signals) {
            match sys::pidfd_send_signal(fd.as_fd(), sig, sys::PIDFD_SIGNAL_PROCESS_GROUP) {
                // EINVAL: kernel before 6.9 (no group flag); ENOSYS: refused after the probe.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {}
                other => return other,
            }
        }
        if self.unreaped_child { sys::kill(-self.pid, sig) } else { Err(io::Error::from_raw_os_error(libc::ESRCH)) }
    }
}
