//! sys::wait: reaping. `wait4` with the raw status (guardian reports exit codes and signals
//! exactly as the kernel gave them) and the provider's resource usage, `getrusage` for the
//! whole reaped tree, and `waitid(WSTOPPED | WCONTINUED)` for the provider's job-control
//! stops, which never reaps. rustix where it wraps the call (`waitpid`, `waitid`); `wait4` and
//! `getrusage` through libc, because rustix does not return the rusage.

use std::io;
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, WaitId, WaitIdOptions, WaitOptions};

use crate::status::WaitStatus;

/// Outcome of one non-blocking `waitpid(-1)`.
pub enum Reaped {
    Child(i32, WaitStatus),
    /// Children exist, none has exited.
    NoneReady,
    /// ECHILD: guardian has no children at all.
    NoChildren,
}

fn pid_arg(pid: i32) -> io::Result<Pid> {
    match pid {
        ..=0 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        pid => Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// `waitpid(pid, &status, 0)`: blocking reap of one known child (used only for a child that
/// failed before exec, which exits at once, and for doctor's probe children).
pub fn reap_blocking(pid: i32) -> io::Result<WaitStatus> {
    let target = pid_arg(pid)?;
    loop {
        return match rustix::process::waitpid(Some(target), WaitOptions::empty()) {
            Ok(Some((_, status))) => Ok(WaitStatus(status.as_raw())),
            // Without WNOHANG the kernel answers only once the child changed state.
            Ok(None) => Err(io::Error::from_raw_os_error(libc::ECHILD)),
            Err(Errno::INTR) => continue,
            Err(e) => Err(e.into()),
        };
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
    let target = pid_arg(pid)?;
    let options = WaitIdOptions::STOPPED | WaitIdOptions::CONTINUED | WaitIdOptions::NOHANG;
    loop {
        return match rustix::process::waitid(WaitId::Pid(target), options) {
            Ok(None) | Err(Errno::CHILD) => Ok(None),
            Ok(Some(info)) => Ok(if let Some(sig) = info.stopping_signal().or(info.trapping_signal()) {
                Some(JobChange::Stopped(sig))
            } else if info.continued() {
                Some(JobChange::Continued)
            } else {
                None
            }),
            Err(Errno::INTR) => continue,
            Err(e) => Err(e.into()),
        };
    }
}

/// CPU time and peak resident set size, as `wait4` and `getrusage` report them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    /// Largest resident set size, kB.
    pub max_rss_kb: u64,
}

/// `wait4(-1, &status, WNOHANG, ..)`: reaps one child without blocking, with its resource
/// usage (its own and its reaped children's) when `usage` is asked for.
pub fn reap_one(usage: bool) -> io::Result<(Reaped, Option<Usage>)> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let ptr: *mut libc::rusage = if usage { &mut ru } else { std::ptr::null_mut() };
    loop {
        // SAFETY: status points to a live c_int; ptr is null (allowed) or points to ru.
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, ptr) };
        return match pid {
            0 => Ok((Reaped::NoneReady, None)),
            p if p > 0 => Ok((Reaped::Child(p, WaitStatus(status)), usage.then(|| Usage::from(&ru)))),
            _ => {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::ECHILD) => Ok((Reaped::NoChildren, None)),
                    Some(libc::EINTR) => continue,
                    _ => Err(err),
                }
            }
        };
    }
}

/// `getrusage(RUSAGE_CHILDREN)`: every child reaped so far, with their reaped descendants.
pub fn children_usage() -> Usage {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a live rusage for the kernel to fill; RUSAGE_CHILDREN cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    Usage::from(&ru)
}

impl From<&libc::rusage> for Usage {
    fn from(ru: &libc::rusage) -> Usage {
        let time =
            |tv: libc::timeval| Duration::from_micros(tv.tv_sec.max(0) as u64 * 1_000_000 + tv.tv_usec.max(0) as u64);
        Usage { user: time(ru.ru_utime), system: time(ru.ru_stime), max_rss_kb: ru.ru_maxrss.max(0) as u64 }
    }
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
