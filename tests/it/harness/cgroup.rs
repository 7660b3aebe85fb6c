//! cgroup v2 for the tests: the one mountinfo reader, and test cgroups delegated to
//! [`NOBODY`](super::NOBODY) the way systemd's `Delegate=yes` does, removed by a drop guard
//! (`cgroup.kill`, wait for `populated 0`, rmdir bottom-up) whatever happened.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{DEADLINE, NOBODY, random_digits};

/// One line of `/proc/self/mountinfo`.
#[derive(Debug)]
pub struct Mount {
    /// The root of the mount within its filesystem (`/` for a whole cgroup2 hierarchy).
    pub root: String,
    pub point: PathBuf,
    pub fstype: String,
    /// The superblock's options (for cgroup2, shared by every mount of it: `nsdelegate`...).
    pub super_options: String,
}

/// `/proc/self/mountinfo`, with octal escapes (`\040`) undone.
pub fn mountinfo() -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(Mount {
                root: unescape(f.get(3)?),
                point: PathBuf::from(unescape(f.get(4)?)),
                fstype: r.first()?.to_string(),
                super_options: r.get(2).copied().unwrap_or_default().to_string(),
            })
        })
        .collect()
}

fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok()) {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out + rest
}

/// The first mount of the whole cgroup2 hierarchy.
pub fn cgroup2_mount() -> Option<PathBuf> {
    mountinfo().into_iter().find(|m| m.fstype == "cgroup2" && m.root == "/").map(|m| m.point)
}

/// `pid`'s cgroup v2 path (the `0::` line of `/proc/PID/cgroup`).
pub fn cgroup_of(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(String::from)
}

/// A `sh -c` wrapper (`$1` = a cgroup directory, then guardian's argv) that moves itself into
/// that cgroup as root, then runs guardian as [`NOBODY`]: guardian starts *inside* the subtree.
pub fn in_cgroup_as_nobody(cg: &Path) -> Vec<std::ffi::OsString> {
    let script = r#"echo $$ > "$1/cgroup.procs" || exit 99; shift; exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@""#;
    vec!["sh".into(), "-c".into(), script.into(), "wrap".into(), cg.into()]
}

/// A test subtree under the cgroup2 mount; removed on drop, whatever happened.
pub struct TestCgroup {
    pub path: PathBuf,
}

impl TestCgroup {
    /// A new cgroup below `mount`; `delegate` hands it to [`NOBODY`] (chown of the directory,
    /// `cgroup.procs`, `cgroup.subtree_control`, `cgroup.threads`).
    pub fn new(mount: &Path, delegate: bool) -> TestCgroup {
        let cg = TestCgroup { path: mount.join(format!("guardian-test-{}", random_digits(9))) };
        std::fs::create_dir(&cg.path).expect("mkdir test cgroup");
        if delegate {
            for f in ["", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"] {
                let p = if f.is_empty() { cg.path.clone() } else { cg.path.join(f) };
                std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).expect("chown (delegate)");
            }
        }
        cg
    }

    /// The path relative to the mount, as `/proc/PID/cgroup` shows it.
    pub fn rel(&self) -> String {
        format!("/{}", self.path.file_name().and_then(|n| n.to_str()).unwrap_or_default())
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        destroy(&self.path);
    }
}

pub fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|t| t.contains("populated 1"))
}

/// Waits on `cgroup.events` with POLLPRI (no fixed sleeps) until `populated 0`.
pub fn wait_unpopulated(dir: &Path, limit: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let Ok(file) = std::fs::File::open(dir.join("cgroup.events")) else {
        return true;
    };
    let end = Instant::now() + limit;
    let mut buf = [0u8; 256];
    loop {
        // pread re-arms POLLPRI as well as telling the state.
        let Ok(n) = rustix::io::pread(&file, &mut buf, 0) else {
            return true;
        };
        if !String::from_utf8_lossy(&buf[..n]).contains("populated 1") {
            return true;
        }
        let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            return false;
        };
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
        let _ = poll(&mut [PollFd::new(&file, PollFlags::PRI)], Some(&ts));
    }
}

fn destroy(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                destroy(&e.path());
            }
        }
    }
    if populated(dir) {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        if !wait_unpopulated(dir, DEADLINE) {
            eprintln!("cleanup: {} still populated", dir.display());
        }
    }
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    eprintln!("cleanup: could not remove {}", dir.display());
}
