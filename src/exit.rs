//! exit: guardian's exit vocabulary, the one place that names its statuses, and guardian's
//! one failure type. The statuses are those of coreutils `timeout` and the shells:
//!
//! | status | meaning |
//! |---|---|
//! | the provider's code | the provider exited |
//! | 128+N | signal N killed the provider: guardian then dies of N itself (see below) |
//! | 124 | `--timeout` fired |
//! | 125 | guardian itself failed (bad option, setup, sweep, a tree it could not stop) |
//! | 126 | COMMAND was found but could not be executed |
//! | 127 | COMMAND was not found |
//!
//! A failure travels as a [`Failure`] to `main`, which prints its message and exits with its
//! status; nothing else in guardian calls `process::exit`.
//!
//! **Ending like the provider.** When signal N killed the provider, guardian (unless it is
//! PID 1) ends by dying of N itself ([`end`]), as sudo and coreutils `timeout` do: its parent
//! sees what it would have seen without guardian (a shell's `$?` is still 128+N; Python's
//! `returncode` is -N; Node's `exit` gives the signal; systemd does not count a SIGTERM of a
//! stopped unit as a failure). Core dumps are off for that death. PID 1 exits 128+N (the
//! kernel ignores a signal PID 1 has no handler for). Should the signal not end guardian,
//! it logs why and exits 128+N. The `released` event's `status` stays 128+N; a timeout stays
//! 124.

use crate::status::WaitStatus;

/// `--timeout` fired (as coreutils `timeout`).
pub const TIMEOUT: i32 = 124;
/// guardian's own failure.
pub const GUARDIAN: i32 = 125;
/// COMMAND exists but could not be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// COMMAND was not found.
pub const NOT_FOUND: i32 = 127;
/// Added to the number of the signal that killed the provider.
const SIGNAL_BASE: i32 = 128;

/// How the supervision ended, as the supervisor decided it: the value the exit path reads
/// (no global carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The provider exited with this code.
    Exited(i32),
    /// Signal N killed the provider: guardian dies of N too ([`end`]), status 128+N.
    Died(i32),
    /// `--timeout` fired: 124, whatever the provider said.
    TimedOut,
    /// Processes remained after SIGKILL that guardian could not reach: 125.
    Abandoned,
}

impl Outcome {
    /// The outcome once the tree is gone: a timeout, else the provider's (a status that is
    /// neither an exit nor a death, which the kernel does not report for a reaped child, is
    /// guardian's own failure).
    pub fn of(status: WaitStatus, timed_out: bool) -> Outcome {
        if timed_out {
            return Outcome::TimedOut;
        }
        match (status.exit_code(), status.signal()) {
            (Some(c), _) => Outcome::Exited(c),
            (None, Some(s)) => Outcome::Died(s),
            (None, None) => Outcome::Exited(GUARDIAN),
        }
    }

    /// guardian's exit status (the `released` event's `status`): the provider's code, 128+N,
    /// 124 or 125.
    pub fn status(self) -> i32 {
        match self {
            Outcome::Exited(c) => c,
            Outcome::Died(s) => SIGNAL_BASE + s,
            Outcome::TimedOut => TIMEOUT,
            Outcome::Abandoned => GUARDIAN,
        }
    }

    /// How guardian ends for this outcome: a provider killed by signal N is a death by N,
    /// except for PID 1 (the kernel ignores a signal PID 1 has no handler for); anything else
    /// is an exit with [`Outcome::status`].
    pub fn ending(self, pid1: bool) -> Ending {
        match self {
            Outcome::Died(s) if !pid1 => Ending::Signal(s),
            other => Ending::Exit(other.status()),
        }
    }
}

/// How a process ends: with an exit status, or by dying of a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Exit(i32),
    Signal(i32),
}

/// guardian's one way out, called by `main` with its ending: exits with a status, or dies of
/// the signal that killed the provider (see the module header and [`Outcome::ending`]).
pub fn end(end: Ending) -> ! {
    crate::log::finish();
    match end {
        Ending::Exit(code) => std::process::exit(code),
        Ending::Signal(sig) => {
            let why = crate::sys::die_of_signal(sig);
            crate::log::warn!(
                "could not end by signal {} as the provider did ({why}); exiting {} instead",
                crate::signals::name(sig),
                SIGNAL_BASE + sig
            );
            std::process::exit(SIGNAL_BASE + sig)
        }
    }
}

/// Why guardian ends with one of its own statuses (125, 126, 127): the status and one line
/// naming the problem and the fix. `main` prints the line and exits with the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub status: i32,
    pub message: String,
}

impl Failure {
    /// guardian could not do its own part: a bad option, a refused setup step, a tree it
    /// could not stop (125).
    pub fn guardian(message: impl Into<String>) -> Failure {
        Failure { status: GUARDIAN, message: message.into() }
    }

    /// COMMAND was found but could not be executed (126).
    pub fn not_executable(message: impl Into<String>) -> Failure {
        Failure { status: NOT_EXECUTABLE, message: message.into() }
    }

    /// COMMAND was not found (127).
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure { status: NOT_FOUND, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> WaitStatus {
        WaitStatus(code << 8)
    }

    fn status_of(status: WaitStatus, timed_out: bool) -> i32 {
        Outcome::of(status, timed_out).status()
    }

    #[test]
    fn provider_statuses() {
        assert_eq!(status_of(exited(0), false), 0);
        assert_eq!(status_of(exited(42), false), 42);
        assert_eq!(status_of(WaitStatus(libc::SIGKILL), false), 137);
        assert_eq!(status_of(WaitStatus(libc::SIGTERM), false), 143);
        assert_eq!(status_of(exited(0), true), 124, "a timeout is 124 whatever the provider said");
        assert_eq!(Outcome::Abandoned.status(), 125);
    }

    #[test]
    fn a_provider_killed_by_a_signal_is_a_death_by_it_except_for_pid_1() {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGKILL, libc::SIGSEGV, libc::SIGABRT, 34, 64] {
            assert_eq!(Outcome::Died(sig).ending(false), Ending::Signal(sig), "signal {sig}");
            assert_eq!(Outcome::Died(sig).ending(true), Ending::Exit(128 + sig), "PID 1, signal {sig}");
        }
        // A provider that exited 143 itself, a timeout, guardian's own failure: exits.
        assert_eq!(Outcome::Exited(143).ending(false), Ending::Exit(143));
        assert_eq!(Outcome::of(WaitStatus(libc::SIGTERM), true).ending(false), Ending::Exit(124));
        assert_eq!(Outcome::Abandoned.ending(false), Ending::Exit(125));
        assert_eq!(Outcome::Exited(0).ending(false), Ending::Exit(0));
    }

    #[test]
    fn failures_carry_their_status() {
        assert_eq!(Failure::guardian("x").status, 125);
        assert_eq!(Failure::not_executable("x").status, 126);
        assert_eq!(Failure::not_found("x").status, 127);
    }
}
