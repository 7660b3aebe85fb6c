//! writer: writes that never block guardian, for the events fd and the log's stderr. A pipe
//! or terminal is reopened through `/proc/self/fd/N` as guardian's own `O_NONBLOCK`
//! description (the caller's keeps its flags). A pipe that cannot be reopened (it belongs to
//! another user, or /proc is missing) is written with `RWF_NOWAIT`, and where the kernel lacks
//! that for pipes, only after poll() reports room and at most `PIPE_BUF` bytes at a time
//! (which then cannot block while guardian is the pipe's only writer). Plain blocking writes
//! remain only for regular files and terminals that cannot be reopened. Below both `events`
//! and `log`, so neither imports the other for it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};

use rustix::event::{PollFd, PollFlags};

use crate::sys;

enum Kind {
    /// A pipe or terminal reopened through /proc as our own O_NONBLOCK description.
    NonBlocking,
    /// A pipe shared with the caller: pwritev2(RWF_NOWAIT).
    NowaitPipe,
    /// A pipe, on a kernel without RWF_NOWAIT for pipes: poll, then at most PIPE_BUF bytes.
    PolledPipe,
    /// A socket (Node's 'pipe' stdio): send(MSG_DONTWAIT | MSG_NOSIGNAL).
    Socket,
    /// A regular file, or a terminal we could not reopen: plain blocking writes.
    Blocking,
}

/// A write side that never blocks guardian (except the `Blocking` kinds: regular files, and
/// terminals or sockets it could not reopen).
pub struct Writer {
    fd: OwnedFd,
    kind: Kind,
}

impl Writer {
    /// One write of as much of `buf` as fits now; `WouldBlock` when nothing does.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let res = match self.kind {
                Kind::Socket => sys::send_nonblocking(self.fd.as_fd(), buf),
                Kind::NowaitPipe => sys::write_nowait(self.fd.as_fd(), buf),
                Kind::PolledPipe => write_polled(&self.fd, buf),
                Kind::NonBlocking | Kind::Blocking => rustix::io::write(&self.fd, buf).map_err(io::Error::from),
            };
            match res {
                Err(e) if matches!(self.kind, Kind::NowaitPipe) && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    // No debug line here: the log writes through a Writer too.
                    self.kind = Kind::PolledPipe;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// A writer over a file guardian opened itself (`--events-file`): non-blocking for a FIFO
    /// or character device it opened `O_NONBLOCK`, plain writes for a regular file.
    pub fn opened(fd: OwnedFd, nonblocking: bool) -> Writer {
        Writer { fd, kind: if nonblocking { Kind::NonBlocking } else { Kind::Blocking } }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// One write that cannot block while guardian is the pipe's only writer: poll() reports at
/// least one free page, and a write of at most PIPE_BUF bytes fits in it.
fn write_polled(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    let mut fds = [PollFd::new(fd, PollFlags::OUT)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    rustix::event::poll(&mut fds, Some(&zero))?;
    let ready = fds[0].revents();
    if ready.intersects(PollFlags::ERR | PollFlags::HUP) {
        return Err(io::Error::from_raw_os_error(libc::EPIPE));
    }
    if !ready.contains(PollFlags::OUT) {
        return Err(io::ErrorKind::WouldBlock.into());
    }
    let len = buf.len().min(libc::PIPE_BUF);
    rustix::io::write(fd, &buf[..len]).map_err(io::Error::from)
}

/// guardian's own write side of the caller's fd `n`: a pipe or terminal is reopened through
/// `/proc/self/fd/N` as a new `O_NONBLOCK` description (the caller's description keeps its
/// flags); where that is refused, a pipe is written with `RWF_NOWAIT` (or poll + `PIPE_BUF`),
/// a terminal blocking. Sockets use `MSG_DONTWAIT`; regular files block (briefly). The note
/// says what could not be done, for the caller to log (the log itself may be what is set up).
pub fn nonblocking(n: RawFd, fd: BorrowedFd<'_>) -> Result<(Writer, Option<String>), String> {
    let meta = rustix::fs::fstat(fd).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode));
    nonblocking_of_type(n, fd, meta.ok())
}

/// [`nonblocking`] for a caller that has already `fstat`ed the fd (`None`: it could not).
pub fn nonblocking_of_type(
    n: RawFd,
    fd: BorrowedFd<'_>,
    file_type: Option<rustix::fs::FileType>,
) -> Result<(Writer, Option<String>), String> {
    let (fd, kind, note) = nonblocking_parts(n, fd, file_type)?;
    Ok((Writer { fd, kind }, note))
}

fn nonblocking_parts(
    n: RawFd,
    fd: BorrowedFd<'_>,
    file_type: Option<rustix::fs::FileType>,
) -> Result<(OwnedFd, Kind, Option<String>), String> {
    let dup =
        || rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| format!("fcntl(F_DUPFD_CLOEXEC) on fd {n} failed: {e}"));
    Ok(match file_type {
        Some(rustix::fs::FileType::Fifo) => match reopen_nonblocking(n, rustix::fs::OFlags::empty()) {
            Ok(fd) => (fd, Kind::NonBlocking, None),
            Err(e) => {
                let note = format!("fd {n}: cannot reopen the pipe non-blocking ({e}); writing with RWF_NOWAIT");
                (dup()?, Kind::NowaitPipe, Some(note))
            }
        },
        Some(rustix::fs::FileType::Socket) => (dup()?, Kind::Socket, None),
        Some(rustix::fs::FileType::CharacterDevice) if sys::isatty(fd.as_raw_fd()) => {
            match reopen_nonblocking(n, rustix::fs::OFlags::NOCTTY) {
                Ok(fd) => (fd, Kind::NonBlocking, None),
                Err(e) => {
                    let note = format!("fd {n}: cannot reopen the terminal non-blocking ({e}); writes may block");
                    (dup()?, Kind::Blocking, Some(note))
                }
            }
        }
        _ => (dup()?, Kind::Blocking, None),
    })
}

/// A `Writer` on fd `n` (for the log's stderr) and a note on what could not be done; `None`
/// when `n` is not open.
pub fn writer_for(n: RawFd) -> Option<(Writer, Option<String>)> {
    let fd = sys::take_inherited_fd(n)?;
    let made = nonblocking(n, fd.as_fd());
    // The caller's number stays open and the caller's: this borrowed it.
    let _ = fd.into_raw_fd();
    made.ok()
}

/// (rustix's `open` is the system call itself: musl's `open` follows `O_CLOEXEC` with an
/// `fcntl(F_SETFD)` of its own.)
fn reopen_nonblocking(n: RawFd, extra: rustix::fs::OFlags) -> io::Result<OwnedFd> {
    use rustix::fs::OFlags;
    let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | extra;
    Ok(rustix::fs::open(format!("/proc/self/fd/{n}"), flags, rustix::fs::Mode::empty())?)
}
