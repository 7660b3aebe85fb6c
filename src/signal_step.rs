//! signal_step: start-up's signal step. The set of signals guardian handles (blocks and reads
//! from its signalfd: every catchable one it was not told to ignore), one query of every
//! signal's disposition, handlers reset, SIGCHLD made reapable, the mask set and the signalfd
//! opened, before the provider exists.

use std::os::fd::OwnedFd;

use crate::signals::{StopSignal, is_uncatchable, name, sigrt_range};
use crate::sys;

/// Every signal guardian blocks and reads from its signalfd: every catchable one, 1 to 64,
/// except those ignored when guardian started (they stay ignored for guardian and, inherited,
/// for the provider). SIGCHLD is always handled, and so is SIGPIPE: the Rust runtime sets it
/// to SIG_IGN before `main`, so its original disposition is unknowable; like
/// `std::process::Command`, guardian gives the provider SIG_DFL.
///
/// The set includes:
/// * the fault signals (ILL, TRAP, ABRT, BUS, FPE, SEGV, SYS). Sent by another process they
///   are only a request, forwarded like any other; a fault of guardian's own still ends it at
///   once, because the kernel delivers a synchronous fault with `force_sig_fault`, which
///   unblocks the signal and resets a blocked or ignored handler to the default action, and
///   `abort()` (what `panic = "abort"` calls) unblocks SIGABRT and restores its default
///   action before raising it. `docs/design.md` records how this was checked.
/// * the C library's reserved numbers below `SIGRTMIN` (32-33 for glibc, 32-34 for musl):
///   the library uses them for thread cancellation, `setxid` across threads and
///   `timer_create(SIGEV_THREAD)`. guardian is single-threaded and calls none of those, so
///   no library machinery waits for them; left unblocked, their default action would end
///   guardian without a teardown. They are blocked and read through raw syscalls
///   (`sys::SigSet`), because the library's wrappers refuse them.
///
/// Only SIGKILL and SIGSTOP, which no process can block, are left out.
pub fn handled(ignored_at_start: &dyn Fn(i32) -> bool) -> sys::SigSet {
    let mut set = sys::SigSet::empty();
    let (_, max) = sigrt_range();
    for sig in 1..=max {
        if is_uncatchable(sig) {
            continue;
        }
        if sig != libc::SIGCHLD && sig != libc::SIGPIPE && ignored_at_start(sig) {
            continue;
        }
        set.add(sig);
    }
    set
}

/// What start-up's signal step leaves for the rest of guardian.
pub struct Setup {
    /// Non-blocking, close-on-exec signalfd for every [`handled`] signal.
    pub sigfd: OwnedFd,
    /// The mask guardian was started with, restored in the provider before exec.
    pub original_mask: sys::SigSet,
    /// SIGCHLD was ignored when guardian started; the provider gets that back.
    pub sigchld_ignored: bool,
    /// The stop signal was ignored when guardian started (it is now at its default action).
    pub stop_signal_ignored: bool,
}

/// Start-up's signal step: one query of every signal's disposition, handlers reset, SIGCHLD
/// made reapable, every [`handled`] signal blocked and a signalfd opened for them. Before the
/// provider exists.
///
/// SIGTERM and the stop signal are stop requests, and the kill signal (`--kill-signal`) a kill
/// request, so they are handled even when the caller ignored them (a background job of a non-interactive shell starts with SIGINT and SIGQUIT
/// ignored): a blocked signal is queued even while its disposition is `SIG_IGN`, so the
/// signalfd still sees it. The stop signal is also reset to its default action when it was
/// ignored, because the provider inherits the disposition and must be able to hear it; an
/// ignored SIGTERM that is not the stop signal stays ignored for the provider.
pub fn setup(stop_signal: StopSignal, kill_signal: Option<i32>) -> Result<Setup, String> {
    let stop_signal = stop_signal.get();
    // One rt_sigaction per signal (62 of them) is the whole cost of knowing the ignored set;
    // each is asked once.
    let mut ignored = sys::SigSet::empty();
    let (_, max) = sigrt_range();
    for sig in (1..=max).filter(|&sig| !is_uncatchable(sig)) {
        match sys::disposition(sig) {
            Ok(sys::Disposition::Ignore) => ignored.add(sig),
            Ok(sys::Disposition::Handler) => sys::set_default_disposition(sig)
                .map_err(|e| format!("sigaction({}, SIG_DFL) failed: {e}", name(sig)))?,
            Ok(sys::Disposition::Default) | Err(_) => {}
        }
    }
    let stop_signal_ignored = ignored.contains(stop_signal);
    if stop_signal_ignored {
        sys::set_default_disposition(stop_signal)
            .map_err(|e| format!("sigaction({}, SIG_DFL) failed: {e}", name(stop_signal)))?;
    }
    let sigchld_ignored = ignored.contains(libc::SIGCHLD);
    if sigchld_ignored {
        sys::set_default_disposition(libc::SIGCHLD).map_err(|e| format!("sigaction(SIGCHLD, SIG_DFL) failed: {e}"))?;
    }
    // The sentinel's word that the host died rides on a signal of its own: heard even when the
    // caller ignored it (it reaches the provider, if forwarded, ignored as the caller left it).
    let host_death = crate::sentinel::host_death_signal();
    let request = |sig| sig == libc::SIGTERM || sig == stop_signal || Some(sig) == kill_signal || sig == host_death;
    let handled = handled(&|sig| !request(sig) && ignored.contains(sig));
    // Everything was blocked since guardian's first instant (`sys::start::block_until_setup`):
    // now exactly the caller's mask plus the handled set, so a signal ignored at start that
    // arrived meanwhile is discarded as it would have been.
    let original_mask = sys::start::caller_mask();
    sys::set_sigmask(libc::SIG_SETMASK, &original_mask.union(handled))
        .map_err(|e| format!("sigprocmask(SIG_SETMASK) failed: {e}"))?;
    let sigfd = sys::signalfd(&handled).map_err(|e| {
        if e.raw_os_error().is_some_and(crate::errno::is_resource) {
            format!("signalfd() failed: {}", crate::errno::explain(&e))
        } else {
            format!("signalfd() failed: {e}; guardian needs signalfd (Linux 2.6.22) to supervise without races")
        }
    })?;
    Ok(Setup { sigfd, original_mask, sigchld_ignored, stop_signal_ignored })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::is_forwarded;

    #[test]
    fn handled_set_is_every_catchable_signal_but_the_ignored() {
        let set = handled(&|s| s == libc::SIGINT || s == libc::SIGCHLD);
        assert!(set.contains(libc::SIGTERM));
        assert!(set.contains(libc::SIGCHLD), "SIGCHLD is always handled");
        assert!(!set.contains(libc::SIGINT), "ignored at start stays ignored");
        for sig in 1..=64 {
            let expected = ![libc::SIGKILL, libc::SIGSTOP, libc::SIGINT].contains(&sig);
            assert_eq!(set.contains(sig), expected, "{}", name(sig));
        }
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGABRT, 32, 33, 34] {
            assert!(set.contains(sig) && is_forwarded(sig), "{}", name(sig));
        }
        let set = handled(&|s| s == libc::SIGPIPE);
        assert!(set.contains(libc::SIGPIPE), "SIGPIPE's ignored state is the Rust runtime's, not the caller's");
        assert!(!is_forwarded(libc::SIGCHLD));
        assert!(is_forwarded(libc::SIGWINCH));
    }
}
