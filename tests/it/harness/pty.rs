//! An interactive bash in its own session on a fresh pseudo-terminal, driven like `expect`:
//! [`Pty::bash`] starts it (as `nobody` when the suite runs as root, tagged with the test's
//! nonce through a tagged symlink of bash), [`Pty::expect`] waits for text, [`Pty::send`] and
//! [`Pty::type_line`] type. Dropping it kills whatever carries the nonce and prints the
//! transcript when the test failed (or `PTY_TRANSCRIPT` is set).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::{Ctx, NOBODY, is_root, kill_tagged, wait_for};

/// Whether uid `NOBODY` can execute `path` (the file and every directory above it).
fn others_can_exec(path: &Path) -> bool {
    let Ok(real) = fs::canonicalize(path) else {
        return false;
    };
    let mode = |p: &Path| fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    mode(&real) & 0o001 != 0 && real.ancestors().skip(1).all(|d| d.as_os_str().is_empty() || mode(d) & 0o001 != 0)
}

/// An executable the session's user can run: the first of `candidates` (then `$PATH`).
pub fn find_program(name: &str, candidates: &[&str]) -> Option<PathBuf> {
    let path_dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    candidates
        .iter()
        .map(PathBuf::from)
        .chain(path_dirs.into_iter().map(|d| d.join(name)))
        .find(|p| p.is_file() && (!is_root() || others_can_exec(p)))
}

/// [`find_program`], or `None` with a visible skip of `test` (a failure as root, which can
/// install it).
pub fn need_program_for(test: &str, name: &str, candidates: &[&str], package: &str) -> Option<PathBuf> {
    let found = find_program(name, candidates);
    if found.is_none() {
        assert!(!is_root(), "{test} needs {name} that uid {NOBODY} can run: install {package}");
        super::skipped(test, &format!("no {name} that uid {NOBODY} can run"));
    }
    found
}

/// A pty master/slave pair; the slave belongs to `owner` when given.
fn open_pty(owner: Option<u32>) -> io::Result<(File, File)> {
    let master = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open("/dev/ptmx")?;
    let fd = master.as_raw_fd();
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: fd is an open pty master; name is a writable buffer of the given length.
    let ok = unsafe {
        libc::grantpt(fd) == 0 && libc::unlockpt(fd) == 0 && libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) == 0
    };
    if !ok {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ptsname_r wrote a NUL-terminated string into name.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    let slave = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(&path)?;
    let ws = libc::winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: fd is an open pty master; ws is a valid winsize.
    unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) };
    if let Some(uid) = owner {
        // SAFETY: slave is an open fd; -1 keeps the group.
        if unsafe { libc::fchown(slave.as_raw_fd(), uid, u32::MAX) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((master, slave))
}

/// An interactive bash on a pty, and everything it printed.
pub struct Pty {
    bash: Child,
    master: File,
    out: Arc<Mutex<Vec<u8>>>,
    cursor: usize,
    prompt: &'static str,
    // Dropped last: its own Drop kills whatever is still tagged and removes the directory.
    pub ctx: Ctx,
}

impl Pty {
    /// `bash --norc --noprofile --noediting -i` with `PS1=prompt` and `env`, in its own session
    /// with the pty as its controlling terminal, in `ctx.dir`; as `nobody` when `drop_privs`.
    /// Returns once the first prompt is there. `None` (with the reason printed) when there is
    /// no bash: a failure as root.
    pub fn bash(ctx: Ctx, name: &str, prompt: &'static str, env: &[(&str, &str)], drop_privs: bool) -> Option<Pty> {
        let bash = need_program_for(name, "bash", &["/usr/bin/bash", "/bin/bash"], "bash")?;
        // argv[0] carries the nonce, so bash (and every subshell it forks) is tagged.
        let bash_link = ctx.path(&format!("bash-{}", ctx.tag()));
        std::os::unix::fs::symlink(&bash, &bash_link).expect("symlink bash");
        let (master, slave) = open_pty(drop_privs.then_some(NOBODY)).expect("open a pty");
        let mut cmd = Command::new(&bash_link);
        cmd.args(["--norc", "--noprofile", "--noediting", "-i"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &ctx.dir)
            .env("TERM", "dumb")
            .env("LC_ALL", "C")
            .env("PS1", prompt)
            .env("HISTFILE", "/dev/null")
            .envs(env.iter().copied())
            .current_dir(&ctx.dir)
            .stdin(Stdio::from(slave.try_clone().expect("dup slave")))
            .stdout(Stdio::from(slave.try_clone().expect("dup slave")))
            .stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls (setsid, ioctl, setgroups, setgid, setuid).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if drop_privs
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(NOBODY) != 0
                        || libc::setuid(NOBODY) != 0)
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let bash = cmd.spawn().expect("spawn bash");
        drop(cmd);

        let out = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("dup master");
        let sink = Arc::clone(&out);
        // Reads until every slave fd is closed (EIO); owns its own fd, so closing ours is safe.
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => sink.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
        let mut pty = Pty { bash, master, out, cursor: 0, prompt, ctx };
        let first = pty.expect(prompt);
        assert!(!first.contains("job control"), "bash has no job control: {first:?}");
        if drop_privs {
            let status = fs::read_to_string(format!("/proc/{}/status", pty.bash_pid())).unwrap_or_default();
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap_or_default();
            assert_eq!(uid.split_whitespace().next(), Some("65534"), "bash runs as nobody: {uid:?}");
        }
        Some(pty)
    }

    /// Everything the terminal showed, control characters as `^X`.
    pub fn transcript(&self) -> String {
        let buf = self.out.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&buf)
            .chars()
            .filter(|&c| c != '\r')
            .map(
                |c| {
                    if c.is_control() && c != '\n' {
                        format!("^{}", char::from((c as u8) ^ 0x40))
                    } else {
                        c.to_string()
                    }
                },
            )
            .collect()
    }

    /// Waits until `needle` appears after the cursor; returns the text from the cursor to the
    /// end of the line holding it (to the needle's end for the prompt, which has no newline)
    /// and moves the cursor past it.
    pub fn expect(&mut self, needle: &str) -> String {
        let (out, cursor, prompt) = (Arc::clone(&self.out), self.cursor, self.prompt);
        let (chunk, stop) = wait_for(&format!("{needle:?} on the terminal"), || {
            let buf = out.lock().unwrap_or_else(|e| e.into_inner());
            let text = &buf[cursor..];
            let at = text.windows(needle.len()).position(|w| w == needle.as_bytes())?;
            let after = at + needle.len();
            // A marker line counts once complete; the prompt has no newline.
            let stop =
                if needle == prompt { after } else { after + text[after..].iter().position(|&b| b == b'\n')? + 1 };
            Some((String::from_utf8_lossy(&text[..stop]).replace('\r', ""), stop))
        });
        self.cursor += stop;
        chunk
    }

    /// The line holding `needle` (which must not occur in anything typed), from `needle` on.
    pub fn expect_line(&mut self, needle: &str) -> String {
        let chunk = self.expect(needle);
        let line = chunk.lines().rev().find(|l| l.contains(needle)).unwrap_or_default();
        line[line.find(needle).unwrap_or(0)..].trim().to_string()
    }

    pub fn send(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).expect("write to the pty");
    }

    pub fn type_line(&mut self, line: &str) {
        self.send(&format!("{line}\n"));
    }

    pub fn bash_pid(&self) -> i32 {
        self.bash.id() as i32
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        kill_tagged(&self.ctx.nonce);
        let _ = self.bash.kill();
        let _ = self.bash.wait();
        if std::thread::panicking() || std::env::var_os("PTY_TRANSCRIPT").is_some() {
            eprintln!("terminal transcript ({}):\n{}", self.ctx.tag(), self.transcript());
        }
    }
}
