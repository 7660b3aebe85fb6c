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

mod end;
pub mod state;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};

use crate::cli::ForwardTo;
use crate::events::{Event, Events, Signal, Usage};
use crate::exit::Failure;
use crate::pidref::PidRef;
use crate::signals;
use crate::sys::{self, JobChange, Reaped, WaitStatus};
use crate::teardown::{Phase as RoundPhase, Tree};
use state::{Action, Config, Foreground, Happened, State, Terminal};

/// How the loop ends: released with guardian's exit status, or given up (125).
type Outcome = Result<i32, Failure>;

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
    /// guardian's controlling terminal (`/dev/tty`): every tcgetpgrp/tcsetpgrp goes through it.
    tty: Option<OwnedFd>,
    parent: Option<ParentWatch>,
    events: Events,
    tree: Tree,
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
        tty: Option<OwnedFd>,
        gave_terminal: bool,
    ) -> Supervisor {
        let terminal = match (&tty, gave_terminal) {
            (None, _) => Terminal::None,
            (Some(_), true) => Terminal::Provider,
            (Some(_), false) => Terminal::Guardian,
        };
        let cfg = Config {
            grace: settings.grace,
            timeout: settings.timeout,
            wait_descendants: settings.wait_descendants,
            started: sys::monotonic(),
            job_control: std::process::id() != 1,
            stdin_terminal: tty.is_some() && sys::is_controlling_terminal(std::io::stdin().as_fd()),
        };
        let state = State::new(cfg, terminal, tree.leaf.is_some());
        Supervisor {
            stop_signal: settings.stop_signal,
            forward_to: settings.forward_to,
            sigfd,
            provider,
            provider_pgid,
            tty,
            parent,
            events,
            tree,
            state,
            provider_usage: Usage::default(),
            reap_pause: false,
        }
    }

    /// Runs until release (guardian's exit status) or until guardian gives up (a `Failure`).
    pub fn run(mut self) -> Result<i32, Failure> {
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
    fn wait_and_handle(&mut self) -> Option<Outcome> {
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
        let leaf_slot = match &self.tree.leaf {
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
            Err(e) => crate::warn!("poll() failed: {e}"),
        }
        let ready = |slot: Option<usize>| slot.and_then(|i| fds.get(i)).is_some_and(|fd| !fd.revents().is_empty());
        (ready(parent_slot), ready(out_slot), ready(leaf_slot))
    }

    /// Feeds one observation to the state machine and carries out its actions.
    fn handle(&mut self, what: Happened) -> Option<Outcome> {
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

    fn act(&mut self, action: Action) -> Option<Outcome> {
        match action {
            Action::Forward(sig) => self.forward(sig),
            // As PID 1 without the namespace's own /proc, a timeout's or parent death's round is
            // one kill(-1), which reaches the provider too: it hears the stop signal there, once.
            Action::StopProvider { reason } if reason != "forwarded" && self.tree.stop_round_reaches_provider() => {}
            Action::StopProvider { reason } => {
                self.signal_provider(self.stop_signal, reason);
                // The owner's request with --forward-to group: the rest of the provider's group
                // hears it too, one verified member at a time (recorded, so the rounds after
                // the provider's exit do not repeat it).
                if reason == "forwarded" && self.forward_to == ForwardTo::Group {
                    self.tree.stop_group(self.stop_signal, self.provider_pgid, self.provider.pid, &mut self.events);
                }
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
                self.events.emit(Event::Stopping { reason, grace_ms });
            }
            Action::EmitStopped { signal } => {
                crate::info!("provider {} stopped ({})", self.provider.pid, signals::name(signal));
                self.events.emit(Event::Stopped { pid: self.provider.pid, signal: signals::name(signal) });
            }
            Action::EmitContinued => {
                crate::info!("provider {} continued", self.provider.pid);
                self.events.emit(Event::Continued { pid: self.provider.pid });
            }
            Action::TakeTerminal => {
                let fg = self.foreground();
                if let Some(tty) = self.tty_fd().filter(|_| fg.is_some_and(|pg| self.is_the_trees_group(pg))) {
                    if let Err(e) = sys::tcsetpgrp(tty, crate::sentinel::job_pgrp()) {
                        crate::debug!("taking the terminal back failed: {e}");
                    }
                }
            }
            Action::GiveTerminal => {
                // guardian keeps SIGTTOU blocked, so the kernel would let it set the foreground
                // even from the background: it hands over only what its own group holds.
                match self.tty_fd().map(|t| (t, sys::tcgetpgrp(t))) {
                    Some((tty, Ok(pg))) if pg == crate::sentinel::job_pgrp() => {
                        if let Err(e) = sys::tcsetpgrp(tty, self.provider_pgid) {
                            crate::debug!("handing the terminal to the provider's group failed: {e}");
                        }
                    }
                    Some((_, fg)) => crate::debug!("the terminal is not guardian's to hand over (foreground {fg:?})"),
                    None => {}
                }
            }
            Action::ContinueProviderGroup => {
                if let Err(e) = self.provider.signal_group(libc::SIGCONT) {
                    crate::debug!("SIGCONT to the provider's group failed: {e}");
                }
            }
            Action::SuspendSelf(sig) => {
                crate::debug!("stopping guardian's process group with {} (job control)", signals::name(sig));
                // Everything said so far reaches the reader before the shell sees the stop.
                self.events.flush();
                match sys::stop_own_group(sig) {
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
            Action::Release { code } => return Some(Ok(self.release(code))),
            Action::Abandon => return Some(Err(self.abandon())),
        }
        None
    }

    fn tty_fd(&self) -> Option<std::os::fd::RawFd> {
        self.tty.as_ref().map(|t| t.as_raw_fd())
    }

    /// Whether the terminal's foreground group `pg` belongs to the provider's tree: the
    /// provider's group, or a group whose leader is alive and descends from guardian (a job the
    /// provider started, such as an interactive shell's foreground command). A group whose
    /// leader is gone is not taken: it may be the shell's own job (`true | cmd` loses its
    /// leader at once), and the shell's group is never the tree's.
    fn is_the_trees_group(&self, pg: i32) -> bool {
        let me = std::process::id() as i32;
        if pg == self.provider_pgid {
            return true;
        }
        if pg <= 0 || pg == crate::sentinel::job_pgrp() {
            return false;
        }
        let ppid = |pid: i32| {
            std::fs::read(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|b| crate::proctree::parse_stat(&b))
                .map(|st| st.ppid)
        };
        let Some(mut parent) = ppid(pg) else { return false };
        // Up the ancestry (bounded: a pid chain is finite, but /proc can change under us).
        for _ in 0..4096 {
            match parent {
                p if p == me => return true,
                p if p <= 1 => return false,
                p => match ppid(p) {
                    Some(next) => parent = next,
                    None => return false,
                },
            }
        }
        false
    }

    /// The terminal's foreground process group, if guardian has a controlling terminal.
    fn foreground(&self) -> Option<i32> {
        sys::tcgetpgrp(self.tty_fd()?).ok()
    }

    /// Reads at most `SIGNAL_BATCH` signals and hands each to the state machine.
    fn drain_signals(&mut self) -> Option<Outcome> {
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
                    } else if crate::sentinel::is_refused_suspend(&info) {
                        // The sentinel could not stop the job (its group is orphaned).
                        Happened::SuspendRefused
                    } else if sig == libc::SIGCONT {
                        let foreground = self.foreground() == Some(crate::sentinel::job_pgrp());
                        Happened::Continued { foreground }
                    } else if info.code == libc::SI_KERNEL && self.provider_pgid == crate::sentinel::job_pgrp() {
                        // The provider shares guardian's process group (guardian's group lives
                        // outside its PID namespace): a key the terminal turned into a signal
                        // (^C, ^\, ^Z) reached the provider as well, directly.
                        crate::debug!("{} from the terminal: the provider heard it too", signals::name(sig));
                        continue;
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
        self.emit_provider_signal(sig, target, "forwarded");
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
        self.emit_provider_signal(sig, target, reason);
    }

    fn emit_provider_signal(&mut self, sig: i32, target: &'static str, reason: &str) {
        self.events.emit(Event::Signal(Signal {
            signal: signals::name(sig),
            target,
            pid: Some(self.provider.pid),
            cgroup: None,
            pids: None,
            reason: reason.into(),
        }));
    }

    /// Where guardian's own signals to the provider go: its group only with `--forward-to
    /// group` and when no round reaches the descendants (blind mode); otherwise the group's
    /// other members hear the stop signal once each, from `Tree::stop_group` (an owner's stop
    /// request) or from the rounds, and a copy through the group would be a second one.
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
                    crate::debug!("reaped descendant {pid}");
                    self.tree.reaped(pid);
                    descendants += 1;
                }
                Ok((Reaped::NoneReady, _)) => break,
                Ok((Reaped::NoChildren, _)) => {
                    echild = true;
                    break;
                }
                Err(e) => {
                    crate::warn!("wait4() failed: {e}");
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
                let foreground = match self.foreground() {
                    Some(pg) if pg == self.provider_pgid => Foreground::Provider,
                    Some(pg) if pg == crate::sentinel::job_pgrp() => Foreground::Guardian,
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
        self.events.emit(Event::Exit {
            pid: self.provider.pid,
            code: status.exit_code(),
            signal: sig.map(signals::name),
            core_dumped: status.core_dumped(),
        });
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
