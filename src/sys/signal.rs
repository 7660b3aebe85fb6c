//! sys::signal: signals as the kernel sees them. Masks (`rt_sigprocmask`), dispositions
//! (`rt_sigaction`) and the signalfd (`signalfd4`) are raw syscalls on a [`SigSet`] in the
//! kernel's own layout, so the numbers the C library reserves below `SIGRTMIN` can be blocked
//! and read too; and guardian stopping itself for job control.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_long};

/// Size of the kernel's signal set (`_NSIG / 8`): 64 signals on x86_64 and aarch64.
pub(super) const KERNEL_SIGSET_SIZE: usize = 8;

/// A set of signals in the kernel's own layout (bit `n - 1` for signal `n`, 1 to 64), passed
/// to the raw `rt_sigprocmask`, `rt_sigaction` and `signalfd4` syscalls. Not the C library's
/// `sigset_t`: its `sigaddset` and `pthread_sigmask` refuse or silently drop the numbers the
/// library reserves below `SIGRTMIN` (32-33 with glibc, 32-34 with musl), and guardian must
/// block and read those too (see `signal_step::handled`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SigSet(pub(super) u64);

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

    pub fn contains(&self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.0 & (1 << (sig - 1)) != 0
    }

    /// The signals in either set.
    pub const fn union(self, other: SigSet) -> SigSet {
        SigSet(self.0 | other.0)
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
fn raw_disposition(sig: i32) -> io::Result<libc::sighandler_t> {
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

/// What a signal does when it arrives unblocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    Default,
    Ignore,
    /// A handler function runs.
    Handler,
}

/// `sig`'s current disposition (one `rt_sigaction` query).
pub fn disposition(sig: i32) -> io::Result<Disposition> {
    raw_disposition(sig).map(|h| match h {
        libc::SIG_DFL => Disposition::Default,
        libc::SIG_IGN => Disposition::Ignore,
        _ => Disposition::Handler,
    })
}

/// Whether `sig`'s disposition is currently `SIG_IGN`.
pub fn is_ignored(sig: i32) -> bool {
    raw_disposition(sig).is_ok_and(|h| h == libc::SIG_IGN)
}

/// Sets `sig`'s disposition to `SIG_DFL`: for SIGCHLD, which must not be ignored by a reaper
/// (or the kernel reaps children behind guardian's back), for an ignored stop signal, and for
/// any handler found at start-up (see `signal_step::setup`).
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

/// Ends guardian the way a process killed by `sig` ends, as sudo and coreutils `timeout` do
/// when their command died of a signal: `sig` goes back to `SIG_DFL`, core dumps are turned
/// off (`RLIMIT_CORE` 0 and not dumpable: a core-dumping signal must not leave a core of
/// guardian), `sig` is unblocked and sent to guardian itself. A single-threaded process gets
/// an unblocked signal it sends itself before `kill` returns, so this returns only when
/// guardian is still alive: the kernel ignored the signal (PID 1 of a namespace ignores every
/// signal it has no handler for) or a step failed; the error says which.
pub fn die_of_signal(sig: i32) -> io::Error {
    if sig != libc::SIGKILL
        && sig != libc::SIGSTOP
        && let Err(e) = set_default_disposition(sig)
    {
        return io::Error::new(e.kind(), format!("rt_sigaction(SIG_DFL) failed: {e}"));
    }
    // SAFETY: setrlimit only reads the live rlimit passed; lowering both limits is always
    // permitted, and guardian is about to end.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &libc::rlimit { rlim_cur: 0, rlim_max: 0 });
    }
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let mut one = SigSet::empty();
    one.add(sig);
    if let Err(e) = set_sigmask(libc::SIG_UNBLOCK, &one) {
        return io::Error::new(e.kind(), format!("rt_sigprocmask(SIG_UNBLOCK) failed: {e}"));
    }
    if let Err(e) = super::kill(std::process::id() as i32, sig) {
        return io::Error::new(e.kind(), format!("kill(self) failed: {e}"));
    }
    io::Error::other("the kernel ignored the signal")
}

/// One signal read from a signalfd.
#[derive(Clone, Copy, Debug)]
pub struct SigInfo {
    pub signo: i32,
    /// Sender's pid (0 for the kernel, or a sender outside guardian's PID namespace).
    pub pid: u32,
    /// `si_code`: `SI_USER` for kill() and for the kernel's parent-death signal.
    pub code: i32,
    /// `si_int` of a queued signal (`SI_QUEUE`): the sentinel's mark on what it forwards
    /// (`signals::forwarded_code`).
    pub value: i32,
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
        Ok(Some(SigInfo { signo: info.ssi_signo as i32, pid: info.ssi_pid, code: info.ssi_code, value: info.ssi_int }))
    }
}

/// Stops guardian's whole process group with `sig` (a job-control signal guardian keeps
/// blocked), as the terminal would have stopped the job had the provider been in it: the
/// shell's job is guardian's group, which holds guardian's parent when guardian does not lead
/// it (`sh -c`, `npm run`, make). The signal goes to the group, is unblocked for guardian (the
/// kernel then stops it, unless the group is orphaned or the signal is ignored, when it
/// discards it), and is blocked again once guardian runs. Returns whether guardian was stopped
/// and continued: a SIGCONT is then pending (it stays blocked, for the signalfd).
pub fn stop_own_group(sig: i32) -> io::Result<bool> {
    let mut one = SigSet::empty();
    one.add(sig);
    super::kill(0, sig)?;
    set_sigmask(libc::SIG_UNBLOCK, &one)?;
    set_sigmask(libc::SIG_BLOCK, &one)?;
    is_pending(libc::SIGCONT)
}

/// Whether `sig` is pending (blocked and not yet read) for guardian.
fn is_pending(sig: i32) -> io::Result<bool> {
    // SAFETY: set is a live sigset_t that sigpending fills; sigismember only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        cvt(libc::sigpending(&mut set))?;
        Ok(libc::sigismember(&set, sig) == 1)
    }
}
