//! teardown::plan: the rounds' decisions, as pure code over what a round sees. A round is ONE
//! call, [`round`], that decides everything about it: the signal (the stop signal then SIGCONT,
//! or SIGKILL), whom it goes to, in which order (guardian's own children before any `children`
//! file is read, newcomers first in a listing, the leaf's `cgroup.kill` before any scan), whether
//! another round must follow at once, and what the round reports. Each discovery mode keeps its
//! state in its own [`Mode`] variant; [`Delivered`] is the record of who had which signal; both
//! live in [`Rounds`], the planner's memory between rounds. What a decision needs to know about
//! a process (has guardian's child exited? its `stat`? its `children`?) comes through [`Facts`];
//! what the planner has done (send, through a verified handle; write `cgroup.kill`; report)
//! goes through [`Hands`]. The executor (`exec.rs`) answers both from `/proc`, `waitid` and the
//! cgroup and acts; the unit tests answer from a table and record. Nothing here makes a syscall.
//!
//! Facts are asked as the round goes, not all before it: a round signals guardian's children
//! before it reads what they forked, so the tree dies on the other CPUs while the round reads.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::proctree::Stat;

mod round;

#[cfg(test)]
pub use round::CALLS;
pub use round::round;

/// A round's phase: which signal it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The stop signal (followed by SIGCONT so stopped processes act on it).
    Stop,
    /// SIGKILL.
    Kill,
}

/// How often a stop round reads again the `children` of a child of guardian that had the stop
/// signal and still lives. A process acting on the stop signal (dying, or cleaning up) is read
/// at the round that signals it; what it forks afterwards is a newcomer for a later round, and
/// every newcomer still gets SIGKILL at the end of the grace. Reading each live child's file at
/// every rescan (10 ms apart at first) cost more than signalling the whole tree while thousands
/// were dying.
pub const STOPPED_REREAD: Duration = Duration::from_millis(100);

/// What a round knows about processes only by asking the kernel.
pub trait Facts {
    /// guardian's child `pid` has exited (a zombie: `waitid(WNOWAIT)`).
    fn exited(&mut self, pid: i32) -> bool;
    /// `/proc/PID/stat`, if it can be read.
    fn stat(&mut self, pid: i32) -> Option<Stat>;
    /// The pids in `pid`'s `children` files, appended to `out` (`threads`: how many threads
    /// its `stat` showed, if one was read); `None` when they cannot be read.
    fn children(&mut self, pid: i32, threads: Option<u32>, out: &mut Vec<i32>) -> Option<()>;
    /// The pids in `/proc` (`None`: no `/proc`, or it cannot be listed).
    fn list(&mut self) -> Option<Vec<i32>>;
    /// The `stat` of each of `pids` that still exists.
    fn stats(&mut self, pids: &[i32]) -> Vec<Stat>;
    /// Whether descendants are found through the `children` files (the kernel has them).
    fn children_files(&mut self) -> bool;
    /// The members of the provider's leaf (recursively), if there is one.
    fn leaf_members(&mut self) -> Option<Vec<i32>>;
    /// Whether each process can be reached on its own beyond guardian's children: a `/proc`
    /// of guardian's namespace, and pidfds that may signal.
    fn one_by_one(&self) -> bool;
}

/// What the planner has the executor do. Every send uses the round's [`Sending`].
pub trait Hands: Facts {
    /// Sends to guardian's own child `pid` by pid (pinned until guardian reaps it).
    fn to_child(&mut self, pid: i32, how: Sending) -> Sent;
    /// Sends to `seen`, a descendant a scan found, only through a handle that still names it
    /// (its parent among `members`).
    fn to_verified(&mut self, seen: &Stat, members: &HashSet<i32>, how: Sending) -> bool;
    /// Sends to `seen`, a member of the leaf, only through a handle that still names it.
    fn to_leaf_member(&mut self, seen: &Stat, how: Sending) -> bool;
    /// `cgroup.kill` (or its fallback): the members it reached; `None` when it failed.
    /// `first`: the first time this teardown.
    fn kill_leaf(&mut self, first: bool) -> Option<Vec<i32>>;
    /// `kill(-1)`: every process of guardian's namespace but guardian; whether it was sent.
    fn to_namespace(&mut self, how: Sending) -> bool;
    /// A scan found these descendants and has not signalled them yet (a test hook waits here).
    fn scanned(&mut self, found: &[Stat]);
    /// What the round did, for the counters and the `signal` event.
    fn report(&mut self, how: Sending, report: Report);
}

/// A round's signal: the stop signal followed by SIGCONT (a stopped process must act on it),
/// or SIGKILL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sending {
    pub phase: Phase,
    pub sig: i32,
    pub cont: bool,
}

/// Whether a send by pid reached guardian's child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// EPERM: it changed its user id (still there: its `children` are read).
    NotPermitted,
    /// Gone already.
    Gone,
}

/// The `signal` event's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The leaf's members (the event names the leaf).
    Cgroup,
    /// Every process of guardian's PID namespace.
    Namespace,
    Descendants,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Cgroup => "cgroup",
            Target::Namespace => "namespace",
            Target::Descendants => "descendants",
        }
    }
}

/// What a round decided, beyond its acts: how many processes it signalled, and whether another
/// round must follow at once ([`Mode::chase`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub sent: usize,
    pub chase: bool,
}

/// What one part of a round did, for the executor to count and report.
#[derive(Debug, PartialEq, Eq)]
pub struct Report {
    pub target: Target,
    /// Who had the signal (`None`: a `kill(-1)`, which names no one).
    pub pids: Option<Vec<i32>>,
    /// How many descendants the phase's counter gains.
    pub counted: u64,
    /// Whether a `signal` event is emitted.
    pub emit: bool,
    /// What the scan read, for the log.
    pub tally: Option<Tally>,
}

/// What a scan read to find the descendants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tally {
    /// A listing of all of `/proc`: `read` processes, `descendants` of guardian among them.
    Listing { read: usize, descendants: usize },
    /// A walk of the `children` files: `read` processes, guardian's `children` and `deeper`.
    Walk { read: usize, children: usize, deeper: usize },
}

/// The planner's memory between rounds.
pub struct Rounds {
    /// guardian's pid.
    pub me: i32,
    /// The stop signal.
    pub stop_sig: i32,
    pub mode: Mode,
    pub delivered: Delivered,
    pub leaf: LeafRounds,
    /// How many children guardian had at the last read of its own `children` file, less
    /// those reaped since (what the supervise loop paces its reaping by).
    pub children_hint: usize,
    /// Some process had the stop signal one by one (so no `kill(-1)` may repeat it).
    stopped_some: bool,
}

impl Rounds {
    pub fn new(me: i32, stop_sig: i32, mode: Mode) -> Rounds {
        Rounds {
            me,
            stop_sig,
            mode,
            delivered: Delivered::default(),
            leaf: LeafRounds::default(),
            children_hint: 0,
            stopped_some: false,
        }
    }

    /// guardian reaped `pid`, one of its children: from now on the pid may name another process.
    pub fn reaped(&mut self, pid: i32) {
        self.children_hint = self.children_hint.saturating_sub(1);
        self.delivered.reaped(pid);
    }
}

/// The leaf's part of the rounds.
#[derive(Default)]
pub struct LeafRounds {
    /// `cgroup.kill` (or its fallback) was reported already.
    pub kill_reported: bool,
    /// Members that this round's `cgroup.kill` reached (for the first time: `first`).
    pub killed: LeafKilled,
    /// When the leaf's members were last given the stop signal.
    pub stopped_at: Option<Duration>,
    /// Every member any `cgroup.kill` reached, counted once in the kill counter.
    pub killed_ever: HashSet<i32>,
}

/// Each discovery mode with its own state.
pub enum Mode {
    /// Only the provider can be signalled; orphans are waited for.
    Blind,
    /// PID 1 of its namespace: SIGKILL rounds are `kill(-1)`. `finder`: the namespace's own
    /// `/proc`, through which stop rounds reach each process once (else the stop signal is
    /// one `kill(-1)` per teardown, and `namespace_stopped` says it was sent).
    Broadcast { finder: Option<Finder>, namespace_stopped: bool },
    /// Rounds scan `/proc` (which belongs to guardian's PID namespace).
    Scan { finder: Finder },
}

/// How rounds find descendants in `/proc`: decided at the first round that scans (start-up
/// does not pay for a tree it may never have).
pub enum Finder {
    Undecided,
    /// A walk of the `children` files.
    Walk(Walk),
    /// A listing of all of `/proc`, newcomers first.
    Listing(Listing),
}

#[derive(Default)]
pub struct Walk {
    /// The last round signalled a process whose children were read before the signal (or one
    /// of guardian's children exited before its `children` file was read): the next round
    /// follows at once.
    pub chase: bool,
    /// The last round signalled a deeper descendant: the next one reads the `children` of
    /// every child of guardian, however recently they were read ([`STOPPED_REREAD`]).
    pub reread_children: bool,
}

#[derive(Default)]
pub struct Listing {
    /// The pids of the previous round's listing: any other pid is a newcomer.
    pub listed: HashSet<i32>,
    /// The descendants the previous round found, with their start times.
    pub known: HashMap<i32, u64>,
}

impl Mode {
    /// The `/proc` finder, where rounds have one.
    pub fn finder(&mut self) -> Option<&mut Finder> {
        match self {
            Mode::Scan { finder } | Mode::Broadcast { finder: Some(finder), .. } => Some(finder),
            _ => None,
        }
    }

    /// Whether rounds walk the `children` files (the kernel has them) rather than list all of
    /// `/proc`; asked once, at the first round that needs to know.
    pub fn walks(&mut self, children_files: impl FnOnce() -> bool) -> bool {
        let Some(finder) = self.finder() else { return false };
        if let Finder::Undecided = finder {
            *finder =
                if children_files() { Finder::Walk(Walk::default()) } else { Finder::Listing(Listing::default()) };
        }
        matches!(finder, Finder::Walk(_))
    }

    /// Whether the round that just signalled `sent` processes must be followed by another at
    /// once: a walk that signalled a process whose children it read before the signal, or left
    /// children of an exited child of guardian to the next read of guardian's own (also with a
    /// leaf: descendants outside it); or a listing (not a broadcast, not a leaf's
    /// `cgroup.procs`) that signalled anyone, since it may have missed a child born after it
    /// read its parent.
    pub fn chase(&self, sent: usize, has_leaf: bool) -> bool {
        match self {
            Mode::Scan { finder: Finder::Walk(w) } | Mode::Broadcast { finder: Some(Finder::Walk(w)), .. } => w.chase,
            Mode::Scan { .. } => sent > 0 && !has_leaf,
            _ => false,
        }
    }

    /// Whether a stop round reads again the `children` of every child of guardian.
    pub fn reread_children(&self) -> bool {
        matches!(
            self,
            Mode::Scan { finder: Finder::Walk(w) } | Mode::Broadcast { finder: Some(Finder::Walk(w)), .. }
                if w.reread_children
        )
    }
}

/// The record of what was signalled.
#[derive(Default)]
pub struct Delivered {
    /// Who had the stop signal, and SIGKILL: pid -> start time (a pid names one live process
    /// at a time, so a newer process under a recycled pid replaces the entry).
    pub stopped: HashMap<i32, u64>,
    pub killed: HashMap<i32, u64>,
    /// guardian's own children that had the stop signal, until guardian reaps them, with when
    /// their `children` file was last read.
    pub stopped_children: HashMap<i32, Duration>,
    /// guardian's own children SIGKILLed before their `children` files were read, until
    /// guardian reaps them (their pids are pinned until then): they cannot fork any more and
    /// their children were read after the kill, so later kill rounds skip them.
    pub killed_children: HashSet<i32>,
}

impl Delivered {
    /// The processes that already had this phase's signal, by (pid, start time).
    pub fn of(&mut self, phase: Phase) -> &mut HashMap<i32, u64> {
        match phase {
            Phase::Stop => &mut self.stopped,
            Phase::Kill => &mut self.killed,
        }
    }

    pub fn had(&mut self, phase: Phase, pid: i32, start: u64) -> bool {
        self.of(phase).get(&pid) == Some(&start)
    }

    /// guardian's child `pid` had this phase's signal (until guardian reaps it), and its
    /// `children` are read `now`.
    pub fn remember_child(&mut self, phase: Phase, pid: i32, now: Duration) {
        match phase {
            Phase::Stop => {
                self.stopped_children.insert(pid, now);
            }
            Phase::Kill => {
                self.killed_children.insert(pid);
            }
        }
    }

    /// guardian reaped `pid`: from now on the pid may name another process.
    pub fn reaped(&mut self, pid: i32) {
        self.killed_children.remove(&pid);
        self.stopped_children.remove(&pid);
    }
}

/// What a round is about, for the decisions.
pub struct Ask {
    pub phase: Phase,
    /// The provider while unreaped: it has its own handle, rounds skip it.
    pub provider: Option<i32>,
    /// Only the members of this process group (a stop request with `--forward-to group`).
    pub group: Option<i32>,
    pub now: Duration,
}

/// The leaf's members that this round's `cgroup.kill` reached (`now`), and those it reached
/// for the first time (`first`).
#[derive(Default)]
pub struct LeafKilled {
    pub now: HashSet<i32>,
    pub first: HashSet<i32>,
}

/// What to do with one of guardian's own children in a walk (or a leaf's stop).
#[derive(Debug, PartialEq, Eq)]
enum ChildStep {
    /// Nothing to do for it or below it.
    Skip,
    /// Not signalled now; its `children` are read (with its `stat` if one was read).
    Read(Option<Stat>),
    /// Send the round's signal by pid; then its `children` are read.
    Signal,
}

/// The decision for guardian's child `pid`, pinned until guardian reaps it: no `/proc` read
/// unless it had the signal before under a pid that may have been recycled.
fn child(
    pid: i32,
    ask: &Ask,
    done: &mut Delivered,
    leaf: &LeafKilled,
    reread: bool,
    facts: &mut impl Facts,
) -> ChildStep {
    let kill = ask.phase == Phase::Kill;
    // The provider has its own handle.
    if Some(pid) == ask.provider {
        return ChildStep::Read(None);
    }
    // A member that `cgroup.kill` reached for the first time this round dies with the whole
    // leaf: whatever it forked is either in the leaf too, or (a descendant that left the leaf)
    // reparented to guardian when it dies, and the round that follows the leaf's emptying
    // finds it among guardian's children. Its `children` file is not read now; a later round
    // that still finds it alive (it does not die) reads it.
    if kill && leaf.now.contains(&pid) {
        return if !leaf.first.contains(&pid) && !facts.exited(pid) { ChildStep::Read(None) } else { ChildStep::Skip };
    }
    // Had the stop signal already (a child keeps its pid until reaped): only its children are
    // read again, for newcomers, every STOPPED_REREAD (and not once it has exited).
    if !kill {
        if let Some(last) = done.stopped_children.get_mut(&pid) {
            if ask.now < *last + STOPPED_REREAD && !reread {
                return ChildStep::Skip;
            }
            *last = ask.now;
            return if facts.exited(pid) { ChildStep::Skip } else { ChildStep::Read(None) };
        }
    }
    if facts.exited(pid) {
        return ChildStep::Skip;
    }
    // Signalled deeper down by an earlier round (or one by one as a leaf member, or by a stop
    // request to its group), then reparented to guardian: once is enough. Its start time tells
    // it from a newcomer under a recycled pid.
    if let Some(&start) = done.of(ask.phase).get(&pid) {
        let Some(st) = facts.stat(pid) else { return ChildStep::Skip };
        if st.starttime == start {
            done.remember_child(ask.phase, pid, ask.now);
            return if st.is_dead() { ChildStep::Skip } else { ChildStep::Read(Some(st)) };
        }
    }
    ChildStep::Signal
}

/// Whether a descendant a scan found gets the round's signal (after the executor has verified
/// it): not the provider, not a process that exited entirely, in the group if the round is a
/// group's, not a leaf member this round's `cgroup.kill` reached, and not one that had it.
fn signals(d: &Stat, ask: &Ask, done: &mut Delivered, leaf: &LeafKilled) -> bool {
    if Some(d.pid) == ask.provider || d.is_dead() || ask.group.is_some_and(|g| d.pgrp != g) {
        return false;
    }
    if ask.phase == Phase::Kill && leaf.now.contains(&d.pid) {
        return false;
    }
    !done.had(ask.phase, d.pid, d.starttime)
}

/// After a walk: (chase, reread_children). `first`: guardian's children were signalled before
/// their files were read; `direct`: how many of the `sent` were guardian's children;
/// `left_to_guardian`: a child signalled now exited before its file was read.
fn after_walk(first: bool, direct: usize, sent: usize, left_to_guardian: bool) -> Walk {
    // The deeper descendants signalled now had their `children` read before: the chasing
    // round reads every child's again, whenever it was last read.
    Walk { chase: !first || sent > direct || left_to_guardian, reread_children: sent > direct }
}

/// As PID 1 without the namespace's own `/proc`: whether this round sends `kill(-1)`. SIGKILL
/// every round (repeating it costs nothing and reaches newcomers); the stop signal once per
/// teardown, and never after processes had it one by one (pidfds refused midway), since a
/// `kill(-1)` would repeat it to them.
fn broadcasts(phase: Phase, namespace_stopped: bool, stopped_one_by_one: bool) -> bool {
    phase == Phase::Kill || !(namespace_stopped || stopped_one_by_one)
}

/// The leaf's stop part runs at most every [`STOPPED_REREAD`], as guardian's signalled
/// children are read: a member forked after its parent heard the stop signal hears it from a
/// later round.
fn leaf_stop_due(last: Option<Duration>, now: Duration) -> bool {
    last.is_none_or(|t| now >= t + STOPPED_REREAD)
}

/// The `signal` event's target for a scan's signals: the namespace (as PID 1 the scan covers
/// it, as `kill(-1)` does; not a stop request to the provider's group), or the descendants.
fn scan_target(broadcast: bool, group: bool) -> Target {
    if broadcast && !group { Target::Namespace } else { Target::Descendants }
}

/// Where the kernel lacks the `children` files: finds which of the pids that were not in the
/// previous listing descend from guardian, newest pid first (the live end of a hopping chain),
/// one chain at a time so the executor can signal each as soon as it is found. A newcomer
/// descends when its parent is guardian, a descendant of the previous scan that is still the
/// same process (start time re-read), or a newcomer that does.
struct Newcomers<'l> {
    me: i32,
    listing: &'l Listing,
    fresh: HashSet<i32>,
    order: Vec<i32>,
    /// pid -> whether it descends from guardian (decided this round).
    verdict: HashMap<i32, bool>,
    /// guardian and every process found to descend from it this round.
    pub members: HashSet<i32>,
}

impl<'l> Newcomers<'l> {
    fn new(me: i32, pids: &[i32], listing: &'l Listing) -> Newcomers<'l> {
        let fresh: HashSet<i32> = pids.iter().copied().filter(|p| !listing.listed.contains(p)).collect();
        let mut order: Vec<i32> = fresh.iter().copied().collect();
        // Popped from the end: the newest pid first.
        order.sort_unstable();
        Newcomers { me, listing, fresh, order, verdict: HashMap::new(), members: HashSet::from([me]) }
    }

    /// The next chain of newcomers that descends from guardian, child first; `None` when all
    /// were decided.
    fn next_chain(&mut self, facts: &mut impl Facts) -> Option<Vec<Stat>> {
        while let Some(pid) = self.order.pop() {
            if self.verdict.contains_key(&pid) {
                continue;
            }
            let (chain, descends) = self.climb(pid, facts);
            for st in &chain {
                self.verdict.insert(st.pid, descends);
                if descends {
                    self.members.insert(st.pid);
                }
            }
            if descends {
                return Some(chain);
            }
        }
        None
    }

    /// Walks up from `pid` through newcomers until the chain meets guardian, a known
    /// descendant, or anything else (a stranger, or a process gone meanwhile: the full scan
    /// decides).
    fn climb(&mut self, pid: i32, facts: &mut impl Facts) -> (Vec<Stat>, bool) {
        let mut chain: Vec<Stat> = Vec::new();
        let mut cur = pid;
        let mut rereads = 0;
        let descends = loop {
            if let Some(&v) = self.verdict.get(&cur) {
                break v;
            }
            let Some(st) = facts.stat(cur) else {
                // Gone. If it was the parent of the last process read, that process has been
                // reparented meanwhile (to guardian, the subreaper): read it again.
                match chain.pop() {
                    Some(child) if rereads < 8 => {
                        rereads += 1;
                        cur = child.pid;
                        continue;
                    }
                    _ => break false,
                }
            };
            chain.push(st);
            if st.ppid == self.me || self.members.contains(&st.ppid) {
                break true;
            }
            if let Some(&start) = self.listing.known.get(&st.ppid) {
                let same = facts.stat(st.ppid).is_some_and(|now| now.starttime == start);
                self.verdict.insert(st.ppid, same);
                if same {
                    self.members.insert(st.ppid);
                }
                break same;
            }
            if !self.fresh.contains(&st.ppid) {
                break false;
            }
            cur = st.ppid;
        };
        (chain, descends)
    }
}

#[cfg(test)]
mod tests;
