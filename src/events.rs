//! events: the JSON Lines stream on `--events-fd`. Owns the fd (made close-on-exec, or
//! reopened as guardian's own non-blocking description for pipes), buffers lines the reader
//! has not taken yet, and never blocks or stops the teardown: a full pipe is flushed from the
//! poll loop (POLLOUT), a broken or closed one is dropped.
//!
//! A pipe that cannot be reopened (it belongs to another user, or /proc is missing) is
//! written with `RWF_NOWAIT`, and where the kernel lacks that for pipes, only after poll()
//! reports room and at most `PIPE_BUF` bytes at a time (which then cannot block while
//! guardian is the pipe's only writer). Plain blocking writes remain only for regular files
//! and terminals.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use serde_json::{Map, Value};

use crate::sys;

/// Lines beyond this many buffered bytes are dropped (the reader stopped reading).
const MAX_BUFFERED: usize = 8 << 20;

enum Kind {
    /// A pipe reopened through /proc as our own O_NONBLOCK description.
    NonBlockingPipe,
    /// A pipe shared with the caller: pwritev2(RWF_NOWAIT).
    NowaitPipe,
    /// A pipe, on a kernel without RWF_NOWAIT for pipes: poll, then at most PIPE_BUF bytes.
    PolledPipe,
    /// A socket (Node's 'pipe' stdio): send(MSG_DONTWAIT | MSG_NOSIGNAL).
    Socket,
    /// A regular file, terminal or a pipe we could not reopen: plain blocking writes.
    Blocking,
}

pub struct Events {
    out: Option<(OwnedFd, Kind)>,
    buf: Vec<u8>,
    dropped: u64,
}

impl Events {
    pub fn disabled() -> Events {
        Events { out: None, buf: Vec::new(), dropped: 0 }
    }

    /// Takes over the caller's fd `n`. Fails with a message when it is not open.
    pub fn open(n: RawFd) -> Result<Events, String> {
        let inherited = sys::take_inherited_fd(n).ok_or_else(|| {
            format!(
                "--events-fd {n}: file descriptor {n} is not open; pass one from the caller (e.g. `{n}>events.jsonl`)"
            )
        })?;
        let dup = |fd: &OwnedFd| {
            rustix::io::fcntl_dupfd_cloexec(fd, 3)
                .map_err(|e| format!("--events-fd {n}: fcntl(F_DUPFD_CLOEXEC) failed: {e}"))
        };
        let meta = std::fs::metadata(format!("/proc/self/fd/{n}"));
        let (fd, kind) = match meta.map(|m| m.file_type()) {
            Ok(t) if t.is_fifo() => match reopen_nonblocking(n) {
                Ok(fd) => (fd, Kind::NonBlockingPipe),
                Err(e) => {
                    crate::debug!("events fd {n}: cannot reopen the pipe non-blocking ({e}); writing with RWF_NOWAIT");
                    (dup(&inherited)?, Kind::NowaitPipe)
                }
            },
            Ok(t) if t.is_socket() => (dup(&inherited)?, Kind::Socket),
            _ => (dup(&inherited)?, Kind::Blocking),
        };
        if n > 2 {
            // guardian writes through its own close-on-exec copy; the caller's number is
            // closed so the provider cannot inherit it.
            drop(inherited);
        } else {
            // 0..=2 are also the provider's stdio: leave them open.
            let _ = inherited.into_raw_fd();
        }
        Ok(Events { out: Some((fd, kind)), buf: Vec::new(), dropped: 0 })
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
            let Some((fd, kind)) = &self.out else { return };
            let res = match kind {
                Kind::Socket => sys::send_nonblocking(fd.as_fd(), &self.buf),
                Kind::NowaitPipe => sys::write_nowait(fd.as_fd(), &self.buf),
                Kind::PolledPipe => write_polled(fd, &self.buf),
                _ => rustix::io::write(fd, &self.buf).map_err(io::Error::from),
            };
            match res {
                Err(e) if matches!(kind, Kind::NowaitPipe) && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    crate::debug!("events fd: RWF_NOWAIT not supported for pipes; writing after poll()");
                    if let Some((_, kind)) = self.out.as_mut() {
                        *kind = Kind::PolledPipe;
                    }
                }
                Ok(n) => {
                    self.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
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
            Some((fd, _)) if !self.buf.is_empty() => Some(fd.as_fd()),
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

fn reopen_nonblocking(n: RawFd) -> io::Result<OwnedFd> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{n}"))?;
    Ok(OwnedFd::from(file))
}
