//! teardown::scan: finding the descendants through `/proc` and signalling them. The walk of
//! the `children` files from guardian down (guardian's own children by pid, the rest through
//! verified pidfds), or, where the kernel lacks those files, a listing of all of `/proc` that
//! reaches the pids born since the last round first (newest first: the live end of a forking
//! tree).

use std::collections::{HashMap, HashSet};

use crate::events::Events;
use crate::proctree::{self, Stat};
use crate::{signals, sys};

use super::{Phase, Round, STOPPED_REREAD, Tree};

impl Tree {
    pub(super) fn scan_round(&mut self, r: &Round<'_>, events: &mut Events) -> usize {
        if self.walks() {
            return self.walk_round(r, events);
        }
        let mut sent = Vec::new();
        let Some((desc, seen)) = self.discover(r, &mut sent, events) else {
            return 0;
        };
        crate::test_hooks::pause_after_scan(&desc, events);
        let members: HashSet<i32> = desc.iter().map(|s| s.pid).chain([self.self_pid]).collect();
        for d in &desc {
            self.signal_one(d, &members, r, &mut sent, events);
        }
        crate::log::debug!(
            "round ({}): {seen} processes read, {} descendants, {} sent {}",
            r.reason,
            desc.len(),
            sent.len(),
            signals::name(r.sig)
        );
        self.report(r, &sent, None, events);
        sent.len()
    }

    /// A round over the `children` files, top-down. guardian's own children need no identity
    /// check (only guardian reaps them, and it reaps nothing during a round, so their pids are
    /// pinned: `kill(pid)` needs no pidfd and no re-read). Each is signalled first, without any
    /// `/proc` read ([`Tree::signal_child`]), all of them before any `children` file is read:
    /// every child a process forked before its signal is in that read. After SIGKILL the read
    /// is complete (the kernel fails a fork once a fatal signal is pending); after the stop
    /// signal a process may still fork, and those newcomers are left to the rescans, as any
    /// process born after the round. A child that exited before its file was read is not read
    /// (its children were reparented to guardian): the round is chased by another, which
    /// finds them among guardian's children. The deeper descendants (and, for a stop request
    /// to the provider's group, guardian's children too, whose group must be read) are
    /// collected by the walk, then signalled, each checked through a pidfd
    /// ([`Tree::open_verified`]); their `children` were read before the signal, so such a
    /// round is chased too.
    pub(super) fn walk_round(&mut self, r: &Round<'_>, events: &mut Events) -> usize {
        let me = self.self_pid;
        let kill = r.phase == Phase::Kill;
        // Signal guardian's children before reading their `children` (not for a group's stop
        // request: the group is in `stat`).
        let first = r.group.is_none();
        let mut sent = Vec::new();
        // What is signalled after the walk: the deeper descendants (and for a group's stop
        // request, guardian's children too), in the order found.
        let mut later: Vec<Stat> = Vec::new();
        let mut deeper = 0;
        // Every process reached this round: guardian, its children, the deeper descendants.
        let mut members: HashSet<i32> = HashSet::from([me]);
        let me_stat = Stat { pid: me, state: b'R', ppid: 0, pgrp: 0, session: 0, threads: 1, starttime: 0 };
        let (mut kids, mut grandkids, mut signalled) = (Vec::new(), Vec::new(), Vec::new());
        let mut queue = std::collections::VecDeque::new();
        let mut seen = 1;
        // A child signalled this round that exited before its `children` file was read left
        // its children to guardian: the next round, right after the reaping that shortens
        // guardian's own `children` file, finds them there (re-reading a file of thousands of
        // dying children at once costs the kernel a walk of the list per page read). A child
        // signalled earlier had its children read then: what it forked since is a newcomer,
        // for the rescans (chasing each exit of a collapsing chain re-walked it every time).
        let mut left_to_guardian = false;
        let Some(proc) = self.proc.as_mut() else { return 0 };
        if proc.children(&me_stat, &mut kids).is_some() {
            self.children_hint = kids.len();
            for &pid in &kids {
                // Killed and not reaped yet: nothing left to do for it or below it.
                if (kill && self.killed_children.contains(&pid)) || !members.insert(pid) {
                    continue;
                }
                seen += 1;
                if first {
                    if let Some(st) = self.signal_child(pid, r, &mut sent) {
                        signalled.push(st);
                    }
                    continue;
                }
                let Some(st) = self.proc.as_mut().and_then(|p| p.stat(pid)).filter(|st| st.ppid == me) else {
                    continue;
                };
                later.push(st);
                if !st.is_dead() {
                    queue.push_back(st);
                }
            }
        }
        // Every child is signalled before any `children` file is read, so the tree dies (on
        // the other CPUs) while the round reads, and one that has exited by now is not read.
        let fresh: HashSet<i32> = sent.iter().copied().collect();
        for st in signalled.drain(..) {
            if Some(st.pid) == r.provider || !sys::child_exited(st.pid) {
                queue.push_back(st);
            } else if fresh.contains(&st.pid) {
                left_to_guardian = true;
            }
        }
        let Some(proc) = self.proc.as_mut() else { return 0 };
        while let Some(parent) = queue.pop_front() {
            grandkids.clear();
            let read = proc.children(&parent, &mut grandkids).is_some();
            // A child of guardian that exited before (or while) its file was read left (some
            // of) its children to guardian: the chasing round finds them there. One that has
            // not exited after the read was read complete (its children move to guardian in
            // the same step, under the same lock, as it becomes a zombie).
            if parent.ppid == me && fresh.contains(&parent.pid) && sys::child_exited(parent.pid) {
                left_to_guardian = true;
            }
            if !read {
                continue;
            }
            for &pid in &grandkids {
                // A child whose `stat` no longer names that parent (it died, or was
                // reparented meanwhile) is left to the next round.
                if let Some(st) = proc.stat(pid).filter(|st| st.ppid == parent.pid) {
                    seen += 1;
                    members.insert(pid);
                    later.push(st);
                    deeper += 1;
                    // An exited process has no children left: they were reparented (to
                    // guardian, the subreaper) before it became a zombie.
                    if !st.is_dead() {
                        queue.push_back(st);
                    }
                }
            }
        }
        crate::test_hooks::pause_after_scan(&later, events);
        let direct = sent.len();
        for d in &later {
            self.signal_one(d, &members, r, &mut sent, events);
        }
        self.chase = !first || sent.len() > direct || left_to_guardian;
        // The deeper descendants signalled now had their `children` read before: the chasing
        // round reads every child's again, whenever it was last read.
        self.reread_children = sent.len() > direct;
        crate::log::debug!(
            "round ({}): {seen} processes read, {} children and {} deeper descendants, {} sent {}",
            r.reason,
            members.len() - 1 - deeper,
            deeper,
            sent.len(),
            signals::name(r.sig)
        );
        self.report(r, &sent, None, events);
        sent.len()
    }

    /// The round's signal to `pid`, listed in guardian's own `children`: pinned until guardian
    /// reaps it, so it needs no `/proc` read at all: `waitid(WNOWAIT)` tells a zombie (nothing
    /// to signal, no children left), `kill(pid)` reaches the rest (the stop signal followed by
    /// SIGCONT), and `killed_children` / `stopped_children` (cleared at reap) remember it; a
    /// child that had the stop signal has its `children` read again every [`STOPPED_REREAD`].
    /// Returns what the walk needs to read its children: the `children` file of each of its
    /// threads (how many is asked then: the link count of its `task` directory); `None` when
    /// there is nothing to read.
    pub(super) fn signal_child(&mut self, pid: i32, r: &Round<'_>, sent: &mut Vec<i32>) -> Option<Stat> {
        let kill = r.phase == Phase::Kill;
        // No `stat` is read: how many threads' `children` files to read is asked when they
        // are read (threads 0).
        let main_thread = Stat { pid, state: b'S', ppid: self.self_pid, pgrp: 0, session: 0, threads: 0, starttime: 0 };
        // The provider has its own handle.
        if Some(pid) == r.provider {
            return Some(main_thread);
        }
        // A member that `cgroup.kill` reached for the first time this round dies with the
        // whole leaf: whatever it forked is either in the leaf too, or (a descendant that left
        // the leaf) reparented to guardian when it dies, and the round that follows the leaf's
        // emptying finds it among guardian's children. Its `children` file is not read now;
        // a later round that still finds it alive (it does not die) reads it.
        if kill && self.leaf_killed_now.contains(&pid) {
            return (!self.leaf_killed_first.contains(&pid) && !sys::child_exited(pid)).then_some(main_thread);
        }
        // Had the stop signal already (a child keeps its pid until reaped): only its children
        // are read again, for newcomers, every STOPPED_REREAD (and not once it has exited).
        if !kill {
            if let Some(last) = self.stopped_children.get_mut(&pid) {
                if r.now < *last + STOPPED_REREAD && !self.reread_children {
                    return None;
                }
                *last = r.now;
                return (!sys::child_exited(pid)).then_some(main_thread);
            }
        }
        if sys::child_exited(pid) {
            return None;
        }
        // Signalled deeper down by an earlier round (or one by one as a leaf member, or by a
        // stop request to its group), then reparented to guardian: once is enough. Its start
        // time tells it from a newcomer under a recycled pid.
        if let Some(&start) = self.done(r.phase).get(&pid) {
            let st = self.proc.as_mut().and_then(|p| p.stat(pid))?;
            if st.starttime == start {
                self.remember_child(r, pid);
                return (!st.is_dead()).then_some(st);
            }
        }
        match sys::kill(pid, r.sig) {
            Ok(()) => {
                if r.cont {
                    let _ = sys::kill(pid, libc::SIGCONT);
                }
                sent.push(pid);
                self.remember_child(r, pid);
            }
            // Named only when `/proc` shows it, as a scan would (`hidepid` hides a process of
            // another user: docs/threat-model.md).
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                if self.proc.as_mut().and_then(|p| p.stat(pid)).is_some() {
                    self.not_permitted(pid, "descendant");
                }
            }
            Err(_) => return None,
        }
        Some(main_thread)
    }

    /// Records that guardian's child `pid` had this round's signal (until guardian reaps it),
    /// and that its `children` are read now.
    fn remember_child(&mut self, r: &Round<'_>, pid: i32) {
        match r.phase {
            Phase::Stop => {
                self.stopped_children.insert(pid, r.now);
            }
            Phase::Kill => {
                self.killed_children.insert(pid);
            }
        }
    }

    /// This round's descendants, breadth-first, and how many processes were read to find them,
    /// where the kernel lacks the `children` files: a listing of all of `/proc` (newcomers
    /// since the last round are signalled first, into `sent`).
    pub(super) fn discover(
        &mut self,
        r: &Round<'_>,
        sent: &mut Vec<i32>,
        events: &mut Events,
    ) -> Option<(Vec<Stat>, usize)> {
        let pids = match self.proc.as_mut()?.list() {
            Ok(pids) => pids,
            Err(e) => {
                crate::log::warn!("cannot list /proc: {e}; will retry");
                return None;
            }
        };
        // Newcomers first: a process born since the last round is what a forking or hopping
        // tree (fork, setsid, parent exits) lives on. Reading every `stat` in /proc takes long
        // on a busy machine, and a newcomer reached only after that has already forked again.
        if !self.listed.is_empty() {
            self.newcomers_first(&pids, r, sent, events);
        }
        // Newest first here too: the live end of a fast-forking tree is read before it moves on.
        let mut pids = pids;
        pids.sort_unstable_by(|a, b| b.cmp(a));
        let all = self.proc.as_mut()?.stats(&pids);
        self.listed = pids.into_iter().collect();
        let desc = proctree::descendants(&all, self.self_pid);
        self.known = desc.iter().map(|s| (s.pid, s.starttime)).collect();
        Some((desc, all.len()))
    }

    /// Signals the descendants among the pids that were not in the previous listing, newest
    /// pid first (the live end of a hopping chain), each as soon as it is found: a newcomer
    /// descends from guardian when its parent is guardian, a descendant of the previous scan
    /// that is still the same process (start time re-read), or a newcomer that does.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn newcomers_first(&mut self, pids: &[i32], r: &Round<'_>, sent: &mut Vec<i32>, events: &mut Events) {
        let fresh: HashSet<i32> = pids.iter().copied().filter(|p| !self.listed.contains(p)).collect();
        let mut order: Vec<i32> = fresh.iter().copied().collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let mut members = HashSet::from([self.self_pid]);
        // pid -> whether it descends from guardian (decided this round).
        let mut verdict: HashMap<i32, bool> = HashMap::new();
        for pid in order {
            if verdict.contains_key(&pid) {
                continue;
            }
            let Some(proc) = self.proc.as_mut() else {
                return;
            };
            // Walk up through newcomers until the chain meets guardian, a known descendant,
            // or anything else (a stranger, or a process gone meanwhile: the full scan decides).
            let mut chain: Vec<Stat> = Vec::new();
            let mut cur = pid;
            let mut rereads = 0;
            let descends = loop {
                if let Some(&v) = verdict.get(&cur) {
                    break v;
                }
                let Some(st) = proc.stat(cur) else {
                    // Gone. If it was the parent of the last process read, that process has
                    // been reparented meanwhile (to guardian, the subreaper): read it again.
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
                if st.ppid == self.self_pid || members.contains(&st.ppid) {
                    break true;
                }
                if let Some(&start) = self.known.get(&st.ppid) {
                    let same = proc.stat(st.ppid).is_some_and(|now| now.starttime == start);
                    verdict.insert(st.ppid, same);
                    if same {
                        members.insert(st.ppid);
                    }
                    break same;
                }
                if !fresh.contains(&st.ppid) {
                    break false;
                }
                cur = st.ppid;
            };
            for st in &chain {
                verdict.insert(st.pid, descends);
                if descends {
                    members.insert(st.pid);
                }
            }
            if descends {
                for st in &chain {
                    self.signal_one(st, &members, r, sent, events);
                }
            }
        }
    }
}
