//! sys::wait: reaping. `waitpid` with the raw status (guardian reports exit codes and
//! signals exactly as the kernel gave them), and `waitid(WSTOPPED | WCONTINUED)` for the
//! provider's job-control stops, which never reaps. All rustix calls; this file adds the
//! EINTR retries and the shapes guardian's loop wants.

use std::io;

use rustix::io::Errno;
use rustix::process::{Pid, WaitId, WaitIdOptions, WaitOptions};

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

fn pid_arg(pid: i32) -> io::Result<Pid> {
    match pid {
        ..=0 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        pid => Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// `waitpid(-1, &status, WNOHANG)`.
pub fn reap_one() -> io::Result<Reaped> {
    loop {
        return match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(None) => Ok(Reaped::NoneReady),
            Ok(Some((pid, status))) => Ok(Reaped::Child(pid.as_raw_nonzero().get(), WaitStatus(status.as_raw()))),
            Err(Errno::CHILD) => Ok(Reaped::NoChildren),
            Err(Errno::INTR) => continue,
            Err(e) => Err(e.into()),
        };
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
