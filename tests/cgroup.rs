//! cgroup mode, tested the way real deployments delegate: as root, each test creates its
//! own subtree under the cgroup2 mount (found in /proc/self/mountinfo), hands it to uid
//! 65534 as systemd's `Delegate=yes` does (chown of the directory, `cgroup.procs`,
//! `cgroup.subtree_control`, `cgroup.threads`), and starts guardian as that uid *inside*
//! the subtree (a tiny `sh` wrapper writes its own pid into `cgroup.procs` as root, then
//! `setpriv` drops to 65534 and execs guardian). Without root, cgroup2 or setpriv the
//! delegation tests skip with a printed reason; the fallback and error tests still run.
//!
//! Every process is tagged with a nonce in argv (`sleep 1000.<digits>`) and found through
//! /proc; nothing here uses pkill/killall. Every test cgroup is removed by a drop guard
//! (cgroup.kill, wait for `populated 0`, rmdir bottom-up), also when a test fails.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

const NOBODY: u32 = 65534;
const LONG: Duration = Duration::from_secs(20);

#[path = "common/bin.rs"]
mod bin;

/// The guardian binary, runnable by the unprivileged test user (see `tests/common/bin.rs`).
fn guardian_bin() -> &'static str {
    bin::guardian_bin().to_str().unwrap_or(env!("CARGO_BIN_EXE_guardian"))
}

/// A fresh nonce of at least 6 digits, different for every call in this run.
fn nonce() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let n = (u64::from(std::process::id()) * 7919
        + u64::from(t) / 1000
        + u64::from(SEQ.fetch_add(1, Ordering::Relaxed)) * 104_729)
        % 900_000
        + 100_000;
    format!("{n}{:03}", SEQ.load(Ordering::Relaxed) % 1000)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let oct = rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match oct {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out + rest
}

fn cgroup2_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        (right.starts_with("cgroup2 ") && f.len() > 4 && f[3] == "/").then(|| PathBuf::from(unescape(f[4])))
    })
}

/// The delegation tests' preconditions, or why they cannot run.
fn delegation_env() -> Result<PathBuf, String> {
    if !is_root() {
        return Err("not root: cannot create and delegate a test cgroup".into());
    }
    let mount = cgroup2_mount().ok_or("no cgroup2 mount in /proc/self/mountinfo")?;
    if !mount.join("cgroup.procs").exists() {
        return Err(format!("{} has no cgroup.procs", mount.display()));
    }
    if Command::new("setpriv").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        return Err("setpriv (util-linux) is not installed".into());
    }
    Ok(mount)
}

macro_rules! need_delegation {
    () => {
        match delegation_env() {
            Ok(m) => m,
            Err(why) => {
                eprintln!("skipping {}: {why}", module_path!());
                return;
            }
        }
    };
}

// ---------------------------------------------------------------------------------------
// Test cgroups and their cleanup

/// A test subtree under the cgroup2 mount; removed on drop, whatever happened.
struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    fn new(mount: &Path, delegate: bool) -> TestCgroup {
        let path = mount.join(format!("guardian-test-{}", nonce()));
        std::fs::create_dir(&path).expect("mkdir test cgroup");
        let cg = TestCgroup { path };
        if delegate {
            for f in ["", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"] {
                let p = if f.is_empty() { cg.path.clone() } else { cg.path.join(f) };
                std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).expect("chown (delegate)");
            }
        }
        cg
    }

    fn rel(&self) -> String {
        format!("/{}", self.path.file_name().and_then(|n| n.to_str()).unwrap_or_default())
    }
}

fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events")).map(|t| t.contains("populated 1")).unwrap_or(false)
}

/// Waits on `cgroup.events` with POLLPRI (no fixed sleeps) until `populated 0`.
fn wait_unpopulated(dir: &Path, limit: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let Ok(file) = std::fs::File::open(dir.join("cgroup.events")) else {
        return true;
    };
    let end = Instant::now() + limit;
    let mut buf = [0u8; 256];
    loop {
        // pread re-arms POLLPRI as well as telling the state.
        let Ok(n) = rustix::io::pread(&file, &mut buf, 0) else {
            return true;
        };
        if !String::from_utf8_lossy(&buf[..n]).contains("populated 1") {
            return true;
        }
        let now = Instant::now();
        if now >= end {
            return false;
        }
        let left = end - now;
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
        let mut fds = [PollFd::new(&file, PollFlags::PRI)];
        let _ = poll(&mut fds, Some(&ts));
    }
}

fn destroy(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                destroy(&e.path());
            }
        }
    }
    if populated(dir) {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        if !wait_unpopulated(dir, LONG) {
            eprintln!("cleanup: {} still populated", dir.display());
        }
    }
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    eprintln!("cleanup: could not remove {}", dir.display());
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        destroy(&self.path);
    }
}

// ---------------------------------------------------------------------------------------
// Running guardian and reading its events

struct Guardian {
    child: Child,
    events: Receiver<Value>,
    seen: Vec<Value>,
    stderr: Arc<Mutex<String>>,
}

/// Starts `guardian --events-fd 3 ARGS` as uid 65534 inside `cg` (when given), or as the
/// current user where it is. Events come on the child's stdout; guardian's log and the
/// provider's stdout on its stderr.
fn start(cg: Option<&Path>, args: &[&str]) -> Guardian {
    let script = match cg {
        Some(_) => {
            r#"echo $$ > "$1/cgroup.procs" || exit 99; shift; exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@" 3>&1 1>&2"#
        }
        None => r#"shift; exec "$@" 3>&1 1>&2"#,
    };
    // guardian's own options, then the events fd, then "--" and the command.
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let (opts, cmd) = args.split_at(split);
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).arg("wrap").arg(cg.map(|p| p.as_os_str()).unwrap_or_default());
    c.arg(guardian_bin()).args(opts).args(["--events-fd", "3"]).args(cmd);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn guardian wrapper");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                Err(e) => panic!("event line is not JSON: {line:?}: {e}"),
            }
        }
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut err = child.stderr.take().expect("stderr");
    let sink = stderr.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Ok(mut s) = sink.lock() {
                s.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    });
    Guardian { child, events: rx, seen: Vec::new(), stderr }
}

impl Guardian {
    fn wait_event(&mut self, name: &str) -> Value {
        if let Some(v) = self.seen.iter().find(|v| v["event"] == name) {
            return v.clone();
        }
        let end = Instant::now() + LONG;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if v["event"] == name {
                        return v;
                    }
                }
                Err(_) => panic!("no '{name}' event; seen {:?}; stderr: {}", self.seen, self.log()),
            }
        }
    }

    /// Waits for the events fd to close (after `released` or `error`), then for the exit.
    fn finish(&mut self) -> ExitStatus {
        let end = Instant::now() + LONG;
        while let Ok(v) = self.events.recv_timeout(end.saturating_duration_since(Instant::now())) {
            self.seen.push(v);
        }
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < end, "guardian did not exit; events {:?}; stderr {}", self.seen, self.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid()) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }

    fn log(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn leaf(&mut self) -> PathBuf {
        let spawned = self.wait_event("spawned");
        assert_eq!(spawned["mode"], "cgroup", "{spawned}");
        PathBuf::from(spawned["cgroup"].as_str().expect("spawned.cgroup is a path"))
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// /proc helpers

/// Live (non-zombie: their cmdline is empty) `sleep` processes whose argument starts with
/// `1000.<tag>`. Exact argv elements, so the shells and guardians that carry the tag inside
/// a longer `sh -c` script do not count.
fn tagged(tag: &str) -> Vec<i32> {
    let want = format!("1000.{tag}");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let is_sleep = argv.first().is_some_and(|a| a.ends_with(b"sleep"));
        if is_sleep && argv.get(1).is_some_and(|a| a.starts_with(want.as_bytes())) {
            out.push(pid);
        }
    }
    out
}

fn cgroup_of(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("0::")).map(String::from)
}

fn session_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + LONG;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rel_of(mount: &Path, dir: &Path) -> String {
    format!("/{}", dir.strip_prefix(mount).expect("below the mount").display())
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn provider_and_setsid_descendant_start_in_the_leaf() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    let provider = format!("env -i setsid sleep 1000.{n}1 & exec sleep 1000.{n}2");
    let mut g = start(Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "1s", "--", "sh", "-c", &provider]);
    let leaf = g.leaf();
    assert_eq!(leaf.parent(), Some(cg.path.as_path()), "the leaf is a child of the delegated cgroup");
    let name = leaf.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    assert!(name.starts_with(&format!("guardian-{}-", g.pid())), "leaf name carries the guardian pid: {name}");
    assert_eq!(cgroup_of(g.pid()).as_deref(), Some(cg.rel().as_str()), "guardian stays outside its leaf");

    let leaf_rel = rel_of(&mount, &leaf);
    wait_until("both tagged sleeps run", || tagged(&format!("{n}1")).len() == 1 && tagged(&format!("{n}2")).len() == 1);
    let escaped = tagged(&format!("{n}1"))[0];
    let provider_pid = tagged(&format!("{n}2"))[0];
    assert_ne!(session_of(escaped), session_of(provider_pid), "the setsid descendant left the provider's session");
    assert_eq!(cgroup_of(escaped).as_deref(), Some(leaf_rel.as_str()), "env-clearing setsid descendant is in the leaf");
    assert_eq!(cgroup_of(provider_pid).as_deref(), Some(leaf_rel.as_str()), "provider is in the leaf");
    let environ = std::fs::read(format!("/proc/{escaped}/environ")).unwrap_or_default();
    assert!(environ.is_empty(), "env -i cleared the descendant's environment");

    g.signal(rustix::process::Signal::TERM);
    let status = g.finish();
    assert_eq!(status.code(), Some(143), "stderr: {}", g.log());
    assert!(tagged(&n).is_empty(), "every tagged process is gone");
    assert!(!leaf.exists(), "the leaf was removed");
}

#[test]
fn teardown_goes_through_cgroup_kill_and_removes_the_leaf() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    // The provider exits at once, leaving SIGTERM-ignoring processes, one of them in a new
    // session: only the kill after the grace period can stop them.
    let provider = format!(
        "trap '' TERM; sleep 1000.{n}1 & setsid sh -c 'sleep 1000.{n}2 & sleep 1000.{n}3' & \
         while [ ! -d /proc/$! ]; do :; done; exit 5"
    );
    let mut g = start(Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "500ms", "--", "sh", "-c", &provider]);
    let leaf = g.leaf();
    let status = g.finish();
    assert_eq!(status.code(), Some(5), "stderr: {}", g.log());
    let kill = g
        .seen
        .iter()
        .find(|v| v["event"] == "signal" && v["target"] == "cgroup" && v["signal"] == "SIGKILL")
        .unwrap_or_else(|| panic!("no cgroup SIGKILL event: {:?}", g.seen))
        .clone();
    assert_eq!(kill["reason"], "kill");
    assert_eq!(kill["cgroup"], leaf.to_string_lossy().as_ref());
    assert!(g.log().contains("cgroup.kill"), "the -vv log names cgroup.kill: {}", g.log());
    let released = g.wait_event("released");
    assert_eq!(released["cgroup"], leaf.to_string_lossy().as_ref());
    assert!(tagged(&n).is_empty(), "the SIGTERM-ignoring tree is gone: {:?}", tagged(&n));
    assert!(!leaf.exists(), "the leaf was removed");
    assert!(cg.path.exists(), "guardian leaves the delegated parent alone");
}

#[test]
fn sweep_removes_a_dead_guardians_leaf_and_keeps_a_live_ones() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let (na, nb) = (nonce(), nonce());
    let mut a = start(
        Some(&cg.path),
        &["--cgroup", "auto", "--", "sh", "-c", &format!("trap '' TERM; sleep 1000.{na} & wait")],
    );
    let mut b = start(Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{nb}")]);
    let (leaf_a, leaf_b) = (a.leaf(), b.leaf());
    wait_until("both providers' sleeps run", || tagged(&na).len() == 1 && tagged(&nb).len() == 1);

    // guardian A dies without any chance to clean up.
    let _ = a.child.kill();
    let _ = a.child.wait();
    assert!(leaf_a.exists() && populated(&leaf_a), "A's leaf outlives its guardian, with its tree");
    assert_eq!(tagged(&na).len(), 1, "A's orphaned sleep still runs");

    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", guardian_bin(), "sweep", "--cgroup"])
        .arg(&cg.path)
        .output()
        .expect("run guardian sweep");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "sweep: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("removed {}", leaf_a.display())), "{text}");
    assert!(text.contains(&format!("kept {}", leaf_b.display())), "{text}");
    assert!(!leaf_a.exists(), "the dead guardian's leaf is gone");
    wait_until("A's orphan is dead", || tagged(&na).is_empty());
    assert!(leaf_b.exists(), "the live guardian's leaf is untouched");
    assert_eq!(tagged(&nb).len(), 1, "the live guardian's provider still runs");

    b.signal(rustix::process::Signal::TERM);
    assert_eq!(b.finish().code(), Some(143), "stderr: {}", b.log());
    assert!(!leaf_b.exists());
}

#[test]
fn concurrent_guardians_do_not_kill_each_other() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let (na, nb) = (nonce(), nonce());
    let mut b =
        start(Some(&cg.path), &["--cgroup", "auto", "--", "sh", "-c", &format!("sleep 1000.{nb}1 & sleep 1000.{nb}2")]);
    let leaf_b = b.leaf();
    wait_until("B's tree runs", || tagged(&nb).len() == 2);
    let mut a = start(
        Some(&cg.path),
        &["--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &format!("trap '' TERM; sleep 1000.{na} & exit 0")],
    );
    let leaf_a = a.leaf();
    assert_ne!(leaf_a, leaf_b, "each guardian has its own leaf");
    assert_eq!(a.finish().code(), Some(0), "stderr: {}", a.log());
    assert!(a.seen.iter().any(|v| v["event"] == "signal" && v["target"] == "cgroup" && v["signal"] == "SIGKILL"));
    assert!(tagged(&na).is_empty(), "A's tree is gone");
    assert!(!leaf_a.exists());
    assert_eq!(tagged(&nb).len(), 2, "B's tree is untouched by A's cgroup.kill");
    assert!(leaf_b.exists() && populated(&leaf_b));
    b.signal(rustix::process::Signal::TERM);
    assert_eq!(b.finish().code(), Some(143), "stderr: {}", b.log());
    assert!(tagged(&nb).is_empty() && !leaf_b.exists());
}

#[test]
fn a_fork_storm_is_stopped() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    // Four SIGTERM-ignoring loops, each spawning up to 400 SIGTERM-ignoring sleepers as fast
    // as it can (bounded so a broken guardian cannot exhaust the shared machine).
    let storm = format!(
        "trap '' TERM; for j in 1 2 3 4; do (i=0; while [ $i -lt 400 ]; do sleep 1000.{n} & i=$((i+1)); done; wait) & done; wait"
    );
    let mut g = start(Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &storm]);
    let leaf = g.leaf();
    wait_until("the storm is under way", || tagged(&n).len() >= 50);
    g.signal(rustix::process::Signal::TERM);
    let status = g.finish();
    assert_eq!(status.code(), Some(137), "the provider ignored SIGTERM; stderr: {}", g.log());
    assert!(g.seen.iter().any(|v| v["event"] == "signal" && v["target"] == "cgroup" && v["signal"] == "SIGKILL"));
    assert!(tagged(&n).is_empty(), "every sleeper of the storm is gone");
    assert!(!leaf.exists(), "the leaf was removed");
}

#[test]
fn auto_falls_back_to_the_subreaper_where_not_delegated() {
    let n = nonce();
    let provider = format!("sleep 1000.{n} & exit 7");
    let args = ["-vv", "--cgroup", "auto", "--grace", "0", "--", "sh", "-c", provider.as_str()];
    let (_cg, mut g) = match delegation_env() {
        Ok(mount) => {
            // A cgroup root owns and does not delegate: uid 65534 may not write it.
            let cg = TestCgroup::new(&mount, false);
            let g = start(Some(&cg.path), &args);
            (Some(cg), g)
        }
        Err(why) => {
            eprintln!("note: {why}; running guardian --cgroup auto as this user, where it is");
            (None, start(None, &args))
        }
    };
    let spawned = g.wait_event("spawned");
    let status = g.finish();
    assert_eq!(status.code(), Some(7), "stderr: {}", g.log());
    let fallback = g.seen.iter().find(|v| v["event"] == "fallback" && v["what"] == "cgroup").cloned();
    match (&_cg, fallback) {
        (_, Some(f)) => {
            assert_eq!(spawned["mode"], "subreaper", "{spawned}");
            assert!(spawned["cgroup"].is_null());
            assert!(f["detail"].as_str().unwrap_or_default().contains("subreaper"), "{f}");
            assert!(g.log().contains("running as a plain subreaper"), "debug log says so: {}", g.log());
        }
        (Some(_), None) => panic!("no fallback event in a non-delegated cgroup: {:?}", g.seen),
        (None, None) => {
            eprintln!("note: this user's own cgroup is delegated; guardian used it");
            assert_eq!(spawned["mode"], "cgroup");
        }
    }
    assert!(tagged(&n).is_empty(), "the subreaper path still stops the tree");
}

#[test]
fn an_unusable_explicit_path_exits_125_naming_file_and_permission() {
    // `inside`: run guardian as uid 65534 from inside that cgroup; else as this user.
    let run = |inside: Option<&Path>, args: &[&str]| {
        let mut c = match inside {
            Some(cg) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$1/cgroup.procs" || exit 99; shift; exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@""#)
                    .arg("wrap")
                    .arg(cg)
                    .arg(guardian_bin());
                c
            }
            None => Command::new(guardian_bin()),
        };
        let out = c.args(args).stdin(Stdio::null()).output().expect("run guardian");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(None, &["--cgroup", "/nonexistent/guardian-test", "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("/nonexistent/guardian-test") && err.lines().count() == 1, "{err}");
    let (code, err) = run(None, &["--cgroup", "/proc", "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("not a cgroup v2 directory"), "{err}");
    let (code, err) = run(None, &["--memory-max", "64M", "true"]);
    assert_eq!(code, Some(125), "{err}");

    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, false);
    let path = cg.path.to_string_lossy().into_owned();
    let (code, err) = run(Some(&cg.path), &["--cgroup", &path, "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&path) && err.contains("write") && err.contains("permission"),
        "names file and permission: {err}"
    );
    // Delegated, but guardian runs outside it: the common ancestor's cgroup.procs is named.
    let elsewhere = TestCgroup::new(&mount, true);
    let other = elsewhere.path.to_string_lossy().into_owned();
    let (code, err) = run(Some(&cg.path), &["--cgroup", &other, "true"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("cgroup.procs") && err.contains("write"), "{err}");

    // A delegated cgroup without the memory controller (as on hybrid hosts): the error
    // names the controller and the fix.
    let delegated = TestCgroup::new(&mount, true);
    let path = delegated.path.to_string_lossy().into_owned();
    let has_memory =
        std::fs::read_to_string(delegated.path.join("cgroup.controllers")).is_ok_and(|t| t.contains("memory"));
    if !has_memory {
        let (code, err) = run(Some(&delegated.path), &["--cgroup", &path, "--memory-max", "64M", "true"]);
        assert_eq!(code, Some(125), "{err}");
        assert!(err.contains("memory controller") && err.contains("subtree_control"), "{err}");
    }
    assert!(
        std::fs::read_dir(&delegated.path)
            .is_ok_and(|rd| { !rd.flatten().any(|e| e.file_type().is_ok_and(|t| t.is_dir())) })
    );
}
