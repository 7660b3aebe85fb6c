//! child: a running guardian and its provider. [`Guard`] owns guardian's process and pidfd
//! and is what makes `Drop` safe: it sends the stop request (SIGTERM through the pidfd, never
//! SIGKILL) and leaves the reaping to a short-lived thread, so it needs no runtime and does
//! not block. [`Tracker`] follows the events for `kill_now` and `wait`; [`State`] is what the
//! blocking and the tokio handle share (the events read, `spawn`'s and `kill_now`'s decisions).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdin, ChildStdout, ExitStatus, Stdio};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::command::Command;
use crate::events::{Event, Released};
use crate::sys::Route;

/// What can go wrong starting or waiting for guardian.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No guardian binary: the message names the explicit path, `$GUARDIAN_BIN` and `$PATH`,
    /// and how to install guardian.
    NotFound(String),
    /// guardian could not be started.
    Spawn {
        guardian: PathBuf,
        source: io::Error,
    },
    /// guardian's `error` event: it could not start the provider (status 125, 126, 127) or
    /// abandoned a teardown.
    Guardian {
        status: i32,
        message: String,
    },
    /// guardian ended without its last event (it was killed).
    Ended(ExitStatus),
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound(m) => f.write_str(m),
            Error::Spawn { guardian, source } => write!(f, "cannot start {}: {source}", guardian.display()),
            Error::Guardian { status, message } => write!(f, "guardian (status {status}): {message}"),
            Error::Ended(status) => write!(f, "guardian ended without releasing the tree ({status})"),
            Error::Io(e) => write!(f, "guardian events: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn { source, .. } | Error::Io(source) => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            Error::NotFound(m) => io::Error::new(io::ErrorKind::NotFound, m),
            other => io::Error::other(other.to_string()),
        }
    }
}

/// guardian's process until it is reaped. Dropping it unreaped sends the stop request.
pub(crate) struct Guard {
    pub(crate) child: Option<std::process::Child>,
    pub(crate) pidfd: Option<OwnedFd>,
    pub(crate) finished: bool,
    /// The events pipe's write end, kept while guardian opens its own through /proc
    /// (`sys::Route::ProcPath`): dropped once the pipe is readable (guardian opened it and
    /// wrote) or guardian exited, so that the stream ends when guardian's end closes.
    pub(crate) hold: Option<OwnedFd>,
    /// `try_wait` saw guardian exit (and reaped it): nothing may be sent to its pid any more.
    pub(crate) gone: bool,
}

impl Guard {
    /// SIGTERM to guardian: a stop request (a second one while it stops kills now).
    pub(crate) fn signal(&self) -> io::Result<()> {
        let Some(child) = &self.child else { return Ok(()) };
        if self.gone {
            // `try_wait` reaped guardian already (std keeps its status): its pid may be reused.
            return Ok(());
        }
        let sent = match &self.pidfd {
            Some(fd) => rustix::process::pidfd_send_signal(fd, Signal::TERM),
            // No pidfd (a kernel before 5.3, or seccomp): guardian is our unreaped child, so its
            // pid cannot have been reused yet.
            None => rustix::process::kill_process(Pid::from_child(child), Signal::TERM),
        };
        match sent {
            // guardian already exited (not yet reaped): nothing left to stop.
            Err(rustix::io::Errno::SRCH) => Ok(()),
            other => other.map_err(io::Error::from),
        }
    }
}

impl Guard {
    /// Whether guardian has exited (it is then not reaped: `try_wait` keeps the status).
    pub(crate) fn exited(&mut self) -> bool {
        let exited = self.child.as_mut().is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
        self.gone |= exited;
        exited
    }

    /// One wait, at most `step` (`None`: no bound), for `events` to be readable (an event, or
    /// its end) or guardian's pidfd (it exited); whether either happened. A failed poll
    /// (impossible on two valid fds) counts as happened, so no caller waits on for ever.
    pub(crate) fn poll_pipe_or_exit(&self, events: BorrowedFd<'_>, step: Option<std::time::Duration>) -> bool {
        let mut fds = vec![PollFd::from_borrowed_fd(events, PollFlags::IN)];
        if let Some(pidfd) = &self.pidfd {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        let tick = step.map(|d| Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        match rustix::event::poll(&mut fds, tick.as_ref()) {
            Ok(n) => n > 0,
            Err(rustix::io::Errno::INTR) => false,
            Err(_) => true,
        }
    }

    /// Blocks until `events` is readable or guardian exited, then drops [`Guard::hold`].
    /// Without a pidfd guardian's exit is polled every 10 ms.
    pub(crate) fn opened(&mut self, events: BorrowedFd<'_>) {
        if self.hold.is_none() {
            return;
        }
        let step = if self.pidfd.is_some() { None } else { Some(std::time::Duration::from_millis(10)) };
        while !self.poll_pipe_or_exit(events, step) && !self.exited() {}
        self.hold = None;
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let exited = match self.child.as_mut() {
            None => return,
            Some(child) => matches!(child.try_wait(), Ok(Some(_))),
        };
        if !exited && !self.finished {
            let _ = self.signal();
        }
        let Some(mut child) = self.child.take() else { return };
        if exited {
            return;
        }
        // guardian now stops and reaps the tree (bounded by its grace) and exits; a thread
        // reaps it so it does not stay a zombie. If this process exits first, guardian sees
        // its parent die and tears the tree down all the same. A held write end goes with the
        // thread: guardian may not have opened its own yet (with the number closed, the /proc
        // path would be gone, and guardian would exit 125 saying so). The read end may close:
        // a pipe's write end opens without a reader through /proc (writes then fail, unread).
        let hold = self.hold.take();
        let _ = std::thread::Builder::new().name("treeguardian-reap".into()).spawn(move || {
            let status = child.wait();
            drop(hold);
            status
        });
    }
}

/// How long a stop request waits at most for guardian to be ready for it (`State::until_ready`).
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the events said so far.
#[derive(Default)]
pub(crate) struct Tracker {
    /// A `stopping` that was not `kill-request`: a further SIGTERM kills now.
    pub(crate) stopping: bool,
    pub(crate) kill_requested: bool,
    pub(crate) released: Option<Released>,
    pub(crate) error: Option<(i32, String)>,
}

impl Tracker {
    pub(crate) fn observe(&mut self, event: &Event) {
        match event {
            Event::Stopping { reason, .. } if reason == "kill-request" => self.kill_requested = true,
            Event::Stopping { .. } => self.stopping = true,
            Event::Released(r) => self.released = Some(r.clone()),
            Event::Error { status, message, .. } => self.error = Some((*status, message.clone())),
            _ => {}
        }
    }
    pub(crate) fn finished(&self) -> bool {
        self.released.is_some() || self.error.is_some()
    }
    /// `wait`'s answer once guardian is reaped.
    pub(crate) fn outcome(&mut self, status: ExitStatus) -> Result<Released, Error> {
        match (self.released.take(), self.error.take()) {
            (Some(mut r), _) => {
                r.exit_status = Some(status);
                Ok(r)
            }
            (None, Some((status, message))) => Err(Error::Guardian { status, message }),
            (None, None) => Err(Error::Ended(status)),
        }
    }
}

/// What [`Child`] and `AsyncChild` (tokio) both hold and decide: guardian's [`Guard`], the
/// events read and not yet taken, what they said, and the provider's pid. The handles add only
/// how they read a line (blocking, or on tokio's reactor) and reap guardian.
pub(crate) struct State {
    pub(crate) guard: Guard,
    pub(crate) queue: VecDeque<Event>,
    pub(crate) tracker: Tracker,
    provider_pid: Option<u32>,
    /// An event was read (guardian is past its start-up's signal step).
    seen_any: bool,
    /// guardian's status once reaped.
    pub(crate) reaped: Option<ExitStatus>,
}

impl State {
    pub(crate) fn new(guard: Guard) -> State {
        State {
            guard,
            queue: VecDeque::new(),
            tracker: Tracker::default(),
            provider_pid: None,
            seen_any: false,
            reaped: None,
        }
    }

    pub(crate) fn guardian_pid(&self) -> u32 {
        self.guard.child.as_ref().map_or(0, std::process::Child::id)
    }

    pub(crate) fn provider_pid(&self) -> Option<u32> {
        self.provider_pid
    }

    /// One line read from the events pipe: parsed (a line it cannot read becomes
    /// [`Event::Other`]), followed by the tracker, queued; returned.
    pub(crate) fn take_line(&mut self, line: &str) -> Event {
        let event = Event::parse(line).unwrap_or(Event::Other { line: line.trim_end().to_string() });
        self.seen_any = true;
        if let Event::Spawned { pid, .. } = event {
            self.provider_pid = u32::try_from(pid).ok();
        }
        self.tracker.observe(&event);
        self.guard.finished = self.tracker.finished();
        self.queue.push_back(event.clone());
        event
    }

    /// Before a stop request: waits until guardian takes SIGTERM as one, at most
    /// [`READY_WAIT`]. guardian blocks SIGTERM as its first act (and reads it from its
    /// signalfd later); sent in the kernel's tail of guardian's exec, right after `spawn`
    /// returned, it would end guardian by the default action instead (with nothing started
    /// yet, so nothing left, but no `released`). Ready: an event was read or is buffered,
    /// `/proc/<guardian>/status` shows SIGTERM blocked, or guardian exited (its pidfd, or
    /// reaped). Where /proc cannot be read it waits for the first event or the exit.
    /// Blocking, but in practice for the instants of that exec (one read of /proc when
    /// guardian already runs), also in the async handle.
    pub(crate) fn until_ready(&self, events: BorrowedFd<'_>, buffered: bool) {
        if self.ready(buffered) {
            return;
        }
        let pid = self.guardian_pid();
        let deadline = std::time::Instant::now() + READY_WAIT;
        loop {
            let blocked = crate::sys::term_blocked(pid);
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if blocked == Some(true) || self.guard.gone || left.is_zero() {
                return;
            }
            let step = if blocked.is_some() {
                std::time::Duration::from_micros(100)
            } else {
                std::time::Duration::from_millis(5)
            };
            // The pipe (an event, or its end) or guardian's pidfd (it exited) ends the wait too.
            if self.guard.poll_pipe_or_exit(events, Some(step.min(left))) {
                return;
            }
        }
    }

    /// Whether guardian wrote anything yet: an event read (queued or taken) or bytes read from
    /// the pipe and not yet parsed (`buffered`).
    pub(crate) fn ready(&self, buffered: bool) -> bool {
        buffered || self.seen_any
    }

    /// `wait_spawned`'s answer so far: the provider's pid, guardian's `error`, or `None`
    /// (read on; at the end of the stream it is [`Error::Ended`]).
    pub(crate) fn spawned(&self) -> Option<Result<u32, Error>> {
        if let Some(pid) = self.provider_pid {
            return Some(Ok(pid));
        }
        let (status, message) = self.tracker.error.clone()?;
        Some(Err(Error::Guardian { status, message }))
    }

    /// `kill_now`'s first step (guardian's kill-now rule): SIGTERM unless the tree is released
    /// or the kill already requested. `true` when the caller must read on and give each event
    /// to [`State::kill_on`]: a SIGTERM kills at once only while guardian is stopping.
    pub(crate) fn kill_first(&self) -> io::Result<bool> {
        if self.tracker.finished() || self.tracker.kill_requested {
            return Ok(false);
        }
        let already_stopping = self.tracker.stopping;
        self.guard.signal()?;
        Ok(!already_stopping)
    }

    /// `kill_now`'s answer to an event read after the first SIGTERM: `true` when it is done.
    /// A first `stopping` (not the kill request's) gets the second SIGTERM.
    pub(crate) fn kill_on(&self, event: &Event) -> io::Result<bool> {
        if let Event::Stopping { reason, .. } = event {
            if reason != "kill-request" {
                self.guard.signal()?;
            }
            return Ok(true);
        }
        Ok(self.tracker.finished())
    }
}

/// guardian started with an events pipe, before its first event.
pub(crate) struct Started {
    pub(crate) guard: Guard,
    pub(crate) events: OwnedFd,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

/// Finds guardian, makes the events pipe and starts guardian with it.
pub(crate) fn start(cmd: &mut Command) -> Result<Started, Error> {
    let guardian = crate::find::guardian(cmd.guardian.as_deref()).map_err(Error::NotFound)?;
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
    let route = crate::sys::route(&write);
    let fd_text = write.as_raw_fd().to_string();
    let events = match &route {
        Route::ProcPath(path) => (crate::command::EVENTS_FILE, path.as_os_str()),
        Route::Inherit => (crate::command::EVENTS_FD, OsStr::new(&fd_text)),
    };
    let mut std_cmd = cmd.std_command(&guardian, events);
    std_cmd.stdin(cmd.stdin.take().unwrap_or_else(Stdio::inherit));
    std_cmd.stdout(cmd.stdout.take().unwrap_or_else(Stdio::inherit));
    std_cmd.stderr(cmd.stderr.take().unwrap_or_else(Stdio::inherit));
    if let Route::Inherit = route {
        crate::sys::inherit_in_child(&mut std_cmd, write.as_raw_fd());
    }
    let mut std = std_cmd.spawn().map_err(|source| Error::Spawn { guardian, source })?;
    let hold = match route {
        Route::ProcPath(_) => Some(write),
        Route::Inherit => None,
    };
    let pidfd = rustix::process::pidfd_open(Pid::from_child(&std), PidfdFlags::empty()).ok();
    // The stdio goes to the caller's handle; the Guard owns the process.
    let (stdin, stdout, stderr) = (std.stdin.take(), std.stdout.take(), std.stderr.take());
    let guard = Guard { child: Some(std), pidfd, finished: false, hold, gone: false };
    Ok(Started { guard, events: read, stdin, stdout, stderr })
}

/// A provider running under guardian (from [`Command::spawn`]). Dropping it without
/// [`Child::wait`] sends guardian the stop request: the tree is stopped and reaped within the
/// grace, and nothing blocks.
pub struct Child {
    state: State,
    events: BufReader<File>,
    /// The provider's stdin (guardian's, passed on), when [`Command::stdin`] was piped.
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

impl Command {
    /// Starts guardian with the provider and returns once guardian runs (as
    /// `std::process::Command::spawn` returns once its program runs), or an error: guardian
    /// not found or not startable. That the provider could not be started (guardian's `error`
    /// event, status 126 or 127) is [`Child::wait_spawned`]'s error, and `wait`'s.
    pub fn spawn(&mut self) -> Result<Child, Error> {
        let s = start(self)?;
        Ok(Child {
            state: State::new(s.guard),
            events: BufReader::new(File::from(s.events)),
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        })
    }
}

impl Child {
    /// guardian's pid.
    pub fn guardian_pid(&self) -> u32 {
        self.state.guardian_pid()
    }
    /// The provider's pid, once the `spawned` event was read (by [`Child::wait_spawned`],
    /// [`Child::next_event`] or any verb that reads events).
    pub fn provider_pid(&self) -> Option<u32> {
        self.state.provider_pid()
    }

    /// Waits for the `spawned` event (it stays queued for [`Child::next_event`]) and returns
    /// the provider's pid; [`Error::Guardian`] when guardian could not start the provider
    /// (status 126 or 127, with its message), [`Error::Ended`] when guardian ended first.
    pub fn wait_spawned(&mut self) -> Result<u32, Error> {
        loop {
            if let Some(answer) = self.state.spawned() {
                return answer;
            }
            if self.read_event().is_none() {
                return Err(Error::Ended(self.reap()?));
            }
        }
    }

    /// Reads one event into the queue's order; `None` at the end of the stream.
    fn read_event(&mut self) -> Option<Event> {
        self.state.guard.opened(self.events.get_ref().as_fd());
        let mut line = String::new();
        loop {
            line.clear();
            match self.events.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) if line.trim().is_empty() => continue,
                Ok(_) => break,
            }
        }
        Some(self.state.take_line(&line))
    }

    /// The next event, blocking until guardian writes it; `None` after the last one.
    pub fn next_event(&mut self) -> Option<Event> {
        if self.state.queue.is_empty() {
            self.read_event()?;
        }
        self.state.queue.pop_front()
    }

    /// The events as an iterator (blocking), ending after `released` or `error`.
    pub fn events(&mut self) -> impl Iterator<Item = Event> + '_ {
        std::iter::from_fn(move || self.next_event())
    }

    /// The stop request: SIGTERM to guardian, which sends the tree the stop signal, waits the
    /// grace, SIGKILLs what is left and reaps everything. Does not wait for that; right after
    /// `spawn` it first waits (for the instants of guardian's exec) until guardian takes
    /// SIGTERM as a stop request.
    pub fn stop(&self) -> io::Result<()> {
        self.state.until_ready(self.events.get_ref().as_fd(), !self.events.buffer().is_empty());
        self.state.guard.signal()
    }

    /// Kill the tree now (guardian's kill-now rule): SIGTERM; if guardian answers with a first
    /// `stopping`, SIGTERM again, which ends the grace with SIGKILL to the whole tree. Returns
    /// once guardian acknowledged (`stopping` with `kill-request`, or the stream ended); the
    /// events read meanwhile stay queued for [`Child::next_event`].
    pub fn kill_now(&mut self) -> io::Result<()> {
        self.state.until_ready(self.events.get_ref().as_fd(), !self.events.buffer().is_empty());
        if self.state.kill_first()? {
            while let Some(event) = self.read_event() {
                if self.state.kill_on(&event)? {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Waits until guardian released the tree (every descendant reaped) and exited; returns its
    /// `released` event with guardian's exit status. Closes the provider's stdin first, like
    /// `std::process::Child::wait`.
    pub fn wait(mut self) -> Result<Released, Error> {
        drop(self.stdin.take());
        while !self.state.tracker.finished() && self.read_event().is_some() {}
        let status = self.reap()?;
        self.state.tracker.outcome(status)
    }

    fn reap(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.state.reaped {
            return Ok(status);
        }
        let mut child = self.state.guard.child.take().ok_or_else(|| io::Error::other("guardian was already reaped"))?;
        let status = child.wait()?;
        self.state.reaped = Some(status);
        Ok(status)
    }
}
