//! exit: guardian's exit vocabulary, the one place that names its statuses, and guardian's
//! one failure type. The statuses are those of coreutils `timeout` and the shells:
//!
//! | status | meaning |
//! |---|---|
//! | the provider's code | the provider exited |
//! | 128+N | signal N killed the provider |
//! | 124 | `--timeout` fired |
//! | 125 | guardian itself failed (bad option, setup, sweep, a tree it could not stop) |
//! | 126 | COMMAND was found but could not be executed |
//! | 127 | COMMAND was not found |
//!
//! A failure travels as a [`Failure`] to `main`, which prints its message and exits with its
//! status; nothing else in guardian calls `process::exit`.

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

/// guardian's exit status once the tree is gone: 124 after a timeout, else the provider's
/// code or 128+N when signal N killed it (125 for a status that is neither, which the kernel
/// does not report for a reaped child).
pub fn for_provider(status: WaitStatus, timed_out: bool) -> i32 {
    if timed_out {
        return TIMEOUT;
    }
    match (status.exit_code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => SIGNAL_BASE + s,
        (None, None) => GUARDIAN,
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

    #[test]
    fn provider_statuses() {
        assert_eq!(for_provider(exited(0), false), 0);
        assert_eq!(for_provider(exited(42), false), 42);
        assert_eq!(for_provider(WaitStatus(libc::SIGKILL), false), 137);
        assert_eq!(for_provider(WaitStatus(libc::SIGTERM), false), 143);
        assert_eq!(for_provider(exited(0), true), 124, "a timeout is 124 whatever the provider said");
    }

    #[test]
    fn failures_carry_their_status() {
        assert_eq!(Failure::guardian("x").status, 125);
        assert_eq!(Failure::not_executable("x").status, 126);
        assert_eq!(Failure::not_found("x").status, 127);
    }
}
