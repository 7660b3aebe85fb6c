//! sys::process: starting children. `clone3` (with `CLONE_PIDFD`, and `CLONE_INTO_CGROUP` for
//! the leaf) and `fork` copy guardian's address space into the child, which is sound only
//! while guardian has one thread: another thread could hold a lock (the allocator's, stdio's)
//! that would stay locked forever in the copy. They are therefore `unsafe fn`s, called only by
//! the two safe entry points here, [`spawn_child`] (the provider, which runs
//! `exec_provider`) and [`spawn_parked_child`] (`guardian doctor`'s probes), which check the
//! precondition before they fork and run nothing in the child but async-signal-safe calls.
//!
//! Also start-up's settings of guardian's own process: `PR_SET_PDEATHSIG` and the environment
//! the provider inherits.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use super::signal::{KERNEL_SIGSET_SIZE, SigSet};
use super::{cvt, cvt_long};

/// `CLONE_INTO_CGROUP` (Linux 5.7). `libc::CLONE_INTO_CGROUP` is a truncated `c_int` (0) on
/// gnu targets, so it is spelled out here.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `CLONE_NEWCGROUP` (Linux 4.6): with `CLONE_INTO_CGROUP`, the child's cgroup namespace is
/// rooted at the cgroup it starts in.
pub const CLONE_NEWCGROUP: u64 = 0x0200_0000;
/// `CLONE_PIDFD` (Linux 5.2).
const CLONE_PIDFD: u64 = 0x1000;
/// The status a child exits with when it failed before or at exec. guardian never reports
/// it (the error pipe says what failed, and `spawn` picks guardian's status from that); it is
/// "command not found" so that the child's own status means the same as guardian's would.
const EXEC_FAILED: i32 = 127;

/// How to start a child.
#[derive(Clone, Copy)]
pub enum Start<'a> {
    /// `clone3(CLONE_PIDFD | extra)`, and `CLONE_INTO_CGROUP` into `cgroup` when given. Only
    /// `CLONE_NEWCGROUP` is used as `extra`.
    Clone3 { cgroup: Option<BorrowedFd<'a>>, extra: u64 },
    /// Plain `fork()`, the fallback when clone3 is refused: no pidfd.
    Fork,
}

/// A started child: its pid and, from clone3, its pidfd.
pub struct Child {
    pub pid: i32,
    pub pidfd: Option<OwnedFd>,
}

/// Which side of a fork/clone we are on.
enum Forked {
    Child,
    Parent(Child),
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

/// `clone3(CLONE_PIDFD | extra [| CLONE_INTO_CGROUP])` with fork semantics (no shared
/// memory), so the child owns a copy of the address space exactly as after `fork()`.
///
/// # Safety
///
/// The calling process must be single-threaded, and on the child side the caller may run
/// only async-signal-safe code before it execs or `_exit`s.
unsafe fn clone3(cgroup: Option<BorrowedFd<'_>>, extra: u64) -> io::Result<Forked> {
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
    // fork(); the caller guarantees guardian is single-threaded, so no lock can be held by
    // another thread in the copy. `args` and `pidfd` live across the call and the size passed
    // matches the struct.
    let rc = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    match cvt_long(rc)? {
        0 => Ok(Forked::Child),
        pid => {
            // SAFETY: with CLONE_PIDFD the kernel stored a new fd we now own.
            let fd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok(Forked::Parent(Child { pid: pid as i32, pidfd: Some(fd) }))
        }
    }
}

/// Plain `fork()`.
///
/// # Safety
///
/// As for [`clone3`]: the calling process must be single-threaded, and the child may run only
/// async-signal-safe code before it execs or `_exit`s.
unsafe fn fork() -> io::Result<Forked> {
    // SAFETY: the caller guarantees guardian is single-threaded, so the child's copy of the
    // address space holds no lock owned by another thread.
    match cvt(unsafe { libc::fork() })? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Child { pid, pidfd: None })),
    }
}

/// [`clone3`] or [`fork`], as `how` says, after checking that guardian has one thread.
///
/// # Safety
///
/// On the child side the caller may run only async-signal-safe code before it execs or
/// `_exit`s.
unsafe fn start(how: Start<'_>) -> io::Result<Forked> {
    single_threaded()?;
    // SAFETY: `single_threaded` just checked the one precondition the caller does not carry.
    unsafe {
        match how {
            Start::Clone3 { cgroup, extra } => clone3(cgroup, extra),
            Start::Fork => fork(),
        }
    }
}

/// Fails when guardian has more than one thread, so that no fork copies a lock held by
/// another thread. guardian starts no threads; this is the tripwire for a change that would.
/// Counted in `/proc/self/task`; where that cannot be read (no /proc for guardian's PID
/// namespace) the construction alone has to hold.
pub(super) fn single_threaded() -> io::Result<()> {
    use rustix::fs::{Mode, OFlags, RawDir};
    let Ok(dir) =
        rustix::fs::open("/proc/self/task", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
    else {
        return Ok(());
    };
    // Read into a buffer on the stack (std's read_dir takes an 8 kB heap buffer: an mmap and
    // a munmap).
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 512];
    let mut entries = RawDir::new(&dir, &mut buf);
    let mut n = 0;
    while let Some(entry) = entries.next() {
        match entry {
            Ok(e) if matches!(e.file_name().to_bytes(), b"." | b"..") => {}
            Ok(_) => n += 1,
            Err(_) => return Ok(()),
        }
    }
    match n {
        0 | 1 => Ok(()),
        n => Err(io::Error::other(format!(
            "guardian has {n} threads and forks only while it has one (a forked child could inherit a lock held by another thread)"
        ))),
    }
}

/// Starts the provider: forks as `how` says; the child runs [`exec_provider`] with `plan`.
/// Returns the child; an exec failure comes back over `plan`'s error pipe.
pub fn spawn_child(how: Start<'_>, plan: &ExecPlan<'_>) -> io::Result<Child> {
    if plan.argv.len() < 2 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: the child side runs only `exec_provider`, which calls async-signal-safe
    // functions on memory the plan prepared before the fork.
    match unsafe { start(how) }? {
        // SAFETY: this is the freshly started child of a single-threaded guardian.
        Forked::Child => unsafe { exec_provider(plan) },
        Forked::Parent(child) => Ok(child),
    }
}

/// For `guardian doctor`'s probes: starts a child as `how` says that waits for a signal (the
/// caller SIGKILLs and reaps it).
pub fn spawn_parked_child(how: Start<'_>) -> io::Result<Child> {
    // SAFETY: the child side runs only `park`, which calls pause() in a loop.
    match unsafe { start(how) }? {
        Forked::Child => park(),
        Forked::Parent(child) => Ok(child),
    }
}

/// Waits for a signal (the parent SIGKILLs it) and never returns.
fn park() -> ! {
    loop {
        // SAFETY: pause is async-signal-safe and touches no memory of the copied parent state.
        unsafe { libc::pause() };
        // A caught signal cannot happen (the child installs no handlers); stay parked.
    }
}

/// Everything the child needs between fork and exec, prepared by the parent so the child
/// allocates nothing.
pub struct ExecPlan<'a> {
    /// NULL-terminated argv pointing into the `CString`s of `new`; argv[0] is the command as
    /// given (searched in PATH by execvp). Private, so it can only point at live strings.
    argv: Vec<*const libc::c_char>,
    args: PhantomData<&'a [CString]>,
    /// The signal mask guardian was started with.
    pub original_mask: SigSet,
    /// SIGCHLD was ignored when guardian started: restore that for the provider.
    pub restore_sigchld_ignored: bool,
    /// (guardian's controlling terminal, guardian's process group): give the terminal to the
    /// provider's new process group, if guardian's group still holds its foreground.
    pub take_terminal: Option<(RawFd, i32)>,
    /// Start the provider in a process group of its own (`setpgid(0, 0)`).
    pub new_group: bool,
    /// Write end of the close-on-exec error pipe.
    pub error_pipe: BorrowedFd<'a>,
    /// `cgroup.procs` of the leaf to join before exec (when clone3 could not place us).
    pub join_cgroup_procs: Option<BorrowedFd<'a>>,
}

impl<'a> ExecPlan<'a> {
    /// A plan to exec `args` (argv[0] first) with `original_mask`, reporting failures on
    /// `error_pipe`; the other settings start off.
    pub fn new(args: &'a [CString], original_mask: SigSet, error_pipe: BorrowedFd<'a>) -> ExecPlan<'a> {
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        ExecPlan {
            argv,
            args: PhantomData,
            original_mask,
            restore_sigchld_ignored: false,
            take_terminal: None,
            new_group: true,
            error_pipe,
            join_cgroup_procs: None,
        }
    }
}

/// Runs in the child after fork/clone3: new process group, terminal, cgroup, SIGCHLD and
/// SIGPIPE dispositions, original signal mask, then `execvp`. On failure writes a tag byte
/// and errno to the error pipe and exits 127. Never returns.
///
/// The provider thus starts with the caller's mask and ignored set and `SIG_DFL` for every
/// other signal: guardian changes no other disposition (the runtime's SIGSEGV/SIGBUS handlers
/// were reset to `SIG_DFL` at start-up, and exec would reset any handler anyway).
///
/// # Safety
///
/// Only in the child of a fork/clone3 of a single-threaded process, before anything else
/// runs there; `plan.argv` holds at least the command and the terminating null.
unsafe fn exec_provider(plan: &ExecPlan<'_>) -> ! {
    let error_pipe = plan.error_pipe.as_raw_fd();
    let join_cgroup_procs = plan.join_cgroup_procs.map(|fd| fd.as_raw_fd());
    // SAFETY: this runs in a freshly forked single-threaded child (the caller's contract).
    // It calls only async-signal-safe functions on memory prepared before the fork, and ends
    // in execvp or _exit, so no destructor or allocator of the copied parent state runs.
    unsafe {
        let fail = |stage: u8| -> ! {
            let errno = *libc::__errno_location();
            let mut msg = [0u8; 5];
            msg[0] = stage;
            msg[1..].copy_from_slice(&errno.to_ne_bytes());
            libc::write(error_pipe, msg.as_ptr().cast(), msg.len());
            libc::_exit(EXEC_FAILED);
        };
        if plan.new_group && libc::setpgid(0, 0) != 0 {
            fail(b'p');
        }
        if let Some((tty, guardian_pgrp)) = plan.take_terminal {
            // SIGTTOU is still blocked here (the parent's mask), so the kernel would allow
            // this call from the background too: it is made only while guardian's group still
            // holds the foreground (a shell may have taken it back since guardian looked).
            // Failure only means no job control.
            if libc::tcgetpgrp(tty) == guardian_pgrp {
                libc::tcsetpgrp(tty, libc::getpid());
            }
        }
        if let Some(procs) = join_cgroup_procs {
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

// ---- start-up settings of guardian's own process ----

unsafe extern "C" {
    /// The C library's environment, `NAME=value` strings up to a null pointer (POSIX).
    static environ: *const *const libc::c_char;
}

/// The environment's variables whose names start with `prefix`, in the environment's order
/// (so the first of two equal names comes first, as getenv answers), copied. One pass over
/// `environ` that compares only the prefix: `std::env::var_os` is the C library's getenv,
/// which (musl) compares the name asked with every entry, and the dozen `GUARDIAN_*` names
/// guardian asked for at each start were 38% of its start-up instructions.
pub fn vars_with_prefix(prefix: &[u8]) -> Vec<(OsString, OsString)> {
    let mut out = Vec::new();
    // SAFETY: walks the environment array up to its null pointer and reads each entry's bytes
    // only up to the first one that differs from `prefix` (a NUL differs: `prefix` has none)
    // or, for an entry that starts with `prefix`, up to its NUL. guardian has one thread and
    // changes its environment only in `unset_env`, never while this runs.
    unsafe {
        let mut entry = environ;
        if entry.is_null() {
            return out;
        }
        while !(*entry).is_null() {
            let s = *entry;
            if prefix.iter().enumerate().all(|(i, &b)| *s.add(i) as u8 == b) {
                let bytes = std::ffi::CStr::from_ptr(s).to_bytes();
                if let Some(eq) = bytes.iter().position(|&b| b == b'=') {
                    let (name, value) = bytes.split_at(eq);
                    out.push((
                        OsStr::from_bytes(name).to_os_string(),
                        OsStr::from_bytes(value.get(1..).unwrap_or_default()).to_os_string(),
                    ));
                }
            }
            entry = entry.add(1);
        }
    }
    out
}

/// Removes `name` from guardian's environment, which the provider inherits at exec. Like a
/// fork, sound only while guardian has one thread (no other thread can read the environment
/// meanwhile), which is checked first.
pub fn unset_env(name: &str) -> io::Result<()> {
    single_threaded()?;
    // SAFETY: guardian has one thread (just checked), so nothing reads the environment
    // concurrently.
    unsafe { std::env::remove_var(name) };
    Ok(())
}

/// Sets `name` to `value`, or removes it (`None`). Only for the unit test of the command line
/// that compares guardian's parser with clap's, which reads the variables from the process
/// environment: that test runs in a child test process of its own (`--exact`,
/// `--test-threads=1`), where nothing else runs while it changes the environment.
#[cfg(test)]
pub fn set_env_in_test_child(name: &str, value: Option<&std::ffi::OsStr>) {
    // SAFETY: called only by that child process's one test; libtest's other thread, if any,
    // only waits for it, so nothing reads the environment concurrently.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

/// `prctl(PR_SET_PDEATHSIG, sig)`: the kernel sends `sig` to guardian when the thread that
/// created it exits (0 turns it off). A libc call: rustix's takes only named signals, and
/// guardian uses a real-time one.
pub fn set_pdeathsig(sig: i32) -> io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The precondition check is real: with a second thread alive, no child is started.
    #[test]
    fn no_fork_while_a_second_thread_runs() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let result = spawn_parked_child(Start::Fork);
        drop(tx);
        let _ = other.join();
        match result {
            Ok(child) => {
                let _ = super::super::kill(child.pid, libc::SIGKILL);
                let _ = super::super::reap_blocking(child.pid);
                panic!("a child was forked while guardian had two threads");
            }
            Err(e) => assert!(e.to_string().contains("threads"), "{e}"),
        }
    }

    /// One pass over `environ` finds what getenv finds: every variable, with its value.
    #[test]
    fn vars_with_prefix_agrees_with_the_environment() {
        let all = vars_with_prefix(b"");
        assert_eq!(all.len(), std::env::vars_os().count());
        for (name, value) in &all {
            assert_eq!(std::env::var_os(name).as_ref(), Some(value), "{name:?}");
        }
        let path = vars_with_prefix(b"PAT");
        assert!(path.iter().all(|(n, _)| n.as_bytes().starts_with(b"PAT")));
        assert_eq!(path.iter().find(|(n, _)| n == "PATH").map(|(_, v)| v.clone()), std::env::var_os("PATH"));
        assert!(vars_with_prefix(b"\xff NO SUCH VARIABLE").is_empty());
    }
}
