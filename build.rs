//! Build script of the guardian binary: the commit `guardian --version` names
//! (`guardian 0.2.0 (<commit> <target>)`). Reproducible: no timestamp, and the same commit gives
//! the same text wherever it is built. The commit comes from, in order: `GUARDIAN_COMMIT` (set by
//! whoever builds from a tree without git), git in the checkout, `.cargo_vcs_info.json` (what
//! `cargo package` writes into a .crate, so `cargo install treeguardian` names its commit too),
//! else `unknown` (a tarball without .git).

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    println!("cargo:rerun-if-env-changed=GUARDIAN_COMMIT");
    let commit = std::env::var("GUARDIAN_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| from_git(dir))
        .or_else(|| from_vcs_info(dir))
        .unwrap_or_else(|| "unknown".into());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=GUARDIAN_BUILD_INFO={commit} {target}");
}

/// The checked-out commit (12 hex digits), and rerun when HEAD or the branch moves.
fn from_git(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| text.trim().to_string())
    };
    // Only the checkout's own repository (not one that encloses an unpacked tarball).
    let top = git(&["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    for file in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", file]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty())
}

/// The commit `cargo package` recorded (`"sha1": "<40 hex>"`), shortened as git's.
fn from_vcs_info(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let rest = &text[text.find("\"sha1\"")? + 6..];
    let start = rest.find('"')? + 1;
    let sha: String = rest[start..].chars().take_while(char::is_ascii_hexdigit).take(12).collect();
    (sha.len() == 12).then_some(sha)
}
