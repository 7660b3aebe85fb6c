//! sys::start: guardian's entry point, the C `main` the C library's start code calls
//! (`main.rs` is `#![no_main]`). It does the part of the Rust runtime's start-up
//! (`std::rt::lang_start`) guardian relies on, the same way, and leaves out the rest:
//!
//! * kept: fds 0-2 that are closed are opened on `/dev/null` (so no fd guardian opens later
//!   takes their number and receives its log lines; which ones were closed is recorded, so an
//!   `--events-fd` naming one is judged as the caller gave it, `sys::take_inherited_fd`), and
//!   SIGPIPE is ignored (a reader that
//!   went away makes writes fail with EPIPE instead of ending guardian; the provider gets the
//!   default action back, `signals::handled`);
//! * left out: the SIGSEGV/SIGBUS stack-overflow handlers on an alternate signal stack (an
//!   mmap, an mprotect, three sigaltstack calls, four rt_sigaction calls and a munmap at exit),
//!   which guardian used to reset to `SIG_DFL` right away with four more (it runs no handler at
//!   all, see `signals::setup`); and the main thread's name (a panic message says
//!   `<unnamed>` instead of `main`).
//!
//! Declared by `main.rs` rather than `sys/mod.rs`: xtask includes `sys/mod.rs`, and must not
//! get a second `main`.

use std::ffi::{CStr, OsStr, c_char, c_int};
use std::os::unix::ffi::OsStrExt;

/// The process's entry point: `argc`/`argv` as the kernel laid them out at exec.
#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    standard_fds();
    // SAFETY: sets SIGPIPE's disposition to SIG_IGN; no handler code is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let args = (0..usize::try_from(argc).unwrap_or(0)).filter_map(|i| {
        // SAFETY: the kernel passes `argc` pointers in `argv`, each to a NUL-terminated string
        // that lives as long as the process (at the top of the main thread's stack).
        let arg = unsafe {
            let arg = *argv.add(i);
            if arg.is_null() {
                return None;
            }
            CStr::from_ptr(arg)
        };
        // Borrowed, not copied: the parser copies only what it keeps (a heap allocation freed
        // at once costs an mmap and a munmap with musl's allocator).
        Some(OsStr::from_bytes(arg.to_bytes()))
    });
    crate::run_main(args)
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
