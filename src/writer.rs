//! writer: writes that never block guardian, for the events fd and the log's stderr. On a
//! kernel that says 6.4 or later, a pipe is written through guardian's own close-on-exec dup
//! with `RWF_NOWAIT`, which never blocks whatever the shared description's flags, and needs
//! nothing opened at start-up. Where that is refused (a named FIFO; a seccomp filter), the
//! first write reopens the pipe through `/proc/self/fd/N` as guardian's own `O_NONBLOCK`
//! description (the caller's keeps its flags); on older kernels, and on gVisor (which says
//! 4.4 and ignores the flag), the reopen comes first. Where the reopen is refused too (another
//! user's pipe, no /proc), the pipe is written only after poll() reports room and at most
//! `PIPE_BUF` bytes at a time (which then cannot block while guardian is the pipe's only
//! writer). Refusals are handed to the owner to report (`Writer::take_fallbacks`). A terminal
//! is reopened at once; plain blocking writes remain only for regular files and terminals
//! that cannot be reopened. Below both `events` and `log`, so neither imports the other for it.
//!
//! Lines never tear on a pipe or FIFO ([`Writer::write_lines`]): the kernel writes at most
//! `PIPE_BUF` bytes to a pipe at once, whole or not at all (also non-blocking), and nothing
//! longer; so a backlog goes out as whole lines in pieces of at most `PIPE_BUF`, and a second
//! writer on the same pipe (two guardians sharing one FIFO) can only come between lines.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};

use rustix::event::{PollFd, PollFlags};

use crate::sys;

enum Kind {
    /// A pipe shared with the caller: pwritev2(RWF_NOWAIT) on guardian's dup.
    NowaitPipe,
    /// A pipe (whose kernel refused RWF_NOWAIT) or terminal reopened through /proc as our own
    /// O_NONBLOCK description.
    NonBlocking,
    /// A pipe that takes neither: poll, then at most PIPE_BUF bytes.
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
    /// A pipe or FIFO: lines go out whole, at most `PIPE_BUF` bytes per write.
    pipe: bool,
    /// Interfaces refused at a write, for the owner to report (a write cannot log itself: the
    /// log writes through a Writer too).
    refused: Vec<Fallback>,
}

/// An interface a write found refused, and what the writer does instead: for the owner's
/// `fallback` event and log line (a fallback is never silent).
pub struct Fallback {
    /// The refused interface: `pwritev2` (`RWF_NOWAIT`), or `open` (the /proc reopen).
    pub what: &'static str,
    pub err: io::Error,
    pub instead: &'static str,
}

impl Writer {
    /// One write of as much of `buf` as fits now; `WouldBlock` when nothing does. `Ok(0)` (for
    /// a non-empty `buf`) when nothing was written because the way of writing changed: the
    /// owner reports [`Writer::take_fallbacks`] and writes again.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let res = match self.kind {
                Kind::Socket => sys::send_nonblocking(self.fd.as_fd(), buf),
                Kind::NowaitPipe => sys::write_nowait(self.fd.as_fd(), buf),
                Kind::PolledPipe => write_polled(&self.fd, buf),
                Kind::NonBlocking | Kind::Blocking => rustix::io::write(&self.fd, buf).map_err(io::Error::from),
            };
            match res {
                Err(e) if matches!(self.kind, Kind::NowaitPipe) && nowait_refused(&e) => {
                    // Nothing written: the owner reports the refusal (ahead of this line) and
                    // writes again, the new way.
                    self.without_nowait(e);
                    return Ok(0);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// One write of the longest run of whole lines at the start of `buf` that is at most
    /// `PIPE_BUF` bytes on a pipe (anything on other files: a regular file's append is one
    /// write): atomic on a pipe, so another writer's lines never land inside one of ours. A
    /// single line longer than `PIPE_BUF` cannot be atomic; it goes in `PIPE_BUF` pieces.
    /// The result is [`Writer::write`]'s.
    pub fn write_lines(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.pipe { self.write(atomic_lines(buf)) } else { self.write(buf) }
    }

    /// `RWF_NOWAIT` was refused on this pipe (`EOPNOTSUPP` from the kernel; `ENOSYS` or
    /// `EPERM` from a seccomp filter, see [`nowait_refused`]): guardian's own `O_NONBLOCK`
    /// description of it through /proc, else writes after poll(). The kernel's `EOPNOTSUPP`
    /// (a named FIFO) followed by a reopen is the designed path, as safe, and not reported; a
    /// filter's refusal and the poll() writes are.
    fn without_nowait(&mut self, err: io::Error) {
        match reopen_nonblocking(self.fd.as_raw_fd(), rustix::fs::OFlags::empty()) {
            Ok(fd) => {
                self.fd = fd;
                self.kind = Kind::NonBlocking;
                if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    self.refused.push(Fallback { what: "pwritev2", err, instead: REOPENED });
                }
            }
            Err(reopen) => {
                self.kind = Kind::PolledPipe;
                self.refused.push(Fallback { what: "pwritev2", err, instead: POLLED });
                self.refused.push(Fallback { what: "open", err: reopen, instead: POLLED });
            }
        }
    }

    /// Whether writes found an interface refused that the owner has not taken yet.
    pub fn has_fallbacks(&self) -> bool {
        !self.refused.is_empty()
    }

    /// The interfaces writes found refused since the last call, for the owner to report.
    pub fn take_fallbacks(&mut self) -> Vec<Fallback> {
        std::mem::take(&mut self.refused)
    }

    /// A writer over a file guardian opened itself (`--events-file`): non-blocking for a FIFO
    /// or character device it opened `O_NONBLOCK`, plain writes for a regular file; `pipe`:
    /// it is a FIFO (whole lines, [`Writer::write_lines`]).
    pub fn opened(fd: OwnedFd, nonblocking: bool, pipe: bool) -> Writer {
        let kind = if nonblocking { Kind::NonBlocking } else { Kind::Blocking };
        Writer { fd, kind, pipe, refused: Vec::new() }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The longest start of `buf` that ends a line and is at most `PIPE_BUF` bytes; when even
/// the first line is longer, its first `PIPE_BUF` bytes.
fn atomic_lines(buf: &[u8]) -> &[u8] {
    if buf.len() <= libc::PIPE_BUF {
        return buf;
    }
    let window = &buf[..libc::PIPE_BUF];
    match window.iter().rposition(|&b| b == b'\n') {
        Some(end) => &buf[..=end],
        None => window,
    }
}

const REOPENED: &str = "its own non-blocking description of the pipe, reopened through /proc/self/fd";
const POLLED: &str = "writes after poll(), at most PIPE_BUF bytes at a time";

/// Whether a `pwritev2(RWF_NOWAIT)` error means the interface is refused rather than the
/// write: the kernel's `EOPNOTSUPP` (this pipe, this kernel) or `EINVAL`, a seccomp filter's
/// `ENOSYS`, `EPERM` or `EACCES`. Anything else (a full pipe, a gone reader, `ENOMEM`) is the
/// write's own result.
fn nowait_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS | libc::EPERM | libc::EACCES))
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

/// guardian's own write side of the caller's fd `n`: on a kernel that says 6.4 or later, a
/// pipe is guardian's close-on-exec dup written with `RWF_NOWAIT` (reopened at the first write
/// if that is refused, see [`Writer::take_fallbacks`]); on older kernels a pipe, and always a
/// terminal, is reopened through `/proc/self/fd/N` as a new `O_NONBLOCK` description (the
/// caller's description keeps its flags), else written after poll() (a pipe) or blocking (a
/// terminal). Sockets use `MSG_DONTWAIT`; regular files block (briefly). The note says what
/// could not be done, for the caller to log (the log itself may be what is set up).
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
    let pipe = file_type == Some(rustix::fs::FileType::Fifo);
    let (fd, kind, note, refused) = nonblocking_parts(n, fd, file_type)?;
    Ok((Writer { fd, kind, pipe, refused: refused.into_iter().collect() }, note))
}

/// The fd, how it is written, a note for the log, and a refused interface to report.
type Parts = (OwnedFd, Kind, Option<String>, Option<Fallback>);

fn nonblocking_parts(n: RawFd, fd: BorrowedFd<'_>, file_type: Option<rustix::fs::FileType>) -> Result<Parts, String> {
    let dup =
        || rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| format!("fcntl(F_DUPFD_CLOEXEC) on fd {n} failed: {e}"));
    let (fd, kind, note) = match file_type {
        // On a kernel that takes RWF_NOWAIT on pipes, nothing opened at start-up, where every
        // system call delays the provider (issue 20.5: the /proc reopen cost ~4 us, ~10 us
        // cold); where it is refused the first write reopens the pipe. Elsewhere the reopen
        // comes first: a kernel before 6.4 would refuse RWF_NOWAIT anyway, and gVisor, which
        // says 4.4, ignores the flag and would block.
        Some(rustix::fs::FileType::Fifo) if sys::kernel_at_least(6, 4) => (dup()?, Kind::NowaitPipe, None),
        Some(rustix::fs::FileType::Fifo) => match reopen_nonblocking(n, rustix::fs::OFlags::empty()) {
            Ok(fd) => (fd, Kind::NonBlocking, None),
            Err(e) => {
                return Ok((dup()?, Kind::PolledPipe, None, Some(Fallback { what: "open", err: e, instead: POLLED })));
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
    };
    Ok((fd, kind, note, None))
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    fn fill(out: &mut Writer) {
        loop {
            match out.write(&[b'x'; 4096]) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => panic!("filling: {e}"),
            }
        }
    }

    fn nonblocking_flag(fd: BorrowedFd<'_>) -> bool {
        rustix::fs::fcntl_getfl(fd).expect("F_GETFL").contains(rustix::fs::OFlags::NONBLOCK)
    }

    #[test]
    fn a_backlog_goes_to_a_pipe_as_whole_lines_of_at_most_pipe_buf() {
        let line = |n: usize| {
            let mut l = vec![b'x'; n - 1];
            l.push(b'\n');
            l
        };
        let short: Vec<u8> = (0..3).flat_map(|_| line(100)).collect();
        assert_eq!(atomic_lines(&short), &short[..], "a small backlog goes in one write");
        let many: Vec<u8> = (0..100).flat_map(|_| line(100)).collect();
        let piece = atomic_lines(&many);
        assert_eq!(piece.len(), 100 * (libc::PIPE_BUF / 100), "as many whole lines as fit");
        assert_eq!(piece.last(), Some(&b'\n'));
        let long: Vec<u8> = line(3 * libc::PIPE_BUF).into_iter().chain(line(10)).collect();
        assert_eq!(atomic_lines(&long).len(), libc::PIPE_BUF, "a line longer than PIPE_BUF goes in pieces");
        let exact = line(libc::PIPE_BUF);
        assert_eq!(atomic_lines(&exact).len(), libc::PIPE_BUF);
    }

    /// An anonymous pipe (Linux 6.4+) is written through guardian's dup with RWF_NOWAIT:
    /// nothing reopened, the caller's description stays blocking, and a full pipe does not
    /// block the write.
    #[test]
    fn a_pipe_is_written_with_rwf_nowait_on_a_dup() {
        let (_r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let (mut out, note) = nonblocking(w.as_raw_fd(), w.as_fd()).expect("writer");
        assert!(note.is_none());
        fill(&mut out);
        // Kernels before 6.4 refuse RWF_NOWAIT on pipes too: then the pipe was reopened.
        let (_pr, pw) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        if sys::write_nowait(pw.as_fd(), b"x").is_ok() {
            assert!(matches!(out.kind, Kind::NowaitPipe), "RWF_NOWAIT taken: nothing reopened");
        } else {
            assert!(matches!(out.kind, Kind::NonBlocking));
        }
        assert!(!nonblocking_flag(w.as_fd()), "the caller's description was made non-blocking");
        assert!(out.take_fallbacks().is_empty());
    }

    /// A named FIFO, which the kernel refuses RWF_NOWAIT for: the first write reopens it
    /// through /proc as guardian's own O_NONBLOCK description, and a full FIFO does not block.
    #[test]
    fn a_pipe_refusing_rwf_nowait_is_reopened_non_blocking_at_the_first_write() {
        use rustix::fs::{Mode, OFlags};
        let dir = std::env::temp_dir().join(format!("guardian-writer-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("fifo");
        let _ = std::fs::remove_file(&path);
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .expect("mkfifo");
        let _r = rustix::fs::open(&path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
            .expect("open the read end");
        let w = rustix::fs::open(&path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).expect("open the write end");
        let _ = std::fs::remove_dir_all(&dir);
        let (mut out, _) = nonblocking(w.as_raw_fd(), w.as_fd()).expect("writer");
        assert!(matches!(out.kind, Kind::NowaitPipe), "nothing is reopened before the first write");
        fill(&mut out);
        assert!(matches!(out.kind, Kind::NonBlocking), "RWF_NOWAIT refused: reopened");
        assert!(nonblocking_flag(out.fd()), "guardian's own description is non-blocking");
        assert!(!nonblocking_flag(w.as_fd()), "the caller's description was made non-blocking");
        assert!(out.take_fallbacks().is_empty(), "the kernel's EOPNOTSUPP and a reopen: the designed path");
    }
}
