//! cgroup: guardian's own small layer over the cgroup v2 filesystem (no cgroups-rs).
//!
//! * Finds the cgroup2 mount in `/proc/self/mountinfo` (never assumes `/sys/fs/cgroup`: on
//!   hybrid hosts it sits at `/sys/fs/cgroup/unified`) and guardian's own cgroup from the
//!   `0::/path` line of `/proc/self/cgroup`.
//! * Creates one leaf per invocation, `guardian-<pid>-<starttime>`, below a delegated parent
//!   (`--cgroup PATH`) or guardian's own cgroup (`--cgroup auto`). The name is what lets
//!   `guardian sweep` tell later whether that guardian still lives.
//! * Holds the leaf's directory fd (for `clone3(CLONE_INTO_CGROUP)`), its `cgroup.procs`
//!   (for the child to join itself when clone3 is refused) and its `cgroup.events` (polled
//!   for POLLPRI by the supervise loop: `populated 0` is the proof that the leaf is empty).
//! * Kills a subtree with `cgroup.kill`, or where that file is missing (before Linux 5.14)
//!   by freezing it, SIGKILLing each member through a verified pidfd, and thawing it.
//! * Writes `memory.max`, `pids.max`, `cpu.max` when those controllers are delegated, and
//!   fails with the controller's name and the fix when they are not.
//! * `sweep`: removes the leaves of dead guardians, never one whose guardian lives.
//!
//! Every fd is opened close-on-exec. No `unsafe` here.

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{Mode, OFlags};

use crate::proctree::Proc;
use crate::sys;

/// `CGROUP2_SUPER_MAGIC` from `statfs(2)`.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// Prefix of every leaf guardian creates.
pub const LEAF_PREFIX: &str = "guardian-";
/// Suffix of the sibling leaf guardian moves itself into when it must leave its cgroup
/// (no-internal-process rule).
pub const SELF_SUFFIX: &str = ".self";

// ---------------------------------------------------------------------------------------
// Finding the hierarchy

/// One mount from mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The path inside the mounted filesystem at the mount point (for cgroup2: the cgroup path,
    /// in guardian's cgroup namespace, at the root of this mount).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    pub fstype: String,
    pub super_options: String,
}

/// Undoes mountinfo's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` `\`).
pub fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Every mount in the text of `/proc/self/mountinfo`, in order:
/// `id parent maj:min root mount_point options [optional...] - fstype source super_options`.
pub fn parse_all_mounts(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let tail: Vec<&str> = right.split(' ').collect();
        if fields.len() < 6 || tail[0].is_empty() {
            continue;
        }
        out.push(Mount {
            root: String::from_utf8_lossy(&unescape_mountinfo(fields[3])).into_owned(),
            mount_point: PathBuf::from(OsStr::from_bytes(&unescape_mountinfo(fields[4]))),
            fstype: tail[0].to_string(),
            super_options: tail.get(2).copied().unwrap_or("").to_string(),
        });
    }
    out
}

/// Every cgroup2 mount in the text of `/proc/self/mountinfo`, in order.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    parse_all_mounts(text).into_iter().filter(|m| m.fstype == "cgroup2").collect()
}

/// The cgroup v2 path from the text of `/proc/PID/cgroup` (the `0::/path` line).
pub fn parse_proc_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.strip_suffix(" (deleted)").unwrap_or(p))
}

/// Where cgroup `rel` (as `/proc/self/cgroup` names it) appears in the filesystem: the first
/// mount whose root contains it.
pub fn resolve(mounts: &[Mount], rel: &str) -> Option<PathBuf> {
    mounts.iter().find_map(|m| {
        let root = m.root.trim_end_matches('/');
        let rest = if root.is_empty() { Some(rel) } else { rel.strip_prefix(root) };
        let rest = rest.filter(|r| r.is_empty() || r.starts_with('/'))?;
        Some(m.mount_point.join(rest.trim_start_matches('/')))
    })
}

/// The inverse of [`resolve`]: the cgroup path of a directory below one of the mounts.
pub fn relative(mounts: &[Mount], dir: &Path) -> Option<String> {
    mounts.iter().find_map(|m| {
        let rest = dir.strip_prefix(&m.mount_point).ok()?;
        let root = m.root.trim_end_matches('/');
        let rest = rest.to_str()?;
        Some(if rest.is_empty() {
            if root.is_empty() { "/".into() } else { root.into() }
        } else {
            format!("{root}/{rest}")
        })
    })
}

/// The cgroup2 hierarchy as guardian sees it.
pub struct Hierarchy {
    pub mounts: Vec<Mount>,
    /// guardian's own cgroup path (`/...`).
    pub own_rel: String,
    /// guardian's own cgroup directory.
    pub own_dir: PathBuf,
}

impl Hierarchy {
    pub fn find() -> Result<Hierarchy, String> {
        let mi =
            fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mounts = parse_mountinfo(&mi);
        if mounts.is_empty() {
            return Err(
                "no cgroup2 filesystem is mounted (see /proc/self/mountinfo); mount one or run without --cgroup".into(),
            );
        }
        let cg = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let own_rel = parse_proc_cgroup(&cg).ok_or("/proc/self/cgroup has no cgroup v2 line (0::/path)")?.to_string();
        let own_dir = resolve(&mounts, &own_rel)
            .ok_or_else(|| format!("guardian's cgroup {own_rel} is not below any cgroup2 mount"))?;
        Ok(Hierarchy { mounts, own_rel, own_dir })
    }
}

// ---------------------------------------------------------------------------------------
// Leaf names

/// `guardian-<pid>-<starttime>`.
pub fn leaf_name(pid: i32, start: u64) -> String {
    format!("{LEAF_PREFIX}{pid}-{start}")
}

/// Parses a leaf name: `(pid, starttime, is_self_leaf)`.
pub fn parse_leaf_name(name: &str) -> Option<(i32, u64, bool)> {
    let rest = name.strip_prefix(LEAF_PREFIX)?;
    let (rest, is_self) = match rest.strip_suffix(SELF_SUFFIX) {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let (pid, start) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(start) {
        return None;
    }
    Some((pid.parse().ok()?, start.parse().ok()?, is_self))
}

/// Whether the guardian that named a leaf `(pid, start)` still lives.
pub fn guardian_alive(proc: &mut Proc, pid: i32, start: u64) -> bool {
    proc.stat(pid).is_some_and(|s| s.starttime == start && s.state != b'Z' && s.state != b'X')
}

// ---------------------------------------------------------------------------------------
// Options

#[derive(Default, Debug, Clone)]
pub struct Limits {
    pub memory_max: Option<String>,
    pub pids_max: Option<String>,
    pub cpu_max: Option<String>,
}

impl Limits {
    /// (controller, file, value) for every limit asked for.
    fn entries(&self) -> Vec<(&'static str, &'static str, &str)> {
        let mut v = Vec::new();
        if let Some(m) = &self.memory_max {
            v.push(("memory", "memory.max", m.as_str()));
        }
        if let Some(p) = &self.pids_max {
            v.push(("pids", "pids.max", p.as_str()));
        }
        if let Some(c) = &self.cpu_max {
            v.push(("cpu", "cpu.max", c.as_str()));
        }
        v
    }

    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Auto,
    Path(PathBuf),
}

impl Request {
    pub fn from_arg(arg: &OsStr) -> Request {
        if arg == "auto" { Request::Auto } else { Request::Path(PathBuf::from(arg)) }
    }
}

/// Why a cgroup could not be used: the errno (for the `fallback` event) and one line.
#[derive(Debug)]
pub struct Unusable {
    pub errno: i32,
    pub message: String,
}

fn unusable(errno: i32, message: String) -> Unusable {
    Unusable { errno, message }
}

fn io_unusable(e: &io::Error, message: String) -> Unusable {
    unusable(e.raw_os_error().unwrap_or(libc::EIO), message)
}

// ---------------------------------------------------------------------------------------
// The leaf

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
    removed: bool,
    /// `cgroup.kill` was found missing (kernel before 5.14): freeze, kill, thaw instead.
    no_kill_file: bool,
}

/// What [`Leaf::kill`] did.
pub enum Killed {
    /// Wrote `cgroup.kill`.
    KillFile,
    /// Froze the leaf, SIGKILLed these pids through verified pidfds, thawed it.
    FreezeAndKill(Vec<i32>),
}

impl Leaf {
    /// Sets up the leaf for `req` and starts nothing. `me`/`start` name it.
    pub fn create(req: &Request, limits: &Limits, me: i32, start: u64) -> Result<Leaf, Unusable> {
        let h = Hierarchy::find().map_err(|m| unusable(libc::ENOENT, m))?;
        let parent = match req {
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
        let parent_rel = relative(&h.mounts, &parent)
            .ok_or_else(|| unusable(libc::EINVAL, format!("{} is not below the cgroup2 mount", parent.display())))?;
        if parent_rel == "/" && matches!(req, Request::Auto) && rustix::process::geteuid().as_raw() != 0 {
            return Err(unusable(libc::EACCES, "guardian runs in the root cgroup, which is not delegated".into()));
        }
        // Permissions, checked up front so the error names the file: the parent directory
        // (mkdir), and the cgroup.procs of the common ancestor of guardian's cgroup and the
        // leaf (every migration, including CLONE_INTO_CGROUP, needs write access there).
        need_access(
            &parent,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            "write (to create the leaf directory)",
        )?;
        let ancestor = common_ancestor(&h.own_rel, &parent_rel);
        let ancestor_dir = resolve(&h.mounts, &ancestor).unwrap_or_else(|| parent.clone());
        need_access(
            &ancestor_dir.join("cgroup.procs"),
            rustix::fs::Access::WRITE_OK,
            "write (to move the provider into the leaf, the common ancestor's cgroup.procs must be writable)",
        )?;

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
                    if let Err(e) = write_file(&me_leaf.join("cgroup.procs"), &me.to_string()) {
                        let _ = fs::remove_dir(&me_leaf);
                        return Err(io_unusable(
                            &e,
                            format!(
                                "cannot move guardian into {}: writing cgroup.procs failed: {e}",
                                me_leaf.display()
                            ),
                        ));
                    }
                    crate::debug!("moved guardian into {} (no-internal-process rule)", me_leaf.display());
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
                        let _ = write_file(&parent.join("cgroup.procs"), &me.to_string());
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
        Ok(Leaf {
            path,
            rel,
            dir,
            procs,
            events,
            self_leaf: None,
            has_memory: false,
            removed: false,
            no_kill_file: false,
        })
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
    /// leaf or below it.
    pub fn populated(&self) -> io::Result<bool> {
        let mut buf = [0u8; 256];
        let n = rustix::io::pread(&self.events, &mut buf, 0)?;
        Ok(events_populated(&String::from_utf8_lossy(&buf[..n])).unwrap_or(true))
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        let fd = rustix::fs::openat(&self.dir, file, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        let mut f = fs::File::from(fd);
        f.write_all(value.as_bytes())
    }

    /// Every pid in the leaf and in any cgroup the provider created below it.
    pub fn members(&self) -> Vec<i32> {
        let mut out = Vec::new();
        collect_members(&self.path, &mut out);
        out
    }

    /// Whether the text of `/proc/PID/cgroup` places that process in the leaf or below.
    pub fn contains(&self, proc_cgroup: &str) -> bool {
        parse_proc_cgroup(proc_cgroup).is_some_and(|p| is_within(p, &self.rel))
    }

    /// SIGKILLs everything in the leaf: `cgroup.kill`, or freeze + verified kills + thaw.
    pub fn kill(&mut self, proc: Option<&mut Proc>) -> io::Result<Killed> {
        if !self.no_kill_file {
            match self.write("cgroup.kill", "1") {
                Ok(()) => return Ok(Killed::KillFile),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => self.no_kill_file = true,
                Err(e) => return Err(e),
            }
        }
        Ok(Killed::FreezeAndKill(freeze_and_kill(&self.path, &self.rel, proc)))
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

    /// Removes the leaf (bottom-up, with whatever cgroups the provider made below it).
    pub fn remove(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        remove_tree(&self.path)?;
        self.removed = true;
        if let Some(s) = &self.self_leaf {
            // guardian itself is in there until it exits: `guardian sweep` removes it later.
            crate::debug!("{} stays until guardian exits (guardian sweep removes it)", s.display());
        }
        Ok(())
    }

    /// Best effort for abrupt exits: kill whatever is left, wait briefly, remove.
    pub fn remove_now(&mut self) {
        if self.removed {
            return;
        }
        if self.populated().unwrap_or(true) {
            let _ = self.kill(None);
            let _ = wait_empty(&self.path, Duration::from_secs(2));
        }
        if let Err(e) = self.remove() {
            crate::warn!("could not remove the leaf cgroup {}: {e}; 'guardian sweep' will", self.path.display());
        }
    }

    pub fn is_removed(&self) -> bool {
        self.removed
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        self.remove_now();
    }
}

/// `populated` from the text of `cgroup.events`.
pub fn events_populated(text: &str) -> Option<bool> {
    text.lines().find_map(|l| l.strip_prefix("populated ")).map(|v| v.trim() != "0")
}

/// Whether cgroup path `p` is `base` or below it.
pub fn is_within(p: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    p == base || p.strip_prefix(base).is_some_and(|r| r.starts_with('/'))
}

/// The longest common ancestor of two cgroup paths.
pub fn common_ancestor(a: &str, b: &str) -> String {
    let mut out = String::new();
    for (x, y) in a.split('/').filter(|s| !s.is_empty()).zip(b.split('/').filter(|s| !s.is_empty())) {
        if x != y {
            break;
        }
        out.push('/');
        out.push_str(x);
    }
    if out.is_empty() { "/".into() } else { out }
}

fn check_cgroup2_dir(p: &Path) -> Result<(), Unusable> {
    let st = rustix::fs::statfs(p).map_err(|e| {
        let e: io::Error = e.into();
        io_unusable(&e, format!("{}: {e}", p.display()))
    })?;
    if st.f_type as i64 != CGROUP2_SUPER_MAGIC {
        return Err(unusable(
            libc::EINVAL,
            format!("{}: not a cgroup v2 directory (look for the cgroup2 mount in /proc/self/mountinfo)", p.display()),
        ));
    }
    Ok(())
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

fn subdirs(p: &Path) -> Vec<PathBuf> {
    fs::read_dir(p)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect()
        })
        .unwrap_or_default()
}

fn collect_members(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    for sub in subdirs(dir) {
        collect_members(&sub, out);
    }
}

/// rmdir bottom-up. A cgroup that is still populated gives EBUSY; ENOENT counts as done.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    for sub in subdirs(dir) {
        remove_tree(&sub)?;
    }
    // Right after `populated 0` the kernel may still be finishing the last exit: a few
    // short retries before reporting EBUSY.
    let mut tries = 0;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits (poll on `cgroup.events` for POLLPRI, no timer loop) until `dir` is unpopulated;
/// `Ok(false)` when `limit` passes first.
pub fn wait_empty(dir: &Path, limit: Duration) -> io::Result<bool> {
    let fd = rustix::fs::open(dir.join("cgroup.events"), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let end = sys::monotonic() + limit;
    let mut buf = [0u8; 256];
    loop {
        let n = rustix::io::pread(&fd, &mut buf, 0)?;
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
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Kills the subtree at `dir`: `cgroup.kill`, else the freeze fallback. Returns whether the
/// fallback was used.
pub fn kill_tree(dir: &Path, rel: &str) -> io::Result<bool> {
    match write_file(&dir.join("cgroup.kill"), "1") {
        Ok(()) => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            freeze_and_kill(dir, rel, None);
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

/// The fallback for kernels without `cgroup.kill`: freeze (so nothing forks while the
/// members are listed), SIGKILL each member through a pidfd verified to still be in the
/// subtree, thaw (SIGKILL acts once the tasks run again). Returns the pids killed.
fn freeze_and_kill(dir: &Path, rel: &str, proc: Option<&mut Proc>) -> Vec<i32> {
    let freeze = dir.join("cgroup.freeze");
    let frozen = write_file(&freeze, "1").is_ok();
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
    let mut members = Vec::new();
    collect_members(dir, &mut members);
    let mut killed = Vec::new();
    for pid in members {
        let Ok(fd) = sys::pidfd_open(pid) else {
            continue;
        };
        let inside = proc.cgroup(pid).is_some_and(|t| parse_proc_cgroup(&t).is_some_and(|p| is_within(p, rel)));
        if inside && proc.pidfd_pid(&fd) == Some(pid) && sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL, 0).is_ok() {
            killed.push(pid);
        }
    }
    if frozen {
        let _ = write_file(&freeze, "0");
    }
    killed
}

// ---------------------------------------------------------------------------------------
// sweep

/// `guardian sweep [--cgroup PATH]`: removes every `guardian-<pid>-<start>` leaf below the
/// parent whose guardian is dead. Prints one line per leaf; returns the exit status.
pub fn sweep(path: Option<&OsStr>) -> i32 {
    let h = match Hierarchy::find() {
        Ok(h) => h,
        Err(m) => {
            crate::fatal!("sweep: {m}");
            return 125;
        }
    };
    let parent = match path {
        Some(p) => {
            let p = PathBuf::from(p);
            if let Err(u) = check_cgroup2_dir(&p) {
                crate::fatal!("sweep: {}", u.message);
                return 125;
            }
            p
        }
        None => h.own_dir.clone(),
    };
    let rel_parent = relative(&h.mounts, &parent.canonicalize().unwrap_or_else(|_| parent.clone()));
    let mut proc = match Proc::open() {
        Ok(p) => p,
        Err(e) => {
            crate::fatal!("sweep: cannot open /proc: {e}; without it no guardian can be told alive or dead");
            return 125;
        }
    };
    let entries = match fs::read_dir(&parent) {
        Ok(rd) => rd,
        Err(e) => {
            crate::fatal!("sweep: cannot list {}: {e}", parent.display());
            return 125;
        }
    };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str().map(String::from)).collect();
    names.sort();
    let (mut removed, mut live, mut failed) = (0, 0, 0);
    let mut out = io::stdout().lock();
    for name in names {
        let Some((pid, start, _)) = parse_leaf_name(&name) else {
            continue;
        };
        let dir = parent.join(&name);
        if guardian_alive(&mut proc, pid, start) {
            live += 1;
            let _ = writeln!(out, "kept {}: guardian {pid} is alive", dir.display());
            continue;
        }
        let rel = rel_parent.as_deref().map(|r| format!("{}/{name}", r.trim_end_matches('/'))).unwrap_or_default();
        let populated = fs::read_to_string(dir.join("cgroup.events")).ok().and_then(|t| events_populated(&t));
        let mut how = String::from("empty");
        if populated != Some(false) {
            how = match kill_tree(&dir, &rel) {
                Ok(false) => "killed its processes (cgroup.kill)".into(),
                Ok(true) => "killed its processes (cgroup.freeze fallback)".into(),
                Err(e) => {
                    failed += 1;
                    let _ = writeln!(out, "failed {}: writing cgroup.kill: {e}", dir.display());
                    continue;
                }
            };
            match wait_empty(&dir, Duration::from_secs(10)) {
                Ok(true) => {}
                Ok(false) => {
                    failed += 1;
                    let _ = writeln!(out, "failed {}: still populated 10 s after the kill", dir.display());
                    continue;
                }
                Err(e) => {
                    failed += 1;
                    let _ = writeln!(out, "failed {}: reading cgroup.events: {e}", dir.display());
                    continue;
                }
            }
        }
        match remove_tree(&dir) {
            Ok(()) => {
                removed += 1;
                let _ = writeln!(out, "removed {}: guardian {pid} is dead; {how}", dir.display());
            }
            Err(e) => {
                failed += 1;
                let _ = writeln!(out, "failed {}: rmdir: {e}", dir.display());
            }
        }
    }
    let _ =
        writeln!(out, "sweep {}: {removed} removed, {live} kept (guardian alive), {failed} failed", parent.display());
    if failed > 0 { 1 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
20:41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
14:35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
10:31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
";

    #[test]
    fn finds_the_cgroup2_mount_on_a_hybrid_host() {
        let m = parse_mountinfo(HYBRID);
        let want = Mount {
            root: "/".into(),
            mount_point: "/sys/fs/cgroup/unified".into(),
            fstype: "cgroup2".into(),
            super_options: "rw".into(),
        };
        assert_eq!(m, vec![want]);
        assert_eq!(resolve(&m, "/"), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(resolve(&m, "/a/b"), Some(PathBuf::from("/sys/fs/cgroup/unified/a/b")));
        assert_eq!(relative(&m, Path::new("/sys/fs/cgroup/unified/a/b")).as_deref(), Some("/a/b"));
        assert_eq!(relative(&m, Path::new("/sys/fs/cgroup/unified")).as_deref(), Some("/"));
        assert_eq!(relative(&m, Path::new("/sys/fs/cgroup/memory")), None);
    }

    #[test]
    fn unescapes_mount_points() {
        let text = "30 1 0:40 /sub\\040dir /mnt/my\\040cg\\011x\\134y rw - cgroup2 none rw,nsdelegate\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/my cg\tx\\y"));
        assert_eq!(m[0].root, "/sub dir");
        assert_eq!(resolve(&m, "/sub dir/job"), Some(PathBuf::from("/mnt/my cg\tx\\y/job")));
        assert_eq!(resolve(&m, "/other"), None);
        assert_eq!(resolve(&m, "/sub dirx"), None);
        assert_eq!(unescape_mountinfo("a\\04"), b"a\\04");
        assert_eq!(unescape_mountinfo("\\777"), b"\\777");
    }

    #[test]
    fn ignores_v1_and_garbage_lines() {
        assert!(parse_mountinfo("garbage\n1 2 3\n14:35 31 0:32 / /x rw - cgroup cgroup rw\n").is_empty());
    }

    #[test]
    fn proc_cgroup_lines() {
        assert_eq!(parse_proc_cgroup("4:memory:/x\n0::/user.slice/a b\n"), Some("/user.slice/a b"));
        assert_eq!(parse_proc_cgroup("0::/gone (deleted)\n"), Some("/gone"));
        assert_eq!(parse_proc_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn leaf_names_round_trip() {
        assert_eq!(leaf_name(42, 987), "guardian-42-987");
        assert_eq!(parse_leaf_name("guardian-42-987"), Some((42, 987, false)));
        assert_eq!(parse_leaf_name("guardian-42-987.self"), Some((42, 987, true)));
        for bad in ["guardian-42", "guardian--1", "guardian-test-1", "guardian-1-2-3", "x-1-2", "guardian-1-2.other"] {
            assert_eq!(parse_leaf_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn paths_and_events() {
        assert!(is_within("/a/b", "/a/b") && is_within("/a/b/c", "/a/b") && !is_within("/a/bc", "/a/b"));
        assert_eq!(common_ancestor("/a/b/c", "/a/b/d"), "/a/b");
        assert_eq!(common_ancestor("/", "/a"), "/");
        assert_eq!(common_ancestor("/x", "/y"), "/");
        assert_eq!(events_populated("populated 1\nfrozen 0\n"), Some(true));
        assert_eq!(events_populated("populated 0\nfrozen 0\n"), Some(false));
    }

    #[test]
    fn limit_syntax() {}
}
