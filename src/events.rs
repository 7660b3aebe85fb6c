//! events: the JSON Lines stream on `--events-fd`. Checks that the fd can carry events (open
//! for writing, not stdin, not a directory), owns it (guardian's own close-on-exec copy,
//! written so that it never blocks: `RWF_NOWAIT` on a pipe, see `writer.rs`), buffers lines the reader
//! has not taken yet, and never blocks or stops the teardown: a full pipe is flushed from the
//! poll loop (POLLOUT), a broken or closed one is dropped. The writes go through a
//! [`Writer`] (`writer.rs`), as the log's stderr does.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, RawFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use serde_json::{Map, Value};

use crate::sys;
use crate::writer::{self, Writer};

/// Lines beyond this many buffered bytes are dropped (the reader stopped reading).
const MAX_BUFFERED: usize = 8 << 20;

pub struct Events {
    out: Option<Writer>,
    buf: Vec<u8>,
    dropped: u64,
    /// The reader has part of the buffer's first line (a partial write).
    mid_line: bool,
}

impl Events {
    pub fn disabled() -> Events {
        Events { out: None, buf: Vec::new(), dropped: 0, mid_line: false }
    }

    /// Events written through `out`.
    pub fn over(out: Writer) -> Events {
        Events { out: Some(out), buf: Vec::new(), dropped: 0, mid_line: false }
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
        let file_type = match check_writable(n, inherited.as_fd()) {
            Ok(file_type) => file_type,
            Err(why) => {
                if n <= 2 {
                    // Still the caller's stdio (stderr carries the error message): leave it open.
                    let _ = inherited.into_raw_fd();
                }
                return Err(format!(
                    "--events-fd {n}: file descriptor {n} {why}; pass a dedicated fd open for writing (e.g. `3>events.jsonl`)"
                ));
            }
        };
        let (out, note) = writer::nonblocking_of_type(n, inherited.as_fd(), Some(file_type))
            .map_err(|e| format!("--events-fd {n}: {e}"))?;
        if n > 2 {
            // guardian writes through its own close-on-exec copy; the caller's number is
            // closed so the provider cannot inherit it.
            drop(inherited);
        } else {
            // 0..=2 are also the provider's stdio: leave them open.
            let _ = inherited.into_raw_fd();
        }
        Ok((Events::over(out), note.map(|n| format!("events {n}"))))
    }

    /// Appends one event line and tries to write it.
    pub fn emit(&mut self, event: Event) {
        if self.out.is_none() {
            return;
        }
        self.push_line(&event.to_line(sys::monotonic()));
    }

    /// A line that is not a product event: the test hooks' `test-pause` (`test_hooks.rs`).
    #[cfg(feature = "test-hooks")]
    pub fn emit_test_line(&mut self, line: &str) {
        if self.out.is_some() {
            self.push_line(line);
        }
    }

    fn push_line(&mut self, line: &str) {
        if self.buf.len() + line.len() > MAX_BUFFERED {
            self.dropped += 1;
            return;
        }
        self.buf.extend_from_slice(line.as_bytes());
        self.flush();
    }

    /// Reports a refused interface and what guardian does instead: a log line and a
    /// `fallback` event (a fallback is never silent).
    pub fn fallback(&mut self, what: &str, err: &io::Error, instead: &str) {
        let line = fallback_line(what, err, instead);
        if self.out.is_some() {
            self.push_line(&line);
        }
    }

    /// Writes as much of the buffer as the reader takes without blocking.
    pub fn flush(&mut self) {
        loop {
            self.report_refused();
            let Some(out) = &mut self.out else { return };
            if self.buf.is_empty() {
                return;
            }
            match out.write(&self.buf) {
                // The writer changed how it writes (RWF_NOWAIT refused): what it reports goes
                // ahead of the line it did not write, then that line is written again.
                Ok(0) if out.has_fallbacks() => {}
                Ok(0) => return,
                Ok(n) => {
                    self.mid_line = self.buf[n - 1] != b'\n';
                    self.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.report_refused();
                    crate::log::debug!("events fd: write failed ({e}); no further events are written");
                    self.out = None;
                    self.buf.clear();
                }
            }
        }
    }

    /// The interfaces the writer found refused, as `fallback` events ahead of the lines not
    /// written yet (so `released` or `error` stays the last line), and log lines.
    fn report_refused(&mut self) {
        let Some(out) = &mut self.out else { return };
        let refused = out.take_fallbacks();
        if refused.is_empty() {
            return;
        }
        let lines: String =
            refused.iter().map(|f| fallback_line(f.what, &f.err, &format!("{} (events fd)", f.instead))).collect();
        // (a refusal comes at a writer's first write: never behind part of a line)
        let at =
            if self.mid_line { self.buf.iter().position(|&b| b == b'\n').map_or(self.buf.len(), |i| i + 1) } else { 0 };
        self.buf.splice(at..at, lines.into_bytes());
    }

    /// The fd's number, for the sentinel, which closes its fd table's copy.
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.out.as_ref().map(|out| std::os::fd::AsRawFd::as_raw_fd(&out.fd()))
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
                crate::log::debug!("events fd: reader too slow; {} bytes not delivered", self.buf.len());
                break;
            }
            let left = end - now;
            let ts = rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
            let _ = rustix::event::poll(&mut fds, Some(&ts));
            self.flush();
        }
        if self.dropped > 0 {
            crate::log::debug!("events fd: {} lines dropped while the reader was not reading", self.dropped);
        }
    }
}

/// A refused interface's log line (written now) and `fallback` event line (returned).
fn fallback_line(what: &str, err: &io::Error, instead: &str) -> String {
    crate::log::fallback(what, err, instead);
    let errno = crate::errno::name(err.raw_os_error().unwrap_or(0));
    Event::Fallback { what: what.into(), errno: errno.into(), detail: instead.into() }.to_line(sys::monotonic())
}

/// Why fd `n` cannot carry events, if it cannot: the provider's standard input, a directory,
/// an `O_PATH` handle, or a description not open for writing (the read end of a pipe, a file
/// opened with `<`). Checked before guardian starts anything. Its file type, for the writer.
fn check_writable(n: RawFd, fd: BorrowedFd<'_>) -> Result<rustix::fs::FileType, String> {
    if n == 0 {
        return Err("is standard input (the provider would read the events, and never see end of file)".into());
    }
    let st = rustix::fs::fstat(fd).map_err(|e| format!("cannot be inspected (fstat: {e})"))?;
    let file_type = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if file_type == rustix::fs::FileType::Directory {
        return Err("is a directory".into());
    }
    let flags = rustix::fs::fcntl_getfl(fd).map_err(|e| format!("cannot be inspected (fcntl F_GETFL: {e})"))?;
    if flags.contains(rustix::fs::OFlags::PATH) {
        return Err("is an O_PATH handle (no writes possible)".into());
    }
    if flags.bits() & (libc::O_ACCMODE as u32) == libc::O_RDONLY as u32 {
        return Err("is open for reading only (the read end of a pipe, or a file opened with `<`)".into());
    }
    Ok(file_type)
}

// ---- the schema: every line guardian writes is one of these ----

/// One event of the `--events-fd` stream: one variant per row of docs/contract.md's events
/// table. [`Event::to_line`] is the one serializer: it
/// writes `event`, `ts`, then the fields in the order listed here. A field is always present,
/// `null` when it has no value (`Option` documented "or null"), or absent when it has none
/// (documented as "for target ..." or "when ..."). The names, order, types and presence are
/// defined once in `treeguardian_spec::events::EVENTS` (crates/spec/src/events.rs, which also
/// writes spec/events.json): `schema_test` checks this serializer against that table, the Rust
/// client's parser against these lines, and the contract, the man page and
/// `packaging/npm/index.d.ts` against it.
#[derive(Clone, Debug)]
pub enum Event {
    /// An interface was refused and guardian does without it.
    Fallback { what: String, errno: String, detail: String },
    /// The provider started.
    Spawned { pid: i32, pgid: i32, guardian_pid: i32, mode: &'static str, cgroup: Option<String> },
    /// A teardown started (or a kill-now request ended its grace).
    Stopping { reason: &'static str, grace_ms: u64 },
    /// A signal was delivered.
    Signal(Signal),
    /// The provider stopped (job control).
    Stopped { pid: i32, signal: String },
    /// The provider was continued.
    Continued { pid: i32 },
    /// The provider was reaped.
    Exit { pid: i32, code: Option<i32>, signal: Option<String>, core_dumped: bool },
    /// The tree is gone; the last line.
    Released(Released),
    /// guardian failed (125/126/127); the last line. `abandoned` for a teardown given up.
    Error { status: i32, message: String, abandoned: Option<Abandoned> },
}

/// The `signal` event: `pid` for targets `provider` and `group`, `cgroup` for target
/// `cgroup`, `pids` for targets `descendants`, `cgroup` and a counted `namespace`.
#[derive(Clone, Debug)]
pub struct Signal {
    pub signal: String,
    pub target: &'static str,
    pub pid: Option<i32>,
    pub cgroup: Option<String>,
    pub pids: Option<Vec<i32>>,
    pub reason: String,
}

/// The `released` event.
#[derive(Clone, Debug, Default)]
pub struct Released {
    pub status: i32,
    /// `None` where guardian cannot count them (`kill(-1)` as PID 1, blind mode).
    pub signalled: Option<u64>,
    pub killed: u64,
    pub reaped: u64,
    pub teardown_ms: f64,
    pub cgroup: Option<String>,
    pub oom_kill: Option<u64>,
    /// The provider's resource usage (`wait4`): its own and its reaped children's.
    pub provider: Usage,
    /// The whole reaped tree's (`getrusage(RUSAGE_CHILDREN)` after the last reap).
    pub tree: Usage,
}

pub use crate::sys::Usage;

/// What an abandoned teardown leaves: the `error` event's extra fields.
#[derive(Clone, Debug)]
pub struct Abandoned {
    pub unkillable: Vec<i32>,
    pub remaining: Vec<i32>,
}

/// How a field appears on the wire: the spec crate's, where the event table lives.
pub use treeguardian_spec::events::Presence;

/// Where [`Event::fields`] writes: the JSON object, or (tests) the schema.
trait Sink {
    fn field(&mut self, name: &'static str, presence: Presence, value: Option<Value>);

    fn put(&mut self, name: &'static str, value: impl Into<Value>) {
        self.field(name, Presence::Always, Some(value.into()));
    }
    fn nullable<T: Into<Value>>(&mut self, name: &'static str, value: Option<T>) {
        self.field(name, Presence::Nullable, value.map(Into::into));
    }
    fn optional<T: Into<Value>>(&mut self, name: &'static str, value: Option<T>) {
        self.field(name, Presence::Optional, value.map(Into::into));
    }
}

impl Sink for Map<String, Value> {
    fn field(&mut self, name: &'static str, presence: Presence, value: Option<Value>) {
        match value {
            Some(v) => {
                self.insert(name.into(), v);
            }
            None if presence != Presence::Optional => {
                self.insert(name.into(), Value::Null);
            }
            None => {}
        }
    }
}

/// Milliseconds as a float with microseconds (`teardown_ms`, the CPU times).
fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

impl Event {
    /// The `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Fallback { .. } => "fallback",
            Event::Spawned { .. } => "spawned",
            Event::Stopping { .. } => "stopping",
            Event::Signal(_) => "signal",
            Event::Stopped { .. } => "stopped",
            Event::Continued { .. } => "continued",
            Event::Exit { .. } => "exit",
            Event::Released(_) => "released",
            Event::Error { .. } => "error",
        }
    }

    /// The fields after `event` and `ts`, in wire order.
    fn fields(&self, out: &mut impl Sink) {
        match self {
            Event::Fallback { what, errno, detail } => {
                out.put("what", what.as_str());
                out.put("errno", errno.as_str());
                out.put("detail", detail.as_str());
            }
            Event::Spawned { pid, pgid, guardian_pid, mode, cgroup } => {
                out.put("pid", *pid);
                out.put("pgid", *pgid);
                out.put("guardian_pid", *guardian_pid);
                out.put("mode", *mode);
                out.nullable("cgroup", cgroup.as_deref());
                // The package version (interface 3): what drivers check, at no extra start.
                out.put("version", env!("CARGO_PKG_VERSION"));
            }
            Event::Stopping { reason, grace_ms } => {
                out.put("reason", *reason);
                out.put("grace_ms", *grace_ms);
            }
            Event::Signal(s) => {
                out.put("signal", s.signal.as_str());
                out.put("target", s.target);
                out.optional("pid", s.pid);
                out.optional("cgroup", s.cgroup.as_deref());
                out.optional("pids", s.pids.as_deref());
                out.put("reason", s.reason.as_str());
            }
            Event::Stopped { pid, signal } => {
                out.put("pid", *pid);
                out.put("signal", signal.as_str());
            }
            Event::Continued { pid } => out.put("pid", *pid),
            Event::Exit { pid, code, signal, core_dumped } => {
                out.put("pid", *pid);
                out.nullable("code", *code);
                out.nullable("signal", signal.as_deref());
                out.put("core_dumped", *core_dumped);
            }
            Event::Released(r) => {
                out.put("status", r.status);
                out.nullable("signalled", r.signalled);
                out.put("killed", r.killed);
                out.put("reaped", r.reaped);
                out.put("teardown_ms", r.teardown_ms);
                out.nullable("cgroup", r.cgroup.as_deref());
                out.nullable("oom_kill", r.oom_kill);
                out.put("provider_user_ms", millis(r.provider.user));
                out.put("provider_system_ms", millis(r.provider.system));
                out.put("provider_max_rss_kb", r.provider.max_rss_kb);
                out.put("tree_user_ms", millis(r.tree.user));
                out.put("tree_system_ms", millis(r.tree.system));
                out.put("tree_max_rss_kb", r.tree.max_rss_kb);
            }
            Event::Error { status, message, abandoned } => {
                out.put("status", *status);
                out.put("message", message.as_str());
                out.optional("unkillable", abandoned.as_ref().map(|a| a.unkillable.as_slice()));
                out.optional("remaining", abandoned.as_ref().map(|a| a.remaining.as_slice()));
            }
        }
    }

    /// The JSON line (with its newline) for this event at monotonic time `ts`.
    pub fn to_line(&self, ts: Duration) -> String {
        let mut obj = Map::new();
        obj.insert("event".into(), Value::from(self.name()));
        obj.insert("ts".into(), Value::from((ts.as_micros() as f64) / 1e6));
        self.fields(&mut obj);
        let mut line = Value::Object(obj).to_string();
        line.push('\n');
        line
    }
}

mod file;
pub use file::open_file;

#[cfg(test)]
mod schema_test;
