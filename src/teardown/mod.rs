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

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::cgroup::Leaf;
use crate::events::{Event, Events, Signal};
use crate::pidref::PidRef;
use crate::proctree::{self, Proc, Stat};
use crate::{signals, spawn, sys};

mod leaf;
mod scan;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The stop signal (followed by SIGCONT so stopped processes act on it).
    Stop,
    /// SIGKILL.
    Kill,
}

/// What one round sends, to whom it does not, and why (for the events).
struct Round<'r> {
    phase: Phase,
    sig: i32,
    /// Follow the signal with SIGCONT, so stopped processes act on it.
    cont: bool,
    /// The provider while unreaped: it has its own handle, rounds skip it.
    provider: Option<i32>,
    reason: &'r str,
    /// Only the members of this process group (a stop request with `--forward-to group`).
    group: Option<i32>,
    /// When the round started (CLOCK_MONOTONIC).
    now: Duration,
}

/// How often a stop round reads again the `children` of a child of guardian that had the stop
/// signal and still lives. A process acting on the stop signal (dying, or cleaning up) is read
/// at the round that signals it; what it forks afterwards is a newcomer for a later round, and
/// every newcomer still gets SIGKILL at the end of the grace. Reading each live child's file at
/// every rescan (10 ms apart at first) cost more than signalling the whole tree while thousands
/// were dying.
const STOPPED_REREAD: Duration = Duration::from_millis(100);

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

pub struct Tree {
    pub discovery: Discovery,
    self_pid: i32,
    proc: Option<Proc>,
    use_pidfd: bool,
    /// Who had the stop signal, and SIGKILL: pid -> start time (a pid names one live process
    /// at a time, so a newer process under a recycled pid replaces the entry).
    stopped: HashMap<i32, u64>,
    killed: HashMap<i32, u64>,
    pub stats: Stats,
    /// The provider's leaf cgroup (cgroup mode).
    pub leaf: Option<Leaf>,
    /// `cgroup.kill` (or its fallback) was reported already.
    leaf_kill_reported: bool,
    /// Members that this round's `cgroup.kill` reached: the scan does not SIGKILL them again.
    leaf_killed_now: HashSet<i32>,
    /// How many children guardian had at the last read of its own `children` file, less
    /// those reaped since (what the supervise loop paces its reaping by).
    children_hint: usize,
    /// Members that this round's `cgroup.kill` reached for the first time.
    leaf_killed_first: HashSet<i32>,
    /// When the leaf's members were last given the stop signal.
    leaf_stopped_at: Option<Duration>,
    /// Every member any `cgroup.kill` reached, counted once in `stats.killed`.
    leaf_killed: HashSet<i32>,
    /// The pids of the previous round's `/proc` listing: any other pid is a newcomer.
    /// Rounds walk the `children` files instead of listing all of `/proc`.
    /// Decided at the first round that scans (start-up does not pay for a tree it may never
    /// have): `None` until then.
    walk: Option<bool>,
    listed: HashSet<i32>,
    /// The descendants the previous round's scan found, with their start times.
    known: HashMap<i32, u64>,
    /// Broadcast mode without a `/proc` of the namespace: the stop signal's `kill(-1)` was sent.
    namespace_stopped: bool,
    /// guardian's own children that a walk SIGKILLed before reading their `children` files,
    /// until guardian reaps them (their pids are pinned until then): they cannot fork any
    /// more and their children were read after the kill, so later kill rounds skip them.
    killed_children: HashSet<i32>,
    /// guardian's own children that had the stop signal, until guardian reaps them, with
    /// when their `children` file was last read.
    stopped_children: HashMap<i32, Duration>,
    /// The last round signalled a process whose children were read before the signal (or
    /// one of guardian's children exited before its `children` file was read): the next round
    /// follows at once.
    chase: bool,
    /// The last round signalled a deeper descendant: the next one reads the `children` of
    /// every child of guardian, however recently they were read ([`STOPPED_REREAD`]).
    reread_children: bool,
}

impl Tree {
    /// `proc` is used in scan mode, and in broadcast mode when it is the namespace's own.
    pub fn new(discovery: Discovery, proc: Option<Proc>, leaf: Option<Leaf>) -> Tree {
        let proc = match discovery {
            Discovery::Scan => proc,
            Discovery::Broadcast => proc.and_then(|mut p| p.own_namespace().is_ok_and(|own| own).then_some(p)),
            Discovery::Blind => None,
        };
        Tree {
            walk: None,
            discovery,
            self_pid: std::process::id() as i32,
            proc,
            use_pidfd: crate::pidref::pidfd_signal_usable(),
            stopped: HashMap::new(),
            killed: HashMap::new(),
            stats: Stats::default(),
            leaf,
            leaf_kill_reported: false,
            leaf_killed_now: HashSet::new(),
            leaf_killed_first: HashSet::new(),
            children_hint: 0,
            leaf_stopped_at: None,
            leaf_killed: HashSet::new(),
            listed: HashSet::new(),
            known: HashMap::new(),
            namespace_stopped: false,
            killed_children: HashSet::new(),
            stopped_children: HashMap::new(),
            chase: false,
            reread_children: false,
        }
    }

    /// Whether rounds walk the `children` files (the kernel has them) rather than list all of
    /// `/proc`; asked once, at the first round that needs to know.
    fn walks(&mut self) -> bool {
        if let Some(walk) = self.walk {
            return walk;
        }
        let walk = self.proc.as_mut().is_some_and(|p| p.has_children_files()) && !crate::test_hooks::forced_full_scan();
        if self.proc.is_some() {
            crate::debug!(
                "descendants are found by {}",
                if walk { "walking /proc/PID/task/TID/children" } else { "listing all of /proc" }
            );
        }
        self.walk = Some(walk);
        walk
    }

    /// About how many children guardian has (as of its last round, less those reaped since).
    pub fn children_hint(&self) -> usize {
        self.children_hint
    }

    /// guardian reaped `pid`, one of its children: from now on the pid may name another process.
    pub fn reaped(&mut self, pid: i32) {
        self.stats.reaped += 1;
        self.children_hint = self.children_hint.saturating_sub(1);
        self.killed_children.remove(&pid);
        self.stopped_children.remove(&pid);
    }

    /// Whether the round that just signalled `sent` processes must be followed by another at
    /// once: a walk of the `children` files that signalled a process whose children it read
    /// before the signal, or left children of an exited child of guardian to the next read of
    /// guardian's own (see [`Tree::walk_round`]), also with a leaf (descendants outside it);
    /// or a listing of `/proc` (not a broadcast, not a leaf's `cgroup.procs`) that signalled
    /// anyone, since it may have missed a child born after it read its parent.
    pub fn chase(&self, sent: usize) -> bool {
        match (self.discovery, self.walk) {
            (Discovery::Scan | Discovery::Broadcast, Some(true)) => self.chase,
            (Discovery::Scan, _) => sent > 0 && self.leaf.is_none(),
            _ => false,
        }
    }

    /// One round: sends the phase's signal to every descendant that has not had it yet.
    /// `provider` is skipped while it is unreaped (it has its own handle); `scan` says whether
    /// to look through /proc (with a leaf, only for descendants that left it). Returns how
    /// many processes were signalled.
    pub fn round(
        &mut self,
        phase: Phase,
        stop_signal: i32,
        provider: Option<i32>,
        reason: &str,
        scan: bool,
        events: &mut Events,
    ) -> usize {
        let sig = match phase {
            Phase::Stop => stop_signal,
            Phase::Kill => libc::SIGKILL,
        };
        let cont = phase == Phase::Stop && sig != libc::SIGKILL && sig != libc::SIGCONT;
        let r = Round { phase, sig, cont, provider, reason, group: None, now: sys::monotonic() };
        self.leaf_killed_now.clear();
        self.leaf_killed_first.clear();
        self.chase = false;
        let in_leaf = self.leaf_round(&r, events);
        in_leaf
            + match self.discovery {
                Discovery::Blind => 0,
                // With the namespace's own /proc, a stop round signals each process once, as a
                // scan does (a repeated `kill(-1)` would repeat the stop signal to everyone).
                Discovery::Broadcast if r.phase == Phase::Stop && self.stops_each_process() => {
                    if scan {
                        self.scan_round(&r, events)
                    } else {
                        0
                    }
                }
                Discovery::Broadcast => self.broadcast(&r, events),
                Discovery::Scan if scan => self.scan_round(&r, events),
                Discovery::Scan => 0,
            }
    }

    /// Whether the next stop round reaches the unreaped provider too, so the caller must not
    /// send it the stop signal apart (it would get it twice): broadcast mode without the
    /// namespace's `/proc`, where the stop round is one `kill(-1)` that cannot leave it out.
    pub fn stop_round_reaches_provider(&self) -> bool {
        self.discovery == Discovery::Broadcast && !self.stops_each_process() && !self.namespace_stopped
    }

    /// Whether rounds reach every descendant (not in blind mode). Then guardian's own stop
    /// signal to the provider must not go to its process group too: the group's members would
    /// hear it twice.
    pub fn rounds_reach_descendants(&self) -> bool {
        self.discovery != Discovery::Blind
    }

    /// Whether [`Tree::stop_group`] can reach the provider's group member by member (it needs
    /// a `/proc` of guardian's own namespace and pidfds).
    pub fn can_stop_group(&self) -> bool {
        self.discovery != Discovery::Blind && self.proc.is_some() && self.use_pidfd
    }

    /// The owner's stop request with `--forward-to group`: the stop signal (then SIGCONT) to
    /// every descendant in process group `pgid` but the provider (which the caller signals),
    /// each verified and recorded like a round's, so the rounds that follow the provider's exit
    /// do not repeat it: each process hears the stop signal once per teardown.
    pub fn stop_group(&mut self, stop_signal: i32, pgid: i32, provider: i32, events: &mut Events) -> usize {
        if !self.can_stop_group() {
            return 0;
        }
        let cont = stop_signal != libc::SIGCONT;
        let r = Round {
            phase: Phase::Stop,
            sig: stop_signal,
            cont,
            provider: Some(provider),
            reason: "forwarded",
            group: Some(pgid),
            now: sys::monotonic(),
        };
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
        match r.phase {
            Phase::Stop => self.stats.signalled += sent.len() as u64,
            Phase::Kill => self.stats.killed += sent.len() as u64,
        }
        if sent.is_empty() {
            return;
        }
        let sig = signals::name(r.sig);
        crate::debug!(
            "sent {sig} to {} {} ({})",
            sent.len(),
            if leaf_path.is_some() { "leaf members" } else { "descendants" },
            r.reason
        );
        // As PID 1, the scan covers the namespace, as `kill(-1)` does.
        let target = match leaf_path {
            Some(_) => "cgroup",
            // (The owner's stop request to the provider's group reaches only that group.)
            None if self.discovery == Discovery::Broadcast && r.group.is_none() => "namespace",
            None => "descendants",
        };
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
        let (sig, cont, reason) = (r.sig, r.cont, r.reason);
        // Once per teardown, and never after processes had it one by one (pidfds refused
        // midway): a `kill(-1)` would repeat it to them.
        if r.phase == Phase::Stop && (self.namespace_stopped || !self.stopped.is_empty() || self.stats.signalled > 0) {
            return 0;
        }
        // PID 1 of its own namespace: every other process in it is guardian's descendant.
        if let Err(e) = sys::kill(-1, sig) {
            if e.raw_os_error() != Some(libc::ESRCH) {
                crate::warn!("kill(-1, {}) failed: {e}", signals::name(sig));
            }
            return 0;
        }
        if cont {
            let _ = sys::kill(-1, libc::SIGCONT);
        }
        // With the namespace's own /proc, who got the SIGKILL is counted afterwards (the kill
        // is not delayed by it): every other process of the namespace is a descendant.
        if r.phase == Phase::Kill {
            self.count_namespace_kill(r.provider);
        }
        self.namespace_stopped |= r.phase == Phase::Stop;
        events.emit(Event::Signal(Signal {
            signal: signals::name(sig),
            target: "namespace",
            pid: None,
            cgroup: None,
            pids: None,
            reason: reason.into(),
        }));
        crate::debug!("sent {} to every process in the namespace ({reason})", signals::name(sig));
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
            if pid == me || Some(pid) == provider || self.leaf_killed.contains(&pid) {
                continue;
            }
            if self.killed.insert(pid, 0).is_none() {
                self.stats.killed += 1;
            }
        }
    }

    /// Whether `stats.signalled` counts every process that got the stop signal: a scan, or as
    /// PID 1 a stop round that signals each process through the namespace's `/proc`.
    pub fn counts_stop_signals(&self) -> bool {
        self.discovery == Discovery::Scan || (self.discovery == Discovery::Broadcast && self.stops_each_process())
    }

    /// Sends the phase's signal to one scanned descendant, unless it had it already or is not
    /// the process the scan saw any more.
    #[allow(clippy::too_many_arguments)]
    fn signal_one(
        &mut self,
        d: &Stat,
        members: &HashSet<i32>,
        r: &Round<'_>,
        sent: &mut Vec<i32>,
        events: &mut Events,
    ) {
        if Some(d.pid) == r.provider || d.is_dead() || r.group.is_some_and(|g| d.pgrp != g) {
            return;
        }
        if r.phase == Phase::Kill && self.leaf_killed_now.contains(&d.pid) {
            return;
        }
        let key = (d.pid, d.starttime);
        if self.done(r.phase).get(&key.0) == Some(&key.1) {
            return;
        }
        if let Some(handle) = self.open_verified(d, members, events) {
            self.deliver(r, &handle, key, sent);
        }
    }

    /// The processes that already had this phase's signal, by (pid, start time).
    fn done(&mut self, phase: Phase) -> &mut HashMap<i32, u64> {
        match phase {
            Phase::Stop => &mut self.stopped,
            Phase::Kill => &mut self.killed,
        }
    }

    /// Sends the round's signal (and SIGCONT) through a verified handle and records it. A
    /// process guardian may not signal (it changed its user id) is named once, in `unkillable`.
    fn deliver(&mut self, r: &Round<'_>, handle: &PidRef, key: (i32, u64), sent: &mut Vec<i32>) {
        match handle.signal(r.sig) {
            Ok(()) => {
                if r.cont {
                    let _ = handle.signal(libc::SIGCONT);
                }
                sent.push(key.0);
                self.done(r.phase).insert(key.0, key.1);
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => self.not_permitted(key.0, "descendant"),
            Err(_) => {} // ESRCH: already gone.
        }
    }

    /// Names a process guardian may not signal in `unkillable`, once.
    fn not_permitted(&mut self, pid: i32, what: &str) {
        if !self.stats.unkillable.contains(&pid) {
            crate::warn!("not permitted to signal {what} {pid} (it changed its user id)");
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
                crate::debug!("sending {} to the provider {pid} failed: {e}", signals::name(sig));
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
                    spawn::fallback(events, "pidfd_open", &e, "signalling only unreaped direct children");
                    self.use_pidfd = false;
                }
                Err(e) => {
                    crate::debug!("pidfd_open({}) failed: {e}; signalling it only if it is a direct child", seen.pid);
                }
            }
        }
        // Without pidfds only direct children (handled above) can be signalled safely.
        None
    }
}
