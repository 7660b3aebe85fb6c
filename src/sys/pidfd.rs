//! sys::pidfd: process handles. `pidfd_open`, `pidfd_send_signal` with any signal number and
//! flags (rustix's takes neither real-time signals nor flags), the pid behind a pidfd
//! (`PIDFD_GET_INFO`), and `kill` for an unreaped child or `kill(-1)`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{cvt, cvt_long};

/// `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9): deliver to the process group whose id is the
/// pidfd's pid (the group the process leads: ESRCH once it moved to another group).
pub const PIDFD_SIGNAL_PROCESS_GROUP: u32 = 8;

/// `pidfd_send_signal(pidfd, sig, NULL, flags)` for any signal number, including real-time
/// ones and the process-group flag.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32, flags: u32) -> io::Result<()> {
    // SAFETY: plain syscall with an fd we borrow, a signal number, a null siginfo (the
    // kernel then fills in a SI_USER siginfo) and flags.
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), flags)
    };
    cvt_long(rc).map(drop)
}

/// `pidfd_open(pid, 0)`: the fd is close-on-exec by definition.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid.max(0)).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?)
}

/// The first version (64 bytes) of the kernel's `struct pidfd_info`.
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
}

/// `PIDFD_INFO_PID`: ask for (and, in the answer, got) the pid fields.
const PIDFD_INFO_PID: u64 = 1;
/// `PIDFD_GET_INFO`: `_IOWR(0xFF, 11, struct pidfd_info)` with the 64-byte version.
const PIDFD_GET_INFO: u32 = (3 << 30) | ((std::mem::size_of::<PidfdInfo>() as u32) << 16) | (0xFF << 8) | 11;

/// `ioctl(pidfd, PIDFD_GET_INFO)` (Linux 6.13): the pid, in guardian's PID namespace, of the
/// process a pidfd refers to; 0 when it has none there. ESRCH once that process was reaped;
/// ENOTTY or EINVAL on older kernels.
pub fn pidfd_get_pid(pidfd: BorrowedFd<'_>) -> io::Result<i32> {
    let mut info = PidfdInfo { mask: PIDFD_INFO_PID, ..PidfdInfo::default() };
    // SAFETY: `info` is a live, writable struct of the size the request encodes; the kernel
    // writes at most that many bytes into it.
    cvt(unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info as *mut PidfdInfo) })?;
    if info.mask & PIDFD_INFO_PID == 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    Ok(info.pid as i32)
}

/// `kill(pid, sig)`. Callers may use it only on an unreaped direct child (whose PID cannot be
/// reused) or, as PID 1 of a namespace, with `pid == -1`.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall, no memory involved.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}
