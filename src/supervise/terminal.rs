//! supervise::terminal: the loop's hands on guardian's controlling terminal (`/dev/tty`):
//! taking the foreground back from the provider's tree and handing it to the provider's group,
//! as the state machine's `TakeTerminal` / `GiveTerminal` say.

use std::os::fd::AsRawFd;

use crate::sys;

use super::Supervisor;

impl Supervisor {
    /// The terminal's foreground back to guardian's group, if the tree holds it.
    pub(super) fn take_terminal(&mut self) {
        let fg = self.foreground();
        if let Some(tty) = self.tty_fd().filter(|_| fg.is_some_and(|pg| self.is_the_trees_group(pg))) {
            if let Err(e) = sys::tcsetpgrp(tty, sys::getpgrp()) {
                crate::log::debug!("taking the terminal back failed: {e}");
            }
        }
    }

    /// The foreground to the provider's group. guardian keeps SIGTTOU blocked, so the kernel
    /// would let it set the foreground even from the background: it hands over only what its
    /// own group holds.
    pub(super) fn give_terminal(&mut self) {
        match self.tty_fd().map(|t| (t, sys::tcgetpgrp(t))) {
            Some((tty, Ok(pg))) if pg == sys::getpgrp() => {
                if let Err(e) = sys::tcsetpgrp(tty, self.provider_pgid) {
                    crate::log::debug!("handing the terminal to the provider's group failed: {e}");
                }
            }
            Some((_, fg)) => crate::log::debug!("the terminal is not guardian's to hand over (foreground {fg:?})"),
            None => {}
        }
    }

    fn tty_fd(&self) -> Option<std::os::fd::RawFd> {
        self.tty.as_ref().map(|t| t.as_raw_fd())
    }

    /// Whether the terminal's foreground group `pg` belongs to the provider's tree: the
    /// provider's group, or a group whose leader is alive and descends from guardian (a job the
    /// provider started, such as an interactive shell's foreground command). A group whose
    /// leader is gone is not taken: it may be the shell's own job (`true | cmd` loses its
    /// leader at once), and the shell's group is never the tree's.
    fn is_the_trees_group(&self, pg: i32) -> bool {
        let me = std::process::id() as i32;
        if pg == self.provider_pgid {
            return true;
        }
        if pg <= 0 || pg == sys::getpgrp() {
            return false;
        }
        let ppid = |pid: i32| {
            std::fs::read(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|b| crate::proctree::parse_stat(&b))
                .map(|st| st.ppid)
        };
        let Some(mut parent) = ppid(pg) else { return false };
        // Up the ancestry (bounded: a pid chain is finite, but /proc can change under us).
        for _ in 0..4096 {
            match parent {
                p if p == me => return true,
                p if p <= 1 => return false,
                p => match ppid(p) {
                    Some(next) => parent = next,
                    None => return false,
                },
            }
        }
        false
    }

    /// The terminal's foreground process group, if guardian has a controlling terminal.
    pub(super) fn foreground(&self) -> Option<i32> {
        sys::tcgetpgrp(self.tty_fd()?).ok()
    }
}
