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

use crate::cgroup::Leaf;
use crate::events::Events;
use crate::proctree::{self, Proc};
use crate::signals::StopSignal;
use crate::sys;

mod exec;
mod plan;

use exec::Exec;
use plan::{Ask, Finder, Mode, Rounds};
pub use plan::{Done, Phase};

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

/// A signal the supervisor sent the provider apart from the rounds, for
/// [`Tree::provider_signalled`] to account for and report.
#[derive(Clone, Copy, Debug)]
pub struct ToProvider<'r> {
    pub pid: i32,
    pub sig: i32,
    /// The provider alone, or its process group.
    pub to: crate::signals::Target,
    /// Why it was sent (the event's `reason`).
    pub reason: &'r str,
}

/// The rounds' owner: the planner's memory ([`Rounds`]) and what the executor ([`Exec`]) acts
/// with. A round is one call of the planner, [`plan::round`], carried out by the executor.
pub struct Tree {
    pub discovery: Discovery,
    /// The planner's state: the discovery mode's, who had which signal, the leaf's rounds.
    rounds: Rounds,
    proc: Option<Proc>,
    /// pidfds may be opened and signalled through (false once refused).
    use_pidfd: bool,
    pub stats: Stats,
}

impl Tree {
    /// `proc` is used in scan mode, and in broadcast mode when it is the namespace's own.
    /// `pidfds`: the start-up probe found `pidfd_send_signal` usable.
    pub fn new(discovery: Discovery, proc: Option<Proc>, stop_signal: StopSignal, pidfds: bool) -> Tree {
        let (proc, mode) = match discovery {
            Discovery::Scan => (proc, Mode::Scan { finder: Finder::Undecided }),
            Discovery::Broadcast => {
                let own = proc.and_then(|mut p| p.own_namespace().is_ok_and(|own| own).then_some(p));
                let finder = own.is_some().then_some(Finder::Undecided);
                (own, Mode::Broadcast { finder, namespace_stopped: false })
            }
            Discovery::Blind => (None, Mode::Blind),
        };
        let rounds = Rounds::new(std::process::id() as i32, stop_signal.get(), mode);
        Tree { discovery, rounds, proc, use_pidfd: pidfds, stats: Stats::default() }
    }

    /// The planner's state, and the executor for one round (why it runs: `reason`; the leaf,
    /// lent by its owner, the supervisor).
    fn parts<'t>(
        &'t mut self,
        reason: &'t str,
        leaf: Option<&'t mut Leaf>,
        events: &'t mut Events,
    ) -> (&'t mut Rounds, Exec<'t>) {
        let exec = Exec {
            me: self.rounds.me,
            proc: &mut self.proc,
            use_pidfd: &mut self.use_pidfd,
            leaf,
            stats: &mut self.stats,
            events,
            reason,
        };
        (&mut self.rounds, exec)
    }

    /// About how many children guardian has (as of its last round, less those reaped since).
    pub fn children_hint(&self) -> usize {
        self.rounds.children_hint
    }

    /// guardian reaped `pid`, one of its children: from now on the pid may name another process.
    pub fn reaped(&mut self, pid: i32) {
        self.stats.reaped += 1;
        self.rounds.reaped(pid);
    }

    /// One round: sends the phase's signal to every descendant that has not had it yet.
    /// `provider` is skipped while it is unreaped (it has its own handle); `scan` says whether
    /// to look through /proc (with a leaf, only for descendants that left it). `leaf`: the
    /// provider's leaf cgroup, lent for the round by its owner (the supervisor). Returns how
    /// many processes were signalled and whether another round must follow at once.
    pub fn round(
        &mut self,
        phase: Phase,
        provider: Option<i32>,
        reason: &str,
        scan: bool,
        leaf: Option<&mut Leaf>,
        events: &mut Events,
    ) -> Done {
        let ask = Ask { phase, provider, group: None, now: sys::monotonic() };
        let in_leaf = leaf.as_ref().is_some_and(|l| !l.is_removed());
        let (rounds, mut exec) = self.parts(reason, leaf, events);
        plan::round(rounds, &ask, in_leaf, scan, &mut exec)
    }

    /// Whether the next stop round reaches the unreaped provider too, so the caller must not
    /// send it the stop signal apart (it would get it twice): broadcast mode without the
    /// namespace's `/proc`, where the stop round is one `kill(-1)` that cannot leave it out.
    pub fn stop_round_reaches_provider(&self) -> bool {
        matches!(self.rounds.mode, Mode::Broadcast { namespace_stopped: false, .. }) && !self.stops_each_process()
    }

    /// Whether rounds reach every descendant (not in blind mode). Then guardian's own stop
    /// signal to the provider must not go to its process group too: the group's members would
    /// hear it twice.
    pub fn rounds_reach_descendants(&self) -> bool {
        !matches!(self.rounds.mode, Mode::Blind)
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
    pub fn stop_group(&mut self, pgid: i32, provider: i32, leaf: Option<&mut Leaf>, events: &mut Events) -> usize {
        if !self.can_stop_group() {
            return 0;
        }
        let ask = Ask { phase: Phase::Stop, provider: Some(provider), group: Some(pgid), now: sys::monotonic() };
        let (rounds, mut exec) = self.parts("forwarded", leaf, events);
        plan::round(rounds, &ask, false, true, &mut exec).sent
    }

    /// As PID 1: whether stop rounds signal each process through the namespace's `/proc`
    /// (which needs pidfds for all but guardian's direct children), rather than `kill(-1)`.
    fn stops_each_process(&self) -> bool {
        self.proc.is_some() && self.use_pidfd
    }

    /// Whether `stats.signalled` counts every process that got the stop signal: a scan, or as
    /// PID 1 a stop round that signals each process through the namespace's `/proc`.
    pub fn counts_stop_signals(&self) -> bool {
        self.discovery == Discovery::Scan || (self.discovery == Discovery::Broadcast && self.stops_each_process())
    }

    /// Accounts for a signal guardian sent the provider `pid` (`to`: it alone, or its group):
    /// a delivered one is reported in a `signal` event (built by the executor, as a round's
    /// are); a provider guardian may not signal (it changed its user id) is named in
    /// `unkillable`.
    pub fn provider_signalled(&mut self, sent: ToProvider, res: &std::io::Result<()>, events: &mut Events) {
        let ToProvider { pid, sig, .. } = sent;
        match res {
            Ok(()) => events.emit(exec::provider_signal(sent)),
            Err(e) => {
                crate::log::debug!("sending {} to the provider {pid} failed: {e}", crate::signals::name(sig));
                if e.raw_os_error() == Some(libc::EPERM) {
                    exec::not_permitted(&mut self.stats, pid, "the provider");
                }
            }
        }
    }

    /// The processes of the tree that still live, as far as `/proc` shows them (nothing
    /// without it): what an abandoned teardown leaves behind.
    pub fn remaining(&mut self) -> Vec<i32> {
        let me = self.rounds.me;
        let proc = &mut self.proc;
        let walk = self.rounds.mode.walks(|| exec::children_files(proc.as_mut()));
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
}

#[cfg(test)]
mod tests;
