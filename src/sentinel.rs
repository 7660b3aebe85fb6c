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
//! * guardian's request to show a job-control stop (`suspend`): guardian proper never stops
//!   itself behind a sentinel, so a stopped job whose sentinel is SIGKILLed (`kill -9 %1`)
//!   still has a running guardian to tear the tree down (issue 29.4);
//! * its own parent's death (the host's) is told to guardian (a queued signal,
//!   [`is_host_death`]), which tears the tree down as for any parent death; the sentinel
//!   goes on until guardian ends (issue 29.10: the pid the host started never ends before
//!   the tree, and ends with guardian's status);
//! * it is a subreaper too: if guardian itself dies of a signal (someone looked it up and
//!   SIGKILLed it), what was reparented to the sentinel is SIGKILLed and reaped to ECHILD;
//!
//! and then it ends as guardian ended (`end`: raw system calls only, since it shares guardian's
//! memory; not `exit::end`, whose std exit would run guardian's exit handlers). A
//! SIGKILL of the sentinel (the host's
//! `kill_on_drop`, `Popen.kill()`, `kill -9 $!`, `killpg(SIGKILL)` of the host's group) ends
//! only the sentinel: guardian's parent watch fires and the usual teardown runs.
//!
//! guardian proper arms its parent watch on the sentinel itself (`supervise::parent::arm`: a
//! pidfd on the sentinel's pid taken before `getppid()` confirms it), so there is no instant
//! in which the sentinel's death could be missed (issue 29.2).
//!
//! Not used as PID 1 (the kernel ends the namespace with it), when the parent is outside
//! guardian's PID namespace (the host's process is outside too; its death is watched with
//! the parent-death signal), and with `--no-sentinel` (`GUARDIAN_NO_SENTINEL=1`). Where the
//! process group alone is outside (`unshare -pf sh -c 'guardian … & kill -9 $!'`) the parent
//! that can SIGKILL what it started is inside, and the sentinel is used (issue 29.3). Where
//! `clone(CLONE_VM)` is refused (a seccomp profile, valgrind, an emulator, or an `RLIMIT_AS`
//! too small for guardian's stack), the sentinel is a `fork` of guardian instead: the same
//! guarantees for more memory, reported as a `fallback` event and a `-v` line; only if that
//! fails too does guardian run without one (a second `fallback`). `doctor` says which applies.

use std::convert::Infallible;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::events::{Event, Events};
use crate::exit::Failure;
use crate::signals;
use crate::status::WaitStatus;
use crate::supervise::parent::{self, ParentWatch};
use crate::sys::{self, Raw};

/// The sentinel's pid and process group, as guardian (its child) recorded them; 0 without
/// (a group outside guardian's PID namespace is 0 too).
static SENTINEL: AtomicI32 = AtomicI32::new(0);
static JOB_PGRP: AtomicI32 = AtomicI32::new(0);

/// `si_code` of the sentinel's word that the host's process died (any negative code may be
/// queued; this one is guardian's own).
const HOST_DEATH_CODE: i32 = -0x4764;
/// `si_code` of guardian proper's request that the sentinel show a job-control stop.
const SUSPEND_CODE: i32 = -0x4773;

/// The process group of the job guardian belongs to, for terminal job control: the
/// sentinel's (the host's) group behind a sentinel (0 when it is outside guardian's PID
/// namespace), else guardian's own.
pub fn job_pgrp() -> i32 {
    match pid() {
        Some(_) => JOB_PGRP.load(Ordering::Relaxed),
        None => sys::getpgrp(),
    }
}

/// The sentinel's pid, when guardian runs behind one: the pid the host started and sees.
pub fn pid() -> Option<i32> {
    Some(SENTINEL.load(Ordering::Relaxed)).filter(|&p| p > 0)
}

/// The signal that carries the sentinel's word that the host died ([`HOST_DEATH_CODE`]): the
/// lowest real-time one. `signal_step::setup` always handles it, even when the caller ignored
/// it, or guardian proper would discard the word and never notice the host's death.
pub fn host_death_signal() -> i32 {
    signals::sigrt_range().0
}

/// Whether `info` is the sentinel's word that the host's process (its parent) died.
pub fn is_host_death(info: &sys::SigInfo) -> bool {
    info.code == HOST_DEATH_CODE && pid().is_some_and(|p| p as u32 == info.pid)
}

/// Shows a job-control stop of the job (`sig`: SIGTSTP, SIGTTIN or SIGTTOU) to whoever
/// controls it. Behind a sentinel guardian proper asks the sentinel, which stops itself (the
/// process the shell waits on) and answers with the SIGCONT that continues it, or a queued
/// one if the kernel would not stop it: guardian proper keeps running, so the sentinel's
/// death while the job is stopped is still noticed. Without one guardian stops its own group
/// (`sys::stop_own_group`). `Ok(true)`: the stop was shown, its SIGCONT comes on the
/// signalfd; `Ok(false)`: the kernel would not stop the job.
pub fn suspend(sig: i32) -> std::io::Result<bool> {
    match pid() {
        Some(s) => Raw::queue(s, sig, SUSPEND_CODE).map(|()| true).map_err(std::io::Error::from_raw_os_error),
        None => sys::stop_own_group(sig),
    }
}

/// Why there is no sentinel here, or `None` when there is one (also for `doctor`).
/// `turned_off`: `--no-sentinel` (`GUARDIAN_NO_SENTINEL`). Decided by whether the process
/// that can SIGKILL what it started, guardian's parent, can reach guardian proper: a parent in
/// guardian's PID namespace can; where the process group alone is outside, the parent is
/// still inside and the sentinel is used.
pub fn off_reason(me: i32, turned_off: bool) -> Option<&'static str> {
    if turned_off {
        return Some("turned off (--no-sentinel, GUARDIAN_NO_SENTINEL)");
    }
    if me == 1 {
        return Some("guardian is PID 1: the kernel ends the namespace with it");
    }
    if parent::parent_pid().is_none() {
        return Some("the parent is outside guardian's PID namespace (its death is watched with PR_SET_PDEATHSIG)");
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

/// What guardian proper gets from the split: its pid, the watch it armed on the sentinel,
/// and a fallback to report once it can write events.
pub struct Proper {
    pub me: i32,
    /// The parent watch armed on the sentinel (`None` without a sentinel).
    pub parent: Option<parent::Armed>,
    /// `(errno, detail)` of a sentinel fallback (a forked sentinel, or none).
    fallback: Vec<(String, String)>,
    /// Where the job's group (the sentinel's) lives outside guardian's PID namespace: whether
    /// it held the terminal's foreground, asked before the split while guardian was still in
    /// that group (a zero-length read; from its own group the answer would be "background").
    pub job_in_foreground: Option<bool>,
}

impl Proper {
    fn alone(me: i32) -> Proper {
        Proper { me, parent: None, fallback: Vec::new(), job_in_foreground: None }
    }

    /// Emits the sentinel's fallbacks (event and `-v` line).
    pub fn report(&mut self, events: &mut Events) {
        for (errno, detail) in self.fallback.drain(..) {
            crate::log::info!("sentinel fallback ({errno}): {detail}");
            events.emit(Event::Fallback { what: "sentinel".into(), errno, detail });
        }
    }
}

/// The rest of guardian, given what the split left it (or the failure to report). Boxed:
/// what it owns stays on the heap, so neither the sentinel's frames nor guardian's new stack
/// carry it.
pub type Guardian = Box<dyn FnOnce(Result<Proper, Failure>) -> Infallible>;

/// Splits the process the host started into sentinel and guardian, unless [`off_reason`]
/// says not to, and runs `guardian` with guardian's pid in guardian (or with the failure to
/// report); the sentinel runs its loop here and never returns.
pub fn split(plan: Plan, guardian: Guardian) -> ! {
    if let Some(why) = off_reason(plan.me, plan.turned_off) {
        crate::log::debug!("no sentinel process: {why}");
        match guardian(Ok(Proper::alone(plan.me))) {}
    }
    let job = sys::getpgrp();
    let host = parent::parent_pid().unwrap_or(0);
    // The message number for the host's death, read while the C library may still be called.
    let host_death_signal = host_death_signal();
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
    // Where the job's group is outside the PID namespace, whether it holds the terminal, for
    // start-up's terminal step: asked now, while guardian is still in that group (`tcgetpgrp`
    // cannot name an invisible group; only a read from inside it can), before either side of
    // the split moves guardian into a group of its own.
    let job_in_foreground = match (job, sys::open_controlling_terminal()) {
        (0, Ok(Some(t))) => sys::in_foreground(std::os::fd::AsFd::as_fd(&t)).ok(),
        _ => None,
    };
    let own = sigfd.as_raw_fd();
    let sentinel = |pid| Sentinel { guardian: pid, sigfd, host_death_signal };
    let no_fallback = Vec::new();
    let data =
        Start { guardian, job, sentinel_sigfd: own, sentinel: plan.me, fallback: no_fallback, job_in_foreground };
    let refused = match sys::clone_vm(data, guardian_main) {
        Ok(pid) => sentinel(pid).start(host, plan, main_stack),
        Err((e, data)) => (e, data),
    };
    // clone(CLONE_VM) refused, or the stack could not be mapped: a forked sentinel keeps every
    // promise the shared one does, for more memory.
    let (e, mut data) = refused;
    let errno = crate::errno::name(e.error().raw_os_error().unwrap_or(0)).to_string();
    let why = e.describe();
    data.fallback.push((
        errno,
        format!(
            "{why}; the sentinel is a fork of guardian instead (the same guarantees; each page either process writes is copied)"
        ),
    ));
    match sys::fork_guardian(data, guardian_main) {
        Ok(pid) => sentinel(pid).start(host, plan, main_stack),
        Err((fork_e, mut data)) => {
            drop(sentinel);
            // Not a forked sentinel after all: one event says what happened instead.
            data.fallback.clear();
            let errno = crate::errno::name(fork_e.raw_os_error().unwrap_or(0)).to_string();
            data.fallback.push((
                errno,
                format!(
                    "{why}, and fork() failed too ({}): no sentinel; a SIGKILL of the process the host started leaves the tree running",
                    crate::errno::explain(&fork_e)
                ),
            ));
            let mut proper = Proper::alone(plan.me);
            proper.fallback = data.fallback;
            match (data.guardian)(Ok(proper)) {}
        }
    }
}

/// What guardian proper's first function gets from the split.
struct Start {
    guardian: Guardian,
    /// The host's process group (the job), 0 when outside guardian's PID namespace.
    job: i32,
    /// The sentinel's duplicate of the signalfd (the sentinel's; guardian closes its copy).
    sentinel_sigfd: RawFd,
    sentinel: i32,
    fallback: Vec<(String, String)>,
    job_in_foreground: Option<bool>,
}

/// guardian's side of the split (on its own stack, or a fork's copy): its parent watch on
/// the sentinel, out of the host's process group, then the rest of guardian.
fn guardian_main(start: Start) -> ! {
    let Start { guardian, job, sentinel_sigfd, sentinel, fallback, job_in_foreground } = start;
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
    // The watch on the sentinel, armed on its pid before getppid() confirms it: a sentinel
    // killed from here on is noticed by that pidfd, whatever reaper guardian has by then. One
    // killed before (guardian already handed to another reaper) stops guardian here, before
    // the provider exists.
    let armed = match parent::arm(sentinel) {
        Ok(armed) => armed,
        Err(_) => match guardian(Err(Failure::guardian(
            "guardian's sentinel (the process that was started) died before the provider was started; nothing was started",
        ))) {},
    };
    crate::test_hooks::pause_behind_sentinel();
    match guardian(Ok(Proper { me, parent: Some(armed), fallback, job_in_foreground })) {}
}

/// The sentinel, once guardian runs in the memory it shares. Every call from here on is a
/// raw system call (rustix's own, or `sys::Raw`): no C library, no allocation, no std I/O,
/// no write to a static; its fds and values are its own (the `OwnedFd`s are never dropped:
/// it ends with `exit_group`).
struct Sentinel {
    guardian: i32,
    sigfd: OwnedFd,
    /// The signal that carries [`HOST_DEATH_CODE`] (the lowest real-time one).
    host_death_signal: i32,
}

/// A signal the sentinel read: number, `si_code`, sender's pid and uid.
#[derive(Clone, Copy)]
struct Read {
    signo: i32,
    code: i32,
    sender: i32,
    uid: u32,
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
        // Gone already (between guardian's start and here)? Then guardian is told at once.
        let (parent, host_dead) = match plan.watch_parent.then(|| parent::arm(host)) {
            None => (None, false),
            Some(Ok(armed)) => (Some(armed.watch), false),
            Some(Err(_)) => (None, true),
        };
        self.run(parent, host_dead, main_stack)
    }

    /// Forward signals, show job-control stops, watch the parent (and tell guardian of its
    /// death), and end as guardian ends.
    fn run(self, mut parent: Option<ParentWatch>, mut host_dead: bool, main_stack: sys::MainStack) -> ! {
        use rustix::event::{PollFd, PollFlags, poll};
        const POLL: rustix::event::Timespec =
            rustix::event::Timespec { tv_sec: 0, tv_nsec: parent::PARENT_POLL.as_nanos() as i64 };
        // A refused message (the uid's queued-signal quota) is sent again after this.
        const RETRY: rustix::event::Timespec = rustix::event::Timespec { tv_sec: 0, tv_nsec: 20_000_000 };
        loop {
            if host_dead && self.tell_host_death() {
                host_dead = false;
                parent = None;
            }
            let timeout = match &parent {
                _ if host_dead => Some(&RETRY),
                Some(ParentWatch::Poll { .. }) => Some(&POLL),
                _ => None,
            };
            // The stack pages below this frame go back before each wait, as in guardian: the
            // ones start-up dirtied, and any the previous round's calls did (where the page
            // boundary falls depends on the stack's random start, so a deeper call can
            // otherwise keep one more page resident for the sentinel's whole life). A round
            // is a signal or guardian's change, rare.
            sys::release_dead_stack(main_stack);
            let parent_ready = match &parent {
                Some(ParentWatch::Pidfd(fd)) => {
                    let mut fds = [PollFd::new(&self.sigfd, PollFlags::IN), PollFd::new(fd, PollFlags::IN)];
                    let _ = poll(&mut fds, timeout);
                    !fds[1].revents().is_empty()
                }
                _ => {
                    let mut fds = [PollFd::new(&self.sigfd, PollFlags::IN)];
                    let _ = poll(&mut fds, timeout);
                    false
                }
            };
            if parent_ready || parent.as_ref().is_some_and(ParentWatch::gone) {
                // No second report: the watch goes once guardian has been told.
                host_dead = true;
            }
            while let Some(read) = self.read_signal() {
                if read.code == SUSPEND_CODE && read.sender == self.guardian {
                    self.mirror_stop(read.signo);
                    continue;
                }
                self.forward(read);
            }
            // After the signals: a SIGCHLD may have been merged into one already read.
            if let Some(status) = self.guardian_changed() {
                end(status);
            }
        }
    }

    /// The host's process died: guardian hears it as its parent's death (a queued signal
    /// with [`HOST_DEATH_CODE`]) and tears the tree down; the sentinel stays until guardian
    /// ends, and ends as it ended. False if the message could not be queued yet.
    fn tell_host_death(&self) -> bool {
        Raw::queue(self.guardian, self.host_death_signal, HOST_DEATH_CODE).is_ok()
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

    /// guardian asked to show a job-control stop ([`suspend`]; or it was stopped by one): the
    /// shell waits on the sentinel, so the sentinel stops its group the same way
    /// (`sys::stop_own_group`, in raw calls). Continued (fg, bg), it reads the SIGCONT from
    /// its signalfd and forwards it; if the kernel would not stop it, guardian hears a queued
    /// SIGCONT.
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
