//! state: what the blocking and the tokio handles share. [`Guard`] owns guardian's process
//! and pidfd and makes `Drop` safe: it sends the stop request (SIGTERM through the pidfd) or,
//! with `kill_on_drop`, the kill request (spec/driver.json's RTMAX), never SIGKILL to guardian,
//! and leaves the reaping to a short-lived thread, so it needs no runtime and does not block.
//! [`State`] follows the events: the provider's pid, the version check (spec/driver.json's
//! `min_guardian_version` against `spawned.version`), `released` or `error`, the log lines
//! (feature `tracing`), and the [`ReleasedHandle`] through which the teardown's figures stay
//! reachable after any way of closing, a drop included.

use std::collections::VecDeque;
use std::io::{self, BufRead};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal};

use crate::driver;
use crate::error::Error;
use crate::events::{Event, Released};

/// guardian's process until it is reaped. Dropping it unreaped sends the stop request (or the
/// kill request, with `kill_on_drop`).
pub(crate) struct Guard {
    pub(crate) child: Option<std::process::Child>,
    pub(crate) pidfd: Option<OwnedFd>,
    /// The guardian binary (for the version error).
    pub(crate) path: PathBuf,
    /// The last event was read: nothing is left to stop.
    pub(crate) finished: bool,
    /// The events pipe's write end, kept while guardian opens its own through /proc
    /// (`sys::Route::ProcPath`): dropped once the pipe is readable (guardian opened it and
    /// wrote) or guardian exited, so that the stream ends when guardian's end closes.
    pub(crate) hold: Option<OwnedFd>,
    /// guardian exited and was reaped (std keeps its status): nothing may be sent to its pid.
    pub(crate) gone: bool,
    pub(crate) kill_on_drop: bool,
    pub(crate) shared: Arc<Shared>,
    /// What the handle had read and not read of the events when it was dropped, for the
    /// reaping thread to finish [`Shared`] with.
    pub(crate) rest: Option<Rest>,
}

impl Guard {
    fn send(&self, signal: Signal) -> io::Result<()> {
        let Some(child) = &self.child else { return Ok(()) };
        if self.gone {
            return Ok(());
        }
        let sent = match &self.pidfd {
            Some(fd) => rustix::process::pidfd_send_signal(fd, signal),
            // No pidfd (a kernel before 5.3, or seccomp): guardian is our unreaped child, so its
            // pid cannot have been reused yet.
            None => rustix::process::kill_process(Pid::from_child(child), signal),
        };
        match sent {
            // guardian already exited (not yet reaped): nothing left to stop.
            Err(rustix::io::Errno::SRCH) => Ok(()),
            other => other.map_err(io::Error::from),
        }
    }

    /// The stop request: SIGTERM once (the stop signal, the grace, SIGKILL).
    pub(crate) fn stop(&self) -> io::Result<()> {
        self.send(Signal::TERM)
    }

    /// The kill request: guardian SIGKILLs the provider and its tree at once.
    pub(crate) fn kill(&self) -> io::Result<()> {
        self.send(crate::sys::kill_request_signal())
    }

    /// Whether guardian has exited (and is reaped: `try_wait` keeps the status).
    pub(crate) fn exited(&mut self) -> bool {
        let exited = self.child.as_mut().is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
        self.gone |= exited;
        exited
    }

    /// One wait, at most `step` (`None`: no bound), for `events` to be readable (an event, or
    /// its end) or guardian's pidfd (it exited); whether either happened. A failed poll
    /// (impossible on two valid fds) counts as happened, so no caller waits on for ever.
    pub(crate) fn poll_pipe_or_exit(&self, events: BorrowedFd<'_>, step: Option<Duration>) -> bool {
        let mut fds = vec![PollFd::from_borrowed_fd(events, PollFlags::IN)];
        if let Some(pidfd) = &self.pidfd {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        let tick = step.map(timespec);
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
        let step = if self.pidfd.is_some() { None } else { Some(Duration::from_millis(10)) };
        while !self.poll_pipe_or_exit(events, step) && !self.exited() {}
        self.hold = None;
    }
}

fn timespec(d: Duration) -> Timespec {
    Timespec { tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), tv_nsec: i64::from(d.subsec_nanos()) }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let exited = match self.child.as_mut() {
            None => return,
            Some(child) => matches!(child.try_wait(), Ok(Some(_))),
        };
        if !exited && !self.finished {
            let _ = if self.kill_on_drop { self.kill() } else { self.stop() };
        }
        let Some(mut child) = self.child.take() else { return };
        let listened = Arc::strong_count(&self.shared) > 1;
        if exited && (!listened || self.shared.known()) {
            return;
        }
        // guardian now stops and reaps the tree (bounded by its grace) and exits; a thread
        // reaps it so it does not stay a zombie. If this process exits first, guardian sees
        // its parent die and tears the tree down all the same. A held write end goes with the
        // thread: guardian may not have opened its own yet (with the number closed, the /proc
        // path would be gone, and guardian would exit 125 saying so). The read end may close:
        // a pipe's write end opens without a reader through /proc (writes then fail, unread).
        // When a [`ReleasedHandle`] is held, the thread reads the rest of the events for it.
        let hold = self.hold.take();
        let rest = if listened { self.rest.take() } else { None };
        let shared = Arc::clone(&self.shared);
        let _ = std::thread::Builder::new().name("treeguardian-reap".into()).spawn(move || {
            let status = child.wait();
            drop(hold);
            let released = rest.and_then(Rest::released);
            if let Ok(status) = status {
                shared.finish(released, Some(status));
            }
        });
    }
}

/// A dropped handle's events: the `released` it read, the bytes it buffered, and its pipe.
pub(crate) struct Rest {
    pub(crate) released: Option<Released>,
    pub(crate) buffered: Vec<u8>,
    pub(crate) fd: Option<OwnedFd>,
}

impl Rest {
    /// The `released` event, read by the handle or in the rest of the stream (guardian exited).
    fn released(self) -> Option<Released> {
        let mut tracker = Tracker { released: self.released, ..Tracker::default() };
        let tail = self.fd.map(drain).unwrap_or_default();
        for line in self.buffered.split(|&b| b == b'\n').chain(tail.split(|&b| b == b'\n')) {
            if let Some(event) = parse(&String::from_utf8_lossy(line)) {
                tracker.observe(&event);
            }
        }
        tracker.released
    }
}

/// The rest of a pipe whose writers are gone (guardian exited), also when it is non-blocking
/// (tokio's): read until its end.
fn drain(fd: OwnedFd) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let _ = rustix::event::poll(&mut fds, Some(&timespec(Duration::from_secs(1))));
            }
            Err(_) => return out,
        }
    }
}

/// One line of the stream as an event (`None` for a blank one; a line this version cannot
/// read is [`Event::Other`]).
pub(crate) fn parse(line: &str) -> Option<Event> {
    if line.trim().is_empty() {
        return None;
    }
    Some(Event::parse(line).unwrap_or(Event::Other { line: line.trim_end().to_string() }))
}

/// The teardown's figures, shared between a handle and whoever took a [`ReleasedHandle`].
#[derive(Default)]
pub(crate) struct Shared {
    slot: Mutex<Option<Option<Released>>>,
    done: Condvar,
}

impl Shared {
    fn known(&self) -> bool {
        self.slot.lock().is_ok_and(|s| s.is_some())
    }
    /// guardian is reaped: its `released` event (with its status), or none (an `error`, or it
    /// was killed).
    pub(crate) fn finish(&self, released: Option<Released>, status: Option<ExitStatus>) {
        if let Ok(mut slot) = self.slot.lock() {
            if slot.is_none() {
                *slot = Some(released.map(|mut r| {
                    r.exit_status = status;
                    r
                }));
            }
            self.done.notify_all();
        }
    }
}

/// The `released` figures of one guardian, reachable after every way of closing: a `wait`,
/// a kill, a dropped handle (its reaping thread reads the rest of the events), an rmcp
/// `cancel()`. Take it before closing (`Child::released_handle`,
/// `GuardianTransport::released_handle`); it is cheap to clone.
#[derive(Clone, Default)]
pub struct ReleasedHandle(pub(crate) Arc<Shared>);

impl ReleasedHandle {
    /// The `released` event (with guardian's exit status) once guardian was reaped; `None`
    /// before, or when guardian ended without one (its `error` event, or it was killed).
    pub fn get(&self) -> Option<Released> {
        self.0.slot.lock().ok().and_then(|s| s.clone().flatten())
    }
    /// Whether guardian was reaped (with or without `released`).
    pub fn is_finished(&self) -> bool {
        self.0.known()
    }
    /// Blocks until guardian was reaped, at most `timeout`; then [`ReleasedHandle::get`].
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Released> {
        let end = Instant::now() + timeout;
        let mut slot = self.0.slot.lock().ok()?;
        while slot.is_none() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            slot = self.0.done.wait_timeout(slot, left).ok()?.0;
        }
        slot.clone().flatten()
    }
}

impl std::fmt::Debug for ReleasedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ReleasedHandle").field(&self.get()).finish()
    }
}

/// How long a stop or kill request waits at most for guardian to be ready for it.
const READY_WAIT: Duration = Duration::from_secs(driver::READY_WAIT_SECONDS);

/// What the events said so far.
#[derive(Default)]
pub(crate) struct Tracker {
    pub(crate) released: Option<Released>,
    pub(crate) error: Option<(i32, String)>,
    /// The provider was reaped (its `exit` event).
    pub(crate) exited: bool,
}

impl Tracker {
    pub(crate) fn observe(&mut self, event: &Event) {
        match event {
            Event::Released(r) => self.released = Some(r.clone()),
            Event::Error { status, message, .. } => self.error = Some((*status, message.clone())),
            Event::Exit { .. } => self.exited = true,
            _ => {}
        }
    }
    pub(crate) fn finished(&self) -> bool {
        self.released.is_some() || self.error.is_some()
    }
}

/// `found` is at least spec/driver.json's `min_guardian_version` (numeric `x.y.z`; a
/// pre-release or build suffix is ignored, a newer guardian is accepted).
pub(crate) fn version_ok(found: &str) -> bool {
    fn parts(v: &str) -> Vec<u64> {
        v.split(['-', '+']).next().unwrap_or("").split('.').map(|p| p.parse().unwrap_or(0)).collect()
    }
    let (found, min) = (parts(found), parts(driver::MIN_GUARDIAN_VERSION));
    (0..3).map(|i| found.get(i).copied().unwrap_or(0)).cmp((0..3).map(|i| min.get(i).copied().unwrap_or(0)))
        != std::cmp::Ordering::Less
}

/// Logs what guardian's events report (feature `tracing`): fallbacks and refusals as
/// warnings, guardian's errors as errors, the rest at debug.
#[cfg(feature = "tracing")]
pub(crate) fn log(event: &Event, guardian_pid: u32) {
    match event {
        Event::Fallback { what, errno, detail, .. } => {
            tracing::warn!(target: "treeguardian", guardian_pid, %what, %errno, %detail, "guardian fell back: {what} refused ({errno}); {detail}")
        }
        Event::Error { status, message, .. } => {
            tracing::error!(target: "treeguardian", guardian_pid, status, "guardian: {message}")
        }
        Event::Other { line } => {
            tracing::debug!(target: "treeguardian", guardian_pid, "guardian event not understood: {line}")
        }
        other => tracing::debug!(target: "treeguardian", guardian_pid, event = ?other.name(), "{other:?}"),
    }
}

/// Before a stop or kill request from a handle that does not read the events itself (the
/// process-wrap child): until `pid` blocks SIGTERM or exited, at most the ready wait.
#[cfg(feature = "process-wrap")]
pub(crate) fn wait_ready(pid: u32, pidfd: Option<&OwnedFd>) {
    let deadline = Instant::now() + READY_WAIT;
    while crate::sys::term_blocked(pid) == Some(false) && Instant::now() < deadline {
        let step = Duration::from_micros(100);
        match pidfd {
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                if rustix::event::poll(&mut fds, Some(&timespec(step))).is_ok_and(|n| n > 0) {
                    return;
                }
            }
            None => std::thread::sleep(step),
        }
    }
}

/// What [`crate::Child`] and the tokio `Child` both hold and decide: guardian's [`Guard`], the
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
    /// The version check refused guardian (the tree was stopped).
    pub(crate) refused: Option<Option<String>>,
    /// A kill request was sent and the provider's `exit` not read yet: a wait keeps the
    /// provider's stdin open until then (see [`State::stdin_may_close`]).
    pub(crate) kill_pending: bool,
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
            refused: None,
            kill_pending: false,
        }
    }

    pub(crate) fn guardian_pid(&self) -> u32 {
        self.guard.child.as_ref().map_or(0, std::process::Child::id)
    }

    pub(crate) fn provider_pid(&self) -> Option<u32> {
        self.provider_pid
    }

    pub(crate) fn handle(&self) -> ReleasedHandle {
        ReleasedHandle(Arc::clone(&self.guard.shared))
    }

    /// One line read from the events pipe: parsed, followed by the tracker, checked, logged,
    /// queued; returned (`None` for a blank line).
    pub(crate) fn take_line(&mut self, line: &str) -> Option<Event> {
        let event = parse(line)?;
        self.seen_any = true;
        #[cfg(feature = "tracing")]
        log(&event, self.guardian_pid());
        if let Event::Spawned { pid, version, .. } = &event {
            self.provider_pid = u32::try_from(*pid).ok();
            if !version.as_deref().is_some_and(version_ok) {
                // Interface 3 of the drivers: an older guardian is stopped and named.
                #[cfg(feature = "tracing")]
                tracing::error!(target: "treeguardian", found = ?version, min = driver::MIN_GUARDIAN_VERSION, "guardian is too old; stopping it");
                self.refused = Some(version.clone());
                let _ = self.guard.stop();
            }
        }
        self.tracker.observe(&event);
        self.guard.finished = self.tracker.finished();
        self.queue.push_back(event.clone());
        Some(event)
    }

    /// Whether a wait may close the provider's stdin now, as std's and tokio's do first. Not
    /// while a kill request is on its way: guardian sends the SIGKILL a moment after the
    /// request, and a provider that reads its stdin would see its end first and exit on its
    /// own (std's kill is SIGKILL before `kill()` returns). Until the provider's `exit`.
    pub(crate) fn stdin_may_close(&self) -> bool {
        !self.kill_pending || self.tracker.exited || self.tracker.finished()
    }

    /// guardian was reaped with `status`: the handle's figures are final.
    pub(crate) fn finish(&mut self, status: ExitStatus) {
        self.reaped = Some(status);
        self.guard.gone = true;
        self.guard.shared.finish(self.tracker.released.clone(), Some(status));
    }

    /// `wait`'s answer once guardian is reaped: its status, or the version check's refusal.
    pub(crate) fn status(&self) -> io::Result<ExitStatus> {
        if let Some(found) = &self.refused {
            return Err(self.version_error(found.clone()).into());
        }
        self.reaped.ok_or_else(|| io::Error::other("guardian was not reaped"))
    }

    fn version_error(&self, found: Option<String>) -> Error {
        Error::Version { guardian: self.guard.path.clone(), found, min: driver::MIN_GUARDIAN_VERSION }
    }

    /// The `released` event once guardian was reaped.
    pub(crate) fn released(&self) -> Option<&Released> {
        self.tracker.released.as_ref().filter(|_| self.reaped.is_some())
    }

    /// `wait_released`'s answer once guardian is reaped.
    pub(crate) fn outcome(&self) -> Result<Released, Error> {
        if let Some(found) = &self.refused {
            return Err(self.version_error(found.clone()));
        }
        let status = self.reaped.ok_or_else(|| Error::Io(io::Error::other("guardian was not reaped")))?;
        match (&self.tracker.released, &self.tracker.error) {
            (Some(r), _) => {
                let mut r = r.clone();
                r.exit_status = Some(status);
                Ok(r)
            }
            (None, Some((status, message))) => Err(Error::Guardian { status: *status, message: message.clone() }),
            (None, None) => Err(Error::Ended(status)),
        }
    }

    /// Before a stop or kill request: waits until guardian takes SIGTERM as one (it blocks
    /// its signals as its first act), at most spec/driver.json's ready wait. Sent in the
    /// kernel's tail of guardian's exec, right after `spawn` returned, a signal would end
    /// guardian by its default action instead (with nothing started yet, so nothing left, but
    /// no `released`). Ready: an event was read or is buffered, `/proc/<guardian>/status`
    /// shows SIGTERM blocked, or guardian exited (its pidfd, or reaped). Blocking, but in
    /// practice for the instants of that exec, also in the async handle.
    pub(crate) fn until_ready(&self, events: BorrowedFd<'_>, buffered: bool) {
        if buffered || self.seen_any {
            return;
        }
        let pid = self.guardian_pid();
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let blocked = crate::sys::term_blocked(pid);
            let left = deadline.saturating_duration_since(Instant::now());
            if blocked == Some(true) || self.guard.gone || left.is_zero() {
                return;
            }
            let step = if blocked.is_some() { Duration::from_micros(100) } else { Duration::from_millis(5) };
            // The pipe (an event, or its end) or guardian's pidfd (it exited) ends the wait too.
            if self.guard.poll_pipe_or_exit(events, Some(step.min(left))) {
                return;
            }
        }
    }

    /// `wait_spawned`'s answer so far: the provider's pid, guardian's `error`, the version
    /// refusal, or `None` (read on; at the end of the stream it is [`Error::Ended`]).
    pub(crate) fn spawned(&self) -> Option<Result<u32, Error>> {
        if let Some(found) = &self.refused {
            return Some(Err(self.version_error(found.clone())));
        }
        if let Some(pid) = self.provider_pid {
            return Some(Ok(pid));
        }
        let (status, message) = self.tracker.error.clone()?;
        Some(Err(Error::Guardian { status, message }))
    }
}

/// Reads one line from a blocking reader into `State` (used by the blocking handle and by
/// `try_wait` once guardian exited).
pub(crate) fn read_line(reader: &mut impl BufRead, state: &mut State) -> Option<Event> {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {
                if let Some(event) = state.take_line(&line) {
                    return Some(event);
                }
            }
        }
    }
}

impl State {
    /// A handle is dropped: what it read and buffered of the events goes to [`Guard::rest`]
    /// (only read when a [`ReleasedHandle`] was taken).
    pub(crate) fn leave(&mut self, buffered: Vec<u8>, events: BorrowedFd<'_>) {
        if Arc::strong_count(&self.guard.shared) == 1 || self.reaped.is_some() {
            return;
        }
        let released = self.tracker.released.take();
        self.guard.rest = Some(Rest { released, buffered, fd: events.as_fd().try_clone_to_owned().ok() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fallbacks and guardian's errors reach `tracing` as warnings and errors under the target
    /// `treeguardian` (a minimal subscriber records them).
    #[cfg(feature = "tracing")]
    #[test]
    fn fallbacks_and_errors_are_logged() {
        use std::sync::Mutex;
        use tracing::{Level, Metadata, span};
        #[derive(Default)]
        struct Record(Mutex<Vec<(Level, String)>>);
        impl tracing::Subscriber for Record {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
                span::Id::from_u64(1)
            }
            fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
            fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
            fn event(&self, event: &tracing::Event<'_>) {
                let meta = event.metadata();
                if let Ok(mut seen) = self.0.lock() {
                    seen.push((*meta.level(), meta.target().to_string()));
                }
            }
            fn enter(&self, _: &span::Id) {}
            fn exit(&self, _: &span::Id) {}
        }
        let record = std::sync::Arc::new(Record::default());
        let lines = [
            r#"{"event":"fallback","ts":1.0,"what":"clone3","errno":"ENOSYS","detail":"fork"}"#,
            r#"{"event":"error","ts":1.0,"status":127,"message":"x: not found"}"#,
        ];
        tracing::subscriber::with_default(std::sync::Arc::clone(&record), || {
            for line in lines {
                log(&parse(line).expect("an event"), 7);
            }
        });
        let seen = record.0.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen, [(Level::WARN, "treeguardian".to_string()), (Level::ERROR, "treeguardian".to_string())]);
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(version_ok(driver::MIN_GUARDIAN_VERSION));
        assert!(version_ok("0.2.1") && version_ok("0.10.0") && version_ok("1.0.0") && version_ok("0.2.0-rc1"));
        assert!(!version_ok("0.1.9") && !version_ok("0.1.0") && !version_ok("") && !version_ok("junk"));
    }
}
