//! teardown: signalling every descendant guardian has, in rounds. A round discovers the
//! tree (a walk of the `/proc/PID/task/TID/children` files; where the kernel lacks them, a
//! listing of all of `/proc` that reaches the pids born since the last round first; or
//! `kill(-1)` as PID 1 of its namespace), opens a pidfd per descendant, revalidates its
//! identity (start time, parent still in the tree, pidfd still naming that pid), sends the
//! signal and closes the pidfd again, so guardian never holds one fd per descendant.
//! guardian's own children, pinned until it reaps them, are signalled by pid. Each
//! process gets the stop signal once and SIGKILL once; later rounds only reach newcomers. A
//! process is skipped as dead only when it has exited entirely ([`Stat::is_dead`]: a `Z`
//! main thread with live threads is a live process), and only signals that were delivered
//! are reported; a process guardian may not signal is named in `unkillable`. The supervise
//! loop decides when rounds run and when the grace period ends; the kernel's ECHILD decides
//! when the tree is gone.
//!
//! In cgroup mode a round first covers the members of the provider's leaf (read from
//! `cgroup.procs`, recursively; each verified through pidfd_open + `/proc/PID/cgroup` +
//! the pidfd's fdinfo), then the subreaper scan covers descendants that left the leaf. The
//! kill phase writes `cgroup.kill` instead of signalling members one by one.

use std::collections::HashSet;
use std::time::Duration;

use crate::cgroup::Leaf;
use crate::events::{Event, Events, Signal};
use crate::pidref::{self, PidRef};
use crate::proctree::{self, Proc, Stat};
use crate::signals::StopSignal;
use crate::{signals, sys};

mod leaf;
mod plan;
mod scan;

pub use plan::Phase;
use plan::{Ask, Delivered, Finder, LeafKilled, Mode};

/// How guardian finds its descendants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// Scan `/proc` (which belongs to guardian's PID namespace).
    Scan,
    /// PID 1 of its PID namespace: every other process in it is guardian's descendant, so
    /// `kill(-1)` reaches exactly the tree. SIGKILL rounds are `kill(-1)`. The stop signal
    /// goes to each process once: through the `/proc` scan when `/proc` is the namespace's
    /// own, else as one `kill(-1)` per teardown.
    Broadcast,
    /// Neither: only the provider can be signalled; orphans are waited for.
    Blind,
}

impl Discovery {
    pub fn name(self) -> &'static str {
        match self {
            Discovery::Scan => "scan",
            Discovery::Broadcast => "broadcast",
            Discovery::Blind => "blind",
        }
    }
}

/// What one round sends, to whom it does not, and why (for the events).
struct Round<'r> {
    ask: Ask,
    sig: i32,
    reason: &'r str,
}

impl Round<'_> {
    fn phase(&self) -> Phase {
        self.ask.phase
    }
}

#[derive(Default, Debug)]
pub struct Stats {
    /// Descendants sent the stop signal.
    pub signalled: u64,
    /// Descendants sent SIGKILL.
    pub killed: u64,
    /// Descendants reaped by guardian.
    pub reaped: u64,
    /// Descendants guardian may not signal (EPERM), by pid.
    pub unkillable: Vec<i32>,
}

/// The executor of the rounds: it asks the kernel ([`Facts`], `/proc`, `cgroup.procs`), lets
/// the planner (`plan.rs`) decide, opens pidfds, verifies identity, sends and reports.
pub struct Tree {
    pub discovery: Discovery,
    /// The discovery mode's own state.
    mode: Mode,
    self_pid: i32,
    proc: Option<Proc>,
    /// pidfds may be opened and signalled through (false once refused).
    use_pidfd: bool,
    stop_signal: StopSignal,
    delivered: Delivered,
    pub stats: Stats,
    /// The provider's leaf cgroup (cgroup mode), and its rounds' state.
    pub leaf: Option<Leaf>,
    leaf_rounds: LeafRounds,
    /// How many children guardian had at the last read of its own `children` file, less
    /// those reaped since (what the supervise loop paces its reaping by).
    children_hint: usize,
}

/// The leaf's part of the rounds.
#[derive(Default)]
struct LeafRounds {
    /// `cgroup.kill` (or its fallback) was reported already.
    kill_reported: bool,
    /// Members that this round's `cgroup.kill` reached (for the first time: `first`).
    killed: LeafKilled,
    /// When the leaf's members were last given the stop signal.
    stopped_at: Option<Duration>,
    /// Every member any `cgroup.kill` reached, counted once in `stats.killed`.
    killed_ever: HashSet<i32>,
}

impl Tree {
    /// `proc` is used in scan mode, and in broadcast mode when it is the namespace's own.
    /// `pidfds`: the start-up probe found `pidfd_send_signal` usable.
    pub fn new(
        discovery: Discovery,
        proc: Option<Proc>,
        leaf: Option<Leaf>,
        stop_signal: StopSignal,
        pidfds: bool,
    ) -> Tree {
        let (proc, mode) = match discovery {
            Discovery::Scan => (proc, Mode::Scan { finder: Finder::Undecided }),
            Discovery::Broadcast => {
                let own = proc.and_then(|mut p| p.own_namespace().is_ok_and(|own| own).then_some(p));
                let finder = own.is_some().then_some(Finder::Undecided);
                (own, Mode::Broadcast { finder, namespace_stopped: false })
            }
            Discovery::Blind => (None, Mode::Blind),
        };
        Tree {
            discovery,
            mode,
            self_pid: std::process::id() as i32,
            proc,
            use_pidfd: pidfds,
            stop_signal,
            delivered: Delivered::default(),
            stats: Stats::default(),
            leaf,
            leaf_rounds: LeafRounds::default(),
            children_hint: 0,
        }
    }

    /// Whether rounds walk the `children` files (the kernel has them) rather than list all of
    /// `/proc`; asked once, at the first round that needs to know.
    fn walks(&mut self) -> bool {
        let proc = self.proc.as_mut();
        let Some(finder) = self.mode.finder() else { return false };
        if let Finder::Undecided = finder {
            let seen = proc.is_some();
            let walk = proc.is_some_and(|p| p.has_children_files()) && !crate::test_hooks::forced_full_scan();
            if seen {
                crate::log::debug!(
                    "descendants are found by {}",
                    if walk { "walking /proc/PID/task/TID/children" } else { "listing all of /proc" }
                );
            }
            *finder = if walk { Finder::Walk(Default::default()) } else { Finder::Listing(Default::default()) };
        }
        matches!(finder, Finder::Walk(_))
    }

    /// About how many children guardian has (as of its last round, less those reaped since).
    pub fn children_hint(&self) -> usize {
        self.children_hint
    }

    /// guardian reaped `pid`, one of its children: from now on the pid may name another process.
    pub fn reaped(&mut self, pid: i32) {
        self.stats.reaped += 1;
        self.children_hint = self.children_hint.saturating_sub(1);
        self.delivered.reaped(pid);
    }

    /// Whether the round that just signalled `sent` processes must be followed by another at
    /// once ([`Mode::chase`]).
    pub fn chase(&self, sent: usize) -> bool {
        self.mode.chase(sent, self.leaf.is_some())
    }

    /// One round: sends the phase's signal to every descendant that has not had it yet.
    /// `provider` is skipped while it is unreaped (it has its own handle); `scan` says whether
    /// to look through /proc (with a leaf, only for descendants that left it). Returns how
    /// many processes were signalled.
    pub fn round(
        &mut self,
        phase: Phase,
        provider: Option<i32>,
        reason: &str,
        scan: bool,
        events: &mut Events,
    ) -> usize {
        let sig = match phase {
            Phase::Stop => self.stop_signal.get(),
            Phase::Kill => libc::SIGKILL,
        };
        let r = Round { ask: Ask { phase, provider, group: None, now: sys::monotonic() }, sig, reason };
        self.leaf_rounds.killed = LeafKilled::default();
        if let Some(Finder::Walk(w)) = self.mode.finder() {
            w.chase = false;
        }
        let in_leaf = self.leaf_round(&r, events);
        let stops_each = self.stops_each_process();
        in_leaf
            + match &self.mode {
                Mode::Blind => 0,
                // With the namespace's own /proc, a stop round signals each process once, as a
                // scan does (a repeated `kill(-1)` would repeat the stop signal to everyone).
                Mode::Broadcast { .. } if phase == Phase::Stop && stops_each => {
                    if scan {
                        self.scan_round(&r, events)
                    } else {
                        0
                    }
                }
                Mode::Broadcast { .. } => self.broadcast(&r, events),
                Mode::Scan { .. } if scan => self.scan_round(&r, events),
                Mode::Scan { .. } => 0,
            }
    }

    /// Whether the next stop round reaches the unreaped provider too, so the caller must not
    /// send it the stop signal apart (it would get it twice): broadcast mode without the
    /// namespace's `/proc`, where the stop round is one `kill(-1)` that cannot leave it out.
    pub fn stop_round_reaches_provider(&self) -> bool {
        matches!(self.mode, Mode::Broadcast { namespace_stopped: false, .. }) && !self.stops_each_process()
    }

    /// Whether rounds reach every descendant (not in blind mode). Then guardian's own stop
    /// signal to the provider must not go to its process group too: the group's members would
    /// hear it twice.
    pub fn rounds_reach_descendants(&self) -> bool {
        !matches!(self.mode, Mode::Blind)
    }

    /// Whether [`Tree::stop_group`] can reach the provider's group member by member (it needs
    /// a `/proc` of guardian's own namespace and pidfds).
    pub fn can_stop_group(&self) -> bool {
        self.rounds_reach_descendants() && self.proc.is_some() && self.use_pidfd
    }

    /// The owner's stop request with `--forward-to group`: the stop signal (then SIGCONT) to
    /// every descendant in process group `pgid` but the provider (which the caller signals),
    /// each verified and recorded like a round's, so the rounds that follow the provider's exit
    /// do not repeat it: each process hears the stop signal once per teardown.
    pub fn stop_group(&mut self, pgid: i32, provider: i32, events: &mut Events) -> usize {
        if !self.can_stop_group() {
            return 0;
        }
        let ask = Ask { phase: Phase::Stop, provider: Some(provider), group: Some(pgid), now: sys::monotonic() };
        let r = Round { ask, sig: self.stop_signal.get(), reason: "forwarded" };
        self.scan_round(&r, events)
    }

    /// As PID 1: whether stop rounds signal each process through the namespace's `/proc`
    /// (which needs pidfds for all but guardian's direct children), rather than `kill(-1)`.
    fn stops_each_process(&self) -> bool {
        self.proc.is_some() && self.use_pidfd
    }

    /// Counts a round's signals and reports them in one `signal` event: target `cgroup` (with
    /// the leaf's path) for a leaf's members, `descendants` for the rest.
    fn report(&mut self, r: &Round<'_>, sent: &[i32], leaf_path: Option<String>, events: &mut Events) {
        match r.phase() {
            Phase::Stop => self.stats.signalled += sent.len() as u64,
            Phase::Kill => self.stats.killed += sent.len() as u64,
        }
        if sent.is_empty() {
            return;
        }
        let sig = signals::name(r.sig);
        crate::log::debug!(
            "sent {sig} to {} {} ({})",
            sent.len(),
            if leaf_path.is_some() { "leaf members" } else { "descendants" },
            r.reason
        );
        let broadcast = matches!(self.mode, Mode::Broadcast { .. });
        let target = plan::target(leaf_path.is_some(), broadcast, r.ask.group.is_some());
        let pids = Some(sent.to_vec());
        events.emit(Event::Signal(Signal {
            signal: sig,
            target,
            pid: None,
            cgroup: leaf_path,
            pids,
            reason: r.reason.into(),
        }));
    }

    /// `kill(-1)`: every process of the namespace but guardian. SIGKILL in every kill round
    /// (repeating it costs nothing and reaches newcomers); the stop signal once per teardown,
    /// since nothing tells a newcomer from a process that already had it.
    fn broadcast(&mut self, r: &Round<'_>, events: &mut Events) -> usize {
        let (sig, reason) = (r.sig, r.reason);
        let Mode::Broadcast { namespace_stopped, .. } = self.mode else { return 0 };
        let one_by_one = !self.delivered.stopped.is_empty() || self.stats.signalled > 0;
        if !plan::broadcasts(r.phase(), namespace_stopped, one_by_one) {
            return 0;
        }
        // PID 1 of its own namespace: every other process in it is guardian's descendant.
        let kill = |s: i32| sys::kill(-1, s);
        let res = match r.phase() {
            Phase::Stop => pidref::and_cont(kill, sig),
            Phase::Kill => kill(sig),
        };
        if let Err(e) = res {
            if e.raw_os_error() != Some(libc::ESRCH) {
                crate::log::warn!("kill(-1, {}) failed: {e}", signals::name(sig));
            }
            return 0;
        }
        // With the namespace's own /proc, who got the SIGKILL is counted afterwards (the kill
        // is not delayed by it): every other process of the namespace is a descendant.
        match r.phase() {
            Phase::Kill => self.count_namespace_kill(r.ask.provider),
            Phase::Stop => {
                if let Mode::Broadcast { namespace_stopped, .. } = &mut self.mode {
                    *namespace_stopped = true;
                }
            }
        }
        events.emit(Event::Signal(Signal {
            signal: signals::name(sig),
            target: "namespace",
            pid: None,
            cgroup: None,
            pids: None,
            reason: reason.into(),
        }));
        crate::log::debug!("sent {} to every process in the namespace ({reason})", signals::name(sig));
        1
    }

    /// As PID 1 with the namespace's own `/proc`, right after a `kill(-1, SIGKILL)`: adds the
    /// processes it reached to `stats.killed`: every pid listed but guardian, the unreaped
    /// provider (not a descendant), the leaf's members (`cgroup.kill` counted them) and those
    /// counted by an earlier round. A readdir, no `stat`: the dying show as zombies by now,
    /// and a pid cannot be reused before guardian reaps it. Without that `/proc` nothing can be
    /// counted.
    fn count_namespace_kill(&mut self, provider: Option<i32>) {
        let me = self.self_pid;
        let Some(proc) = self.proc.as_mut() else { return };
        let Ok(pids) = proc.list() else { return };
        for pid in pids {
            if pid == me || Some(pid) == provider || self.leaf_rounds.killed_ever.contains(&pid) {
                continue;
            }
            if self.delivered.killed.insert(pid, 0).is_none() {
                self.stats.killed += 1;
            }
        }
    }

    /// Whether `stats.signalled` counts every process that got the stop signal: a scan, or as
    /// PID 1 a stop round that signals each process through the namespace's `/proc`.
    pub fn counts_stop_signals(&self) -> bool {
        self.discovery == Discovery::Scan || (self.discovery == Discovery::Broadcast && self.stops_each_process())
    }

    /// Sends the phase's signal to one scanned descendant, unless it had it already
    /// ([`plan::signals`]) or is not the process the scan saw any more.
    fn signal_one(
        &mut self,
        d: &Stat,
        members: &HashSet<i32>,
        r: &Round<'_>,
        sent: &mut Vec<i32>,
        events: &mut Events,
    ) {
        if !plan::signals(d, &r.ask, &mut self.delivered, &self.leaf_rounds.killed) {
            return;
        }
        if let Some(handle) = self.open_verified(d, members, events) {
            self.deliver(r, &handle, (d.pid, d.starttime), sent);
        }
    }

    /// Sends the round's signal (the stop signal then SIGCONT, or SIGKILL) through `handle`.
    fn send(&self, r: &Round<'_>, handle: &PidRef) -> std::io::Result<()> {
        match r.phase() {
            Phase::Stop => handle.signal_and_cont(self.stop_signal),
            Phase::Kill => handle.signal(libc::SIGKILL),
        }
    }

    /// Sends the round's signal through a verified handle and records it. A process guardian
    /// may not signal (it changed its user id) is named once, in `unkillable`.
    fn deliver(&mut self, r: &Round<'_>, handle: &PidRef, key: (i32, u64), sent: &mut Vec<i32>) {
        match self.send(r, handle) {
            Ok(()) => {
                sent.push(key.0);
                self.delivered.of(r.phase()).insert(key.0, key.1);
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => self.not_permitted(key.0, "descendant"),
            Err(_) => {} // ESRCH: already gone.
        }
    }

    /// Names a process guardian may not signal in `unkillable`, once.
    fn not_permitted(&mut self, pid: i32, what: &str) {
        if !self.stats.unkillable.contains(&pid) {
            crate::log::warn!("not permitted to signal {what} {pid} (it changed its user id)");
            self.stats.unkillable.push(pid);
        }
    }

    /// Accounts for a signal guardian sent the provider; returns whether it was delivered, so
    /// the caller reports only what was. A provider guardian may not signal (it changed its
    /// user id) is named in `unkillable`.
    pub fn provider_signalled(&mut self, pid: i32, sig: i32, res: &std::io::Result<()>) -> bool {
        match res {
            Ok(()) => true,
            Err(e) => {
                crate::log::debug!("sending {} to the provider {pid} failed: {e}", signals::name(sig));
                if e.raw_os_error() == Some(libc::EPERM) {
                    self.not_permitted(pid, "the provider");
                }
                false
            }
        }
    }

    /// The processes of the tree that still live, as far as `/proc` shows them (nothing
    /// without it): what an abandoned teardown leaves behind.
    pub fn remaining(&mut self) -> Vec<i32> {
        let me = self.self_pid;
        let walk = self.walks();
        let Some(proc) = self.proc.as_mut() else {
            return Vec::new();
        };
        let desc = if walk {
            proc.walk(me)
        } else {
            let pids = proc.list().unwrap_or_default();
            proctree::descendants(&proc.stats(&pids), me)
        };
        desc.iter().filter(|s| !s.is_dead()).map(|s| s.pid).collect()
    }

    /// A handle on `seen` only if it is still the process the scan saw: pidfd_open, then its
    /// `/proc` start time and parent are rechecked and the pidfd is confirmed to name that pid.
    /// Without pidfds only unreaped direct children are signalled (the tree is peeled from the
    /// top: grandchildren become children when their parents die).
    fn open_verified(&mut self, seen: &Stat, members: &HashSet<i32>, events: &mut Events) -> Option<PidRef> {
        // A process the scan saw as guardian's own child is still that child: only guardian
        // reaps it, and guardian reaps nothing during a round, so its pid cannot have changed
        // owner since the scan read its `stat`. `kill(pid)` reaches it with no pidfd and no
        // re-read (the teardown's common case: orphans are reparented to guardian).
        if seen.ppid == self.self_pid {
            return Some(PidRef::child(seen.pid, None));
        }
        if self.use_pidfd {
            match sys::pidfd_open(seen.pid) {
                Ok(fd) => {
                    let proc = self.proc.as_mut()?;
                    let now = proc.stat(seen.pid)?;
                    let same = now.starttime == seen.starttime && members.contains(&now.ppid);
                    return (same && proc.pidfd_pid(&fd) == Some(seen.pid)).then(|| PidRef::verified(seen.pid, fd));
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return None,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    events.fallback("pidfd_open", &e, "signalling only unreaped direct children");
                    self.use_pidfd = false;
                }
                Err(e) => {
                    crate::log::debug!(
                        "pidfd_open({}) failed: {e}; signalling it only if it is a direct child",
                        seen.pid
                    );
                }
            }
        }
        // Without pidfds only direct children (handled above) can be signalled safely.
        None
    }
}
