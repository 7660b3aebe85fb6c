//! The one guardian runner: [`Builder`] sets up the command line, the user, the fds, rlimits
//! and a seccomp filter; [`Guardian`] is the running process, its events read from a pipe on
//! fd 3 by a thread, its stderr in a file.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{
    Ctx, DEADLINE, Deny, NOBODY, Value, guardian_bin, is_root, parse_event, random_digits, ts, wait_for_within,
};
use super::{install_seccomp, seccomp_program};

const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

/// What guardian's fd 3 is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Events {
    /// A pipe read by a thread (`--events-fd 3` is passed).
    Read,
    /// A pipe whose read end the test holds and never reads.
    Unread,
    /// As `Unread`, and the pipe is full before guardian starts.
    UnreadFull,
    /// As `UnreadFull`, through a named FIFO (mode 0600, the test's) instead of a pipe.
    UnreadFullFifo,
    /// Nothing (no `--events-fd 3` either).
    None,
}

/// Builds a guardian command line.
pub struct Builder<'a> {
    ctx: &'a Ctx,
    binary: Option<PathBuf>,
    args: Vec<OsString>,
    command: Vec<OsString>,
    events: Events,
    extra_fds: Vec<(File, RawFd)>,
    stdout: Option<Stdio>,
    /// `None`: the invoking user.
    uid: Option<u32>,
    envs: Vec<(OsString, OsString)>,
    /// Programs that run guardian (e.g. `unshare --pid --fork`), before the binary.
    wrapper: Vec<OsString>,
    deny: Vec<Deny>,
    rlimits: Vec<(i32, u64)>,
    close_stdout: bool,
    close_stderr: bool,
    broken_stderr: bool,
}

impl Ctx {
    pub fn guardian(&self) -> Builder<'_> {
        Builder {
            ctx: self,
            binary: None,
            args: Vec::new(),
            command: Vec::new(),
            events: Events::Read,
            extra_fds: Vec::new(),
            stdout: None,
            uid: is_root().then_some(NOBODY),
            envs: Vec::new(),
            wrapper: Vec::new(),
            deny: Vec::new(),
            rlimits: Vec::new(),
            close_stdout: false,
            close_stderr: false,
            broken_stderr: false,
        }
    }
}

impl Builder<'_> {
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
    /// `sh -c SCRIPT TAG` as the provider.
    pub fn script(self, script: &str) -> Self {
        let c = self.ctx.sh(script);
        self.command(c)
    }
    /// No events pipe and no `--events-fd 3`.
    pub fn no_events(mut self) -> Self {
        self.events = Events::None;
        self
    }
    /// The events pipe is never read; its read end stays in [`Guardian::unread`].
    pub fn events_unread(mut self) -> Self {
        self.events = Events::Unread;
        self
    }
    /// As [`Builder::events_unread`], and the pipe is full before guardian starts.
    pub fn events_unread_full(mut self) -> Self {
        self.events = Events::UnreadFull;
        self
    }
    /// As [`Builder::events_unread_full`], through a named FIFO of the test's user (mode
    /// 0600): a pipe the kernel refuses `RWF_NOWAIT` for, so guardian reopens it through /proc
    /// (or, as another user, cannot).
    pub fn events_unread_full_fifo(mut self) -> Self {
        self.events = Events::UnreadFullFifo;
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
        self.uid = None;
        self
    }
    /// Run as `uid` (and gid `uid`, no supplementary groups); needs root.
    pub fn uid(mut self, uid: u32) -> Self {
        self.uid = Some(uid);
        self
    }
    pub fn wrapper<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, w: I) -> Self {
        self.wrapper = w.into_iter().map(Into::into).collect();
        self
    }
    /// Another guardian binary (a copy with other modes, say).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }
    /// Makes syscall `nr` fail with `errno` in guardian and everything it starts (seccomp).
    pub fn deny(mut self, nr: libc::c_long, errno: i32) -> Self {
        self.deny.push((nr, errno));
        self
    }
    pub fn rlimit(mut self, resource: i32, limit: u64) -> Self {
        self.rlimits.push((resource, limit));
        self
    }
    pub fn close_stdout(mut self) -> Self {
        self.close_stdout = true;
        self
    }
    pub fn close_stderr(mut self) -> Self {
        self.close_stderr = true;
        self
    }
    /// stderr is a pipe whose read end is already closed (EPIPE and SIGPIPE on every write).
    pub fn broken_stderr(mut self) -> Self {
        self.broken_stderr = true;
        self
    }

    /// The full argv: wrapper, guardian, options, `--events-fd 3`, `--`, command.
    pub fn argv(&self) -> Vec<OsString> {
        let mut v = self.wrapper.clone();
        v.push(self.binary.clone().unwrap_or_else(|| guardian_bin().into()).into());
        v.extend(self.args.iter().cloned());
        if self.events != Events::None {
            v.extend(["--events-fd".into(), "3".into()]);
        }
        v.push("--".into());
        v.extend(self.command.iter().cloned());
        v
    }

    pub fn spawn(self) -> Guardian {
        let argv = self.argv();
        let stderr_path = self.ctx.path(&format!("stderr-{}.txt", random_digits(6)));
        let mut fds = self.extra_fds;
        let mut events_read = None;
        if self.events != Events::None {
            let (read, write) = if self.events == Events::UnreadFullFifo {
                named_fifo(&self.ctx.path(&format!("events-{}.fifo", random_digits(6))))
            } else {
                rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe2")
            };
            if matches!(self.events, Events::UnreadFull | Events::UnreadFullFifo) {
                fill_pipe(&read);
            }
            fds.push((File::from(write), 3));
            events_read = Some(read);
        }
        let stderr = if self.broken_stderr {
            let (_, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe2");
            Stdio::from(write)
        } else {
            Stdio::from(File::create(&stderr_path).expect("create stderr file"))
        };
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
        assert!(moves.len() <= 8, "at most 8 fds can be passed");
        let uid = self.uid;
        let rlimits = self.rlimits;
        let seccomp = (!self.deny.is_empty()).then(|| seccomp_program(&self.deny));
        let (close_out, close_err) = (self.close_stdout, self.close_stderr);
        // SAFETY: only async-signal-safe calls (fcntl, close_range, dup2, close, setgroups,
        // setgid, setuid, setrlimit, prctl) on values prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                // Move every source above the targets first (so no target overwrites a source),
                // mark every fd close-on-exec (guardian gets exactly 0, 1, 2 and the fds the test
                // passes: nothing the test process inherited; std's exec-error pipe keeps
                // working), then dup2, which clears close-on-exec on each target.
                let mut staged = [(-1, -1); 8];
                for (i, &(src, target)) in moves.iter().enumerate() {
                    staged[i] = (libc::fcntl(src, libc::F_DUPFD_CLOEXEC, 100), target);
                    if staged[i].0 < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
                for &(tmp, target) in &staged[..moves.len()] {
                    if libc::dup2(tmp, target) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                if close_out {
                    libc::close(1);
                }
                if close_err {
                    libc::close(2);
                }
                if let Some(id) = uid
                    && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(id) != 0 || libc::setuid(id) != 0)
                {
                    return Err(io::Error::last_os_error());
                }
                for &(res, lim) in &rlimits {
                    let rl = libc::rlimit { rlim_cur: lim, rlim_max: lim };
                    if libc::setrlimit(res as _, &rl) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                match &seccomp {
                    Some(program) => install_seccomp(program),
                    None => Ok(()),
                }
            });
        }
        // ETXTBSY: a concurrent test's fork may briefly hold a just-written executable open.
        let child = wait_for_within(&format!("spawn {argv:?}"), DEADLINE, &mut || match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => None,
            other => Some(other.unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"))),
        });
        drop(fds);
        let stream = Arc::new(Stream::default());
        let mut unread = None;
        match (self.events, events_read) {
            (Events::Read, Some(read)) => {
                let s = stream.clone();
                std::thread::spawn(move || s.read_from(File::from(read)));
            }
            (_, read) => {
                unread = read.map(File::from);
                stream.state.lock().expect("events lock").eof = true;
            }
        }
        Guardian { child, stream, unread, stderr_path, status: None, deadline: DEADLINE }
    }
}

/// A named FIFO at `path` (mode 0600), opened: its read end (non-blocking) and write end.
fn named_fifo(path: &std::path::Path) -> (OwnedFd, OwnedFd) {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o600), 0)
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
    let open = |flags| {
        rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty())
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
    };
    let read = open(OFlags::RDONLY | OFlags::NONBLOCK);
    let write = open(OFlags::WRONLY);
    rustix::io::ioctl_fionbio(&read, false).expect("make the FIFO's read end blocking again");
    (read, write)
}

/// Fills the pipe whose read end is `read` through a separate, non-blocking description of its
/// write side, so the write end guardian inherits keeps its blocking mode.
fn fill_pipe(read: &OwnedFd) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", read.as_raw_fd()))
        .expect("open the pipe's write side");
    let chunk = [b'#'; 4096];
    loop {
        match w.write(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
}

/// The complete event lines read so far, and whether the pipe reached EOF.
#[derive(Default)]
struct Stream {
    state: Mutex<StreamState>,
    grew: Condvar,
}

#[derive(Default)]
struct StreamState {
    lines: Vec<String>,
    eof: bool,
}

impl Stream {
    fn read_from(&self, pipe: File) {
        let mut r = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = r.read_until(b'\n', &mut line).unwrap_or(0);
            let mut st = self.state.lock().expect("events lock");
            // A line without its newline at EOF is torn: the contract's lines are whole.
            if n > 0 && line.ends_with(b"\n") {
                st.lines.push(String::from_utf8_lossy(&line[..n - 1]).into_owned());
            } else {
                st.eof = true;
            }
            self.grew.notify_all();
            if st.eof {
                return;
            }
        }
    }
}

/// A running guardian (our direct child). Dropping it kills and reaps it if it still runs.
pub struct Guardian {
    pub child: Child,
    stream: Arc<Stream>,
    /// The read end of an events pipe the test does not read ([`Builder::events_unread`]).
    pub unread: Option<File>,
    pub stderr_path: PathBuf,
    status: Option<ExitStatus>,
    /// How long each wait may take ([`DEADLINE`] unless a test needs more for its size).
    pub deadline: Duration,
}

impl Guardian {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// guardian's own process: behind the sentinel (issue 24) the host's child forks it, with
    /// the same command line; without one (`--no-sentinel` (`GUARDIAN_NO_SENTINEL=1`), PID 1) it is [`Self::pid`].
    /// Waits for the `spawned` event, which comes after the fork.
    pub fn inner_pid(&self) -> i32 {
        self.wait_event_named("spawned");
        let me = self.pid();
        let cmdline = |pid: &str| std::fs::read(format!("/proc/{pid}/cmdline")).ok();
        let mine = cmdline(&me.to_string());
        let kids = std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
        kids.split_whitespace()
            .find(|k| mine.is_some() && cmdline(k) == mine)
            .and_then(|k| k.parse().ok())
            .unwrap_or(me)
    }

    /// Every complete event line so far (panics on a line that is not an event).
    pub fn events(&self) -> Vec<Value> {
        self.stream.state.lock().expect("events lock").lines.iter().map(|l| parse_event(l)).collect()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    fn context(&self) -> String {
        let lines: Vec<String> = self.events().iter().map(Value::to_string).collect();
        format!("events:\n{}\nstderr:\n{}", lines.join("\n"), self.stderr())
    }

    /// Waits until an event matches `pred`; returns it. Panics at EOF or after the deadline.
    pub fn wait_event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + self.deadline;
        let mut checked = 0;
        let mut st = self.stream.state.lock().expect("events lock");
        loop {
            while checked < st.lines.len() {
                let e = parse_event(&st.lines[checked]);
                checked += 1;
                if pred(&e) {
                    return e;
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            if st.eof || left.is_zero() {
                let why = if st.eof { "the events fd closed" } else { "the deadline" };
                drop(st);
                panic!("no event {what} before {why}: {}", self.context());
            }
            st = self.stream.grew.wait_timeout(st, left).expect("events lock").0;
        }
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

    /// Waits for guardian (or its wrapper) to exit, then for the events fd to close: after
    /// this, [`Guardian::events`] holds every line. Panics after the deadline.
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let child = &mut self.child;
        let st = wait_for_within("guardian to exit", self.deadline, &mut || child.try_wait().expect("try_wait"));
        self.status = Some(st);
        let end = Instant::now() + self.deadline;
        let mut stream = self.stream.state.lock().expect("events lock");
        while !stream.eof {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(stream);
                panic!("events fd still open after guardian's exit ({st}): {}", self.context());
            }
            stream = self.stream.grew.wait_timeout(stream, left).expect("events lock").0;
        }
        st
    }

    /// Waits for guardian's exit code; panics (with its stderr) if it was killed.
    pub fn wait_code(&mut self) -> i32 {
        let st = self.wait();
        st.code().unwrap_or_else(|| panic!("guardian killed by signal {:?}; stderr: {}", st.signal(), self.stderr()))
    }

    /// Waits like [`Guardian::wait`]; how guardian ended (an exit code or a signal).
    pub fn wait_end(&mut self) -> End {
        End::of(self.wait())
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

    /// Waits for the exit and the end of the events; returns everything.
    pub fn finish(&mut self) -> Finished {
        let status = self.wait();
        Finished { code: status.code(), signal: status.signal(), events: self.events(), stderr: self.stderr() }
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

impl Drop for Guardian {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How a process ended, as its parent sees it: an exit code or death by a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Code(i32),
    Signal(i32),
}

impl End {
    pub fn of(st: ExitStatus) -> End {
        match (st.code(), st.signal()) {
            (Some(c), _) => End::Code(c),
            (None, Some(s)) => End::Signal(s),
            (None, None) => panic!("neither exited nor killed: {st:?}"),
        }
    }

    /// What a shell's `$?` says (128+N for signal N).
    pub fn shell_status(self) -> i32 {
        match self {
            End::Code(c) => c,
            End::Signal(s) => 128 + s,
        }
    }
}

/// How a guardian that is not PID 1 ends when signal `sig` killed the provider (the decided
/// behaviour, `exit::end`): it dies of `sig` too (a shell's `$?` is still 128+`sig`). Tests
/// state this through here, never as a bare `code() == Some(128 + sig)`.
pub fn killed_by(sig: i32) -> End {
    End::Signal(sig)
}

/// A guardian that exited, with every event it wrote.
#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    /// The signal guardian died of (see [`Finished::end`]).
    pub signal: Option<i32>,
    pub events: Vec<Value>,
    pub stderr: String,
}

impl Finished {
    /// How guardian ended (an exit code or a signal).
    pub fn end(&self) -> End {
        match (self.code, self.signal) {
            (Some(c), _) => End::Code(c),
            (None, Some(s)) => End::Signal(s),
            (None, None) => panic!("neither exited nor killed: {self:#?}"),
        }
    }

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

    /// The contract's ordering and status: `exit` before `released`, which is last.
    /// guardian's own end follows `status`: a provider killed by a signal (the `exit` event
    /// names one) makes it die of that signal ([`killed_by`]), except after a timeout (124).
    pub fn assert_released(&self, status: i32) {
        let by_signal = self.events.iter().any(|e| e["event"] == "exit" && e["signal"].is_string());
        let expected = if by_signal && status > 128 { killed_by(status - 128) } else { End::Code(status) };
        assert_eq!(self.end(), expected, "{self:#?}");
        let names: Vec<&str> = self.events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(names.last(), Some(&"released"), "{self:#?}");
        let exit = names.iter().position(|n| *n == "exit").unwrap_or_else(|| panic!("no exit event: {self:#?}"));
        assert!(exit < names.len() - 1);
        assert_eq!(self.one("released")["status"], status, "{self:#?}");
    }
}
