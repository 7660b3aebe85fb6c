//! sys::sentinel: the three calls the sentinel (`crate::sentinel`) needs that neither std nor
//! rustix offers safely: a plain `fork` that returns into Rust in both processes, a signal
//! queued with `sigqueue` (its `si_code` is `SI_QUEUE`, which guardian tells from a `kill`),
//! and ending the calling process by a signal, the way its child ended.

use std::io;

use super::cvt;

/// Which side of a [`fork`] the caller is on.
pub enum Forked {
    /// The new process.
    Child,
    /// The calling process; the new one has this pid.
    Parent(i32),
}

/// `fork()`, for a single-threaded caller (guardian never starts a thread): the child is a
/// copy of the caller that returns here and goes on running Rust code, so the caller must
/// have no second thread whose locks the child could inherit held. Refused with an error
/// when the process has more than one thread.
pub fn fork() -> io::Result<Forked> {
    super::process::single_threaded()?;
    // SAFETY: the caller is single-threaded (checked just above: no other thread can hold a
    // lock of the allocator or of stdio that the child would inherit locked), so the child
    // may go on running arbitrary code of this process. Both return values are handled.
    match cvt(unsafe { libc::fork() })? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// `sigqueue(pid, sig, 0)`: like `kill`, but the receiver reads `si_code == SI_QUEUE`. The
/// caller names an unreaped child of its own, whose pid cannot be reused.
pub fn queue_signal(pid: i32, sig: i32) -> io::Result<()> {
    let value = libc::sigval { sival_ptr: std::ptr::null_mut() };
    // SAFETY: plain syscall wrapper with integer arguments and a by-value union.
    cvt(unsafe { libc::sigqueue(pid, sig, value) }).map(drop)
}
