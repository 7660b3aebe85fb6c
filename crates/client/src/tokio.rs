//! tokio: `tokio::process::Command` and `Child` under guardian ([`Command`], [`Child`]), the
//! same methods with the same async-ness (`spawn` is not async, `wait` and `kill` are, `wait`
//! takes `&mut self` and is cancel-safe, so `tokio::select!` with `stop()` in another branch
//! works). The same `Guard` (state.rs) owns guardian, so a dropped `Child` stops
//! the tree without a runtime (even while the runtime shuts down); the same
//! `State` reads the events.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{ExitStatus, Output};
use std::task::Poll;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, BufReader, Interest};
use tokio::net::unix::pipe::Receiver;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::child::{INHERIT, OUTPUT, Started, start};
use crate::command::{Builder, builder_methods};
use crate::error::Error;
use crate::events::{Event, Released};
use crate::state::{ReleasedHandle, State};

/// `tokio::process::Command` under guardian: the same builder (std's methods, tokio's
/// `kill_on_drop`) plus guardian's options; `spawn` returns a [`Child`].
#[derive(Debug)]
pub struct Command {
    pub(crate) b: Builder,
}

impl Command {
    builder_methods!();

    /// As `tokio::process::Command::spawn` (not async; call it within a runtime: the pipes are
    /// registered with its reactor). Fails as [`crate::Command::spawn`] does.
    pub fn spawn(&mut self) -> io::Result<Child> {
        Child::new(start(&mut self.b, INHERIT)?)
    }

    /// As `tokio::process::Command::output`.
    pub async fn output(&mut self) -> io::Result<Output> {
        Child::new(start(&mut self.b, OUTPUT)?)?.wait_with_output().await
    }

    /// As `tokio::process::Command::status`.
    pub async fn status(&mut self) -> io::Result<ExitStatus> {
        Child::new(start(&mut self.b, INHERIT)?)?.wait().await
    }
}

impl From<std::process::Command> for Command {
    fn from(cmd: std::process::Command) -> Command {
        Command { b: Builder::from_std(&cmd) }
    }
}

/// A host's `tokio::process::Command`, as [`crate::Command`]'s `From<std::process::Command>`
/// takes it, with tokio's `kill_on_drop`.
impl From<tokio::process::Command> for Command {
    fn from(cmd: tokio::process::Command) -> Command {
        let mut b = Builder::from_std(cmd.as_std());
        b.kill_on_drop = cmd.get_kill_on_drop();
        Command { b }
    }
}

impl From<crate::Command> for Command {
    fn from(cmd: crate::Command) -> Command {
        Command { b: cmd.b }
    }
}

impl From<Command> for crate::Command {
    fn from(cmd: Command) -> crate::Command {
        crate::Command { b: cmd.b }
    }
}

impl crate::Command {
    /// [`crate::Command::spawn`] for tokio, resolving once guardian runs (the 0.1 name; the
    /// same as `tokio::Command::from(cmd).spawn()`).
    pub async fn spawn_async(&mut self) -> io::Result<Child> {
        Child::new(start(&mut self.b, INHERIT)?)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::Command {}
    impl Sealed for super::Command {}
}

/// Either `Command` ([`crate::Command`], [`Command`]): what `GuardianTransport::spawn` takes.
pub trait AnyCommand: sealed::Sealed {
    /// Spawns with stdin and stdout piped, for tokio.
    #[doc(hidden)]
    fn spawn_piped(&mut self) -> io::Result<Child>;
}

impl AnyCommand for crate::Command {
    fn spawn_piped(&mut self) -> io::Result<Child> {
        self.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        Child::new(start(&mut self.b, INHERIT)?)
    }
}

impl AnyCommand for Command {
    fn spawn_piped(&mut self) -> io::Result<Child> {
        self.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        self.spawn()
    }
}

/// A provider running under guardian, for tokio: `tokio::process::Child`'s methods, with
/// guardian's beside them (see [`crate::Child`]). Dropping it without a wait sends guardian
/// the stop request (the kill request with `kill_on_drop`); that needs no runtime and does
/// not block.
pub struct Child {
    state: State,
    events: BufReader<Receiver>,
    /// A line being read: kept across a cancelled read (`read_until` is cancel-safe so).
    line: Vec<u8>,
    /// guardian's pidfd on the reactor: readable once guardian exited.
    exit: Option<AsyncFd<OwnedFd>>,
    /// The provider's stdin, when [`Command::stdin`] was piped.
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// The 0.1 name of [`Child`].
pub type AsyncChild = Child;

impl Child {
    fn new(s: Started) -> io::Result<Child> {
        let exit = match &s.guard.pidfd {
            // Deprecated for an inner value that could close its fd while registered (tokio
            // #8587); an OwnedFd owned by the AsyncFd cannot, and `register_with_interest`
            // would need tokio 1.51.6.
            #[allow(deprecated)]
            Some(fd) => Some(AsyncFd::with_interest(fd.try_clone()?, Interest::READABLE)?),
            None => None,
        };
        Ok(Child {
            state: State::new(s.guard),
            events: BufReader::new(Receiver::from_owned_fd(s.events)?),
            line: Vec::new(),
            exit,
            stdin: s.stdin.map(ChildStdin::from_std).transpose()?,
            stdout: s.stdout.map(ChildStdout::from_std).transpose()?,
            stderr: s.stderr.map(ChildStderr::from_std).transpose()?,
        })
    }

    /// guardian's pid, as `tokio::process::Child::id`: `None` once it was reaped.
    pub fn id(&self) -> Option<u32> {
        self.state.reaped.is_none().then(|| self.state.guardian_pid())
    }
    /// guardian's pid.
    pub fn guardian_pid(&self) -> u32 {
        self.state.guardian_pid()
    }
    /// The provider's pid, once the `spawned` event was read: see
    /// [`crate::Child::provider_pid`].
    pub fn provider_pid(&self) -> Option<u32> {
        self.state.provider_pid()
    }

    /// Waits for the `spawned` event: see [`crate::Child::wait_spawned`].
    pub async fn wait_spawned(&mut self) -> Result<u32, Error> {
        loop {
            if let Some(answer) = self.state.spawned() {
                return answer;
            }
            if self.read_event().await.is_none() {
                return Err(Error::Ended(self.reap().await?));
            }
        }
    }

    /// `Guard::opened` on the reactor: resolves once the events pipe is readable (guardian
    /// opened its end and wrote) or guardian exited, then drops the held write end.
    /// Cancel-safe: until then it stays held. Without a pidfd it waits blocking, as
    /// `Guard::opened` does.
    async fn opened(&mut self) {
        if self.state.guard.hold.is_none() {
            return;
        }
        let Some(exit) = &self.exit else {
            self.state.guard.opened(self.events.get_ref().as_fd());
            return;
        };
        let events = self.events.get_ref();
        let _ = std::future::poll_fn(|cx| -> Poll<io::Result<()>> {
            if events.poll_read_ready(cx)?.is_ready() || exit.poll_read_ready(cx)?.is_ready() {
                return Poll::Ready(Ok(()));
            }
            Poll::Pending
        })
        .await;
        self.state.guard.hold = None;
    }

    async fn read_event(&mut self) -> Option<Event> {
        self.opened().await;
        loop {
            match self.events.read_until(b'\n', &mut self.line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&self.line).into_owned();
                    self.line.clear();
                    if let Some(event) = self.state.take_line(&line) {
                        return Some(event);
                    }
                }
            }
        }
    }

    /// The next event; `None` after the last one. Cancel-safe: a line read half-way is kept
    /// for the next call.
    pub async fn next_event(&mut self) -> Option<Event> {
        if self.state.queue.is_empty() {
            self.read_event().await?;
        }
        self.state.queue.pop_front()
    }

    fn until_ready(&self) {
        let buffered = !self.events.buffer().is_empty() || !self.line.is_empty();
        self.state.until_ready(self.events.get_ref().as_fd(), buffered);
    }

    /// The stop with a grace (SIGTERM to guardian): see [`crate::Child::stop`]. Takes `&self`,
    /// so it can run in one `tokio::select!` branch while another waits.
    pub fn stop(&self) -> io::Result<()> {
        self.until_ready();
        self.state.guard.stop()
    }

    /// As `tokio::process::Child::start_kill`: the kill request (SIGKILL to the provider and
    /// its tree now); `Ok(())` once guardian exited.
    pub fn start_kill(&mut self) -> io::Result<()> {
        self.until_ready();
        self.state.guard.kill()?;
        self.state.kill_pending |= self.state.reaped.is_none();
        Ok(())
    }

    /// Closes the provider's stdin, as tokio's `wait` does first (after a kill request, once
    /// the provider was reaped: see `State::stdin_may_close`).
    async fn close_stdin(&mut self) {
        while !self.state.stdin_may_close() && self.read_event().await.is_some() {}
        drop(self.stdin.take());
    }

    /// As `tokio::process::Child::kill`: [`Child::start_kill`], then [`Child::wait`]; the
    /// status is then "signal 9", as tokio's.
    pub async fn kill(&mut self) -> io::Result<()> {
        self.start_kill()?;
        self.wait().await?;
        Ok(())
    }

    /// As `tokio::process::Child::wait`: closes the provider's stdin, then waits until guardian
    /// released the tree and exited; guardian's status (the provider's). Cancel-safe: a
    /// cancelled wait loses nothing, and the next call goes on.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.close_stdin().await;
        while self.state.reaped.is_none() && !self.state.tracker.finished() && self.read_event().await.is_some() {}
        self.reap().await?;
        self.state.status()
    }

    /// As `tokio::process::Child::try_wait`: guardian's status if it exited (its events are
    /// then read to their end), `None` if it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.state.reaped.is_none() {
            let exited = match self.state.guard.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => return Err(io::Error::other("guardian was already reaped")),
            };
            let Some(status) = exited else { return Ok(None) };
            // guardian exited: what it wrote is in the pipe, and nothing more comes.
            self.state.guard.hold = None;
            let mut rest = std::mem::take(&mut self.line);
            rest.extend_from_slice(self.events.buffer());
            let fd = self.events.get_ref().as_fd().try_clone_to_owned()?;
            rest.extend(drain_nonblocking(&fd));
            let consumed = self.events.buffer().len();
            std::pin::Pin::new(&mut self.events).consume(consumed);
            for line in rest.split(|&b| b == b'\n') {
                self.state.take_line(&String::from_utf8_lossy(line));
            }
            self.state.finish(status);
        }
        self.state.status().map(Some)
    }

    /// As `tokio::process::Child::wait_with_output`.
    pub async fn wait_with_output(mut self) -> io::Result<Output> {
        self.close_stdin().await;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut stdout, mut stderr) = (self.stdout.take(), self.stderr.take());
        let read_out = async {
            if let Some(o) = stdout.as_mut() {
                o.read_to_end(&mut out).await?;
            }
            io::Result::Ok(())
        };
        let read_err = async {
            if let Some(e) = stderr.as_mut() {
                e.read_to_end(&mut err).await?;
            }
            io::Result::Ok(())
        };
        // (tokio::join! needs tokio's `macros` feature: the three polled by hand)
        let (mut wait, mut read_out, mut read_err) =
            (std::pin::pin!(self.wait()), std::pin::pin!(read_out), std::pin::pin!(read_err));
        let (mut status, mut a, mut b) = (None, None, None);
        std::future::poll_fn(|cx| {
            // Each polled every time: the provider may wait for its pipes to be read.
            if status.is_none()
                && let Poll::Ready(v) = wait.as_mut().poll(cx)
            {
                status = Some(v);
            }
            if a.is_none()
                && let Poll::Ready(v) = read_out.as_mut().poll(cx)
            {
                a = Some(v);
            }
            if b.is_none()
                && let Poll::Ready(v) = read_err.as_mut().poll(cx)
            {
                b = Some(v);
            }
            if status.is_some() && a.is_some() && b.is_some() { Poll::Ready(()) } else { Poll::Pending }
        })
        .await;
        a.unwrap_or(Ok(()))?;
        b.unwrap_or(Ok(()))?;
        let status = status.unwrap_or_else(|| Err(io::Error::other("not waited")))?;
        Ok(Output { status, stdout: out, stderr: err })
    }

    /// Whether the tree was released (or guardian failed): the last event was read.
    pub fn finished(&self) -> bool {
        self.state.tracker.finished()
    }

    /// guardian's `released` event once [`Child::wait`] saw guardian exit: see
    /// [`crate::Child::released`].
    pub fn released(&self) -> Option<&Released> {
        self.state.released()
    }

    /// Waits and returns the `released` event or why there is none: see
    /// [`crate::Child::wait_released`].
    pub async fn wait_released(&mut self) -> Result<Released, Error> {
        match self.wait().await {
            Ok(_) => {}
            Err(e) if self.state.reaped.is_none() => return Err(Error::Io(e)),
            Err(_) => {}
        }
        self.state.outcome()
    }

    /// A handle on the `released` figures that outlives this one: see
    /// [`crate::Child::released_handle`].
    pub fn released_handle(&self) -> ReleasedHandle {
        self.state.handle()
    }

    /// Reaps guardian once it exited: on its pidfd's readiness (cancel-safe: nothing is taken
    /// before the status is there), or every 10 ms without a pidfd.
    pub(crate) async fn reap(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.state.reaped {
                return Ok(status);
            }
            let child =
                self.state.guard.child.as_mut().ok_or_else(|| io::Error::other("guardian was already reaped"))?;
            if let Some(status) = child.try_wait()? {
                self.state.guard.hold = None;
                self.state.finish(status);
                continue;
            }
            match &self.exit {
                Some(exit) => exit.readable().await?.retain_ready(),
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

/// The bytes a non-blocking pipe holds now, to its end (its writers are gone).
fn drain_nonblocking(fd: &OwnedFd) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return out,
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let mut buffered = std::mem::take(&mut self.line);
        buffered.extend_from_slice(self.events.buffer());
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
