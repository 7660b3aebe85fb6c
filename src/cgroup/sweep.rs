//! cgroup::sweep: `guardian sweep [--cgroup PATH | --leaf LEAF]`, the policy over the leaf
//! primitives: removes the leaves of dead guardians (killing what is left in them), never
//! one whose guardian lives, and prints one line per leaf.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::mount::{Hierarchy, check_cgroup2_dir, events_populated};
use super::tree::{Killed, kill, remove_tree, wait_empty};
use super::{guardian_alive, parse_leaf_name};
use crate::exit::Failure;
use crate::proctree::Proc;

/// How long sweep waits for a killed leaf to empty, re-killing once a second (a process
/// whose main thread exits just as the kill is written is only caught by the next one).
const EMPTY_WAIT: Duration = Duration::from_secs(10);

enum Swept {
    Removed(String),
    Kept,
    Failed(String),
}

/// `guardian sweep`: every `guardian-<pid>-<start>` leaf below `path` (default: guardian's
/// own cgroup), or only `leaf`, whose guardian is dead is killed and removed. Returns the
/// exit status: 0 when nothing failed (and, with `leaf`, the leaf is gone), 1 otherwise; a
/// [`Failure`] (125) when sweep cannot run.
pub fn sweep(path: Option<&OsStr>, leaf: Option<&OsStr>) -> Result<i32, Failure> {
    let h = Hierarchy::find().map_err(|m| Failure::guardian(format!("sweep: {m}")))?;
    let (parent, only) = match (leaf, path) {
        (Some(l), _) => {
            let l = PathBuf::from(l);
            // A bare leaf name (`guardian-P-S`, no directory) names a leaf in the current
            // directory when one is there, else in the cgroup sweep searches by default
            // (`--cgroup PATH`, or guardian's own): never the empty path.
            let l = if l.parent().is_some_and(|p| p.as_os_str().is_empty()) && !l.exists() {
                path.map(PathBuf::from).unwrap_or_else(|| h.own_dir.clone()).join(&l)
            } else if l.is_relative() {
                std::env::current_dir().map(|d| d.join(&l)).unwrap_or(l)
            } else {
                l
            };
            let name = l.file_name().and_then(|n| n.to_str()).map(String::from);
            if name.as_deref().and_then(parse_leaf_name).is_none() {
                return Err(Failure::guardian(format!(
                    "sweep: {} is not a guardian leaf (guardian-<pid>-<start>); pass the path the spawned event names",
                    l.display()
                )));
            }
            if !l.exists() {
                let _ = writeln!(io::stdout().lock(), "sweep {}: already removed", l.display());
                return Ok(0);
            }
            (l.parent().map(Path::to_path_buf).unwrap_or_default(), name)
        }
        (None, Some(p)) => (PathBuf::from(p), None),
        (None, None) => (h.own_dir.clone(), None),
    };
    if let Err(u) = check_cgroup2_dir(&parent) {
        return Err(Failure::guardian(format!("sweep: {}", u.message)));
    }
    let rel_parent = h.relative(&parent);
    let mut proc = Proc::open().map_err(|e| {
        Failure::guardian(format!("sweep: cannot open /proc: {e}; without it no guardian can be told alive or dead"))
    })?;
    let mut names: Vec<String> = match &only {
        Some(n) => vec![n.clone()],
        None => match fs::read_dir(&parent) {
            Ok(rd) => rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().to_str().map(String::from)).collect(),
            Err(e) => return Err(Failure::guardian(format!("sweep: cannot list {}: {e}", parent.display()))),
        },
    };
    names.sort();
    let (mut removed, mut live, mut failed) = (0, 0, 0);
    let mut out = io::stdout().lock();
    for name in names {
        let Some((pid, start, _)) = parse_leaf_name(&name) else {
            continue;
        };
        let dir = parent.join(&name);
        let rel = rel_parent.as_deref().map(|r| format!("{}/{name}", r.trim_end_matches('/'))).unwrap_or_default();
        match sweep_one(&mut proc, &dir, &rel, pid, start) {
            Swept::Kept => {
                live += 1;
                let _ = writeln!(out, "kept {}: guardian {pid} is alive", dir.display());
            }
            Swept::Removed(how) => {
                removed += 1;
                let _ = writeln!(out, "removed {}: guardian {pid} is dead; {how}", dir.display());
            }
            Swept::Failed(why) => {
                failed += 1;
                let _ = writeln!(out, "failed {}: {why}", dir.display());
            }
        }
    }
    let _ =
        writeln!(out, "sweep {}: {removed} removed, {live} kept (guardian alive), {failed} failed", parent.display());
    let kept_named = only.is_some() && live > 0;
    Ok(if failed > 0 || kept_named { 1 } else { 0 })
}

fn sweep_one(proc: &mut Proc, dir: &Path, rel: &str, pid: i32, start: u64) -> Swept {
    if guardian_alive(proc, pid, start) {
        return Swept::Kept;
    }
    let populated = fs::read_to_string(dir.join("cgroup.events")).ok().and_then(|t| events_populated(&t));
    let mut how = String::from("empty");
    if populated != Some(false) {
        let mut emptied = false;
        for _ in 0..EMPTY_WAIT.as_secs() {
            how = match kill(dir, rel, Some(proc)) {
                Ok(Killed::KillFile) => "killed its processes (cgroup.kill)".into(),
                Ok(Killed::FreezeAndKill(_)) => "killed its processes (cgroup.freeze fallback)".into(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Swept::Removed("already removed".into()),
                Err(e) => return Swept::Failed(format!("writing cgroup.kill: {e}")),
            };
            match wait_empty(dir, Duration::from_secs(1)) {
                Ok(true) => {
                    emptied = true;
                    break;
                }
                Ok(false) => {}
                Err(e) => return Swept::Failed(format!("reading cgroup.events: {e}")),
            }
        }
        if !emptied {
            return Swept::Failed(format!("still populated {} s after the kill", EMPTY_WAIT.as_secs()));
        }
    }
    match remove_tree(dir) {
        Ok(()) => Swept::Removed(how),
        Err(e) => Swept::Failed(format!("rmdir: {e}")),
    }
}
