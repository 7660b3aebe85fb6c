//! supervise::state::classify: what a signal guardian read means, decided from the signal
//! alone (its number, `si_code`, sender and the sentinel's mark), with no syscall: a stop
//! request, a kill request, the sentinel's refused suspend, a continue, a key the terminal
//! also sent the provider, a signal guardian raised itself, or one to forward. And the fold:
//! which deliveries of a stop request are one request.
//!
//! **The fold rule** (docs/contract.md, "Stop requests"). Deliveries of the same stop-request
//! signal (SIGTERM, or the stop signal) from the same sender, within [`FOLD_WINDOW`] of the
//! first delivery of that request, are one request; any later delivery, or one from another
//! sender or of the other signal, is a further request (kill now). The sender is `si_pid` of
//! the delivery, and for a signal the sentinel forwarded, the original sender it carries. A
//! signal the kernel generated (`SI_KERNEL`: a terminal's key) has no sender and is never
//! folded: one key press reaches guardian once (through the sentinel when there is one).
//!
//! Why this cannot merge two real requests: the kernel itself already keeps one pending
//! instance of a classic signal, so two deliveries by one sender that both arrive before
//! guardian reads the first are one signal whatever guardian does, and no sender can rely on
//! them being two. The window only stretches that merge over the delay between guardian's two
//! processes (the sentinel's hop) and between one sender's two `kill`s aimed at one intent
//! (`timeout`'s pid then group, systemd's walk of the control group, an outer guardian's
//! provider then its round). A second request is a decision made after seeing the first one
//! not end the tree, which takes longer than the window; a second sender is never folded.

use std::time::Duration;

use super::Config;
use crate::signals;

/// How long after the first delivery of a stop request further deliveries of the same signal
/// by the same sender are the same request. Long enough for the sentinel's hop and a sender's
/// second `kill` on a loaded machine (scheduling delays of tens of milliseconds); short
/// against a person or program deciding that the first request was not enough.
pub const FOLD_WINDOW: Duration = Duration::from_millis(250);

/// A signal guardian read from its signalfd, as the loop hands it to the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub signo: i32,
    /// `si_code` of the delivery (`SI_QUEUE` for the sentinel's forward).
    pub code: i32,
    /// `si_pid` (0 for the kernel, or a sender outside guardian's PID namespace).
    pub pid: u32,
    /// `si_int` (the sentinel's mark, `signals::forwarded_code`).
    pub value: i32,
    /// For SIGCONT: guardian's job holds the terminal's foreground now (the loop asks the
    /// terminal only for SIGCONT).
    pub foreground: bool,
}

/// Who sent a stop request, for the fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// A process (its pid; 0 for one outside guardian's PID namespace).
    Process(u32),
    /// The kernel (`SI_KERNEL`): never folded.
    Kernel,
}

/// What a received signal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meaning {
    /// SIGCHLD: the reaping that follows every wake-up handles it.
    Reap,
    /// A signal guardian caused itself (its own write past `RLIMIT_FSIZE` or into a closed
    /// pipe, its own CPU limit): never the owner's, never forwarded.
    SelfRaised,
    /// SIGTERM or the stop signal, from `sender`.
    StopRequest {
        signal: i32,
        sender: Sender,
    },
    /// `--kill-signal`.
    KillRequest,
    /// The sentinel's answer to a job-control stop it could not repeat (orphaned group).
    SuspendRefused,
    Continued {
        foreground: bool,
    },
    /// A key the terminal turned into a signal reached the provider directly too (it shares
    /// guardian's group): not forwarded again.
    TerminalKey,
    Forward(i32),
    /// Uncatchable or unknown: nothing to do.
    Ignore,
}

/// What `r` means for a guardian configured as `cfg`.
pub fn classify(cfg: &Config, r: &Received) -> Meaning {
    let sig = r.signo;
    if sig == libc::SIGCHLD {
        return Meaning::Reap;
    }
    // The sentinel's forward carries the original si_code; the sender is si_pid either way.
    let forwarded = signals::forwarded_code(r.code, r.value);
    let code = forwarded.unwrap_or(r.code);
    if self_raised(cfg, sig, code, r.pid) {
        return Meaning::SelfRaised;
    }
    if cfg.kill_signal == Some(sig) {
        return Meaning::KillRequest;
    }
    if sig == libc::SIGTERM || sig == cfg.stop_signal {
        let sender = if code == libc::SI_KERNEL { Sender::Kernel } else { Sender::Process(r.pid) };
        return Meaning::StopRequest { signal: sig, sender };
    }
    if sig == libc::SIGCONT && forwarded.is_none() && r.code == libc::SI_QUEUE && cfg.sentinel == Some(r.pid) {
        return Meaning::SuspendRefused;
    }
    if sig == libc::SIGCONT {
        return Meaning::Continued { foreground: r.foreground };
    }
    if code == libc::SI_KERNEL && forwarded.is_none() && cfg.provider_in_guardians_group {
        return Meaning::TerminalKey;
    }
    if signals::is_forwarded(sig) { Meaning::Forward(sig) } else { Meaning::Ignore }
}

/// A signal guardian raised itself: one it sent itself (the kernel sends the SIGXFSZ of a
/// write past `RLIMIT_FSIZE` and the SIGPIPE of a write to a closed pipe as `SI_USER` from the
/// writer; `raise` is `SI_TKILL`), directly or (it cannot happen, but the rule is the same)
/// through the sentinel; or a resource-limit signal the kernel raises about the process that
/// receives it (SIGXCPU at `RLIMIT_CPU`, SIGXFSZ; `SI_KERNEL`). guardian sends none of these
/// to itself on purpose, so forwarding one would make the provider pay for guardian's own
/// failure (issue 29.7); the failed write is reported where it failed.
fn self_raised(cfg: &Config, sig: i32, code: i32, pid: u32) -> bool {
    let own = pid == cfg.me && matches!(code, libc::SI_USER | libc::SI_TKILL);
    own || (code == libc::SI_KERNEL && matches!(sig, libc::SIGXCPU | libc::SIGXFSZ))
}

/// The first delivery of the current stop request: which signal, from whom, when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub signal: i32,
    pub sender: Sender,
    pub at: Duration,
}

impl Request {
    /// Whether a delivery of `signal` from `sender` at `now` is this same request.
    pub fn folds(&self, signal: i32, sender: Sender, now: Duration) -> bool {
        self.signal == signal
            && self.sender == sender
            && sender != Sender::Kernel
            && now.saturating_sub(self.at) <= FOLD_WINDOW
    }
}
