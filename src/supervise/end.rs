//! supervise::end: how the loop ends. `release` (the kernel said the tree is empty: the leaf is
//! removed, `released` reports the figures and the tree's cost) or `abandon` (SIGKILL was sent
//! long ago and processes remain that guardian cannot see or signal: `error`, never
//! `released`). Neither exits the process: the status or the failure goes back to `main`.

use super::{EVENTS_CLOSE_WAIT, Supervisor};
use crate::events::{Abandoned, Event, Events, Released};
use crate::exit::{self, Failure, Outcome};
use crate::sys;

impl Supervisor {
    /// SIGKILL was sent long ago and children remain that guardian cannot see or signal.
    /// Exiting is honest only as a failure: `error`, never `released`; `main` prints it.
    pub(super) fn abandon(&mut self) -> Failure {
        let remaining = self.tree.remaining();
        let unkillable = &self.tree.stats.unkillable;
        let message = format!(
            "processes remain after SIGKILL: {remaining:?} (not permitted to signal: {unkillable:?}; others may be hidden from /proc); giving up"
        );
        if let Some(leaf) = self.leaf.as_mut() {
            leaf.remove_now();
        }
        let abandoned = Some(Abandoned { unkillable: unkillable.clone(), remaining });
        self.events.emit(Event::Error { status: exit::GUARDIAN, message: message.clone(), abandoned });
        let events = std::mem::replace(&mut self.events, Events::disabled());
        events.close(EVENTS_CLOSE_WAIT);
        Failure::guardian(message)
    }

    pub(super) fn release(&mut self, outcome: Outcome) -> Outcome {
        let code = outcome.status();
        let (mut cgroup_path, mut oom_kill) = (None, None);
        if let Some(leaf) = self.leaf.as_mut() {
            oom_kill = leaf.oom_kills();
            // `released.cgroup` names the leaf only once it is really gone: a leaf that could
            // not be removed is reported here, never claimed removed.
            if let Err(e) = leaf.remove() {
                crate::log::warn!(
                    "could not remove the leaf cgroup {}: {e}; 'guardian sweep' will",
                    leaf.path.display()
                );
            } else {
                cgroup_path = Some(leaf.path_text());
                crate::log::debug!("removed the leaf cgroup {}", leaf.path.display());
            }
        }
        if let Some(n) = oom_kill.filter(|&n| n > 0) {
            crate::log::warn!("the kernel's OOM killer killed {n} process(es) in the leaf (memory.max)");
        }
        let teardown_ms = self.state.exited_at().map_or(0.0, |t| (sys::monotonic() - t).as_micros() as f64 / 1000.0);
        let stats = &self.tree.stats;
        crate::log::info!(
            "released: status {code}, {} signalled, {} killed, {} reaped, teardown {teardown_ms:.3} ms",
            stats.signalled,
            stats.killed,
            stats.reaped
        );
        let signalled = self.tree.counts_stop_signals().then_some(stats.signalled);
        self.events.emit(Event::Released(Released {
            status: code,
            signalled,
            killed: stats.killed,
            reaped: stats.reaped,
            teardown_ms,
            cgroup: cgroup_path,
            oom_kill,
            provider: self.provider_usage,
            // After the last reap: the provider and every descendant reaped (by guardian, or
            // by a process of the tree guardian then reaped).
            tree: sys::children_usage(),
        }));
        let events = std::mem::replace(&mut self.events, Events::disabled());
        events.close(EVENTS_CLOSE_WAIT);
        outcome
    }
}
