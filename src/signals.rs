//! signals: signal names and numbers, parsing of `--stop-signal`, and the set of signals
//! guardian handles (blocks and reads from its signalfd) versus leaves alone.

use crate::sys;

const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// Synchronous fault signals: left at their default action, never forwarded (as tini).
const FAULTS: &[i32] =
    &[libc::SIGILL, libc::SIGTRAP, libc::SIGABRT, libc::SIGBUS, libc::SIGFPE, libc::SIGSEGV, libc::SIGSYS];

/// "SIGTERM", "SIGRTMIN+3", or "SIG42" for anything unnamed.
pub fn name(sig: i32) -> String {
    if let Some((n, _)) = NAMES.iter().find(|(_, s)| *s == sig) {
        return format!("SIG{n}");
    }
    let (min, max) = sys::sigrt_range();
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
            sys::sigrt_range().1
        )
    };
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        let (_, max) = sys::sigrt_range();
        return if (1..=max).contains(&n) { Ok(n) } else { Err(bad()) };
    }
    let upper = t.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some((_, s)) = NAMES.iter().find(|(n, _)| *n == bare) {
        return Ok(*s);
    }
    let (min, max) = sys::sigrt_range();
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

/// Every signal guardian blocks and reads from its signalfd: all catchable signals except
/// the synchronous faults, and except those ignored when guardian started (they stay
/// ignored for guardian and, inherited, for the provider). SIGCHLD is always handled, and so
/// is SIGPIPE: the Rust runtime sets it to SIG_IGN before `main`, so its original disposition
/// is unknowable; like `std::process::Command`, guardian gives the provider SIG_DFL.
pub fn handled(ignored_at_start: &dyn Fn(i32) -> bool) -> sys::SigSet {
    let mut set = sys::SigSet::empty();
    let (_, max) = sys::sigrt_range();
    for sig in 1..=max {
        if is_uncatchable_or_fault(sig) || is_libc_reserved(sig) {
            continue;
        }
        if sig != libc::SIGCHLD && sig != libc::SIGPIPE && ignored_at_start(sig) {
            continue;
        }
        set.add(sig);
    }
    set
}

fn is_uncatchable_or_fault(sig: i32) -> bool {
    sig == libc::SIGKILL || sig == libc::SIGSTOP || FAULTS.contains(&sig)
}

/// glibc keeps the first real-time signals (32, 33) for its threads implementation.
fn is_libc_reserved(sig: i32) -> bool {
    sig > 31 && sig < sys::sigrt_range().0
}

/// Whether a signal guardian received is passed on to the provider.
pub fn is_forwarded(sig: i32) -> bool {
    sig != libc::SIGCHLD && !is_uncatchable_or_fault(sig)
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
    fn handled_set_excludes_faults_and_ignored() {
        let set = handled(&|s| s == libc::SIGINT || s == libc::SIGCHLD);
        assert!(set.contains(libc::SIGTERM));
        assert!(set.contains(libc::SIGCHLD), "SIGCHLD is always handled");
        assert!(!set.contains(libc::SIGINT), "ignored at start stays ignored");
        assert!(!set.contains(libc::SIGSEGV));
        let set = handled(&|s| s == libc::SIGPIPE);
        assert!(set.contains(libc::SIGPIPE), "SIGPIPE's ignored state is the Rust runtime's, not the caller's");
        assert!(!is_forwarded(libc::SIGCHLD));
        assert!(is_forwarded(libc::SIGWINCH));
    }
}
