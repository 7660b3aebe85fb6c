//! supervise: guardian's single-threaded event loop. One `poll` waits on the signalfd, the
//! provider's pidfd, the parent's pidfd, a pending events write, the leaf's `cgroup.events`
//! and the next deadline; every wake-up reads a bounded batch of signals, reaps, asks
//! `waitid(WSTOPPED | WCONTINUED)` about the provider, and hands what happened to the state
//! machine in `state.rs`, whose actions (signals, rounds, terminal hand-offs, release) this
//! module carries out. The phases, their deadlines and the grace period live in `state.rs`.
//!
//! This module is the one owner of the leaf's lifecycle while the provider's tree lives:
//! it polls `cgroup.events`, and at the end removes the leaf (`release`) or abandons it
//! (`abandon`). Neither exits the process: `run` returns guardian's status to `main`.

pub mod state;

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use serde_json::json;

use crate::cli::ForwardTo;
use crate::events::Events;
use crate::pidref::PidRef;
use crate::signals;
use crate::sys::{self, JobChange, Reaped, WaitStatus};
use crate::teardown::{Discovery, Phase as RoundPhase, Tree};
use state::{Action, Config, Foreground, Happened, State, Terminal};

/// Interval of the bounded parent check when the parent's pidfd could not be opened.
const PARENT_POLL: Duration = Duration::from_millis(250);
/// How long a slow events reader may delay guardian's exit after release.
const EVENTS_CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Signals read from the signalfd per wake-up. A tree that floods guardian with queued
/// (real-time) signals cannot keep it reading: between batches the loop reaps, serves its
/// deadlines (the SIGKILL at the end of the grace) and runs its rounds.
const SIGNAL_BATCH: usize = 64;

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
}

pub struct Settings {
    pub grace: Duration,
    pub stop_signal: i32,
    pub forward_to: ForwardTo,
    pub timeout: Option<Duration>,
    pub wait_descendants: bool,
}

pub struct Supervisor {
    stop_signal: i32,
    forward_to: ForwardTo,
    sigfd: OwnedFd,
    provider: PidRef,
    provider_pgid: i32,
    parent: Option<ParentWatch>,
    events: Events,
    tree: Tree,
    state: State,
}

impl Supervisor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: Settings,
        sigfd: OwnedFd,
        provider: PidRef,
        provider_pgid: i32,
        parent: Option<ParentWatch>,
        events: Events,
        tree: Tree,
        gave_terminal: bool,
    ) -> Supervisor {
        // fd 0 is guardian's controlling terminal exactly when tcgetpgrp() answers.
        let terminal = if gave_terminal {
            Terminal::Provider
        } else if sys::isatty(0) && sys::tcgetpgrp(0).is_ok() {
            Terminal::Guardian
        } else {
            Terminal::None
        };
        let cfg = Config {
            grace: settings.grace,
            timeout: settings.timeout,
            wait_descendants: settings.wait_descendants,
            started: sys::monotonic(),
            job_control: std::process::id() != 1,
        };
        let state = State::new(cfg, terminal, tree.leaf.is_some());
        Supervisor {
            stop_signal: settings.stop_signal,
            forward_to: settings.forward_to,
            sigfd,
            provider,
            provider_pgid,
            parent,
            events,
            tree,
            state,
        }
    }

    /// Runs until release (or until guardian gives up); returns guardian's exit status.
    pub fn run(mut self) -> i32 {
        loop {
            if let Some(code) = self.wait_and_handle() {
                return code;
            }
        }
    }

    fn next_deadline(&self) -> Option<Duration> {
        let parent = match &self.parent {
            Some(ParentWatch::Poll { next, .. }) => Some(*next),
            _ => None,
        };
        [self.state.next_deadline(), parent].into_iter().flatten().min()
    }

    /// One poll and everything it woke up for. `Some(status)` once guardian is done.
    fn wait_and_handle(&mut self) -> Option<i32> {
        let timeout = self.next_deadline().map(|d| d.saturating_sub(sys::monotonic()));
        let (parent_ready, out_ready, leaf_ready) = self.poll(timeout);
        // Signals first (they may request a stop), then reaping (it may find the provider's
        // exit) and the provider's stops, then the parent, then timers. Reading the signalfd
        // and reaping are cheap and non-blocking, so both run on every wake-up: a coalesced
        // SIGCHLD can never hide an exit.
        if let Some(code) = self.drain_signals() {
            return Some(code);
        }
        let reaped = self.reap(leaf_ready);
        if let Some(code) = self.handle(reaped) {
            return Some(code);
        }
        if let Some(change) = self.job_change() {
            if let Some(code) = self.handle(change) {
                return Some(code);
            }
        }
        if parent_ready {
            self.parent = None;
            crate::info!("parent process died; tearing the tree down");
            if let Some(code) = self.handle(Happened::ParentDied) {
                return Some(code);
            }
        }
        if out_ready {
            self.events.flush();
        }
        if self.parent_poll_says_dead() {
            crate::info!("parent process died; tearing the tree down");
            if let Some(code) = self.handle(Happened::ParentDied) {
                return Some(code);
            }
        }
        self.handle(Happened::Tick)
    }

    /// Waits for the next kernel event or deadline; returns which of the parent pidfd, the
    /// events fd and the leaf's `cgroup.events` are ready. (The signalfd and the provider's
    /// pidfd need no flag: every wake-up reads the one and reaps for the other.)
    fn poll(&self, timeout: Option<Duration>) -> (bool, bool, bool) {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(5);
        fds.push(PollFd::new(&self.sigfd, PollFlags::IN));
        if let (false, Some(fd)) = (self.state.provider_exited(), self.provider.pidfd()) {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        let parent_slot = match &self.parent {
            Some(ParentWatch::Pidfd(fd)) => {
                fds.push(PollFd::new(fd, PollFlags::IN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let out_slot = self.events.pending_fd().map(|fd| {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::OUT));
            fds.len() - 1
        });
        let leaf_slot = match &self.tree.leaf {
            Some(leaf) if !leaf.is_removed() => {
                fds.push(PollFd::from_borrowed_fd(leaf.events_fd(), PollFlags::PRI));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let ts =
            timeout.map(|t| rustix::event::Timespec { tv_sec: t.as_secs() as i64, tv_nsec: t.subsec_nanos() as i64 });
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => crate::warn!("poll() failed: {e}"),
        }
        let ready = |slot: Option<usize>| slot.is_some_and(|i| !fds[i].revents().is_empty());
        (ready(parent_slot), ready(out_slot), ready(leaf_slot))
    }

    /// Feeds one observation to the state machine and carries out its actions.
    fn handle(&mut self, what: Happened) -> Option<i32> {
        let before = self.state.phase();
        let actions = self.state.on(what, sys::monotonic());
        if self.state.phase() != before {
            crate::debug!("{} -> {} ({what:?})", before.name(), self.state.phase().name());
        }
        let mut done = None;
        for action in actions {
            if let Some(code) = self.act(action) {
                done = Some(code);
            }
        }
        done
    }

    fn act(&mut self, action: Action) -> Option<i32> {
        match action {
            Action::Forward(sig) => self.forward(sig),
            // As PID 1 without the namespace's own /proc, a timeout's or parent death's round is
            // one kill(-1), which reaches the provider too: it hears the stop signal there, once.
            Action::StopProvider { reason } if reason != "forwarded" && self.tree.stop_round_reaches_provider() => {}
            Action::StopProvider { reason } => {
                self.signal_provider(self.stop_signal, reason);
                // A stopped provider must see it (issue 14.2): SIGCONT to the same target.
                if self.stop_signal != libc::SIGCONT && self.stop_signal != libc::SIGKILL {
                    let _ = self.send_provider_quietly(libc::SIGCONT);
                }
            }
            Action::KillProvider => {
                crate::info!("sending SIGKILL to the tree");
                self.signal_provider(libc::SIGKILL, "kill");
            }
            Action::Round { kill, outside_leaf } => {
                let sent = self.round(kill, outside_leaf);
                // Only /proc scans count newcomers: a broadcast or cgroup.kill round reports
                // every time and needs no chase.
                let chase = self.tree.chase(sent);
                // The round's own bookkeeping (next rescan) goes straight back to the state.
                return self.handle(Happened::RoundDone { chase });
            }
            Action::EmitStopping { reason, grace_ms } => {
                crate::info!("{}: stop ({reason}), grace {grace_ms} ms", self.state.phase().name());
                self.events.emit("stopping", json!({"reason": reason, "grace_ms": grace_ms}));
            }
            Action::EmitStopped { signal } => {
                crate::info!("provider {} stopped ({})", self.provider.pid, signals::name(signal));
                self.events.emit("stopped", json!({"pid": self.provider.pid, "signal": signals::name(signal)}));
            }
            Action::EmitContinued => {
                crate::info!("provider {} continued", self.provider.pid);
                self.events.emit("continued", json!({"pid": self.provider.pid}));
            }
            Action::TakeTerminal => {
                if sys::tcgetpgrp(0).ok() == Some(self.provider_pgid) {
                    if let Err(e) = sys::tcsetpgrp(0, sys::getpgrp()) {
                        crate::debug!("taking the terminal back failed: {e}");
                    }
                }
            }
            Action::GiveTerminal => {
                if let Err(e) = sys::tcsetpgrp(0, self.provider_pgid) {
                    crate::debug!("handing the terminal to the provider's group failed: {e}");
                }
            }
            Action::ContinueProviderGroup => {
                if let Err(e) = self.provider.signal_group(libc::SIGCONT) {
                    crate::debug!("SIGCONT to the provider's group failed: {e}");
                }
            }
            Action::SuspendSelf(sig) => {
                crate::debug!("stopping guardian with {} (job control)", signals::name(sig));
                // Everything said so far reaches the reader before the shell sees the stop.
                self.events.flush();
                match sys::stop_self(sig) {
                    Ok(true) => {} // continued: the SIGCONT waits on the signalfd
                    Ok(false) => {
                        crate::debug!("the kernel did not stop guardian (orphaned group or ignored signal)");
                        return self.handle(Happened::SuspendRefused);
                    }
                    Err(e) => {
                        crate::warn!("stopping guardian for job control failed: {e}");
                        return self.handle(Happened::SuspendRefused);
                    }
                }
            }
            Action::Release { code } => return Some(self.release(code)),
            Action::Abandon => return Some(self.abandon()),
        }
        None
    }

    /// Reads at most `SIGNAL_BATCH` signals and hands each to the state machine.
    fn drain_signals(&mut self) -> Option<i32> {
        let me = std::process::id();
        for _ in 0..SIGNAL_BATCH {
            let info = match sys::read_signalfd(self.sigfd.as_fd()) {
                Ok(Some(info)) => info,
                Ok(None) => return None,
                Err(e) => {
                    crate::warn!("reading the signalfd failed: {e}");
                    return None;
                }
            };
            if self.parent.as_ref().is_some_and(|p| p.is_death_signal(&info)) {
                crate::info!("parent process died (death signal); tearing the tree down");
                // Later reparentings (to a subreaper that then dies) must not fire it again.
                let _ = sys::set_pdeathsig(0);
                self.parent = None;
                if let Some(code) = self.handle(Happened::ParentDied) {
                    return Some(code);
                }
                continue;
            }
            let what = match info.signo {
                libc::SIGCHLD => continue, // reaping follows
                // Our own write to a broken events pipe or stderr: not the owner's signal.
                libc::SIGPIPE if info.pid == me => continue,
                sig => {
                    crate::info!("received {} from pid {}", signals::name(sig), info.pid);
                    if sig == libc::SIGTERM || sig == self.stop_signal {
                        Happened::StopRequest
                    } else if sig == libc::SIGCONT {
                        let foreground = sys::isatty(0) && sys::tcgetpgrp(0).ok() == Some(sys::getpgrp());
                        Happened::Continued { foreground }
                    } else if signals::is_forwarded(sig) {
                        Happened::Signal(sig)
                    } else {
                        continue;
                    }
                }
            };
            if let Some(code) = self.handle(what) {
                return Some(code);
            }
        }
        None
    }

    fn forward(&mut self, sig: i32) {
        if self.state.provider_exited() {
            crate::debug!("{} not forwarded: the provider has exited", signals::name(sig));
            return;
        }
        let (target, res) = match self.forward_to {
            ForwardTo::Provider => ("provider", self.provider.signal(sig)),
            ForwardTo::Group => ("group", self.provider.signal_group(sig)),
        };
        // Only what was delivered is reported; a provider guardian may not signal is named.
        if !self.tree.provider_signalled(self.provider.pid, sig, &res) {
            return;
        }
        self.events.emit(
            "signal",
            json!({"signal": signals::name(sig), "target": target, "pid": self.provider.pid, "reason": "forwarded"}),
        );
    }

    /// Sends `sig` to the provider (per --forward-to; SIGKILL to the provider alone) on
    /// guardian's own initiative, with a `signal` event.
    fn signal_provider(&mut self, sig: i32, reason: &str) {
        if self.state.provider_exited() {
            return;
        }
        let target = self.provider_target(sig);
        let res = self.send_provider_quietly(sig);
        if !self.tree.provider_signalled(self.provider.pid, sig, &res) {
            return;
        }
        self.events.emit(
            "signal",
            json!({"signal": signals::name(sig), "target": target, "pid": self.provider.pid, "reason": reason}),
        );
    }

    /// Where guardian's own signals to the provider go: its group only with `--forward-to
    /// group` and when no round reaches the descendants (blind mode); otherwise the rounds give
    /// each member the stop signal once, and the group would hear it twice.
    fn provider_target(&self, sig: i32) -> &'static str {
        let group = self.forward_to == ForwardTo::Group && !self.tree.rounds_reach_descendants();
        match (group, sig) {
            (false, _) | (_, libc::SIGKILL) => "provider",
            (true, _) => "group",
        }
    }

    fn send_provider_quietly(&self, sig: i32) -> std::io::Result<()> {
        if self.state.provider_exited() {
            return Ok(());
        }
        match self.provider_target(sig) {
            "group" => self.provider.signal_group(sig),
            _ => self.provider.signal(sig),
        }
    }

    /// Reaps until nothing is ready; reads the leaf's `cgroup.events` when it signalled or
    /// the provider is gone (which also re-arms POLLPRI).
    fn reap(&mut self, leaf_ready: bool) -> Happened {
        let (mut provider, mut descendants, mut echild) = (None, 0, false);
        loop {
            match sys::reap_one() {
                Ok(Reaped::Child(pid, status)) if pid == self.provider.pid && !self.state.provider_exited() => {
                    if provider.is_none() {
                        self.on_provider_exit(status);
                        provider = Some(status);
                    }
                }
                Ok(Reaped::Child(pid, _)) => {
                    crate::debug!("reaped descendant {pid}");
                    self.tree.reaped(pid);
                    descendants += 1;
                }
                Ok(Reaped::NoneReady) => break,
                Ok(Reaped::NoChildren) => {
                    echild = true;
                    break;
                }
                Err(e) => {
                    crate::warn!("waitpid() failed: {e}");
                    break;
                }
            }
        }
        let leaf_empty = if leaf_ready || provider.is_some() || self.state.provider_exited() {
            self.read_leaf_events()
        } else {
            None
        };
        Happened::Reaped { provider, descendants, echild, leaf_empty }
    }

    /// `waitid(WSTOPPED | WCONTINUED)` on the provider while it is unreaped.
    fn job_change(&mut self) -> Option<Happened> {
        if self.state.provider_exited() {
            return None;
        }
        match sys::wait_job_change(self.provider.pid) {
            Ok(Some(JobChange::Stopped(signal))) => {
                let foreground = match sys::tcgetpgrp(0) {
                    Ok(pg) if pg == self.provider_pgid => Foreground::Provider,
                    Ok(pg) if pg == sys::getpgrp() => Foreground::Guardian,
                    _ => Foreground::Other,
                };
                Some(Happened::ProviderStopped { signal, foreground })
            }
            Ok(Some(JobChange::Continued)) => Some(Happened::ProviderContinued),
            Ok(None) => None,
            Err(e) => {
                crate::debug!("waitid(WSTOPPED) on the provider failed: {e}");
                None
            }
        }
    }

    /// `Some(true)` when the leaf says `populated 0`; `None` without a leaf or on error.
    fn read_leaf_events(&mut self) -> Option<bool> {
        let leaf = self.tree.leaf.as_ref()?;
        match leaf.populated() {
            Ok(populated) => {
                if !populated && !self.state.leaf_empty() {
                    crate::debug!("{}: populated 0", leaf.path.display());
                }
                Some(!populated)
            }
            Err(e) => {
                crate::debug!("reading {}/cgroup.events failed: {e}", leaf.path.display());
                None
            }
        }
    }

    fn on_provider_exit(&mut self, status: WaitStatus) {
        self.provider.mark_reaped();
        let sig = status.signal();
        crate::info!(
            "provider {} exited ({})",
            self.provider.pid,
            match sig {
                Some(s) => signals::name(s),
                None => format!("code {}", status.exit_code().unwrap_or(0)),
            }
        );
        self.events.emit(
            "exit",
            json!({
                "pid": self.provider.pid,
                "code": status.exit_code(),
                "signal": sig.map(signals::name),
                "core_dumped": status.core_dumped(),
            }),
        );
    }

    /// The bounded `getppid()` check, when the parent's pidfd could not be opened.
    fn parent_poll_says_dead(&mut self) -> bool {
        let now = sys::monotonic();
        let Some(ParentWatch::Poll { ppid, next }) = &mut self.parent else { return false };
        if now < *next {
            return false;
        }
        if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(*ppid) {
            self.parent = None;
            return true;
        }
        *next = now + PARENT_POLL;
        false
    }

    /// One signalling round over the descendants: the stop signal, or SIGKILL. The provider,
    /// while unreaped, is left to its own handle. Returns how many processes it signalled.
    fn round(&mut self, kill: bool, outside_leaf: bool) -> usize {
        let (phase, reason) = if kill { (RoundPhase::Kill, "kill") } else { (RoundPhase::Stop, "stop") };
        let provider = (!self.state.provider_exited()).then_some(self.provider.pid);
        // With a leaf, `cgroup.procs` names the tree and /proc is scanned only for what the
        // leaf cannot show: descendants that moved out of it (once it is empty, and at the
        // SIGKILL deadline). Without one, every round scans.
        let scan = self.tree.leaf.is_none() || outside_leaf;
        self.tree.round(phase, self.stop_signal, provider, reason, scan, &mut self.events)
    }

    /// SIGKILL was sent long ago and children remain that guardian cannot see or signal.
    /// Exiting is honest only as a failure: `error`, never `released`.
    fn abandon(&mut self) -> i32 {
        let remaining = self.tree.remaining();
        let unkillable = &self.tree.stats.unkillable;
        let message = format!(
            "processes remain after SIGKILL: {remaining:?} (not permitted to signal: {unkillable:?}; others may be hidden from /proc); giving up"
        );
        crate::fatal!("{message}");
        if let Some(leaf) = self.tree.leaf.as_mut() {
            leaf.remove_now();
        }
        self.events.emit(
            "error",
            json!({"status": 125, "message": message, "unkillable": unkillable, "remaining": remaining}),
        );
        let events = std::mem::replace(&mut self.events, Events::disabled());
        events.close(EVENTS_CLOSE_WAIT);
        125
    }

    fn release(&mut self, code: i32) -> i32 {
        let (mut cgroup_path, mut oom_kill) = (None, None);
        if let Some(leaf) = self.tree.leaf.as_mut() {
            oom_kill = leaf.oom_kills();
            // `released.cgroup` names the leaf only once it is really gone: a leaf that could
            // not be removed is reported here, never claimed removed.
            if let Err(e) = leaf.remove() {
                crate::warn!("could not remove the leaf cgroup {}: {e}; 'guardian sweep' will", leaf.path.display());
            } else {
                cgroup_path = Some(leaf.path_text());
                crate::debug!("removed the leaf cgroup {}", leaf.path.display());
            }
        }
        if let Some(n) = oom_kill.filter(|&n| n > 0) {
            crate::warn!("the kernel's OOM killer killed {n} process(es) in the leaf (memory.max)");
        }
        let teardown_ms = self.state.exited_at().map_or(0.0, |t| (sys::monotonic() - t).as_micros() as f64 / 1000.0);
        let stats = &self.tree.stats;
        crate::info!(
            "released: status {code}, {} signalled, {} killed, {} reaped, teardown {teardown_ms:.3} ms",
            stats.signalled,
            stats.killed,
            stats.reaped
        );
        let signalled = match self.tree.discovery {
            Discovery::Scan => Some(stats.signalled),
            _ => None,
        };
        self.events.emit(
            "released",
            json!({
                "status": code,
                "signalled": signalled,
                "killed": stats.killed,
                "reaped": stats.reaped,
                "teardown_ms": teardown_ms,
                "cgroup": cgroup_path,
                "oom_kill": oom_kill,
            }),
        );
        let events = std::mem::replace(&mut self.events, Events::disabled());
        events.close(EVENTS_CLOSE_WAIT);
        code
    }
}
