//! sentinel: makes a SIGKILL of the process the host started lead to the tree's teardown
//! (issue 24). When guardian is not PID 1, the process the host started (the *sentinel*) forks
//! right after start-up's signal step; the child becomes guardian proper (subreaper, parent of
//! the provider, owner of the events) in a process group of its own, and its parent watch
//! watches the sentinel. The sentinel stays small and does four things until guardian ends:
//!
//! * every signal it reads from the signalfd but SIGCHLD goes on to guardian (`kill`, so a
//!   stop request stays one request: guardian is outside the host's process group and hears
//!   a group signal only through the sentinel);
//! * a job-control stop of guardian (SIGTSTP, SIGTTIN, SIGTTOU) is repeated on the sentinel's
//!   own group, so the shell sees the job stop; a stop the kernel refuses (orphaned group) is
//!   answered with a `sigqueue`d SIGCONT, which guardian reads as "suspend refused";
//! * its own parent's death ends it, which guardian sees as its parent's death;
//! * it is a subreaper too: if guardian itself dies of a signal (someone looked it up and
//!   SIGKILLed it), what was reparented to the sentinel is SIGKILLed and reaped to ECHILD;
//!
//! and then it ends as guardian ended ([`crate::exit::end_like`]). A SIGKILL of the sentinel (the host's
//! `kill_on_drop`, `Popen.kill()`, `kill -9 $!`, `killpg(SIGKILL)` of the host's group) ends
//! only the sentinel: guardian's parent watch fires and the usual teardown runs.
//!
//! Not used as PID 1 (the kernel ends the namespace with it), when the parent or the process
//! group is outside guardian's PID namespace (the host's process is outside too, so killing it
//! does not kill guardian), and with `--no-sentinel` (`GUARDIAN_NO_SENTINEL=1`). `doctor` says which applies.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::events::Events;
use crate::exit::Failure;
use crate::status::WaitStatus;
use crate::sys;
use crate::{signal_step, signals};

/// The sentinel's pid and process group, as guardian (its child) recorded them; 0 without.
static SENTINEL: AtomicI32 = AtomicI32::new(0);
static JOB_PGRP: AtomicI32 = AtomicI32::new(0);

/// The process group of the job guardian belongs to, for terminal job control: the
/// sentinel's (the host's) group behind a sentinel, else guardian's own.
pub fn job_pgrp() -> i32 {
    match JOB_PGRP.load(Ordering::Relaxed) {
        0 => sys::getpgrp(),
        pg => pg,
    }
}

/// The sentinel's pid, when guardian runs behind one: the pid the host started and sees.
pub fn pid() -> Option<i32> {
    Some(SENTINEL.load(Ordering::Relaxed)).filter(|&p| p > 0)
}

/// Whether `info` is the sentinel's answer to a job-control stop it could not repeat.
pub fn is_refused_suspend(info: &sys::SigInfo) -> bool {
    info.signo == libc::SIGCONT && info.code == libc::SI_QUEUE && pid().is_some_and(|p| p as u32 == info.pid)
}

/// Why there is no sentinel here, or `None` when there is one (also for `doctor`).
/// `turned_off`: `--no-sentinel` (`GUARDIAN_NO_SENTINEL`).
pub fn off_reason(me: i32, turned_off: bool) -> Option<&'static str> {
    if turned_off {
        return Some("turned off (--no-sentinel, GUARDIAN_NO_SENTINEL)");
    }
    if me == 1 {
        return Some("guardian is PID 1: the kernel ends the namespace with it");
    }
    if rustix::process::getppid().is_none() || sys::getpgrp() == 0 {
        return Some("the parent or the process group is outside guardian's PID namespace");
    }
    None
}

/// Splits the process the host started into sentinel and guardian, unless [`off_reason`]
/// says not to. Returns guardian's pid in guardian; the sentinel never returns.
pub fn split(
    me: i32,
    setup: &signal_step::Setup,
    watch_parent: bool,
    turned_off: bool,
    events: &mut Events,
) -> Result<i32, Failure> {
    if let Some(why) = off_reason(me, turned_off) {
        crate::log::debug!("no sentinel process: {why}");
        return Ok(me);
    }
    let job = sys::getpgrp();
    let host = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    // Before the fork, so that an orphan of guardian's tree can never miss it.
    rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(me))
        .map_err(|e| Failure::guardian(format!("prctl(PR_SET_CHILD_SUBREAPER) failed: {e}")))?;
    match sys::fork().map_err(|e| Failure::guardian(format!("fork() of guardian failed: {e}")))? {
        sys::Forked::Child => {
            // Out of the host's process group: a group signal reaches guardian once, through
            // the sentinel, and a killpg(SIGKILL) of the host's group leaves guardian alive to
            // tear the tree down. (The sentinel does the same from its side.)
            let me = std::process::id() as i32;
            let _ = sys::setpgid(0, 0);
            SENTINEL.store(host_side_pid(me), Ordering::Relaxed);
            JOB_PGRP.store(job, Ordering::Relaxed);
            Ok(me)
        }
        sys::Forked::Parent(guardian) => {
            let _ = sys::setpgid(guardian, guardian);
            // The sentinel writes no events: its copy of the events fd goes.
            drop(std::mem::replace(events, Events::disabled()));
            let parent = if watch_parent { ParentWatch::new(host) } else { ParentWatch::None };
            // The pages start-up dirtied and the loop will not touch go back, as in guardian.
            sys::release_startup_memory();
            run(guardian, setup.sigfd.as_fd(), parent)
        }
    }
}

/// The sentinel's pid, seen from guardian: its parent right after the fork.
fn host_side_pid(fallback: i32) -> i32 {
    rustix::process::getppid().map_or(fallback, |p| p.as_raw_nonzero().get())
}

/// How the sentinel notices its own parent's death.
enum ParentWatch {
    None,
    Pidfd(OwnedFd),
    /// `getppid()` every 250 ms (pidfd_open refused); the parent's pid.
    Poll(i32),
}

impl ParentWatch {
    fn new(host: i32) -> ParentWatch {
        let watch = match sys::pidfd_open(host) {
            Ok(fd) => ParentWatch::Pidfd(fd),
            Err(_) => ParentWatch::Poll(host),
        };
        // Gone already (between guardian's start and here)? Then the sentinel ends at once.
        if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(host) {
            parent_died();
        }
        watch
    }

    fn gone(&self) -> bool {
        match self {
            ParentWatch::None | ParentWatch::Pidfd(_) => false,
            ParentWatch::Poll(host) => rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(*host),
        }
    }
}

/// The host died: the sentinel ends, and guardian's parent watch turns that into the
/// teardown (nobody is left to read the sentinel's status).
fn parent_died() -> ! {
    std::process::exit(crate::exit::GUARDIAN)
}

/// The sentinel's loop: forward signals, mirror job-control stops, watch the parent, and end
/// as guardian ends.
fn run(guardian: i32, sigfd: std::os::fd::BorrowedFd<'_>, parent: ParentWatch) -> ! {
    use rustix::event::{PollFd, PollFlags, poll};
    let timeout =
        matches!(parent, ParentWatch::Poll(_)).then(|| rustix::event::Timespec { tv_sec: 0, tv_nsec: 250_000_000 });
    loop {
        let mut fds = vec![PollFd::new(&sigfd, PollFlags::IN)];
        if let ParentWatch::Pidfd(fd) = &parent {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        let _ = poll(&mut fds, timeout.as_ref());
        let parent_ready = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        drop(fds);
        if parent_ready || parent.gone() {
            parent_died();
        }
        while let Ok(Some(info)) = sys::read_signalfd(sigfd) {
            if info.signo != libc::SIGCHLD && signals::is_forwarded(info.signo) {
                let _ = sys::kill(guardian, info.signo);
            }
        }
        // After the signals: a SIGCHLD may have been merged into one already read.
        if let Some(status) = guardian_changed(guardian) {
            end(status);
        }
    }
}

/// guardian's latest stop (repeated here) or its end (returned).
fn guardian_changed(guardian: i32) -> Option<WaitStatus> {
    use rustix::process::{Pid, WaitOptions, waitpid};
    let target = Pid::from_raw(guardian)?;
    loop {
        match waitpid(Some(target), WaitOptions::NOHANG | WaitOptions::UNTRACED) {
            Ok(Some((_, st))) if st.stopped() => {
                let sig = st.stopping_signal().unwrap_or(libc::SIGSTOP);
                if matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
                    mirror_stop(guardian, sig);
                }
                // Another report may wait behind this one (stopped, then already gone).
                continue;
            }
            Ok(Some((_, st))) => return Some(WaitStatus(st.as_raw())),
            Ok(None) => return None,
            Err(rustix::io::Errno::INTR) => continue,
            // ECHILD cannot happen while guardian is unreaped; answer as if it died of SIGKILL.
            Err(_) => return Some(WaitStatus(libc::SIGKILL)),
        }
    }
}

/// guardian stopped itself for job control: the shell waits on the sentinel, so the sentinel
/// stops its group the same way. Continued (fg, bg), it reads the SIGCONT from its signalfd
/// and forwards it; if the kernel would not stop it, guardian hears a queued SIGCONT.
fn mirror_stop(guardian: i32, sig: i32) {
    match sys::stop_own_group(sig) {
        Ok(true) => {}
        Ok(false) | Err(_) => {
            let _ = sys::queue_signal(guardian, libc::SIGCONT);
        }
    }
}

/// guardian ended: if a signal ended it (SIGKILL from someone who looked it up), its tree was
/// reparented here and is killed first; then the sentinel ends the same way.
fn end(status: WaitStatus) -> ! {
    if status.signal().is_some() {
        peel();
    }
    crate::exit::end_like(status)
}

/// SIGKILLs the sentinel's children (guardian's tree, reparented after guardian's death) and
/// reaps them, again for each newly reparented generation, until ECHILD; gives up after 5 s
/// without a kill or a reap (a child it may not signal).
fn peel() {
    use rustix::process::{WaitOptions, wait};
    let mut last = sys::monotonic();
    let mut killed = Vec::new();
    while sys::monotonic() - last < Duration::from_secs(5) {
        if let Ok(list) = std::fs::read_to_string("/proc/thread-self/children") {
            for pid in list.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                // An unreaped child of ours: its pid cannot be reused.
                if !killed.contains(&pid) && sys::kill(pid, libc::SIGKILL).is_ok() {
                    killed.push(pid);
                    last = sys::monotonic();
                }
            }
        }
        loop {
            match wait(WaitOptions::NOHANG) {
                Ok(Some((pid, _))) => {
                    killed.retain(|&k| k != pid.as_raw_nonzero().get());
                    last = sys::monotonic();
                }
                Ok(None) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return, // ECHILD: nothing left
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
