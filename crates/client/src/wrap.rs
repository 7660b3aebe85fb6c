//! wrap: process-wrap's tokio wrappers (feature `process-wrap`), for hosts whose code takes a
//! `process_wrap::tokio::CommandWrap`, such as rmcp's `TokioChildProcess`. [`Guardian`] is a
//! `CommandWrapper`: at `pre_spawn` it replaces the wrapped command by guardian with that
//! command as its provider (program, args, environment, directory, uid, gid, group and
//! piped/null/inherited stdio carry over, as `From<std::process::Command>` takes them), with
//! the events pipe inherited (`--events-fd`). Its `wrap_child` returns [`GuardianChild`], whose
//! `start_kill` and `kill` are the kill request, `signal(SIGTERM)` the stop request, and whose
//! drop sends the stop request (the kill request under `kill_on_drop`) instead of leaving the
//! tree. A tokio task reads the events for the [`ReleasedHandle`], the version check and the
//! log. `From<treeguardian_client::tokio::Command> for CommandWrap` does both for a driver
//! command: `TokioChildProcess::new(cmd)` with `cmd` the driver's `Command`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};

use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};
use rustix::process::{Pid, PidfdFlags, Signal};

use crate::command::Builder;
use crate::driver;
use crate::state::{ReleasedHandle, Tracker, parse, version_ok, wait_ready};

/// process-wrap's `CommandWrapper` that runs the wrapped command under guardian:
/// `CommandWrap::from(cmd).wrap(Guardian::new())`. Its options (grace, ...) come from a
/// driver `Command` given to [`Guardian::with`].
#[derive(Debug, Default)]
pub struct Guardian {
    /// A driver command's settings (guardian's options, kill_on_drop); its program and
    /// arguments are used when the wrapped command is only a placeholder.
    template: Option<Builder>,
    /// Take program, args, environment from the wrapped command (not the template).
    from_wrapped: bool,
    events: Option<OwnedFd>,
    /// The events pipe's write end from `pre_spawn` to the spawn (guardian inherits it).
    write: Option<OwnedFd>,
    handle: ReleasedHandle,
    path: std::path::PathBuf,
    kill_on_drop: bool,
}

impl Guardian {
    /// The wrapped command under guardian with guardian's defaults (found as the crate finds
    /// it: `$GUARDIAN_BIN`, then `$PATH`).
    pub fn new() -> Guardian {
        Guardian { from_wrapped: true, ..Guardian::default() }
    }

    /// The wrapped command under guardian with `options`' guardian settings (`guardian`,
    /// `grace`, `timeout`, ..., `kill_on_drop`); its program and arguments are not used.
    pub fn with(options: crate::tokio::Command) -> Guardian {
        Guardian { template: Some(options.b), from_wrapped: true, ..Guardian::default() }
    }

    /// The `released` figures of the child this wrapper spawns.
    pub fn released_handle(&self) -> ReleasedHandle {
        self.handle.clone()
    }
}

impl CommandWrapper for Guardian {
    fn pre_spawn(&mut self, command: &mut tokio::process::Command, _core: &CommandWrap) -> io::Result<()> {
        let wrapped = Builder::from_std(command.as_std());
        let mut b = match self.template.take() {
            Some(mut t) if self.from_wrapped => {
                t.program = wrapped.program;
                t.args = wrapped.args;
                t.env = wrapped.env;
                t.cwd = wrapped.cwd.or(t.cwd);
                t.uid = wrapped.uid.or(t.uid);
                t.gid = wrapped.gid.or(t.gid);
                t.pgroup = wrapped.pgroup.or(t.pgroup);
                (t.stdin, t.stdout, t.stderr) = (wrapped.stdin, wrapped.stdout, wrapped.stderr);
                t
            }
            Some(mut t) => {
                // A driver command: stdio set on the placeholder (rmcp pipes stdin and stdout)
                // goes to guardian.
                t.stdin = wrapped.stdin.or(t.stdin);
                t.stdout = wrapped.stdout.or(t.stdout);
                t.stderr = wrapped.stderr.or(t.stderr);
                t
            }
            None => wrapped,
        };
        b.kill_on_drop |= command.get_kill_on_drop();
        let guardian = crate::child::preflight(&b)?;
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
        let fd = write.as_raw_fd().to_string();
        let mut std_cmd = b.std_command(&guardian, (crate::command::EVENTS_FD, std::ffi::OsStr::new(&fd)));
        for (set, io) in [(b.stdin.take(), 0), (b.stdout.take(), 1), (b.stderr.take(), 2)] {
            if let Some(stdio) = set {
                match io {
                    0 => std_cmd.stdin(stdio),
                    1 => std_cmd.stdout(stdio),
                    _ => std_cmd.stderr(stdio),
                };
            }
        }
        crate::sys::inherit_in_child(&mut std_cmd, write.as_raw_fd());
        let mut replaced = tokio::process::Command::from(std_cmd);
        // The drop is [`GuardianChild`]'s: the stop request, never SIGKILL to guardian.
        replaced.kill_on_drop(false);
        *command = replaced;
        // The write end must reach the spawn; `post_spawn` closes it.
        self.events = Some(read);
        self.path = guardian;
        self.kill_on_drop = b.kill_on_drop;
        self.write = Some(write);
        Ok(())
    }

    fn post_spawn(
        &mut self,
        _command: &mut tokio::process::Command,
        _child: &mut tokio::process::Child,
        _core: &CommandWrap,
    ) -> io::Result<()> {
        self.write = None;
        Ok(())
    }

    fn wrap_child(&mut self, child: Box<dyn ChildWrapper>, _core: &CommandWrap) -> io::Result<Box<dyn ChildWrapper>> {
        self.write = None;
        let pid = child.id().ok_or_else(|| io::Error::other("guardian has no pid"))?;
        // guardian is our unreaped child: its pid cannot be reused before the pidfd exists.
        let pidfd = rustix::process::pidfd_open(
            Pid::from_raw(pid as i32).ok_or_else(|| io::Error::other("pid 0"))?,
            PidfdFlags::empty(),
        )
        .ok()
        .map(Arc::new);
        let gc = GuardianChild {
            inner: child,
            pid,
            pidfd,
            kill_on_drop: self.kill_on_drop,
            handle: self.handle.clone(),
            refused: Arc::default(),
            path: self.path.clone(),
            exited: false,
        };
        if let Some(read) = self.events.take() {
            gc.read_events(read);
        }
        Ok(Box::new(gc))
    }
}

/// A driver `Command` as process-wrap's `CommandWrap`, wrapped by [`Guardian`]: a host
/// passing a `CommandWrap` (rmcp's `TokioChildProcess::new`) takes it as is.
impl From<crate::tokio::Command> for CommandWrap {
    fn from(cmd: crate::tokio::Command) -> CommandWrap {
        let mut wrap = CommandWrap::from(tokio::process::Command::new(&cmd.b.program));
        wrap.wrap(Guardian { template: Some(cmd.b), from_wrapped: false, ..Guardian::default() });
        wrap
    }
}

/// guardian's process as process-wrap's `ChildWrapper` (see [`Guardian`]).
#[derive(Debug)]
pub struct GuardianChild {
    inner: Box<dyn ChildWrapper>,
    pid: u32,
    pidfd: Option<Arc<OwnedFd>>,
    kill_on_drop: bool,
    handle: ReleasedHandle,
    /// The version check's refusal: `Some(found)`.
    refused: Arc<Mutex<Option<Option<String>>>>,
    path: std::path::PathBuf,
    exited: bool,
}

fn send(pidfd: Option<&OwnedFd>, pid: u32, signal: Signal) -> io::Result<()> {
    let sent = match pidfd {
        Some(fd) => rustix::process::pidfd_send_signal(fd, signal),
        None => match Pid::from_raw(pid as i32) {
            Some(pid) => rustix::process::kill_process(pid, signal),
            None => return Ok(()),
        },
    };
    match sent {
        Err(rustix::io::Errno::SRCH) => Ok(()),
        other => other.map_err(io::Error::from),
    }
}

impl GuardianChild {
    /// The `released` figures (filled when the events end).
    pub fn released_handle(&self) -> ReleasedHandle {
        self.handle.clone()
    }

    fn request(&self, signal: Signal) -> io::Result<()> {
        if self.exited {
            return Ok(());
        }
        wait_ready(self.pid, self.pidfd.as_deref());
        send(self.pidfd.as_deref(), self.pid, signal)
    }

    /// A task reads the events: the version check, the log, and the handle's figures.
    fn read_events(&self, read: OwnedFd) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (handle, refused, pidfd, pid) =
            (self.handle.clone(), Arc::clone(&self.refused), self.pidfd.clone(), self.pid);
        rt.spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let Ok(rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(read) else { return };
            let mut lines = tokio::io::BufReader::new(rx).lines();
            let mut tracker = Tracker::default();
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(event) = parse(&line) else { continue };
                #[cfg(feature = "tracing")]
                crate::state::log(&event, pid);
                if let crate::Event::Spawned { version, .. } = &event
                    && !version.as_deref().is_some_and(version_ok)
                {
                    if let Ok(mut r) = refused.lock() {
                        *r = Some(version.clone());
                    }
                    let _ = send(pidfd.as_deref(), pid, Signal::TERM);
                }
                tracker.observe(&event);
            }
            handle.0.finish(tracker.released.take(), None);
        });
    }

    fn refusal(&self) -> Option<io::Error> {
        let found = self.refused.lock().ok()?.clone()?;
        Some(crate::Error::Version { guardian: self.path.clone(), found, min: driver::MIN_GUARDIAN_VERSION }.into())
    }
}

impl ChildWrapper for GuardianChild {
    fn inner(&self) -> &dyn ChildWrapper {
        self.inner.as_ref()
    }
    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self.inner.as_mut()
    }
    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        // (the stop on drop stays with this wrapper: taking the inner child out ends it)
        let mut this = self;
        this.exited = true;
        let inner: Box<dyn ChildWrapper> = Box::new(NoChild);
        std::mem::replace(&mut this.inner, inner)
    }
    /// The kill request: SIGKILL to the provider and its tree now.
    fn start_kill(&mut self) -> io::Result<()> {
        self.request(crate::sys::kill_request_signal())
    }
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let status = self.inner.try_wait()?;
        self.exited |= status.is_some();
        if let Some(e) = status.and_then(|_| self.refusal()) {
            return Err(e);
        }
        Ok(status)
    }
    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(async move {
            let status = self.inner.wait().await?;
            self.exited = true;
            if let Some(e) = self.refusal() {
                return Err(e);
            }
            Ok(status)
        })
    }
    /// SIGTERM is the stop request, SIGKILL the kill request; other signals go to guardian,
    /// which forwards them to the provider.
    fn signal(&self, sig: i32) -> io::Result<()> {
        match sig {
            libc::SIGTERM => self.request(Signal::TERM),
            libc::SIGKILL => self.request(crate::sys::kill_request_signal()),
            other => match Signal::from_named_raw(other) {
                Some(signal) => self.request(signal),
                None => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            },
        }
    }
}

impl Drop for GuardianChild {
    fn drop(&mut self) {
        if self.exited || matches!(self.inner.try_wait(), Ok(Some(_))) {
            return;
        }
        let signal = if self.kill_on_drop { crate::sys::kill_request_signal() } else { Signal::TERM };
        let _ = send(self.pidfd.as_deref(), self.pid, signal);
        // The inner tokio Child, dropped unreaped, is reaped by tokio's orphan queue.
    }
}

/// What `into_inner` leaves behind.
#[derive(Debug)]
struct NoChild;

impl ChildWrapper for NoChild {
    fn inner(&self) -> &dyn ChildWrapper {
        self
    }
    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self
    }
    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self
    }
    fn id(&self) -> Option<u32> {
        None
    }
    fn start_kill(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        Err(io::Error::other("the child was taken out of its guardian wrapper"))
    }
    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(async { Err(io::Error::other("the child was taken out of its guardian wrapper")) })
    }
    fn signal(&self, _sig: i32) -> io::Result<()> {
        Ok(())
    }
}
