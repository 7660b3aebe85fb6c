//! find: which guardian binary to run. An explicit path first, then `$GUARDIAN_BIN`, then the
//! first `guardian` on `$PATH`, all read from the calling process (not from the environment the
//! `Command` gives its child, which a host may have cleared). A source that is set but does not
//! name an executable file is an error, never silently skipped: running a different guardian
//! than the one the caller chose would be a surprise.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// How to get guardian, for the error when it cannot be found.
pub(crate) const INSTALL: &str = "install guardian with `cargo install treeguardian`, the Debian package \
(`make deb`: target/debian/treeguardian_*.deb), or npm (`npm install treeguardian`), then pass its \
path with `Command::guardian(path)` or set GUARDIAN_BIN";

/// Whether `path` is an executable regular file; the reason when it is not.
fn executable(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err("not executable".into());
    }
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).map_err(|e| format!("not executable by this user ({e})"))
}

/// The guardian to run, or the message naming what was tried.
pub(crate) fn guardian(explicit: Option<&Path>) -> Result<PathBuf, String> {
    locate(explicit, std::env::var_os("GUARDIAN_BIN").as_deref(), std::env::var_os("PATH").as_deref())
}

pub(crate) fn locate(explicit: Option<&Path>, env: Option<&OsStr>, path: Option<&OsStr>) -> Result<PathBuf, String> {
    let mut tried = String::from("guardian binary not found: ");
    match explicit {
        Some(p) => {
            return executable(p).map(|()| p.to_path_buf()).map_err(|why| {
                format!(
                    "guardian binary not usable: Command::guardian({}) {why} ($GUARDIAN_BIN and $PATH are not \
                     consulted when a path is given); {INSTALL}",
                    p.display()
                )
            });
        }
        None => tried.push_str("Command::guardian(path) was not called; "),
    }
    match env.filter(|v| !v.is_empty()) {
        Some(v) => {
            let p = Path::new(v);
            return executable(p).map(|()| p.to_path_buf()).map_err(|why| {
                format!(
                    "guardian binary not usable: Command::guardian(path) was not called; $GUARDIAN_BIN={} {why} \
                     ($PATH is not consulted when GUARDIAN_BIN is set); {INSTALL}",
                    p.display()
                )
            });
        }
        None => tried.push_str("$GUARDIAN_BIN is not set; "),
    }
    let mut dirs = 0;
    for dir in std::env::split_paths(path.unwrap_or_default()).filter(|d| !d.as_os_str().is_empty()) {
        dirs += 1;
        let candidate = dir.join("guardian");
        if executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    if dirs == 0 {
        tried.push_str("$PATH is empty or not set");
    } else {
        let _ = write!(tried, "no executable `guardian` in the {dirs} directories of $PATH");
    }
    Err(format!("{tried}; {INSTALL}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_then_env_then_path() {
        let dir = std::env::temp_dir().join(format!("tg-find-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("guardian");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let sh = Path::new("/bin/sh");
        assert_eq!(locate(Some(sh), Some(bin.as_os_str()), Some(dir.as_os_str())).unwrap(), sh);
        assert_eq!(locate(None, Some(sh.as_os_str()), Some(dir.as_os_str())).unwrap(), sh);
        assert_eq!(locate(None, None, Some(dir.as_os_str())).unwrap(), bin);
        assert_eq!(locate(None, Some(OsStr::new("")), Some(dir.as_os_str())).unwrap(), bin);

        let none = locate(None, None, Some(OsStr::new("/nonexistent-tg"))).unwrap_err();
        for needle in ["Command::guardian", "$GUARDIAN_BIN", "$PATH", "cargo install treeguardian", ".deb", "npm"] {
            assert!(none.contains(needle), "{needle} missing in: {none}");
        }
        let broken = locate(Some(&dir), None, Some(dir.as_os_str())).unwrap_err();
        assert!(broken.contains("not a regular file") && broken.contains("npm"), "{broken}");
        let broken_env = locate(None, Some(OsStr::new("/nonexistent-tg/guardian")), None).unwrap_err();
        assert!(broken_env.contains("GUARDIAN_BIN=/nonexistent-tg/guardian"), "{broken_env}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
