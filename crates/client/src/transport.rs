//! transport: rmcp's client [`Transport`] over a provider spawned under guardian. rmcp's own
//! `TokioChildProcess` SIGKILLs the process it started when dropped, which skips guardian's
//! grace and its `released` event (guardian's sentinel still gets the tree torn down); this
//! one only ever sends guardian the stop request.

use std::future::Future;
use std::io;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::process::{ChildStdin, ChildStdout};

use crate::error::Error;
use crate::state::ReleasedHandle;
use crate::tokio::{AnyCommand, Child};

/// An MCP server's stdio as rmcp's client transport, with the server under guardian:
/// `().serve(GuardianTransport::spawn(&mut cmd).await?).await?`.
///
/// `close()` (rmcp's `cancel()`) closes the server's stdin and gives it `close_timeout` to exit,
/// then asks guardian to stop the tree (SIGTERM, the grace, SIGKILL), and waits until guardian
/// released it. Dropped without a close (a dropped client, a runtime shutting down), it sends
/// guardian the stop request at once and does not block.
pub struct GuardianTransport {
    child: Child,
    io: AsyncRwTransport<RoleClient, ChildStdout, ChildStdin>,
    close_timeout: Duration,
}

impl GuardianTransport {
    /// Spawns `cmd` under guardian with piped stdin and stdout (stderr as `cmd` says). Takes
    /// either `Command` (`treeguardian_client::Command` or `treeguardian_client::tokio::Command`).
    pub async fn spawn(cmd: &mut impl AnyCommand) -> Result<GuardianTransport, Error> {
        let mut child = cmd.spawn_piped().map_err(|e| match e.downcast::<Error>() {
            Ok(e) => e,
            Err(e) => Error::Io(e),
        })?;
        // A server that cannot start is spawn's error here (guardian's 126 or 127, with its
        // message), not a closed connection at the first request.
        child.wait_spawned().await?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Error::Io(io::Error::other("the server's stdio was not piped")));
        };
        let io = AsyncRwTransport::new_client(stdout, stdin);
        Ok(GuardianTransport { child, io, close_timeout: Duration::from_secs(1) })
    }

    /// How long `close()` lets the server exit on its own after its stdin closed (default 1 s)
    /// before it asks guardian to stop the tree.
    pub fn close_timeout(mut self, timeout: Duration) -> GuardianTransport {
        self.close_timeout = timeout;
        self
    }

    /// guardian and its provider.
    pub fn child(&self) -> &Child {
        &self.child
    }

    /// The `released` figures, reachable after `cancel()` (which consumes the transport):
    /// take the handle before `serve`, read it after. `cancel()` returns once guardian
    /// released the tree, so it is filled then.
    pub fn released_handle(&self) -> ReleasedHandle {
        self.child.released_handle()
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        let _ = self.io.close().await;
        if tokio::time::timeout(self.close_timeout, drain(&mut self.child)).await.is_err() {
            self.child.stop()?;
            // guardian's grace bounds this: then it SIGKILLs the tree and releases it.
            drain(&mut self.child).await;
        }
        if self.child.id().is_none() {
            return Ok(()); // a second close()
        }
        self.child.reap().await.map(drop)
    }
}

/// Reads events until the last one (`released`, `error`) or the end of the stream.
async fn drain(child: &mut Child) {
    while !child.finished() && child.next_event().await.is_some() {}
}

impl Transport<RoleClient> for GuardianTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        self.io.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.io.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), io::Error>> + Send {
        self.shutdown()
    }
}
