//! sys: the one module where `unsafe` is allowed (the crate root denies it everywhere else).
//! Thin, safe wrappers over the Linux syscalls that neither std nor rustix offers in the form
//! guardian needs, one file per concern:
//!
//! * `signal`: signal masks, dispositions and signalfd, as raw syscalls in the kernel's own
//!   signal-set layout; stopping guardian itself for job control.
//! * `process`: starting children (clone3 with `CLONE_PIDFD | CLONE_INTO_CGROUP`, fork) behind
//!   the safe [`spawn_child`] and [`spawn_parked_child`], exec of the provider, and start-up's
//!   process settings (`PR_SET_PDEATHSIG`, the environment the provider inherits).
//! * `pidfd`: `pidfd_open`, `pidfd_send_signal` with flags and real-time signals,
//!   `PIDFD_GET_INFO`, and `kill` for the cases a pidfd cannot serve.
//! * `wait`: `waitpid` with the raw status, `waitid` for job-control stops.
//! * `terminal`: the controlling terminal's foreground process group.
//! * `fd`: fds inherited from the caller, and writes that never block.
//! * `memory`: handing start-up's heap and stack pages back.
//! * `start`: the entry point (the C `main`, defined where `main.rs` invokes `entry_point!`).
//! * `sentinel`: `clone(CLONE_VM)` of guardian onto a stack of its own, and the raw system
//!   calls the sentinel makes while it shares guardian's memory.
//!
//! Every wrapper returns `io::Result` with the kernel's errno; callers name the syscall in
//! their messages. Every block of `unsafe` carries a `// SAFETY:` note, and every `unsafe fn`
//! a `# Safety` section. Where rustix already wraps a call, the wrapper here is a rustix call.

mod fd;
mod memory;
mod pidfd;
mod process;
mod sentinel;
mod signal;
#[cfg_attr(test, allow(dead_code, unused_imports, unused_macros))]
pub mod start;
mod terminal;
mod wait;

use std::io;
use std::time::Duration;

#[cfg_attr(test, allow(unused_imports))]
pub use fd::note_reopened_std_fd;
pub use fd::{send_nonblocking, take_inherited_fd, write_nowait};
pub use memory::{MainStack, main_stack, release_dead_stack, release_startup_memory};
pub use pidfd::{PIDFD_SIGNAL_PROCESS_GROUP, kill, pidfd_get_pid, pidfd_open, pidfd_send_signal};
#[cfg(test)]
pub use process::set_env_in_test_child;
pub use process::{
    CLONE_NEWCGROUP, Child, ExecPlan, Start, set_pdeathsig, spawn_child, spawn_parked_child, unset_env,
    vars_with_prefix,
};
pub use sentinel::{Raw, clone_vm, dup_cloexec, fork_guardian};
pub use signal::{
    Disposition, SigInfo, SigSet, die_of_signal, disposition, is_ignored, read_signalfd, set_default_disposition,
    set_sigmask, signalfd, stop_own_group,
};
pub use terminal::{
    getpgrp, in_foreground, is_controlling_terminal, isatty, open_controlling_terminal, setpgid, tcgetpgrp, tcsetpgrp,
};
pub use wait::{JobChange, Reaped, Usage, child_exited, children_usage, reap_blocking, reap_one, wait_job_change};

#[cfg(not(target_os = "linux"))]
compile_error!("guardian supports Linux only (it relies on pidfds, signalfd and subreapers)");
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("guardian is built and tested for x86_64 and aarch64 Linux only");

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// CLOCK_MONOTONIC as a Duration since boot (the `ts` of every event).
pub fn monotonic() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Real and effective user/group ids differ: guardian is running setuid/setgid.
pub fn is_setid() -> bool {
    use rustix::process::{getegid, geteuid, getgid, getuid};
    getuid() != geteuid() || getgid() != getegid()
}

/// Whether the kernel says it is `major.minor` or later (`uname(2)`; a release that does not
/// parse counts as older). For choosing a faster path only where the kernel has it: an
/// emulator that says an old version (gVisor says 4.4) takes the older, tested path.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    release_at_least(&uname_release(), major, minor)
}

fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let number = |p: Option<&str>| p.and_then(|s| s.parse::<u32>().ok());
    match (number(parts.next()), number(parts.next())) {
        (Some(ma), Some(mi)) => (ma, mi) >= (major, minor),
        _ => false,
    }
}

#[cfg(test)]
#[test]
fn kernel_releases_compare_by_major_and_minor() {
    assert!(release_at_least("6.18.4-cloud-amd64", 6, 4));
    assert!(release_at_least("6.4.0", 6, 4) && release_at_least("7.0", 6, 4));
    assert!(!release_at_least("6.1.0-28-cloud-amd64", 6, 4) && !release_at_least("5.15.0", 6, 4));
    assert!(!release_at_least("4.4.0", 6, 4), "gVisor's");
    assert!(!release_at_least("", 6, 4) && !release_at_least("x", 6, 4));
}

/// The kernel release from `uname(2)` (e.g. "6.18.4").
pub fn uname_release() -> String {
    rustix::system::uname().release().to_string_lossy().into_owned()
}
