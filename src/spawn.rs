//! spawn: starts the provider. clone3(CLONE_PIDFD [| CLONE_INTO_CGROUP]) gives a pidfd that
//! is race-free by construction; where clone3 is refused, fork() + pidfd_open() on the
//! unreaped child, and without pidfds at all a plain child handle (both fallbacks are
//! logged and reported as `fallback` events). The child gets a new process group, the
//! terminal's foreground when guardian had it, and exactly guardian's original signal mask
//! and ignored set before `execvp`; exec failures come back over a close-on-exec pipe and
//! become exit 127 (not found) or 126 (not executable).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::pipe::{PipeFlags, pipe_with};

use crate::events::Events;
use crate::exit::Failure;
use crate::pidref::PidRef;
use crate::sys;

pub struct SpawnConfig<'a> {
    pub argv: &'a [OsString],
    pub original_mask: sys::SigSet,
    pub restore_sigchld_ignored: bool,
    /// (guardian's controlling terminal, guardian's process group): hand the terminal's
    /// foreground to the provider's new group if guardian's group still holds it.
    pub take_terminal: Option<(std::os::fd::RawFd, i32)>,
    /// Start the provider in a process group of its own (job control, `--forward-to group`).
    /// Not when guardian's own group lives outside its PID namespace: guardian could then
    /// never tell whether that group holds the terminal, so the provider stays in it and the
    /// kernel's foreground rules apply to both as to one job.
    pub new_group: bool,
    /// The leaf cgroup directory (for CLONE_INTO_CGROUP) and its `cgroup.procs` (for the
    /// child to join itself when clone3 cannot place it).
    pub cgroup: Option<(BorrowedFd<'a>, BorrowedFd<'a>)>,
}

pub struct Spawned {
    pub provider: PidRef,
    pub pgid: i32,
}

/// Starts the provider; on failure nothing is left running.
pub fn spawn(cfg: &SpawnConfig<'_>, events: &mut Events) -> Result<Spawned, Failure> {
    scrub_environment()?;
    let args: Vec<CString> = cfg
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| Failure::guardian("an argument of COMMAND contains a NUL byte"))?;
    let shown = args.first().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();

    let (err_read, err_write) = pipe_with(PipeFlags::CLOEXEC).map_err(|e| {
        Failure::guardian(format!("pipe2(O_CLOEXEC) failed: {}", crate::errno::explain(&io::Error::from(e))))
    })?;
    let mut plan = sys::ExecPlan::new(&args, cfg.original_mask, err_write.as_fd());
    plan.restore_sigchld_ignored = cfg.restore_sigchld_ignored;
    plan.take_terminal = cfg.take_terminal;
    plan.new_group = cfg.new_group;

    let child = match clone3_into_leaf(cfg.cgroup.map(|(dir, _)| dir), |how| sys::spawn_child(how, &plan)) {
        Ok(child) => child,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM | libc::E2BIG)) => {
            events.fallback("clone3", &e, "starting the provider with fork() and pidfd_open()");
            plan.join_cgroup_procs = cfg.cgroup.map(|(_, procs)| procs);
            sys::spawn_child(sys::Start::Fork, &plan).map_err(|e| Failure::guardian(format!("fork() failed: {e}")))?
        }
        Err(e) => {
            // A resource error (EMFILE: the fd limit) is named as such, never blamed on the cgroup.
            if e.raw_os_error().is_some_and(crate::errno::is_resource) {
                return Err(Failure::guardian(format!("clone3() failed: {}", crate::errno::explain(&e))));
            }
            let hint = if cfg.cgroup.is_some() { " (is the cgroup delegated to this user?)" } else { "" };
            return Err(Failure::guardian(format!("clone3() failed: {e}{hint}")));
        }
    };
    let sys::Child { pid, pidfd } = child;
    drop(plan);
    drop(err_write);
    // Also from the parent, so the group exists whichever side runs first (job control).
    if cfg.new_group {
        let _ = sys::setpgid(pid, pid);
    }

    if let Some(failure) = read_exec_error(&err_read) {
        // The child may have taken the terminal's foreground before exec failed: give it back
        // to guardian's group, or the caller (a script without job control) finds its terminal
        // held by a group that no longer exists.
        if let Some((tty, guardian_pgrp)) = cfg.take_terminal
            && sys::tcgetpgrp(tty).ok() == Some(pid)
            && let Err(e) = sys::tcsetpgrp(tty, guardian_pgrp)
        {
            crate::log::debug!("taking the terminal back after the failed exec failed: {e}");
        }
        let _ = sys::reap_blocking(pid);
        return Err(exec_error(&shown, failure));
    }

    let pidfd = match pidfd {
        Some(fd) => Some(fd),
        None => match sys::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(e) => {
                events.fallback("pidfd_open", &e, "waiting on SIGCHLD and signalling the unreaped child by pid");
                None
            }
        },
    };
    let pgid = if cfg.new_group { pid } else { sys::getpgrp() };
    Ok(Spawned { provider: PidRef::child(pid, pidfd), pgid })
}

/// clone3, into the leaf if there is one; where guardian may (CAP_SYS_ADMIN), in a new cgroup
/// namespace rooted at the leaf, so that on a cgroup2 mount with `nsdelegate` the kernel
/// refuses the tree any move out of it. A refused namespace is retried without (debug log).
/// `start` starts the child: `sys::spawn_child` with the provider's plan, or
/// `sys::spawn_parked_child` for doctor's probe of the same decision.
pub(crate) fn clone3_into_leaf(
    leaf: Option<BorrowedFd<'_>>,
    start: impl Fn(sys::Start<'_>) -> io::Result<sys::Child>,
) -> io::Result<sys::Child> {
    if leaf.is_some() && crate::cgroup::may_create_namespace() {
        match start(sys::Start::Clone3 { cgroup: leaf, extra: sys::CLONE_NEWCGROUP }) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EINVAL | libc::ENOSPC)) => {
                crate::log::debug!(
                    "clone3(CLONE_NEWCGROUP) refused ({e}); the provider shares guardian's cgroup namespace"
                );
            }
            r => return r,
        }
    }
    start(sys::Start::Clone3 { cgroup: leaf, extra: 0 })
}

/// The `GUARDIAN_*` variables guardian reads its settings from (every option's `env` in the
/// option table). They configure this guardian only: left in the environment, a nested
/// guardian (or any program of the tree that runs one) would take the outer one's settings,
/// e.g. an events fd number that is not open for it.
pub fn consumed_variables() -> impl Iterator<Item = &'static str> {
    crate::cli::env_vars()
}

/// Removes the variables of [`consumed_variables`] from the environment the provider inherits.
pub fn scrub_environment() -> Result<(), Failure> {
    // One pass over the environment (sys::vars_with_prefix), not a getenv per name; a name
    // the environment holds twice is removed once (unsetenv removes every copy).
    let present = sys::vars_with_prefix(b"GUARDIAN_");
    for name in consumed_variables().filter(|name| present.iter().any(|(n, _)| n == name)) {
        crate::log::debug!("{name} is not passed on to the provider");
        sys::unset_env(name)
            .map_err(|e| Failure::guardian(format!("cannot remove {name} from the environment: {e}")))?;
    }
    Ok(())
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

fn exec_error(cmd: &str, (stage, errno): (u8, i32)) -> Failure {
    let text = crate::errno::text(errno);
    match stage {
        b'e' if errno == libc::ENOENT || errno == libc::ENOTDIR || (errno == libc::EACCES && !in_path(cmd)) => {
            Failure::not_found(format!("cannot run '{cmd}': command not found ({text}); check the name and PATH"))
        }
        b'e' => Failure::not_executable(format!(
            "cannot run '{cmd}': {text}; check that it is an executable file (chmod +x) or run it through its interpreter"
        )),
        b'c' => Failure::guardian(format!(
            "the provider could not join its cgroup (write to cgroup.procs failed: {text}); check that the cgroup is delegated to this user"
        )),
        b'p' => Failure::guardian(format!("setpgid() failed in the provider: {text}")),
        _ => Failure::guardian(format!("restoring the signal mask failed in the provider: {text}")),
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

#[cfg(test)]
mod tests {
    #[test]
    fn consumed_variables_are_the_documented_ones() {
        let names: Vec<&str> = super::consumed_variables().collect();
        for name in ["GUARDIAN_EVENTS_FD", "GUARDIAN_GRACE", "GUARDIAN_CGROUP", "GUARDIAN_VERBOSE", "GUARDIAN_TIMEOUT"]
        {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert!(names.iter().all(|n| n.starts_with("GUARDIAN_")), "{names:?}");
    }
}
