//! Start-up under hostile or unusual surroundings (issue 9 items 3, 4, 9, 14, 15): a parent in
//! an ancestor PID namespace, a /proc of another namespace (blind mode), a stderr pipe nobody
//! reads, an events fd that is not open for writing, and `GUARDIAN_*` settings exported to a
//! nested guardian. The namespace tests need root (skipped with a printed reason otherwise);
//! guardian itself runs as nobody in every test.

use std::fs::{self, File};
use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};

use crate::harness::*;

const SETPRIV_NOBODY: [&str; 4] = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"];
/// For the parent-death tests: an unprivileged uid of its own. Queued real-time signals are
/// charged to the receiver's uid (RLIMIT_SIGPENDING); when other tests' signal storms exhaust
/// nobody's quota, the kernel delivers a real-time signal without its sender (pid 0), which
/// would make a forwarded SIGRTMAX look like the parent-death signal.
const SETPRIV_OWN_UID: [&str; 4] = ["setpriv", "--reuid=65533", "--regid=65533", "--clear-groups"];

/// A PID namespace with its own /proc, held by a tagged `sleep` as its PID 1 (killed with
/// the holder's `Ctx`). Returns the host pid of that init, for `nsenter -t`.
fn namespace_holder(holder: &Ctx) -> (std::process::Child, i32) {
    let child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sleep", &holder.sleep_arg(1000)])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn unshare");
    let unshare = child.id() as i32;
    let init = wait_for("the namespace's init", || {
        tagged_pids(&holder.nonce).into_iter().find(|&p| stat(p).is_some_and(|(_, ppid, _)| ppid == unshare))
    });
    (child, init)
}

/// Item 3: guardian's parent (`nsenter`) lives outside guardian's PID namespace, so getppid()
/// is 0 although guardian is not PID 1. Killing that parent must still tear the tree down:
/// guardian falls back to PR_SET_PDEATHSIG, says so in a `fallback` event, and stops the tree.
#[test]
fn parent_outside_the_pid_namespace_is_still_watched() {
    need_pid_namespace!();
    let holder = Ctx::new("pdeath-holder");
    let (mut unshare, init) = namespace_holder(&holder);
    let ctx = Ctx::new("pdeath");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let dir = ctx.dir.display().to_string();
    let init_s = init.to_string();
    let mut wrapper = vec!["nsenter", "-t", init_s.as_str(), "-p", "-m", "--"];
    wrapper.extend(SETPRIV_OWN_UID);
    // The wrapper (nsenter) is our child; guardian is nsenter's child inside the namespace.
    let mut g = ctx
        .guardian()
        .privileged()
        .wrapper(wrapper)
        .script(&format!(
            r#"cd {dir} && {s} & setsid sh -c 'echo $$ > {dir}/orphan; exec {s}' {tag} & echo $$ > {dir}/provider; wait"#
        ))
        .spawn();
    let fallback = g.wait_event("parent-watch fallback", |e| e["event"] == "fallback" && e["what"] == "parent-watch");
    assert!(fallback["detail"].as_str().is_some_and(|d| d.contains("PR_SET_PDEATHSIG")), "{fallback}");
    let spawned = g.wait_event_named("spawned");
    assert_eq!(spawned["mode"], "subreaper", "{spawned}");
    assert_ne!(spawned["guardian_pid"], 1, "guardian must not be the namespace's init here: {spawned}");
    ctx.wait_pid_file("orphan");
    ctx.wait_pid_file("provider");
    assert!(g.stderr().contains("outside its PID namespace"), "no warning: {}", g.stderr());

    // The parent dies (SIGKILL: it cannot pass anything on).
    g.signal(libc::SIGKILL);
    g.wait();
    let released = g.wait_event_named("released");
    ctx.wait_tree_gone();
    let ev = g.events();
    assert!(
        ev.iter().any(|e| e["event"] == "stopping" && e["reason"] == "parent-died"),
        "parent death was not noticed: {ev:?}"
    );
    assert_eq!(released["status"], 128 + libc::SIGTERM, "{released}");
    let _ = unshare.kill();
    let _ = unshare.wait();
}

/// Item 3, the other half: the same signal number sent by guardian's own tree (a sender guardian
/// can see, so si_pid is not 0) is forwarded as usual, not taken for parent death. (guardian
/// runs as a uid of its own: see [`SETPRIV_OWN_UID`].)
#[test]
fn death_signal_number_from_inside_is_forwarded() {
    need_pid_namespace!();
    let holder = Ctx::new("pdeath-fwd-holder");
    let (mut unshare, init) = namespace_holder(&holder);
    let ctx = Ctx::new("pdeath-fwd");
    let tag = ctx.tag();
    let dir = ctx.dir.display().to_string();
    let init_s = init.to_string();
    let mut wrapper = vec!["nsenter", "-t", init_s.as_str(), "-p", "-m", "--"];
    wrapper.extend(SETPRIV_OWN_UID);
    let rtmax = libc::SIGRTMAX();
    // The provider's child sends SIGRTMAX to guardian (its grandparent's pid, read from /proc).
    let mut g = ctx
        .guardian()
        .privileged()
        .wrapper(wrapper)
        .script(&format!(
            r#"cd {dir}; trap 'echo got > {dir}/got; exit 7' {rtmax}; g=$(cut -d' ' -f4 /proc/$$/stat); sh -c "kill -{rtmax} $g" {tag}; while :; do sleep 0.05; done"#
        ))
        .spawn();
    g.wait_event("parent-watch fallback", |e| e["event"] == "fallback" && e["what"] == "parent-watch");
    let released = g.wait_event_named("released");
    assert_eq!(released["status"], 7, "the provider never got the forwarded signal: {:?}", g.events());
    let ev = g.events();
    assert!(!ev.iter().any(|e| e["event"] == "stopping"), "a forwarded signal was taken for parent death: {ev:?}");
    assert_eq!(g.wait_code(), 7, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let _ = unshare.kill();
    let _ = unshare.wait();
}

/// Item 4: /proc of another PID namespace and guardian not PID 1 (blind): refused with 125
/// and a line naming the fixes, before the provider starts.
#[test]
fn blind_mode_is_refused_before_the_provider_starts() {
    need_pid_namespace!();
    let ctx = Ctx::new("blind");
    let tag = ctx.tag();
    // sh is PID 1 of the new namespace (no --mount-proc: the host's /proc); guardian is its
    // child, PID 2, as nobody.
    let init = format!(r#"{} "$@"; exit $?"#, SETPRIV_NOBODY.join(" "));
    let mut g = ctx
        .guardian()
        .privileged()
        .wrapper(["unshare", "--pid", "--fork", "sh", "-c", init.as_str(), &format!("init-{tag}")])
        .script(&format!("echo ran > {}/ran; {}", ctx.dir.display(), ctx.sleep()))
        .spawn();
    assert_eq!(g.wait_code(), 125, "stderr: {}", g.stderr());
    assert!(!ctx.path("ran").exists(), "the provider ran although guardian could not contain it");
    let err = g.stderr();
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    for fix in ["mount a /proc", "--cgroup", "PID 1"] {
        assert!(err.contains(fix), "the message does not name `{fix}`: {err}");
    }
    let ev = g.events();
    let last = ev.last().expect("an error event");
    assert_eq!(last["event"], "error", "{ev:?}");
    assert_eq!(last["status"], 125);
    ctx.assert_nothing_left();
}

/// Item 9: with -vvv and a stderr pipe that is full and never read, guardian still tears the
/// tree down and exits (log lines are dropped, not waited for).
#[test]
fn full_stderr_pipe_never_blocks_teardown() {
    let ctx = Ctx::new("stderr-full");
    let fifo = ctx.fifo("stderr");
    let s = ctx.sleep();
    let tag = ctx.tag();
    // The wrapper opens the FIFO read-write as fd 2 (so it has a reader that never reads),
    // fills it to the brim (64 KiB, the default pipe capacity), then execs guardian.
    let fill = format!(r#"exec 2<>{} && head -c 65536 /dev/zero >&2 && exec "$@""#, fifo.display());
    let mut g = ctx
        .guardian()
        .wrapper(["sh", "-c", fill.as_str(), &format!("wrap-{tag}")])
        .args(["-vvv", "--grace", "500ms"])
        .script(&format!("setsid sh -c 'trap \"\" TERM; echo $$ > orphan; exec {s}' {tag} & until [ -s orphan ]; do sleep 0.01; done; exit 3"))
        .spawn();
    ctx.wait_pid_file("orphan");
    assert_eq!(g.wait_code(), 3);
    ctx.assert_nothing_left();
    let ev = g.final_events();
    assert!(ev.iter().any(|e| e["event"] == "signal" && e["reason"] == "kill"), "{ev:?}");
}

fn refused_events_fd(name: &str, fd: i32, file: Option<File>, reason: &str) {
    let ctx = Ctx::new(name);
    let mut b = ctx.guardian().no_events().args(["--events-fd", &fd.to_string()]);
    if let Some(f) = file {
        b = b.pass_fd(f, fd);
    }
    let mut g = b.script(&format!("echo ran > {}/ran", ctx.dir.display())).spawn();
    assert_eq!(g.wait_code(), 125, "stderr: {}", g.stderr());
    let err = g.stderr();
    assert!(err.contains(&format!("--events-fd {fd}")), "the message does not name the fd: {err}");
    assert!(err.contains(reason), "the message does not say `{reason}`: {err}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err}");
    assert!(!ctx.path("ran").exists(), "the provider ran");
}

/// Item 14: an events fd that cannot carry events is refused (125, naming the fd and why).
#[test]
fn events_fd_open_read_only_is_refused() {
    let ctx = Ctx::new("events-ro-src");
    let p = ctx.path("ro.jsonl");
    fs::write(&p, "").unwrap();
    refused_events_fd("events-ro", 4, Some(File::open(&p).unwrap()), "reading only");
}

#[test]
fn events_fd_on_a_directory_is_refused() {
    refused_events_fd("events-dir", 4, Some(File::open("/").unwrap()), "directory");
}

#[test]
fn events_fd_on_a_pipe_read_end_is_refused() {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned here.
    let (read, _write) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    refused_events_fd("events-pipe-read", 5, Some(read), "reading only");
}

#[test]
fn events_fd_on_stdin_is_refused() {
    refused_events_fd("events-stdin", 0, None, "standard input");
}

/// Issue 22.1: an events fd among 0-2 that the caller closed is refused (125, nothing
/// started), although start-up opens `/dev/null` on every closed standard fd: the events fd
/// is judged as the caller gave it. For each of 0, 1 and 2, named by `--events-fd` and by
/// `GUARDIAN_EVENTS_FD`.
#[test]
fn a_closed_standard_fd_as_events_fd_is_refused() {
    for fd in 0..=2 {
        for by_env in [false, true] {
            let ctx = Ctx::new("events-closed-std");
            let close = format!(r#"exec "$@" {fd}<&-"#);
            let mut b = ctx.guardian().no_events().wrapper(["sh", "-c", close.as_str(), "sh"]);
            b = if by_env {
                b.env("GUARDIAN_EVENTS_FD", fd.to_string())
            } else {
                b.args(["--events-fd", &fd.to_string()])
            };
            let mut g = b.script(&format!("echo ran > {}/ran", ctx.dir.display())).spawn();
            let how = if by_env { "GUARDIAN_EVENTS_FD" } else { "--events-fd" };
            assert_eq!(g.wait_end(), End::Code(125), "{how} {fd} closed; stderr: {}", g.stderr());
            assert!(!ctx.path("ran").exists(), "{how} {fd} closed: the provider ran");
            if fd != 2 {
                let err = g.stderr();
                assert!(err.contains(&format!("file descriptor {fd} is not open")), "{how} {fd}: {err}");
            }
        }
    }
}

/// Item 15: `GUARDIAN_*` settings configure one guardian only: a nested guardian started with
/// GUARDIAN_EVENTS_FD=3 exported (and fd 3 closed for it) runs, and the provider's
/// environment carries none of them.
#[test]
fn guardian_settings_do_not_leak_into_the_provider() {
    let ctx = Ctx::new("env-nested");
    let inner = guardian_bin().display().to_string();
    let dir = ctx.dir.display().to_string();
    let mut g = ctx
        .guardian()
        .env("GUARDIAN_EVENTS_FD", "3")
        .env("GUARDIAN_GRACE", "2s")
        .env("GUARDIAN_VERBOSE", "1")
        .env("GUARDIAN_UNRELATED", "kept")
        .command([inner.as_str(), "--", "sh", "-c", &format!("env > {dir}/env.txt; exit 4")])
        .spawn();
    assert_eq!(g.wait_code(), 4, "stderr: {}", g.stderr());
    let env = fs::read_to_string(ctx.path("env.txt")).expect("the nested provider ran");
    let leaked: Vec<&str> = env
        .lines()
        .filter(|l| ["GUARDIAN_EVENTS_FD=", "GUARDIAN_GRACE=", "GUARDIAN_VERBOSE="].iter().any(|p| l.starts_with(p)))
        .collect();
    assert!(leaked.is_empty(), "settings leaked into the provider: {leaked:?}");
    assert!(env.lines().any(|l| l == "GUARDIAN_UNRELATED=kept"), "an unrelated variable was removed: {env}");
    let ev = g.final_events();
    assert_eq!(ev.last().unwrap()["status"], 4);
}

/// The cgroup2 mount point, from /proc/self/mountinfo (only plain paths, enough for tests).
fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        (right.starts_with("cgroup2 ") && f.len() > 4 && f[3] == "/").then(|| std::path::PathBuf::from(f[4]))
    })
}

/// A cgroup delegated to nobody; removed (after its members are gone) on drop.
struct Delegated(std::path::PathBuf);

impl Drop for Delegated {
    fn drop(&mut self) {
        // Dropped after the test's Ctx, whose cleanup killed every tagged process; never panics.
        let end = std::time::Instant::now() + DEADLINE;
        while fs::remove_dir(&self.0).is_err() && std::time::Instant::now() < end {
            std::thread::sleep(POLL);
        }
    }
}

/// Item 4, the exception: in blind mode a leaf cgroup contains the tree, so guardian runs
/// (a `fallback` event says the leaf finds the descendants) and the tree is gone at release.
#[test]
fn blind_mode_with_a_leaf_cgroup_contains_the_tree() {
    need_pid_namespace!();
    let Some(mount) = cgroup2_mount().filter(|m| m.join("cgroup.procs").exists()) else {
        skip!("no usable cgroup2 mount");
    };
    // Declared before the Ctx, so it is dropped after the Ctx killed what is left.
    let cg = Delegated(mount.join(format!("guardian-test-{}", random_digits(9))));
    let ctx = Ctx::new("blind-leaf");
    fs::create_dir(&cg.0).expect("mkdir test cgroup");
    for f in ["", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"] {
        let p = if f.is_empty() { cg.0.clone() } else { cg.0.join(f) };
        std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).expect("chown (delegate)");
    }
    let tag = ctx.tag();
    let s = ctx.sleep();
    // The namespace's init (root) joins the delegated cgroup, then runs guardian as nobody.
    let init = format!(r#"echo $$ > {}/cgroup.procs && {} "$@"; exit $?"#, cg.0.display(), SETPRIV_NOBODY.join(" "));
    let mut g = ctx
        .guardian()
        .privileged()
        .wrapper(["unshare", "--pid", "--fork", "sh", "-c", init.as_str(), &format!("init-{tag}")])
        .args(["--cgroup", "auto", "--grace", "200ms"])
        .script(&format!("setsid sh -c 'echo $$ > {0}/orphan; exec {s}' {tag} & until [ -s {0}/orphan ]; do sleep 0.01; done; exit 6", ctx.dir.display()))
        .spawn();
    assert_eq!(g.wait_code(), 6, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    assert!(ev.iter().any(|e| e["event"] == "fallback" && e["what"] == "proc"), "{ev:?}");
    let spawned = find(&ev, |e| e["event"] == "spawned").expect("spawned").1;
    assert_eq!(spawned["mode"], "cgroup", "{spawned}");
    // The leaf is named after guardian as the host's /proc (the one `sweep` reads) sees it,
    // not after its pid inside the namespace, which names an unrelated host process.
    let leaf = spawned["cgroup"].as_str().expect("the leaf");
    let named: i64 = leaf
        .rsplit('/')
        .next()
        .and_then(|n| n.split('-').nth(1))
        .and_then(|p| p.parse().ok())
        .expect("guardian-<pid>-<start>");
    assert_ne!(Some(named), spawned["guardian_pid"].as_i64(), "the leaf {leaf} names the namespace's pid");
}

/// Item 3: `guardian doctor` run the same way (parent outside its PID namespace) reports the
/// PR_SET_PDEATHSIG parent watch as a degradation.
#[test]
fn doctor_reports_the_deathsig_parent_watch() {
    need_pid_namespace!();
    let check = doctor_outside_the_namespace("pdeath-doctor-holder", None);
    assert!(check["detail"].as_str().is_some_and(|d| d.contains("PR_SET_PDEATHSIG(SIGRTMAX) took effect")), "{check}");
}

/// The kill signal (`GUARDIAN_KILL_SIGNAL=RTMAX`, what the drivers set) is never the
/// parent-death signal: a kill request from outside the PID namespace (si_pid 0) would be read
/// as the parent's death, a graceful stop instead of SIGKILL. guardian (and doctor, which
/// calls the same decision) takes the next real-time signal down.
#[test]
fn the_kill_signal_is_never_the_parent_death_signal() {
    need_pid_namespace!();
    let check = doctor_outside_the_namespace("pdeath-kill-holder", Some("RTMAX"));
    let detail = check["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("PR_SET_PDEATHSIG(") && detail.contains("took effect"), "{check}");
    assert!(!detail.contains("PR_SET_PDEATHSIG(SIGRTMAX)"), "the kill signal was chosen: {check}");
}

/// `guardian doctor --json` with its parent outside its PID namespace (nsenter into a
/// namespace held by `unshare`), optionally with `GUARDIAN_KILL_SIGNAL`: asserts the
/// PR_SET_PDEATHSIG degradation and exit 1, and returns the parent_watch check.
fn doctor_outside_the_namespace(tag: &str, kill_signal: Option<&str>) -> serde_json::Value {
    let holder = Ctx::new(tag);
    let (mut unshare, init) = namespace_holder(&holder);
    let bin = guardian_bin().display().to_string();
    let init_s = init.to_string();
    let mut args = vec!["-t", init_s.as_str(), "-p", "-m", "--"];
    args.extend(SETPRIV_OWN_UID);
    args.extend([bin.as_str(), "doctor", "--json"]);
    let mut doctor = Command::new("nsenter");
    doctor.args(&args).stdin(Stdio::null());
    if let Some(sig) = kill_signal {
        doctor.env("GUARDIAN_KILL_SIGNAL", sig);
    }
    let out = doctor.output().expect("run doctor");
    let _ = unshare.kill();
    let _ = unshare.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    let r: serde_json::Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("doctor --json ({e}): {text}"));
    let degraded = r["degraded"].as_array().cloned().unwrap_or_default();
    let watch = degraded.iter().find(|p| p["what"] == "parent-watch").unwrap_or_else(|| panic!("{r:#}"));
    assert!(watch["problem"].as_str().is_some_and(|p| p.contains("PR_SET_PDEATHSIG")), "{watch}");
    // Probed for real: the prctl was set (and cleared); the pidfd path is what failed.
    let check = r["checks"]["parent_watch"].clone();
    assert_eq!(check["ok"], serde_json::Value::Bool(false), "{r:#}");
    assert_eq!(out.status.code(), Some(1), "degraded means exit 1: {r:#}");
    check
}

/// As above, with every real-time signal ignored when doctor starts (dispositions survive
/// exec): no signal is free for PR_SET_PDEATHSIG, so guardian would not notice parent death.
/// doctor says so as a problem, not as the PR_SET_PDEATHSIG fallback.
#[test]
fn doctor_reports_an_unwatched_parent_when_every_realtime_signal_is_ignored() {
    need_pid_namespace!();
    let holder = Ctx::new("pdeath-doctor-ignored");
    let (mut unshare, init) = namespace_holder(&holder);
    let bin = guardian_bin().display().to_string();
    let init_s = init.to_string();
    let rt: Vec<String> = (libc::SIGRTMIN()..=libc::SIGRTMAX()).map(|s| s.to_string()).collect();
    let script = format!("trap '' {}; exec \"$0\" doctor --json", rt.join(" "));
    let mut args = vec!["-t", init_s.as_str(), "-p", "-m", "--"];
    args.extend(SETPRIV_OWN_UID);
    args.extend(["sh", "-c", script.as_str(), bin.as_str()]);
    let out = Command::new("nsenter").args(&args).stdin(Stdio::null()).output().expect("run doctor");
    let _ = unshare.kill();
    let _ = unshare.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    let r: serde_json::Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("doctor --json ({e}): {text}"));
    let check = &r["checks"]["parent_watch"];
    assert_eq!(check["ok"], serde_json::Value::Bool(false), "{r:#}");
    assert!(check["detail"].as_str().is_some_and(|d| d.contains("every real-time signal is ignored")), "{check}");
    let degraded = r["degraded"].as_array().cloned().unwrap_or_default();
    let watch = degraded.iter().find(|p| p["what"] == "parent-watch").unwrap_or_else(|| panic!("{r:#}"));
    assert!(watch["problem"].as_str().is_some_and(|p| p.contains("parent death is not noticed")), "{watch}");
    assert_eq!(out.status.code(), Some(1), "degraded means exit 1: {r:#}");
}
