//! supervise::state::vocab: the state machine's words: what the loop tells it (`Happened`),
//! what it tells the loop to do (`Action`), and the values they carry (`StopReason`,
//! `Target`, who holds the terminal).

use super::Received;
use crate::exit::Outcome;
use crate::status::WaitStatus;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// SIGTERM or the configured stop signal (the owner's shutdown request).
    Signal,
    Timeout,
    ParentDied,
    /// The provider exited on its own.
    ProviderExit,
    /// `--kill-signal`: SIGKILL at once.
    KillRequest,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Signal => "signal",
            StopReason::Timeout => "timeout",
            StopReason::ParentDied => "parent-died",
            StopReason::ProviderExit => "exit",
            StopReason::KillRequest => "kill-request",
        }
    }
}

/// Who owns the foreground of guardian's controlling terminal (`/dev/tty`, whatever fds 0-2
/// are), as far as guardian is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    /// guardian has no controlling terminal: it never touches one.
    None,
    /// guardian's own group may hold it (guardian never handed it over, or took it back).
    Guardian,
    /// guardian handed it to the provider's group: taken back at the provider's stop or exit.
    Provider,
}

/// Which process group holds the terminal's foreground when the provider stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreground {
    Provider,
    Guardian,
    /// Another group (guardian runs in the background), or no terminal at all.
    Other,
}

/// Where a signal to the provider goes (`--forward-to` parses into it: it lives below the
/// parser, in `signals`).
pub use crate::signals::Target;

/// What the loop observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Happened {
    /// A signal read from the signalfd (the state machine classifies it).
    Signal(Received),
    ParentDied,
    /// One reap pass: the provider's status if it was reaped now, how many descendants were
    /// reaped, whether `waitpid` ended with ECHILD, and the leaf's `populated` state if read
    /// (`Some(true)`: `populated 0`).
    Reaped {
        provider: Option<WaitStatus>,
        descendants: u64,
        echild: bool,
        leaf_empty: Option<bool>,
    },
    /// `waitid(WSTOPPED)` saw the provider stop with `signal`.
    ProviderStopped {
        signal: i32,
        foreground: Foreground,
    },
    /// `waitid(WCONTINUED)` saw the provider continue.
    ProviderContinued,
    /// guardian's own stop did not happen (its group is orphaned, or the signal is ignored):
    /// there is no job control to hand the stop to.
    SuspendRefused,
    /// A round ran; `chase`: it signalled newcomers found by a /proc scan, so the next
    /// round runs at once.
    RoundDone {
        chase: bool,
    },
    /// Time passed: deadlines are checked.
    Tick,
}

/// What the loop must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Pass a received signal on to the provider or its group (`--forward-to`).
    Forward(i32, Target),
    /// The stop signal, then SIGCONT, to the provider (or, in blind mode with `--forward-to
    /// group`, its group); `reason` names it in the `signal` event (`StopReason::Signal`: the
    /// owner's request, "forwarded").
    StopProvider {
        reason: StopReason,
        to: Target,
    },
    /// The owner's stop request with `--forward-to group`: the stop signal to the rest of the
    /// provider's group, one verified member at a time (recorded, so the rounds after the
    /// provider's exit do not repeat it).
    StopGroupMembers,
    /// SIGKILL to the provider, if it lives.
    KillProvider,
    /// A round over the descendants: the stop signal (then SIGCONT), or SIGKILL; with a leaf,
    /// `outside_leaf` also scans /proc for descendants that left it.
    Round {
        kill: bool,
        outside_leaf: bool,
    },
    /// The `stopping` event.
    EmitStopping {
        reason: &'static str,
        grace_ms: u64,
    },
    /// The `stopped` / `continued` events about the provider.
    EmitStopped {
        signal: i32,
    },
    EmitContinued,
    /// The terminal's foreground back to guardian's group, if the provider's group holds it.
    TakeTerminal,
    /// The terminal's foreground to the provider's group, if guardian's group holds it (the
    /// loop checks: guardian never sets the foreground from the background).
    GiveTerminal,
    /// SIGCONT to the provider's process group (what the shell's `fg`/`bg` would have sent).
    ContinueProviderGroup,
    /// Stop guardian's process group with this signal (job control: the shell's job is that
    /// group, guardian's parent included when guardian does not lead it); report
    /// `SuspendRefused` if the kernel did not stop guardian.
    SuspendSelf(i32),
    /// A stop request's further delivery (same signal, same sender, within the fold
    /// window): the same request, nothing to do but say so in the log.
    Folded {
        signal: i32,
    },
    /// A signal guardian raised itself (`classify::self_raised`): dropped, and said in the log.
    DiscardOwn(i32),
    /// Emit `released`, remove the leaf, close events; guardian ends with `outcome`.
    Release {
        outcome: Outcome,
    },
    /// Descendants remain that cannot be reached: emit `error`, exit 125.
    Abandon,
}
