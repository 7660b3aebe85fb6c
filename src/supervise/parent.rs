//! supervise::parent: the one parent watch (issue 33.3), used by guardian, the sentinel and
//! `doctor`. It owns the decision of how a parent's death is noticed ([`choose`]: a pidfd, a
//! bounded `getppid()` check every [`PARENT_POLL`] where `pidfd_open` is refused, or the
//! parent-death signal where the parent is outside the PID namespace), the arming of that
//! watch with no window in which the parent's death is missed ([`arm`]: the pidfd is taken
//! on the expected pid *before* `getppid()` confirms it, never on whatever `getppid()` says
//! later), guardian's start-up step that runs it ([`watch`]), and the loop's questions
//! ([`ParentWatch::is_death_signal`], [`ParentWatch::poll_says_dead`]).
//!
//! [`arm`] and [`ParentWatch::gone`] make raw system calls only (rustix), so the sentinel,
//! which shares guardian's memory, may call them (`sys::sentinel`'s hazards).

use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::events::{Event, Events};
use crate::exit::Failure;
use crate::{errno, signals, sys};

/// Interval of the bounded parent check when the parent's pidfd could not be opened.
pub const PARENT_POLL: Duration = Duration::from_millis(250);

/// What guardian does instead of a pidfd on its parent (the `fallback` event's detail; doctor
/// names the same interval).
pub fn poll_fallback() -> String {
    format!("checking getppid() every {} ms for parent death", PARENT_POLL.as_millis())
}

/// How guardian (or the sentinel) notices its parent's death.
pub enum ParentWatch {
    Pidfd(OwnedFd),
    /// pidfd_open was refused: compare getppid() on a bounded interval.
    Poll {
        ppid: i32,
        next: Duration,
    },
    /// The parent is outside guardian's PID namespace (getppid() is 0, guardian is not PID 1):
    /// `PR_SET_PDEATHSIG` with this signal, read from the signalfd like any other.
    Deathsig(i32),
}

/// How guardian would watch its parent, decided from facts alone ([`choose`]); `doctor`
/// reports the same value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// PID 1 of its namespace: there is no parent to watch.
    Pid1,
    /// The parent is visible: a pidfd on it, or the bounded `getppid()` check if refused.
    Pid(i32),
    /// The parent is outside the PID namespace: `PR_SET_PDEATHSIG` with this signal.
    Deathsig(i32),
    /// Outside, and every real-time signal is ignored: parent death cannot be noticed.
    Unwatched,
}

/// The decision: `me` (this process's pid), `ppid` (`getppid()`, `None` when 0), and which
/// signals were ignored at start. PR_SET_PDEATHSIG takes the highest real-time signal that is
/// not ignored (not one a driver forwards in practice).
pub fn choose(me: i32, ppid: Option<i32>, ignored: impl Fn(i32) -> bool) -> Choice {
    match ppid {
        Some(p) => Choice::Pid(p),
        None if me == 1 => Choice::Pid1,
        None => {
            let (min, max) = signals::sigrt_range();
            (min..=max).rev().find(|&s| !ignored(s)).map_or(Choice::Unwatched, Choice::Deathsig)
        }
    }
}

/// [`choose`] for this process, now. `kill_signal` (`--kill-signal`) is never the
/// parent-death signal: a kill request sent from outside the PID namespace (`si_pid` 0) would
/// otherwise be read as the parent's death, a graceful stop instead of SIGKILL.
pub fn choice_here(me: i32, kill_signal: Option<i32>) -> Choice {
    choose(me, parent_pid(), |s| sys::is_ignored(s) || Some(s) == kill_signal)
}

/// The parent-death signal's name as guardian reports it.
pub fn signal_name(sig: i32) -> String {
    if sig == signals::sigrt_range().1 { "SIGRTMAX".to_string() } else { signals::name(sig) }
}

/// `getppid()`, `None` when 0 (the parent is outside this PID namespace). A raw call.
pub fn parent_pid() -> Option<i32> {
    rustix::process::getppid().map(|p| p.as_raw_nonzero().get())
}

/// A watch armed on a parent: the watch, and why it polls if `pidfd_open` was refused.
pub struct Armed {
    pub watch: ParentWatch,
    pub refused: Option<rustix::io::Errno>,
}

/// The expected parent was not (or no longer) this process's parent when the watch was armed:
/// it died already. `now` is the parent there is instead.
pub struct Gone {
    pub now: Option<i32>,
}

/// Arms a watch on `parent`, the pid this process's parent had (the sentinel's pid, which the
/// sentinel knows, or `getppid()` read once): the pidfd is opened on that pid first, and only
/// then is `getppid()` compared with it. Still our parent then means it was alive, and that
/// very process, when the pidfd was opened, so the pidfd watches it whatever happens next; a
/// parent that died before is [`Gone`]. Where `pidfd_open` is refused, the poll compares
/// `getppid()` with that same pid, which has no window either. Raw system calls only.
pub fn arm(parent: i32) -> Result<Armed, Gone> {
    let opened = rustix::process::Pid::from_raw(parent)
        .ok_or(rustix::io::Errno::INVAL)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()));
    let now = parent_pid();
    if now != Some(parent) {
        return Err(Gone { now });
    }
    Ok(match opened {
        Ok(fd) => Armed { watch: ParentWatch::Pidfd(fd), refused: None },
        Err(e) => Armed { watch: ParentWatch::Poll { ppid: parent, next: Duration::ZERO }, refused: Some(e) },
    })
}

/// Start-up's parent-watch step (design.md, start-up step 5): the watch `armed` already (on
/// the sentinel, by guardian proper right after the split), else the one [`choose`] picks.
/// Reports a fallback (event and `-v` line); fails when the parent died before the provider
/// could start, or when no watch can be set up where one is needed.
pub fn watch(
    events: &mut Events,
    me: i32,
    armed: Option<Armed>,
    kill_signal: Option<i32>,
) -> Result<Option<ParentWatch>, Failure> {
    let armed = match armed {
        Some(a) => a,
        None => match choice_here(me, kill_signal) {
            Choice::Pid1 => {
                crate::log::debug!("guardian is PID 1 of its namespace: no parent to watch");
                return Ok(None);
            }
            Choice::Pid(ppid) => arm(ppid).map_err(|gone| {
                let now = gone.now.map_or(String::new(), |p| format!(" (guardian now has parent {p})"));
                Failure::guardian(format!(
                    "the parent process ({ppid}) exited before the provider could start{now}; nothing was started"
                ))
            })?,
            Choice::Deathsig(sig) => return watch_outside(events, sig).map(Some),
            Choice::Unwatched => {
                crate::log::warn!(
                    "guardian's parent is outside its PID namespace and every real-time signal was ignored when guardian started: parent death cannot be noticed"
                );
                events.emit(Event::Fallback {
                    what: "parent-watch".into(),
                    errno: "ESRCH".into(),
                    detail: "the parent is outside guardian's PID namespace and no real-time signal is free for PR_SET_PDEATHSIG; parent death is not noticed".into(),
                });
                return Ok(None);
            }
        },
    };
    if let Some(e) = armed.refused {
        let e = std::io::Error::from(e);
        // Out of fds or memory: a resource guardian lacks, not an interface the kernel lacks.
        if e.raw_os_error().is_some_and(errno::is_resource) {
            return Err(Failure::guardian(format!("pidfd_open(parent) failed: {}", errno::explain(&e))));
        }
        events.fallback("pidfd_open", &e, &poll_fallback());
    }
    Ok(Some(match armed.watch {
        ParentWatch::Poll { ppid, .. } => ParentWatch::Poll { ppid, next: sys::monotonic() },
        w => w,
    }))
}

/// The parent lives in an ancestor PID namespace (`docker exec`, `kubectl exec`, `nsenter -p`):
/// getppid() is 0 although guardian is not PID 1, so no pidfd can be opened on it. The kernel
/// still knows the parent: `PR_SET_PDEATHSIG` with `sig`. Its limits (docs/design.md): it
/// fires when the parent *thread* that started guardian exits, a kill() of that number from
/// outside the namespace (or from anywhere while the uid's queued-signal quota is exhausted,
/// which drops the sender) is taken for parent death, and a parent that died before the prctl
/// is noticed only when guardian's new parent is visible.
fn watch_outside(events: &mut Events, sig: i32) -> Result<ParentWatch, Failure> {
    let name = signal_name(sig);
    if let Err(e) = sys::set_pdeathsig(sig) {
        return Err(Failure::guardian(format!(
            "guardian's parent is outside its PID namespace and prctl(PR_SET_PDEATHSIG) failed: {e}; start guardian from a process inside its PID namespace, or pass --no-parent-watch"
        )));
    }
    // Already reparented (the parent died before the prctl)? Visible only when the new parent
    // is in guardian's namespace (its init or a subreaper there).
    if let Some(now) = parent_pid() {
        let _ = sys::set_pdeathsig(0);
        return Err(Failure::guardian(format!(
            "the parent process exited before the provider could start (guardian now has parent {now}); nothing was started"
        )));
    }
    crate::log::warn!(
        "guardian's parent is outside its PID namespace (getppid() is 0): parent death is watched with PR_SET_PDEATHSIG({name}), which fires when the parent thread that started guardian exits"
    );
    events.emit(Event::Fallback {
        what: "parent-watch".into(),
        errno: "ESRCH".into(),
        detail: format!(
            "the parent is outside guardian's PID namespace; watching it with PR_SET_PDEATHSIG({name}), which fires when the parent thread exits"
        ),
    });
    Ok(ParentWatch::Deathsig(sig))
}

impl ParentWatch {
    /// Whether `info` says the parent died: the kernel's parent-death signal (the chosen
    /// number, `SI_USER`, sender pid 0: the dying parent is outside guardian's namespace), or
    /// behind a sentinel, the sentinel's word that the host's process died
    /// (`sentinel::is_host_death`). A kill() of the death signal's number from outside the
    /// namespace looks the same, and so does any kill() of it while the uid's
    /// RLIMIT_SIGPENDING is exhausted (the kernel then drops the sender); docs/design.md
    /// (start-up step 5) says why that is accepted.
    pub fn is_death_signal(&self, info: &sys::SigInfo) -> bool {
        crate::sentinel::is_host_death(info)
            || matches!(self, ParentWatch::Deathsig(sig) if info.signo == *sig && info.code == libc::SI_USER && info.pid == 0)
    }

    /// The bounded `getppid()` check, when the parent's pidfd could not be opened: true once
    /// the parent changed (it died).
    pub fn poll_says_dead(&mut self, now: Duration) -> bool {
        let ParentWatch::Poll { next, .. } = self else { return false };
        if now < *next {
            return false;
        }
        if self.gone() {
            return true;
        }
        if let ParentWatch::Poll { next, .. } = self {
            *next = now + PARENT_POLL;
        }
        false
    }

    /// The poll's check without its timer (the sentinel wakes every [`PARENT_POLL`] itself):
    /// true once `getppid()` no longer names the watched parent. A raw call.
    pub fn gone(&self) -> bool {
        matches!(self, ParentWatch::Poll { ppid, .. } if parent_pid() != Some(*ppid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_follows_where_the_parent_is() {
        let none = |_| false;
        assert_eq!(choose(1, None, none), Choice::Pid1);
        assert_eq!(choose(1, Some(0x10), none), Choice::Pid(0x10), "PID 1 with a visible parent (a setns'd caller)");
        assert_eq!(choose(7, Some(3), none), Choice::Pid(3));
        let (min, max) = signals::sigrt_range();
        assert_eq!(choose(7, None, none), Choice::Deathsig(max));
        assert_eq!(choose(7, None, |s| s == max), Choice::Deathsig(max - 1));
        // The drivers' kill signal (RTMAX) is passed as avoided by `choice_here`.
        let kill = Some(max);
        assert_eq!(choose(7, None, |s| Some(s) == kill), Choice::Deathsig(max - 1));
        assert_eq!(choose(7, None, |s| (min..=max).contains(&s)), Choice::Unwatched);
    }
}
