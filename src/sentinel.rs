//! sentinel: makes a SIGKILL of the process the host started lead to the tree's teardown
//! (issue 24). When guardian is not PID 1, the process the host started (the *sentinel*)
//! starts guardian proper right after start-up's signal step, with `clone(CLONE_VM)` on a
//! stack of its own (`sys::clone_vm`): the two share one address space, so the pair costs one
//! process's memory (a `fork` duplicated every page guardian wrote afterwards). guardian
//! proper (subreaper, parent of the provider, owner of the events) runs in a process group
//! of its own, and its parent watch watches the sentinel. The sentinel stays on the original
//! stack, runs only [`Sentinel`]'s loop, in raw system calls (no C library, no heap, no std
//! I/O: `sys::sentinel` lists the shared-memory hazards), and does four things until
//! guardian ends:
//!
//! * every signal it reads from the signalfd but SIGCHLD goes on to guardian
//!   (`rt_sigqueueinfo` naming the original sender, [`Sentinel::forward`]), so that a stop
//!   request that reached both processes is one request: guardian is outside the host's
//!   process group and hears a group signal only through the sentinel;
//! * a job-control stop of guardian (SIGTSTP, SIGTTIN, SIGTTOU) is repeated on the sentinel's
//!   own group, so the shell sees the job stop; a stop the kernel refuses (orphaned group) is
//!   answered with a `sigqueue`d SIGCONT, which guardian reads as "suspend refused";
//! * its own parent's death ends it, which guardian sees as its parent's death;
//! * it is a subreaper too: if guardian itself dies of a signal (someone looked it up and
//!   SIGKILLed it), what was reparented to the sentinel is SIGKILLed and reaped to ECHILD;
//!
//! and then it ends as guardian ended (`end`: raw system calls only, since it shares guardian's
//! memory; not `exit::end`, whose std exit would run guardian's exit handlers). A
//! SIGKILL of the sentinel (the host's
//! `kill_on_drop`, `Popen.kill()`, `kill -9 $!`, `killpg(SIGKILL)` of the host's group) ends
//! only the sentinel: guardian's parent watch fires and the usual teardown runs.
//!
//! Not used as PID 1 (the kernel ends the namespace with it), when the parent or the process
//! group is outside guardian's PID namespace (the host's process is outside too, so killing it
//! does not kill guardian), and with `--no-sentinel` (`GUARDIAN_NO_SENTINEL=1`). `doctor` says which applies.

use std::convert::Infallible;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::exit::Failure;
use crate::signals;
use crate::status::WaitStatus;
use crate::sys::{self, Raw};

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

/// What the sentinel needs from start-up, as plain values (guardian owns everything else).
pub struct Plan {
    /// The process the host started (this one).
    pub me: i32,
    /// The signalfd of start-up's signal step (guardian's; the sentinel reads a duplicate).
    pub sigfd: RawFd,
    /// Whether to watch the host's process (not `--no-parent-watch`).
    pub watch_parent: bool,
    /// The events fd guardian writes, which the sentinel's fd table must not keep open.
    pub events_fd: Option<RawFd>,
    /// `--no-sentinel` (`GUARDIAN_NO_SENTINEL`).
    pub turned_off: bool,
}

/// The rest of guardian, given its pid (or the failure to report). Boxed: what it owns
/// stays on the heap, so neither the sentinel's frames nor guardian's new stack carry it.
pub type Guardian = Box<dyn FnOnce(Result<i32, Failure>) -> Infallible>;

/// Splits the process the host started into sentinel and guardian, unless [`off_reason`]
/// says not to, and runs `guardian` with guardian's pid in guardian (or with the failure to
/// report); the sentinel runs its loop here and never returns.
pub fn split(plan: Plan, guardian: Guardian) -> ! {
    if let Some(why) = off_reason(plan.me, plan.turned_off) {
        crate::log::debug!("no sentinel process: {why}");
        match guardian(Ok(plan.me)) {}
    }
    let job = sys::getpgrp();
    let host = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    // Before the clone, so that an orphan of guardian's tree can never miss it.
    if let Err(e) = rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(plan.me)) {
        match guardian(Err(Failure::guardian(format!(
            "prctl(PR_SET_CHILD_SUBREAPER) failed: {}",
            crate::errno::explain(&std::io::Error::from(e))
        )))) {}
    }
    // Everything the sentinel will use, made now, while it may still call the C library: its
    // own signalfd (a duplicate; guardian closes its copy), the stack's extent.
    let sigfd = match sys::dup_cloexec(plan.sigfd) {
        Ok(fd) => fd,
        Err(e) => {
            match guardian(Err(Failure::guardian(format!("dup of the signalfd failed: {}", crate::errno::explain(&e))))) {}
        }
    };
    let main_stack = sys::main_stack();
    let own = sigfd.as_raw_fd();
    match sys::clone_vm((guardian, job, own, plan.me), guardian_main) {
        Err((e, (guardian, _, _, _))) => {
            drop(sigfd);
            match guardian(Err(Failure::guardian(format!(
                "clone(CLONE_VM) of guardian failed: {}",
                crate::errno::explain(&e)
            )))) {}
        }
        Ok(pid) => Sentinel { guardian: pid, sigfd }.start(host, plan, main_stack),
    }
}

/// guardian's side of the clone, on its own stack: out of the host's process group, then
/// the rest of guardian.
fn guardian_main((guardian, job, sentinel_sigfd, sentinel): (Guardian, i32, RawFd, i32)) -> ! {
    let me = std::process::id() as i32;
    // The sentinel's duplicate of the signalfd is the sentinel's; this fd table's copy goes.
    Raw::close(sentinel_sigfd);
    // Out of the host's process group: a group signal reaches guardian once, through the
    // sentinel, and a killpg(SIGKILL) of the host's group leaves guardian alive to tear the
    // tree down. (The sentinel does the same from its side.)
    let _ = sys::setpgid(0, 0);
    // A panic ends guardian by SIGABRT sent with its own pid: musl's `abort()` would signal
    // the thread id in the C library's thread structure, which is the sentinel's (shared
    // memory, one thread pointer: `sys::sentinel`).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        Raw::die_of(libc::SIGABRT)
    }));
    SENTINEL.store(sentinel, Ordering::Relaxed);
    JOB_PGRP.store(job, Ordering::Relaxed);
    // A sentinel killed between the clone and here has already handed guardian to another
    // reaper: the parent watch would then watch that reaper. Nothing has started yet, so
    // guardian stops (its parent's death before the provider exists).
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(sentinel) {
        match guardian(Err(Failure::guardian(
            "guardian's sentinel (the process that was started) died before the provider was started; nothing was started",
        ))) {}
    }
    match guardian(Ok(me)) {}
}

/// A signal the sentinel read: number, `si_code`, sender's pid and uid.
#[derive(Clone, Copy)]
struct Read {
    signo: i32,
    code: i32,
    sender: i32,
    uid: u32,
}

/// How the sentinel notices its own parent's death.
enum ParentWatch {
    None,
    Pidfd(OwnedFd),
    /// `getppid()` every 250 ms (pidfd_open refused); the parent's pid.
    Poll(i32),
}

fn parent_pid() -> Option<i32> {
    rustix::process::getppid().map(|p| p.as_raw_nonzero().get())
}

impl ParentWatch {
    fn new(host: i32) -> ParentWatch {
        let watch = match rustix::process::Pid::from_raw(host)
            .map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()))
        {
            Some(Ok(fd)) => ParentWatch::Pidfd(fd),
            _ => ParentWatch::Poll(host),
        };
        // Gone already (between guardian's start and here)? Then the sentinel ends at once.
        if parent_pid() != Some(host) {
            parent_died();
        }
        watch
    }

    fn gone(&self) -> bool {
        match self {
            ParentWatch::None | ParentWatch::Pidfd(_) => false,
            ParentWatch::Poll(host) => parent_pid() != Some(*host),
        }
    }
}

/// The host died: the sentinel ends, and guardian's parent watch turns that into the
/// teardown (nobody is left to read the sentinel's status).
fn parent_died() -> ! {
    Raw::exit(crate::exit::GUARDIAN)
}

/// The sentinel, once guardian runs in the memory it shares. Every call from here on is a
/// raw system call (rustix's own, or `sys::Raw`): no C library, no allocation, no std I/O,
/// no write to a static; its fds and values are its own (the `OwnedFd`s are never dropped:
/// it ends with `exit_group`).
struct Sentinel {
    guardian: i32,
    sigfd: OwnedFd,
}

impl Sentinel {
    fn start(self, host: i32, plan: Plan, main_stack: sys::MainStack) -> ! {
        use rustix::process::{Pid, setpgid};
        let _ = setpgid(Pid::from_raw(self.guardian), Pid::from_raw(self.guardian));
        // The sentinel writes no events and its signalfd is the duplicate: its fd table's
        // copies of guardian's go (the fd table is not shared, only the memory).
        if let Some(fd) = plan.events_fd {
            Raw::close(fd);
        }
        Raw::close(plan.sigfd);
        let parent = if plan.watch_parent { ParentWatch::new(host) } else { ParentWatch::None };
        self.run(parent, main_stack)
    }

    /// Forward signals, mirror job-control stops, watch the parent, and end as guardian ends.
    fn run(self, parent: ParentWatch, main_stack: sys::MainStack) -> ! {
        use rustix::event::{PollFd, PollFlags, poll};
        let timeout = matches!(parent, ParentWatch::Poll(_))
            .then_some(rustix::event::Timespec { tv_sec: 0, tv_nsec: 250_000_000 });
        loop {
            // The stack pages below this frame go back before each wait, as in guardian: the
            // ones start-up dirtied, and any the previous round's calls did (where the page
            // boundary falls depends on the stack's random start, so a deeper call can
            // otherwise keep one more page resident for the sentinel's whole life). A round
            // is a signal or guardian's change, rare.
            sys::release_dead_stack(main_stack);
            let parent_ready = match &parent {
                ParentWatch::Pidfd(fd) => {
                    let mut fds = [PollFd::new(&self.sigfd, PollFlags::IN), PollFd::new(fd, PollFlags::IN)];
                    let _ = poll(&mut fds, timeout.as_ref());
                    !fds[1].revents().is_empty()
                }
                _ => {
                    let mut fds = [PollFd::new(&self.sigfd, PollFlags::IN)];
                    let _ = poll(&mut fds, timeout.as_ref());
                    false
                }
            };
            if parent_ready || parent.gone() {
                parent_died();
            }
            while let Some(read) = self.read_signal() {
                self.forward(read);
            }
            // After the signals: a SIGCHLD may have been merged into one already read.
            if let Some(status) = self.guardian_changed() {
                end(status);
            }
        }
    }

    /// One signal from the signalfd, into a buffer on the stack (`signalfd_siginfo`, 128
    /// bytes: `ssi_signo`, `ssi_errno`, `ssi_code`, `ssi_pid`, `ssi_uid` first).
    fn read_signal(&self) -> Option<Read> {
        let mut buf = [0u8; 128];
        if !matches!(rustix::io::read(&self.sigfd, &mut buf), Ok(128)) {
            return None;
        }
        let word = |at: usize| i32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        Some(Read { signo: word(0), code: word(8), sender: word(12), uid: word(16) as u32 })
    }

    /// Passes a signal on to guardian proper as its sender sent it: `rt_sigqueueinfo` with
    /// the original sender's pid and uid and the sentinel's mark holding the original
    /// `si_code` (`signals::forward_value`). guardian proper then sees one sender for a stop
    /// request that reached both processes (systemd's `KillMode=control-group`, coreutils
    /// `timeout`, an outer guardian), and folds the two deliveries into one request. A
    /// refused queue (the queued-signal quota, `EAGAIN`) falls back to `kill`, which still
    /// delivers the signal, as from the sentinel.
    fn forward(&self, read: Read) {
        if read.signo == libc::SIGCHLD || !signals::is_forwarded(read.signo) {
            return;
        }
        let value = signals::forward_value(read.code);
        if Raw::queue_as(self.guardian, read.signo, read.sender, read.uid, value).is_err() {
            let _ = Raw::kill(self.guardian, read.signo);
        }
    }

    /// guardian's latest stop (repeated here) or its end (returned).
    fn guardian_changed(&self) -> Option<WaitStatus> {
        use rustix::process::{Pid, WaitOptions, waitpid};
        let target = Pid::from_raw(self.guardian)?;
        loop {
            match waitpid(Some(target), WaitOptions::NOHANG | WaitOptions::UNTRACED) {
                Ok(Some((_, st))) if st.stopped() => {
                    let sig = st.stopping_signal().unwrap_or(libc::SIGSTOP);
                    if matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
                        self.mirror_stop(sig);
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

    /// guardian stopped itself for job control: the shell waits on the sentinel, so the
    /// sentinel stops its group the same way (`sys::stop_own_group`, in raw calls). Continued
    /// (fg, bg), it reads the SIGCONT from its signalfd and forwards it; if the kernel would
    /// not stop it, guardian hears a queued SIGCONT.
    fn mirror_stop(&self, sig: i32) {
        let stopped = Raw::kill(0, sig)
            .and_then(|()| Raw::mask_one(libc::SIG_UNBLOCK, sig))
            .and_then(|()| Raw::mask_one(libc::SIG_BLOCK, sig))
            .and_then(|()| Raw::is_pending(libc::SIGCONT));
        if stopped != Ok(true) {
            let _ = Raw::queue_signal(self.guardian, libc::SIGCONT);
        }
    }
}

/// guardian ended: if a signal ended it (SIGKILL from someone who looked it up), its tree was
/// reparented here and is killed first; then the sentinel ends the same way.
fn end(status: WaitStatus) -> ! {
    if status.signal().is_some() {
        peel();
    }
    // Ends this process the way guardian ended: its exit code, or death by the same signal
    // (no core dump).
    match (status.exit_code(), status.signal()) {
        (Some(code), _) => Raw::exit(code),
        (None, Some(sig)) => Raw::die_of(sig),
        (None, None) => Raw::exit(crate::exit::GUARDIAN),
    }
}

/// SIGKILLs the sentinel's children (guardian's tree, reparented after guardian's death) and
/// reaps them, again for each newly reparented generation, until ECHILD; gives up after 5 s
/// without a kill or a reap (a child it may not signal). No heap even now: guardian may have
/// died inside `malloc`.
fn peel() {
    use rustix::process::{WaitOptions, wait};
    // Progress is counted in 5 ms polls, not read from a clock: rustix's clock_gettime
    // initialises a static and may panic, neither of which the sentinel may do (it shares
    // guardian's memory and panic hook). 1000 polls without progress: about 5 s.
    const IDLE_POLLS: u32 = 1000;
    let mut idle = 0;
    let mut killed = [0i32; 256];
    let mut n = 0;
    while idle < IDLE_POLLS {
        idle += 1;
        for_each_child(|pid| {
            // An unreaped child of ours: its pid cannot be reused.
            if n < killed.len() && !killed[..n].contains(&pid) && Raw::kill(pid, libc::SIGKILL).is_ok() {
                killed[n] = pid;
                n += 1;
                idle = 0;
            }
        });
        loop {
            match wait(WaitOptions::NOHANG) {
                Ok(Some((pid, _))) => {
                    if let Some(i) = killed[..n].iter().position(|&k| k == pid.as_raw_nonzero().get()) {
                        killed[i] = killed[n - 1];
                        n -= 1;
                    }
                    idle = 0;
                }
                Ok(None) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return, // ECHILD: nothing left
            }
        }
        let _ = rustix::event::poll(&mut [], Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 5_000_000 }));
    }
}

/// Calls `f` with each pid in `/proc/thread-self/children`, read in pieces into a buffer on
/// the stack.
fn for_each_child(mut f: impl FnMut(i32)) {
    use rustix::fs::{Mode, OFlags, open};
    let Ok(fd) = open(c"/proc/thread-self/children", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
        return;
    };
    let mut buf = [0u8; 256];
    let mut pid: Option<i32> = None;
    while let Ok(len @ 1..) = rustix::io::read(&fd, &mut buf) {
        for &b in &buf[..len] {
            if b.is_ascii_digit() {
                pid = Some(pid.unwrap_or(0).saturating_mul(10).saturating_add(i32::from(b - b'0')));
            } else if let Some(p) = pid.take() {
                f(p);
            }
        }
    }
    if let Some(p) = pid {
        f(p);
    }
    Raw::close(fd.into_raw_fd());
}
