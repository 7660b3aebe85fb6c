//! cgroup::controllers: the controllers a leaf's limits need, enabled in the parent's
//! `cgroup.subtree_control` under cgroup v2's no-internal-process rule, and undone on failure.
//!
//! A cgroup that holds processes cannot give its children domain controllers (`memory`: the
//! kernel says EBUSY), and giving them a threaded one (`pids`, `cpu`) makes it a *thread
//! root*, whose domain children then refuse every process (clone3 fails EOPNOTSUPP). So:
//!
//! * guardian living in the parent moves itself first into a sibling leaf
//!   `guardian-<pid>-<start>.self`; this holds at the root of a cgroup namespace too (a nested
//!   guardian, a container's private namespace): only the hierarchy's real root, which the
//!   rule exempts, is left alone (it has no `cgroup.type`);
//! * a parent that still holds any other process is refused before anything is written, with
//!   the no-internal-process explanation and the pids it holds;
//! * whatever guardian changed (controllers it enabled, its own move) is undone on any later
//!   failure, so the parent is left as guardian found it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::mount::Hierarchy;
use super::tree::write_file;
use super::{SELF_SUFFIX, Unusable, io_unusable, leaf_name, unusable};

/// What [`enable`] changed in the parent, for [`Enabled::undo`].
#[derive(Debug, Default)]
pub(super) struct Enabled {
    parent: PathBuf,
    /// Controllers guardian wrote `+ctl` for.
    added: Vec<&'static str>,
    /// The sibling leaf guardian moved itself into.
    pub self_leaf: Option<PathBuf>,
}

impl Enabled {
    /// Restores the parent: disables the controllers guardian enabled, then (the rule allows
    /// it again) moves guardian back and removes its sibling leaf. Best effort; each step that
    /// fails is logged.
    pub fn undo(&mut self) {
        if !self.added.is_empty() {
            let line: Vec<String> = self.added.iter().map(|c| format!("-{c}")).collect();
            let sc = self.parent.join("cgroup.subtree_control");
            if let Err(e) = write_file(&sc, &line.join(" ")) {
                crate::log::warn!("could not restore {} (writing {}): {e}", sc.display(), line.join(" "));
            }
            self.added.clear();
        }
        if let Some(s) = self.self_leaf.take() {
            if let Err(e) = move_guardian(&self.parent) {
                crate::log::warn!("could not move guardian back into {}: {e}", self.parent.display());
            }
            let _ = fs::remove_dir(&s);
        }
    }
}

/// Moves guardian into `dir`: its own process and, behind a sentinel (which was started in
/// the same cgroup and would otherwise stay behind as an internal process), the sentinel too.
fn move_guardian(dir: &Path) -> io::Result<()> {
    let procs = dir.join("cgroup.procs");
    write_file(&procs, "0")?;
    match crate::sentinel::pid() {
        Some(pid) => write_file(&procs, &pid.to_string()),
        None => Ok(()),
    }
}

/// Whether `dir` is the root of the whole cgroup2 hierarchy (not merely of a cgroup
/// namespace): only there is no `cgroup.type`, and only there may processes and enabled
/// controllers coexist.
pub(super) fn is_hierarchy_root(dir: &Path) -> bool {
    dir.join("cgroup.procs").exists() && !dir.join("cgroup.type").exists()
}

/// Makes the controllers of `wanted` (controller, interface file) available to a new child of
/// `parent`. `me`/`start` name guardian's sibling leaf should it have to leave `parent`.
pub(super) fn enable(
    h: &Hierarchy,
    parent: &Path,
    parent_rel: &str,
    wanted: &[(&'static str, &'static str)],
    me: i32,
    start: u64,
) -> Result<Enabled, Unusable> {
    let mut done = Enabled { parent: parent.to_path_buf(), ..Enabled::default() };
    if wanted.is_empty() {
        return Ok(done);
    }
    let available = read_words(&parent.join("cgroup.controllers"));
    for (ctl, file) in wanted {
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
    let missing: Vec<&'static str> =
        wanted.iter().map(|(c, _)| *c).filter(|c| !enabled.iter().any(|e| e == c)).collect();
    if missing.is_empty() || is_hierarchy_root(parent) {
        return write_enable(parent, missing, done);
    }
    if h.own_rel == parent_rel {
        let me_leaf = parent.join(format!("{}{SELF_SUFFIX}", leaf_name(me, start)));
        fs::create_dir(&me_leaf).map_err(|e| {
            io_unusable(
                &e,
                format!("cannot create {} to move guardian out of {}: {e}", me_leaf.display(), parent.display()),
            )
        })?;
        if let Err(e) = move_guardian(&me_leaf) {
            // The sentinel may have moved already: back with it, then away.
            let _ = move_guardian(parent);
            let _ = fs::remove_dir(&me_leaf);
            return Err(io_unusable(
                &e,
                format!("cannot move guardian into {}: writing cgroup.procs failed: {e}", me_leaf.display()),
            ));
        }
        crate::log::debug!("moved guardian into {} (no-internal-process rule)", me_leaf.display());
        done.self_leaf = Some(me_leaf);
    }
    if let Some(u) = holds_processes(parent, &missing) {
        done.undo();
        return Err(u);
    }
    let mut done = write_enable(parent, missing, done)?;
    // A process that joined between the check and the write: threaded controllers were
    // accepted and made the parent a thread root. Undo and say why.
    let added = done.added.clone();
    if let Some(u) = holds_processes(parent, &added) {
        done.undo();
        return Err(u);
    }
    Ok(done)
}

/// The no-internal-process refusal when `parent` lists any process in `cgroup.procs`.
fn holds_processes(parent: &Path, ctls: &[&str]) -> Option<Unusable> {
    let procs = fs::read_to_string(parent.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<&str> = procs.split_whitespace().collect();
    if pids.is_empty() {
        return None;
    }
    let shown =
        if pids.len() > 5 { format!("{} and {} more", pids[..5].join(" "), pids.len() - 5) } else { pids.join(" ") };
    let plus: Vec<String> = ctls.iter().map(|c| format!("+{c}")).collect();
    Some(unusable(
        libc::EBUSY,
        format!(
            "{} holds processes (pids {shown}), so it cannot enable {} for a leaf: cgroup v2's no-internal-process rule (a cgroup with processes gives its children no controllers; a threaded one such as pids or cpu would turn it into a thread root); nothing was changed there. Pass --cgroup a cgroup that holds no process (mkdir {}/jobs; --cgroup {}/jobs), or start guardian (with its sentinel, the process you started) alone in it with --cgroup auto",
            parent.display(),
            plus.join(" "),
            parent.display(),
            parent.display(),
        ),
    ))
}

fn write_enable(parent: &Path, missing: Vec<&'static str>, mut done: Enabled) -> Result<Enabled, Unusable> {
    if missing.is_empty() {
        return Ok(done);
    }
    let line: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    let sc = parent.join("cgroup.subtree_control");
    if let Err(e) = write_file(&sc, &line.join(" ")) {
        if e.raw_os_error() == Some(libc::EBUSY)
            && let Some(u) = holds_processes(parent, &missing)
        {
            done.undo();
            return Err(u);
        }
        let hint = match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => {
                "check that the cgroup is delegated to this user (its cgroup.subtree_control must be writable)"
            }
            Some(libc::EBUSY) => {
                "the kernel refused it while the cgroup holds processes or a child uses it (no-internal-process rule)"
            }
            _ => "the kernel refused it",
        };
        done.undo();
        return Err(io_unusable(&e, format!("cannot enable {} in {}: {e}; {hint}", line.join(" "), sc.display())));
    }
    done.added = missing;
    Ok(done)
}

fn read_words(p: &Path) -> Vec<String> {
    fs::read_to_string(p).map(|t| t.split_whitespace().map(String::from).collect()).unwrap_or_default()
}
