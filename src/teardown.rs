//! teardown: signalling every descendant guardian has, in rounds. A round discovers the
//! tree (a `/proc` scan, reaching the pids born since the last round first, or `kill(-1)` as
//! PID 1 of a namespace whose `/proc` is not ours),
//! opens a pidfd per descendant, revalidates its identity (start time, parent still in the
//! tree, pidfd still naming that pid), sends the signal and closes the pidfd again, so
//! guardian never holds one fd per descendant. Each process gets the stop signal once and
//! SIGKILL once; later rounds only reach newcomers. The supervise loop decides when rounds
//! run and when the grace period ends; the kernel's ECHILD decides when the tree is gone.
//!
//! In cgroup mode a round first covers the members of the provider's leaf (read from
//! `cgroup.procs`, recursively; each verified through pidfd_open + `/proc/PID/cgroup` +
//! the pidfd's fdinfo), then the subreaper scan covers descendants that left the leaf. The
//! kill phase writes `cgroup.kill` instead of signalling members one by one.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use crate::cgroup::{Killed, Leaf};
use crate::events::Events;
use crate::pidref::PidRef;
use crate::proctree::{self, Proc, Stat};
use crate::{signals, spawn, sys};

/// How guardian finds its descendants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// Scan `/proc` (which belongs to guardian's PID namespace).
    Scan,
    /// PID 1 of a namespace whose `/proc` is foreign: `kill(-1)` reaches exactly the tree.
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
    stopped: HashSet<(i32, u64)>,
    killed: HashSet<(i32, u64)>,
    pub stats: Stats,
    /// The provider's leaf cgroup (cgroup mode).
    pub leaf: Option<Leaf>,
    /// `cgroup.kill` (or its fallback) was reported already.
    leaf_kill_reported: bool,
    /// Members that this round's `cgroup.kill` reached: the scan does not SIGKILL them again.
    leaf_killed_now: HashSet<i32>,
    /// The pids of the previous round's `/proc` listing: any other pid is a newcomer.
    /// Rounds walk the `children` files instead of listing all of `/proc`.
    walk: bool,
    listed: HashSet<i32>,
    /// The descendants the previous round's scan found, with their start times.
    known: HashMap<i32, u64>,
}

impl Tree {
    pub fn new(discovery: Discovery, mut proc: Option<Proc>, leaf: Option<Leaf>) -> Tree {
        let walk = proc.as_mut().is_some_and(|p| p.has_children_files()) && !forced_full_scan();
        if proc.is_some() {
            crate::debug!(
                "descendants are found by {}",
                if walk { "walking /proc/PID/task/TID/children" } else { "listing all of /proc" }
            );
        }
        Tree {
            walk,
            discovery,
            self_pid: std::process::id() as i32,
            proc,
            use_pidfd: crate::pidref::pidfd_signal_usable(),
            stopped: HashSet::new(),
            killed: HashSet::new(),
            stats: Stats::default(),
            leaf,
            leaf_kill_reported: false,
            leaf_killed_now: HashSet::new(),
            listed: HashSet::new(),
            known: HashMap::new(),
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
        let follow_with_cont = phase == Phase::Stop && sig != libc::SIGKILL && sig != libc::SIGCONT;
        self.leaf_killed_now.clear();
        let in_leaf = self.leaf_round(phase, sig, follow_with_cont, provider, reason, events);
        in_leaf
            + match self.discovery {
                Discovery::Blind => 0,
                Discovery::Broadcast => self.broadcast(sig, follow_with_cont, reason, events),
                Discovery::Scan if scan => self.scan_round(phase, sig, follow_with_cont, provider, reason, events),
                Discovery::Scan => 0,
            }
    }

    /// The leaf's part of a round: the stop signal to each verified member, or `cgroup.kill`.
    fn leaf_round(
        &mut self,
        phase: Phase,
        sig: i32,
        cont: bool,
        provider: Option<i32>,
        reason: &str,
        events: &mut Events,
    ) -> usize {
        let Some(leaf) = self.leaf.as_mut() else {
            return 0;
        };
        if leaf.is_removed() {
            return 0;
        }
        let members = leaf.members();
        let mut sent = Vec::new();
        match phase {
            Phase::Kill => {
                // cgroup.kill first (no per-member work before it: every member, newcomers
                // included, dies at once); who was there is only bookkeeping, and the scan
                // of this round skips them.
                sent = members.clone();
                match leaf.kill(self.proc.as_mut()) {
                    Ok(Killed::KillFile) => {
                        if !self.leaf_kill_reported {
                            crate::debug!("wrote 1 to {}/cgroup.kill ({} members)", leaf.path.display(), members.len());
                        }
                    }
                    Ok(Killed::FreezeAndKill(pids)) => {
                        if !self.leaf_kill_reported {
                            let e = std::io::Error::from_raw_os_error(libc::ENOENT);
                            spawn::fallback(
                                events,
                                "cgroup.kill",
                                &e,
                                "freezing the leaf, SIGKILLing each member, thawing it",
                            );
                        }
                        sent = pids;
                    }
                    Err(e) => {
                        crate::warn!(
                            "writing {}/cgroup.kill failed: {e} ({})",
                            leaf.path.display(),
                            sys::errno_name(e.raw_os_error().unwrap_or(0))
                        );
                        return 0;
                    }
                }
                if !self.leaf_kill_reported || !sent.is_empty() {
                    events.emit(
                        "signal",
                        json!({"signal": "SIGKILL", "target": "cgroup", "cgroup": leaf.path_text(), "pids": sent, "reason": reason}),
                    );
                }
                self.leaf_kill_reported = true;
                self.stats.killed += sent.len() as u64;
                self.leaf_killed_now = sent.iter().copied().collect();
            }
            Phase::Stop => {
                let Some(proc) = self.proc.as_mut() else {
                    return 0;
                };
                for pid in members {
                    if Some(pid) == provider || pid == self.self_pid {
                        continue;
                    }
                    let Some(st) = proc.stat(pid) else { continue };
                    if st.state == b'Z' || st.state == b'X' || self.stopped.contains(&(pid, st.starttime)) {
                        continue;
                    }
                    let Ok(fd) = sys::pidfd_open(pid) else {
                        continue;
                    };
                    // Identity: after the pidfd exists, the pid still has the start time
                    // seen and sits in the leaf, and the pidfd still names that pid (so
                    // the reads above were about the process the pidfd holds).
                    let same = proc.stat(pid).is_some_and(|now| now.starttime == st.starttime)
                        && proc.cgroup(pid).is_some_and(|t| leaf.contains(&t))
                        && proc.pidfd_pid(&fd) == Some(pid);
                    if !same {
                        continue;
                    }
                    let handle = PidRef::verified(pid, fd);
                    match handle.signal(sig) {
                        Ok(()) => {
                            if cont {
                                let _ = handle.signal(libc::SIGCONT);
                            }
                            self.stopped.insert((pid, st.starttime));
                            sent.push(pid);
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                            if !self.stats.unkillable.contains(&pid) {
                                crate::warn!("not permitted to signal leaf member {pid} (it changed its user id)");
                                self.stats.unkillable.push(pid);
                            }
                        }
                        Err(_) => {}
                    }
                }
                self.stats.signalled += sent.len() as u64;
                if !sent.is_empty() {
                    crate::debug!("sent {} to {} members of the leaf ({reason})", signals::name(sig), sent.len());
                    events.emit(
                        "signal",
                        json!({"signal": signals::name(sig), "target": "cgroup", "cgroup": leaf.path_text(), "pids": sent, "reason": reason}),
                    );
                }
            }
        }
        sent.len()
    }

    fn broadcast(&mut self, sig: i32, cont: bool, reason: &str, events: &mut Events) -> usize {
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
        events.emit("signal", json!({"signal": signals::name(sig), "target": "namespace", "reason": reason}));
        crate::debug!("sent {} to every process in the namespace ({reason})", signals::name(sig));
        1
    }

    fn scan_round(
        &mut self,
        phase: Phase,
        sig: i32,
        cont: bool,
        provider: Option<i32>,
        reason: &str,
        events: &mut Events,
    ) -> usize {
        let mut sent = Vec::new();
        let Some((desc, seen)) = self.discover(phase, sig, cont, provider, &mut sent, events) else {
            return 0;
        };
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::pause_after_scan(&desc, events);
        let members: HashSet<i32> = desc.iter().map(|s| s.pid).chain([self.self_pid]).collect();
        for d in &desc {
            self.signal_one(d, &members, phase, sig, cont, provider, &mut sent, events);
        }
        crate::debug!(
            "round ({reason}): {seen} processes read, {} descendants, {} sent {}",
            desc.len(),
            sent.len(),
            signals::name(sig)
        );
        match phase {
            Phase::Stop => self.stats.signalled += sent.len() as u64,
            Phase::Kill => self.stats.killed += sent.len() as u64,
        }
        if !sent.is_empty() {
            crate::debug!("sent {} to {} descendants ({reason})", signals::name(sig), sent.len());
            events.emit(
                "signal",
                json!({"signal": signals::name(sig), "target": "descendants", "pids": sent, "reason": reason}),
            );
        }
        sent.len()
    }

    /// This round's descendants, breadth-first, and how many processes were read to find them:
    /// a top-down walk of the `children` files where the kernel has them, else a listing of
    /// all of `/proc` (newcomers since the last round are signalled first, into `sent`).
    fn discover(
        &mut self,
        phase: Phase,
        sig: i32,
        cont: bool,
        provider: Option<i32>,
        sent: &mut Vec<i32>,
        events: &mut Events,
    ) -> Option<(Vec<Stat>, usize)> {
        if self.walk {
            let desc = self.proc.as_mut()?.walk(self.self_pid);
            let seen = desc.len() + 1;
            return Some((desc, seen));
        }
        let pids = match self.proc.as_mut()?.list() {
            Ok(pids) => pids,
            Err(e) => {
                crate::warn!("cannot list /proc: {e}; will retry");
                return None;
            }
        };
        // Newcomers first: a process born since the last round is what a forking or hopping
        // tree (fork, setsid, parent exits) lives on. Reading every `stat` in /proc takes long
        // on a busy machine, and a newcomer reached only after that has already forked again.
        if !self.listed.is_empty() {
            self.newcomers_first(&pids, phase, sig, cont, provider, sent, events);
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
    fn newcomers_first(
        &mut self,
        pids: &[i32],
        phase: Phase,
        sig: i32,
        cont: bool,
        provider: Option<i32>,
        sent: &mut Vec<i32>,
        events: &mut Events,
    ) {
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
                    self.signal_one(st, &members, phase, sig, cont, provider, sent, events);
                }
            }
        }
    }

    /// Sends the phase's signal to one scanned descendant, unless it had it already or is not
    /// the process the scan saw any more.
    #[allow(clippy::too_many_arguments)]
    fn signal_one(
        &mut self,
        d: &Stat,
        members: &HashSet<i32>,
        phase: Phase,
        sig: i32,
        cont: bool,
        provider: Option<i32>,
        sent: &mut Vec<i32>,
        events: &mut Events,
    ) {
        if Some(d.pid) == provider || d.state == b'Z' || d.state == b'X' {
            return;
        }
        if phase == Phase::Kill && self.leaf_killed_now.contains(&d.pid) {
            return;
        }
        let key = (d.pid, d.starttime);
        let done = match phase {
            Phase::Stop => &self.stopped,
            Phase::Kill => &self.killed,
        };
        if done.contains(&key) {
            return;
        }
        let Some(handle) = self.open_verified(d, members, events) else {
            return;
        };
        match handle.signal(sig) {
            Ok(()) => {
                if cont {
                    let _ = handle.signal(libc::SIGCONT);
                }
                sent.push(d.pid);
                match phase {
                    Phase::Stop => self.stopped.insert(key),
                    Phase::Kill => self.killed.insert(key),
                };
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                if !self.stats.unkillable.contains(&d.pid) {
                    crate::warn!("not permitted to signal descendant {} (it changed its user id)", d.pid);
                    self.stats.unkillable.push(d.pid);
                }
            }
            Err(_) => {} // ESRCH: already gone.
        }
    }

    /// A handle on `seen` only if it is still the process the scan saw: pidfd_open, then its
    /// `/proc` start time and parent are rechecked and the pidfd is confirmed to name that pid.
    /// Without pidfds only unreaped direct children are signalled (the tree is peeled from the
    /// top: grandchildren become children when their parents die).
    fn open_verified(&mut self, seen: &Stat, members: &HashSet<i32>, events: &mut Events) -> Option<PidRef> {
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
        // A direct child that guardian has not reaped cannot have had its pid reused.
        (seen.ppid == self.self_pid).then(|| PidRef::child(seen.pid, None))
    }
}

/// The integration tests exercise the full `/proc` listing on kernels that also have the
/// `children` files (only with the `test-hooks` feature).
fn forced_full_scan() -> bool {
    #[cfg(feature = "test-hooks")]
    return std::env::var_os("GUARDIAN_TEST_FULL_SCAN").is_some();
    #[cfg(not(feature = "test-hooks"))]
    false
}
