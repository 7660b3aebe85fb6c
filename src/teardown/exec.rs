//! teardown::exec: the hands of the rounds. It answers the planner's questions ([`Facts`]) from
//! `/proc`, `waitid(WNOWAIT)` and the leaf's `cgroup.procs`, and carries out what the planner
//! decided ([`Hands`]): opens and verifies a handle per descendant (pidfd_open, then its start
//! time, its parent or its cgroup, and the pidfd's pid rechecked), sends, writes `cgroup.kill`,
//! sends `kill(-1)`, names the processes it may not signal, and builds the `signal` event (in
//! [`Exec::report`] for the rounds and [`provider_signal`] for a signal the supervisor sent the
//! provider: the one module that builds it). It decides nothing about whom to signal.

use std::collections::HashSet;

use crate::cgroup::{Killed, Leaf};
use crate::events::{Event, Events, Signal};
use crate::pidref::{self, PidRef};
use crate::proctree::{Proc, Stat};
use crate::{signals, sys};

use super::Stats;
use super::plan::{Facts, Hands, Report, Sending, Sent, Tally, Target};

/// The executor for one round: the parts of the `Tree` the planner does not own.
pub(super) struct Exec<'t> {
    pub me: i32,
    pub proc: &'t mut Option<Proc>,
    /// pidfds may be opened and signalled through (false once refused).
    pub use_pidfd: &'t mut bool,
    /// The provider's leaf cgroup, lent by the supervisor (its owner) for the round.
    pub leaf: Option<&'t mut Leaf>,
    pub stats: &'t mut Stats,
    pub events: &'t mut Events,
    /// Why the round runs, for the events.
    pub reason: &'t str,
}

/// Whether rounds can walk the `children` files (the kernel has them, and a test does not
/// force the listing); logged once, when first asked.
pub(super) fn children_files(proc: Option<&mut Proc>) -> bool {
    let Some(proc) = proc else { return false };
    let walk = proc.has_children_files() && !crate::test_hooks::forced_full_scan();
    crate::log::debug!(
        "descendants are found by {}",
        if walk { "walking /proc/PID/task/TID/children" } else { "listing all of /proc" }
    );
    walk
}

/// Sends `how` (the stop signal then SIGCONT, or SIGKILL) through `handle`.
fn send(handle: &PidRef, how: Sending) -> std::io::Result<()> {
    if how.cont { pidref::and_cont(|s| handle.signal(s), how.sig) } else { handle.signal(how.sig) }
}

/// Names a process guardian may not signal (it changed its user id) in `unkillable`, once.
pub(super) fn not_permitted(stats: &mut Stats, pid: i32, what: &str) {
    if !stats.unkillable.contains(&pid) {
        crate::log::warn!("not permitted to signal {what} {pid} (it changed its user id)");
        stats.unkillable.push(pid);
    }
}

impl Facts for Exec<'_> {
    fn exited(&mut self, pid: i32) -> bool {
        sys::child_exited(pid)
    }

    fn stat(&mut self, pid: i32) -> Option<Stat> {
        self.proc.as_mut()?.stat(pid)
    }

    fn children(&mut self, pid: i32, threads: Option<u32>, out: &mut Vec<i32>) -> Option<()> {
        self.proc.as_mut()?.children(pid, threads, out)
    }

    fn list(&mut self) -> Option<Vec<i32>> {
        match self.proc.as_mut()?.list() {
            Ok(pids) => Some(pids),
            Err(e) => {
                crate::log::warn!("cannot list /proc: {e}; will retry");
                None
            }
        }
    }

    fn stats(&mut self, pids: &[i32]) -> Vec<Stat> {
        self.proc.as_mut().map(|p| p.stats(pids)).unwrap_or_default()
    }

    fn children_files(&mut self) -> bool {
        children_files(self.proc.as_mut())
    }

    fn leaf_members(&mut self) -> Option<Vec<i32>> {
        self.leaf.as_deref().map(Leaf::members)
    }

    fn one_by_one(&self) -> bool {
        self.proc.is_some() && *self.use_pidfd
    }
}

impl Hands for Exec<'_> {
    fn to_child(&mut self, pid: i32, how: Sending) -> Sent {
        match send(&PidRef::child(pid, None), how) {
            Ok(()) => Sent::Delivered,
            // Named only when `/proc` shows it, as a scan would (`hidepid` hides a process of
            // another user: docs/threat-model.md).
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                if self.stat(pid).is_some() {
                    not_permitted(self.stats, pid, "descendant");
                }
                Sent::NotPermitted
            }
            Err(_) => Sent::Gone,
        }
    }

    fn to_verified(&mut self, seen: &Stat, members: &HashSet<i32>, how: Sending) -> bool {
        let Some(handle) = self.open_verified(seen, members) else { return false };
        self.deliver(&handle, how)
    }

    fn to_leaf_member(&mut self, seen: &Stat, how: Sending) -> bool {
        let Some(handle) = self.open_leaf_member(seen) else { return false };
        self.deliver(&handle, how)
    }

    fn kill_leaf(&mut self, first: bool) -> Option<Vec<i32>> {
        let leaf = self.leaf.as_deref_mut()?;
        let members = leaf.members();
        match leaf.kill(self.proc.as_mut()) {
            Ok(Killed::KillFile) => {
                if first {
                    crate::log::debug!("wrote 1 to {}/cgroup.kill ({} members)", leaf.path.display(), members.len());
                }
                Some(members)
            }
            Ok(Killed::FreezeAndKill(pids)) => {
                if first {
                    let e = std::io::Error::from_raw_os_error(libc::ENOENT);
                    self.events.fallback("cgroup.kill", &e, "freezing the leaf, SIGKILLing each member, thawing it");
                }
                Some(pids)
            }
            Err(e) => {
                crate::log::warn!(
                    "writing {}/cgroup.kill failed: {e} ({})",
                    leaf.path.display(),
                    crate::errno::name(e.raw_os_error().unwrap_or(0))
                );
                None
            }
        }
    }

    fn to_namespace(&mut self, how: Sending) -> bool {
        // PID 1 of its own namespace: every other process in it is guardian's descendant.
        let kill = |s: i32| sys::kill(-1, s);
        let res = if how.cont { pidref::and_cont(kill, how.sig) } else { kill(how.sig) };
        match res {
            Ok(()) => true,
            Err(e) => {
                if e.raw_os_error() != Some(libc::ESRCH) {
                    crate::log::warn!("kill(-1, {}) failed: {e}", signals::name(how.sig));
                }
                false
            }
        }
    }

    fn scanned(&mut self, found: &[Stat]) {
        crate::test_hooks::pause_after_scan(found, self.events);
    }

    /// Counts what a part of a round sent and reports it in one `signal` event: target
    /// `cgroup` (with the leaf's path) for a leaf's members, `namespace` for a `kill(-1)` or a
    /// scan as PID 1, `descendants` for the rest. The one place teardown builds the event.
    fn report(&mut self, how: Sending, report: Report) {
        let sig = signals::name(how.sig);
        if let Some(tally) = report.tally {
            let sent = report.pids.as_ref().map_or(0, Vec::len);
            match tally {
                Tally::Listing { read, descendants } => crate::log::debug!(
                    "round ({}): {read} processes read, {descendants} descendants, {sent} sent {sig}",
                    self.reason
                ),
                Tally::Walk { read, children, deeper } => crate::log::debug!(
                    "round ({}): {read} processes read, {children} children and {deeper} deeper descendants, {sent} sent {sig}",
                    self.reason
                ),
            }
        }
        match how.phase {
            super::Phase::Stop => self.stats.signalled += report.counted,
            super::Phase::Kill => self.stats.killed += report.counted,
        }
        if !report.emit {
            return;
        }
        match (&report.pids, report.target) {
            (None, _) => crate::log::debug!("sent {sig} to every process in the namespace ({})", self.reason),
            (Some(pids), Target::Cgroup) => {
                crate::log::debug!("sent {sig} to {} leaf members ({})", pids.len(), self.reason)
            }
            (Some(pids), _) => crate::log::debug!("sent {sig} to {} descendants ({})", pids.len(), self.reason),
        }
        let cgroup = match report.target {
            Target::Cgroup => self.leaf.as_deref().map(Leaf::path_text),
            _ => None,
        };
        let signal = Signal {
            signal: sig,
            target: report.target.name(),
            pid: None,
            cgroup,
            pids: report.pids,
            reason: self.reason.into(),
        };
        self.events.emit(Event::Signal(signal));
    }
}

/// The `signal` event for a signal guardian sent the provider (`to`: it alone, or its group)
/// apart from the rounds. With [`Exec::report`], the only places the event is built, both here.
pub(super) fn provider_signal(sent: super::ToProvider) -> Event {
    let super::ToProvider { pid, sig, to, reason } = sent;
    let target = match to {
        signals::Target::Provider => "provider",
        signals::Target::Group => "group",
    };
    Event::Signal(Signal {
        signal: signals::name(sig),
        target,
        pid: Some(pid),
        cgroup: None,
        pids: None,
        reason: reason.into(),
    })
}

impl Exec<'_> {
    /// Sends through a verified handle. A process guardian may not signal (it changed its user
    /// id) is named once, in `unkillable`.
    fn deliver(&mut self, handle: &PidRef, how: Sending) -> bool {
        match send(handle, how) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                not_permitted(self.stats, handle.pid, "descendant");
                false
            }
            Err(_) => false, // ESRCH: already gone.
        }
    }

    /// A handle on `seen` only if it is still the process the scan saw: pidfd_open, then its
    /// `/proc` start time and parent are rechecked and the pidfd is confirmed to name that pid.
    /// Without pidfds only unreaped direct children are signalled (the tree is peeled from the
    /// top: grandchildren become children when their parents die).
    fn open_verified(&mut self, seen: &Stat, members: &HashSet<i32>) -> Option<PidRef> {
        // A process the scan saw as guardian's own child is still that child: only guardian
        // reaps it, and guardian reaps nothing during a round, so its pid cannot have changed
        // owner since the scan read its `stat`. `kill(pid)` reaches it with no pidfd and no
        // re-read (the teardown's common case: orphans are reparented to guardian).
        if seen.ppid == self.me {
            return Some(PidRef::child(seen.pid, None));
        }
        if *self.use_pidfd {
            match sys::pidfd_open(seen.pid) {
                Ok(fd) => {
                    let proc = self.proc.as_mut()?;
                    let now = proc.stat(seen.pid)?;
                    let same = now.starttime == seen.starttime && members.contains(&now.ppid);
                    return (same && proc.pidfd_pid(&fd) == Some(seen.pid)).then(|| PidRef::verified(seen.pid, fd));
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return None,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    self.events.fallback("pidfd_open", &e, "signalling only unreaped direct children");
                    *self.use_pidfd = false;
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

    /// A handle on a leaf member only if, after its pidfd exists, the pid still has the start
    /// time seen and sits in the leaf, and the pidfd still names that pid (so the reads were
    /// about the process the pidfd holds).
    /// Without pidfds that may signal (refused at start or since) there is none: a member that
    /// is not guardian's child cannot be signalled safely.
    fn open_leaf_member(&mut self, seen: &Stat) -> Option<PidRef> {
        if !*self.use_pidfd {
            return None;
        }
        let fd = sys::pidfd_open(seen.pid).ok()?;
        let (proc, leaf) = (self.proc.as_mut()?, self.leaf.as_deref()?);
        let same = proc.stat(seen.pid).is_some_and(|now| now.starttime == seen.starttime)
            && proc.cgroup(seen.pid).is_some_and(|t| leaf.contains(&t))
            && proc.pidfd_pid(&fd) == Some(seen.pid);
        same.then(|| PidRef::verified(seen.pid, fd))
    }
}
