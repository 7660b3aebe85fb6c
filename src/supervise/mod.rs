//! supervise: guardian's single-threaded event loop. One `poll` waits on the signalfd, the
//! provider's pidfd, the parent's pidfd, a pending events write, the leaf's `cgroup.events`
//! and the next deadline; every wake-up reads a bounded batch of signals, reaps, asks
//! `waitid(WSTOPPED | WCONTINUED)` about the provider, and hands what happened to the state
//! machine in `state.rs`, whose actions (signals, rounds, terminal hand-offs, release) this
//! module carries out. The phases, their deadlines and the grace period live in `state.rs`.
//!
//! This module is the one owner of the leaf (the provider's leaf cgroup, made by start-up
//! before the provider exists and handed over in [`Start`]): it polls `cgroup.events`, lends
//! the leaf to each teardown round, and at the end removes it (`release`) or abandons it
//! (`abandon`). Neither exits the process: `run` returns guardian's status to `main`.

mod end;
pub mod parent;
pub mod state;
mod terminal;

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};

use crate::cgroup::Leaf;
use crate::events::{Event, Events, Usage};
use crate::exit::{Failure, Outcome};
use crate::pidref::{self, PidRef};
use crate::signals::{self, StopSignal};
use crate::status::WaitStatus;
use crate::sys::{self, JobChange, Reaped};
use crate::teardown::{Done, Phase as RoundPhase, ToProvider, Tree};
pub use parent::ParentWatch;
pub use state::Target;
use state::{Action, Config, Foreground, Happened, Received, State, StopReason, Terminal};
use terminal::Tty;

/// How the loop ends: released with the provider's outcome, or given up (125).
type Ended = Result<Outcome, Failure>;

/// How long a slow events reader may delay guardian's exit after release.
const EVENTS_CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Signals read from the signalfd per wake-up. A tree that floods guardian with queued
/// (real-time) signals cannot keep it reading: between batches the loop reaps, serves its
/// deadlines (the SIGKILL at the end of the grace) and runs its rounds.
const SIGNAL_BATCH: usize = 64;

pub struct Settings {
    pub grace: Duration,
    pub stop_signal: StopSignal,
    /// `--kill-signal` (checked: not a stop request).
    pub kill_signal: Option<i32>,
    /// `--forward-to`.
    pub forward_to: Target,
    pub timeout: Option<Duration>,
    pub wait_descendants: bool,
}

pub struct Supervisor {
    stop_signal: StopSignal,
    sigfd: OwnedFd,
    provider: PidRef,
    provider_pgid: i32,
    /// guardian's controlling terminal (`/dev/tty`).
    tty: Option<Tty>,
    parent: Option<ParentWatch>,
    events: Events,
    tree: Tree,
    /// The provider's leaf cgroup (cgroup mode): owned here, lent to the rounds.
    leaf: Option<Leaf>,
    state: State,
    /// The provider's resource usage, from the `wait4` that reaped it.
    provider_usage: Usage,
    /// The last wake-up reaped descendants and more remain: pause (see [`reap_pause`]) before
    /// the next poll.
    reap_pause: bool,
}

/// The pause between two wake-ups that reap descendants, once the provider has exited and
/// guardian had at least 500 children at the last round: 1 ms, and 1 ms more per 2 000
/// children, up to 5 ms. Each reaping ends with a `wait4` that finds nobody ready, and the
/// kernel answers it by walking the whole list of guardian's children: with thousands dying
/// one SIGCHLD at a time, waking for each spent more CPU (taken from the dying) than the
/// reaping itself. Pausing lets the exits gather into batches, longer ones where the walk is
/// longer; below 500 children the walk is short and a pause would only delay the release.
/// Signals wait in the signalfd meanwhile, and no deadline is passed; an idle guardian never
/// pauses (it is not reaping).
fn reap_pause(children: usize) -> Option<Duration> {
    (children >= 500).then(|| Duration::from_millis(1 + (children / 2000).min(4) as u64))
}

/// Everything start-up hands the supervisor, in one value.
pub struct Start {
    pub settings: Settings,
    /// The signalfd of start-up's signal step.
    pub sigfd: OwnedFd,
    pub provider: PidRef,
    pub provider_pgid: i32,
    pub parent: Option<ParentWatch>,
    pub events: Events,
    pub tree: Tree,
    /// The provider's leaf cgroup, which the supervisor owns from now on.
    pub leaf: Option<Leaf>,
    /// guardian's controlling terminal (`/dev/tty`), if it has one.
    pub tty: Option<OwnedFd>,
    /// The provider's group was given the terminal's foreground at start.
    pub gave_terminal: bool,
}

impl Supervisor {
    pub fn new(start: Start) -> Supervisor {
        let Start { settings, sigfd, provider, provider_pgid, parent, events, tree, leaf, tty, gave_terminal } = start;
        let terminal = match (&tty, gave_terminal) {
            (None, _) => Terminal::None,
            (Some(_), true) => Terminal::Provider,
            (Some(_), false) => Terminal::Guardian,
        };
        let cfg = Config {
            forward_to: settings.forward_to,
            stop_signal: settings.stop_signal.get(),
            kill_signal: settings.kill_signal,
            me: std::process::id(),
            sentinel: crate::sentinel::pid().map(|p| p as u32),
            provider_in_guardians_group: provider_pgid == crate::sentinel::job_pgrp(),
            rounds_reach_descendants: tree.rounds_reach_descendants(),
            stop_round_reaches_provider: tree.stop_round_reaches_provider(),
            grace: settings.grace,
            timeout: settings.timeout,
            wait_descendants: settings.wait_descendants,
            started: sys::monotonic(),
            job_control: std::process::id() != 1,
            stdin_terminal: tty.is_some() && sys::is_controlling_terminal(std::io::stdin().as_fd()),
        };
        let state = State::new(cfg, terminal, leaf.is_some());
        Supervisor {
            stop_signal: settings.stop_signal,
            sigfd,
            provider,
            provider_pgid,
            tty: tty.map(|fd| Tty::new(fd, provider_pgid)),
            parent,
            events,
            tree,
            leaf,
            state,
            provider_usage: Usage::default(),
            reap_pause: false,
        }
    }

    /// Runs until release (the provider's outcome) or until guardian gives up (a `Failure`).
    pub fn run(mut self) -> Ended {
        loop {
            if let Some(outcome) = self.wait_and_handle() {
                return outcome;
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

    /// One poll and everything it woke up for. `Some(outcome)` once guardian is done.
    fn wait_and_handle(&mut self) -> Option<Ended> {
        let reaping = std::mem::take(&mut self.reap_pause);
        if let Some(pause) = reap_pause(self.tree.children_hint()).filter(|_| reaping) {
            let left = self.next_deadline().map(|d| d.saturating_sub(sys::monotonic()));
            std::thread::sleep(left.map_or(pause, |l| l.min(pause)));
        }
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
            crate::log::info!("parent process died; tearing the tree down");
            if let Some(code) = self.handle(Happened::ParentDied) {
                return Some(code);
            }
        }
        if out_ready {
            self.events.flush();
        }
        if self.parent.as_mut().is_some_and(|p| p.poll_says_dead(sys::monotonic())) {
            self.parent = None;
            crate::log::info!("parent process died; tearing the tree down");
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
        // An array on the stack, not a Vec: this runs at every wake-up, and with musl's
        // allocator a heap block freed right after costs an mmap and a munmap, and keeps a
        // heap page resident while guardian idles in poll.
        let first = PollFd::new(&self.sigfd, PollFlags::IN);
        let mut fds: [PollFd<'_>; POLL_SLOTS] = std::array::from_fn(|_| first.clone());
        let mut len = 1;
        if let (false, Some(fd)) = (self.state.provider_exited(), self.provider.pidfd()) {
            push_poll_fd(&mut fds, &mut len, PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        let parent_slot = match &self.parent {
            Some(ParentWatch::Pidfd(fd)) => push_poll_fd(&mut fds, &mut len, PollFd::new(fd, PollFlags::IN)),
            _ => None,
        };
        let out_slot = self
            .events
            .pending_fd()
            .and_then(|fd| push_poll_fd(&mut fds, &mut len, PollFd::from_borrowed_fd(fd, PollFlags::OUT)));
        let leaf_slot = match &self.leaf {
            Some(leaf) if !leaf.is_removed() => {
                push_poll_fd(&mut fds, &mut len, PollFd::from_borrowed_fd(leaf.events_fd(), PollFlags::PRI))
            }
            _ => None,
        };
        let fds = fds.get_mut(..len).unwrap_or_default();
        let ts =
            timeout.map(|t| rustix::event::Timespec { tv_sec: t.as_secs() as i64, tv_nsec: t.subsec_nanos() as i64 });
        match rustix::event::poll(fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => crate::log::warn!("poll() failed: {e}"),
        }
        let ready = |slot: Option<usize>| slot.and_then(|i| fds.get(i)).is_some_and(|fd| !fd.revents().is_empty());
        (ready(parent_slot), ready(out_slot), ready(leaf_slot))
    }

    /// Feeds one observation to the state machine and carries out its actions, in order; an
    /// action's own outcome (a round's bookkeeping, a refused suspension) is fed back, and its
    /// actions run next, before the rest of the queue.
    fn handle(&mut self, what: Happened) -> Option<Ended> {
        let mut queue = VecDeque::new();
        let mut next = Some(what);
        let mut done = None;
        loop {
            if let Some(what) = next.take() {
                for action in self.decide(what).into_iter().rev() {
                    queue.push_front(action);
                }
            }
            let Some(action) = queue.pop_front() else { return done };
            match self.act(action) {
                Step::Done(ended) => done = Some(ended),
                Step::Then(what) => next = Some(what),
                Step::Next => {}
            }
        }
    }

    fn decide(&mut self, what: Happened) -> Vec<Action> {
        let before = self.state.phase();
        let actions = self.state.on(what, sys::monotonic());
        if self.state.phase() != before {
            crate::log::debug!("{} -> {} ({what:?})", before.name(), self.state.phase().name());
        }
        actions
    }

    fn act(&mut self, action: Action) -> Step {
        match action {
            Action::Forward(sig, to) => self.forward(sig, to),
            Action::StopProvider { reason, to } => {
                let tag = match reason {
                    StopReason::Signal => "forwarded",
                    other => other.name(),
                };
                // A stopped provider must see it (issue 14.2): SIGCONT follows, to the same target.
                self.signal_provider(self.stop_signal.get(), to, tag, true);
            }
            Action::StopGroupMembers => {
                self.tree.stop_group(self.provider_pgid, self.provider.pid, self.leaf.as_mut(), &mut self.events);
            }
            Action::KillProvider => {
                crate::log::info!("sending SIGKILL to the tree");
                self.signal_provider(libc::SIGKILL, Target::Provider, "kill", false);
            }
            Action::Round { kill, outside_leaf } => {
                // The round decides whether it must be chased (`plan::round`); that goes
                // straight back to the state, which keeps the next rescan.
                let done = self.round(kill, outside_leaf);
                return Step::Then(Happened::RoundDone { chase: done.chase });
            }
            Action::EmitStopping { reason, grace_ms } => {
                crate::log::info!("{}: stop ({reason}), grace {grace_ms} ms", self.state.phase().name());
                self.events.emit(Event::Stopping { reason, grace_ms });
            }
            Action::EmitStopped { signal } => {
                crate::log::info!("provider {} stopped ({})", self.provider.pid, signals::name(signal));
                self.events.emit(Event::Stopped { pid: self.provider.pid, signal: signals::name(signal) });
            }
            Action::EmitContinued => {
                crate::log::info!("provider {} continued", self.provider.pid);
                self.events.emit(Event::Continued { pid: self.provider.pid });
            }
            Action::TakeTerminal => self.tty.iter().for_each(Tty::take_back),
            // guardian keeps SIGTTOU blocked, so the kernel would let it set the foreground
            // even from the background: it hands over only what its own group holds.
            Action::GiveTerminal => self.tty.iter().for_each(Tty::hand_over),
            Action::ContinueProviderGroup => {
                if let Err(e) = self.provider.signal_group(libc::SIGCONT) {
                    crate::log::debug!("SIGCONT to the provider's group failed: {e}");
                }
            }
            Action::SuspendSelf(sig) => {
                crate::log::debug!("stopping guardian's process group with {} (job control)", signals::name(sig));
                // Everything said so far reaches the reader before the shell sees the stop.
                self.events.flush();
                match crate::sentinel::suspend(sig) {
                    Ok(true) => {} // continued: the SIGCONT waits on the signalfd
                    Ok(false) => {
                        crate::log::debug!("the kernel did not stop guardian (orphaned group or ignored signal)");
                        return Step::Then(Happened::SuspendRefused);
                    }
                    Err(e) => {
                        crate::log::warn!("stopping guardian for job control failed: {e}");
                        return Step::Then(Happened::SuspendRefused);
                    }
                }
            }
            Action::Folded { signal } => {
                crate::log::debug!(
                    "{}: the same stop request (same sender, within the fold window)",
                    signals::name(signal)
                );
            }
            Action::DiscardOwn(sig) => {
                crate::log::debug!("{} was raised by guardian itself: not forwarded", signals::name(sig));
            }
            Action::Release { outcome } => return Step::Done(Ok(self.release(outcome))),
            Action::Abandon => return Step::Done(Err(self.abandon())),
        }
        Step::Next
    }

    /// Reads at most `SIGNAL_BATCH` signals and hands each to the state machine, which decides
    /// what each means (`state::classify`).
    fn drain_signals(&mut self) -> Option<Ended> {
        for _ in 0..SIGNAL_BATCH {
            let info = match sys::read_signalfd(self.sigfd.as_fd()) {
                Ok(Some(info)) => info,
                Ok(None) => return None,
                Err(e) => {
                    crate::log::warn!("reading the signalfd failed: {e}");
                    return None;
                }
            };
            if self.parent.as_ref().is_some_and(|p| p.is_death_signal(&info)) {
                crate::log::info!("parent process died (death signal); tearing the tree down");
                // Later reparentings (to a subreaper that then dies) must not fire it again.
                let _ = sys::set_pdeathsig(0);
                self.parent = None;
                if let Some(ended) = self.handle(Happened::ParentDied) {
                    return Some(ended);
                }
                continue;
            }
            if info.signo == libc::SIGCHLD {
                continue; // reaping follows
            }
            let via = if signals::forwarded_code(info.code, info.value).is_some() { " (via the sentinel)" } else { "" };
            crate::log::info!("received {} from pid {}{via}", signals::name(info.signo), info.pid);
            // The one fact about a signal that is not in it: who holds the terminal, asked
            // only for SIGCONT.
            let foreground = info.signo == libc::SIGCONT
                && self.tty.as_ref().and_then(Tty::foreground) == Some(crate::sentinel::job_pgrp());
            let received =
                Received { signo: info.signo, code: info.code, pid: info.pid, value: info.value, foreground };
            if let Some(ended) = self.handle(Happened::Signal(received)) {
                return Some(ended);
            }
        }
        None
    }

    fn forward(&mut self, sig: i32, to: Target) {
        if self.state.provider_exited() {
            crate::log::debug!("{} not forwarded: the provider has exited", signals::name(sig));
            return;
        }
        self.signal_provider(sig, to, "forwarded", false);
    }

    /// Sends `sig` to the provider or its group (`cont`: the stop signal, followed by SIGCONT),
    /// with a `signal` event if it was delivered; a provider guardian may not signal is named.
    fn signal_provider(&mut self, sig: i32, to: Target, reason: &str, cont: bool) {
        if self.state.provider_exited() {
            return;
        }
        let p = &self.provider;
        let send = |s: i32| match to {
            Target::Provider => p.signal(s),
            Target::Group => p.signal_group(s),
        };
        let res = if cont { pidref::and_cont(send, sig) } else { send(sig) };
        let sent = ToProvider { pid: self.provider.pid, sig, to, reason };
        self.tree.provider_signalled(sent, &res, &mut self.events);
    }

    /// Reaps until nothing is ready; reads the leaf's `cgroup.events` when it signalled or
    /// the provider is gone (which also re-arms POLLPRI).
    fn reap(&mut self, leaf_ready: bool) -> Happened {
        let (mut provider, mut descendants, mut echild) = (None, 0, false);
        loop {
            // The rusage is asked for only while the provider is unreaped: it is the one that
            // `released` reports on its own (the tree's comes from getrusage at release).
            let unreaped = provider.is_none() && !self.state.provider_exited();
            match sys::reap_one(unreaped) {
                Ok((Reaped::Child(pid, status), usage)) if pid == self.provider.pid && unreaped => {
                    self.provider_usage = usage.unwrap_or_default();
                    self.on_provider_exit(status);
                    provider = Some(status);
                }
                Ok((Reaped::Child(pid, _), _)) => {
                    crate::log::debug!("reaped descendant {pid}");
                    self.tree.reaped(pid);
                    descendants += 1;
                }
                Ok((Reaped::NoneReady, _)) => break,
                Ok((Reaped::NoChildren, _)) => {
                    echild = true;
                    break;
                }
                Err(e) => {
                    crate::log::warn!("wait4() failed: {e}");
                    break;
                }
            }
        }
        let leaf_empty = if leaf_ready || provider.is_some() || self.state.provider_exited() {
            self.read_leaf_events()
        } else {
            None
        };
        self.reap_pause = descendants > 0 && !echild && self.state.provider_exited();
        Happened::Reaped { provider, descendants, echild, leaf_empty }
    }

    /// `waitid(WSTOPPED | WCONTINUED)` on the provider while it is unreaped.
    fn job_change(&mut self) -> Option<Happened> {
        if self.state.provider_exited() {
            return None;
        }
        match sys::wait_job_change(self.provider.pid) {
            Ok(Some(JobChange::Stopped(signal))) => {
                let foreground = match self.tty.as_ref().and_then(Tty::foreground) {
                    Some(pg) if pg == self.provider_pgid => Foreground::Provider,
                    Some(pg) if pg == crate::sentinel::job_pgrp() => Foreground::Guardian,
                    _ => Foreground::Other,
                };
                Some(Happened::ProviderStopped { signal, foreground })
            }
            Ok(Some(JobChange::Continued)) => Some(Happened::ProviderContinued),
            Ok(None) => None,
            Err(e) => {
                crate::log::debug!("waitid(WSTOPPED) on the provider failed: {e}");
                None
            }
        }
    }

    /// `Some(true)` when the leaf says `populated 0`; `None` without a leaf or on error.
    fn read_leaf_events(&mut self) -> Option<bool> {
        let leaf = self.leaf.as_ref()?;
        match leaf.populated() {
            Ok(populated) => {
                if !populated && !self.state.leaf_empty() {
                    crate::log::debug!("{}: populated 0", leaf.path.display());
                }
                Some(!populated)
            }
            Err(e) => {
                crate::log::debug!("reading {}/cgroup.events failed: {e}", leaf.path.display());
                None
            }
        }
    }

    fn on_provider_exit(&mut self, status: WaitStatus) {
        self.provider.mark_reaped();
        let sig = status.signal();
        crate::log::info!(
            "provider {} exited ({})",
            self.provider.pid,
            match sig {
                Some(s) => signals::name(s),
                None => format!("code {}", status.exit_code().unwrap_or(0)),
            }
        );
        self.events.emit(Event::Exit {
            pid: self.provider.pid,
            code: status.exit_code(),
            signal: sig.map(signals::name),
            core_dumped: status.core_dumped(),
        });
    }

    /// One signalling round over the descendants: the stop signal, or SIGKILL. The provider,
    /// while unreaped, is left to its own handle. Returns what the round decided.
    fn round(&mut self, kill: bool, outside_leaf: bool) -> Done {
        let (phase, reason) = if kill { (RoundPhase::Kill, "kill") } else { (RoundPhase::Stop, "stop") };
        let provider = (!self.state.provider_exited()).then_some(self.provider.pid);
        // With a leaf, `cgroup.procs` names the tree and /proc is scanned only for what the
        // leaf cannot show: descendants that moved out of it (once it is empty, and at the
        // SIGKILL deadline). Without one, every round scans.
        let scan = self.leaf.is_none() || outside_leaf;
        self.tree.round(phase, provider, reason, scan, self.leaf.as_mut(), &mut self.events)
    }
}

/// What carrying out one action leaves for the loop.
enum Step {
    Next,
    /// Feed this to the state machine (its actions run next).
    Then(Happened),
    /// Released or abandoned: the loop's outcome.
    Done(Ended),
}

/// At most the signalfd, the provider's pidfd, the parent's pidfd, the events fd and the
/// leaf's `cgroup.events`.
const POLL_SLOTS: usize = 5;

/// Adds `fd` to the poll set; its slot.
fn push_poll_fd<'a>(fds: &mut [PollFd<'a>; POLL_SLOTS], len: &mut usize, fd: PollFd<'a>) -> Option<usize> {
    let slot = fds.get_mut(*len)?;
    *slot = fd;
    *len += 1;
    Some(*len - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaping_pause_is_for_large_trees_grows_with_them_and_stays_short() {
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(reap_pause(0), None, "a small tree is reaped as it dies");
        assert_eq!(reap_pause(499), None);
        assert_eq!(reap_pause(500), ms(1));
        assert_eq!(reap_pause(1999), ms(1));
        assert_eq!(reap_pause(2000), ms(2));
        assert_eq!(reap_pause(10_000), ms(5));
        assert_eq!(reap_pause(usize::MAX), ms(5), "never longer than 5 ms");
    }
}
