//! cgroup::leaf: guardian's leaf cgroup for one provider.
//!
//! * [`check_parent`] judges a delegation (the one copy: `Leaf::create` and `doctor` both
//!   call it): a cgroup2 directory this user may create a leaf in and move a process into.
//! * [`Leaf`] holds the leaf's directory fd (for `clone3(CLONE_INTO_CGROUP)`), its
//!   `cgroup.procs` (for the child to join itself when clone3 is refused) and its
//!   `cgroup.events` (polled for POLLPRI: `populated 0` is the proof that the leaf is empty).
//!   A leaf that vanished (the provider rmdir'ed it once empty) counts as empty and removed.
//!   Its kill and removal are `tree`'s; the controllers its limits need, `controllers`'.

use std::cell::Cell;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::controllers;
use super::mount::{Hierarchy, check_cgroup2_dir, common_ancestor, events_populated, is_within, parse_proc_cgroup};
use super::tree::{Killed, kill, members, remove_tree, wait_empty};
use super::{Limits, Request, Unusable, io_unusable, leaf_name, unusable};
use crate::proctree::Proc;

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
    if matches!(req, Request::Auto) && controllers::is_hierarchy_root(&dir) && rustix::process::geteuid().as_raw() != 0
    {
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

impl Leaf {
    /// Sets up the leaf for `req` and starts nothing. `me` and `start` name the leaf (`guardian-<me>-<start>`): guardian as the mounted `/proc`
    /// sees it, where `sweep` judges it. Moves of guardian itself write `0` (the writer) to
    /// `cgroup.procs`, which needs no pid of any namespace.
    pub fn create(req: &Request, limits: &Limits, me: i32, start: u64) -> Result<Leaf, Unusable> {
        let h = Hierarchy::find().map_err(|m| unusable(libc::ENOENT, m))?;
        let Parent { dir: parent, rel: parent_rel } = check_parent(&h, req)?;

        // Controllers for the limits, enabled in the parent (guardian moving out of it first
        // when it lives there); undone on any failure below.
        let wanted = limits.entries();
        let ctls: Vec<(&'static str, &'static str)> = wanted.iter().map(|(c, f, _)| (*c, *f)).collect();
        let mut enabled = controllers::enable(&h, &parent, &parent_rel, &ctls, me, start)?;

        let path = parent.join(leaf_name(me, start));
        let rel = format!("{}/{}", parent_rel.trim_end_matches('/'), leaf_name(me, start));
        if let Err(u) = mkdir(&path) {
            enabled.undo();
            return Err(u);
        }
        let mut leaf = match Leaf::open(path.clone(), rel) {
            Ok(l) => l,
            Err(u) => {
                let _ = fs::remove_dir(&path);
                enabled.undo();
                return Err(u);
            }
        };
        for (ctl, file, value) in &wanted {
            if let Err(e) = leaf.write(file, value) {
                let msg = format!("cannot set {file} to '{value}' in {}: {e}", path.display());
                leaf.remove_now();
                enabled.undo();
                return Err(io_unusable(&e, msg));
            }
            if *ctl == "memory" {
                leaf.has_memory = true;
            }
        }
        leaf.self_leaf = enabled.self_leaf.take();
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
