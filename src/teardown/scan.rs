//! teardown::scan: finding the descendants through `/proc` and signalling them. The walk of
//! the `children` files from guardian down (guardian's own children by pid, the rest through
//! verified pidfds), or, where the kernel lacks those files, a listing of all of `/proc` that
//! reaches the pids born since the last round first (newest first: the live end of a forking
//! tree).

use std::collections::{HashSet, VecDeque};

use crate::events::Events;
use crate::pidref::PidRef;
use crate::proctree::{self, Proc, Stat};
use crate::{signals, sys};

use super::plan::{self, ChildStep, Facts, Finder, Newcomers};
use super::{Phase, Round, Tree};

/// What one walk of the `children` files found and did.
struct Walked {
    /// Who had the round's signal (guardian's children first).
    sent: Vec<i32>,
    /// guardian's children signalled this round (by pid, before any read).
    fresh: HashSet<i32>,
    /// What is signalled after the walk: the deeper descendants (and for a group's stop
    /// request, guardian's children too), in the order found.
    later: Vec<Stat>,
    /// Every process reached this round: guardian, its children, the deeper descendants.
    members: HashSet<i32>,
    /// Whose `children` are read next.
    queue: VecDeque<Stat>,
    /// How many processes were read, and how many of them are deeper descendants.
    seen: usize,
    deeper: usize,
    /// A child signalled this round exited before its `children` file was read: it left its
    /// children to guardian, and the next round, right after the reaping that shortens
    /// guardian's own `children` file, finds them there (re-reading a file of thousands of
    /// dying children at once costs the kernel a walk of the list per page read). A child
    /// signalled earlier had its children read then: what it forked since is a newcomer, for
    /// the rescans (chasing each exit of a collapsing chain re-walked it every time).
    left_to_guardian: bool,
}

impl Walked {
    fn new(me: i32) -> Walked {
        Walked {
            sent: Vec::new(),
            fresh: HashSet::new(),
            later: Vec::new(),
            members: HashSet::from([me]),
            queue: VecDeque::new(),
            seen: 1,
            deeper: 0,
            left_to_guardian: false,
        }
    }
}

/// The facts the planner asks for, from the kernel: `waitid(WNOWAIT)` and `/proc`.
pub(super) struct Kernel<'p>(pub Option<&'p mut Proc>);

impl Facts for Kernel<'_> {
    fn exited(&mut self, pid: i32) -> bool {
        sys::child_exited(pid)
    }

    fn stat(&mut self, pid: i32) -> Option<Stat> {
        self.0.as_mut()?.stat(pid)
    }
}

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
        if self.proc.is_none() {
            return 0;
        }
        // Signal guardian's children before reading their `children` (not for a group's stop
        // request: the group is in `stat`).
        let first = r.ask.group.is_none();
        let mut w = Walked::new(self.self_pid);
        self.walk_children(r, first, &mut w);
        self.walk_deeper(&mut w);
        crate::test_hooks::pause_after_scan(&w.later, events);
        let direct = w.sent.len();
        for d in &std::mem::take(&mut w.later) {
            self.signal_one(d, &w.members, r, &mut w.sent, events);
        }
        let after = plan::after_walk(first, direct, w.sent.len(), w.left_to_guardian);
        if let Some(Finder::Walk(walk)) = self.mode.finder() {
            *walk = after;
        }
        crate::log::debug!(
            "round ({}): {} processes read, {} children and {} deeper descendants, {} sent {}",
            r.reason,
            w.seen,
            w.members.len() - 1 - w.deeper,
            w.deeper,
            w.sent.len(),
            signals::name(r.sig)
        );
        self.report(r, &w.sent, None, events);
        w.sent.len()
    }

    /// The walk's first step: guardian's own `children` file. With `first`, each child is
    /// signalled at once ([`Tree::signal_child`]), and every one before any `children` file is
    /// read, so the tree dies (on the other CPUs) while the round reads, and one that has
    /// exited by then is not read. Otherwise (a group's stop request) each child's `stat` is
    /// read for its group and it is signalled after the walk.
    fn walk_children(&mut self, r: &Round<'_>, first: bool, w: &mut Walked) {
        let me = self.self_pid;
        let me_stat = Stat { pid: me, state: b'R', ppid: 0, pgrp: 0, session: 0, threads: 1, starttime: 0 };
        let mut kids = Vec::new();
        let mut signalled = Vec::new();
        if self.proc.as_mut().and_then(|p| p.children(&me_stat, &mut kids)).is_some() {
            self.children_hint = kids.len();
            for &pid in &kids {
                // Killed and not reaped yet: nothing left to do for it or below it.
                if (r.phase() == Phase::Kill && self.delivered.killed_children.contains(&pid)) || !w.members.insert(pid)
                {
                    continue;
                }
                w.seen += 1;
                if first {
                    if let Some(st) = self.signal_child(pid, r, &mut w.sent) {
                        signalled.push(st);
                    }
                    continue;
                }
                let Some(st) = self.proc.as_mut().and_then(|p| p.stat(pid)).filter(|st| st.ppid == me) else {
                    continue;
                };
                w.later.push(st);
                if !st.is_dead() {
                    w.queue.push_back(st);
                }
            }
        }
        w.fresh = w.sent.iter().copied().collect();
        for st in signalled {
            if Some(st.pid) == r.ask.provider || !sys::child_exited(st.pid) {
                w.queue.push_back(st);
            } else if w.fresh.contains(&st.pid) {
                w.left_to_guardian = true;
            }
        }
    }

    /// The walk down from guardian's children, breadth-first: each live process's `children`
    /// read, each child kept only while its `stat` still names that parent.
    fn walk_deeper(&mut self, w: &mut Walked) {
        let me = self.self_pid;
        let Some(proc) = self.proc.as_mut() else { return };
        let mut grandkids = Vec::new();
        while let Some(parent) = w.queue.pop_front() {
            grandkids.clear();
            let read = proc.children(&parent, &mut grandkids).is_some();
            // A child of guardian that exited before (or while) its file was read left (some
            // of) its children to guardian: the chasing round finds them there. One that has
            // not exited after the read was read complete (its children move to guardian in
            // the same step, under the same lock, as it becomes a zombie).
            if parent.ppid == me && w.fresh.contains(&parent.pid) && sys::child_exited(parent.pid) {
                w.left_to_guardian = true;
            }
            if !read {
                continue;
            }
            for &pid in &grandkids {
                // A child whose `stat` no longer names that parent (it died, or was
                // reparented meanwhile) is left to the next round.
                if let Some(st) = proc.stat(pid).filter(|st| st.ppid == parent.pid) {
                    w.seen += 1;
                    w.members.insert(pid);
                    w.later.push(st);
                    w.deeper += 1;
                    // An exited process has no children left: they were reparented (to
                    // guardian, the subreaper) before it became a zombie.
                    if !st.is_dead() {
                        w.queue.push_back(st);
                    }
                }
            }
        }
    }

    /// The round's signal to `pid`, listed in guardian's own `children`: pinned until guardian
    /// reaps it, so it needs no `/proc` read at all: `waitid(WNOWAIT)` tells a zombie (nothing
    /// to signal, no children left), `kill(pid)` reaches the rest (the stop signal followed by
    /// SIGCONT), and the record of guardian's children (cleared at reap) remembers it; a child
    /// that had the stop signal has its `children` read again every
    /// [`plan::STOPPED_REREAD`] ([`plan::child`] decides). Returns what the walk needs to read
    /// its children: the `children` file of each of its threads (how many is asked then: the
    /// link count of its `task` directory); `None` when there is nothing to read.
    pub(super) fn signal_child(&mut self, pid: i32, r: &Round<'_>, sent: &mut Vec<i32>) -> Option<Stat> {
        // No `stat` is read: how many threads' `children` files to read is asked when they
        // are read (threads 0).
        let main_thread = Stat { pid, state: b'S', ppid: self.self_pid, pgrp: 0, session: 0, threads: 0, starttime: 0 };
        let reread = self.mode.reread_children();
        let mut kernel = Kernel(self.proc.as_mut());
        match plan::child(pid, &r.ask, &mut self.delivered, &self.leaf_rounds.killed, reread, &mut kernel) {
            ChildStep::Skip => return None,
            ChildStep::Read(st) => return Some(st.unwrap_or(main_thread)),
            ChildStep::Signal => {}
        }
        match self.send(r, &PidRef::child(pid, None)) {
            Ok(()) => {
                sent.push(pid);
                self.delivered.remember_child(r.phase(), pid, r.ask.now);
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
        if self.listing().is_some_and(|l| !l.listed.is_empty()) {
            self.newcomers_first(&pids, r, sent, events);
        }
        // Newest first here too: the live end of a fast-forking tree is read before it moves on.
        let mut pids = pids;
        pids.sort_unstable_by(|a, b| b.cmp(a));
        let all = self.proc.as_mut()?.stats(&pids);
        let desc = proctree::descendants(&all, self.self_pid);
        if let Some(Finder::Listing(l)) = self.mode.finder() {
            l.listed = pids.into_iter().collect();
            l.known = desc.iter().map(|s| (s.pid, s.starttime)).collect();
        }
        Some((desc, all.len()))
    }

    /// The listing's state, in listing mode.
    fn listing(&mut self) -> Option<&mut plan::Listing> {
        match self.mode.finder() {
            Some(Finder::Listing(l)) => Some(l),
            _ => None,
        }
    }

    /// Signals the descendants among the pids that were not in the previous listing, newest
    /// pid first (the live end of a hopping chain), each chain as soon as the planner finds it
    /// ([`Newcomers`]).
    pub(super) fn newcomers_first(&mut self, pids: &[i32], r: &Round<'_>, sent: &mut Vec<i32>, events: &mut Events) {
        let me = self.self_pid;
        let listing = match self.listing() {
            Some(l) => std::mem::take(l),
            None => return,
        };
        let mut found = Newcomers::new(me, pids, &listing);
        while let Some(chain) = found.next_chain(&mut Kernel(self.proc.as_mut())) {
            for st in &chain {
                self.signal_one(st, &found.members, r, sent, events);
            }
        }
        if let Some(l) = self.listing() {
            *l = listing;
        }
    }
}
