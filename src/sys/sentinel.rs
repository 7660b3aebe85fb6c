//! sys::sentinel: what the sentinel (`crate::sentinel`) needs below std and rustix. Starting
//! guardian proper with `clone(CLONE_VM | SIGCHLD)` on a stack of its own ([`clone_vm`]), so
//! that the sentinel and guardian share one address space and no page is copied; and the
//! calls the sentinel makes while guardian runs in that shared memory ([`Raw`]), which go
//! straight to the kernel, never through the C library.
//!
//! Why the sentinel may not use the C library (or the heap, or std's I/O) while guardian
//! lives, hazard by hazard (`docs/design.md`, start-up step 3b, "Shared-memory hazards"):
//!
//! * **errno and TLS.** Without `CLONE_SETTLS` both processes run with the same thread
//!   pointer: one `errno`, one C-library thread structure, one set of Rust thread-locals. A
//!   failing libc call in the sentinel would overwrite the `errno` guardian is about to read.
//!   [`Raw`] issues the `syscall` instruction itself and returns the kernel's `-errno`.
//! * **malloc and stdio.** Their state (and musl's locks, which are no-ops in a process that
//!   never started a thread) is shared; guardian may be inside `malloc` at any instant, even
//!   SIGKILLed there. The sentinel allocates nothing and writes nothing through stdio, also
//!   after guardian ended (the heap may have been left half-updated).
//! * **statics.** The sentinel writes none; guardian's (`crate::sentinel`'s pid and group,
//!   the log level, the panic hook) are written by guardian only. The panic hook is global,
//!   so the sentinel's code has no panicking path (fixed-size buffers, checked indexing).
//! * **stack frames.** guardian runs on the stack [`clone_vm`] maps; everything it owns was
//!   moved there before the clone, so it reads nothing from the sentinel's stack, and the
//!   sentinel never touches guardian's.
//! * **the C library's idea of the thread id.** musl caches the thread id in the shared
//!   thread structure: `raise`/`abort` in guardian signal the *sentinel*'s tid. guardian
//!   ends by `kill(getpid(), sig)` (`die_of`); an `abort` (a bug, or the `abort` test hook)
//!   sends SIGABRT to the sentinel, which forwards it, and guardian then dies of musl's
//!   crash instruction: the pair still ends by a signal. glibc asks the kernel (`gettid`).
//! * **exit.** `exit()` runs atexit handlers and flushes stdio: shared state. The sentinel
//!   ends with `exit_group` (its own thread group: guardian is another).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// guardian's stack: 8 MiB like a main thread's default, reserved, not committed (only the
/// pages it touches cost memory), with a guard page below.
const STACK: usize = 8 << 20;
const PAGE: usize = 4096;

/// The range of the stack [`clone_vm`] mapped for guardian (without its guard page), for
/// `release_startup_memory`; written before the clone, read-only after.
static GUARDIAN_STACK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The lowest usable address and the end of guardian's own stack, when it has one.
pub(super) fn guardian_stack() -> Option<(usize, usize)> {
    match GUARDIAN_STACK.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        lo => Some((lo, lo + STACK)),
    }
}

/// `fcntl(fd, F_DUPFD_CLOEXEC)`: the sentinel's own copy of start-up's signalfd.
pub fn dup_cloexec(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl takes integers; on success the new fd is ours alone.
    let new = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: `new` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// What guardian's entry function finds at the top of its stack.
struct Start<T> {
    main: fn(T) -> !,
    data: T,
}

/// Starts `main(data)` in a new process that shares this one's address space
/// (`clone(CLONE_VM | SIGCHLD)`: its own pid, signal dispositions, mask and fd table, no
/// shared thread group) and runs on a freshly mapped stack with a guard page. `data` is moved
/// onto that stack before the clone, so the new process reads nothing from the caller's
/// frames, which the caller may go on using. Returns the new process's pid; on failure,
/// `data` comes back. Refused when this process has more than one thread (no second thread
/// may hold a lock the new process runs into).
///
/// The caller, from here on, shares memory with the new process and may only make the
/// calls of [`Raw`] (see the module's hazards).
pub fn clone_vm<T>(data: T, main: fn(T) -> !) -> Result<i32, (CloneError, T)> {
    if let Err(e) = super::process::single_threaded() {
        return Err((CloneError::Threads(e), data));
    }
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK + PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err((CloneError::Stack(io::Error::last_os_error()), data));
    }
    // SAFETY: the lowest page of the mapping made just above becomes the guard page.
    if let Err(e) = cvt(unsafe { libc::mprotect(base, PAGE, libc::PROT_NONE) }) {
        // SAFETY: unmaps exactly the mapping made above, which nothing refers to.
        unsafe { libc::munmap(base, STACK + PAGE) };
        return Err((CloneError::Stack(e), data));
    }
    let lo = base as usize + PAGE;
    let top = lo + STACK;
    // The Start record goes at the top of the new stack, 16-byte aligned below it; the new
    // process's stack pointer starts below the record.
    let slot = (top - std::mem::size_of::<Start<T>>()) & !(std::mem::align_of::<Start<T>>().max(16) - 1);
    let start = slot as *mut Start<T>;
    // SAFETY: `slot` lies inside the writable part of the mapping and is aligned for
    // Start<T>; the mapping is STACK bytes, far more than one record.
    unsafe { start.write(Start { main, data }) };
    GUARDIAN_STACK.store(lo, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: `entry::<T>` reads the record at `start` (its own stack) and never returns;
    // the stack is mapped, aligned and large; CLONE_VM without CLONE_THREAD or CLONE_SIGHAND
    // makes a separate process; the caller is single-threaded (checked above), and from here
    // on makes only raw syscalls (this function's contract), so the two processes never use
    // the C library's or Rust's shared state at the same time.
    let pid =
        unsafe { libc::clone(entry::<T>, slot as *mut libc::c_void, libc::CLONE_VM | libc::SIGCHLD, start.cast()) };
    if pid < 0 {
        let e = io::Error::last_os_error();
        GUARDIAN_STACK.store(0, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the clone failed, so nothing else has read the record; it is moved back
        // out once, then the mapping (which nothing refers to any more) goes.
        let Start { data, .. } = unsafe { start.read() };
        // SAFETY: as above.
        unsafe { libc::munmap(base, STACK + PAGE) };
        return Err((CloneError::Clone(e), data));
    }
    Ok(pid)
}

/// Why [`clone_vm`] could not start guardian, step by step, so that the error names the real
/// cause (issue 29.6: an `RLIMIT_AS` too small for the stack is not a refused clone).
#[derive(Debug)]
pub enum CloneError {
    /// This process has more than one thread.
    Threads(io::Error),
    /// The mmap (or mprotect) of guardian's stack failed.
    Stack(io::Error),
    /// `clone(CLONE_VM)` itself failed (a seccomp profile, valgrind, an emulator).
    Clone(io::Error),
}

impl CloneError {
    pub fn error(&self) -> &io::Error {
        match self {
            CloneError::Threads(e) | CloneError::Stack(e) | CloneError::Clone(e) => e,
        }
    }

    /// One phrase naming the step that failed, its errno, and for the stack the limit that
    /// refused it.
    pub fn describe(&self) -> String {
        let why = crate::errno::explain(self.error());
        match self {
            CloneError::Threads(_) => format!("guardian could not check that it runs one thread: {why}"),
            CloneError::Stack(_) => {
                let limit = match rustix::process::getrlimit(rustix::process::Resource::As).current {
                    Some(n) => format!(" under RLIMIT_AS {} KiB (ulimit -v)", n / 1024),
                    None => String::new(),
                };
                format!("the mmap of guardian's {} MiB stack failed{limit}: {why}", STACK >> 20)
            }
            CloneError::Clone(_) => format!("clone(CLONE_VM) was refused: {why}"),
        }
    }
}

/// The fallback when [`clone_vm`] cannot start guardian: a plain `fork()`. The child runs
/// `main(data)` on its copy of this stack; the parent (the sentinel) forgets its copy of
/// `data` (it belongs to guardian; dropping it would run guardian's destructors twice).
/// Every page either process writes afterwards is copied: more memory, the same guarantees.
pub fn fork_guardian<T>(data: T, main: fn(T) -> !) -> Result<i32, (io::Error, T)> {
    if let Err(e) = super::process::single_threaded() {
        return Err((e, data));
    }
    // SAFETY: this process is single-threaded (checked above), so the child may go on with
    // everything it inherited; the C library's fork updates its own state in the child.
    match unsafe { libc::fork() } {
        -1 => Err((io::Error::last_os_error(), data)),
        0 => main(data),
        pid => {
            std::mem::forget(data);
            Ok(pid)
        }
    }
}

/// guardian's first function on its new stack: takes the record [`clone_vm`] left there and
/// runs guardian; it never returns (returning would `exit` through the C library's clone).
extern "C" fn entry<T>(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the Start<T> clone_vm wrote at the top of this process's stack and
    // never reads again after a successful clone: it is moved out exactly once, here.
    let Start { main, data } = unsafe { (arg as *mut Start<T>).read() };
    main(data)
}

/// System calls as the sentinel makes them while it shares guardian's memory: the `syscall`
/// instruction itself, no C library (no `errno`, no locks, no thread structure), no heap.
/// Each returns the kernel's result, a negative errno on failure.
pub struct Raw;

/// One system call with up to four integer arguments.
///
/// # Safety
/// Pointer arguments must be valid for what system call `nr` reads or writes.
#[inline(always)]
unsafe fn syscall4(nr: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; the kernel clobbers rcx and r11 (x86-64) and nothing
    // else but the result register.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") nr as isize => ret, in("rdi") a, in("rsi") b, in("rdx") c,
            in("r10") d, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    // SAFETY: as above (aarch64: number in x8, result in x0).
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("svc 0", in("x8") nr, inlateout("x0") a => ret, in("x1") b, in("x2") c, in("x3") d,
            options(nostack));
    }
    ret
}

fn ok(ret: isize) -> Result<isize, i32> {
    if (-4095..0).contains(&ret) { Err(-ret as i32) } else { Ok(ret) }
}

impl Raw {
    /// `exit_group(code)`: ends the sentinel only (guardian is another thread group).
    pub fn exit(code: i32) -> ! {
        // SAFETY: no pointer argument; exit_group does not return.
        unsafe {
            syscall4(libc::SYS_exit_group, code as usize, 0, 0, 0);
        }
        #[allow(clippy::empty_loop)]
        loop {}
    }

    /// `kill(pid, sig)`.
    pub fn kill(pid: i32, sig: i32) -> Result<(), i32> {
        // SAFETY: integer arguments only.
        ok(unsafe { syscall4(libc::SYS_kill, pid as usize, sig as usize, 0, 0) }).map(drop)
    }

    /// `close(fd)`.
    pub fn close(fd: i32) {
        // SAFETY: integer argument only; the caller owns the fd number in its own fd table.
        unsafe {
            syscall4(libc::SYS_close, fd as usize, 0, 0, 0);
        }
    }

    /// `rt_sigqueueinfo(pid, sig, {SI_QUEUE, own pid and uid})`: like `kill`, but the
    /// receiver reads `si_code == SI_QUEUE` (what `sigqueue` sends).
    pub fn queue_signal(pid: i32, sig: i32) -> Result<(), i32> {
        Raw::queue(pid, sig, libc::SI_QUEUE)
    }

    /// `rt_sigqueueinfo(pid, sig, {code, own pid and uid})`: a message between the sentinel
    /// and guardian proper, told apart by its `si_code` (negative: the kernel lets a process
    /// send those) and its sender's pid.
    pub fn queue(pid: i32, sig: i32, code: i32) -> Result<(), i32> {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        Raw::queue_info(pid, sig, code, me, rustix::process::getuid().as_raw(), 0)
    }

    /// `rt_sigqueueinfo(pid, sig, {SI_QUEUE, sender, uid, value})`: the signal as another
    /// process sent it (the kernel lets any `SI_QUEUE` sender name the pid and uid it
    /// reports; the permission check is the caller's own), with `value` in `si_int`. How the
    /// sentinel passes a signal on with its original sender (`signals::forward_value`).
    pub fn queue_as(pid: i32, sig: i32, sender: i32, uid: u32, value: i32) -> Result<(), i32> {
        Raw::queue_info(pid, sig, libc::SI_QUEUE, sender, uid, value)
    }

    /// `rt_sigqueueinfo` with every field given: the one place the siginfo is laid out.
    fn queue_info(pid: i32, sig: i32, code: i32, sender: i32, uid: u32, value: i32) -> Result<(), i32> {
        // siginfo_t: si_signo, si_errno, si_code, padding, then si_pid, si_uid and the
        // 8-byte si_value (si_int its first half on little-endian x86_64 and aarch64); 128
        // bytes in all.
        let mut info = [0i32; 32];
        info[0] = sig;
        info[2] = code;
        info[4] = sender;
        info[5] = uid as i32;
        info[6] = value;
        // SAFETY: `info` is a live 128-byte siginfo_t the kernel reads.
        ok(unsafe { syscall4(libc::SYS_rt_sigqueueinfo, pid as usize, sig as usize, info.as_ptr() as usize, 0) })
            .map(drop)
    }

    /// `rt_sigprocmask(how, {sig})`.
    pub fn mask_one(how: libc::c_int, sig: i32) -> Result<(), i32> {
        let set: u64 = 1 << (sig - 1);
        // SAFETY: `set` is a live 8-byte kernel sigset; no old set is written.
        ok(unsafe { syscall4(libc::SYS_rt_sigprocmask, how as usize, &set as *const u64 as usize, 0, 8) }).map(drop)
    }

    /// Whether `sig` is pending (`rt_sigpending`).
    pub fn is_pending(sig: i32) -> Result<bool, i32> {
        let mut set: u64 = 0;
        // SAFETY: `set` is a live, writable 8-byte kernel sigset.
        ok(unsafe { syscall4(libc::SYS_rt_sigpending, &mut set as *mut u64 as usize, 8, 0, 0) })?;
        Ok(set & (1 << (sig - 1)) != 0)
    }

    /// `rt_sigaction(sig, SIG_DFL)`: the sentinel's own disposition table (no CLONE_SIGHAND).
    pub fn default_disposition(sig: i32) -> Result<(), i32> {
        // The kernel's struct sigaction: handler (0 = SIG_DFL), flags, restorer, mask.
        let act = [0usize; 4];
        // SAFETY: `act` is a live kernel sigaction; no old action is written.
        ok(unsafe { syscall4(libc::SYS_rt_sigaction, sig as usize, act.as_ptr() as usize, 0, 8) }).map(drop)
    }

    /// `madvise(lo, len, MADV_DONTNEED)` on the sentinel's own dead stack frames.
    ///
    /// # Safety
    /// Nothing may live in `[lo, lo + len)`: its pages read back as zeroes.
    pub unsafe fn discard(lo: usize, len: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            syscall4(libc::SYS_madvise, lo, len, libc::MADV_DONTNEED as usize, 0);
        }
    }

    /// Ends the sentinel by `sig`, as guardian ended: no core dump (`RLIMIT_CORE` 0, as
    /// coreutils `timeout` and sudo do), the signal's default action, unblocked, sent to
    /// itself; `exit_group(128 + sig)` for a signal whose default action does not end it.
    pub fn die_of(sig: i32) -> ! {
        let none = rustix::process::Rlimit { current: Some(0), maximum: Some(0) };
        let _ = rustix::process::setrlimit(rustix::process::Resource::Core, none);
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            let _ = Raw::default_disposition(sig);
            let _ = Raw::mask_one(libc::SIG_UNBLOCK, sig);
        }
        let _ = Raw::kill(rustix::process::getpid().as_raw_nonzero().get(), sig);
        Raw::exit(128 + sig)
    }
}
