//! supervise::state: guardian's phases and the decisions between them, as a pure function.
//! `State::on` takes what happened (a signal read, a reap, a stop of the provider, the clock)
//! and returns what to do (signal, run a round, hand over the terminal, release); the loop in
//! `supervise/mod.rs` turns kernel events into `Happened` values and carries the `Action`s
//! out. Nothing here makes a syscall or reads the clock, so every transition is unit-tested
//! without processes.
//!
//! The grace period is enforced here: the deadline is set once, when the stop begins
//! (`Phase::Stopping` / `Phase::Draining`), and the tree is escalated to SIGKILL when it passes.
//!
//! So is the meaning of every signal guardian reads (`classify.rs`): a stop request, a kill
//! request, a forward, the sentinel's refused suspend, a signal guardian raised itself; and
//! which deliveries of a stop request are one request (the fold, `classify.rs`'s header).
//! The loop only reads the signalfd.

use std::time::Duration;

use crate::exit::Outcome;
use crate::status::WaitStatus;

/// How long to keep waiting for ECHILD after SIGKILL, and after the last progress (a
/// descendant killed or reaped), before giving up honestly (exit 125, an `error` event
/// naming what remains): at least this, or the grace period if longer. Measured from the last
/// progress, so a tree that is still being killed (a fork storm that starves guardian of CPU)
/// is never abandoned while guardian can still reach it.
pub const MIN_ABANDON_WAIT: Duration = Duration::from_secs(5);
/// First and largest interval between rescans while descendants are being stopped.
pub const RESCAN_FIRST: Duration = Duration::from_millis(10);
pub const RESCAN_MAX: Duration = Duration::from_millis(250);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The provider lives and no stop was asked for.
    Running,
    /// The provider is stopped (SIGSTOP from outside, or a job-control stop without a
    /// terminal hand-off): reported, waited out; guardian itself keeps running.
    ProviderStopped { signal: i32 },
    /// The provider stopped for job control: guardian took the terminal back (if the
    /// provider's group held it: `took_terminal`) and stopped its own process group with the
    /// same signal, so the shell sees its job stop; SIGCONT wakes it.
    GuardianSuspended { signal: i32, took_terminal: bool },
    /// A stop was requested while the provider lives; at `deadline` the tree gets SIGKILL.
    Stopping { reason: StopReason, deadline: Duration },
    /// The provider was reaped; descendants get the stop signal in rounds until `deadline`.
    Draining { reason: StopReason, deadline: Duration },
    /// The provider was reaped and `--wait-descendants` holds: only reaping, no signals.
    Reaping,
    /// SIGKILL went to the tree at `since`; waiting for ECHILD until `abandon_at` (moved by
    /// progress).
    Escalated { reason: StopReason, since: Duration, abandon_at: Duration },
    /// Released (the provider's outcome) or abandoned: the loop returns `outcome`.
    Done { outcome: Outcome },
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Running => "running",
            Phase::ProviderStopped { .. } => "provider-stopped",
            Phase::GuardianSuspended { .. } => "guardian-suspended",
            Phase::Stopping { .. } => "stopping",
            Phase::Draining { .. } => "draining",
            Phase::Reaping => "reaping",
            Phase::Escalated { .. } => "escalated",
            Phase::Done { outcome: Outcome::Abandoned } => "abandoned",
            Phase::Done { .. } => "released",
        }
    }

    /// No stop has begun (the `--timeout` clock runs, a stop request is the first one).
    fn before_stop(self) -> bool {
        matches!(
            self,
            Phase::Running | Phase::ProviderStopped { .. } | Phase::GuardianSuspended { .. } | Phase::Reaping
        )
    }
}

pub struct Config {
    /// `--forward-to`: where forwarded signals go.
    pub forward_to: Target,
    /// `--stop-signal`: receiving it (or SIGTERM) is a stop request.
    pub stop_signal: i32,
    /// `--kill-signal`: receiving it is a kill request.
    pub kill_signal: Option<i32>,
    /// guardian's own pid (guardian proper's, behind a sentinel): a signal it sent is its own.
    pub me: u32,
    /// The sentinel's pid, when guardian runs behind one.
    pub sentinel: Option<u32>,
    /// The provider shares guardian's job's process group (guardian's group is outside its PID
    /// namespace): a terminal's key reaches the provider directly.
    pub provider_in_guardians_group: bool,
    /// Rounds reach every descendant (not blind mode): guardian's own stop signal then goes to
    /// the provider alone, since the group's other members hear it from the rounds.
    pub rounds_reach_descendants: bool,
    /// As PID 1 without the namespace's own `/proc`: the first stop round is one `kill(-1)`,
    /// which reaches the unreaped provider too, so guardian's own stop (a timeout, parent
    /// death) sends it nothing apart (it would hear the stop signal twice).
    pub stop_round_reaches_provider: bool,
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub wait_descendants: bool,
    /// When the provider started (the `--timeout` clock).
    pub started: Duration,
    /// guardian may stop itself for job control (it is not PID 1, whose stop signals the
    /// kernel discards).
    pub job_control: bool,
    /// fd 0 is the controlling terminal: the provider is an interactive command and gets the
    /// terminal whenever guardian's group gets the foreground (`fg`). Otherwise (a pipe) it
    /// gets it only when it reads or sets the terminal: the terminal may be a driver's that
    /// shares guardian's group.
    pub stdin_terminal: bool,
}

struct Rescan {
    at: Duration,
    step: Duration,
}

pub struct State {
    cfg: Config,
    phase: Phase,
    /// The provider's status and when it was reaped.
    exit: Option<(WaitStatus, Duration)>,
    /// The last reap ended with ECHILD: the kernel's proof that guardian has no children.
    echild: bool,
    /// The leaf said `populated 0` (true without a leaf): the second proof in cgroup mode.
    leaf_empty: bool,
    /// Rounds run while this is armed (descendants are being stopped or killed).
    rescan: Option<Rescan>,
    terminal: Terminal,
    /// The first delivery of the last stop request (the fold).
    request: Option<Request>,
    /// A kill request came: the outcome is the provider's, even after a timeout.
    kill_requested: bool,
}

impl State {
    pub fn new(cfg: Config, terminal: Terminal, has_leaf: bool) -> State {
        State {
            cfg,
            phase: Phase::Running,
            exit: None,
            echild: false,
            leaf_empty: !has_leaf,
            rescan: None,
            terminal,
            request: None,
            kill_requested: false,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn provider_exited(&self) -> bool {
        self.exit.is_some()
    }

    /// When the provider was reaped (for `teardown_ms`).
    pub fn exited_at(&self) -> Option<Duration> {
        self.exit.map(|(_, at)| at)
    }

    pub fn leaf_empty(&self) -> bool {
        self.leaf_empty
    }

    /// The earliest time something is due: `--timeout` (before a stop), the grace deadline,
    /// the next rescan, the abandon deadline. `None`: wait for the kernel only.
    pub fn next_deadline(&self) -> Option<Duration> {
        let timeout = self.cfg.timeout.filter(|_| self.phase.before_stop()).map(|t| self.cfg.started + t);
        let phase = match self.phase {
            Phase::Stopping { deadline, .. } | Phase::Draining { deadline, .. } => Some(deadline),
            Phase::Escalated { abandon_at, .. } => Some(abandon_at),
            _ => None,
        };
        [timeout, phase, self.rescan.as_ref().map(|r| r.at)].into_iter().flatten().min()
    }

    /// The transition function.
    pub fn on(&mut self, what: Happened, now: Duration) -> Vec<Action> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done { .. }) {
            return out;
        }
        match what {
            Happened::Signal(received) => self.received(&received, now, &mut out),
            Happened::ParentDied => self.begin_stop(StopReason::ParentDied, now, &mut out),
            Happened::Reaped { provider, descendants, echild, leaf_empty } => {
                self.echild = echild;
                if let Some(empty) = leaf_empty {
                    let emptied = empty && !self.leaf_empty;
                    self.leaf_empty = empty;
                    // The leaf's last member is gone while guardian still has children:
                    // descendants that left the leaf were reparented to guardian as their
                    // ancestors in the leaf died, and the rounds, which looked only at the
                    // leaf until now, reach them at once.
                    if emptied && !echild && self.rescan.is_some() {
                        let kill = matches!(self.phase, Phase::Escalated { .. });
                        out.push(Action::Round { kill, outside_leaf: true });
                    }
                }
                if descendants > 0 {
                    self.progress(now);
                }
                if let Some(status) = provider {
                    self.provider_exit(status, now, &mut out);
                }
            }
            Happened::ProviderStopped { signal, foreground } => self.provider_stopped(signal, foreground, &mut out),
            Happened::ProviderContinued => {
                if matches!(self.phase, Phase::ProviderStopped { .. } | Phase::GuardianSuspended { .. }) {
                    self.phase = Phase::Running;
                }
                out.push(Action::EmitContinued);
            }
            Happened::SuspendRefused => self.suspend_refused(&mut out),
            Happened::RoundDone { chase } => {
                // A round that found newcomers is followed by another at once: a tree that
                // keeps forking (or hopping to new pids) is chased at scan speed. Backing off
                // between such rounds let every round miss the child born after its scan.
                if chase {
                    if let Some(r) = self.rescan.as_mut() {
                        *r = Rescan { at: now, step: RESCAN_FIRST };
                    }
                    self.progress(now);
                }
            }
            Happened::Tick => self.tick(now, &mut out),
        }
        self.check_release(&mut out);
        out
    }

    /// A signal guardian read: classified (`classify.rs`), then acted on.
    fn received(&mut self, r: &Received, now: Duration, out: &mut Vec<Action>) {
        match classify(&self.cfg, r) {
            Meaning::StopRequest { signal, sender } => self.stop_request(signal, sender, now, out),
            Meaning::KillRequest => self.kill_request(now, out),
            Meaning::SuspendRefused => self.suspend_refused(out),
            Meaning::Continued { foreground } => self.continued(foreground, out),
            Meaning::Forward(sig) => out.push(Action::Forward(sig, self.cfg.forward_to)),
            Meaning::SelfRaised => out.push(Action::DiscardOwn(r.signo)),
            Meaning::Reap | Meaning::TerminalKey | Meaning::Ignore => {}
        }
    }

    /// SIGTERM or the stop signal: the first one starts the bounded stop; a delivery of the
    /// same signal from the same sender within the fold window is that same request (nothing
    /// happens); any other is a further request, which ends the grace at once (kill now).
    fn stop_request(&mut self, signal: i32, sender: Sender, now: Duration, out: &mut Vec<Action>) {
        if !self.phase.before_stop() && self.request.is_some_and(|r| r.folds(signal, sender, now)) {
            out.push(Action::Folded { signal });
            return;
        }
        self.request = Some(Request { signal, sender, at: now });
        match self.phase {
            Phase::Stopping { reason, .. } | Phase::Draining { reason, .. } => {
                out.push(Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
                self.escalate(reason, now, out);
            }
            Phase::Escalated { .. } => {
                out.push(Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
                out.push(Action::KillProvider);
                out.push(Action::Round { kill: true, outside_leaf: true });
            }
            _ => self.begin_stop(StopReason::Signal, now, out),
        }
    }

    /// `--kill-signal`: SIGKILL to the provider and the tree at once, no stop signal, no grace;
    /// guardian ends with the provider's status (it died of SIGKILL, unless it had exited).
    fn kill_request(&mut self, now: Duration, out: &mut Vec<Action>) {
        self.kill_requested = true;
        out.push(Action::EmitStopping { reason: "kill-request", grace_ms: 0 });
        match self.phase {
            Phase::Escalated { .. } => {
                out.push(Action::KillProvider);
                out.push(Action::Round { kill: true, outside_leaf: true });
            }
            _ => self.escalate(StopReason::KillRequest, now, out),
        }
    }

    fn suspend_refused(&mut self, out: &mut Vec<Action>) {
        if let Phase::GuardianSuspended { signal, took_terminal } = self.phase {
            if took_terminal {
                // No job control above guardian (an orphaned group): ^Z means nothing
                // here. The terminal guardian took at this stop goes back, and the
                // provider goes on.
                self.phase = Phase::Running;
                self.give_terminal(out);
                out.push(Action::ContinueProviderGroup);
            } else {
                // guardian never held the terminal (it runs in the background, the
                // shell has it): taking it would steal the shell's input. The provider
                // stays stopped, reported, as a background reader of the terminal.
                self.phase = Phase::ProviderStopped { signal };
            }
        }
    }

    /// The first stop (a stop request, `--timeout`, parent death); later ones change nothing.
    fn begin_stop(&mut self, reason: StopReason, now: Duration, out: &mut Vec<Action>) {
        if !self.phase.before_stop() {
            return;
        }
        let deadline = now + self.cfg.grace;
        out.push(Action::EmitStopping { reason: reason.name(), grace_ms: self.cfg.grace.as_millis() as u64 });
        if self.exit.is_some() {
            self.phase = Phase::Draining { reason, deadline };
            self.start_rounds(now, out);
            return;
        }
        // A job-control stop stopped the provider's whole group (^Z): continue all of it, or
        // the provider may wait on a stopped child of its own until the SIGKILL.
        let group_stopped = matches!(self.phase, Phase::ProviderStopped { .. } | Phase::GuardianSuspended { .. });
        self.phase = Phase::Stopping { reason, deadline };
        // The owner's request is passed on (as the stop signal); the provider may stop its own
        // children in order. A timeout or parent death is guardian's own decision: the whole
        // tree hears it now.
        self.stop_provider(reason, out);
        if group_stopped {
            out.push(Action::ContinueProviderGroup);
        }
        if reason != StopReason::Signal {
            self.start_rounds(now, out);
        }
    }

    /// guardian's stop signal to the provider, where it goes, and who else hears it now.
    fn stop_provider(&mut self, reason: StopReason, out: &mut Vec<Action>) {
        let owner = reason == StopReason::Signal;
        // As PID 1 without the namespace's own /proc, a timeout's or parent death's round is
        // one kill(-1), which reaches the provider too: it hears the stop signal there, once.
        if !owner && self.cfg.stop_round_reaches_provider {
            return;
        }
        // Its group only when no round reaches the descendants (blind mode); otherwise the
        // group's other members hear it once each, from the members' stop or from the rounds,
        // and a copy through the group would be a second one.
        let group = self.cfg.forward_to == Target::Group && !self.cfg.rounds_reach_descendants;
        out.push(Action::StopProvider { reason, to: if group { Target::Group } else { Target::Provider } });
        if owner && self.cfg.forward_to == Target::Group {
            out.push(Action::StopGroupMembers);
        }
    }

    fn continued(&mut self, foreground: bool, out: &mut Vec<Action>) {
        match self.phase {
            Phase::GuardianSuspended { signal, took_terminal } => {
                // guardian runs again: from here the provider's next stop is a new job-control
                // stop, even when the kernel folds its continue and that stop into one report
                // (bg, then a read from the terminal).
                self.phase = Phase::Running;
                // fg gives guardian's group the terminal first; bg does not. It goes on to the
                // provider if the provider had it or wants it (stopped reading or setting it).
                if foreground && (took_terminal || signal != libc::SIGTSTP || self.cfg.stdin_terminal) {
                    self.give_terminal(out);
                }
                out.push(Action::ContinueProviderGroup);
            }
            Phase::Running | Phase::ProviderStopped { .. } => {
                // `fg` of a guardian started in the background: its group now owns the
                // terminal, and the provider is what should read it.
                if foreground && self.cfg.stdin_terminal {
                    self.give_terminal(out);
                }
                out.push(Action::Forward(libc::SIGCONT, self.cfg.forward_to));
            }
            _ => out.push(Action::Forward(libc::SIGCONT, self.cfg.forward_to)),
        }
    }

    fn give_terminal(&mut self, out: &mut Vec<Action>) {
        if self.terminal != Terminal::None && self.exit.is_none() {
            self.terminal = Terminal::Provider;
            out.push(Action::GiveTerminal);
        }
    }

    fn provider_stopped(&mut self, signal: i32, fg: Foreground, out: &mut Vec<Action>) {
        out.push(Action::EmitStopped { signal });
        if !matches!(self.phase, Phase::Running | Phase::ProviderStopped { .. }) {
            return;
        }
        // A job-control stop (^Z, a full-screen program's kill(0, SIGTSTP), a background read
        // or write) of a provider that runs on guardian's controlling terminal. SIGSTOP from
        // outside, or no terminal at all, is only reported: guardian waits.
        let job_signal = matches!(signal, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU);
        if !job_signal || self.terminal == Terminal::None {
            self.phase = Phase::ProviderStopped { signal };
            return;
        }
        if fg == Foreground::Guardian && signal != libc::SIGTSTP {
            // guardian's group holds the terminal and the provider stopped on a terminal read
            // or write: it is the foreground job. Hand it the terminal and let it go on, as the
            // shell would have done for the provider itself. This is how the provider gets the
            // terminal when guardian did not hand it over at start (fd 0 is not the terminal:
            // `echo | guardian -- cmd` reading /dev/tty), or when a background guardian was
            // brought to the foreground with `fg` while the provider ran (no SIGCONT came).
            self.phase = Phase::Running;
            self.give_terminal(out);
            out.push(Action::ContinueProviderGroup);
            return;
        }
        if !self.cfg.job_control {
            // PID 1: nobody above would see guardian stop, and the kernel would not stop it.
            out.push(Action::ContinueProviderGroup);
            return;
        }
        let took_terminal = fg == Foreground::Provider;
        self.phase = Phase::GuardianSuspended { signal, took_terminal };
        if took_terminal {
            self.terminal = Terminal::Guardian;
            out.push(Action::TakeTerminal);
        }
        out.push(Action::SuspendSelf(signal));
    }

    fn provider_exit(&mut self, status: WaitStatus, now: Duration, out: &mut Vec<Action>) {
        if self.exit.is_some() {
            return;
        }
        self.exit = Some((status, now));
        if self.terminal == Terminal::Provider {
            self.terminal = Terminal::Guardian;
            out.push(Action::TakeTerminal);
        }
        if self.empty() {
            return; // released by check_release, no round needed
        }
        match self.phase {
            Phase::Running | Phase::ProviderStopped { .. } | Phase::GuardianSuspended { .. } => {
                if self.cfg.wait_descendants {
                    self.phase = Phase::Reaping;
                } else {
                    let reason = StopReason::ProviderExit;
                    self.phase = Phase::Draining { reason, deadline: now + self.cfg.grace };
                    self.start_rounds(now, out);
                }
            }
            Phase::Stopping { reason, deadline } => {
                self.phase = Phase::Draining { reason, deadline };
                if self.rescan.is_none() {
                    self.start_rounds(now, out);
                }
            }
            _ => {}
        }
    }

    /// Starts stopping the descendants: a first round now, rescans on the backoff timer; with
    /// no grace left (`--grace 0`), straight to SIGKILL.
    fn start_rounds(&mut self, now: Duration, out: &mut Vec<Action>) {
        if let Phase::Stopping { reason, deadline } | Phase::Draining { reason, deadline } = self.phase {
            if deadline <= now {
                self.escalate(reason, now, out);
                return;
            }
        }
        out.push(Action::Round { kill: false, outside_leaf: self.leaf_empty });
        self.rescan = Some(Rescan { at: now + RESCAN_FIRST, step: RESCAN_FIRST });
    }

    /// The grace period is over (or a kill was requested): SIGKILL to the provider and the tree.
    fn escalate(&mut self, reason: StopReason, now: Duration, out: &mut Vec<Action>) {
        self.phase = Phase::Escalated { reason, since: now, abandon_at: now + self.abandon_wait() };
        out.push(Action::KillProvider);
        out.push(Action::Round { kill: true, outside_leaf: true });
        // After `cgroup.kill` nobody in the leaf can fork: an early rescan would only list
        // the dying members again (a `cgroup.procs` of thousands costs milliseconds) and write
        // `cgroup.kill` again for a process moved into the leaf since. The leaf's emptying
        // brings the round outside it at once; the rescans start at RESCAN_MAX.
        let first = if self.leaf_empty { RESCAN_FIRST } else { RESCAN_MAX };
        self.rescan = Some(Rescan { at: now + first, step: first });
    }

    fn abandon_wait(&self) -> Duration {
        self.cfg.grace.max(MIN_ABANDON_WAIT)
    }

    /// A descendant was killed or reaped: the bounded wait for ECHILD starts again.
    fn progress(&mut self, now: Duration) {
        let wait = self.abandon_wait();
        if let Phase::Escalated { abandon_at, .. } = &mut self.phase {
            *abandon_at = now + wait;
        }
    }

    fn tick(&mut self, now: Duration, out: &mut Vec<Action>) {
        if let Some(t) = self.cfg.timeout.filter(|_| self.phase.before_stop()) {
            if now >= self.cfg.started + t {
                self.begin_stop(StopReason::Timeout, now, out);
            }
        }
        match self.phase {
            Phase::Stopping { reason, deadline } | Phase::Draining { reason, deadline } if now >= deadline => {
                self.escalate(reason, now, out);
            }
            _ => {}
        }
        if self.rescan.as_ref().is_some_and(|r| now >= r.at) {
            let kill = matches!(self.phase, Phase::Escalated { .. });
            // With the leaf still populated RESCAN_MAX after SIGKILL (a member that does not
            // die: uninterruptible sleep), kill rounds look outside the leaf too, for what
            // that member forked and moved out before it could be reparented to guardian.
            let stuck = matches!(self.phase, Phase::Escalated { since, .. } if now >= since + RESCAN_MAX);
            out.push(Action::Round { kill, outside_leaf: self.leaf_empty || stuck });
            // Backing off (10 ms, doubling to 250 ms) while rounds find nobody new;
            // `RoundDone { chase: true }` brings the next one forward again.
            if let Some(r) = self.rescan.as_mut() {
                r.step = (r.step * 2).min(RESCAN_MAX);
                r.at = now + r.step;
            }
        }
        if let Phase::Escalated { abandon_at, .. } = self.phase {
            if now >= abandon_at {
                self.phase = Phase::Done { outcome: Outcome::Abandoned };
                out.push(Action::Abandon);
            }
        }
    }

    fn empty(&self) -> bool {
        self.echild && self.leaf_empty
    }

    /// The kernel says the tree is empty and the provider was reaped: nothing else matters.
    fn check_release(&mut self, out: &mut Vec<Action>) {
        let Some((status, _)) = self.exit else { return };
        if matches!(self.phase, Phase::Done { .. }) || !self.empty() {
            return;
        }
        let timed_out = !self.kill_requested
            && matches!(
                self.phase,
                Phase::Stopping { reason: StopReason::Timeout, .. }
                    | Phase::Draining { reason: StopReason::Timeout, .. }
                    | Phase::Escalated { reason: StopReason::Timeout, .. }
            );
        let outcome = Outcome::of(status, timed_out);
        self.phase = Phase::Done { outcome };
        out.push(Action::Release { outcome });
    }
}

mod classify;
mod vocab;
#[cfg(test)]
use classify::FOLD_WINDOW;
pub use classify::Received;
use classify::{Meaning, Request, Sender, classify};
pub use vocab::{Action, Foreground, Happened, StopReason, Target, Terminal};

#[cfg(test)]
mod tests;
