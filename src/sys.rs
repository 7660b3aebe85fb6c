//! sys: the one module with `unsafe`. Thin, safe wrappers over the Linux syscalls that
//! neither std nor rustix offers in the form guardian needs: signal masks and signalfd,
//! clone3 with `CLONE_PIDFD | CLONE_INTO_CGROUP`, fork, exec of the provider, raw
//! `pidfd_send_signal` with flags and real-time signals, `waitpid` with the raw status,
//! terminal process groups, the monotonic clock, and `uname` and a parked child for
//! `guardian doctor`'s probes.
//!
//! Every wrapper returns `io::Result` with the kernel's errno; callers name the syscall in
//! their messages. Every block of `unsafe` carries a `// SAFETY:` note.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

#[cfg(not(target_os = "linux"))]
compile_error!("guardian supports Linux only (it relies on pidfds, signalfd and subreapers)");
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("guardian is built and tested for x86_64 and aarch64 Linux only");

/// `CLONE_INTO_CGROUP` (Linux 5.7). `libc::CLONE_INTO_CGROUP` is a truncated `c_int` (0) on
/// gnu targets, so it is spelled out here.
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `CLONE_PIDFD` (Linux 5.2).
const CLONE_PIDFD: u64 = 0x1000;
/// `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9): deliver to the pidfd owner's process group.
pub const PIDFD_SIGNAL_PROCESS_GROUP: u32 = 8;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// A set of signals (`sigset_t`).
#[derive(Clone, Copy)]
pub struct SigSet(libc::sigset_t);

impl SigSet {
    pub fn empty() -> SigSet {
        // SAFETY: sigemptyset initialises the zeroed set it is given; it cannot fail for a
        // valid pointer.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            SigSet(set)
        }
    }

    pub fn add(&mut self, sig: i32) {
        // SAFETY: the set is initialised; an invalid signal number only returns EINVAL,
        // which callers avoid by passing numbers from `signals::catchable()`.
        unsafe {
            libc::sigaddset(&mut self.0, sig);
        }
    }

    #[cfg(test)]
    pub fn contains(&self, sig: i32) -> bool {
        // SAFETY: the set is initialised and only read.
        unsafe { libc::sigismember(&self.0, sig) == 1 }
    }
}

/// Replaces the calling thread's signal mask; returns the previous one.
pub fn set_sigmask(how: libc::c_int, set: &SigSet) -> io::Result<SigSet> {
    let mut old = SigSet::empty();
    // SAFETY: both pointers point to initialised sigset_t values that outlive the call.
    let rc = unsafe { libc::pthread_sigmask(how, &set.0, &mut old.0) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(old)
}

/// Whether `sig`'s disposition is currently `SIG_IGN`.
pub fn is_ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Sets `sig`'s disposition to `SIG_DFL` (used for SIGCHLD, which must not be ignored by a
/// reaper, or the kernel reaps children behind guardian's back).
pub fn set_default_disposition(sig: i32) -> io::Result<()> {
    // SAFETY: installs SIG_DFL with an empty mask; no handler code is involved.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut act.sa_mask);
        cvt(libc::sigaction(sig, &act, std::ptr::null_mut())).map(drop)
    }
}

/// One signal read from a signalfd.
#[derive(Clone, Copy, Debug)]
pub struct SigInfo {
    pub signo: i32,
    /// Sender's pid (0 for the kernel, or a sender outside guardian's PID namespace).
    pub pid: u32,
    /// `si_code`: `SI_USER` for kill() and for the kernel's parent-death signal.
    pub code: i32,
}

/// Creates a non-blocking, close-on-exec signalfd for `set`.
pub fn signalfd(set: &SigSet) -> io::Result<OwnedFd> {
    // SAFETY: -1 asks for a new fd; the set pointer is valid for the call. On success the
    // returned fd is owned by nobody else.
    unsafe {
        let fd = cvt(libc::signalfd(-1, &set.0, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Reads one pending signal; `Ok(None)` when none is pending.
pub fn read_signalfd(fd: BorrowedFd<'_>) -> io::Result<Option<SigInfo>> {
    // SAFETY: the buffer is a properly sized, zeroed signalfd_siginfo; read writes at most
    // its size.
    unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let n = libc::read(fd.as_raw_fd(), (&mut info as *mut libc::signalfd_siginfo).cast(), size);
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                _ => Err(err),
            };
        }
        if n as usize != size {
            return Ok(None);
        }
        Ok(Some(SigInfo { signo: info.ssi_signo as i32, pid: info.ssi_pid, code: info.ssi_code }))
    }
}

/// `pidfd_send_signal(pidfd, sig, NULL, flags)` for any signal number, including real-time
/// ones and the process-group flag.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32, flags: u32) -> io::Result<()> {
    // SAFETY: plain syscall with an fd we borrow, a signal number, a null siginfo (the
    // kernel then fills in a SI_USER siginfo) and flags.
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), flags)
    };
    cvt_long(rc).map(drop)
}

/// `pidfd_open(pid, 0)`: the fd is close-on-exec by definition.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success the kernel returns a new fd that we own.
    unsafe {
        let fd = cvt_long(libc::syscall(libc::SYS_pidfd_open, pid, 0))?;
        Ok(OwnedFd::from_raw_fd(fd as RawFd))
    }
}

/// `kill(pid, sig)`. Callers may use it only on an unreaped direct child (whose PID cannot be
/// reused) or, as PID 1 of a namespace, with `pid == -1`.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall, no memory involved.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Raw wait status as returned by `waitpid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitStatus(pub i32);

impl WaitStatus {
    pub fn exit_code(self) -> Option<i32> {
        libc::WIFEXITED(self.0).then(|| libc::WEXITSTATUS(self.0))
    }
    pub fn signal(self) -> Option<i32> {
        libc::WIFSIGNALED(self.0).then(|| libc::WTERMSIG(self.0))
    }
    pub fn core_dumped(self) -> bool {
        libc::WIFSIGNALED(self.0) && libc::WCOREDUMP(self.0)
    }
}

/// Outcome of one non-blocking `waitpid(-1)`.
pub enum Reaped {
    Child(i32, WaitStatus),
    /// Children exist, none has exited.
    NoneReady,
    /// ECHILD: guardian has no children at all.
    NoChildren,
}

/// `waitpid(-1, &status, WNOHANG)`.
pub fn reap_one() -> io::Result<Reaped> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: status points to a live c_int.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match pid {
            0 => return Ok(Reaped::NoneReady),
            p if p > 0 => return Ok(Reaped::Child(p, WaitStatus(status))),
            _ => {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::ECHILD) => return Ok(Reaped::NoChildren),
                    Some(libc::EINTR) => continue,
                    _ => return Err(err),
                }
            }
        }
    }
}

/// `waitpid(pid, &status, 0)`: blocking reap of one known child (used only for a child that
/// failed before exec, which exits at once).
pub fn reap_blocking(pid: i32) -> io::Result<WaitStatus> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: status points to a live c_int.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return Ok(WaitStatus(status));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// Which side of a fork/clone we are on.
pub enum Forked {
    Child,
    Parent { pid: i32, pidfd: Option<OwnedFd> },
}

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `clone3(CLONE_PIDFD [| CLONE_INTO_CGROUP])` with fork semantics (no shared memory), so
/// the child owns a copy of the address space exactly as after `fork()`.
pub fn clone3(cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD,
        pidfd: (&mut pidfd as *mut RawFd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    // SAFETY: without CLONE_VM the child gets a private copy of the address space, like
    // fork(); guardian is single-threaded, so no lock can be held by another thread in the
    // copy. `args` and `pidfd` live across the call and the size passed matches the struct.
    let rc = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    match cvt_long(rc)? {
        0 => Ok(Forked::Child),
        pid => {
            // SAFETY: with CLONE_PIDFD the kernel stored a new fd we now own.
            let fd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok(Forked::Parent { pid: pid as i32, pidfd: Some(fd) })
        }
    }
}

/// Plain `fork()`; the fallback when clone3 is refused.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: guardian is single-threaded, so the child's copy of the address space holds no
    // lock owned by another thread; the child only runs `exec_provider`.
    match cvt(unsafe { libc::fork() })? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent { pid, pidfd: None }),
    }
}

/// Everything the child needs between fork and exec, prepared by the parent so the child
/// allocates nothing.
#[derive(Clone, Copy)]
pub struct ExecPlan<'a> {
    /// NULL-terminated argv; argv[0] is the command as given (searched in PATH by execvp).
    pub argv: &'a [*const libc::c_char],
    /// The signal mask guardian was started with.
    pub original_mask: SigSet,
    /// SIGCHLD was ignored when guardian started: restore that for the provider.
    pub restore_sigchld_ignored: bool,
    /// Give the terminal on fd 0 to the provider's new process group.
    pub take_terminal: bool,
    /// Write end of the close-on-exec error pipe.
    pub error_pipe: RawFd,
    /// `cgroup.procs` of the leaf to join before exec (when clone3 could not place us).
    pub join_cgroup_procs: Option<RawFd>,
}

/// Runs in the child after fork/clone3: new process group, terminal, cgroup, SIGCHLD and
/// SIGPIPE dispositions, original signal mask, then `execvp`. On failure writes a tag byte and errno to the error pipe and exits
/// 127. Never returns.
pub fn exec_provider(plan: &ExecPlan<'_>) -> ! {
    // SAFETY: this runs in a freshly forked single-threaded child. It calls only
    // async-signal-safe functions on memory prepared before the fork, and ends in execvp or
    // _exit, so no destructor or allocator of the copied parent state runs.
    unsafe {
        let fail = |stage: u8| -> ! {
            let errno = *libc::__errno_location();
            let mut msg = [0u8; 5];
            msg[0] = stage;
            msg[1..].copy_from_slice(&errno.to_ne_bytes());
            libc::write(plan.error_pipe, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        };
        if libc::setpgid(0, 0) != 0 {
            fail(b'p');
        }
        if plan.take_terminal {
            // SIGTTOU is still blocked here (the parent's mask), so this background-group
            // call is allowed; failure only means no job control.
            libc::tcsetpgrp(0, libc::getpid());
        }
        if let Some(procs) = plan.join_cgroup_procs {
            let mut buf = [0u8; 16];
            let mut n = buf.len();
            let mut v = libc::getpid() as u32;
            loop {
                n -= 1;
                buf[n] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            if libc::write(procs, buf[n..].as_ptr().cast(), buf.len() - n) < 0 {
                fail(b'c');
            }
        }
        if plan.restore_sigchld_ignored {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        }
        // The Rust runtime ignored SIGPIPE before guardian's main; the provider gets the
        // default action, as every program started by std::process::Command does.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if libc::pthread_sigmask(libc::SIG_SETMASK, &plan.original_mask.0, std::ptr::null_mut()) != 0 {
            fail(b'm');
        }
        libc::execvp(plan.argv[0], plan.argv.as_ptr());
        fail(b'e');
    }
}

/// Takes ownership of a file descriptor guardian inherited from its caller (`--events-fd`);
/// `None` when that number is not open.
pub fn take_inherited_fd(n: RawFd) -> Option<OwnedFd> {
    if n < 0 {
        return None;
    }
    // SAFETY: fcntl(F_GETFD) only queries the number; it fails with EBADF when not open.
    if unsafe { libc::fcntl(n, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: the fd is open and was inherited from the caller, who handed it to guardian by
    // naming it; nothing else in guardian uses that number, so this is its only owner.
    Some(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Whether fd is a terminal.
pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty only queries the fd.
    unsafe { libc::isatty(fd) == 1 }
}

/// `tcgetpgrp(fd)`.
pub fn tcgetpgrp(fd: RawFd) -> io::Result<i32> {
    // SAFETY: plain ioctl wrapper, no memory passed.
    cvt(unsafe { libc::tcgetpgrp(fd) })
}

/// `tcsetpgrp(fd, pgrp)`; the caller blocks SIGTTOU.
pub fn tcsetpgrp(fd: RawFd, pgrp: i32) -> io::Result<()> {
    // SAFETY: plain ioctl wrapper, no memory passed.
    cvt(unsafe { libc::tcsetpgrp(fd, pgrp) }).map(drop)
}

/// `getpgrp()`.
pub fn getpgrp() -> i32 {
    // SAFETY: cannot fail.
    unsafe { libc::getpgrp() }
}

/// `setpgid(pid, pgid)`.
pub fn setpgid(pid: i32, pgid: i32) -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::setpgid(pid, pgid) }).map(drop)
}

/// CLOCK_MONOTONIC as a Duration since boot (the `ts` of every event).
pub fn monotonic() -> Duration {
    // SAFETY: ts is a live timespec; CLOCK_MONOTONIC is always available on Linux.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
}

/// `send(fd, buf, MSG_DONTWAIT | MSG_NOSIGNAL)`: a non-blocking write to a socket that does
/// not change the socket's shared file status flags and raises no SIGPIPE.
pub fn send_nonblocking(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for len bytes.
    let n =
        unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// `pwritev2(fd, [buf], -1, RWF_NOWAIT)`: a write that fails with EAGAIN instead of blocking,
/// without changing the description's shared `O_NONBLOCK` flag. Pipes support it since
/// Linux 5.x; older kernels answer EOPNOTSUPP.
pub fn write_nowait(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    let iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: one iovec describing `buf`, valid for the call; offset -1 means "current
    // position" (pipes have none).
    let n = unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// Real and effective user/group ids differ: guardian is running setuid/setgid.
pub fn is_setid() -> bool {
    // SAFETY: these getters cannot fail.
    unsafe { libc::getuid() != libc::geteuid() || libc::getgid() != libc::getegid() }
}

/// `strsignal`-free signal name lookup lives in `signals`; this only exposes `SIGRTMIN`/`SIGRTMAX`.
pub fn sigrt_range() -> (i32, i32) {
    (libc::SIGRTMIN(), libc::SIGRTMAX())
}

/// Human text of an errno, e.g. "No such file or directory".
pub fn errno_text(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Symbolic errno name for events ("ENOSYS").
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EACCES => "EACCES",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOSYS => "ENOSYS",
        libc::EBUSY => "EBUSY",
        libc::E2BIG => "E2BIG",
        libc::EROFS => "EROFS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => "E?",
    }
}

/// Name of a C string for messages.
pub fn lossy(s: &CStr) -> String {
    s.to_string_lossy().into_owned()
}

/// The kernel release from `uname(2)` (e.g. "6.18.4").
pub fn uname_release() -> io::Result<String> {
    // SAFETY: `uts` is a zeroed utsname that uname fills in; on success `release` is a
    // NUL-terminated string inside it (zeroed memory guarantees a terminator regardless).
    unsafe {
        let mut uts: libc::utsname = std::mem::zeroed();
        cvt(libc::uname(&mut uts))?;
        Ok(lossy(CStr::from_ptr(uts.release.as_ptr())))
    }
}

/// For `guardian doctor`'s probe children, right after fork/clone3: waits for a signal
/// (the parent SIGKILLs it) and never returns.
pub fn park_child() -> ! {
    // SAFETY: runs in a freshly forked single-threaded child; pause is async-signal-safe
    // and touches no memory of the copied parent state.
    unsafe {
        loop {
            libc::pause();
            // A caught signal cannot happen (the child installs no handlers); stay parked.
        }
    }
}

/// Gives back the memory that start-up used and the idle loop will not: free heap pages
/// (`malloc_trim`, glibc) and the main thread's stack below the current frame, which only
/// argument parsing and setup touched. One guardian stays resident per provider, so these
/// pages are most of what it costs.
pub fn release_startup_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only hands free heap memory back to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    let marker = 0u8;
    let sp = std::ptr::addr_of!(marker) as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    let Some((lo, hi)) = maps.lines().find(|l| l.ends_with("[stack]")).and_then(stack_range) else { return };
    // One page of margin below this frame (x86-64's red zone is 128 bytes).
    let end = sp.saturating_sub(4096) & !4095;
    if !(lo..hi).contains(&sp) || end <= lo {
        return;
    }
    // SAFETY: [lo, end) lies inside this thread's stack mapping, a page below the live frame:
    // it holds only dead frames (guardian installs no signal handlers that could run there),
    // and MADV_DONTNEED makes those pages read back as zeroes when a deeper call reuses them.
    unsafe {
        libc::madvise(lo as *mut libc::c_void, end - lo, libc::MADV_DONTNEED);
    }
}

fn stack_range(maps_line: &str) -> Option<(usize, usize)> {
    let (range, _) = maps_line.split_once(' ')?;
    let (lo, hi) = range.split_once('-')?;
    Some((usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?))
}

// ---- start-up helpers (parent watch by PR_SET_PDEATHSIG, provider environment) ----

/// Removes `name` from guardian's environment, which the provider inherits at exec.
pub fn unset_env(name: &str) {
    // SAFETY: guardian is single-threaded when it calls this (before the provider starts, and
    // before anything could read the environment concurrently).
    unsafe { std::env::remove_var(name) }
}

/// `prctl(PR_SET_PDEATHSIG, sig)`: the kernel sends `sig` to guardian when the thread that
/// created it exits (0 turns it off).
pub fn set_pdeathsig(sig: i32) -> io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}
