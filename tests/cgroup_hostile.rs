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

// ---------------------------------------------------------------------------------------
// Hostile trees (issue 9 items 1, 5, 11, 12) and doctor's agreement with guardian (issue 12
// item 6)

/// A C program compiled once per test process into a 0755 directory uid 65534 can reach.
fn c_program(name: &str, source: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("guardian-test-cc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir cc dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod cc dir");
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    std::fs::write(&src, source).expect("write C source");
    let out = Command::new("cc").arg("-pthread").arg("-o").arg(&bin).arg(&src).output().expect("run cc");
    assert!(out.status.success(), "cc failed: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod program");
    bin
}

/// `zombie-leader 1000.<tag>`: ignores SIGTERM, then its main thread exits (pthread_exit)
/// while a second thread sleeps. /proc/PID/stat then shows state Z with 2 threads and an
/// empty cmdline; the live thread's /proc/PID/task/TID/cmdline still carries the tag.
const ZOMBIE_LEADER: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
static void *sleeper(void *arg) { (void)arg; for (;;) pause(); return 0; }
int main(void) {
    pthread_t t;
    signal(SIGTERM, SIG_IGN);
    if (pthread_create(&t, 0, sleeper, 0) != 0) return 1;
    pthread_exit(0);
}
"#;

/// `deep-nest 1000.<tag> DEPTH`: creates DEPTH nested directories of 200-character names
/// below its working directory with relative mkdir/chdir, so the innermost is far deeper
/// than PATH_MAX from the root.
const DEEP_NEST: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char name[201];
    int depth = argc > 2 ? atoi(argv[2]) : 0;
    memset(name, 'd', 200);
    name[200] = 0;
    for (int i = 0; i < depth; i++)
        if (mkdir(name, 0755) != 0 || chdir(name) != 0) return 9;
    return 0;
}
"#;

/// Processes with a thread whose cmdline carries `1000.<tag>` (also those whose main
/// thread exited, whose own cmdline is empty).
fn tagged_threads(tag: &str) -> Vec<i32> {
    let want = format!("1000.{tag}");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        let hit = tasks.flatten().any(|t| {
            std::fs::read(t.path().join("cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a.starts_with(want.as_bytes())))
        });
        if hit {
            out.push(pid);
        }
    }
    out
}

/// On drop (also when a test fails), SIGKILLs through a pidfd every process a thread of
/// which carries the tag: `cgroup.kill` in the test cgroup's cleanup cannot kill them.
struct KillTagged(String);

impl Drop for KillTagged {
    fn drop(&mut self) {
        for pid in tagged_threads(&self.0) {
            let Some(p) = rustix::process::Pid::from_raw(pid) else { continue };
            let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
                continue;
            };
            // The pidfd holds the process the tag was read from only if the tag is still there.
            if tagged_threads(&self.0).contains(&pid) {
                let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            }
        }
    }
}

/// `(state, threads)` from /proc/PID/stat.
fn state_threads(pid: i32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some((rest.first()?.chars().next()?, rest.get(17)?.parse().ok()?))
}

fn zombie_leader_waits(bin: &Path, n: &str) -> String {
    // Starts the program and waits, in the provider, until its main thread has exited.
    format!("{} 1000.{n} & p=$!; until grep -q '^State:.*Z' /proc/$p/status; do sleep 0.01; done", bin.display())
}

#[test]
fn a_process_whose_main_thread_exited_is_killed_in_the_leaf() {
    let mount = need_delegation!();
    let bin = c_program("zombie-leader", ZOMBIE_LEADER);
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    let _cleanup = KillTagged(n.clone());
    let provider = format!("{}; exit 3", zombie_leader_waits(&bin, &n));
    let mut g = start(Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &provider]);
    let leaf = g.leaf();
    let status = g.finish();
    assert_eq!(status.code(), Some(3), "the provider's status, not 125; stderr: {}", g.log());
    assert!(tagged_threads(&n).is_empty(), "the process with the exited main thread is gone");
    assert!(!leaf.exists(), "the leaf was removed");
    assert!(g.seen.iter().any(|v| v["event"] == "released"), "{:?}", g.seen);
}

#[test]
fn sweep_leaf_kills_a_process_cgroup_kill_misses() {
    let mount = need_delegation!();
    let bin = c_program("zombie-leader", ZOMBIE_LEADER);
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    let _cleanup = KillTagged(n.clone());
    let provider = format!("{}; exec sleep 1000.{n}", zombie_leader_waits(&bin, &n));
    let mut g = start(Some(&cg.path), &["--cgroup", "auto", "--", "sh", "-c", &provider]);
    let leaf = g.leaf();
    wait_until("the provider runs, the other process's main thread has exited", || {
        tagged(&n).len() == 1
            && tagged_threads(&n).iter().any(|&p| state_threads(p).is_some_and(|(s, t)| s == 'Z' && t > 1))
    });
    // guardian dies without any chance to clean up; its leaf holds the tree.
    let _ = g.child.kill();
    let _ = g.child.wait();
    assert!(populated(&leaf));

    // What the README used to tell drivers: writing cgroup.kill alone leaves the process.
    std::fs::write(leaf.join("cgroup.kill"), "1").expect("write cgroup.kill");
    wait_until("cgroup.kill took the sleep", || tagged(&n).is_empty());
    assert!(!wait_unpopulated(&leaf, Duration::from_millis(300)), "cgroup.kill alone leaves the leaf populated");
    assert_eq!(tagged_threads(&n).len(), 1, "the process with the exited main thread survived cgroup.kill");

    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", guardian_bin(), "sweep", "--leaf"])
        .arg(&leaf)
        .output()
        .expect("run guardian sweep --leaf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "sweep: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("removed {}", leaf.display())), "{text}");
    assert!(tagged_threads(&n).is_empty(), "sweep --leaf killed it");
    assert!(!leaf.exists());
    assert!(cg.path.exists(), "only the named leaf is touched");
}

#[test]
fn sweep_leaf_refuses_what_is_not_a_guardian_leaf_and_keeps_a_live_one() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let out = Command::new(guardian_bin()).args(["sweep", "--leaf"]).arg(&cg.path).output().expect("sweep");
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a guardian leaf"));
    assert!(cg.path.exists());

    let n = nonce();
    let mut g = start(Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{n}")]);
    let leaf = g.leaf();
    wait_until("the provider runs", || tagged(&n).len() == 1);
    let out = Command::new(guardian_bin()).args(["sweep", "--leaf"]).arg(&leaf).output().expect("sweep");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a live guardian's leaf is kept, and that is not success: {text}");
    assert!(text.contains(&format!("kept {}", leaf.display())), "{text}");
    assert_eq!(tagged(&n).len(), 1, "the live guardian's provider still runs");
    g.signal(rustix::process::Signal::TERM);
    assert_eq!(g.finish().code(), Some(143), "stderr: {}", g.log());
}

#[test]
fn a_provider_that_removes_its_own_emptied_leaf_gets_its_status() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    // The provider moves itself to the delegated parent (allowed: it may write there),
    // removes the now empty leaf and exits 4.
    let provider = format!(
        ": 1000.{n}; c=$(sed -n 's/^0:://p' /proc/self/cgroup); \
         echo $$ > \"$1$(dirname \"$c\")/cgroup.procs\" && rmdir \"$1$c\" && exit 4; exit 99"
    );
    let mount_arg = mount.to_string_lossy().into_owned();
    let mut g = start(
        Some(&cg.path),
        &["-vv", "--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &provider, "sh", &mount_arg],
    );
    let leaf = g.leaf();
    let status = g.finish();
    assert_eq!(status.code(), Some(4), "the provider's status; stderr: {}", g.log());
    assert!(!leaf.exists());
    assert!(
        !g.seen.iter().any(|v| v["event"] == "fallback" && v["what"] == "cgroup.kill"),
        "no false cgroup.kill fallback: {:?}",
        g.seen
    );
    let released = g.wait_event("released");
    assert_eq!(released["status"], 4, "{released}");
}

/// Removes a directory tree of any depth through directory fds (test cleanup when guardian
/// failed to).
fn remove_deep(parent: &std::os::fd::OwnedFd, name: &std::ffi::OsStr) {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if let Ok(fd) = rustix::fs::openat(parent, name, flags, Mode::empty()) {
        let subs: Vec<std::ffi::OsString> = rustix::fs::Dir::read_from(&fd)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_type() == rustix::fs::FileType::Directory)
                    .map(|e| std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
                    .filter(|n| n != "." && n != "..")
                    .collect()
            })
            .unwrap_or_default();
        for s in subs {
            remove_deep(&fd, &s);
        }
    }
    let _ = rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR);
}

use std::os::unix::ffi::OsStrExt;

#[test]
fn cgroups_nested_deeper_than_path_max_are_removed() {
    let mount = need_delegation!();
    let bin = c_program("deep-nest", DEEP_NEST);
    let cg = TestCgroup::new(&mount, true);
    let n = nonce();
    // 30 levels of 200-character names: 6 000 bytes below the leaf, beyond PATH_MAX (4 096).
    let provider = format!("cd \"$1$(sed -n 's/^0:://p' /proc/self/cgroup)\" && {} 1000.{n} 30", bin.display());
    let mount_arg = mount.to_string_lossy().into_owned();
    let mut g = start(Some(&cg.path), &["-vv", "--cgroup", "auto", "--", "sh", "-c", &provider, "sh", &mount_arg]);
    let leaf = g.leaf();
    let status = g.finish();
    let gone = !leaf.exists();
    if !gone {
        let parent = rustix::fs::open(
            &cg.path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .expect("open test cgroup");
        remove_deep(&parent, leaf.file_name().expect("leaf name"));
    }
    assert_eq!(status.code(), Some(0), "the nest was built; stderr: {}", g.log());
    let released = g.wait_event("released");
    assert!(gone, "the leaf and the nest below it were removed, as released.cgroup says: {released}");
    assert_eq!(released["cgroup"], leaf.to_string_lossy().as_ref());
}

/// `guardian doctor --json ARGS` as uid 65534 inside `cg`: its JSON report.
fn doctor_inside(cg: &Path, args: &[&str]) -> Value {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" || exit 99; shift; exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@""#)
        .arg("wrap")
        .arg(cg)
        .arg(guardian_bin())
        .args(["doctor", "--json"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run guardian doctor");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn doctor_reports_the_mode_guardian_runs_in() {
    let mount = need_delegation!();
    let _flags = CGROUP2_FLAGS.lock().unwrap_or_else(|e| e.into_inner());
    let delegated = TestCgroup::new(&mount, true);
    let owned = TestCgroup::new(&mount, false);
    let other = TestCgroup::new(&mount, true);
    let other_path = other.path.to_string_lossy().into_owned();
    // (where guardian runs, --cgroup value)
    let cases: [(&Path, &str); 4] =
        [(&delegated.path, "auto"), (&owned.path, "auto"), (&delegated.path, &other_path), (&other.path, &other_path)];
    let mut reports = Vec::new();
    for (inside, request) in cases {
        let report = doctor_inside(inside, &["--cgroup", request]);
        let n = nonce();
        let mut g = start(Some(inside), &["--cgroup", request, "--", "sh", "-c", &format!(": 1000.{n}")]);
        let status = g.finish();
        let spawned = g.seen.iter().find(|v| v["event"] == "spawned").cloned();
        match spawned {
            Some(s) => {
                assert_eq!(status.code(), Some(0), "stderr: {}", g.log());
                assert_eq!(report["mode"], s["mode"], "--cgroup {request} in {}: doctor {report}", inside.display());
            }
            None => {
                assert_eq!(status.code(), Some(125), "no spawned event only when guardian refuses: {}", g.log());
                assert!(report["mode"].is_null(), "doctor says guardian would not start: {report}");
            }
        }
        reports.push(report);
    }
    let mounted_with = |opt: &str| {
        std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|t| {
            t.lines().any(|l| {
                l.split_once(" - ").is_some_and(|(left, right)| {
                    right.starts_with("cgroup2 ")
                        && left.split(' ').nth(4).map(unescape).as_deref() == mount.to_str()
                        && right.split(' ').nth(2).is_some_and(|o| o.split(',').any(|x| x == opt))
                })
            })
        })
    };
    for report in reports {
        assert_eq!(report["cgroup"]["nsdelegate"].as_bool(), Some(mounted_with("nsdelegate")), "{report}");
    }
}

/// CAP_SYS_ADMIN in this process's effective set (needed for a cgroup namespace).
fn cap_sys_admin() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|c| c & (1 << 21) != 0)
    })
}

#[test]
fn a_privileged_guardian_starts_the_provider_in_a_cgroup_namespace_at_its_leaf() {
    let mount = need_delegation!();
    if !cap_sys_admin() {
        eprintln!("skipping {}: no CAP_SYS_ADMIN, so guardian creates no cgroup namespace", module_path!());
        return;
    }
    let cg = TestCgroup::new(&mount, false);
    let path = cg.path.to_string_lossy().into_owned();
    let n = nonce();
    // guardian as root (where the test runs): the provider sees its leaf as "/".
    let provider =
        format!(": 1000.{n}; echo \"ns-root=$(sed -n 's/^0:://p' /proc/self/cgroup)\"; readlink /proc/self/ns/cgroup");
    let mut g = start(None, &["--cgroup", &path, "--", "sh", "-c", &provider]);
    let leaf = g.leaf();
    let status = g.finish();
    assert_eq!(status.code(), Some(0), "stderr: {}", g.log());
    assert!(g.log().contains("ns-root=/\n"), "the provider's cgroup namespace is rooted at its leaf: {}", g.log());
    let own_ns = std::fs::read_link("/proc/self/ns/cgroup").expect("own cgroup ns");
    assert!(!g.log().contains(own_ns.to_string_lossy().as_ref()), "a new namespace: {}", g.log());
    assert!(!leaf.exists());
}

/// The superblock options of the cgroup2 mount at `mount`.
fn super_options(mount: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let at = left.split(' ').nth(4).map(unescape)?;
        (right.starts_with("cgroup2 ") && at == mount.to_string_lossy())
            .then(|| right.split(' ').nth(2).map(String::from))?
    })
}

/// Mounts a cgroup2 with `options` in a private mount namespace. cgroup2 has one superblock:
/// its root flags (nsdelegate among them) are set by every mount from the initial cgroup
/// namespace, system-wide, so this is how a test switches nsdelegate on and back off.
fn set_cgroup2_flags(options: &str) -> bool {
    let dir = std::env::temp_dir().join(format!("guardian-test-cg2-{}", nonce()));
    if std::fs::create_dir(&dir).is_err() {
        return false;
    }
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "mount", "-t", "cgroup2"]);
    if !options.is_empty() {
        c.args(["-o", options]);
    }
    let ok = c.arg("none").arg(&dir).status().is_ok_and(|s| s.success());
    let _ = std::fs::remove_dir(&dir);
    ok
}

/// Held by tests that switch the cgroup2 flags and by those that read them.
static CGROUP2_FLAGS: Mutex<()> = Mutex::new(());

/// Restores the cgroup2 flags the host had, whatever happens in the test.
struct RestoreFlags(String);

impl Drop for RestoreFlags {
    fn drop(&mut self) {
        if !set_cgroup2_flags(&self.0) {
            eprintln!("could not restore the cgroup2 mount options '{}'", self.0);
        }
    }
}

#[test]
fn with_nsdelegate_a_namespaced_provider_cannot_move_itself_out_of_its_leaf() {
    let mount = need_delegation!();
    if !cap_sys_admin() {
        eprintln!("skipping {}: no CAP_SYS_ADMIN, so guardian creates no cgroup namespace", module_path!());
        return;
    }
    let _flags = CGROUP2_FLAGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = super_options(&mount) else {
        panic!("no cgroup2 mount at {} in mountinfo", mount.display());
    };
    let cg = TestCgroup::new(&mount, false);
    let path = cg.path.to_string_lossy().into_owned();
    // guardian as root: the provider starts in a cgroup namespace rooted at its leaf and tries
    // what any same-uid descendant may: write itself into the delegated parent.
    let escape = |n: &str| {
        let provider = format!(
            ": 1000.{n}; if echo $$ > \"{path}/cgroup.procs\"; then echo outcome=escaped; else echo outcome=refused; fi"
        );
        let mut g = start(None, &["--cgroup", &path, "--", "sh", "-c", &provider]);
        let status = g.finish();
        assert_eq!(status.code(), Some(0), "stderr: {}", g.log());
        g.log()
    };
    let has_nsdelegate = host.split(',').any(|o| o == "nsdelegate");
    if !has_nsdelegate {
        // The host's own mount: the namespace is no boundary, the move succeeds.
        let log = escape(&nonce());
        assert!(log.contains("outcome=escaped"), "without nsdelegate the move is allowed: {log}");
    }
    let keep: Vec<&str> = host.split(',').filter(|o| *o != "rw" && *o != "ro").collect();
    let _restore = RestoreFlags(keep.join(","));
    if !has_nsdelegate {
        let mut with = keep.clone();
        with.push("nsdelegate");
        // Only a mount from the initial cgroup namespace sets the flags (not in a container).
        let on = set_cgroup2_flags(&with.join(","))
            && super_options(&mount).is_some_and(|o| o.split(',').any(|x| x == "nsdelegate"));
        if !on {
            eprintln!("skipping the nsdelegate half of {}: cannot switch nsdelegate on here", module_path!());
            return;
        }
    }
    let log = escape(&nonce());
    assert!(log.contains("outcome=refused"), "with nsdelegate the kernel refuses the move: {log}");
}
