//! cgroup::tree: the primitives that act on a whole cgroup subtree, shared by the leaf
//! teardown, `sweep` and `doctor`'s probe.
//!
//! * [`kill`] is the one kill: `cgroup.kill`, then a verified pidfd SIGKILL to every member
//!   whose thread-group leader has exited (state Z while still listed: the kernel's
//!   thread-directed SIGKILL to the dead leader does not reach its live threads); where
//!   `cgroup.kill` is missing (before Linux 5.14), freeze, SIGKILL each member, thaw.
//! * [`members`] lists every pid of a subtree; [`wait_empty`] polls `cgroup.events`.
//! * [`remove_tree`] removes a subtree at any depth through directory fds (`openat`,
//!   `unlinkat(AT_REMOVEDIR)`, `..`), so nesting deeper than `PATH_MAX` is no obstacle.

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::mount::{events_populated, is_within, parse_proc_cgroup};
use crate::proctree::Proc;
use crate::sys;

/// What [`kill`] did.
pub enum Killed {
    /// Wrote `cgroup.kill` (and SIGKILLed through pidfds the members it cannot reach).
    KillFile,
    /// Froze the leaf, SIGKILLed these pids through verified pidfds, thawed it.
    FreezeAndKill(Vec<i32>),
}

/// Kills every process in the subtree at `dir` (cgroup path `rel`), the one kill of guardian
/// (leaf teardown, `sweep`, `doctor`'s probe):
///
/// 1. `cgroup.kill`. The kernel sends SIGKILL to each thread-group leader it lists; a process
///    whose leader has exited while other threads live (state Z, still listed) is missed.
/// 2. Each member still listed whose leader has exited gets SIGKILL through a pidfd verified
///    to name a process in the subtree (a signal to the thread group reaches the live threads).
///
/// Before Linux 5.14 (`cgroup.kill` missing): freeze, SIGKILL every member the same way,
/// thaw. An `Err` of kind `NotFound` means the cgroup itself is gone.
pub fn kill(dir: &Path, rel: &str, proc: Option<&mut Proc>) -> io::Result<Killed> {
    match write_file(&dir.join("cgroup.kill"), "1") {
        Ok(()) => {
            // Only a process whose main thread exited while others run (a `Z` leader that is
            // not dead) can be listed yet missed; a dying process is not looked at.
            let after = kill_members(rel, proc, leaderless(dir), |st| st.state == b'Z' && !st.is_dead());
            if !after.is_empty() {
                crate::log::debug!(
                    "{}: SIGKILL through pidfds to {after:?}, listed after cgroup.kill with their main thread exited",
                    dir.display()
                );
            }
            Ok(Killed::KillFile)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            if !dir.join("cgroup.procs").exists() {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            }
            let freeze = dir.join("cgroup.freeze");
            let frozen = write_file(&freeze, "1").is_ok();
            let killed = kill_members(rel, proc, members(dir), |_| true);
            if frozen {
                let _ = write_file(&freeze, "0");
            }
            Ok(Killed::FreezeAndKill(killed))
        }
        Err(e) => Err(e),
    }
}

/// SIGKILLs each of `candidates` for which `pick` holds, through a pidfd verified to
/// still name a process in the subtree. Returns the pids killed.
fn kill_members(
    rel: &str,
    proc: Option<&mut Proc>,
    candidates: Vec<i32>,
    pick: impl Fn(&crate::proctree::Stat) -> bool,
) -> Vec<i32> {
    let mut own;
    let proc = match proc {
        Some(p) => p,
        None => match Proc::open() {
            Ok(p) => {
                own = p;
                &mut own
            }
            Err(_) => return Vec::new(),
        },
    };
    let mut killed = Vec::new();
    for pid in candidates {
        if !proc.stat(pid).is_some_and(|st| pick(&st)) {
            continue;
        }
        let Ok(fd) = sys::pidfd_open(pid) else {
            continue;
        };
        // The pidfd exists first; the reads that follow are about the process it holds only
        // if it still names that pid afterwards.
        let inside = proc.cgroup(pid).is_some_and(|t| parse_proc_cgroup(&t).is_some_and(|p| is_within(p, rel)));
        if inside && proc.pidfd_pid(&fd) == Some(pid) && sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL, 0).is_ok() {
            killed.push(pid);
        }
    }
    killed
}

/// The processes listed in `cgroup.procs` whose pid is not a live thread in `cgroup.threads`
/// (in `dir` and below): a process whose main thread exited while others still run. Reading
/// `cgroup.threads` first, a process that exits between the two reads is in neither; one
/// that is in both is an ordinary process (alive or dying), which `cgroup.kill` reaches. A
/// handful of pids to look at instead of a `stat` per member.
fn leaderless(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    let _ = walk(dir, false, |fd| {
        let threads: std::collections::HashSet<i32> = read_pids(fd, "cgroup.threads").into_iter().collect();
        out.extend(read_pids(fd, "cgroup.procs").into_iter().filter(|p| !threads.contains(p)));
    });
    out
}

/// The pids listed in one of a cgroup's files (`cgroup.procs`, `cgroup.threads`).
fn read_pids(fd: &OwnedFd, name: &str) -> Vec<i32> {
    let Ok(f) = rustix::fs::openat(fd, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) else {
        return Vec::new();
    };
    let mut text = String::new();
    if fs::File::from(f).read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    text.lines().filter_map(|l| l.trim().parse::<i32>().ok()).collect()
}

/// Every pid listed in the `cgroup.procs` of `dir` and of every cgroup below it, at any depth.
pub fn members(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    let _ = walk(dir, false, |fd| out.extend(read_pids(fd, "cgroup.procs")));
    out
}

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// The names of the directories in `fd` (the cgroups right below it).
fn subdir_names(fd: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut out = Vec::new();
    let dir = match Dir::read_from(fd) {
        Ok(d) => d,
        Err(Errno::NOENT | Errno::NODEV) => return Ok(out),
        Err(e) => return Err(e.into()),
    };
    for entry in dir {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type() == FileType::Directory && name != c"." && name != c".." {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Visits `root` and every cgroup below it, parents first, at any depth: only directory fds
/// and single names are used (down by `openat`, up by `..`), never a path, so a nest deeper
/// than `PATH_MAX` is walked like any other; at most two directory fds are open at a time.
/// With `remove`, every cgroup below `root` is rmdir'ed after its children (`root` is not).
fn walk(root: &Path, remove: bool, mut visit: impl FnMut(&OwnedFd)) -> io::Result<()> {
    let mut cur = rustix::fs::open(root, DIR_FLAGS, Mode::empty())?;
    visit(&cur);
    let mut stack: Vec<(CString, Vec<CString>)> = vec![(CString::default(), subdir_names(&cur)?)];
    while let Some((_, pending)) = stack.last_mut() {
        if let Some(name) = pending.pop() {
            match rustix::fs::openat(&cur, name.as_c_str(), DIR_FLAGS, Mode::empty()) {
                Ok(fd) => {
                    cur = fd;
                    visit(&cur);
                    let subs = subdir_names(&cur)?;
                    stack.push((name, subs));
                }
                Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let Some((name, _)) = stack.pop() else { break };
        if stack.is_empty() {
            break;
        }
        let parent = rustix::fs::openat(&cur, c"..", DIR_FLAGS, Mode::empty())?;
        if remove {
            rmdir_at(&parent, &name)?;
        }
        cur = parent;
    }
    Ok(())
}

/// rmdir of `name` in directory `dir`: ENOENT counts as done; right after `populated 0` the
/// kernel may still be finishing the last exit, so EBUSY gets a few short retries.
fn rmdir_at(dir: &OwnedFd, name: &CString) -> io::Result<()> {
    let mut tries = 0;
    loop {
        match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            Err(Errno::BUSY) if tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Removes the cgroup `dir` and every cgroup below it, bottom-up, at any depth. A cgroup
/// that is still populated gives EBUSY; a `dir` that is already gone counts as removed.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    match walk(dir, true, |_| {}) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let parent = rustix::fs::open(parent, DIR_FLAGS, Mode::empty())?;
    let name = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    rmdir_at(&parent, &name)
}

/// Waits (poll on `cgroup.events` for POLLPRI, no timer loop) until `dir` is unpopulated;
/// `Ok(false)` when `limit` passes first. A `dir` that vanished is unpopulated.
pub fn wait_empty(dir: &Path, limit: Duration) -> io::Result<bool> {
    let fd = match rustix::fs::open(dir.join("cgroup.events"), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(true),
        Err(e) => return Err(e.into()),
    };
    let end = sys::monotonic() + limit;
    let mut buf = [0u8; 256];
    loop {
        let n = match rustix::io::pread(&fd, &mut buf, 0) {
            Ok(n) => n,
            Err(Errno::NODEV) => return Ok(true),
            Err(e) => return Err(e.into()),
        };
        if events_populated(&String::from_utf8_lossy(&buf[..n])) == Some(false) {
            return Ok(true);
        }
        let now = sys::monotonic();
        if now >= end {
            return Ok(false);
        }
        let left = end - now;
        let ts = rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
        let mut fds = [PollFd::new(&fd, PollFlags::PRI)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes `value` to the cgroup file `p` (one `write`, as cgroupfs wants).
pub(super) fn write_file(p: &Path, value: &str) -> io::Result<()> {
    OpenOptions::new().write(true).custom_flags(libc::O_CLOEXEC).open(p)?.write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_removes_a_nest_deeper_than_path_max_with_dirfds() {
        // A plain directory tree stands in for cgroupfs: the walk only uses openat/unlinkat.
        let base = std::env::temp_dir().join(format!("guardian-walk-{}", std::process::id()));
        let _ = fs::create_dir(&base);
        let name = "d".repeat(200);
        let mut cur = rustix::fs::open(&base, DIR_FLAGS, Mode::empty()).expect("open base");
        for _ in 0..30 {
            rustix::fs::mkdirat(&cur, name.as_str(), Mode::from_raw_mode(0o755)).expect("mkdirat");
            cur = rustix::fs::openat(&cur, name.as_str(), DIR_FLAGS, Mode::empty()).expect("openat");
        }
        rustix::fs::mkdirat(&cur, "side", Mode::from_raw_mode(0o755)).expect("mkdirat side");
        drop(cur);
        let mut seen = 0;
        walk(&base, false, |_| seen += 1).expect("walk");
        assert_eq!(seen, 32, "the base, 30 levels (6 000 bytes of path) and the side directory");
        remove_tree(&base).expect("remove_tree at depth");
        assert!(!base.exists());
        assert!(remove_tree(&base).is_ok(), "a tree that is already gone counts as removed");
    }
}
