//! cgroup::leaf: guardian's leaf cgroup and the primitives that act on a cgroup subtree.
//!
//! * [`check_parent`] judges a delegation (the one copy: `Leaf::create` and `doctor` both
//!   call it): a cgroup2 directory this user may create a leaf in and move a process into.
//! * [`Leaf`] holds the leaf's directory fd (for `clone3(CLONE_INTO_CGROUP)`), its
//!   `cgroup.procs` (for the child to join itself when clone3 is refused) and its
//!   `cgroup.events` (polled for POLLPRI: `populated 0` is the proof that the leaf is empty).
//!   A leaf that vanished (the provider rmdir'ed it once empty) counts as empty and removed.
//! * [`kill`] is the one kill: `cgroup.kill`, then a verified pidfd SIGKILL to every member
//!   whose thread-group leader has exited (state Z while still listed: the kernel's
//!   thread-directed SIGKILL to the dead leader does not reach its live threads); where
//!   `cgroup.kill` is missing (before Linux 5.14), freeze, SIGKILL each member, thaw.
//! * [`remove_tree`] removes a subtree at any depth through directory fds (`openat`,
//!   `unlinkat(AT_REMOVEDIR)`, `..`), so nesting deeper than `PATH_MAX` is no obstacle.

use std::cell::Cell;
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::mount::{Hierarchy, check_cgroup2_dir, common_ancestor, events_populated, is_within, parse_proc_cgroup};
use super::{Limits, Request, SELF_SUFFIX, Unusable, io_unusable, leaf_name, unusable};
use crate::proctree::Proc;
use crate::sys;

/// A delegated cgroup directory in which leaves can be created.
#[derive(Debug, Clone)]
pub struct Parent {
    pub dir: PathBuf,
    /// Its cgroup path.
    pub rel: String,
}

/// Where a leaf for `req` would go, and whether this user may create it there and move a
/// process into it: the parent directory (write, to mkdir) and the `cgroup.procs` of the
/// common ancestor of guardian's cgroup and the parent (every migration, including
/// `CLONE_INTO_CGROUP`, needs write access there).
pub fn check_parent(h: &Hierarchy, req: &Request) -> Result<Parent, Unusable> {
    let dir = match req {
        Request::Auto => h.own_dir.clone(),
        Request::Path(p) => {
            let abs = if p.is_absolute() {
                p.clone()
            } else {
                std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.clone())
            };
            check_cgroup2_dir(&abs)?;
            abs.canonicalize().map_err(|e| io_unusable(&e, format!("{}: {e}", abs.display())))?
        }
    };
    let rel = super::mount::relative(&h.mounts, &dir)
        .ok_or_else(|| unusable(libc::EINVAL, format!("{} is not below the cgroup2 mount", dir.display())))?;
    if rel == "/" && matches!(req, Request::Auto) && rustix::process::geteuid().as_raw() != 0 {
        return Err(unusable(libc::EACCES, "guardian runs in the root cgroup, which is not delegated".into()));
    }
    need_access(
        &dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        "write (to create the leaf directory)",
    )?;
    let ancestor = common_ancestor(&h.own_rel, &rel);
    let ancestor_dir = super::mount::resolve(&h.mounts, &ancestor).unwrap_or_else(|| dir.clone());
    need_access(
        &ancestor_dir.join("cgroup.procs"),
        rustix::fs::Access::WRITE_OK,
        "write (to move the provider into the leaf, the common ancestor's cgroup.procs must be writable)",
    )?;
    Ok(Parent { dir, rel })
}

/// guardian's leaf cgroup for one provider.
pub struct Leaf {
    /// Filesystem path of the leaf.
    pub path: PathBuf,
    /// Its cgroup path (as `/proc/PID/cgroup` shows it), for membership checks.
    pub rel: String,
    /// O_PATH|O_DIRECTORY|O_CLOEXEC: the `cgroup` of clone3 and the dirfd of every openat.
    dir: OwnedFd,
    /// The leaf's `cgroup.procs`, write-only, for the child to join itself.
    procs: OwnedFd,
    /// The leaf's `cgroup.events`, polled for POLLPRI.
    events: OwnedFd,
    /// The sibling leaf guardian moved itself into, if it had to.
    self_leaf: Option<PathBuf>,
    has_memory: bool,
    /// Removed by guardian, or found vanished (someone else removed it once it was empty).
    removed: Cell<bool>,
}

/// What [`kill`] did.
pub enum Killed {
    /// Wrote `cgroup.kill` (and SIGKILLed through pidfds the members it cannot reach).
    KillFile,
    /// Froze the leaf, SIGKILLed these pids through verified pidfds, thawed it.
    FreezeAndKill(Vec<i32>),
}

impl Leaf {
    /// Sets up the leaf for `req` and starts nothing. `me` and `start` name the leaf (`guardian-<me>-<start>`): guardian as the mounted `/proc`
    /// sees it, where `sweep` judges it. Moves of guardian itself write `0` (the writer) to
    /// `cgroup.procs`, which needs no pid of any namespace.
    pub fn create(req: &Request, limits: &Limits, me: i32, start: u64) -> Result<Leaf, Unusable> {
        let h = Hierarchy::find().map_err(|m| unusable(libc::ENOENT, m))?;
        let Parent { dir: parent, rel: parent_rel } = check_parent(&h, req)?;

        // Controllers for the limits: they must be available in the parent, and enabled in
        // its subtree_control for the leaf to get the interface files.
        let wanted: Vec<_> = limits.entries();
        let mut self_leaf = None;
        if !wanted.is_empty() {
            let available = read_words(&parent.join("cgroup.controllers"));
            for (ctl, file, _) in &wanted {
                if !available.iter().any(|c| c == ctl) {
                    return Err(unusable(
                        libc::EOPNOTSUPP,
                        format!(
                            "the {ctl} controller is not delegated to {} ({} lists: {}), so {file} cannot be set; enable it in the parent (echo +{ctl} > <parent>/cgroup.subtree_control) or delegate it (systemd: Delegate=yes or Delegate={ctl}), or drop the limit",
                            parent.display(),
                            parent.join("cgroup.controllers").display(),
                            if available.is_empty() { "none".into() } else { available.join(" ") },
                        ),
                    ));
                }
            }
            let enabled = read_words(&parent.join("cgroup.subtree_control"));
            let missing: Vec<&str> =
                wanted.iter().map(|(c, _, _)| *c).filter(|c| !enabled.iter().any(|e| e == c)).collect();
            if !missing.is_empty() {
                // No-internal-process rule: with controllers enabled the parent may hold no
                // process. If guardian lives there, it moves itself to a sibling leaf first.
                if h.own_rel == parent_rel && parent_rel != "/" {
                    let me_leaf = parent.join(format!("{}{SELF_SUFFIX}", leaf_name(me, start)));
                    mkdir(&me_leaf)?;
                    if let Err(e) = write_file(&me_leaf.join("cgroup.procs"), "0") {
                        let _ = fs::remove_dir(&me_leaf);
                        return Err(io_unusable(
                            &e,
                            format!(
                                "cannot move guardian into {}: writing cgroup.procs failed: {e}",
                                me_leaf.display()
                            ),
                        ));
                    }
                    crate::log::debug!("moved guardian into {} (no-internal-process rule)", me_leaf.display());
                    self_leaf = Some(me_leaf);
                }
                let line: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
                let sc = parent.join("cgroup.subtree_control");
                if let Err(e) = write_file(&sc, &line.join(" ")) {
                    let hint = if e.raw_os_error() == Some(libc::EBUSY) {
                        "other processes live in that cgroup (no-internal-process rule); start guardian in a cgroup of its own"
                    } else {
                        "check that the cgroup is delegated to this user"
                    };
                    if let Some(s) = self_leaf.take() {
                        let _ = write_file(&parent.join("cgroup.procs"), "0");
                        let _ = fs::remove_dir(&s);
                    }
                    return Err(io_unusable(
                        &e,
                        format!("cannot enable {} in {}: {e}; {hint}", line.join(" "), sc.display()),
                    ));
                }
            }
        }

        let path = parent.join(leaf_name(me, start));
        let rel = format!("{}/{}", parent_rel.trim_end_matches('/'), leaf_name(me, start));
        mkdir(&path)?;
        let mut leaf = match Leaf::open(path.clone(), rel) {
            Ok(l) => l,
            Err(u) => {
                let _ = fs::remove_dir(&path);
                return Err(u);
            }
        };
        leaf.self_leaf = self_leaf;
        for (ctl, file, value) in &wanted {
            if let Err(e) = leaf.write(file, value) {
                let msg = format!("cannot set {file} to '{value}' in {}: {e}", path.display());
                leaf.remove_now();
                return Err(io_unusable(&e, msg));
            }
            if *ctl == "memory" {
                leaf.has_memory = true;
            }
        }
        Ok(leaf)
    }

    fn open(path: PathBuf, rel: String) -> Result<Leaf, Unusable> {
        let open = |p: &Path, flags: OFlags| {
            rustix::fs::open(p, flags | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| io_unusable(&e.into(), format!("cannot open {}: {e}", p.display())))
        };
        let dir = open(&path, OFlags::PATH | OFlags::DIRECTORY)?;
        let procs = open(&path.join("cgroup.procs"), OFlags::WRONLY)?;
        let events = open(&path.join("cgroup.events"), OFlags::RDONLY)?;
        Ok(Leaf { path, rel, dir, procs, events, self_leaf: None, has_memory: false, removed: Cell::new(false) })
    }

    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    pub fn procs_fd(&self) -> BorrowedFd<'_> {
        self.procs.as_fd()
    }

    /// The fd the supervise loop polls for POLLPRI.
    pub fn events_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    pub fn path_text(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// Reads `cgroup.events` (which also re-arms POLLPRI): whether any process is in the
    /// leaf or below it. A leaf that vanished (its files read ENODEV once it is rmdir'ed,
    /// which only succeeds on an empty cgroup) is empty, and from then on removed.
    pub fn populated(&self) -> io::Result<bool> {
        if self.removed.get() {
            return Ok(false);
        }
        let mut buf = [0u8; 256];
        match rustix::io::pread(&self.events, &mut buf, 0) {
            Ok(n) => Ok(events_populated(&String::from_utf8_lossy(&buf[..n])).unwrap_or(true)),
            Err(Errno::NODEV | Errno::NOENT) => {
                self.vanished();
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn vanished(&self) {
        if !self.removed.get() {
            crate::log::debug!(
                "{} vanished (removed by someone else once empty): the leaf is empty",
                self.path.display()
            );
            self.removed.set(true);
        }
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        let fd = rustix::fs::openat(&self.dir, file, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        let mut f = fs::File::from(fd);
        f.write_all(value.as_bytes())
    }

    /// Every pid in the leaf and in any cgroup the provider created below it.
    pub fn members(&self) -> Vec<i32> {
        if self.removed.get() {
            return Vec::new();
        }
        members(&self.path)
    }

    /// Whether the text of `/proc/PID/cgroup` places that process in the leaf or below.
    pub fn contains(&self, proc_cgroup: &str) -> bool {
        parse_proc_cgroup(proc_cgroup).is_some_and(|p| is_within(p, &self.rel))
    }

    /// SIGKILLs everything in the leaf (see [`kill`]). A vanished leaf has nothing to kill.
    pub fn kill(&mut self, proc: Option<&mut Proc>) -> io::Result<Killed> {
        if self.removed.get() {
            return Ok(Killed::KillFile);
        }
        match kill(&self.path, &self.rel, proc) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.vanished();
                Ok(Killed::KillFile)
            }
            r => r,
        }
    }

    /// `oom_kill` of the leaf's `memory.events`, when the memory controller is on.
    pub fn oom_kills(&self) -> Option<u64> {
        if !self.has_memory {
            return None;
        }
        let fd =
            rustix::fs::openat(&self.dir, "memory.events", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
        let mut text = String::new();
        fs::File::from(fd).read_to_string(&mut text).ok()?;
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok())
    }

    /// Removes the leaf (bottom-up, with whatever cgroups the provider made below it, at any
    /// depth). On an error the leaf is not removed and `is_removed()` stays false.
    pub fn remove(&mut self) -> io::Result<()> {
        if self.removed.get() {
            return Ok(());
        }
        remove_tree(&self.path)?;
        self.removed.set(true);
        if let Some(s) = &self.self_leaf {
            // guardian itself is in there until it exits: `guardian sweep` removes it later.
            crate::log::debug!("{} stays until guardian exits (guardian sweep removes it)", s.display());
        }
        Ok(())
    }

    /// Best effort for abrupt exits: kill whatever is left, wait briefly, remove.
    pub fn remove_now(&mut self) {
        if self.removed.get() {
            return;
        }
        if self.populated().unwrap_or(true) {
            let _ = self.kill(None);
            let _ = wait_empty(&self.path, Duration::from_secs(2));
        }
        if let Err(e) = self.remove() {
            crate::log::warn!("could not remove the leaf cgroup {}: {e}; 'guardian sweep' will", self.path.display());
        }
    }

    pub fn is_removed(&self) -> bool {
        self.removed.get()
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        self.remove_now();
    }
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

fn need_access(p: &Path, mode: rustix::fs::Access, what: &str) -> Result<(), Unusable> {
    rustix::fs::access(p, mode).map_err(|e| {
        let owner = fs::metadata(p).map(|m| format!(", owned by uid {}", m.uid())).unwrap_or_default();
        unusable(
            e.raw_os_error(),
            format!(
                "{}: {} permission needed for uid {}{owner} ({e})",
                p.display(),
                what,
                rustix::process::geteuid().as_raw()
            ),
        )
    })
}

fn mkdir(p: &Path) -> Result<(), Unusable> {
    fs::create_dir(p).map_err(|e| io_unusable(&e, format!("cannot create the leaf cgroup {}: {e}", p.display())))
}

fn write_file(p: &Path, value: &str) -> io::Result<()> {
    OpenOptions::new().write(true).custom_flags(libc::O_CLOEXEC).open(p)?.write_all(value.as_bytes())
}

fn read_words(p: &Path) -> Vec<String> {
    fs::read_to_string(p).map(|t| t.split_whitespace().map(String::from).collect()).unwrap_or_default()
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
