//! sys::start: guardian's entry point, the C `main` the C library's start code calls
//! (`main.rs` is `#![no_main]`). It does the part of the Rust runtime's start-up
//! (`std::rt::lang_start`) guardian relies on, the same way, and leaves out the rest:
//!
//! * kept: fds 0-2 that are closed are opened on `/dev/null` (so no fd guardian opens later
//!   takes their number and receives its log lines; which ones were closed is recorded, so an
//!   `--events-fd` naming one is judged as the caller gave it, `sys::take_inherited_fd`), and
//!   SIGPIPE is ignored (a reader that
//!   went away makes writes fail with EPIPE instead of ending guardian; the provider gets the
//!   default action back, `signal_step::handled`);
//! * left out: the SIGSEGV/SIGBUS stack-overflow handlers on an alternate signal stack (an
//!   mmap, an mprotect, three sigaltstack calls, four rt_sigaction calls and a munmap at exit),
//!   which guardian used to reset to `SIG_DFL` right away with four more (it runs no handler at
//!   all, see `signal_step::setup`); and the main thread's name (a panic message says
//!   `<unnamed>` instead of `main`).
//!
//! The C `main` is defined where `main.rs` invokes [`entry_point!`] with guardian's
//! `run_main`: this module names nothing above `sys` (the call runs downward, from `main.rs`),
//! and a build that does not invoke it (the unit tests) gets no second `main`.

use std::ffi::{CStr, OsStr, c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};

use super::signal::{SigSet, set_sigmask};
use std::os::unix::ffi::OsStrExt;

/// Defines the process's entry point, the C `main` the C library's start code calls with
/// `argc`/`argv` as the kernel laid them out at exec: it prepares the process ([`args`]) and
/// hands the arguments to `$run`, which never returns.
macro_rules! entry_point {
    ($run:path) => {
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
            // SAFETY: `argc` and `argv` are the C library's, passed on unchanged: `argc`
            // pointers to NUL-terminated strings that live as long as the process.
            $run(unsafe { $crate::sys::start::args(argc, argv) })
        }
    };
}
pub(crate) use entry_point;

/// What the Rust runtime would have done before `main` (closed fds 0-2 on `/dev/null`,
/// SIGPIPE ignored), then the arguments, borrowed, not copied: the parser copies only what it
/// keeps (a heap allocation freed at once costs an mmap and a munmap with musl's allocator).
///
/// # Safety
/// `argv` holds `argc` pointers, each null or to a NUL-terminated string that lives as long as
/// the process (the kernel's, at the top of the main thread's stack).
pub unsafe fn args(argc: c_int, argv: *const *const c_char) -> Args {
    block_until_setup();
    standard_fds();
    // SAFETY: sets SIGPIPE's disposition to SIG_IGN; no handler code is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    Args { argv, next: 0, argc: usize::try_from(argc).unwrap_or(0) }
}

/// The process's arguments, as `&'static OsStr`s over the kernel's `argv`.
pub struct Args {
    argv: *const *const c_char,
    next: usize,
    argc: usize,
}

impl Iterator for Args {
    type Item = &'static OsStr;

    fn next(&mut self) -> Option<&'static OsStr> {
        while self.next < self.argc {
            // SAFETY: `args`'s contract: `next < argc` indexes one of the `argc` pointers,
            // each null (skipped) or to a NUL-terminated string that lives as long as the
            // process.
            let arg = unsafe { *self.argv.add(self.next) };
            self.next += 1;
            if !arg.is_null() {
                // SAFETY: as above, a NUL-terminated string that lives as long as the process.
                return Some(OsStr::from_bytes(unsafe { CStr::from_ptr(arg) }.to_bytes()));
            }
        }
        None
    }
}

/// The signal mask guardian was started with, kept by [`block_until_setup`].
static CALLER_MASK: AtomicU64 = AtomicU64::new(0);

/// guardian's first act (start-up step 0): every catchable signal is blocked until
/// `signal_step::setup` reads them from its signalfd. A stop request (SIGTERM) or a
/// job-control stop that arrives in the instants after exec then waits as a pending signal
/// and is handled like one pending at exec (docs/contract.md), instead of ending or stopping
/// guardian by its default action before it
/// started anything (a driver that signals right after its spawn returned hit that window).
/// The caller's mask is kept for the provider ([`caller_mask`]); a subcommand gets it back
/// ([`restore_caller_mask`]). If the call fails the mask is unchanged and the window stays.
fn block_until_setup() {
    let mut all = SigSet::empty();
    // Not SIGPIPE: guardian's own writes raise it (a log line to a stderr nobody reads), and
    // it is ignored from the next step on; blocked, it would be queued and later forwarded to
    // the provider as if someone had sent it.
    let left_out = [libc::SIGKILL, libc::SIGSTOP, libc::SIGPIPE];
    for sig in (1..=64).filter(|s| !left_out.contains(s)) {
        all.add(sig);
    }
    if let Ok(old) = set_sigmask(libc::SIG_BLOCK, &all) {
        CALLER_MASK.store(old.0, Ordering::Relaxed);
    }
}

/// The signal mask guardian's caller gave it (what the provider is started with).
pub fn caller_mask() -> SigSet {
    SigSet(CALLER_MASK.load(Ordering::Relaxed))
}

/// Gives guardian its caller's signal mask back (a subcommand, which supervises nothing, is
/// interrupted and stopped as any program is); a signal that arrived meanwhile is delivered.
pub fn restore_caller_mask() -> std::io::Result<()> {
    set_sigmask(libc::SIG_SETMASK, &caller_mask()).map(drop)
}

/// As the Rust runtime does: a closed fd 0, 1 or 2 is opened on `/dev/null` (one `poll` tells
/// which), and a failure to do so ends guardian at once.
fn standard_fds() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
    loop {
        // SAFETY: `fds` is a live array of three pollfd structs; a zero timeout never blocks.
        if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } != -1 {
            break;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            // Where poll cannot answer (it is denied, or no memory), ask each fd.
            _ => {
                for pfd in &mut fds {
                    // SAFETY: F_GETFD only reads the fd's flags.
                    if unsafe { libc::fcntl(pfd.fd, libc::F_GETFD) } == -1 {
                        pfd.revents = libc::POLLNVAL;
                    }
                }
                break;
            }
        }
    }
    for pfd in fds {
        if pfd.revents & libc::POLLNVAL == 0 {
            continue;
        }
        // SAFETY: opens a path from a NUL-terminated literal; the new fd (inherited by the
        // provider, as with the runtime) takes the lowest free number, the closed one.
        if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR, 0) } == -1 {
            std::process::abort();
        }
        crate::sys::note_reopened_std_fd(pfd.fd);
    }
}
