//! Helpers for the hardening tests (`tests/denial.rs`, `tests/restricted.rs`, ...): unique
//! nonces verified by scanning `/proc`, a drop guard that kills every process carrying a
//! nonce by PID (even when a test panics), a guardian runner with an events pipe, stderr in a
//! file, optional uid switch, rlimits and a hand-built seccomp filter installed in the
//! child before exec, and event waits with generous deadlines (never sleep-then-assert).
#![allow(dead_code)]

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

#[path = "../common/bin.rs"]
mod bin;

/// The guardian binary, runnable by the unprivileged test user (see `tests/common/bin.rs`).
pub fn guardian_path() -> &'static str {
    bin::guardian_bin().to_str().unwrap_or(env!("CARGO_BIN_EXE_guardian"))
}
/// Every wait in these tests ends by this deadline; nothing is timed.
pub const DEADLINE: Duration = Duration::from_secs(30);
pub const NOBODY: u32 = 65534;

/// A unique id for one test's processes: 12 digits (pid, counter, clock).
pub fn nonce() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) % 1000;
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0) % 1000;
    format!("{:06}{n:03}{t:03}", std::process::id() % 1_000_000)
}

/// One process of `/proc`.
#[derive(Clone, Debug)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    pub uid: u32,
    pub cmdline: String,
}

pub fn proc_info(pid: i32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ").trim_end().to_string();
    Some(ProcInfo { pid, ppid, state, uid, cmdline })
}

pub fn all_procs() -> Vec<ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).filter_map(proc_info).collect()
}

/// The nonce of one test: every process the test starts carries it in argv. Dropping the tag
/// SIGKILLs (by PID) whatever still carries it, so a failing test leaves nothing behind.
pub struct Tag {
    pub id: String,
}

impl Default for Tag {
    fn default() -> Self {
        Self::new()
    }
}

impl Tag {
    pub fn new() -> Tag {
        Tag { id: nonce() }
    }

    /// The argument of a tagged sleep: `sleep {tag.arg()}`.
    pub fn arg(&self) -> String {
        format!("1000.{}", self.id)
    }

    /// A shell word that runs a tagged sleep.
    pub fn sleep(&self) -> String {
        format!("sleep {}", self.arg())
    }

    /// Live (non-zombie) processes other than the test itself whose argv carries the nonce.
    pub fn live(&self) -> Vec<ProcInfo> {
        let me = std::process::id() as i32;
        all_procs().into_iter().filter(|p| p.pid != me && p.state != 'Z' && p.cmdline.contains(&self.id)).collect()
    }

    /// Live tagged sleeps (the tree's members, not guardian or the shells that name the tag).
    pub fn sleeps(&self) -> Vec<ProcInfo> {
        let arg = self.arg();
        self.live().into_iter().filter(|p| p.cmdline.starts_with("sleep ") && p.cmdline.ends_with(&arg)).collect()
    }

    /// Waits (deadline) until `n` tagged sleeps run.
    pub fn wait_sleeps(&self, n: usize) -> Vec<ProcInfo> {
        let end = Instant::now() + DEADLINE;
        loop {
            let s = self.sleeps();
            if s.len() >= n {
                return s;
            }
            assert!(Instant::now() < end, "only {} of {n} tagged sleeps appeared: {s:?}", s.len());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Asserts that no process carries the nonce (after guardian released, at once: release
    /// means every descendant was reaped).
    pub fn assert_gone(&self) {
        let left = self.live();
        assert!(left.is_empty(), "processes left behind: {left:?}");
    }

    /// Waits (deadline) until nothing carries the nonce; for trees guardian no longer owns.
    pub fn wait_gone(&self) {
        let end = Instant::now() + DEADLINE;
        while !self.live().is_empty() {
            assert!(Instant::now() < end, "processes left behind: {:?}", self.live());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn kill_all(&self) {
        for _ in 0..5 {
            let left = self.live();
            if left.is_empty() {
                return;
            }
            for p in left {
                // SAFETY: kill is a plain syscall; the pid was just seen carrying the tag.
                unsafe { libc::kill(p.pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tag {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A seccomp rule: syscall number and the errno it fails with.
pub type Deny = (libc::c_long, i32);

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// A classic BPF seccomp program: kill on a foreign architecture, fail each denied syscall
/// with its errno, allow the rest.
pub fn seccomp_program(denies: &[Deny]) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u32 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
    const JEQ_K: u32 = 0x15; // BPF_JMP (5) | BPF_JEQ (0x10) | BPF_K (0)
    const RET_K: u32 = 0x06; // BPF_RET | BPF_K
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let mut p = vec![
        bpf(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        bpf(JEQ_K, 1, 0, AUDIT_ARCH),
        bpf(RET_K, 0, 0, RET_KILL_PROCESS),
        bpf(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
    ];
    for &(nr, errno) in denies {
        p.push(bpf(JEQ_K, 0, 1, nr as u32));
        p.push(bpf(RET_K, 0, 0, RET_ERRNO | (errno as u32 & 0xffff)));
    }
    p.push(bpf(RET_K, 0, 0, RET_ALLOW));
    p
}

/// How to start one guardian (or a wrapper around it).
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    deny: Vec<Deny>,
    uid: Option<u32>,
    rlimits: Vec<(i32, u64)>,
    events: EventsMode,
    close_stdout: bool,
    close_stderr: bool,
    broken_stderr: bool,
    env: Vec<(String, String)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EventsMode {
    /// fd 3 is a pipe read by a thread.
    Read,
    /// fd 3 is a pipe whose read end the test holds and never reads.
    Unread,
    /// As `Unread`, and the pipe is full before guardian starts.
    UnreadFull,
    None,
}

/// `guardian ARGS...`.
pub fn guardian<S: AsRef<str>>(args: &[S]) -> Cmd {
    let mut c = Cmd::new(guardian_path());
    c.args = args.iter().map(|a| OsString::from(a.as_ref())).collect();
    c
}

impl Cmd {
    pub fn new(program: &str) -> Cmd {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            deny: Vec::new(),
            uid: None,
            rlimits: Vec::new(),
            events: EventsMode::Read,
            close_stdout: false,
            close_stderr: false,
            broken_stderr: false,
            env: Vec::new(),
        }
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Cmd {
        self.args.push(a.into());
        self
    }

    /// Makes syscall `nr` fail with `errno` in guardian and everything it starts.
    pub fn deny(mut self, nr: libc::c_long, errno: i32) -> Cmd {
        self.deny.push((nr, errno));
        self
    }

    pub fn uid(mut self, uid: u32) -> Cmd {
        self.uid = Some(uid);
        self
    }

    pub fn nobody(self) -> Cmd {
        self.uid(NOBODY)
    }

    pub fn rlimit(mut self, resource: i32, limit: u64) -> Cmd {
        self.rlimits.push((resource, limit));
        self
    }

    pub fn events(mut self, mode: EventsMode) -> Cmd {
        self.events = mode;
        self
    }

    pub fn close_stdout(mut self) -> Cmd {
        self.close_stdout = true;
        self
    }

    pub fn close_stderr(mut self) -> Cmd {
        self.close_stderr = true;
        self
    }

    /// stderr is a pipe whose read end is already closed (EPIPE and SIGPIPE on every write).
    pub fn broken_stderr(mut self) -> Cmd {
        self.broken_stderr = true;
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Cmd {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn spawn(self) -> Running {
        let err_path = std::env::temp_dir().join(format!("guardian-hardening-{}.stderr", nonce()));
        let err_file = File::create(&err_path).expect("create stderr file");
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err_file);
        if self.broken_stderr {
            let mut fds = [0 as RawFd; 2];
            // SAFETY: pipe2 fills two fds that we own from here on.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2 failed");
            // SAFETY: both fds are ours alone; the read end is closed at once.
            let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
            drop(r);
            cmd.stderr(w);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(uid) = self.uid {
            cmd.uid(uid).gid(uid);
        }
        let (events_read, events_write) = if self.events != EventsMode::None {
            let mut fds = [0 as RawFd; 2];
            // SAFETY: pipe2 fills two fds that we own from here on.
            let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
            assert_eq!(rc, 0, "pipe2 failed");
            (Some(fds[0]), Some(fds[1]))
        } else {
            (None, None)
        };
        if self.events == EventsMode::UnreadFull {
            fill_pipe(events_read.expect("pipe"));
        }
        let program = seccomp_program(&self.deny);
        let with_seccomp = !self.deny.is_empty();
        let rlimits = self.rlimits.clone();
        let (close_out, close_err) = (self.close_stdout, self.close_stderr);
        // SAFETY: the closure runs between fork and exec; it only makes async-signal-safe
        // syscalls on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(w) = events_write {
                    if w == 3 {
                        libc::fcntl(3, libc::F_SETFD, 0);
                    } else if libc::dup2(w, 3) != 3 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // Nothing else the test process holds reaches guardian (fds left open by
                // whatever started the test run, say).
                libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 4u32 /* CLOSE_RANGE_CLOEXEC */);
                if close_out {
                    libc::close(1);
                }
                if close_err {
                    libc::close(2);
                }
                for &(res, lim) in &rlimits {
                    let rl = libc::rlimit { rlim_cur: lim, rlim_max: lim };
                    if libc::setrlimit(res as _, &rl) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if with_seccomp {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut _ };
                    if libc::prctl(libc::PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &prog as *const _, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        // ETXTBSY: a concurrent test's fork may briefly hold a just-written executable open.
        let mut tries = 0;
        let child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other.expect("spawn guardian"),
            }
        };
        if let Some(w) = events_write {
            // SAFETY: our copy of the write end; only the child keeps one now.
            unsafe { libc::close(w) };
        }
        // SAFETY: the read end is ours alone.
        let events_file = events_read.map(|r| unsafe { File::from_raw_fd(r) });
        let (rx, unread) = match (self.events, events_file) {
            (EventsMode::Read, Some(f)) => {
                let (tx, rx) = channel();
                std::thread::spawn(move || {
                    for line in BufReader::new(f).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
                (Some(rx), None)
            }
            (_, f) => (None, f),
        };
        Running {
            pid: child.id() as i32,
            child,
            rx,
            unread,
            events: Vec::new(),
            eof: false,
            err_path,
            status: None,
            deadline: DEADLINE,
        }
    }
}

/// Fills the pipe whose read end is `read` through a separate, non-blocking description of
/// its write side, so the write end guardian inherits keeps its blocking mode.
pub fn fill_pipe(read: RawFd) -> usize {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{read}"))
        .expect("open the pipe's write side");
    let chunk = [b'#'; 4096];
    let mut total = 0;
    loop {
        match w.write(&chunk) {
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return total,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
}

/// A started guardian.
pub struct Running {
    pub pid: i32,
    child: Child,
    rx: Option<Receiver<String>>,
    /// The read end of an events pipe the test does not read.
    pub unread: Option<File>,
    pub events: Vec<Value>,
    eof: bool,
    err_path: PathBuf,
    status: Option<ExitStatus>,
    /// How long each wait may take (DEADLINE unless a test needs more for its size).
    pub deadline: Duration,
}

impl Running {
    /// guardian's stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err_path).unwrap_or_default()
    }

    fn context(&self) -> String {
        let lines: Vec<String> = self.events.iter().map(|e| e.to_string()).collect();
        format!("events:\n{}\nstderr:\n{}", lines.join("\n"), self.stderr())
    }

    /// Receives one more event line before `end`; false on EOF or deadline.
    fn pull(&mut self, end: Instant) -> bool {
        let Some(rx) = &self.rx else { return false };
        if self.eof {
            return false;
        }
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad event line {line:?}: {e}"));
                self.events.push(v);
                true
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.eof = true;
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
        }
    }

    /// Waits (deadline) for an event named `name`; returns it.
    pub fn wait_event(&mut self, name: &str) -> Value {
        self.wait_event_where(name, |_| true)
    }

    pub fn wait_event_where(&mut self, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + self.deadline;
        let mut checked = 0;
        loop {
            while checked < self.events.len() {
                let e = &self.events[checked];
                checked += 1;
                if e["event"] == name && pred(e) {
                    return e.clone();
                }
            }
            if !self.pull(end) && (self.eof || Instant::now() >= end) {
                self.kill();
                panic!(
                    "no '{name}' event before {}: {}",
                    if self.eof { "EOF" } else { "the deadline" },
                    self.context()
                );
            }
        }
    }

    /// Waits (deadline) for guardian to exit; SIGKILLs it and panics on the deadline.
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let end = Instant::now() + self.deadline;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                self.status = Some(s);
                return s;
            }
            if Instant::now() >= end {
                self.kill();
                panic!("guardian did not exit before the deadline: {}", self.context());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for exit, then reads the events to EOF (guardian was their only writer).
    pub fn finish(&mut self) -> Finished {
        let status = self.wait();
        let end = Instant::now() + self.deadline;
        while self.rx.is_some() && !self.eof {
            if !self.pull(end) && !self.eof {
                panic!("events fd not closed after guardian exited: {}", self.context());
            }
        }
        Finished { code: status.code(), signal: status.signal(), events: self.events.clone(), stderr: self.stderr() }
    }

    pub fn kill(&mut self) {
        if self.status.is_none() {
            // SAFETY: plain syscall on our unreaped child (its pid cannot be reused).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.status = self.child.wait().ok();
        }
    }

    /// Sends `sig` to guardian (our unreaped child).
    pub fn signal(&self, sig: i32) {
        assert!(self.status.is_none(), "guardian already reaped");
        // SAFETY: plain syscall on our unreaped child (its pid cannot be reused).
        unsafe { libc::kill(self.pid, sig) };
    }

    /// Reads whatever is in the unread events pipe (for tests that fill it first).
    pub fn drain_unread(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(f) = self.unread.as_mut() {
            let _ = f.read_to_end(&mut out);
        }
        out
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.err_path);
    }
}

/// A guardian that exited, with every event it wrote.
#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub events: Vec<Value>,
    pub stderr: String,
}

impl Finished {
    pub fn named(&self, name: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == name).collect()
    }

    pub fn one(&self, name: &str) -> &Value {
        let v = self.named(name);
        assert_eq!(v.len(), 1, "expected one '{name}' event: {self:#?}");
        v[0]
    }

    /// `fallback` events for interface `what`.
    pub fn fallbacks(&self, what: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == "fallback" && e["what"] == what).collect()
    }

    /// The contract's ordering: `exit` before `released`, which is last.
    pub fn assert_released(&self, status: i32) {
        assert_eq!(self.code, Some(status), "{self:#?}");
        let names: Vec<&str> = self.events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(names.last(), Some(&"released"), "{self:#?}");
        let exit = names.iter().position(|n| *n == "exit").unwrap_or_else(|| panic!("no exit event: {self:#?}"));
        assert!(exit < names.len() - 1);
        assert_eq!(self.one("released")["status"], status, "{self:#?}");
    }
}

/// Whether this process is root (privileged tests skip otherwise, saying so).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}
