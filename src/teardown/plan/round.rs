//! teardown::plan::round: one round, decided from start to end: the leaf's part (`cgroup.kill`,
//! or the stop signal to each member), then the mode's (a walk of the `children` files, a
//! listing of all of `/proc`, or `kill(-1)` as PID 1), each process's turn decided by the
//! rules in `plan.rs` from the facts asked as the round goes, every send and report handed to
//! the executor through [`Hands`].

use std::collections::{HashSet, VecDeque};

use crate::proctree::{self, Stat};

use super::{
    Ask, ChildStep, Done, Finder, Hands, LeafKilled, Listing, Mode, Newcomers, Phase, Report, Rounds, Sending, Sent,
    Tally, Target, after_walk, broadcasts, child, leaf_stop_due, scan_target, signals,
};

#[cfg(test)]
thread_local! {
    /// How many times [`round`] was entered (on this thread): the executor's tests count one
    /// planner call per round.
    pub static CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One round: the phase's signal to every descendant that has not had it yet (the unreaped
/// `ask.provider` is left to its own handle). `ask.group`: the owner's stop request with
/// `--forward-to group`, to the members of that process group only, through the scan. Otherwise
/// `leaf`: the provider's leaf is there to cover first; `scan`: look through `/proc` too (with a
/// leaf, for descendants that left it). Returns how many processes were signalled and whether
/// another round must follow at once (the chase: part of the round's decision).
pub fn round(s: &mut Rounds, ask: &Ask, leaf: bool, scan: bool, hands: &mut impl Hands) -> Done {
    #[cfg(test)]
    CALLS.with(|c| c.set(c.get() + 1));
    let how = match ask.phase {
        Phase::Stop => Sending { phase: Phase::Stop, sig: s.stop_sig, cont: true },
        Phase::Kill => Sending { phase: Phase::Kill, sig: libc::SIGKILL, cont: false },
    };
    let mut p = Planner { s, ask, how, k: hands };
    if ask.group.is_some() {
        // A stop request reaches the group through the scan, and leaves the teardown's rounds
        // as they were: nothing to chase (the rounds that follow the provider's exit do).
        return Done { sent: p.scan(), chase: false };
    }
    p.s.leaf.killed = LeafKilled::default();
    if let Some(Finder::Walk(w)) = p.s.mode.finder() {
        w.chase = false;
    }
    let in_leaf = match (leaf, ask.phase) {
        (false, _) => 0,
        (true, Phase::Kill) => p.leaf_kill(),
        (true, Phase::Stop) => p.leaf_stop(),
    };
    let stops_each = p.k.one_by_one();
    let sent = in_leaf
        + match &p.s.mode {
            Mode::Blind => 0,
            // With the namespace's own /proc, a stop round signals each process once, as a
            // scan does (a repeated `kill(-1)` would repeat the stop signal to everyone).
            Mode::Broadcast { .. } if ask.phase == Phase::Stop && stops_each => {
                if scan {
                    p.scan()
                } else {
                    0
                }
            }
            Mode::Broadcast { .. } => p.broadcast(),
            Mode::Scan { .. } if scan => p.scan(),
            Mode::Scan { .. } => 0,
        };
    // Only /proc scans count newcomers: a broadcast or `cgroup.kill` round reports every time
    // and needs no chase.
    Done { sent, chase: p.s.mode.chase(sent, leaf) }
}

/// One round being decided.
struct Planner<'a, K> {
    s: &'a mut Rounds,
    ask: &'a Ask,
    how: Sending,
    k: &'a mut K,
}

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
    queue: VecDeque<Parent>,
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

/// A process whose `children` a walk reads: its parent, and how many threads it has when its
/// `stat` was read (guardian's children signalled by pid have none read).
#[derive(Clone, Copy)]
struct Parent {
    pid: i32,
    ppid: i32,
    threads: Option<u32>,
}

impl From<&Stat> for Parent {
    fn from(st: &Stat) -> Parent {
        Parent { pid: st.pid, ppid: st.ppid, threads: Some(st.threads) }
    }
}

impl<K: Hands> Planner<'_, K> {
    /// A round through `/proc`: the walk where the kernel has the `children` files, else the
    /// listing.
    fn scan(&mut self) -> usize {
        if self.s.mode.walks(|| self.k.children_files()) { self.walk() } else { self.listing() }
    }

    /// Reports a scan's signals: target `cgroup` for a leaf's members, `descendants` (or, as
    /// PID 1, `namespace`) for the rest.
    fn report_sent(&mut self, target: Target, sent: &[i32], tally: Option<Tally>) {
        if self.how.phase == Phase::Stop && !sent.is_empty() {
            self.s.stopped_some = true;
        }
        let report =
            Report { target, pids: Some(sent.to_vec()), counted: sent.len() as u64, emit: !sent.is_empty(), tally };
        self.k.report(self.how, report);
    }

    fn scan_target(&self) -> Target {
        scan_target(matches!(self.s.mode, Mode::Broadcast { .. }), self.ask.group.is_some())
    }

    /// Sends the round's signal to one descendant a scan found, unless it had it already
    /// ([`signals`]) or is not the process the scan saw any more.
    fn signal_one(&mut self, d: &Stat, members: &HashSet<i32>, sent: &mut Vec<i32>) {
        if !signals(d, self.ask, &mut self.s.delivered, &self.s.leaf.killed) {
            return;
        }
        if self.k.to_verified(d, members, self.how) {
            sent.push(d.pid);
            self.s.delivered.of(self.how.phase).insert(d.pid, d.starttime);
        }
    }

    /// A round over the `children` files, top-down. guardian's own children need no identity
    /// check (only guardian reaps them, and it reaps nothing during a round, so their pids are
    /// pinned: `kill(pid)` needs no pidfd and no re-read). Each is signalled first, without any
    /// `/proc` read ([`Planner::signal_child`]), all of them before any `children` file is
    /// read: every child a process forked before its signal is in that read. After SIGKILL the
    /// read is complete (the kernel fails a fork once a fatal signal is pending); after the
    /// stop signal a process may still fork, and those newcomers are left to the rescans, as
    /// any process born after the round. A child that exited before its file was read is not
    /// read (its children were reparented to guardian): the round is chased by another, which
    /// finds them among guardian's children. The deeper descendants (and, for a stop request
    /// to the provider's group, guardian's children too, whose group must be read) are
    /// collected by the walk, then signalled, each through a verified handle; their `children`
    /// were read before the signal, so such a round is chased too.
    fn walk(&mut self) -> usize {
        // Signal guardian's children before reading their `children` (not for a group's stop
        // request: the group is in `stat`).
        let first = self.ask.group.is_none();
        let mut w = Walked {
            sent: Vec::new(),
            fresh: HashSet::new(),
            later: Vec::new(),
            members: HashSet::from([self.s.me]),
            queue: VecDeque::new(),
            seen: 1,
            deeper: 0,
            left_to_guardian: false,
        };
        self.walk_children(first, &mut w);
        self.walk_deeper(&mut w);
        self.k.scanned(&w.later);
        let direct = w.sent.len();
        for d in &std::mem::take(&mut w.later) {
            self.signal_one(d, &w.members, &mut w.sent);
        }
        let after = after_walk(first, direct, w.sent.len(), w.left_to_guardian);
        if let Some(Finder::Walk(walk)) = self.s.mode.finder() {
            *walk = after;
        }
        let tally = Tally::Walk { read: w.seen, children: w.members.len() - 1 - w.deeper, deeper: w.deeper };
        self.report_sent(self.scan_target(), &w.sent, Some(tally));
        w.sent.len()
    }

    /// The walk's first step: guardian's own `children` file. With `first`, each child is
    /// signalled at once ([`Planner::signal_child`]), and every one before any `children` file
    /// is read, so the tree dies (on the other CPUs) while the round reads, and one that has
    /// exited by then is not read. Otherwise (a group's stop request) each child's `stat` is
    /// read for its group and it is signalled after the walk.
    fn walk_children(&mut self, first: bool, w: &mut Walked) {
        let me = self.s.me;
        let mut kids = Vec::new();
        let mut signalled = Vec::new();
        // guardian has one thread: one `children` file, no thread count to ask.
        if self.k.children(me, Some(1), &mut kids).is_some() {
            self.s.children_hint = kids.len();
            for &pid in &kids {
                // Killed and not reaped yet: nothing left to do for it or below it.
                let killed = self.how.phase == Phase::Kill && self.s.delivered.killed_children.contains(&pid);
                if killed || !w.members.insert(pid) {
                    continue;
                }
                w.seen += 1;
                if first {
                    if let Some(parent) = self.signal_child(pid, &mut w.sent) {
                        signalled.push(parent);
                    }
                    continue;
                }
                let Some(st) = self.k.stat(pid).filter(|st| st.ppid == me) else {
                    continue;
                };
                w.later.push(st);
                if !st.is_dead() {
                    w.queue.push_back(Parent::from(&st));
                }
            }
        }
        w.fresh = w.sent.iter().copied().collect();
        for parent in signalled {
            if Some(parent.pid) == self.ask.provider || !self.k.exited(parent.pid) {
                w.queue.push_back(parent);
            } else if w.fresh.contains(&parent.pid) {
                w.left_to_guardian = true;
            }
        }
    }

    /// The walk down from guardian's children, breadth-first: each live process's `children`
    /// read, each child kept only while its `stat` still names that parent.
    fn walk_deeper(&mut self, w: &mut Walked) {
        let me = self.s.me;
        let mut grandkids = Vec::new();
        while let Some(parent) = w.queue.pop_front() {
            grandkids.clear();
            let read = self.k.children(parent.pid, parent.threads, &mut grandkids).is_some();
            // A child of guardian that exited before (or while) its file was read left (some
            // of) its children to guardian: the chasing round finds them there. One that has
            // not exited after the read was read complete (its children move to guardian in
            // the same step, under the same lock, as it becomes a zombie).
            if parent.ppid == me && w.fresh.contains(&parent.pid) && self.k.exited(parent.pid) {
                w.left_to_guardian = true;
            }
            if !read {
                continue;
            }
            for &pid in &grandkids {
                // A child whose `stat` no longer names that parent (it died, or was
                // reparented meanwhile) is left to the next round.
                if let Some(st) = self.k.stat(pid).filter(|st| st.ppid == parent.pid) {
                    w.seen += 1;
                    w.members.insert(pid);
                    w.later.push(st);
                    w.deeper += 1;
                    // An exited process has no children left: they were reparented (to
                    // guardian, the subreaper) before it became a zombie.
                    if !st.is_dead() {
                        w.queue.push_back(Parent::from(&st));
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
    /// [`super::STOPPED_REREAD`] ([`child`] decides). Returns whose `children` the walk reads
    /// next; `None` when there is nothing to read.
    fn signal_child(&mut self, pid: i32, sent: &mut Vec<i32>) -> Option<Parent> {
        // No `stat` is read: how many threads' `children` files to read is asked when they
        // are read.
        let unread = Parent { pid, ppid: self.s.me, threads: None };
        let reread = self.s.mode.reread_children();
        match child(pid, self.ask, &mut self.s.delivered, &self.s.leaf.killed, reread, self.k) {
            ChildStep::Skip => return None,
            ChildStep::Read(st) => return Some(st.as_ref().map_or(unread, Parent::from)),
            ChildStep::Signal => {}
        }
        match self.k.to_child(pid, self.how) {
            Sent::Delivered => {
                sent.push(pid);
                self.s.delivered.remember_child(self.how.phase, pid, self.ask.now);
            }
            Sent::NotPermitted => {}
            Sent::Gone => return None,
        }
        Some(unread)
    }

    /// A round over a listing of all of `/proc`, where the kernel lacks the `children` files:
    /// newcomers since the last round are signalled first, then every descendant, breadth-first.
    fn listing(&mut self) -> usize {
        let mut sent = Vec::new();
        let Some((desc, seen)) = self.discover(&mut sent) else {
            return 0;
        };
        self.k.scanned(&desc);
        let members: HashSet<i32> = desc.iter().map(|s| s.pid).chain([self.s.me]).collect();
        for d in &desc {
            self.signal_one(d, &members, &mut sent);
        }
        let tally = Tally::Listing { read: seen, descendants: desc.len() };
        self.report_sent(self.scan_target(), &sent, Some(tally));
        sent.len()
    }

    /// This round's descendants, breadth-first, and how many processes were read to find them
    /// (newcomers since the last round are signalled first, into `sent`).
    fn discover(&mut self, sent: &mut Vec<i32>) -> Option<(Vec<Stat>, usize)> {
        let pids = self.k.list()?;
        // Newcomers first: a process born since the last round is what a forking or hopping
        // tree (fork, setsid, parent exits) lives on. Reading every `stat` in /proc takes long
        // on a busy machine, and a newcomer reached only after that has already forked again.
        if self.listed().is_some_and(|l| !l.listed.is_empty()) {
            self.newcomers_first(&pids, sent);
        }
        // Newest first here too: the live end of a fast-forking tree is read before it moves on.
        let mut pids = pids;
        pids.sort_unstable_by(|a, b| b.cmp(a));
        let all = self.k.stats(&pids);
        let desc = proctree::descendants(&all, self.s.me);
        if let Some(l) = self.listed() {
            l.listed = pids.into_iter().collect();
            l.known = desc.iter().map(|s| (s.pid, s.starttime)).collect();
        }
        Some((desc, all.len()))
    }

    /// The listing's state, in listing mode.
    fn listed(&mut self) -> Option<&mut Listing> {
        match self.s.mode.finder() {
            Some(Finder::Listing(l)) => Some(l),
            _ => None,
        }
    }

    /// Signals the descendants among the pids that were not in the previous listing, newest
    /// pid first (the live end of a hopping chain), each chain as soon as it is found
    /// ([`Newcomers`]).
    fn newcomers_first(&mut self, pids: &[i32], sent: &mut Vec<i32>) {
        let Some(listing) = self.listed().map(std::mem::take) else { return };
        let mut found = Newcomers::new(self.s.me, pids, &listing);
        while let Some(chain) = found.next_chain(self.k) {
            for st in &chain {
                self.signal_one(st, &found.members, sent);
            }
        }
        if let Some(l) = self.listed() {
            *l = listing;
        }
    }

    /// `cgroup.kill` first (no per-member work before it: every member, newcomers included,
    /// dies at once); who was there is only bookkeeping, and this round's scan skips them.
    fn leaf_kill(&mut self) -> usize {
        let first = !self.s.leaf.kill_reported;
        let Some(sent) = self.k.kill_leaf(first) else { return 0 };
        // Later rounds write cgroup.kill again (cheap, and it covers anything that joined the
        // leaf since); members still dying are listed again, so only newcomers are counted.
        let leaf = &mut self.s.leaf;
        let new: Vec<i32> = sent.iter().copied().filter(|p| !leaf.killed_ever.contains(p)).collect();
        leaf.kill_reported = true;
        leaf.killed_ever.extend(&new);
        leaf.killed = LeafKilled { now: sent.into_iter().collect(), first: new.iter().copied().collect() };
        // The kill counter counts descendants: the unreaped provider was a member too, but not one.
        let counted = new.iter().filter(|&&p| Some(p) != self.ask.provider).count() as u64;
        let emit = first || !new.is_empty();
        let n = new.len();
        self.k.report(self.how, Report { target: Target::Cgroup, pids: Some(new), counted, emit, tally: None });
        n
    }

    /// The stop signal to every member of the leaf that has not had it, each verified first.
    /// Looked at every [`super::STOPPED_REREAD`] at most ([`leaf_stop_due`]).
    fn leaf_stop(&mut self) -> usize {
        if !leaf_stop_due(self.s.leaf.stopped_at, self.ask.now) {
            return 0;
        }
        self.s.leaf.stopped_at = Some(self.ask.now);
        let Some(members) = self.k.leaf_members() else {
            return 0;
        };
        // guardian's own children among them are pinned until it reaps them: signalled by pid
        // with no `/proc` read, as a walk does ([`Planner::signal_child`]).
        let me = self.s.me;
        let mut kids = Vec::new();
        if self.k.children(me, Some(1), &mut kids).is_none() {
            kids.clear();
        }
        let own: HashSet<i32> = kids.into_iter().collect();
        let mut sent = Vec::new();
        for pid in members {
            if Some(pid) == self.ask.provider || pid == me {
                continue;
            }
            if own.contains(&pid) {
                self.signal_child(pid, &mut sent);
                continue;
            }
            let Some(st) = self.k.stat(pid) else { continue };
            if !signals(&st, self.ask, &mut self.s.delivered, &self.s.leaf.killed) {
                continue;
            }
            if self.k.to_leaf_member(&st, self.how) {
                sent.push(pid);
                self.s.delivered.of(self.how.phase).insert(pid, st.starttime);
            }
        }
        self.report_sent(Target::Cgroup, &sent, None);
        sent.len()
    }

    /// `kill(-1)`: every process of the namespace but guardian. SIGKILL in every kill round
    /// (repeating it costs nothing and reaches newcomers); the stop signal once per teardown,
    /// since nothing tells a newcomer from a process that already had it.
    fn broadcast(&mut self) -> usize {
        let Mode::Broadcast { namespace_stopped, .. } = self.s.mode else { return 0 };
        let one_by_one = !self.s.delivered.stopped.is_empty() || self.s.stopped_some;
        if !broadcasts(self.how.phase, namespace_stopped, one_by_one) || !self.k.to_namespace(self.how) {
            return 0;
        }
        // With the namespace's own /proc, who got the SIGKILL is counted afterwards (the kill
        // is not delayed by it): every other process of the namespace is a descendant.
        let counted = match self.how.phase {
            Phase::Kill => self.count_namespace_kill(),
            Phase::Stop => {
                if let Mode::Broadcast { namespace_stopped, .. } = &mut self.s.mode {
                    *namespace_stopped = true;
                }
                0
            }
        };
        let report = Report { target: Target::Namespace, pids: None, counted, emit: true, tally: None };
        self.k.report(self.how, report);
        1
    }

    /// As PID 1 with the namespace's own `/proc`, right after a `kill(-1, SIGKILL)`: how many
    /// processes it reached that were not counted yet: every pid listed but guardian, the
    /// unreaped provider (not a descendant), the leaf's members (`cgroup.kill` counted them)
    /// and those counted by an earlier round. A readdir, no `stat`: the dying show as zombies
    /// by now, and a pid cannot be reused before guardian reaps it. Without that `/proc` nothing
    /// can be counted.
    fn count_namespace_kill(&mut self) -> u64 {
        if !matches!(self.s.mode, Mode::Broadcast { finder: Some(_), .. }) {
            return 0;
        }
        let Some(pids) = self.k.list() else { return 0 };
        let mut counted = 0;
        for pid in pids {
            if pid == self.s.me || Some(pid) == self.ask.provider || self.s.leaf.killed_ever.contains(&pid) {
                continue;
            }
            if self.s.delivered.killed.insert(pid, 0).is_none() {
                counted += 1;
            }
        }
        counted
    }
}
