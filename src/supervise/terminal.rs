//! supervise::terminal: the loop's hands on guardian's controlling terminal (`/dev/tty`, [`Tty`]):
//! taking the foreground back from the provider's tree and handing it to the provider's group,
//! as the state machine's `TakeTerminal` / `GiveTerminal` say.

use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys;

/// guardian's controlling terminal (`/dev/tty`): every tcgetpgrp/tcsetpgrp goes through it.
pub struct Tty {
    fd: OwnedFd,
    /// The provider's process group.
    provider_pgid: i32,
}

impl Tty {
    pub fn new(fd: OwnedFd, provider_pgid: i32) -> Tty {
        Tty { fd, provider_pgid }
    }

    /// The terminal's foreground back to guardian's group, if the tree holds it.
    pub fn take_back(&self) {
        let fg = self.foreground();
        if fg.is_some_and(|pg| self.is_the_trees_group(pg)) {
            if let Err(e) = sys::tcsetpgrp(self.tty_fd(), crate::sentinel::job_pgrp()) {
                crate::log::debug!("taking the terminal back failed: {e}");
            }
        }
    }

    /// The foreground to the provider's group. guardian keeps SIGTTOU blocked, so the kernel
    /// would let it set the foreground even from the background: it hands over only what its
    /// own group holds.
    pub fn hand_over(&self) {
        match sys::tcgetpgrp(self.tty_fd()) {
            Ok(pg) if pg == crate::sentinel::job_pgrp() => {
                if let Err(e) = sys::tcsetpgrp(self.tty_fd(), self.provider_pgid) {
                    crate::log::debug!("handing the terminal to the provider's group failed: {e}");
                }
            }
            fg => crate::log::debug!("the terminal is not guardian's to hand over (foreground {fg:?})"),
        }
    }

    fn tty_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
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
        if pg <= 0 || pg == crate::sentinel::job_pgrp() {
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
    pub fn foreground(&self) -> Option<i32> {
        sys::tcgetpgrp(self.tty_fd()).ok()
    }
}
