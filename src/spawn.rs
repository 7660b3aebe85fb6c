//! spawn: starts the provider. clone3(CLONE_PIDFD [| CLONE_INTO_CGROUP]) gives a pidfd that
//! is race-free by construction; where clone3 is refused, fork() + pidfd_open() on the
//! unreaped child, and without pidfds at all a plain child handle (both fallbacks are
//! logged and reported as `fallback` events). The child gets a new process group, the
//! terminal's foreground when guardian had it, and exactly guardian's original signal mask
//! and ignored set before `execvp`; exec failures come back over a close-on-exec pipe and
//! become exit 127 (not found) or 126 (not executable).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::pipe::{PipeFlags, pipe_with};
use serde_json::json;

use crate::events::Events;
use crate::pidref::PidRef;
use crate::sys;

/// Why the provider could not be started, with guardian's exit status.
pub struct SpawnError {
    pub status: i32,
    pub message: String,
}

impl SpawnError {
    fn guardian(message: String) -> SpawnError {
        SpawnError { status: 125, message }
    }
}

pub struct SpawnConfig<'a> {
    pub argv: &'a [OsString],
    pub original_mask: sys::SigSet,
    pub restore_sigchld_ignored: bool,
    /// (guardian's controlling terminal, guardian's process group): hand the terminal's
    /// foreground to the provider's new group if guardian's group still holds it.
    pub take_terminal: Option<(std::os::fd::RawFd, i32)>,
    /// The leaf cgroup directory (for CLONE_INTO_CGROUP) and its `cgroup.procs` (for the
    /// child to join itself when clone3 cannot place it).
    pub cgroup: Option<(BorrowedFd<'a>, BorrowedFd<'a>)>,
}

pub struct Spawned {
    pub provider: PidRef,
    pub pgid: i32,
}

/// Starts the provider; on failure nothing is left running.
pub fn spawn(cfg: &SpawnConfig<'_>, events: &mut Events) -> Result<Spawned, SpawnError> {
    scrub_environment();
    let args: Vec<CString> = cfg
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| SpawnError::guardian("an argument of COMMAND contains a NUL byte".into()))?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let shown = sys::lossy(&args[0]);

    let (err_read, err_write) =
        pipe_with(PipeFlags::CLOEXEC).map_err(|e| SpawnError::guardian(format!("pipe2(O_CLOEXEC) failed: {e}")))?;
    let plan = sys::ExecPlan {
        argv: &argv,
        original_mask: cfg.original_mask,
        restore_sigchld_ignored: cfg.restore_sigchld_ignored,
        take_terminal: cfg.take_terminal,
        error_pipe: err_write.as_raw_fd(),
        join_cgroup_procs: None,
    };

    let forked = match clone3_into_leaf(cfg.cgroup.map(|(dir, _)| dir)) {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM | libc::E2BIG)) => {
            fallback(events, "clone3", &e, "starting the provider with fork() and pidfd_open()");
            let plan = sys::ExecPlan { join_cgroup_procs: cfg.cgroup.map(|(_, procs)| procs.as_raw_fd()), ..plan };
            match sys::fork() {
                Ok(sys::Forked::Child) => sys::exec_provider(&plan),
                Ok(parent) => parent,
                Err(e) => return Err(SpawnError::guardian(format!("fork() failed: {e}"))),
            }
        }
        Err(e) => {
            let hint = if cfg.cgroup.is_some() { " (is the cgroup delegated to this user?)" } else { "" };
            return Err(SpawnError::guardian(format!("clone3() failed: {e}{hint}")));
        }
    };
    let (pid, pidfd) = match forked {
        sys::Forked::Child => sys::exec_provider(&plan),
        sys::Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(err_write);
    // Also from the parent, so the group exists whichever side runs first (job control).
    let _ = sys::setpgid(pid, pid);

    if let Some(failure) = read_exec_error(&err_read) {
        let _ = sys::reap_blocking(pid);
        return Err(exec_error(&shown, failure));
    }

    let pidfd = match pidfd {
        Some(fd) => Some(fd),
        None => match sys::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(e) => {
                fallback(events, "pidfd_open", &e, "waiting on SIGCHLD and signalling the unreaped child by pid");
                None
            }
        },
    };
    Ok(Spawned { provider: PidRef::child(pid, pidfd), pgid: pid })
}

/// clone3, into the leaf if there is one; where guardian may (CAP_SYS_ADMIN), in a new cgroup
/// namespace rooted at the leaf, so that on a cgroup2 mount with `nsdelegate` the kernel
/// refuses the tree any move out of it. A refused namespace is retried without (debug log).
pub(crate) fn clone3_into_leaf(leaf: Option<BorrowedFd<'_>>) -> io::Result<sys::Forked> {
    if leaf.is_some() && crate::cgroup::may_create_namespace() {
        match sys::clone3_flags(leaf, sys::CLONE_NEWCGROUP) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EINVAL | libc::ENOSPC)) => {
                crate::debug!("clone3(CLONE_NEWCGROUP) refused ({e}); the provider shares guardian's cgroup namespace");
            }
            r => return r,
        }
    }
    sys::clone3(leaf)
}

/// The `GUARDIAN_*` variables guardian reads its settings from (every option's `env`, and
/// `GUARDIAN_VERBOSE`). They configure this guardian only: left in the environment, a nested
/// guardian (or any program of the tree that runs one) would take the outer one's settings,
/// e.g. an events fd number that is not open for it.
pub fn consumed_variables() -> Vec<String> {
    use clap::CommandFactory;
    let cmd = crate::cli::Cli::command();
    let mut names: Vec<String> =
        cmd.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()).collect();
    names.push("GUARDIAN_VERBOSE".into());
    names.sort();
    names.dedup();
    names
}

/// Removes the variables of [`consumed_variables`] from the environment the provider inherits.
pub fn scrub_environment() {
    for name in consumed_variables() {
        if std::env::var_os(&name).is_some() {
            crate::debug!("{name} is not passed on to the provider");
            sys::unset_env(&name);
        }
    }
}

/// Reads the child's (stage, errno) report; `None` means exec succeeded (EOF).
fn read_exec_error(fd: &OwnedFd) -> Option<(u8, i32)> {
    let mut msg = [0u8; 5];
    let mut len = 0;
    while len < msg.len() {
        match rustix::io::read(fd, &mut msg[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    (len == msg.len()).then(|| (msg[0], i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]])))
}

fn exec_error(cmd: &str, (stage, errno): (u8, i32)) -> SpawnError {
    let text = sys::errno_text(errno);
    match stage {
        b'e' if errno == libc::ENOENT || errno == libc::ENOTDIR || (errno == libc::EACCES && !in_path(cmd)) => {
            SpawnError {
                status: 127,
                message: format!("cannot run '{cmd}': command not found ({text}); check the name and PATH"),
            }
        }
        b'e' => SpawnError {
            status: 126,
            message: format!(
                "cannot run '{cmd}': {text}; check that it is an executable file (chmod +x) or run it through its interpreter"
            ),
        },
        b'c' => SpawnError::guardian(format!(
            "the provider could not join its cgroup (write to cgroup.procs failed: {text}); check that the cgroup is delegated to this user"
        )),
        b'p' => SpawnError::guardian(format!("setpgid() failed in the provider: {text}")),
        _ => SpawnError::guardian(format!("restoring the signal mask failed in the provider: {text}")),
    }
}

/// Whether a bare command name (no `/`) names an existing file in some `PATH` directory.
/// execvp reports EACCES when any `PATH` directory is not searchable (as a user's `PATH` often
/// holds another user's directories), even if the command exists nowhere: that is "not
/// found" (127), as in the shells, not "not executable" (126). Names with a `/` are taken as
/// found: their EACCES is about the file itself.
fn in_path(cmd: &str) -> bool {
    if cmd.contains('/') {
        return true;
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    std::env::split_paths(&path).any(|dir| {
        let dir = if dir.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { dir };
        std::fs::metadata(dir.join(cmd)).is_ok()
    })
}

/// Reports a refused interface: a debug log line and a `fallback` event.
pub fn fallback(events: &mut Events, what: &str, err: &io::Error, instead: &str) {
    let errno = err.raw_os_error().unwrap_or(0);
    crate::info!("{what} refused ({}: {err}); falling back to {instead}", sys::errno_name(errno));
    events.emit("fallback", json!({"what": what, "errno": sys::errno_name(errno), "detail": instead}));
}

#[cfg(test)]
mod tests {
    #[test]
    fn consumed_variables_are_the_documented_ones() {
        let names = super::consumed_variables();
        for name in ["GUARDIAN_EVENTS_FD", "GUARDIAN_GRACE", "GUARDIAN_CGROUP", "GUARDIAN_VERBOSE", "GUARDIAN_TIMEOUT"]
        {
            assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
        }
        assert!(names.iter().all(|n| n.starts_with("GUARDIAN_")), "{names:?}");
    }
}
