//! The one integration-test harness. Every test runs the built guardian unprivileged (uid
//! 65534 when the suite runs as root, unless `.privileged()`), tags every process it starts
//! with a nonce in argv, finds them by scanning `/proc`, waits for events, files or pids (never
//! sleep-then-assert) and, when it ends, even by panic, kills every tagged process through a
//! pidfd after re-checking the tag.
//!
//! - `mod.rs`: constants, nonces, waits, skips, [`Ctx`] (one test's world);
//! - `procs.rs`: `/proc` parsing, tagged-process finders, the one killer ([`kill_tagged`]);
//! - `pty.rs`: an interactive bash on a pseudo-terminal, driven like `expect` ([`Pty`]);
//! - `run.rs`: the one guardian runner ([`Builder`], [`Guardian`]): events on a pipe;
//! - `seccomp.rs`: the BPF filter that denies a syscall;
//! - `cgroup.rs`: mountinfo, delegated test cgroups.

mod cgroup;
mod procs;
mod pty;
mod run;
mod seccomp;

pub use cgroup::*;
pub use procs::*;
pub use pty::*;
pub use run::*;
pub use seccomp::*;
pub use serde_json::Value;

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long any wait may take before the test fails: generous, the machine is shared.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// Polling interval of the waits that cannot block on something.
pub const POLL: Duration = Duration::from_millis(15);
/// The unprivileged user guardian runs as when the suite runs as root.
pub const NOBODY: u32 = 65534;
/// `setpriv` to [`NOBODY`], for wrappers that start as root and drop later.
pub const SETPRIV_NOBODY: [&str; 4] = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

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

/// The guardian binary, executable by `nobody`: the build's own when every directory above it
/// is traversable by others, else a 0755 copy in a 0755 temp dir (once per test process).
pub fn guardian_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_guardian"));
        let others_can_exec = |p: &Path| fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
        if !is_root() || built.ancestors().filter(|p| !p.as_os_str().is_empty()).all(others_can_exec) {
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
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    complete.lines().map(parse_event).collect()
}

pub fn parse_event(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("event line is not JSON ({e}): {line}"));
    assert!(v["event"].is_string(), "event line without `event`: {line}");
    assert!(v["ts"].is_f64() || v["ts"].is_u64(), "event line without numeric `ts`: {line}");
    v
}

pub fn ts(v: &Value) -> f64 {
    v["ts"].as_f64().expect("ts")
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

// ---------------------------------------------------------------------------------------
// Skips: visible and counted. A test skips only for what root cannot fix (a kernel feature,
// a build feature, a host limit); what root can fix (privilege, a missing program) fails the
// test when the suite runs as root.

/// Skips the running test: prints `SKIPPED: <test>: <reason>` past libtest's capture and
/// appends the same line to `$GUARDIAN_TEST_SKIP_LOG` (set by `make test`; `.ci/run` counts it).
macro_rules! skip {
    ($($why:tt)+) => {{
        fn here() {}
        $crate::harness::skipped(std::any::type_name_of_val(&here), &format!($($why)+));
        return;
    }};
}

/// A root-only test: skipped (visibly) without root; as root it runs, and its other
/// preconditions are asserted, never skipped.
macro_rules! need_root {
    ($why:expr) => {
        if !$crate::harness::is_root() {
            skip!("needs root to {}", $why);
        }
    };
}

/// A test that needs a `test-hooks` build: skipped in `make test`'s first pass (the shipped
/// configuration) and run in its second. The Makefile's `HOOK_TESTS` must name it.
macro_rules! need_hooks {
    () => {
        if !cfg!(feature = "test-hooks") {
            skip!("{}", $crate::harness::NEEDS_HOOKS);
        }
    };
}

/// A test that runs guardian in a new PID namespace (`unshare --pid --fork --mount-proc`):
/// root-only; as root, unshare must exist, and a kernel or sandbox that refuses the namespace
/// is a visible skip.
macro_rules! need_pid_namespace {
    () => {
        need_root!("create a PID namespace");
        need_program!("unshare", "util-linux");
        if let Some(reason) = $crate::harness::pid_namespace_refused() {
            skip!("{reason}");
        }
    };
}

/// Why `unshare --pid --fork --mount-proc true` fails here, if it does.
pub fn pid_namespace_refused() -> Option<String> {
    let status = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("`unshare --pid --fork --mount-proc true` failed ({s})")),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    }
}

/// A program the test runs: when it is missing, a root run fails (install it), others skip.
macro_rules! need_program {
    ($prog:expr, $package:expr) => {
        if !$crate::harness::installed($prog) {
            assert!(
                !$crate::harness::is_root(),
                "{} is not installed: install {} (or run the suite unprivileged)",
                $prog,
                $package
            );
            skip!("{} is not installed (package {})", $prog, $package);
        }
    };
}

/// The skip reason of [`need_hooks!`]; the Makefile matches it.
pub const NEEDS_HOOKS: &str = "needs the test-hooks feature (make test runs it in its second pass)";

pub fn installed(prog: &str) -> bool {
    std::process::Command::new(prog).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Records one skip; `here` is the path of a function inside the skipping test.
pub fn skipped(here: &str, reason: &str) {
    let thread = std::thread::current();
    let name = match thread.name() {
        Some(n) if n != "main" => n.to_string(),
        _ => {
            let path = here.strip_suffix("::here").unwrap_or(here);
            path.split_once("::").map_or(path, |(_, rest)| rest).to_string()
        }
    };
    let line = format!("SKIPPED: {name}: {reason}\n");
    // Straight to fd 2: libtest captures eprintln! of passing tests.
    let _ = io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("GUARDIAN_TEST_SKIP_LOG") {
        let mut f = OpenOptions::new().create(true).append(true).open(&log).expect("open GUARDIAN_TEST_SKIP_LOG");
        f.write_all(line.as_bytes()).expect("write GUARDIAN_TEST_SKIP_LOG");
    }
}

// ---------------------------------------------------------------------------------------
// One test's world

/// A nonce, a private temp dir writable by `nobody`, and a guard that kills every tagged
/// process when the test ends.
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

    /// Waits until `file` in the test's directory (written line by line, by a trap say)
    /// contains `line`.
    pub fn wait_line(&self, file: &str, line: &str) {
        wait_for(&format!("{line} in {file}"), || {
            let text = fs::read_to_string(self.path(file)).ok()?;
            text.lines().any(|l| l == line).then_some(())
        });
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
        let link = self.dir.join(format!("{prog}-{}", self.tag()));
        std::os::unix::fs::symlink(Path::new("/usr/bin").join(prog), &link).expect("symlink");
        link
    }

    /// `source` compiled (`cc -O1 -pthread`) into the test's directory as `NAME-TAG`, which uid
    /// 65534 can reach and whose path (argv[0]) carries the nonce. CI has a C compiler; a
    /// missing one fails the test with the reason.
    /// Where the suite runs without a compiler (the vm-test guest), the program comes prebuilt
    /// from the directory `GUARDIAN_TEST_PREBUILT_C` names (`tests/vm/run` fills it, one file
    /// per program name; a test checks it is there with the cgroup area's `need_cc!`).
    pub fn c_program(&self, name: &str, source: &str) -> PathBuf {
        let bin = self.path(&format!("{name}-{}", self.tag()));
        if let Some(dir) = std::env::var_os("GUARDIAN_TEST_PREBUILT_C") {
            fs::copy(Path::new(&dir).join(name), &bin).expect("copy the prebuilt C program");
            fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).expect("chmod");
            return bin;
        }
        let src = self.path(&format!("{name}.c"));
        fs::write(&src, source).expect("write C source");
        let out = std::process::Command::new("cc")
            .args(["-O1", "-pthread", "-o"])
            .arg(&bin)
            .arg(&src)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run cc (these tests need a C compiler, as CI has): {e}"));
        assert!(out.status.success(), "cc {name}.c failed: {}", String::from_utf8_lossy(&out.stderr));
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).expect("chmod");
        bin
    }

    /// `guardian ARGS` (a subcommand: `doctor`, `sweep`) for [`Ctx::run_env_tagged`]. Its probe
    /// children are forks of guardian, whose argv cannot carry the nonce: they are tagged
    /// through the environment instead.
    pub fn subcommand(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(guardian_bin());
        cmd.args(args);
        cmd
    }

    /// Runs `cmd` with `GUARDIAN_TEST_NONCE=<nonce>` in its environment (inherited by what it
    /// starts) and asserts that nothing so tagged outlives it; its output.
    pub fn run_env_tagged(&self, cmd: &mut std::process::Command) -> std::process::Output {
        let out = cmd.env("GUARDIAN_TEST_NONCE", &self.nonce).output().expect("run the command");
        assert_eq!(self.env_tagged(), Vec::<i32>::new(), "{cmd:?} left a process running");
        out
    }

    /// Processes whose environment holds `GUARDIAN_TEST_NONCE=<nonce>`.
    pub fn env_tagged(&self) -> Vec<i32> {
        let needle = format!("GUARDIAN_TEST_NONCE={}", self.nonce);
        pids_where(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
    }

    /// A FIFO (mode 0666) the test opens to release a waiting script (`read _ < FIFO`).
    pub fn fifo(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        rustix::fs::mkfifoat(rustix::fs::CWD, &p, rustix::fs::Mode::from_raw_mode(0o666)).expect("mkfifo");
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

    /// Every live process carrying the nonce.
    pub fn live(&self) -> Vec<ProcInfo> {
        tagged_pids(&self.nonce).into_iter().filter_map(proc_info).collect()
    }

    /// The live tagged sleeps (`sleep 1000.NONCE…`): the tree's members, not guardian or the
    /// shells whose scripts name the nonce.
    pub fn sleeps(&self) -> Vec<ProcInfo> {
        tagged_sleeps(&self.nonce).into_iter().filter_map(proc_info).collect()
    }

    /// Waits until at least `n` tagged sleeps run; returns them.
    pub fn wait_sleeps(&self, n: usize) -> Vec<ProcInfo> {
        wait_for(&format!("{n} tagged sleeps"), || Some(self.sleeps()).filter(|s| s.len() >= n))
    }

    /// Waits until no process carries the nonce (for trees guardian no longer owns).
    pub fn wait_tree_gone(&self) {
        wait_for("every tagged process to be gone", || tagged_pids(&self.nonce).is_empty().then_some(()));
    }

    /// No process carries the nonce, at once (guardian released: every descendant was reaped).
    pub fn assert_nothing_left(&self) {
        let left = tagged_pids(&self.nonce);
        assert!(left.is_empty(), "tagged processes still running: {:?}", describe(&left));
    }
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
