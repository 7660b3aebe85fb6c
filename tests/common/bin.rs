//! The guardian binary as the unprivileged test user can run it. Shared by every test crate
//! that drops guardian to `nobody` (tests/common, tests/hardening_support, tests/cgroup.rs),
//! so a checkout below a directory others cannot enter (such as `/root`) still works.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The guardian binary, executable by `nobody`: the build's own when every directory above
/// it is traversable by others, else a 0755 copy in a 0755 temp dir (once per test process).
pub fn guardian_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_guardian"));
        if !is_root() || others_can_exec(&built) {
            return built;
        }
        let dir = std::env::temp_dir().join(format!("guardian-test-bin-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("create bin dir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod bin dir");
        let copy = dir.join("guardian");
        fs::copy(&built, &copy).expect("copy guardian");
        fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).expect("chmod guardian");
        eprintln!("note: {} is not reachable by uid {NOBODY}; using a copy at {}", built.display(), copy.display());
        copy
    })
}

fn others_can_exec(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    if meta.permissions().mode() & 0o001 == 0 {
        return false;
    }
    path.ancestors()
        .skip(1)
        .filter(|p| !p.as_os_str().is_empty())
        .all(|dir| fs::metadata(dir).map(|m| m.permissions().mode() & 0o001 != 0).unwrap_or(false))
}
