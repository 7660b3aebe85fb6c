//! sys: how the events pipe's write end reaches guardian. Two routes, chosen per spawn:
//!
//! * [`Route::ProcPath`] (the usual one): guardian opens `/proc/<this pid>/fd/<N>` itself
//!   (`--events-file`), which opens the same pipe. Nothing has to survive an exec, so std
//!   keeps its `posix_spawn` (vfork) path; the `pre_exec` of the other route makes it fork,
//!   which cost ~0.18 ms of every spawn (`examples/bench.rs`). The write end stays open here
//!   until guardian has opened its own (its first event) or has exited.
//! * [`Route::Inherit`]: the write end is inherited as `--events-fd N`. It is created
//!   close-on-exec like every other fd, and only the forked child clears the flag on its own
//!   copy right before exec, so no other process the host spawns meanwhile can inherit it.
//!   Taken when guardian could not open the /proc path (see [`route`]).
//!
//! The crate's only `unsafe` blocks are here: the `pre_exec` of the second route, and the kill
//! request's real-time signal number ([`kill_request_signal`]).

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// How guardian gets the events pipe.
pub(crate) enum Route {
    /// `--events-file /proc/<pid>/fd/<n>`.
    ProcPath(PathBuf),
    /// `--events-fd <n>`, the fd inherited through a `pre_exec` step.
    Inherit,
}

/// Set (to anything) in the calling process: always take [`Route::Inherit`].
pub(crate) const FORCE_INHERIT: &str = "TREEGUARDIAN_EVENTS_INHERIT";

/// The route for the write end `write`. The /proc path is taken only when guardian (this
/// process's uid, started by it) will be allowed to open it and it is this pipe: the kernel
/// lets another process open `/proc/<pid>/fd/<n>` only with ptrace read access, which a
/// non-dumpable process (`PR_SET_DUMPABLE` 0, set-id programs) denies, and which needs
/// guardian's capabilities to cover this process's permitted set (none for an unprivileged
/// host; guardian started as root gets the full set), and the kernel gives pidfds (the write
/// end is held until guardian's first event or its exit). The path is checked to name
/// `write`'s pipe (a /proc of another pid namespace, or a thread with its own fd table, would
/// not).
pub(crate) fn route(write: &OwnedFd) -> Route {
    if std::env::var_os(FORCE_INHERIT).is_some() {
        return Route::Inherit;
    }
    let dumpable = matches!(rustix::process::dumpable_behavior(), Ok(rustix::process::DumpableBehavior::Dumpable));
    // The kernel compares guardian's capabilities with the thread-group leader's (the process
    // `/proc/<pid>` names), which may hold some that this thread dropped.
    let leader = rustix::process::getpid();
    let caps_covered = rustix::process::geteuid().is_root()
        || rustix::thread::capabilities(Some(leader)).is_ok_and(|c| c.permitted.is_empty());
    if !dumpable || !caps_covered || !pidfds() {
        return Route::Inherit;
    }
    let path = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), write.as_raw_fd()));
    let same = match (rustix::fs::stat(&path), rustix::fs::fstat(write.as_fd())) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    };
    if same { Route::ProcPath(path) } else { Route::Inherit }
}

/// Whether this kernel gives pidfds (Linux 5.3; a seccomp filter may refuse them), asked once:
/// the held write end is dropped when guardian exits, which the crate sees on guardian's pidfd.
fn pidfds() -> bool {
    static PIDFDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PIDFDS.get_or_init(|| {
        rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty()).is_ok()
    })
}

/// Whether process `pid` blocks SIGTERM (`SigBlk` of `/proc/<pid>/status`); `None` when that
/// cannot be read. guardian blocks it as its first act, so from then on a SIGTERM is a stop
/// request; before (the kernel's tail of the exec) it would end guardian.
pub(crate) fn term_blocked(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = status.lines().find_map(|l| l.strip_prefix("SigBlk:"))?;
    let mask = u64::from_str_radix(mask.trim(), 16).ok()?;
    Some(mask & (1 << (libc::SIGTERM - 1)) != 0)
}

/// Lets `fd` (close-on-exec in this process) survive the exec of `cmd`'s program, in the child
/// only.
pub(crate) fn inherit_in_child(cmd: &mut std::process::Command, fd: RawFd) {
    // SAFETY: the closure runs between fork and exec in the child, where only async-signal-safe
    // calls are allowed: it makes one fcntl(2) call on an fd number it copied (no allocation,
    // no locks, no access to the parent's memory beyond the captured integer). `fd` stays open
    // in the parent until `spawn` has returned, so it is open in the child at that point.
    unsafe {
        cmd.pre_exec(move || {
            // SAFETY: fcntl on an integer fd has no memory-safety preconditions; F_SETFD with
            // 0 clears FD_CLOEXEC on the child's copy only (fd flags are per process).
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The kill request's signal (spec/driver.json: RTMAX, 64), for `pidfd_send_signal`.
pub(crate) fn kill_request_signal() -> rustix::process::Signal {
    const _: () = assert!(crate::driver::KILL_SIGNAL_NUMBER == 64, "SIGRTMAX on Linux is 64");
    // SAFETY: `from_raw_unchecked` requires a signal number the kernel accepts and not one libc
    // reserves for itself (glibc and musl use 32-34, below SIGRTMIN); 64 is the kernel's
    // SIGRTMAX (_NSIG 64 on every Linux architecture Rust supports but MIPS, where guardian is
    // not built), an ordinary real-time signal. It is only ever sent, never handled here.
    unsafe { rustix::process::Signal::from_raw_unchecked(crate::driver::KILL_SIGNAL_NUMBER) }
}
