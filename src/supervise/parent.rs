//! supervise::parent: how guardian notices its parent's death (a pidfd, a bounded `getppid()`
//! check, or the parent-death signal), for the loop.

use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::sys;

/// Interval of the bounded parent check when the parent's pidfd could not be opened.
const PARENT_POLL: Duration = Duration::from_millis(250);
/// How guardian notices its parent's death.
pub enum ParentWatch {
    Pidfd(OwnedFd),
    /// pidfd_open was refused: compare getppid() on a bounded interval.
    Poll {
        ppid: i32,
        next: Duration,
    },
    /// The parent is outside guardian's PID namespace (getppid() is 0, guardian is not PID 1):
    /// `PR_SET_PDEATHSIG` with this signal, read from the signalfd like any other.
    Deathsig(i32),
}

impl ParentWatch {
    /// Whether `info` is the kernel's parent-death signal: the chosen number, `SI_USER`, and
    /// sender pid 0 (the dying parent is outside guardian's namespace). A kill() of the same
    /// number from outside the namespace looks the same, and so does any kill() of it while the
    /// uid's RLIMIT_SIGPENDING is exhausted (the kernel then drops the sender); docs/design.md
    /// (start-up step 5) says why that is accepted.
    pub fn is_death_signal(&self, info: &sys::SigInfo) -> bool {
        matches!(self, ParentWatch::Deathsig(sig) if info.signo == *sig && info.code == libc::SI_USER && info.pid == 0)
    }

    /// The bounded `getppid()` check, when the parent's pidfd could not be opened: true once
    /// the parent changed (it died).
    pub fn poll_says_dead(&mut self, now: Duration) -> bool {
        let ParentWatch::Poll { ppid, next } = self else { return false };
        if now < *next {
            return false;
        }
        if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(*ppid) {
            return true;
        }
        *next = now + PARENT_POLL;
        false
    }
}
