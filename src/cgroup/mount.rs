//! cgroup::mount: where the cgroup2 hierarchy is. The only reader of `/proc/self/mountinfo`
//! and `/proc/self/cgroup` in guardian (doctor asks here too): every cgroup2 mount (on
//! hybrid hosts it sits at `/sys/fs/cgroup/unified`, never assumed at `/sys/fs/cgroup`),
//! guardian's own cgroup, and the translation between cgroup paths and directories.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Unusable, io_unusable, unusable};

/// `CGROUP2_SUPER_MAGIC` from `statfs(2)`.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

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

impl Mount {
    /// Whether the superblock option `opt` (e.g. `nsdelegate`, `hidepid=2`) is set.
    pub fn has_option(&self, opt: &str) -> bool {
        self.super_options.split(',').any(|o| o == opt)
    }

    /// The value of superblock option `key=` (e.g. `hidepid`), if set.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.super_options.split(',').find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    }
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
pub fn cgroup2_mounts(text: &str) -> Vec<Mount> {
    parse_all_mounts(text).into_iter().filter(|m| m.fstype == "cgroup2").collect()
}

/// Every mount of `/proc/self/mountinfo` (doctor reads the proc mount's options from it).
pub fn read_all_mounts() -> io::Result<Vec<Mount>> {
    fs::read_to_string("/proc/self/mountinfo").map(|t| parse_all_mounts(&t))
}

/// The cgroup v2 path from the text of `/proc/PID/cgroup` (the `0::/path` line).
pub fn parse_proc_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.strip_suffix(" (deleted)").unwrap_or(p))
}

/// The mount through which cgroup `rel` (as `/proc/self/cgroup` names it) is reached: the
/// first whose root contains it.
pub fn mount_of<'a>(mounts: &'a [Mount], rel: &str) -> Option<(&'a Mount, PathBuf)> {
    mounts.iter().find_map(|m| {
        let root = m.root.trim_end_matches('/');
        let rest = if root.is_empty() { Some(rel) } else { rel.strip_prefix(root) };
        let rest = rest.filter(|r| r.is_empty() || r.starts_with('/'))?;
        Some((m, m.mount_point.join(rest.trim_start_matches('/'))))
    })
}

/// Where cgroup `rel` (as `/proc/self/cgroup` names it) appears in the filesystem.
pub fn resolve(mounts: &[Mount], rel: &str) -> Option<PathBuf> {
    mount_of(mounts, rel).map(|(_, p)| p)
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

/// `populated` from the text of `cgroup.events`.
pub fn events_populated(text: &str) -> Option<bool> {
    text.lines().find_map(|l| l.strip_prefix("populated ")).map(|v| v.trim() != "0")
}

/// Fails unless `p` is a directory of a cgroup v2 filesystem (statfs magic).
pub fn check_cgroup2_dir(p: &Path) -> Result<(), Unusable> {
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

/// The cgroup2 hierarchy as guardian sees it.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    /// Every cgroup2 mount, in mountinfo order.
    pub mounts: Vec<Mount>,
    /// guardian's own cgroup path (`/...`).
    pub own_rel: String,
    /// guardian's own cgroup directory, through the first mount that reaches it.
    pub own_dir: PathBuf,
    /// That mount's index in `mounts`.
    own_mount: usize,
}

impl Hierarchy {
    pub fn find() -> Result<Hierarchy, String> {
        let mi =
            fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let cg = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mut mounts = cgroup2_mounts(&mi);
        // Inside a cgroup namespace (guardian started there by a privileged guardian, or a
        // container's) a mount made outside it shows a root above the namespace's (`/..`).
        // Where the namespace root is found below it, the mount serves as one of that root.
        if let Some(own) = parse_proc_cgroup(&cg) {
            let me = std::process::id().to_string();
            for m in mounts.iter_mut().filter(|m| m.root.starts_with("/..")) {
                if let Some(dir) = locate_namespace_root(m, own, &me) {
                    m.root = "/".into();
                    m.mount_point = dir;
                }
            }
        }
        Hierarchy::from_mounts(mounts, &cg)
    }

    /// [`Hierarchy::find`] on the texts of `/proc/self/mountinfo` and `/proc/self/cgroup`.
    #[cfg(test)]
    pub fn from_texts(mountinfo: &str, proc_cgroup: &str) -> Result<Hierarchy, String> {
        Hierarchy::from_mounts(cgroup2_mounts(mountinfo), proc_cgroup)
    }

    fn from_mounts(mounts: Vec<Mount>, proc_cgroup: &str) -> Result<Hierarchy, String> {
        if mounts.is_empty() {
            return Err(
                "no cgroup2 filesystem is mounted (see /proc/self/mountinfo); mount one or run without --cgroup".into(),
            );
        }
        let own_rel =
            parse_proc_cgroup(proc_cgroup).ok_or("/proc/self/cgroup has no cgroup v2 line (0::/path)")?.to_string();
        let (own_mount, own_dir) = mounts
            .iter()
            .enumerate()
            .find_map(|(i, m)| mount_of(std::slice::from_ref(m), &own_rel).map(|(_, dir)| (i, dir)))
            .ok_or_else(|| format!("guardian's cgroup {own_rel} is not below any cgroup2 mount"))?;
        Ok(Hierarchy { mounts, own_rel, own_dir, own_mount })
    }

    /// The mount through which guardian reaches its own cgroup.
    pub fn own_mount(&self) -> &Mount {
        &self.mounts[self.own_mount.min(self.mounts.len() - 1)]
    }

    /// The cgroup path of directory `dir` (canonicalised first when it exists).
    pub fn relative(&self, dir: &Path) -> Option<String> {
        let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        relative(&self.mounts, &canon)
    }

    /// Whether the mount that holds `dir` has `nsdelegate` (cgroup namespaces are delegation
    /// boundaries: a process cannot move itself above its namespace's root).
    pub fn nsdelegate(&self, dir: &Path) -> bool {
        let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        self.mounts
            .iter()
            .find(|m| canon.starts_with(&m.mount_point))
            .unwrap_or(self.own_mount())
            .has_option("nsdelegate")
    }
}

/// The directory of guardian's cgroup namespace root on mount `m`, whose root lies `/..`
/// levels above it: the directory that many levels below the mount point in which `own`
/// (guardian's cgroup as the namespace shows it) lists guardian's pid.
fn locate_namespace_root(m: &Mount, own: &str, me: &str) -> Option<PathBuf> {
    let ups = m.root.split('/').take_while(|c| c.is_empty() || *c == "..").filter(|c| *c == "..").count();
    let mut level = vec![m.mount_point.clone()];
    for _ in 0..ups {
        level = level
            .iter()
            .filter_map(|d| fs::read_dir(d).ok())
            .flat_map(|rd| rd.filter_map(|e| e.ok()))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
    }
    level.into_iter().find(|d| {
        let procs = d.join(own.trim_start_matches('/')).join("cgroup.procs");
        fs::read_to_string(procs).is_ok_and(|t| t.lines().any(|l| l.trim() == me))
    })
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
        let m = cgroup2_mounts(HYBRID);
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
    fn own_cgroup_is_resolved_against_every_mount_not_only_the_first() {
        // The first cgroup2 mount shows only /job; guardian lives in /other, reachable
        // through the second mount only.
        let mi = "\
50 27 0:40 /job /mnt/job rw - cgroup2 none rw
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
";
        let h = Hierarchy::from_texts(mi, "0::/other/x\n").expect("hierarchy");
        assert_eq!(h.own_dir, PathBuf::from("/sys/fs/cgroup/unified/other/x"));
        assert_eq!(h.own_mount().mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert!(h.own_mount().has_option("nsdelegate"));
        let h = Hierarchy::from_texts(mi, "0::/job/a\n").expect("hierarchy");
        assert_eq!(h.own_dir, PathBuf::from("/mnt/job/a"));
        assert!(!h.own_mount().has_option("nsdelegate"));
        assert!(Hierarchy::from_texts("garbage\n", "0::/\n").is_err());
        assert!(Hierarchy::from_texts(mi, "1:cpu:/\n").is_err());
    }

    #[test]
    fn unescapes_mount_points() {
        let text = "30 1 0:40 /sub\\040dir /mnt/my\\040cg\\011x\\134y rw - cgroup2 none rw,nsdelegate\n";
        let m = cgroup2_mounts(text);
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
    fn all_mounts_keep_fstype_and_super_options() {
        let text = "\
22 27 0:21 / /proc rw,relatime - proc proc rw,hidepid=invisible,gid=4
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";
        let m = parse_all_mounts(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].option("hidepid"), Some("invisible"));
        assert_eq!(m[1].option("hidepid"), None);
        assert_eq!(m[1].super_options, "rw,nsdelegate", "optional fields before '-' are skipped");
        assert!(m[1].has_option("nsdelegate") && !m[0].has_option("nsdelegate"));
    }

    #[test]
    fn ignores_v1_and_garbage_lines() {
        assert!(cgroup2_mounts("garbage\n1 2 3\n14:35 31 0:32 / /x rw - cgroup cgroup rw\n").is_empty());
    }

    #[test]
    fn proc_cgroup_lines() {
        assert_eq!(parse_proc_cgroup("4:memory:/x\n0::/user.slice/a b\n"), Some("/user.slice/a b"));
        assert_eq!(parse_proc_cgroup("0::/gone (deleted)\n"), Some("/gone"));
        assert_eq!(parse_proc_cgroup("4:memory:/x\n"), None);
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
}
