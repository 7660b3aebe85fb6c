//! signals: signal names and numbers, parsing of `--stop-signal`, the set of signals guardian
//! handles (blocks and reads from its signalfd: every catchable one it was not told to
//! ignore), which of them are forwarded, and start-up's signal step (`setup`).

use std::os::fd::OwnedFd;

use crate::sys;

/// The name of a classic signal without its `SIG` prefix. A `match`, not a table of `&str`:
/// such a table is one of pointers, which static-pie relocation writes in every process (a
/// private page per resident guardian), while code is shared.
fn short_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "HUP",
        libc::SIGINT => "INT",
        libc::SIGQUIT => "QUIT",
        libc::SIGILL => "ILL",
        libc::SIGTRAP => "TRAP",
        libc::SIGABRT => "ABRT",
        libc::SIGBUS => "BUS",
        libc::SIGFPE => "FPE",
        libc::SIGKILL => "KILL",
        libc::SIGUSR1 => "USR1",
        libc::SIGSEGV => "SEGV",
        libc::SIGUSR2 => "USR2",
        libc::SIGPIPE => "PIPE",
        libc::SIGALRM => "ALRM",
        libc::SIGTERM => "TERM",
        libc::SIGSTKFLT => "STKFLT",
        libc::SIGCHLD => "CHLD",
        libc::SIGCONT => "CONT",
        libc::SIGSTOP => "STOP",
        libc::SIGTSTP => "TSTP",
        libc::SIGTTIN => "TTIN",
        libc::SIGTTOU => "TTOU",
        libc::SIGURG => "URG",
        libc::SIGXCPU => "XCPU",
        libc::SIGXFSZ => "XFSZ",
        libc::SIGVTALRM => "VTALRM",
        libc::SIGPROF => "PROF",
        libc::SIGWINCH => "WINCH",
        libc::SIGIO => "IO",
        libc::SIGPWR => "PWR",
        libc::SIGSYS => "SYS",
        _ => return None,
    })
}

/// The classic signals are 1 to 31.
fn by_short_name(name: &str) -> Option<i32> {
    (1..32).find(|&sig| short_name(sig) == Some(name))
}

/// guardian runs no signal handler at all: a handler found at start-up is reset to `SIG_DFL`
/// before anything is blocked. The shipped binary installs none (its entry point,
/// `sys/start.rs`, leaves out the Rust runtime's SIGSEGV/SIGBUS stack-overflow handlers, and
/// exec resets a caller's handlers); builds with the runtime's start-up (the unit tests) have
/// those two. Once blocked, a SIGSEGV/SIGBUS another process sends waits in the signalfd and
/// a real fault is forced through with the default action (see [`handled`]), so a handler
/// could only run where the mask is not yet or no longer set (before this step, where the
/// runtime's swallowed a `kill -SEGV` by resetting itself and returning, and in the child
/// between restoring the caller's mask and exec). The cost: a stack overflow in guardian ends
/// it with a plain SIGSEGV, without the runtime's "has overflowed its stack" line.
/// `SIGRTMIN` and `SIGRTMAX` of the C library guardian runs on (glibc reserves 32 and 33,
/// musl 32 to 34).
pub fn sigrt_range() -> (i32, i32) {
    (libc::SIGRTMIN(), libc::SIGRTMAX())
}

/// "SIGTERM", "SIGRTMIN+3", or "SIG42" for anything unnamed.
pub fn name(sig: i32) -> String {
    if let Some(n) = short_name(sig) {
        return format!("SIG{n}");
    }
    let (min, max) = sigrt_range();
    if sig == min {
        "SIGRTMIN".into()
    } else if sig > min && sig <= max {
        format!("SIGRTMIN+{}", sig - min)
    } else {
        format!("SIG{sig}")
    }
}

/// Parses `TERM`, `SIGTERM`, `sigterm`, `15`, `RTMIN`, `RTMIN+2`, `RTMAX-1`.
pub fn parse(text: &str) -> Result<i32, String> {
    let bad = || {
        format!(
            "unknown signal '{text}': use a name such as TERM, INT, HUP, USR1, RTMIN+2 or a number from 1 to {}",
            sigrt_range().1
        )
    };
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        let (_, max) = sigrt_range();
        return if (1..=max).contains(&n) { Ok(n) } else { Err(bad()) };
    }
    let upper = t.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(s) = by_short_name(bare) {
        return Ok(s);
    }
    let (min, max) = sigrt_range();
    let rt = |base: i32, rest: &str| -> Option<i32> {
        if rest.is_empty() {
            return Some(base);
        }
        // Byte-wise: `rest` may start with any character (a multi-byte one made
        // `split_at(1)` panic), and the offset may be huge (overflowed `base + off`).
        let (plus, digits) = match rest.as_bytes()[0] {
            b'+' => (true, &rest[1..]),
            b'-' => (false, &rest[1..]),
            _ => return None,
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let off: i32 = digits.parse().ok()?;
        let v = if plus { base.checked_add(off)? } else { base.checked_sub(off)? };
        (min..=max).contains(&v).then_some(v)
    };
    if let Some(rest) = bare.strip_prefix("RTMIN") {
        return rt(min, rest).ok_or_else(bad);
    }
    if let Some(rest) = bare.strip_prefix("RTMAX") {
        return rt(max, rest).ok_or_else(bad);
    }
    Err(bad())
}

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

fn is_uncatchable(sig: i32) -> bool {
    sig == libc::SIGKILL || sig == libc::SIGSTOP
}

/// glibc keeps the first real-time signals (32, 33) for its threads implementation (musl
/// 32-34); they have no name.
#[cfg(test)]
fn is_libc_reserved(sig: i32) -> bool {
    sig > 31 && sig < sigrt_range().0
}

/// Whether a signal guardian received is passed on to the provider: all but SIGCHLD (the
/// reaping's own wake-up). SIGTERM and the stop signal are also stop requests (supervise).
pub fn is_forwarded(sig: i32) -> bool {
    sig != libc::SIGCHLD && !is_uncatchable(sig)
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
/// SIGTERM and the stop signal are stop requests, so they are handled even when the caller
/// ignored them (a background job of a non-interactive shell starts with SIGINT and SIGQUIT
/// ignored): a blocked signal is queued even while its disposition is `SIG_IGN`, so the
/// signalfd still sees it. The stop signal is also reset to its default action when it was
/// ignored, because the provider inherits the disposition and must be able to hear it; an
/// ignored SIGTERM that is not the stop signal stays ignored for the provider.
pub fn setup(stop_signal: i32) -> Result<Setup, String> {
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
    let handled = handled(&|sig| sig != libc::SIGTERM && sig != stop_signal && ignored.contains(sig));
    let original_mask =
        sys::set_sigmask(libc::SIG_BLOCK, &handled).map_err(|e| format!("sigprocmask(SIG_BLOCK) failed: {e}"))?;
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

    #[test]
    fn parses_names_numbers_and_realtime() {
        assert_eq!(parse("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse("sigterm"), Ok(libc::SIGTERM));
        assert_eq!(parse("SIGINT"), Ok(libc::SIGINT));
        assert_eq!(parse("9"), Ok(9));
        assert_eq!(parse("RTMIN"), Ok(libc::SIGRTMIN()));
        assert_eq!(parse("SIGRTMIN+2"), Ok(libc::SIGRTMIN() + 2));
        assert_eq!(parse("RTMAX-1"), Ok(libc::SIGRTMAX() - 1));
        assert!(parse("0").is_err());
        assert!(parse("65").is_err());
        assert!(parse("TERMINATE").is_err());
        assert!(parse("RTMIN+99").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn names_round_trip() {
        for sig in 1..=libc::SIGRTMAX() {
            if is_libc_reserved(sig) {
                continue;
            }
            assert_eq!(parse(&name(sig)), Ok(sig), "{}", name(sig));
        }
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
    }

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
