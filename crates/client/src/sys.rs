//! sys: the crate's only `unsafe`. Passing the events pipe's write end to guardian: it is
//! created close-on-exec like every other fd, and only the forked child clears the flag on its
//! own copy right before exec, so no other process the host spawns meanwhile can inherit it.

use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;

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
