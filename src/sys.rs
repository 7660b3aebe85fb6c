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
/// `CLONE_NEWCGROUP` (Linux 4.6): with `CLONE_INTO_CGROUP`, the child's cgroup namespace is
/// rooted at the cgroup it starts in.
pub const CLONE_NEWCGROUP: u64 = 0x0200_0000;
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

/// Size of the kernel's signal set (`_NSIG / 8`): 64 signals on x86_64 and aarch64.
const KERNEL_SIGSET_SIZE: usize = 8;

/// A set of signals in the kernel's own layout (bit `n - 1` for signal `n`, 1 to 64), passed
/// to the raw `rt_sigprocmask`, `rt_sigaction` and `signalfd4` syscalls. Not the C library's
/// `sigset_t`: its `sigaddset` and `pthread_sigmask` refuse or silently drop the numbers the
/// library reserves below `SIGRTMIN` (32-33 with glibc, 32-34 with musl), and guardian must
/// block and read those too (see `signals::handled`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SigSet(u64);

impl SigSet {
    pub const fn empty() -> SigSet {
        SigSet(0)
    }

    /// Adds `sig` (1 to 64); other numbers are ignored.
    pub fn add(&mut self, sig: i32) {
        if (1..=64).contains(&sig) {
            self.0 |= 1 << (sig - 1);
        }
    }

    #[cfg(test)]
    pub fn contains(&self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.0 & (1 << (sig - 1)) != 0
    }
}

/// `rt_sigprocmask(how, set, &old)` as a raw syscall (see [`SigSet`] for why not the C
/// library's wrapper); returns the previous mask. guardian is single-threaded, so the
/// thread's mask is the process's.
pub fn set_sigmask(how: libc::c_int, set: &SigSet) -> io::Result<SigSet> {
    let mut old = SigSet::empty();
    // SAFETY: both pointers point to live 8-byte sets, the size the kernel is told.
    let rc = unsafe {
        libc::syscall(libc::SYS_rt_sigprocmask, how, &set.0 as *const u64, &mut old.0 as *mut u64, KERNEL_SIGSET_SIZE)
    };
    cvt_long(rc).map(|_| old)
}

/// The kernel's `struct sigaction` for `rt_sigaction` on x86_64 and aarch64 (both define
/// `SA_RESTORER`, so the restorer field is present).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// `rt_sigaction(sig, NULL, &old)`: the current handler (`SIG_DFL`, `SIG_IGN` or a function).
/// A raw syscall, so the C library's reserved numbers can be queried too.
fn disposition(sig: i32) -> io::Result<libc::sighandler_t> {
    let mut old = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: a null new action only reads the current one into `old`, a live struct of the
    // kernel's layout whose mask has the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            std::ptr::null::<KernelSigaction>(),
            &mut old as *mut KernelSigaction,
            KERNEL_SIGSET_SIZE,
        )
    };
    cvt_long(rc).map(|_| old.handler)
}

/// Whether `sig`'s disposition is currently `SIG_IGN`.
pub fn is_ignored(sig: i32) -> bool {
    disposition(sig).is_ok_and(|h| h == libc::SIG_IGN)
}

/// Whether `sig` currently runs a handler function (neither `SIG_DFL` nor `SIG_IGN`).
pub fn has_handler(sig: i32) -> bool {
    disposition(sig).is_ok_and(|h| h != libc::SIG_DFL && h != libc::SIG_IGN)
}

/// Sets `sig`'s disposition to `SIG_DFL`: for SIGCHLD, which must not be ignored by a reaper
/// (or the kernel reaps children behind guardian's back), and for the Rust runtime's
/// SIGSEGV/SIGBUS stack-overflow handlers (see `signals::RUNTIME_HANDLED`).
pub fn set_default_disposition(sig: i32) -> io::Result<()> {
    let act = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: installs SIG_DFL with an empty mask from a live struct of the kernel's layout;
    // no handler code (and so no restorer) is involved.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &act as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            KERNEL_SIGSET_SIZE,
        )
    };
    cvt_long(rc).map(drop)
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
    // SAFETY: -1 asks for a new fd; the set pointer is valid for the call and its size is
    // the one passed (raw `signalfd4`, so the C library's reserved numbers stay in the set).
    // On success the returned fd is owned by nobody else.
    unsafe {
        let fd = cvt_long(libc::syscall(
            libc::SYS_signalfd4,
            -1,
            &set.0 as *const u64,
            KERNEL_SIGSET_SIZE,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd as RawFd))
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

/// The first version (64 bytes) of the kernel's `struct pidfd_info`.
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

/// `PIDFD_INFO_PID`: ask for (and, in the answer, got) the pid fields.
const PIDFD_INFO_PID: u64 = 1;
/// `PIDFD_GET_INFO`: `_IOWR(0xFF, 11, struct pidfd_info)` with the 64-byte version.
const PIDFD_GET_INFO: u32 = (3 << 30) | ((std::mem::size_of::<PidfdInfo>() as u32) << 16) | (0xFF << 8) | 11;

/// `ioctl(pidfd, PIDFD_GET_INFO)` (Linux 6.13): the pid, in guardian's PID namespace, of the
/// process a pidfd refers to; 0 when it has none there. ESRCH once that process was reaped;
/// ENOTTY or EINVAL on older kernels.
pub fn pidfd_get_pid(pidfd: BorrowedFd<'_>) -> io::Result<i32> {
    let mut info = PidfdInfo { mask: PIDFD_INFO_PID, ..PidfdInfo::default() };
    // SAFETY: `info` is a live, writable struct of the size the request encodes; the kernel
    // writes at most that many bytes into it.
    cvt(unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info as *mut PidfdInfo) })?;
    if info.mask & PIDFD_INFO_PID == 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    Ok(info.pid as i32)
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
    clone3_flags(cgroup, 0)
}

/// [`clone3`] with `extra` clone flags (only `CLONE_NEWCGROUP` is used).
pub fn clone3_flags(cgroup: Option<BorrowedFd<'_>>, extra: u64) -> io::Result<Forked> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD | extra,
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
///
/// The provider thus starts with the caller's mask and ignored set and `SIG_DFL` for every
/// other signal: guardian changes no other disposition (the runtime's SIGSEGV/SIGBUS handlers
/// were reset to `SIG_DFL` at start-up, and exec would reset any handler anyway).
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
        // Raw rt_sigprocmask: the C library's wrapper would drop its reserved numbers from
        // a caller's mask that blocked them.
        if libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &plan.original_mask.0 as *const u64,
            std::ptr::null_mut::<u64>(),
            KERNEL_SIGSET_SIZE,
        ) != 0
        {
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
///
/// The stack's extent comes from the kernel's exec rules, not from `/proc/self/maps` (an
/// open, seven reads and a heap buffer on every start): the file name in `AT_EXECFN` is
/// copied to the top of the stack mapping, and exec grows that mapping to at least
/// min(RLIMIT_STACK, 128 KiB) below its end (`setup_arg_pages`). So the range from there to
/// a page below this frame lies inside the stack mapping.
pub fn release_startup_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only hands free heap memory back to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    let marker = 0u8;
    let sp = std::ptr::addr_of!(marker) as usize;
    // SAFETY: getauxval reads the auxiliary vector the kernel passed at exec.
    let execfn = unsafe { libc::getauxval(libc::AT_EXECFN) } as usize;
    let Some((lo, end)) = startup_stack_range(execfn, stack_limit(), sp) else { return };
    // SAFETY: [lo, end) lies inside this thread's stack mapping (see above), a page below the
    // live frame: it holds only dead frames (guardian installs no signal handlers that could
    // run there), and MADV_DONTNEED makes those pages read back as zeroes when a deeper call
    // reuses them.
    unsafe {
        libc::madvise(lo as *mut libc::c_void, end - lo, libc::MADV_DONTNEED);
    }
}

/// RLIMIT_STACK's soft limit (`None`: unlimited or unknown).
fn stack_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a live, writable rlimit the kernel fills in.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// The part of the main thread's stack that start-up left behind: from the lowest address
/// exec guaranteed mapped (min(RLIMIT_STACK, 128 KiB) below the page end of `execfn`, a
/// string at the stack's top) up to one page below `sp` (x86-64's red zone is 128 bytes).
/// `None` when that range is empty or `sp` is outside it.
fn startup_stack_range(execfn: usize, limit: Option<u64>, sp: usize) -> Option<(usize, usize)> {
    const PAGE: usize = 4096;
    const EXPAND: usize = 128 * 1024;
    if execfn == 0 {
        return None;
    }
    let top = execfn.checked_add(PAGE - 1)? & !(PAGE - 1);
    let grown = limit.map_or(EXPAND, |l| usize::try_from(l).unwrap_or(usize::MAX).min(EXPAND)) & !(PAGE - 1);
    let lo = top.checked_sub(grown)?;
    let end = sp.checked_sub(PAGE)? & !(PAGE - 1);
    ((lo..top).contains(&sp) && end > lo).then_some((lo, end))
}

/// Whether `pid`, an unreaped direct child, has exited (is a zombie): `waitid(P_PID, pid,
/// WEXITED | WNOHANG | WNOWAIT)`, which leaves it for `reap_one`. No `/proc` read.
pub fn child_exited(pid: i32) -> bool {
    // SAFETY: info is a zeroed siginfo_t the kernel fills in; the id is a pid.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        rc == 0 && info.si_pid() != 0
    }
}

/// A stop or continue of a child, as `waitid(WSTOPPED | WCONTINUED)` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobChange {
    /// Stopped by this signal.
    Stopped(i32),
    Continued,
}

/// `waitid(P_PID, pid, WSTOPPED | WCONTINUED | WNOHANG)`: the child's latest stop or continue,
/// if one is unreported (consumed, so each is reported once). Never reaps: without `WEXITED`
/// an exited child stays a zombie for `reap_one`. The caller passes an unreaped direct child,
/// whose pid cannot be reused.
pub fn wait_job_change(pid: i32) -> io::Result<Option<JobChange>> {
    loop {
        // SAFETY: info is a zeroed siginfo_t the kernel fills in; the id is a pid.
        let (rc, info) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WCONTINUED | libc::WNOHANG,
            );
            (rc, info)
        };
        if rc == -1 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(None),
                _ => return Err(err),
            }
        }
        // SAFETY: for waitid the kernel sets si_pid and si_status (0 when nothing changed).
        let (who, status) = unsafe { (info.si_pid(), info.si_status()) };
        if who == 0 {
            return Ok(None);
        }
        return Ok(match info.si_code {
            libc::CLD_STOPPED | libc::CLD_TRAPPED => Some(JobChange::Stopped(status)),
            libc::CLD_CONTINUED => Some(JobChange::Continued),
            _ => None,
        });
    }
}

/// Stops guardian itself with `sig` (a job-control signal it keeps blocked), the way a
/// shell's job stops: the signal is sent to itself, unblocked (the kernel then stops the
/// process, unless its process group is orphaned or the signal is ignored, when it discards
/// it), and blocked again once guardian runs. Returns whether guardian was stopped and
/// continued: a SIGCONT is then pending (it stays blocked, for the signalfd).
pub fn stop_self(sig: i32) -> io::Result<bool> {
    let mut one = SigSet::empty();
    one.add(sig);
    kill(std::process::id() as i32, sig)?;
    set_sigmask(libc::SIG_UNBLOCK, &one)?;
    set_sigmask(libc::SIG_BLOCK, &one)?;
    is_pending(libc::SIGCONT)
}

/// Whether `sig` is pending (blocked and not yet read) for guardian.
pub fn is_pending(sig: i32) -> io::Result<bool> {
    // SAFETY: set is a live sigset_t that sigpending fills; sigismember only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        cvt(libc::sigpending(&mut set))?;
        Ok(libc::sigismember(&set, sig) == 1)
    }
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

#[cfg(test)]
mod stack_tests {
    use super::startup_stack_range;

    #[test]
    fn startup_stack_range_stays_inside_what_exec_mapped() {
        let top = 0x7fff_0000_0000usize;
        let execfn = top - 40; // the file name sits just below the stack's end
        let sp = top - 20 * 4096 - 123;
        // 128 KiB below the top, up to the page a page below sp.
        assert_eq!(startup_stack_range(execfn, Some(8 << 20), sp), Some((top - (128 << 10), top - 22 * 4096)));
        assert_eq!(startup_stack_range(execfn, None, sp), Some((top - (128 << 10), top - 22 * 4096)));
        // A small RLIMIT_STACK: exec grew the mapping only that far.
        assert_eq!(startup_stack_range(execfn, Some(100 << 10), sp), Some((top - (100 << 10), top - 22 * 4096)));
        // sp outside the guaranteed range, or nothing below the margin: nothing to give back.
        assert_eq!(startup_stack_range(execfn, Some(64 << 10), sp - (64 << 10)), None);
        assert_eq!(startup_stack_range(execfn, Some(8 << 20), top - (128 << 10) + 100), None);
        assert_eq!(startup_stack_range(0, None, sp), None);
    }
}
