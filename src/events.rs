//! events: the JSON Lines stream on `--events-fd`. Checks that the fd can carry events (open
//! for writing, not stdin, not a directory), owns it (made close-on-exec, or reopened as
//! guardian's own non-blocking description for pipes and terminals), buffers lines the reader
//! has not taken yet, and never blocks or stops the teardown: a full pipe is flushed from the
//! poll loop (POLLOUT), a broken or closed one is dropped. The same non-blocking [`Writer`]
//! carries the log's stderr (`log::never_block`).
//!
//! A pipe that cannot be reopened (it belongs to another user, or /proc is missing) is
//! written with `RWF_NOWAIT`, and where the kernel lacks that for pipes, only after poll()
//! reports room and at most `PIPE_BUF` bytes at a time (which then cannot block while
//! guardian is the pipe's only writer). Plain blocking writes remain only for regular files
//! and terminals that cannot be reopened.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use serde_json::{Map, Value};

use crate::sys;

/// Lines beyond this many buffered bytes are dropped (the reader stopped reading).
const MAX_BUFFERED: usize = 8 << 20;

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

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

pub struct Events {
    out: Option<Writer>,
    buf: Vec<u8>,
    dropped: u64,
}

impl Events {
    pub fn disabled() -> Events {
        Events { out: None, buf: Vec::new(), dropped: 0 }
    }

    /// Takes over the caller's fd `n`. Fails with a message when it is not open, or not a
    /// place events can go (see [`check_writable`]).
    /// Returns the events and a note on how the fd is written, for the log once stderr
    /// cannot block (`log::never_block` comes after this, so nothing may be logged here: a full
    /// stderr pipe would stop guardian before its teardown).
    pub fn open(n: RawFd) -> Result<(Events, Option<String>), String> {
        let inherited = sys::take_inherited_fd(n).ok_or_else(|| {
            format!(
                "--events-fd {n}: file descriptor {n} is not open; pass one from the caller (e.g. `{n}>events.jsonl`)"
            )
        })?;
        if let Err(why) = check_writable(n, inherited.as_fd()) {
            if n <= 2 {
                // Still the caller's stdio (stderr carries the error message): leave it open.
                let _ = inherited.into_raw_fd();
            }
            return Err(format!(
                "--events-fd {n}: file descriptor {n} {why}; pass a dedicated fd open for writing (e.g. `3>events.jsonl`)"
            ));
        }
        let (fd, kind, note) = nonblocking_writer(n, inherited.as_fd()).map_err(|e| format!("--events-fd {n}: {e}"))?;
        if n > 2 {
            // guardian writes through its own close-on-exec copy; the caller's number is
            // closed so the provider cannot inherit it.
            drop(inherited);
        } else {
            // 0..=2 are also the provider's stdio: leave them open.
            let _ = inherited.into_raw_fd();
        }
        Ok((Events { out: Some(Writer { fd, kind }), buf: Vec::new(), dropped: 0 }, note.map(|n| format!("events {n}"))))
    }

    /// Appends one event line and tries to write it.
    pub fn emit(&mut self, event: &str, fields: Value) {
        if self.out.is_none() {
            return;
        }
        let mut obj = Map::new();
        obj.insert("event".into(), Value::from(event));
        let ts = sys::monotonic();
        obj.insert("ts".into(), Value::from((ts.as_micros() as f64) / 1e6));
        if let Value::Object(extra) = fields {
            obj.extend(extra);
        }
        let mut line = Value::Object(obj).to_string();
        line.push('\n');
        if self.buf.len() + line.len() > MAX_BUFFERED {
            self.dropped += 1;
            return;
        }
        self.buf.extend_from_slice(line.as_bytes());
        self.flush();
    }

    /// Writes as much of the buffer as the reader takes without blocking.
    pub fn flush(&mut self) {
        while !self.buf.is_empty() {
            let Some(out) = &mut self.out else { return };
            match out.write(&self.buf) {
                Ok(n) => {
                    self.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    crate::debug!("events fd: write failed ({e}); no further events are written");
                    self.out = None;
                    self.buf.clear();
                }
            }
        }
    }

    /// The fd to poll for POLLOUT while lines are waiting.
    pub fn pending_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.out {
            Some(out) if !self.buf.is_empty() => Some(out.fd()),
            _ => None,
        }
    }

    /// Flushes what is left, waiting at most `limit` for a slow reader, then closes the fd.
    pub fn close(mut self, limit: Duration) {
        let end = sys::monotonic() + limit;
        self.flush();
        while let Some(fd) = self.pending_fd() {
            let now = sys::monotonic();
            if now >= end {
                crate::debug!("events fd: reader too slow; {} bytes not delivered", self.buf.len());
                break;
            }
            let left = end - now;
            let ts = rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
            let _ = rustix::event::poll(&mut fds, Some(&ts));
            self.flush();
        }
        if self.dropped > 0 {
            crate::debug!("events fd: {} lines dropped while the reader was not reading", self.dropped);
        }
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

/// Why fd `n` cannot carry events, if it cannot: the provider's standard input, a directory,
/// an `O_PATH` handle, or a description not open for writing (the read end of a pipe, a file
/// opened with `<`). Checked before guardian starts anything.
fn check_writable(n: RawFd, fd: BorrowedFd<'_>) -> Result<(), String> {
    if n == 0 {
        return Err("is standard input (the provider would read the events, and never see end of file)".into());
    }
    let st = rustix::fs::fstat(fd).map_err(|e| format!("cannot be inspected (fstat: {e})"))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        return Err("is a directory".into());
    }
    let flags = rustix::fs::fcntl_getfl(fd).map_err(|e| format!("cannot be inspected (fcntl F_GETFL: {e})"))?;
    if flags.contains(rustix::fs::OFlags::PATH) {
        return Err("is an O_PATH handle (no writes possible)".into());
    }
    if flags.bits() & (libc::O_ACCMODE as u32) == libc::O_RDONLY as u32 {
        return Err("is open for reading only (the read end of a pipe, or a file opened with `<`)".into());
    }
    Ok(())
}

/// guardian's own write side of the caller's fd `n`: a pipe or terminal is reopened through
/// `/proc/self/fd/N` as a new `O_NONBLOCK` description (the caller's description keeps its
/// flags); where that is refused, a pipe is written with `RWF_NOWAIT` (or poll + `PIPE_BUF`),
/// a terminal blocking. Sockets use `MSG_DONTWAIT`; regular files block (briefly). The note
/// says what could not be done, for the caller to log (the log itself may be what is set up).
fn nonblocking_writer(n: RawFd, fd: BorrowedFd<'_>) -> Result<(OwnedFd, Kind, Option<String>), String> {
    let dup =
        || rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| format!("fcntl(F_DUPFD_CLOEXEC) on fd {n} failed: {e}"));
    let meta = rustix::fs::fstat(fd).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode));
    Ok(match meta {
        Ok(rustix::fs::FileType::Fifo) => match reopen_nonblocking(n, 0) {
            Ok(fd) => (fd, Kind::NonBlocking, None),
            Err(e) => {
                let note = format!("fd {n}: cannot reopen the pipe non-blocking ({e}); writing with RWF_NOWAIT");
                (dup()?, Kind::NowaitPipe, Some(note))
            }
        },
        Ok(rustix::fs::FileType::Socket) => (dup()?, Kind::Socket, None),
        Ok(rustix::fs::FileType::CharacterDevice) if sys::isatty(fd.as_raw_fd()) => {
            match reopen_nonblocking(n, libc::O_NOCTTY) {
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
    let made = nonblocking_writer(n, fd.as_fd());
    // The caller's number stays open and the caller's: this borrowed it.
    let _ = fd.into_raw_fd();
    made.ok().map(|(fd, kind, note)| (Writer { fd, kind }, note))
}

fn reopen_nonblocking(n: RawFd, extra: i32) -> io::Result<OwnedFd> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | extra)
        .open(format!("/proc/self/fd/{n}"))?;
    Ok(OwnedFd::from(file))
}
