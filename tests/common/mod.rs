//! Shared helpers for the integration tests: run the built guardian unprivileged, tag every
//! process a test starts with a nonce, wait for events instead of sleeping, and kill every
//! tagged process (by pidfd, after re-checking its tag) when a test ends, even by panic.
#![allow(dead_code)]

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any wait may take before the test fails: generous, the machine is shared.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// Polling interval of every wait.
pub const POLL: Duration = Duration::from_millis(15);
/// The unprivileged user guardian runs as when the suite runs as root.
pub const NOBODY: u32 = 65534;
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

mod bin;
pub use bin::guardian_bin;

/// Random digits from the kernel's generator.
pub fn random_digits(n: usize) -> String {
    let mut buf = [0u8; 16];
    File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).expect("read /dev/urandom");
    let mut v = u128::from_ne_bytes(buf);
    (0..n)
        .map(|_| {
            let d = (v % 10) as u8;
            v /= 10;
            char::from(b'0' + d)
        })
        .collect()
}

/// Reads `/proc/PID/cmdline` (NULs kept); `None` when the process is gone or a zombie.
pub fn cmdline(pid: i32) -> Option<Vec<u8>> {
    let c = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    (!c.is_empty()).then_some(c)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every live process whose argv contains `nonce` (zombies have no cmdline and don't count).
pub fn tagged_pids(nonce: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        if cmdline(pid).is_some_and(|c| contains(&c, nonce.as_bytes())) {
            out.push(pid);
        }
    }
    out
}

/// Fields of `/proc/PID/stat` after the last `)`: (state, ppid, starttime).
pub fn stat(pid: i32) -> Option<(u8, i32, u64)> {
    let buf = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    Some((*f.first()?.as_bytes().first()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Whether `pid` is alive (exists and is not a zombie).
pub fn alive(pid: i32) -> bool {
    matches!(stat(pid), Some((s, _, _)) if s != b'Z' && s != b'X')
}

pub fn pidfd_open(pid: i32) -> io::Result<RawFd> {
    // SAFETY: plain syscall; the returned fd is closed by the caller.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 { Err(io::Error::last_os_error()) } else { Ok(fd as RawFd) }
}

/// Sends `sig` to `pid` through a pidfd, only if its argv still holds `nonce` once the pidfd
/// is open (so a recycled pid is never hit).
pub fn signal_tagged(pid: i32, nonce: &str, sig: i32) -> bool {
    let Ok(fd) = pidfd_open(pid) else {
        return false;
    };
    let ok = cmdline(pid).is_some_and(|c| contains(&c, nonce.as_bytes()))
        // SAFETY: fd is an open pidfd; null siginfo.
        && unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, sig, std::ptr::null::<u8>(), 0) } == 0;
    // SAFETY: we own fd.
    unsafe { libc::close(fd) };
    ok
}

/// Kills every process tagged with `nonce` until none is left. Each one is stopped and killed
/// as soon as it is found, newest pid first, so a hopping chain cannot outrun the cleanup.
pub fn kill_tagged(nonce: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut hit = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    let mut quiet_rounds = 0;
    while Instant::now() < end && quiet_rounds < 3 {
        let mut pids: Vec<i32> = fs::read_dir("/proc")
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        pids.sort_unstable_by(|a, b| b.cmp(a));
        let mut found = false;
        for pid in pids {
            if pid == me || !cmdline(pid).is_some_and(|c| contains(&c, nonce.as_bytes())) {
                continue;
            }
            found = true;
            signal_tagged(pid, nonce, libc::SIGSTOP);
            if signal_tagged(pid, nonce, libc::SIGKILL) && !hit.contains(&pid) {
                hit.push(pid);
            }
        }
        quiet_rounds = if found { 0 } else { quiet_rounds + 1 };
        std::thread::sleep(Duration::from_millis(5));
    }
    hit
}

/// Polls `f` every [`POLL`] until it returns `Some`, or panics after [`DEADLINE`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    wait_for_within(what, DEADLINE, &mut f)
}

pub fn wait_for_within<T>(what: &str, limit: Duration, f: &mut dyn FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > end {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// Parses complete JSON Lines; panics on a line that is not a JSON object with `event`/`ts`.
pub fn parse_events(text: &str) -> Vec<Value> {
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("event line is not JSON ({e}): {l}"));
            assert!(v["event"].is_string(), "event line without `event`: {l}");
            assert!(v["ts"].is_f64() || v["ts"].is_u64(), "event line without numeric `ts`: {l}");
            v
        })
        .collect()
}

pub fn ts(v: &Value) -> f64 {
    v["ts"].as_f64().expect("ts")
}

/// One test's world: a nonce, a private temp dir writable by `nobody`, and a guard that
/// kills every tagged process when the test ends.
pub struct Ctx {
    pub nonce: String,
    pub dir: PathBuf,
    name: String,
}

impl Ctx {
    pub fn new(name: &str) -> Ctx {
        let nonce = random_digits(9);
        let dir = std::env::temp_dir().join(format!("guardian-test-{name}-{nonce}"));
        fs::create_dir_all(&dir).expect("create test dir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).expect("chmod test dir");
        Ctx { nonce, dir, name: name.to_string() }
    }

    /// A tag for `$0` of `sh -c` scripts.
    pub fn tag(&self) -> String {
        format!("guardian-test-{}", self.nonce)
    }

    /// `sleep` argument that sleeps about `secs` seconds and carries the nonce.
    pub fn sleep_arg(&self, secs: u32) -> String {
        format!("{secs}.{}", self.nonce)
    }

    /// `sleep 1000.NONCE`: a tagged long sleep, for scripts.
    pub fn sleep(&self) -> String {
        format!("sleep {}", self.sleep_arg(1000))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `sh -c SCRIPT TAG`: the shell (and every subshell it forks) carries the nonce.
    pub fn sh(&self, script: &str) -> Vec<OsString> {
        vec!["sh".into(), "-c".into(), script.into(), self.tag().into()]
    }

    /// A symlink to `/usr/bin/PROG` named with the nonce, so argv[0] carries it.
    pub fn tagged_program(&self, prog: &str) -> PathBuf {
        let target = Path::new("/usr/bin").join(prog);
        let link = self.dir.join(format!("{prog}-{}", self.tag()));
        std::os::unix::fs::symlink(target, &link).expect("symlink");
        link
    }

    /// A FIFO the test opens to release a waiting script (`read _ < FIFO`).
    pub fn fifo(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo: {}", io::Error::last_os_error());
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).expect("chmod fifo");
        p
    }

    /// Opens a FIFO for writing once a reader waits on it, writes a line and closes it.
    pub fn release(&self, fifo: &Path) {
        let mut f = wait_for(&format!("a reader on {}", fifo.display()), || {
            OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo).ok()
        });
        let _ = f.write_all(b"go\n");
    }

    /// Reads a file the provider wrote; `None` until it exists and ends with a newline.
    pub fn read_line_file(&self, name: &str) -> Option<String> {
        let s = fs::read_to_string(self.path(name)).ok()?;
        s.ends_with('\n').then(|| s.trim().to_string())
    }

    /// Waits for a file holding a pid (written as `echo $pid > file`).
    pub fn wait_pid_file(&self, name: &str) -> i32 {
        wait_for(&format!("pid file {name}"), || self.read_line_file(name).and_then(|s| s.parse().ok()))
    }

    pub fn guardian(&self) -> Builder<'_> {
        Builder {
            ctx: self,
            args: Vec::new(),
            command: Vec::new(),
            events: true,
            extra_fds: Vec::new(),
            stdout: None,
            unprivileged: true,
            envs: Vec::new(),
            wrapper: Vec::new(),
        }
    }

    /// Waits until no process carries the nonce.
    pub fn wait_tree_gone(&self) {
        wait_for("every tagged process to be gone", || tagged_pids(&self.nonce).is_empty().then_some(()));
    }

    pub fn assert_nothing_left(&self) {
        let left = tagged_pids(&self.nonce);
        assert!(left.is_empty(), "tagged processes still running: {:?}", describe(&left));
    }
}

pub fn describe(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|&p| {
            let c = cmdline(p).unwrap_or_default();
            format!("{p}: {}", String::from_utf8_lossy(&c).replace('\0', " "))
        })
        .collect()
}

impl Drop for Ctx {
    fn drop(&mut self) {
        let hit = kill_tagged(&self.nonce);
        if !hit.is_empty() && !std::thread::panicking() {
            eprintln!("[{}] cleanup killed leftover tagged processes: {hit:?}", self.name);
        }
        if std::thread::panicking() {
            eprintln!("[{}] test failed; its files are kept in {}", self.name, self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Builds a guardian command line.
pub struct Builder<'a> {
    ctx: &'a Ctx,
    args: Vec<OsString>,
    command: Vec<OsString>,
    events: bool,
    extra_fds: Vec<(File, RawFd)>,
    stdout: Option<Stdio>,
    unprivileged: bool,
    envs: Vec<(OsString, OsString)>,
    /// Programs that run guardian (e.g. `unshare --pid --fork`), before the binary.
    wrapper: Vec<OsString>,
}

impl<'a> Builder<'a> {
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, a: I) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }
    /// The provider command (put after `--`).
    pub fn command<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, c: I) -> Self {
        self.command = c.into_iter().map(Into::into).collect();
        self
    }
    pub fn script(self, script: &str) -> Self {
        let c = self.ctx.sh(script);
        self.command(c)
    }
    /// No `--events-fd 3`.
    pub fn no_events(mut self) -> Self {
        self.events = false;
        self
    }
    /// Passes `file` to guardian as fd `target`.
    pub fn pass_fd(mut self, file: File, target: RawFd) -> Self {
        self.extra_fds.push((file, target));
        self
    }
    pub fn stdout(mut self, s: Stdio) -> Self {
        self.stdout = Some(s);
        self
    }
    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }
    /// Run as the invoking user even when root (for wrappers that drop privileges later).
    pub fn privileged(mut self) -> Self {
        self.unprivileged = false;
        self
    }
    pub fn wrapper<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, w: I) -> Self {
        self.wrapper = w.into_iter().map(Into::into).collect();
        self
    }

    /// The full argv: wrapper, guardian, options, `--events-fd 3`, `--`, command.
    pub fn argv(&self) -> Vec<OsString> {
        let mut v = self.wrapper.clone();
        v.push(guardian_bin().into());
        v.extend(self.args.iter().cloned());
        if self.events {
            v.push("--events-fd".into());
            v.push("3".into());
        }
        v.push("--".into());
        v.extend(self.command.iter().cloned());
        v
    }

    pub fn spawn(self) -> Guardian {
        let argv = self.argv();
        let events_path = self.ctx.path(&format!("events-{}.jsonl", random_digits(6)));
        let stderr_path = self.ctx.path(&format!("stderr-{}.txt", random_digits(6)));
        let mut fds = self.extra_fds;
        if self.events {
            fds.push((File::create(&events_path).expect("create events file"), 3));
        }
        let stderr = File::create(&stderr_path).expect("create stderr file");
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(self.stdout.unwrap_or_else(Stdio::null))
            .stderr(stderr)
            .current_dir(&self.ctx.dir);
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let moves: Vec<(RawFd, RawFd)> = fds.iter().map(|(f, t)| (f.as_raw_fd(), *t)).collect();
        let drop_privs = self.unprivileged && is_root();
        // SAFETY: only async-signal-safe calls (dup, dup2, fcntl, setgroups, setgid, setuid)
        // on values prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                // Move every source out of the way first so no target overwrites a source.
                let mut staged = [(-1, -1); 8];
                for (i, &(src, target)) in moves.iter().enumerate() {
                    let tmp = libc::fcntl(src, libc::F_DUPFD, 100);
                    if tmp < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    staged[i] = (tmp, target);
                }
                for &(tmp, target) in staged.iter().take(moves.len()) {
                    if libc::dup2(tmp, target) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    libc::close(tmp);
                }
                // guardian gets exactly 0, 1, 2 and the fds the test passes: nothing the test
                // process itself inherited (its harness may leak some). Marked close-on-exec
                // rather than closed, so std's own exec-error pipe keeps working.
                let mut keep = [0 as RawFd; 8];
                let n = moves.len();
                for (i, &(_, t)) in moves.iter().enumerate() {
                    keep[i] = t;
                }
                keep[..n].sort_unstable();
                let mut lo: RawFd = 3;
                for &t in &keep[..n] {
                    if t > lo {
                        libc::syscall(libc::SYS_close_range, lo as u32, (t - 1) as u32, CLOSE_RANGE_CLOEXEC);
                    }
                    lo = lo.max(t + 1);
                }
                libc::syscall(libc::SYS_close_range, lo as u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
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
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
        drop(fds);
        Guardian { child, events_path, stderr_path, status: None }
    }
}

/// A running guardian (our direct child). Dropping it kills and reaps it if it still runs.
pub struct Guardian {
    pub child: Child,
    pub events_path: PathBuf,
    pub stderr_path: PathBuf,
    status: Option<ExitStatus>,
}

impl Guardian {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Every complete event line so far.
    pub fn events(&self) -> Vec<Value> {
        parse_events(&fs::read_to_string(&self.events_path).unwrap_or_default())
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Waits until an event matches `pred`; returns it.
    pub fn wait_event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_for_within(&format!("event {what}"), DEADLINE, &mut || self.events().into_iter().find(&pred))
    }

    pub fn wait_event_named(&self, name: &str) -> Value {
        self.wait_event(name, |e| e["event"] == name)
    }

    /// Sends `sig` to guardian (our unreaped child, so its pid is safe).
    pub fn signal(&self, sig: i32) {
        assert!(self.status.is_none(), "guardian already reaped");
        // SAFETY: plain syscall on our own unreaped child.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Waits for guardian to exit; returns its status. Panics after [`DEADLINE`].
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let child = &mut self.child;
        let st = wait_for_within("guardian to exit", DEADLINE, &mut || child.try_wait().expect("try_wait"));
        self.status = Some(st);
        st
    }

    /// Waits for guardian's exit code; panics (with its stderr) if it was killed.
    pub fn wait_code(&mut self) -> i32 {
        let st = self.wait();
        st.code().unwrap_or_else(|| panic!("guardian killed by signal {:?}; stderr: {}", st.signal(), self.stderr()))
    }

    /// The final events, checked for the contract's invariants: every line parses, `ts`
    /// never goes back, `exit` precedes `released` and `released` is the last line.
    pub fn final_events(&self) -> Vec<Value> {
        let ev = self.events();
        assert!(!ev.is_empty(), "no events; stderr: {}", self.stderr());
        for w in ev.windows(2) {
            assert!(ts(&w[1]) >= ts(&w[0]), "ts goes back: {} then {}", w[0], w[1]);
        }
        let last = ev.last().expect("last");
        assert_eq!(last["event"], "released", "released is not last: {ev:#?}");
        assert_eq!(ev.iter().filter(|e| e["event"] == "released").count(), 1);
        let exit = ev.iter().position(|e| e["event"] == "exit").expect("an exit event");
        assert!(exit < ev.len() - 1, "exit must precede released");
        assert_eq!(ev.iter().filter(|e| e["event"] == "exit").count(), 1);
        ev
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `signal` events' pids for a reason.
pub fn signalled_pids(events: &[Value], reason: &str) -> Vec<i32> {
    events
        .iter()
        .filter(|e| e["event"] == "signal" && e["reason"] == reason)
        .flat_map(|e| e["pids"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_i64().map(|p| p as i32))
        .collect()
}

pub fn find(events: &[Value], pred: impl Fn(&Value) -> bool) -> Option<(usize, &Value)> {
    events.iter().enumerate().find(|(_, e)| pred(e))
}
