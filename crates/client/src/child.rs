//! child: the blocking handle, a superset of `std::process::Child` ([`Child`]), and what
//! starts guardian for both handles ([`start`]): the checks std's `spawn` would fail (the
//! provider's program resolved as execvp will, a value guardian would refuse), the guardian
//! binary, the events pipe and its route (`sys.rs`), and the spawn.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::{ChildStderr, ChildStdin, ChildStdout, ExitStatus, Output, Stdio};
use std::sync::Arc;

use rustix::process::{Pid, PidfdFlags};

use crate::command::{Builder, Command};
use crate::error::Error;
use crate::events::{Event, Released};
use crate::state::{Guard, ReleasedHandle, State, read_line};
use crate::sys::Route;

/// guardian started with an events pipe, before its first event.
pub(crate) struct Started {
    pub(crate) guard: Guard,
    pub(crate) events: OwnedFd,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

/// The checks std's `spawn` fails on, made before anything starts: a value guardian would
/// refuse, a program that cannot run (resolved as execvp will), no guardian binary.
pub(crate) fn preflight(b: &Builder) -> io::Result<std::path::PathBuf> {
    if let Some(message) = &b.invalid {
        return Err(Error::Invalid(message.clone()).into());
    }
    crate::resolve::check(b)?;
    crate::find::guardian(b.guardian.as_deref()).map_err(|m| Error::NotFound(m).into())
}

/// Finds guardian, makes the events pipe and starts guardian with it; `stdio` are the
/// defaults for what the command leaves unset (std's `spawn`, `output` and `status` differ).
pub(crate) fn start(b: &mut Builder, stdio: [fn() -> Stdio; 3]) -> io::Result<Started> {
    let guardian = preflight(b)?;
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
    let route = crate::sys::route(&write);
    let fd_text = write.as_raw_fd().to_string();
    let events = match &route {
        Route::ProcPath(path) => (crate::command::EVENTS_FILE, path.as_os_str()),
        Route::Inherit => (crate::command::EVENTS_FD, OsStr::new(&fd_text)),
    };
    let mut std_cmd = b.std_command(&guardian, events);
    std_cmd.stdin(b.stdin.take().unwrap_or_else(stdio[0]));
    std_cmd.stdout(b.stdout.take().unwrap_or_else(stdio[1]));
    std_cmd.stderr(b.stderr.take().unwrap_or_else(stdio[2]));
    if let Route::Inherit = route {
        crate::sys::inherit_in_child(&mut std_cmd, write.as_raw_fd());
    }
    let mut std = match std_cmd.spawn() {
        Ok(child) => child,
        Err(source) => return Err(Error::Spawn { guardian, source }.into()),
    };
    let hold = match route {
        Route::ProcPath(_) => Some(write),
        Route::Inherit => None,
    };
    let pidfd = rustix::process::pidfd_open(Pid::from_child(&std), PidfdFlags::empty()).ok();
    // The stdio goes to the caller's handle; the Guard owns the process.
    let (stdin, stdout, stderr) = (std.stdin.take(), std.stdout.take(), std.stderr.take());
    let guard = Guard {
        child: Some(std),
        pidfd,
        path: guardian,
        finished: false,
        hold,
        gone: false,
        kill_on_drop: b.kill_on_drop,
        shared: Arc::default(),
        rest: None,
    };
    Ok(Started { guard, events: read, stdin, stdout, stderr })
}

/// std's defaults: `spawn` and `status` inherit all three; `output` gives no stdin and
/// captures the two others.
pub(crate) const INHERIT: [fn() -> Stdio; 3] = [Stdio::inherit, Stdio::inherit, Stdio::inherit];
pub(crate) const OUTPUT: [fn() -> Stdio; 3] = [Stdio::null, Stdio::piped, Stdio::piped];

/// A provider running under guardian (from [`Command::spawn`]): `std::process::Child`'s
/// methods, with guardian's beside them. [`Child::id`] and the exit status are guardian's,
/// which ends with the provider's status after the whole tree is gone. Dropping it without a
/// wait sends guardian the stop request (the kill request with `kill_on_drop`): the tree is
/// stopped and reaped, and nothing blocks.
pub struct Child {
    state: State,
    events: BufReader<File>,
    /// The provider's stdin (guardian's, passed on), when [`Command::stdin`] was piped.
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

impl Command {
    /// Starts guardian with the provider and returns once guardian runs, as
    /// `std::process::Command::spawn` returns once its program runs. Fails as std's does: a
    /// program that cannot be run is `ErrorKind::NotFound` or `PermissionDenied` (resolved as
    /// execvp will, before anything starts), a duration guardian would refuse is
    /// `InvalidInput` with guardian's message, no guardian binary is `NotFound` naming where
    /// it looked. The [`Error`] is inside the `io::Error` (`get_ref()`).
    pub fn spawn(&mut self) -> io::Result<Child> {
        let s = start(&mut self.b, INHERIT)?;
        Ok(Child::new(s))
    }

    /// As `std::process::Command::output`: runs the provider to its end (and the tree's)
    /// with stdin null and stdout and stderr captured, unless set.
    pub fn output(&mut self) -> io::Result<Output> {
        let s = start(&mut self.b, OUTPUT)?;
        Child::new(s).wait_with_output()
    }

    /// As `std::process::Command::status`: runs the provider to its end (and the tree's).
    pub fn status(&mut self) -> io::Result<ExitStatus> {
        let s = start(&mut self.b, INHERIT)?;
        Child::new(s).wait()
    }
}

impl Child {
    fn new(s: crate::child::Started) -> Child {
        Child {
            state: State::new(s.guard),
            events: BufReader::new(File::from(s.events)),
            stdin: s.stdin,
            stdout: s.stdout,
            stderr: s.stderr,
        }
    }

    /// guardian's pid, as `std::process::Child::id` (the process this handle started; a
    /// SIGTERM to it is a stop request).
    pub fn id(&self) -> u32 {
        self.state.guardian_pid()
    }
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
    /// the provider's pid; [`Error::Guardian`] when guardian could not start the provider,
    /// [`Error::Version`] for a guardian older than this crate drives (its tree is stopped),
    /// [`Error::Ended`] when guardian ended first.
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
        read_line(&mut self.events, &mut self.state)
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

    fn until_ready(&self) {
        self.state.until_ready(self.events.get_ref().as_fd(), !self.events.buffer().is_empty());
    }

    /// The stop with a grace: SIGTERM to guardian, which sends the tree the stop signal, waits
    /// the grace, SIGKILLs what is left and reaps everything. Does not wait for that.
    pub fn stop(&self) -> io::Result<()> {
        self.until_ready();
        self.state.guard.stop()
    }

    /// As `std::process::Child::kill`: the provider and its whole tree get SIGKILL now (the
    /// kill request, spec/driver.json), and the status [`Child::wait`] then returns is
    /// "signal 9", as std's. Does not wait; `Ok(())` when guardian has already exited.
    pub fn kill(&mut self) -> io::Result<()> {
        self.until_ready();
        self.state.guard.kill()?;
        self.state.kill_pending |= self.state.reaped.is_none();
        Ok(())
    }

    /// Closes the provider's stdin, as std's `wait` does first (after a kill request, once
    /// the provider was reaped: see `State::stdin_may_close`).
    fn close_stdin(&mut self) {
        while !self.state.stdin_may_close() && self.read_event().is_some() {}
        drop(self.stdin.take());
    }

    /// As `std::process::Child::wait`: closes the provider's stdin, then waits until guardian
    /// released the tree (every descendant reaped) and exited; guardian's status, which is the
    /// provider's. The same status on every further call; [`Child::released`] then gives the
    /// teardown's figures.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        self.close_stdin();
        while self.state.reaped.is_none() && !self.state.tracker.finished() && self.read_event().is_some() {}
        self.reap()?;
        self.state.status()
    }

    /// As `std::process::Child::try_wait`: guardian's status if it has exited (its events are
    /// then read to their end), `None` if it still runs. Never blocks.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.state.reaped.is_none() {
            let exited = match self.state.guard.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => return Err(io::Error::other("guardian was already reaped")),
            };
            let Some(status) = exited else { return Ok(None) };
            // guardian exited: its write end is closed, the rest of the stream is in the pipe.
            self.state.guard.hold = None;
            while read_line(&mut self.events, &mut self.state).is_some() {}
            self.state.finish(status);
        }
        self.state.status().map(Some)
    }

    /// As `std::process::Child::wait_with_output`: reads stdout and stderr (when piped) to
    /// their end while waiting.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        self.close_stdin();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let stderr = self.stderr.take();
        let reader = stderr.map(|mut e| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                e.read_to_end(&mut buf).map(|_| buf)
            })
        });
        if let Some(mut o) = self.stdout.take() {
            o.read_to_end(&mut out)?;
        }
        if let Some(reader) = reader {
            err = reader.join().map_err(|_| io::Error::other("stderr reader panicked"))??;
        }
        let status = self.wait()?;
        Ok(Output { status, stdout: out, stderr: err })
    }

    /// guardian's `released` event (with its exit status) once [`Child::wait`] or
    /// [`Child::try_wait`] saw guardian exit; `None` before, or when guardian ended without
    /// one (see [`Child::wait_released`]).
    pub fn released(&self) -> Option<&Released> {
        self.state.released()
    }

    /// Waits as [`Child::wait`] does and returns the `released` event, or why there is none:
    /// guardian's `error` ([`Error::Guardian`]), [`Error::Version`], [`Error::Ended`].
    pub fn wait_released(&mut self) -> Result<Released, Error> {
        match self.wait() {
            Ok(_) => {}
            Err(e) if self.state.reaped.is_none() => return Err(Error::Io(e)),
            Err(_) => {}
        }
        self.state.outcome()
    }

    /// A handle on the `released` figures that outlives this one: filled when guardian is
    /// reaped, also after a drop (the reaping thread reads the rest of the events).
    pub fn released_handle(&self) -> ReleasedHandle {
        self.state.handle()
    }

    fn reap(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.state.reaped {
            return Ok(status);
        }
        let child = self.state.guard.child.as_mut().ok_or_else(|| io::Error::other("guardian was already reaped"))?;
        let status = child.wait()?;
        self.state.guard.hold = None;
        self.state.finish(status);
        Ok(status)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let buffered = self.events.buffer().to_vec();
        self.state.leave(buffered, self.events.get_ref().as_fd());
    }
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child")
            .field("guardian_pid", &self.guardian_pid())
            .field("provider_pid", &self.provider_pid())
            .finish_non_exhaustive()
    }
}
