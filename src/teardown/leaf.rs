//! teardown::leaf: the leaf's part of a round in cgroup mode. The stop signal to each member
//! of the provider's leaf (read from `cgroup.procs`; each verified through pidfd_open, its
//! start time, `/proc/PID/cgroup` and the pidfd's pid), and the kill phase's one write to
//! `cgroup.kill` (with a pidfd SIGKILL for members it cannot reach).

use std::collections::HashSet;

use crate::cgroup::Killed;
use crate::events::{Event, Events, Signal};
use crate::pidref::PidRef;
use crate::proctree::Stat;
use crate::sys;

use super::plan::{self, LeafKilled};
use super::{Phase, Round, Tree};

impl Tree {
    /// The leaf's part of a round: the stop signal to each verified member, or `cgroup.kill`.
    pub(super) fn leaf_round(&mut self, r: &Round<'_>, events: &mut Events) -> usize {
        match &self.leaf {
            Some(leaf) if !leaf.is_removed() => {}
            _ => return 0,
        }
        match r.phase() {
            Phase::Kill => self.leaf_kill(r, events),
            Phase::Stop => self.leaf_stop(r, events),
        }
    }

    /// `cgroup.kill` first (no per-member work before it: every member, newcomers included,
    /// dies at once); who was there is only bookkeeping, and this round's scan skips them.
    pub(super) fn leaf_kill(&mut self, r: &Round<'_>, events: &mut Events) -> usize {
        let Some(leaf) = self.leaf.as_mut() else {
            return 0;
        };
        let members = leaf.members();
        let sent = match leaf.kill(self.proc.as_mut()) {
            Ok(Killed::KillFile) => {
                if !self.leaf_rounds.kill_reported {
                    crate::log::debug!("wrote 1 to {}/cgroup.kill ({} members)", leaf.path.display(), members.len());
                }
                members
            }
            Ok(Killed::FreezeAndKill(pids)) => {
                if !self.leaf_rounds.kill_reported {
                    let e = std::io::Error::from_raw_os_error(libc::ENOENT);
                    events.fallback("cgroup.kill", &e, "freezing the leaf, SIGKILLing each member, thawing it");
                }
                pids
            }
            Err(e) => {
                crate::log::warn!(
                    "writing {}/cgroup.kill failed: {e} ({})",
                    leaf.path.display(),
                    crate::errno::name(e.raw_os_error().unwrap_or(0))
                );
                return 0;
            }
        };
        // Later rounds write cgroup.kill again (cheap, and it covers anything that joined the
        // leaf since); members still dying are listed again, so only newcomers are counted.
        let new: Vec<i32> = sent.iter().copied().filter(|p| !self.leaf_rounds.killed_ever.contains(p)).collect();
        if !self.leaf_rounds.kill_reported || !new.is_empty() {
            events.emit(Event::Signal(Signal {
                signal: "SIGKILL".into(),
                target: "cgroup",
                pid: None,
                cgroup: Some(leaf.path_text()),
                pids: Some(new.clone()),
                reason: r.reason.into(),
            }));
        }
        self.leaf_rounds.kill_reported = true;
        // `killed` counts descendants: the unreaped provider was a member too, but not one.
        self.stats.killed += new.iter().filter(|&&p| Some(p) != r.ask.provider).count() as u64;
        self.leaf_rounds.killed_ever.extend(&new);
        self.leaf_rounds.killed = LeafKilled { now: sent.into_iter().collect(), first: new.iter().copied().collect() };
        new.len()
    }

    /// The stop signal to every member of the leaf that has not had it, each verified first.
    /// Looked at every [`plan::STOPPED_REREAD`] at most ([`plan::leaf_stop_due`]).
    pub(super) fn leaf_stop(&mut self, r: &Round<'_>, events: &mut Events) -> usize {
        if !plan::leaf_stop_due(self.leaf_rounds.stopped_at, r.ask.now) {
            return 0;
        }
        self.leaf_rounds.stopped_at = Some(r.ask.now);
        let Some(members) = self.leaf.as_ref().map(|l| l.members()) else {
            return 0;
        };
        // guardian's own children among them are pinned until it reaps them: signalled by pid
        // with no `/proc` read, as a walk does ([`Tree::signal_child`]).
        let me = Stat { pid: self.self_pid, state: b'R', ppid: 0, pgrp: 0, session: 0, threads: 1, starttime: 0 };
        let mut kids = Vec::new();
        if self.proc.as_mut().and_then(|p| p.children(&me, &mut kids)).is_none() {
            kids.clear();
        }
        let own: HashSet<i32> = kids.into_iter().collect();
        let mut sent = Vec::new();
        for pid in members {
            if Some(pid) == r.ask.provider || pid == self.self_pid {
                continue;
            }
            if own.contains(&pid) {
                self.signal_child(pid, r, &mut sent);
                continue;
            }
            let Some(st) = self.proc.as_mut().and_then(|p| p.stat(pid)) else { continue };
            if !plan::signals(&st, &r.ask, &mut self.delivered, &self.leaf_rounds.killed) {
                continue;
            }
            if let Some(handle) = self.open_leaf_member(&st) {
                self.deliver(r, &handle, (pid, st.starttime), &mut sent);
            }
        }
        let path = self.leaf.as_ref().map(|l| l.path_text());
        self.report(r, &sent, path, events);
        sent.len()
    }

    /// A handle on a leaf member only if, after its pidfd exists, the pid still has the start
    /// time seen and sits in the leaf, and the pidfd still names that pid (so the reads were
    /// about the process the pidfd holds).
    /// Without pidfds that may signal (refused at start or since) there is none: a member that
    /// is not guardian's child cannot be signalled safely.
    pub(super) fn open_leaf_member(&mut self, seen: &Stat) -> Option<PidRef> {
        if !self.use_pidfd {
            return None;
        }
        let fd = sys::pidfd_open(seen.pid).ok()?;
        let (proc, leaf) = (self.proc.as_mut()?, self.leaf.as_ref()?);
        let same = proc.stat(seen.pid).is_some_and(|now| now.starttime == seen.starttime)
            && proc.cgroup(seen.pid).is_some_and(|t| leaf.contains(&t))
            && proc.pidfd_pid(&fd) == Some(seen.pid);
        same.then(|| PidRef::verified(seen.pid, fd))
    }
}
