//! cgroup: guardian's own small layer over the cgroup v2 filesystem (no cgroups-rs), and the
//! only code in guardian that reads mountinfo or judges a delegation (`doctor` asks here).
//!
//! * [`mount`]: the cgroup2 mounts in `/proc/self/mountinfo` (never assumes `/sys/fs/cgroup`:
//!   on hybrid hosts it sits at `/sys/fs/cgroup/unified`), guardian's own cgroup from the
//!   `0::/path` line of `/proc/self/cgroup`, cgroup paths to directories and back.
//! * [`leaf`]: the delegation check, the provider's leaf `guardian-<pid>-<starttime>` below a
//!   delegated parent (`--cgroup PATH`) or guardian's own cgroup (`--cgroup auto`), and its
//!   limits. The name is what lets `guardian sweep` tell later whether that guardian lives.
//! * `provider`: the provider's leaf from `--cgroup` and the limits, with `auto`'s fallback to
//!   plain subreaper mode (`main` only calls [`leaf_for_provider`]).
//! * `controllers`: the controllers the limits need, enabled in the parent under the
//!   no-internal-process rule (guardian's `.self` move, refusal of a parent holding
//!   processes), undone on failure.
//! * [`tree`]: the one kill (`cgroup.kill`, then pidfd SIGKILLs for what it misses; freeze
//!   fallback before Linux 5.14), membership, waiting for `populated 0`, removal at any depth.
//! * [`sweep`]: removes the leaves of dead guardians, never one whose guardian lives.
//!
//! Every fd is opened close-on-exec. No `unsafe` here.

use std::ffi::OsStr;
use std::io;
use std::path::PathBuf;

use crate::proctree::Proc;

mod controllers;
pub mod leaf;
pub mod mount;
mod provider;
pub mod sweep;
pub mod tree;

pub use leaf::{Leaf, Parent, check_parent};
pub use mount::Hierarchy;
pub use provider::leaf_for_provider;
pub use sweep::sweep;
pub use tree::Killed;

/// Prefix of every leaf guardian creates.
pub const LEAF_PREFIX: &str = "guardian-";
/// Suffix of the sibling leaf guardian moves itself into when it must leave its cgroup
/// (no-internal-process rule).
pub const SELF_SUFFIX: &str = ".self";

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
    proc.stat(pid).is_some_and(|s| s.starttime == start && !s.is_dead())
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
    pub(crate) fn entries(&self) -> Vec<(&'static str, &'static str, &str)> {
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
// Cgroup namespace

/// Whether guardian may start the provider in a new cgroup namespace (`CLONE_NEWCGROUP`
/// needs CAP_SYS_ADMIN): then the provider's cgroup root is its leaf, and on a mount with
/// `nsdelegate` the kernel refuses its tree any move out of the leaf.
pub fn may_create_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status").ok().is_some_and(|t| cap_sys_admin(&t))
}

/// CAP_SYS_ADMIN (bit 21) in the `CapEff:` line of `/proc/self/status`.
fn cap_sys_admin(status: &str) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 21) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cap_sys_admin_from_status() {
        assert!(cap_sys_admin("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(cap_sys_admin("CapEff:\t0000000000200000\n"));
        assert!(!cap_sys_admin("CapEff:\t0000000000000000\n"));
        assert!(!cap_sys_admin("CapPrm:\t000001ffffffffff\n"));
    }
}
