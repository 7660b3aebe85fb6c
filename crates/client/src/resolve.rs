//! resolve: the provider's program found as `execvp` will find it, before guardian starts, so
//! that a command that cannot run fails at spawn with `io::ErrorKind::NotFound` or
//! `PermissionDenied`, as `std::process::Command::spawn` does, instead of later as guardian's
//! status 127 or 126. It stats files, starts nothing and waits for nothing. The search path is
//! the one guardian will use: `PATH` of the environment the command gives guardian (this
//! process's, edited by `env`, `env_remove`, `env_clear`), and `/bin:/usr/bin` without one.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::command::Builder;

/// execvp's search path when `PATH` is unset (glibc's and musl's `_CS_PATH`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

enum Found {
    Runnable,
    Missing,
    NotExecutable(String),
}

fn probe(path: &Path, check_access: bool) -> Found {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(_) => return Found::Missing,
    };
    if meta.is_dir() {
        return Found::NotExecutable("is a directory".into());
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Found::NotExecutable("has no execute permission".into());
    }
    if check_access && let Err(e) = rustix::fs::access(path, rustix::fs::Access::EXEC_OK) {
        return Found::NotExecutable(format!("is not executable by this user ({e})"));
    }
    Found::Runnable
}

/// `Ok` when the provider's program can be started; the error `spawn` returns otherwise.
pub(crate) fn check(b: &Builder) -> io::Result<()> {
    let program = b.program.as_os_str();
    let name = Path::new(program).display().to_string();
    if program.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "cannot run an empty program name"));
    }
    // Another user's rights are not this process's to check; existence still is.
    let check_access = b.uid.is_none() && b.gid.is_none();
    let within = |p: &Path| -> PathBuf {
        match &b.cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        }
    };
    if program.as_bytes().contains(&b'/') {
        return match probe(&within(Path::new(program)), check_access) {
            Found::Runnable => Ok(()),
            Found::Missing => Err(io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))),
            Found::NotExecutable(why) => Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{name} {why}"))),
        };
    }
    let path: OsString = b.child_env("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    let mut denied = None;
    for dir in path.as_bytes().split(|&c| c == b':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = within(&dir.join(program));
        match probe(&candidate, check_access) {
            Found::Runnable => return Ok(()),
            Found::Missing => {}
            Found::NotExecutable(why) => {
                denied.get_or_insert_with(|| format!("{} {why}", candidate.display()));
            }
        }
    }
    Err(match denied {
        Some(why) => io::Error::new(io::ErrorKind::PermissionDenied, why),
        None => io::Error::new(
            io::ErrorKind::NotFound,
            format!("{name}: not found in the command's PATH ({})", Path::new(&path).display()),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(program: &str, edit: impl Fn(&mut crate::Command)) -> Option<io::ErrorKind> {
        let mut cmd = crate::Command::new(program);
        edit(&mut cmd);
        check(&cmd.b).err().map(|e| e.kind())
    }

    #[test]
    fn found_as_execvp_finds_it() {
        assert_eq!(kind("sh", |_| {}), None);
        assert_eq!(kind("/bin/sh", |_| {}), None);
        assert_eq!(kind("tgc-no-such-program", |_| {}), Some(io::ErrorKind::NotFound));
        assert_eq!(kind("/nonexistent/x", |_| {}), Some(io::ErrorKind::NotFound));
        assert_eq!(kind("/etc/passwd", |_| {}), Some(io::ErrorKind::PermissionDenied));
        assert_eq!(kind("/tmp", |_| {}), Some(io::ErrorKind::PermissionDenied));
        assert_eq!(kind("", |_| {}), Some(io::ErrorKind::NotFound));
        // The command's own PATH, as guardian will search it.
        assert_eq!(
            kind("sh", |c| {
                c.env("PATH", "/nonexistent");
            }),
            Some(io::ErrorKind::NotFound)
        );
        assert_eq!(
            kind("sh", |c| {
                c.env_clear();
            }),
            None,
            "execvp's default path"
        );
        assert_eq!(
            kind("passwd", |c| {
                c.env("PATH", "/etc");
            }),
            Some(io::ErrorKind::PermissionDenied)
        );
        // Relative to the command's directory.
        assert_eq!(
            kind("./sh", |c| {
                c.current_dir("/bin");
            }),
            None
        );
    }
}
