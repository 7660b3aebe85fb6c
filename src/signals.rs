//! signals: signal names and numbers, `StopSignal` and the parsing of `--stop-signal`, and
//! which signals are forwarded, and where to (`Target`, what `--forward-to` parses into). Pure (no syscall): xtask shares this file; start-up's signal
//! step, which blocks them, is `signal_step.rs`.

/// Where a signal to the provider goes: the value of `--forward-to` and the supervisor's
/// `Config::forward_to`, one type for both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The provider alone (through its pidfd).
    Provider,
    /// The provider's process group.
    Group,
}

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

/// The stop signal: one that can end a process and that guardian gives no other meaning, so
/// it is never SIGKILL (what the grace ends in), SIGCONT or a job-control stop, or SIGCHLD
/// (guardian's own wake-up), and a stopped process always needs the SIGCONT that follows it.
/// Only [`StopSignal::parse`] (the parser's `--stop-signal`, and its default from the option
/// table) makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopSignal(i32);

impl StopSignal {
    /// SIGTERM, the table's default stop signal, as a constant (`cli::fields` holds the
    /// defaults at compile time; its unit test checks this one against the table's "TERM").
    pub const TERM: StopSignal = StopSignal(libc::SIGTERM);

    /// A signal name or number ([`parse`]) that may be the stop signal.
    pub fn parse(text: &str) -> Result<StopSignal, String> {
        let sig = parse(text)?;
        match sig {
            libc::SIGKILL => Err(
                "SIGKILL cannot be the stop signal (nor the kill signal): it is what the grace period ends in and what a kill request sends; use --grace 0 to send it at once, or --kill-signal RTMAX to ask for it"
                    .into(),
            ),
            libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU | libc::SIGCONT => Err(format!(
                "{} cannot be the stop signal (nor the kill signal): it stops or continues a process instead of ending it (job control); use TERM, INT, QUIT, HUP or USR1 (RTMAX for --kill-signal)",
                name(sig)
            )),
            libc::SIGCHLD => Err(
                "SIGCHLD cannot be the stop signal (nor the kill signal): guardian reads it to reap; use TERM, INT, QUIT, HUP or USR1 (RTMAX for --kill-signal)".into(),
            ),
            _ => Ok(StopSignal(sig)),
        }
    }

    pub fn get(self) -> i32 {
        self.0
    }
}

/// SIGKILL and SIGSTOP: no process can catch or block them.
pub fn is_uncatchable(sig: i32) -> bool {
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

/// The sentinel's mark on a signal it passes on to guardian proper (`rt_sigqueueinfo` with
/// `si_code` `SI_QUEUE`, `si_pid` the original sender, and this in `si_int`): the high half
/// says "forwarded by the sentinel", the low half carries the original `si_code` (as an
/// `i16`: `SI_USER` 0, `SI_KERNEL` 0x80, `SI_QUEUE` -1, `SI_TKILL` -6), so that guardian
/// proper classifies the delivery as if it had received it itself.
const FORWARD_MARK: i32 = 0x4744_0000;
const FORWARD_MASK: i32 = 0x7fff_0000;

/// The `si_int` the sentinel queues with a signal it forwards whose own `si_code` was `code`.
pub fn forward_value(code: i32) -> i32 {
    FORWARD_MARK | i32::from(code as i16 as u16)
}

/// The original `si_code` of a signal the sentinel forwarded (`code` `SI_QUEUE` and `value`
/// its mark), or `None` for a signal that came any other way.
pub fn forwarded_code(code: i32, value: i32) -> Option<i32> {
    (code == libc::SI_QUEUE && value & FORWARD_MASK == FORWARD_MARK).then(|| i32::from(value as u16 as i16))
}

/// `--kill-signal`: receiving it is a kill request (SIGKILL to the tree at once). It was
/// parsed with the stop signal's rules (not KILL, STOP, CONT, CHLD or a job-control stop);
/// it must also differ from SIGTERM and the stop signal, which are stop requests. The error
/// is one line naming the fix.
pub fn check_kill_signal(kill: i32, stop: StopSignal) -> Result<i32, String> {
    if kill == libc::SIGTERM || kill == stop.get() {
        return Err(format!(
            "--kill-signal {}: it is also a stop request ({}); choose a signal of its own for the kill request, such as RTMAX (what the drivers use)",
            name(kill),
            if kill == stop.get() { "the stop signal" } else { "SIGTERM always is" }
        ));
    }
    Ok(kill)
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
    fn the_sentinels_mark_carries_the_original_code_and_nothing_else_has_it() {
        for code in [libc::SI_USER, libc::SI_KERNEL, libc::SI_QUEUE, libc::SI_TKILL, -7, 3] {
            assert_eq!(forwarded_code(libc::SI_QUEUE, forward_value(code)), Some(code), "{code}");
            assert_eq!(forwarded_code(libc::SI_USER, forward_value(code)), None, "only SI_QUEUE carries it");
        }
        assert_eq!(forwarded_code(libc::SI_QUEUE, 0), None, "a plain sigqueue (the refused suspend)");
        assert_eq!(forwarded_code(libc::SI_QUEUE, 42), None);
    }

    #[test]
    fn the_kill_signal_is_never_a_stop_request() {
        let rtmax = libc::SIGRTMAX();
        let term = StopSignal::parse("TERM").unwrap();
        assert_eq!(check_kill_signal(rtmax, term), Ok(rtmax));
        let int = StopSignal::parse("INT").unwrap();
        for (kill, stop) in [(libc::SIGTERM, term), (libc::SIGTERM, int), (libc::SIGINT, int)] {
            let e = check_kill_signal(kill, stop).expect_err("a stop request");
            assert!(e.contains("--kill-signal") && e.contains("RTMAX") && !e.contains('\n'), "{e}");
        }
        assert_eq!(check_kill_signal(libc::SIGUSR1, int), Ok(libc::SIGUSR1));
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
}
