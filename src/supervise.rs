//! supervise: guardian's single-threaded event loop and its states.
//!
//! * **running**: the provider lives. Wakes only on the signalfd (forwarded signals,
//!   SIGCHLD of adopted orphans, which are reaped at once), the provider's pidfd, the
//!   parent's pidfd, a pending events write, or the `--timeout` deadline. No periodic timer.
//! * **stopping**: a stop was requested (SIGTERM, `--timeout`, parent death) while the
//!   provider lives. SIGTERM is forwarded to the provider (it is the owner's request, and the
//!   provider may stop its own children in order); a timeout or parent death is guardian's
//!   own decision, so the stop signal goes to the provider and every descendant at once. At
//!   the grace deadline the whole tree gets SIGKILL.
//! * **draining**: the provider has exited and was reaped; every descendant gets the stop
//!   signal, newcomers are caught by rescans on a backoff timer, the grace deadline brings
//!   SIGKILL, and `waitpid` reaps until ECHILD, the kernel's proof that the tree is empty.
//!   (With `--wait-descendants` and no stop request, it only reaps.)
//! * In cgroup mode the leaf's `cgroup.events` is polled for POLLPRI too: release waits
//!   for both proofs, `populated 0` and ECHILD, then removes the leaf.
//! * **released**: `released` is emitted, the events fd closed, and guardian exits with the
//!   provider's status.
//!
//! The grace period is enforced here: `Stop::deadline` is set once, when the stop begins,
//! and `escalate` sends SIGKILL when it passes.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use serde_json::json;

use crate::cli::ForwardTo;
use crate::events::Events;
use crate::pidref::PidRef;
use crate::signals;
use crate::sys::{self, Reaped, WaitStatus};
use crate::teardown::{Discovery, Phase, Tree};

/// How long to keep waiting for ECHILD after SIGKILL, and after the last progress (a
/// descendant killed or reaped), before giving up honestly (exit 125, an `error` event
/// naming what remains): at least this, or the grace period if longer. Measured from the last
/// progress, so a tree that is still being killed (a fork storm that starves guardian of CPU)
/// is never abandoned while guardian can still reach it.
const MIN_ABANDON_WAIT: Duration = Duration::from_secs(5);
/// First and largest interval between rescans while draining.
const RESCAN_FIRST: Duration = Duration::from_millis(10);
const RESCAN_MAX: Duration = Duration::from_millis(250);
/// Interval of the bounded parent check when the parent's pidfd could not be opened.
const PARENT_POLL: Duration = Duration::from_millis(250);
/// How long a slow events reader may delay guardian's exit after release.
const EVENTS_CLOSE_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// SIGTERM (the owner's shutdown request).
    Signal,
    Timeout,
    ParentDied,
    /// The provider exited on its own.
    ProviderExit,
}

impl StopReason {
    fn name(self) -> &'static str {
        match self {
            StopReason::Signal => "signal",
            StopReason::Timeout => "timeout",
            StopReason::ParentDied => "parent-died",
            StopReason::ProviderExit => "exit",
        }
    }
}

struct Stop {
    reason: StopReason,
    deadline: Duration,
    escalated: bool,
}

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
    pub settings: Settings,
    pub sigfd: OwnedFd,
    pub provider: PidRef,
    pub provider_pgid: i32,
    pub parent: Option<ParentWatch>,
    pub events: Events,
    pub tree: Tree,
    /// The terminal (fd 0) was handed to the provider's group: take it back at its exit.
    pub gave_terminal: bool,
    pub started: Duration,
    status: Option<WaitStatus>,
    exited_at: Option<Duration>,
    stop: Option<Stop>,
    timed_out: bool,
    no_children: bool,
    /// Descendants are being stopped: signalling rounds and rescans run.
    rounds: bool,
    rescan: Option<(Duration, Duration)>,
    abandon_at: Option<Duration>,
    /// The leaf's `cgroup.events` said `populated 0` (always true without a leaf).
    leaf_empty: bool,
    /// The SIGKILL deadline's /proc scan for descendants outside the leaf has run.
    killed_outside_leaf: bool,
}

enum Outcome {
    Continue,
    Exit(i32),
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
        Supervisor {
            settings,
            sigfd,
            provider,
            provider_pgid,
            parent,
            events,
            gave_terminal,
            started: sys::monotonic(),
            status: None,
            exited_at: None,
            stop: None,
            timed_out: false,
            no_children: false,
            rounds: false,
            rescan: None,
            abandon_at: None,
            leaf_empty: tree.leaf.is_none(),
            killed_outside_leaf: false,
            tree,
        }
    }

    fn state_name(&self) -> &'static str {
        match (&self.status, &self.stop) {
            (None, None) => "running",
            (None, Some(_)) => "stopping",
            (Some(_), _) => "draining",
        }
    }

    /// Runs until release; returns guardian's exit status.
    pub fn run(mut self) -> i32 {
        loop {
            if let Outcome::Exit(code) = self.wait_and_handle() {
                return code;
            }
        }
    }

    fn next_deadline(&self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut consider = |d: Option<Duration>| {
            if let Some(d) = d {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        };
        if self.stop.is_none() {
            consider(self.settings.timeout.map(|t| self.started + t));
        }
        if let Some(stop) = &self.stop {
            if !stop.escalated {
                consider(Some(stop.deadline));
            }
        }
        consider(self.rescan.map(|(at, _)| at));
        consider(self.abandon_at);
        if let Some(ParentWatch::Poll { next: at, .. }) = &self.parent {
            consider(Some(*at));
        }
        next
    }

    fn wait_and_handle(&mut self) -> Outcome {
        let timeout = self.next_deadline().map(|d| d.saturating_sub(sys::monotonic()));
        // The signalfd and the provider's pidfd need no flag: every wake-up reads the one and
        // reaps for the other.
        let (parent_ready, out_ready, leaf_ready) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(5);
            fds.push(PollFd::new(&self.sigfd, PollFlags::IN));
            if let (true, Some(fd)) = (self.status.is_none(), self.provider.pidfd()) {
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
            let ts = timeout
                .map(|t| rustix::event::Timespec { tv_sec: t.as_secs() as i64, tv_nsec: t.subsec_nanos() as i64 });
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => crate::warn!("poll() failed: {e}"),
            }
            let ready = |slot: Option<usize>| slot.is_some_and(|i| !fds[i].revents().is_empty());
            (ready(parent_slot), ready(out_slot), ready(leaf_slot))
        };
        // Signals first (they may request a stop), then reaping (it may find the provider's
        // exit), then the parent, then timers. Reading the signalfd and reaping are cheap and
        // non-blocking, so both run on every wake-up: a coalesced SIGCHLD can never hide an
        // exit.
        self.drain_signals();
        self.reap();
        if leaf_ready || self.status.is_some() {
            self.read_leaf_events();
        }
        if self.status.is_some() && self.no_children && self.leaf_empty {
            // The kernel says the tree is empty: nothing else matters any more.
            return Outcome::Exit(self.release());
        }
        if parent_ready {
            self.parent = None;
            self.on_parent_death();
        }
        if out_ready {
            self.events.flush();
        }
        self.check_timers();
        self.after_reap()
    }

    /// Re-reads `cgroup.events` (which also re-arms POLLPRI).
    fn read_leaf_events(&mut self) {
        let Some(leaf) = &self.tree.leaf else { return };
        match leaf.populated() {
            Ok(populated) => {
                if !populated && !self.leaf_empty {
                    crate::debug!("{}: populated 0", leaf.path.display());
                }
                self.leaf_empty = !populated;
            }
            Err(e) => crate::debug!("reading {}/cgroup.events failed: {e}", leaf.path.display()),
        }
    }

    fn drain_signals(&mut self) {
        let me = std::process::id();
        loop {
            let info = match sys::read_signalfd(self.sigfd.as_fd()) {
                Ok(Some(info)) => info,
                Ok(None) => return,
                Err(e) => {
                    crate::warn!("reading the signalfd failed: {e}");
                    return;
                }
            };
            if self.parent.as_ref().is_some_and(|p| p.is_death_signal(&info)) {
                // Later reparentings (to a subreaper that then dies) must not fire it again.
                let _ = sys::set_pdeathsig(0);
                self.parent = None;
                self.on_parent_death();
                continue;
            }
            match info.signo {
                libc::SIGCHLD => {} // reaping follows
                // Our own write to a broken events pipe or stderr: not the owner's signal.
                libc::SIGPIPE if info.pid == me => {}
                sig => {
                    crate::info!("received {} from pid {}", signals::name(sig), info.pid);
                    if signals::is_forwarded(sig) {
                        self.forward(sig);
                    }
                    if sig == libc::SIGTERM {
                        self.request_stop(StopReason::Signal);
                    }
                }
            }
        }
    }

    fn forward(&mut self, sig: i32) {
        if self.status.is_some() {
            crate::debug!("{} not forwarded: the provider has exited", signals::name(sig));
            return;
        }
        let (target, res) = match self.settings.forward_to {
            ForwardTo::Provider => ("provider", self.provider.signal(sig)),
            ForwardTo::Group => ("group", self.provider.signal_group(sig)),
        };
        if let Err(e) = &res {
            crate::debug!("forwarding {} to the {target} failed: {e}", signals::name(sig));
        }
        self.events.emit(
            "signal",
            json!({"signal": signals::name(sig), "target": target, "pid": self.provider.pid, "reason": "forwarded"}),
        );
    }

    /// Sends `sig` to the provider (per --forward-to) on guardian's own initiative.
    fn signal_provider(&mut self, sig: i32, reason: &str) {
        if self.status.is_some() {
            return;
        }
        let (target, res) = match (self.settings.forward_to, sig) {
            (_, libc::SIGKILL) | (ForwardTo::Provider, _) => ("provider", self.provider.signal(sig)),
            (ForwardTo::Group, _) => ("group", self.provider.signal_group(sig)),
        };
        if let Err(e) = &res {
            crate::debug!("sending {} to the provider failed: {e}", signals::name(sig));
        }
        self.events.emit(
            "signal",
            json!({"signal": signals::name(sig), "target": target, "pid": self.provider.pid, "reason": reason}),
        );
    }

    fn reap(&mut self) {
        loop {
            match sys::reap_one() {
                Ok(Reaped::Child(pid, status)) if pid == self.provider.pid && self.status.is_none() => {
                    self.on_provider_exit(status);
                }
                Ok(Reaped::Child(pid, _)) => {
                    crate::debug!("reaped descendant {pid}");
                    self.tree.stats.reaped += 1;
                    self.progress();
                }
                Ok(Reaped::NoneReady) => {
                    self.no_children = false;
                    return;
                }
                Ok(Reaped::NoChildren) => {
                    self.no_children = true;
                    return;
                }
                Err(e) => {
                    crate::warn!("waitpid() failed: {e}");
                    return;
                }
            }
        }
    }

    fn on_provider_exit(&mut self, status: WaitStatus) {
        self.provider.mark_reaped();
        self.status = Some(status);
        let now = sys::monotonic();
        self.exited_at = Some(now);
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
        if self.gave_terminal {
            self.gave_terminal = false;
            if sys::tcgetpgrp(0).ok() == Some(self.provider_pgid) {
                let _ = sys::tcsetpgrp(0, sys::getpgrp());
            }
        }
    }

    /// After reaping: start draining once the provider is gone, or release when nothing is left.
    fn after_reap(&mut self) -> Outcome {
        if self.status.is_none() {
            return Outcome::Continue;
        }
        if self.no_children && self.leaf_empty {
            return Outcome::Exit(self.release());
        }
        if !self.rounds && (self.stop.is_some() || !self.settings.wait_descendants) {
            self.start_rounds();
        }
        Outcome::Continue
    }

    /// Starts stopping the descendants: a first round now, rescans on the backoff timer. Arms
    /// the grace deadline if no stop was armed yet (the provider exited on its own).
    fn start_rounds(&mut self) {
        self.rounds = true;
        let now = sys::monotonic();
        let reason = self
            .stop
            .get_or_insert(Stop {
                reason: StopReason::ProviderExit,
                deadline: now + self.settings.grace,
                escalated: false,
            })
            .reason;
        crate::debug!("{}: stopping descendants ({})", self.state_name(), reason.name());
        if self.stop.as_ref().is_some_and(|s| !s.escalated && s.deadline <= now) {
            // No grace left (--grace 0): a stop-signal round would only delay the SIGKILL.
            self.escalate();
            return;
        }
        self.round();
        self.rescan = Some((now + RESCAN_FIRST, RESCAN_FIRST));
    }

    /// One signalling round over the descendants: the stop signal before the grace deadline,
    /// SIGKILL after it. The provider, while unreaped, is left to its own handle.
    /// Returns how many processes it signalled.
    fn round(&mut self) -> usize {
        let escalated = self.stop.as_ref().is_some_and(|s| s.escalated);
        let (phase, reason) = if escalated { (Phase::Kill, "kill") } else { (Phase::Stop, "stop") };
        let provider = self.status.is_none().then_some(self.provider.pid);
        // With a leaf, `cgroup.procs` names the tree and /proc is scanned only for what the
        // leaf cannot show: descendants that moved out of it (once it is empty, and at the
        // SIGKILL deadline). Without one, every round scans.
        let scan = self.tree.leaf.is_none() || self.leaf_empty || escalated && !self.killed_outside_leaf;
        self.killed_outside_leaf |= escalated && scan;
        self.tree.round(phase, self.settings.stop_signal, provider, reason, scan, &mut self.events)
    }

    fn request_stop(&mut self, reason: StopReason) {
        if self.stop.is_some() {
            return;
        }
        let now = sys::monotonic();
        let grace = self.settings.grace;
        crate::info!("{}: stop requested ({}), grace {:?}", self.state_name(), reason.name(), grace);
        self.stop = Some(Stop { reason, deadline: now + grace, escalated: false });
        self.events.emit("stopping", json!({"reason": reason.name(), "grace_ms": grace.as_millis() as u64}));
        if self.status.is_none() {
            if reason == StopReason::Signal {
                // The SIGTERM was already forwarded: the provider stops its own tree first.
                return;
            }
            // guardian's own decision (timeout, parent death): the whole tree hears it now.
            self.signal_provider(self.settings.stop_signal, reason.name());
        }
        if !self.rounds {
            self.start_rounds();
        }
    }

    fn on_parent_death(&mut self) {
        crate::info!("parent process died; tearing the tree down");
        self.request_stop(StopReason::ParentDied);
    }

    fn check_timers(&mut self) {
        let now = sys::monotonic();
        if let Some(ParentWatch::Poll { ppid, next }) = &mut self.parent {
            if now >= *next {
                if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(*ppid) {
                    self.parent = None;
                    self.on_parent_death();
                } else {
                    *next = now + PARENT_POLL;
                }
            }
        }
        if self.stop.is_none() {
            if let Some(t) = self.settings.timeout {
                if now >= self.started + t {
                    crate::info!("timeout of {t:?} reached");
                    self.timed_out = true;
                    self.request_stop(StopReason::Timeout);
                }
            }
        }
        if let Some(stop) = &self.stop {
            if !stop.escalated && now >= stop.deadline {
                self.escalate();
            }
        }
        if let Some((at, step)) = self.rescan {
            if now >= at && self.rounds {
                // A /proc round that still found newcomers is followed by another at once: a
                // tree that keeps forking, or hopping to new pids (fork, setsid, parent exits),
                // is chased at scan speed. Backing off between such rounds let every round miss
                // the one child born after its scan, forever. (Only scans count newcomers: a
                // broadcast or cgroup.kill round reports every time, and needs no chase.)
                let sent = self.round();
                let chase = sent > 0 && self.tree.discovery == Discovery::Scan && self.tree.leaf.is_none();
                if chase {
                    // Newcomers were killed: progress, so the give-up timer starts again.
                    self.progress();
                }
                self.rescan = Some(if chase {
                    (now, RESCAN_FIRST)
                } else {
                    let step = (step * 2).min(RESCAN_MAX);
                    (now + step, step)
                });
            }
        }
        if self.abandon_at.is_some_and(|at| now >= at) {
            self.abandon();
        }
    }

    /// The grace period is over: SIGKILL the provider (if it lives) and every descendant.
    fn escalate(&mut self) {
        let Some(stop) = self.stop.as_mut() else {
            return;
        };
        stop.escalated = true;
        let now = sys::monotonic();
        crate::info!("grace period over; sending SIGKILL to the tree");
        self.signal_provider(libc::SIGKILL, "kill");
        self.rounds = true;
        self.round();
        self.rescan = Some((now + RESCAN_FIRST, RESCAN_FIRST));
        self.abandon_at = Some(now + self.settings.grace.max(MIN_ABANDON_WAIT));
    }

    /// A descendant was killed or reaped: the bounded wait for ECHILD starts again.
    fn progress(&mut self) {
        if let Some(at) = self.abandon_at.as_mut() {
            *at = sys::monotonic() + self.settings.grace.max(MIN_ABANDON_WAIT);
        }
    }

    /// SIGKILL was sent long ago and children remain that guardian cannot see or signal.
    /// Exiting is honest only as a failure: `error`, never `released`.
    fn abandon(&mut self) -> ! {
        let unkillable = &self.tree.stats.unkillable;
        let message = format!(
            "descendants remain after SIGKILL (not permitted to signal: {:?}; others may be hidden from /proc); giving up",
            unkillable
        );
        crate::fatal!("{message}");
        if let Some(leaf) = self.tree.leaf.as_mut() {
            leaf.remove_now();
        }
        self.events.emit("error", json!({"status": 125, "message": message, "unkillable": unkillable}));
        let events = std::mem::replace(&mut self.events, Events::disabled());
        events.close(EVENTS_CLOSE_WAIT);
        std::process::exit(125);
    }

    fn release(&mut self) -> i32 {
        let status = self.status.unwrap_or(WaitStatus(0));
        let code = if self.timed_out {
            124
        } else {
            match (status.exit_code(), status.signal()) {
                (Some(c), _) => c,
                (None, Some(s)) => 128 + s,
                (None, None) => 125,
            }
        };
        let (mut cgroup_path, mut oom_kill) = (None, None);
        if let Some(leaf) = self.tree.leaf.as_mut() {
            cgroup_path = Some(leaf.path_text());
            oom_kill = leaf.oom_kills();
            if let Err(e) = leaf.remove() {
                crate::warn!("could not remove the leaf cgroup {}: {e}; 'guardian sweep' will", leaf.path.display());
            } else {
                crate::debug!("removed the leaf cgroup {}", leaf.path.display());
            }
        }
        if let Some(n) = oom_kill.filter(|&n| n > 0) {
            crate::warn!("the kernel's OOM killer killed {n} process(es) in the leaf (memory.max)");
        }
        let teardown_ms = self.exited_at.map_or(0.0, |t| (sys::monotonic() - t).as_micros() as f64 / 1000.0);
        let stats = &self.tree.stats;
        crate::info!(
            "released: status {code}, {} signalled, {} killed, {} reaped, teardown {teardown_ms:.3} ms",
            stats.signalled,
            stats.killed,
            stats.reaped
        );
        let signalled = match self.tree.discovery {
            crate::teardown::Discovery::Scan => Some(stats.signalled),
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
