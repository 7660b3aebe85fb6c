//! tokio: the async equivalent of [`crate::Child`]. The same [`Guard`](crate::child::Guard)
//! owns guardian, so a dropped `AsyncChild` stops the tree without a runtime (even while the
//! runtime shuts down); the same [`State`] reads the events and makes `kill_now`'s decisions.

use std::io;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe::Receiver;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::child::{Error, Starting, State};
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
        let events = Receiver::from_owned_fd(s.events)?;
        let mut child = AsyncChild {
            state: State::new(s.guard),
            events: BufReader::new(events),
            line: Vec::new(),
            stdin: s.stdin.map(ChildStdin::from_std).transpose()?,
            stdout: s.stdout.map(ChildStdout::from_std).transpose()?,
            stderr: s.stderr.map(ChildStderr::from_std).transpose()?,
        };
        loop {
            let event = child.read_event().await;
            match child.state.starting(event) {
                Starting::Spawned => return Ok(child),
                Starting::Failed(e) => {
                    drop(child.stdin.take());
                    let _ = child.reap().await;
                    return Err(e);
                }
                Starting::Ended => return Err(Error::Ended(child.reap().await?)),
                Starting::More => {}
            }
        }
    }
}

impl AsyncChild {
    /// guardian's pid.
    pub fn guardian_pid(&self) -> u32 {
        self.state.guardian_pid()
    }
    /// The provider's pid (from the `spawned` event).
    pub fn provider_pid(&self) -> u32 {
        self.state.provider_pid()
    }

    async fn read_event(&mut self) -> Option<Event> {
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

    /// The stop request (SIGTERM to guardian). Does not wait.
    pub fn stop(&self) -> io::Result<()> {
        self.state.guard.signal()
    }

    /// Kill the tree now: see [`crate::Child::kill_now`].
    pub async fn kill_now(&mut self) -> io::Result<()> {
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
        let mut child = self.state.guard.child.take().ok_or_else(|| io::Error::other("guardian was already reaped"))?;
        match child.try_wait()? {
            Some(status) => Ok(status),
            // guardian exits right after its last event; the wait is short, but blocking.
            None => tokio::task::spawn_blocking(move || child.wait()).await.map_err(io::Error::other)?,
        }
    }
}
