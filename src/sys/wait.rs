//! sys::wait: reaping. `waitpid` with the raw status (guardian reports exit codes and
//! signals exactly as the kernel gave them), and `waitid(WSTOPPED | WCONTINUED)` for the
//! provider's job-control stops, which never reaps.

use std::io;

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
