//! tokio: the async equivalent of [`crate::Child`]. The same [`Guard`](crate::child::Guard)
//! owns guardian, so a dropped `AsyncChild` stops the tree without a runtime (even while the
//! runtime shuts down); the same [`State`] reads the events and makes `kill_now`'s decisions.

use std::io;
use std::os::fd::AsFd;
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufReadExt, BufReader, Interest};
use tokio::net::unix::pipe::Receiver;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::child::{Error, Guard, State};
use crate::command::Command;
use crate::events::{Event, Released};

/// A provider running under guardian, for tokio (from [`Command::spawn_async`]). Dropping it
/// without [`AsyncChild::wait`] sends guardian the stop request; that needs no runtime and does
/// not block.
pub struct AsyncChild {
    state: State,
    events: BufReader<Receiver>,
    /// A line being read: kept across a cancelled read (`read_until` is cancel-safe so).
    line: Vec<u8>,
    /// The provider's stdin, when [`Command::stdin`] was piped.
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

impl Command {
    /// [`Command::spawn`] for tokio: resolves once guardian reported `spawned`. Call it within
    /// a runtime (the pipes are registered with its reactor).
    pub async fn spawn_async(&mut self) -> Result<AsyncChild, Error> {
        let s = crate::child::start(self)?;
        Ok(AsyncChild {
            state: State::new(s.guard),
            events: BufReader::new(Receiver::from_owned_fd(s.events)?),
            line: Vec::new(),
            stdin: s.stdin.map(ChildStdin::from_std).transpose()?,
            stdout: s.stdout.map(ChildStdout::from_std).transpose()?,
            stderr: s.stderr.map(ChildStderr::from_std).transpose()?,
        })
    }
}

/// `Guard::opened` on the reactor: resolves once `events` is readable (guardian opened its end
/// and wrote) or guardian exited (its pidfd), then drops the held write end. Cancel-safe: until
/// then it stays held. Without a pidfd for this guardian (the /proc route is taken only where
/// pidfds work, so only when `pidfd_open` failed for it, out of fds say) it waits blocking,
/// as `Guard::opened` does.
async fn opened(events: &Receiver, guard: &mut Guard) -> io::Result<()> {
    if guard.hold.is_none() {
        return Ok(());
    }
    let Some(fd) = &guard.pidfd else {
        guard.opened(events.as_fd());
        return Ok(());
    };
    // Deprecated for an inner value that could close its fd while registered (tokio #8587);
    // an OwnedFd owned by the AsyncFd cannot, and `register_with_interest` would need tokio
    // 1.51.6.
    #[allow(deprecated)]
    let pidfd = AsyncFd::with_interest(fd.try_clone()?, Interest::READABLE)?;
    std::future::poll_fn(|cx| -> Poll<io::Result<()>> {
        if events.poll_read_ready(cx)?.is_ready() || pidfd.poll_read_ready(cx)?.is_ready() {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    })
    .await?;
    guard.hold = None;
    Ok(())
}

impl AsyncChild {
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

    async fn read_event(&mut self) -> Option<Event> {
        if opened(self.events.get_ref(), &mut self.state.guard).await.is_err() {
            // (registering the pidfd failed: wait no longer for guardian's open)
            self.state.guard.hold = None;
        }
        let line = loop {
            match self.events.read_until(b'\n', &mut self.line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&self.line).into_owned();
                    self.line.clear();
                    if !line.trim().is_empty() {
                        break line;
                    }
                }
            }
        };
        Some(self.state.take_line(&line))
    }

    /// The next event; `None` after the last one. Cancel-safe: a line read half-way is kept
    /// for the next call.
    pub async fn next_event(&mut self) -> Option<Event> {
        if self.state.queue.is_empty() {
            self.read_event().await?;
        }
        self.state.queue.pop_front()
    }

    /// The stop request (SIGTERM to guardian): see [`crate::Child::stop`] (right after
    /// `spawn_async` it waits, blocking, for the instants of guardian's exec).
    pub fn stop(&self) -> io::Result<()> {
        self.until_ready();
        self.state.guard.signal()
    }

    fn until_ready(&self) {
        let buffered = !self.events.buffer().is_empty() || !self.line.is_empty();
        self.state.until_ready(self.events.get_ref().as_fd(), buffered);
    }

    /// Kill the tree now: see [`crate::Child::kill_now`].
    pub async fn kill_now(&mut self) -> io::Result<()> {
        self.until_ready();
        if self.state.kill_first()? {
            while let Some(event) = self.read_event().await {
                if self.state.kill_on(&event)? {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Waits until guardian released the tree and exited: see [`crate::Child::wait`].
    pub async fn wait(mut self) -> Result<Released, Error> {
        drop(self.stdin.take());
        while !self.state.tracker.finished() && self.read_event().await.is_some() {}
        let status = self.reap().await?;
        self.state.tracker.outcome(status)
    }

    /// Whether the tree was released (or guardian failed): the last event was read.
    pub fn finished(&self) -> bool {
        self.state.tracker.finished()
    }

    pub(crate) fn reaped(&self) -> bool {
        self.state.guard.child.is_none()
    }

    pub(crate) async fn reap(&mut self) -> io::Result<std::process::ExitStatus> {
        if let Some(status) = self.state.reaped {
            return Ok(status);
        }
        let mut child = self.state.guard.child.take().ok_or_else(|| io::Error::other("guardian was already reaped"))?;
        let status = match child.try_wait()? {
            Some(status) => status,
            // guardian exits right after its last event; the wait is short, but blocking.
            None => tokio::task::spawn_blocking(move || child.wait()).await.map_err(io::Error::other)??,
        };
        self.state.reaped = Some(status);
        Ok(status)
    }
}
