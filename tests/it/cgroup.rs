//! cgroup mode, tested the way real deployments delegate: as root, each test creates its
//! own subtree under the cgroup2 mount (found in /proc/self/mountinfo), hands it to uid
//! 65534 as systemd's `Delegate=yes` does (chown of the directory, `cgroup.procs`,
//! `cgroup.subtree_control`, `cgroup.threads`), and starts guardian as that uid *inside*
//! the subtree (a tiny `sh` wrapper writes its own pid into `cgroup.procs` as root, then
//! `setpriv` drops to 65534 and execs guardian). Without root or cgroup2 the delegation tests
//! skip visibly; as root, a missing setpriv fails them. The fallback and error tests always run.
//!
//! Every process is tagged with a nonce in argv (`sleep 1000.<digits>`) and found through
//! /proc; nothing here uses pkill/killall. Every test cgroup is removed by a drop guard
//! (cgroup.kill, wait for `populated 0`, rmdir bottom-up), also when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::harness::*;

/// The cgroup2 mount the delegation tests use, or why they cannot run.
fn delegation_env() -> Result<PathBuf, String> {
    if !is_root() {
        return Err("not root: cannot create and delegate a test cgroup".into());
    }
    let mount = cgroup2_mount().ok_or("no cgroup2 mount in /proc/self/mountinfo")?;
    if !mount.join("cgroup.procs").exists() {
        return Err(format!("{} has no cgroup.procs", mount.display()));
    }
    if !installed("setpriv") {
        return Err("setpriv (util-linux) is not installed".into());
    }
    Ok(mount)
}

/// Root and setpriv are required (skip without root, fail without setpriv); a host without a
/// cgroup2 hierarchy skips.
macro_rules! need_delegation {
    () => {{
        need_root!("create and delegate a test cgroup");
        need_program!("setpriv", "util-linux");
        match delegation_env() {
            Ok(m) => m,
            Err(why) => skip!("{why}"),
        }
    }};
}

/// Starts `guardian ARGS` (events on fd 3): as uid 65534 inside `cg` when given, else as
/// the current user, where it is.
fn start(ctx: &Ctx, cg: Option<&Path>, args: &[&str]) -> Guardian {
    start_with(ctx, cg, args, true)
}

/// As [`start`], without the sentinel (`--no-sentinel` (`GUARDIAN_NO_SENTINEL=1`)): for the tests of what a
/// SIGKILLed guardian leaves in its leaf for `sweep` (with the sentinel, a SIGKILL of the
/// host's child is an ordinary parent death, and one of guardian itself is cleaned by it).
fn start_without_sentinel(ctx: &Ctx, cg: Option<&Path>, args: &[&str]) -> Guardian {
    start_with(ctx, cg, args, false)
}

fn start_with(ctx: &Ctx, cg: Option<&Path>, args: &[&str], sentinel: bool) -> Guardian {
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let (opts, cmd) = args.split_at(split);
    let mut b = ctx.guardian().privileged().args(opts).command(cmd.iter().skip(1));
    if !sentinel {
        b = b.env("GUARDIAN_NO_SENTINEL", "1");
    }
    match cg {
        Some(cg) => b.wrapper(in_cgroup_as_nobody(cg)),
        None => b,
    }
    .spawn()
}

/// The leaf guardian reports in `spawned`.
fn leaf(g: &Guardian) -> PathBuf {
    let spawned = g.wait_event_named("spawned");
    assert_eq!(spawned["mode"], "cgroup", "{spawned}");
    PathBuf::from(spawned["cgroup"].as_str().expect("spawned.cgroup is a path"))
}

fn cgroup_kill(events: &[Value]) -> Option<&Value> {
    events.iter().find(|v| v["event"] == "signal" && v["target"] == "cgroup" && v["signal"] == "SIGKILL")
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
    let ctx = Ctx::new("cg-leaf");
    let n = &ctx.nonce;
    let provider = format!("env -i setsid sleep 1000.{n}1 & exec sleep 1000.{n}2");
    let mut g = start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "1s", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    assert_eq!(leaf.parent(), Some(cg.path.as_path()), "the leaf is a child of the delegated cgroup");
    let name = leaf.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    assert!(name.starts_with(&format!("guardian-{}-", g.inner_pid())), "leaf name carries the guardian pid: {name}");
    assert_eq!(cgroup_of(g.pid()).as_deref(), Some(cg.rel().as_str()), "guardian stays outside its leaf");

    let leaf_rel = rel_of(&mount, &leaf);
    wait_for("both tagged sleeps run", || {
        (tagged_sleeps(&format!("{n}1")).len() == 1 && tagged_sleeps(&format!("{n}2")).len() == 1).then_some(())
    });
    let escaped = tagged_sleeps(&format!("{n}1"))[0];
    let provider_pid = tagged_sleeps(&format!("{n}2"))[0];
    assert_ne!(session_of(escaped), session_of(provider_pid), "the setsid descendant left the provider's session");
    assert_eq!(cgroup_of(escaped).as_deref(), Some(leaf_rel.as_str()), "env-clearing setsid descendant is in the leaf");
    assert_eq!(cgroup_of(provider_pid).as_deref(), Some(leaf_rel.as_str()), "provider is in the leaf");
    let environ = std::fs::read(format!("/proc/{escaped}/environ")).unwrap_or_default();
    assert!(environ.is_empty(), "env -i cleared the descendant's environment");

    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.end(), killed_by(libc::SIGTERM), "stderr: {}", f.stderr);
    assert!(tagged_sleeps(n).is_empty(), "every tagged process is gone");
    assert!(!leaf.exists(), "the leaf was removed");
}

/// `released.killed` counts descendants that needed SIGKILL: a provider that is itself killed
/// at the deadline (it ignores the stop signal) is a member of the leaf, but not a descendant.
#[test]
fn killed_counts_descendants_not_the_provider() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-killed");
    let n = &ctx.nonce;
    let provider = format!("trap '' TERM; sleep 1000.{n}1 & echo $$ > ready; while :; do wait; done");
    let mut g = start(&ctx, Some(&cg.path), &["--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &provider]);
    ctx.wait_pid_file("ready");
    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.end(), killed_by(libc::SIGKILL), "the provider was SIGKILLed at the deadline; stderr: {}", f.stderr);
    let released = g.wait_event_named("released");
    assert_eq!(released["killed"], 1, "one descendant (the sleep) needed SIGKILL: {released}");
    assert!(tagged_sleeps(n).is_empty(), "the tree is gone");
}

#[test]
fn teardown_goes_through_cgroup_kill_and_removes_the_leaf() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-kill");
    let n = &ctx.nonce;
    // The provider exits at once, leaving SIGTERM-ignoring processes, one of them in a new
    // session: only the kill after the grace period can stop them.
    let provider = format!(
        "trap '' TERM; sleep 1000.{n}1 & setsid sh -c 'sleep 1000.{n}2 & sleep 1000.{n}3' & \
         while [ ! -d /proc/$! ]; do :; done; exit 5"
    );
    let mut g =
        start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "500ms", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    let f = g.finish();
    assert_eq!(f.code, Some(5), "stderr: {}", f.stderr);
    let kill = cgroup_kill(&f.events).unwrap_or_else(|| panic!("no cgroup SIGKILL event: {:?}", f.events));
    assert_eq!(kill["reason"], "kill");
    assert_eq!(kill["cgroup"], leaf.to_string_lossy().as_ref());
    assert!(f.stderr.contains("cgroup.kill"), "the -vv log names cgroup.kill: {}", f.stderr);
    let released = g.wait_event_named("released");
    assert_eq!(released["cgroup"], leaf.to_string_lossy().as_ref());
    assert!(tagged_sleeps(n).is_empty(), "the SIGTERM-ignoring tree is gone: {:?}", tagged_sleeps(n));
    assert!(!leaf.exists(), "the leaf was removed");
    assert!(cg.path.exists(), "guardian leaves the delegated parent alone");
}

/// A descendant moved out of the leaf below a member that ignores the stop signal, where
/// `cgroup.kill` cannot reach it: SIGKILLed once that member has died and it has come to
/// guardian (the round that follows the leaf's emptying). The round at the deadline does not
/// read the `children` of the members `cgroup.kill` has just killed.
#[test]
fn a_descendant_moved_out_of_the_leaf_below_a_member_is_killed() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-outside");
    let n = &ctx.nonce;
    let outside = cg.path.join("outside");
    // The member (an inner sh, ignoring SIGTERM as its child does) keeps waiting for its
    // sleep, which the provider moves to a sibling cgroup of the leaf before exiting.
    let provider = format!(
        "trap '' TERM; mkdir {o} || exit 9; sh -c 'sleep 1000.{n}1 & echo $! > out.pid; while :; do wait; done' & \
         while [ ! -s out.pid ]; do :; done; cat out.pid > {o}/cgroup.procs || exit 8",
        o = outside.display()
    );
    let mut g =
        start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    let f = g.finish();
    let moved = ctx.wait_pid_file("out.pid");
    assert_eq!(f.code, Some(0), "stderr: {}", f.stderr);
    assert!(cgroup_kill(&f.events).is_some(), "the leaf was killed: {:?}", f.events);
    let killed_outside = f.events.iter().any(|v| {
        v["event"] == "signal"
            && v["signal"] == "SIGKILL"
            && v["target"] == "descendants"
            && v["pids"].as_array().is_some_and(|p| p.iter().any(|x| x.as_i64() == Some(i64::from(moved))))
    });
    assert!(killed_outside, "the sleep outside the leaf ({moved}) was SIGKILLed as a descendant: {:?}", f.events);
    assert!(tagged_sleeps(n).is_empty(), "the tree is gone: {:?}", tagged_sleeps(n));
    assert!(!leaf.exists(), "the leaf was removed");
}

/// Each member of the leaf hears the stop signal once: guardian's own child (signalled by
/// pid) and its child (through a verified pidfd), whatever the rescans during the grace.
#[test]
fn each_member_of_the_leaf_hears_the_stop_signal_once() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-stop-once");
    let n = &ctx.nonce;
    // Once its sleep is gone the inner sh stops itself (no busy loop) until the SIGKILL. It
    // is ready only once its child has exec'd sleep: a SIGTERM that reached the child between
    // fork and exec would meet the sh's inherited trap and be lost at the exec, and the sleep
    // would then be killed at the deadline (the test's race, not guardian's).
    let inner = format!(
        "trap 'echo T >> count.log' TERM; sleep 1000.{n}1 & until [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done; \
         echo $$ > ready; while :; do wait; kill -STOP $$; done\n"
    );
    std::fs::write(ctx.path("inner.sh"), inner).expect("write inner.sh");
    let provider = "sh inner.sh & while [ ! -s ready ]; do :; done; exit 4";
    let mut g = start(&ctx, Some(&cg.path), &["--cgroup", "auto", "--grace", "1s", "--", "sh", "-c", provider]);
    let leaf = leaf(&g);
    let f = g.finish();
    assert_eq!(f.code, Some(4), "stderr: {}", f.stderr);
    let heard = std::fs::read_to_string(ctx.path("count.log")).unwrap_or_default();
    assert_eq!(heard.lines().count(), 1, "the inner sh's SIGTERMs: {heard:?}; events {:?}", f.events);
    let released = g.wait_event_named("released");
    assert_eq!(released["signalled"], 2, "the inner sh and its sleep: {released}");
    assert_eq!(released["killed"], 1, "the inner sh survived SIGTERM: {released}");
    assert!(tagged_sleeps(n).is_empty(), "the tree is gone");
    assert!(!leaf.exists(), "the leaf was removed");
}

#[test]
fn sweep_removes_a_dead_guardians_leaf_and_keeps_a_live_ones() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let (ca, cb) = (Ctx::new("cg-a"), Ctx::new("cg-b"));
    let (na, nb) = (&ca.nonce, &cb.nonce);
    let mut a = start_without_sentinel(
        &ca,
        Some(&cg.path),
        &["--cgroup", "auto", "--", "sh", "-c", &format!("trap '' TERM; sleep 1000.{na} & wait")],
    );
    let mut b =
        start_without_sentinel(&cb, Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{nb}")]);
    let (leaf_a, leaf_b) = (leaf(&a), leaf(&b));
    wait_for("both providers' sleeps run", || {
        (tagged_sleeps(na).len() == 1 && tagged_sleeps(nb).len() == 1).then_some(())
    });

    // guardian A dies without any chance to clean up.
    let _ = a.child.kill();
    let _ = a.child.wait();
    assert!(leaf_a.exists() && populated(&leaf_a), "A's leaf outlives its guardian, with its tree");
    assert_eq!(tagged_sleeps(na).len(), 1, "A's orphaned sleep still runs");

    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(guardian_bin())
        .args(["sweep", "--cgroup"])
        .arg(&cg.path)
        .output()
        .expect("run guardian sweep");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "sweep: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("removed {}", leaf_a.display())), "{text}");
    assert!(text.contains(&format!("kept {}", leaf_b.display())), "{text}");
    assert!(!leaf_a.exists(), "the dead guardian's leaf is gone");
    wait_for("A's orphan is dead", || tagged_sleeps(na).is_empty().then_some(()));
    assert!(leaf_b.exists(), "the live guardian's leaf is untouched");
    assert_eq!(tagged_sleeps(nb).len(), 1, "the live guardian's provider still runs");

    b.signal(libc::SIGTERM);
    assert_eq!(b.finish().end(), killed_by(libc::SIGTERM), "stderr: {}", b.stderr());
    assert!(!leaf_b.exists());
}

#[test]
fn concurrent_guardians_do_not_kill_each_other() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let (ca, cb) = (Ctx::new("cg-a"), Ctx::new("cg-b"));
    let (na, nb) = (&ca.nonce, &cb.nonce);
    let mut b = start(
        &cb,
        Some(&cg.path),
        &["--cgroup", "auto", "--", "sh", "-c", &format!("sleep 1000.{nb}1 & sleep 1000.{nb}2")],
    );
    let leaf_b = leaf(&b);
    wait_for("B's tree runs", || (tagged_sleeps(nb).len() == 2).then_some(()));
    let mut a = start(
        &ca,
        Some(&cg.path),
        &["--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &format!("trap '' TERM; sleep 1000.{na} & exit 0")],
    );
    let leaf_a = leaf(&a);
    assert_ne!(leaf_a, leaf_b, "each guardian has its own leaf");
    let f = a.finish();
    assert_eq!(f.code, Some(0), "stderr: {}", f.stderr);
    assert!(cgroup_kill(&f.events).is_some());
    assert!(tagged_sleeps(na).is_empty(), "A's tree is gone");
    assert!(!leaf_a.exists());
    assert_eq!(tagged_sleeps(nb).len(), 2, "B's tree is untouched by A's cgroup.kill");
    assert!(leaf_b.exists() && populated(&leaf_b));
    b.signal(libc::SIGTERM);
    assert_eq!(b.finish().end(), killed_by(libc::SIGTERM), "stderr: {}", b.stderr());
    assert!(tagged_sleeps(nb).is_empty() && !leaf_b.exists());
}

#[test]
fn a_fork_storm_is_stopped() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-storm");
    let n = &ctx.nonce;
    // Four SIGTERM-ignoring loops, each spawning up to 400 SIGTERM-ignoring sleepers as fast
    // as it can (bounded so a broken guardian cannot exhaust the shared machine).
    let storm = format!(
        "trap '' TERM; for j in 1 2 3 4; do (i=0; while [ $i -lt 400 ]; do sleep 1000.{n} & i=$((i+1)); done; wait) & done; wait"
    );
    let mut g = start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "300ms", "--", "sh", "-c", &storm]);
    let leaf = leaf(&g);
    wait_for("the storm is under way", || (tagged_sleeps(n).len() >= 50).then_some(()));
    g.signal(libc::SIGTERM);
    let f = g.finish();
    assert_eq!(f.end(), killed_by(libc::SIGKILL), "the provider ignored SIGTERM; stderr: {}", f.stderr);
    assert!(cgroup_kill(&f.events).is_some());
    assert!(tagged_sleeps(n).is_empty(), "every sleeper of the storm is gone");
    assert!(!leaf.exists(), "the leaf was removed");
}

#[test]
fn auto_falls_back_to_the_subreaper_where_not_delegated() {
    let ctx = Ctx::new("cg-fallback");
    let n = &ctx.nonce;
    let provider = format!("sleep 1000.{n} & exit 7");
    let args = ["-vv", "--cgroup", "auto", "--grace", "0", "--", "sh", "-c", provider.as_str()];
    let (_cg, mut g) = match delegation_env() {
        Ok(mount) => {
            // A cgroup root owns and does not delegate: uid 65534 may not write it.
            let cg = TestCgroup::new(&mount, false);
            let g = start(&ctx, Some(&cg.path), &args);
            (Some(cg), g)
        }
        Err(why) => {
            eprintln!("note: {why}; running guardian --cgroup auto as this user, where it is");
            (None, start(&ctx, None, &args))
        }
    };
    let spawned = g.wait_event_named("spawned");
    let fin = g.finish();
    assert_eq!(fin.code, Some(7), "stderr: {}", fin.stderr);
    let fallback = fin.events.iter().find(|v| v["event"] == "fallback" && v["what"] == "cgroup").cloned();
    match (&_cg, fallback) {
        (_, Some(f)) => {
            assert_eq!(spawned["mode"], "subreaper", "{spawned}");
            assert!(spawned["cgroup"].is_null());
            assert!(f["detail"].as_str().unwrap_or_default().contains("subreaper"), "{f}");
            assert!(fin.stderr.contains("running as a plain subreaper"), "debug log says so: {}", fin.stderr);
        }
        (Some(_), None) => panic!("no fallback event in a non-delegated cgroup: {:?}", fin.events),
        (None, None) => {
            eprintln!("note: this user's own cgroup is delegated; guardian used it");
            assert_eq!(spawned["mode"], "cgroup");
        }
    }
    assert!(tagged_sleeps(n).is_empty(), "the subreaper path still stops the tree");
}

#[test]
fn an_unusable_explicit_path_exits_125_naming_file_and_permission() {
    // `inside`: run guardian as uid 65534 from inside that cgroup; else as this user.
    let run = |inside: Option<&Path>, args: &[&str]| {
        let mut c = match inside {
            Some(cg) => {
                let mut w = in_cgroup_as_nobody(cg);
                let mut c = Command::new(w.remove(0));
                c.args(w).arg(guardian_bin());
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

/// Where the C programs below come from: compiled here with `cc`, or, where the suite runs
/// without a compiler (the vm-test guest), prebuilt on the host into the directory
/// `GUARDIAN_TEST_PREBUILT_C` names (`tests/vm/run` does; one file per program name). Skips
/// only when that directory lacks the program (no compiler for the guest's architecture).
macro_rules! need_cc {
    ($name:expr) => {
        match std::env::var_os("GUARDIAN_TEST_PREBUILT_C") {
            Some(dir) if !Path::new(&dir).join($name).exists() => {
                skip!(
                    "{} was not prebuilt in {} (no cc for this architecture on the host)",
                    $name,
                    dir.to_string_lossy()
                )
            }
            Some(_) => {}
            None => need_program!("cc", "gcc"),
        }
    };
}

/// `zombie-leader 1000.<tag>`: ignores SIGTERM, then its main thread exits (pthread_exit)
/// while a second thread sleeps. /proc/PID/stat then shows state Z with 2 threads and an
/// empty cmdline; the live thread's /proc/PID/task/TID/cmdline still carries the tag (the
/// harness's finders and killer read it there: see `cmdline` and `leader_exited`).
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

fn zombie_leader_waits(bin: &Path, n: &str) -> String {
    // Starts the program and waits, in the provider, until its main thread has exited.
    format!("{} 1000.{n} & p=$!; until grep -q '^State:.*Z' /proc/$p/status; do sleep 0.01; done", bin.display())
}

/// The harness itself: its finders and its killer see a process whose main thread exited
/// (its own cmdline is empty), so no test can leak one and still pass.
#[test]
fn the_harness_finds_and_kills_a_process_whose_main_thread_exited() {
    use std::os::unix::process::ExitStatusExt;
    need_cc!("zombie-leader");
    let ctx = Ctx::new("harness-zombie-leader");
    let bin = ctx.c_program("zombie-leader", ZOMBIE_LEADER);
    let mut child = Command::new(&bin).arg(ctx.sleep_arg(1000)).stdin(Stdio::null()).spawn().expect("spawn");
    let pid = child.id() as i32;
    wait_for("its main thread to exit", || leader_exited(pid).then_some(()));
    let own = std::fs::read(format!("/proc/{pid}/cmdline")).expect("read cmdline");
    assert!(own.is_empty(), "the premise: its own cmdline is empty ({own:?})");
    assert!(alive(pid), "a process with a live thread is alive");
    assert_eq!(tagged_pids(&ctx.nonce), vec![pid], "the finder sees it");
    assert_eq!(ctx.live().iter().map(|p| p.pid).collect::<Vec<_>>(), vec![pid]);
    assert_eq!(kill_tagged(&ctx.nonce), vec![pid], "the killer hits it");
    let status = child.wait().expect("reap");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    ctx.assert_nothing_left();
}

#[test]
fn a_process_whose_main_thread_exited_is_killed_in_the_leaf() {
    let mount = need_delegation!();
    need_cc!("zombie-leader");
    let cg = TestCgroup::new(&mount, true);
    // Declared after `cg`, so dropped before it: its cleanup kills, through a pidfd, what
    // cgroup.kill in the cgroup's cleanup cannot.
    let ctx = Ctx::new("cg-zombie-leader");
    let n = &ctx.nonce;
    let bin = ctx.c_program("zombie-leader", ZOMBIE_LEADER);
    let provider = format!("{}; exit 3", zombie_leader_waits(&bin, n));
    let mut g =
        start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    let f = g.finish();
    assert_eq!(f.code, Some(3), "the provider's status, not 125; stderr: {}", f.stderr);
    ctx.assert_nothing_left();
    assert!(!leaf.exists(), "the leaf was removed");
    assert!(f.events.iter().any(|v| v["event"] == "released"), "{:?}", f.events);
}

#[test]
fn sweep_leaf_kills_a_process_cgroup_kill_misses() {
    let mount = need_delegation!();
    need_cc!("zombie-leader");
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-sweep-leaf");
    let n = &ctx.nonce;
    let bin = ctx.c_program("zombie-leader", ZOMBIE_LEADER);
    let provider = format!("{}; exec sleep 1000.{n}", zombie_leader_waits(&bin, n));
    let mut g = start_without_sentinel(&ctx, Some(&cg.path), &["--cgroup", "auto", "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    wait_for("the provider runs, the other process's main thread has exited", || {
        (tagged_sleeps(n).len() == 1 && tagged_pids(n).into_iter().any(leader_exited)).then_some(())
    });
    // guardian dies without any chance to clean up; its leaf holds the tree.
    let _ = g.child.kill();
    let _ = g.child.wait();
    assert!(populated(&leaf));

    // What the README used to tell drivers: writing cgroup.kill alone leaves the process.
    std::fs::write(leaf.join("cgroup.kill"), "1").expect("write cgroup.kill");
    wait_for("cgroup.kill took the sleep", || tagged_sleeps(n).is_empty().then_some(()));
    assert!(!wait_unpopulated(&leaf, Duration::from_millis(300)), "cgroup.kill alone leaves the leaf populated");
    let left = tagged_pids(n);
    assert!(
        left.len() == 1 && leader_exited(left[0]),
        "only the process with the exited main thread survived cgroup.kill: {:?}",
        describe(&left)
    );

    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(guardian_bin())
        .args(["sweep", "--leaf"])
        .arg(&leaf)
        .output()
        .expect("run guardian sweep --leaf");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "sweep: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("removed {}", leaf.display())), "{text}");
    ctx.assert_nothing_left();
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

    let ctx = Ctx::new("cg-sweep-live");
    let n = &ctx.nonce;
    let mut g = start(&ctx, Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{n}")]);
    let leaf = leaf(&g);
    wait_for("the provider runs", || (tagged_sleeps(n).len() == 1).then_some(()));
    let out = Command::new(guardian_bin()).args(["sweep", "--leaf"]).arg(&leaf).output().expect("sweep");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a live guardian's leaf is kept, and that is not success: {text}");
    assert!(text.contains(&format!("kept {}", leaf.display())), "{text}");
    assert_eq!(tagged_sleeps(n).len(), 1, "the live guardian's provider still runs");
    g.signal(libc::SIGTERM);
    assert_eq!(g.finish().end(), killed_by(libc::SIGTERM), "stderr: {}", g.stderr());
}

#[test]
fn a_provider_that_removes_its_own_emptied_leaf_gets_its_status() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-rmdir-leaf");
    let n = &ctx.nonce;
    // The provider moves itself to the delegated parent (allowed: it may write there),
    // removes the now empty leaf and exits 4.
    let provider = format!(
        ": 1000.{n}; c=$(sed -n 's/^0:://p' /proc/self/cgroup); \
         echo $$ > \"$1$(dirname \"$c\")/cgroup.procs\" && rmdir \"$1$c\" && exit 4; exit 99"
    );
    let mount_arg = mount.to_string_lossy().into_owned();
    let mut g = start(
        &ctx,
        Some(&cg.path),
        &["-vv", "--cgroup", "auto", "--grace", "200ms", "--", "sh", "-c", &provider, "sh", &mount_arg],
    );
    let leaf = leaf(&g);
    let f = g.finish();
    assert_eq!(f.code, Some(4), "the provider's status; stderr: {}", f.stderr);
    assert!(!leaf.exists());
    assert!(f.fallbacks("cgroup.kill").is_empty(), "no false cgroup.kill fallback: {:?}", f.events);
    let released = f.one("released");
    assert_eq!(released["status"], 4, "{released}");
}

/// Removes a directory tree of any depth through directory fds (test cleanup when guardian
/// failed to).
fn remove_deep(parent: &std::os::fd::OwnedFd, name: &std::ffi::OsStr) {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
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

#[test]
fn cgroups_nested_deeper_than_path_max_are_removed() {
    let mount = need_delegation!();
    need_cc!("deep-nest");
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-deep-nest");
    let n = &ctx.nonce;
    let bin = ctx.c_program("deep-nest", DEEP_NEST);
    // 30 levels of 200-character names: 6 000 bytes below the leaf, beyond PATH_MAX (4 096).
    let provider = format!("cd \"$1$(sed -n 's/^0:://p' /proc/self/cgroup)\" && {} 1000.{n} 30", bin.display());
    let mount_arg = mount.to_string_lossy().into_owned();
    let mut g =
        start(&ctx, Some(&cg.path), &["-vv", "--cgroup", "auto", "--", "sh", "-c", &provider, "sh", &mount_arg]);
    let leaf = leaf(&g);
    let f = g.finish();
    let gone = !leaf.exists();
    if !gone {
        let parent = rustix::fs::open(
            &cg.path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .expect("open test cgroup");
        remove_deep(&parent, leaf.file_name().expect("leaf name"));
    }
    assert_eq!(f.code, Some(0), "the nest was built; stderr: {}", f.stderr);
    let released = f.one("released");
    assert!(gone, "the leaf and the nest below it were removed, as released.cgroup says: {released}");
    assert_eq!(released["cgroup"], leaf.to_string_lossy().as_ref());
}

/// `guardian doctor --json ARGS` as uid 65534 inside `cg`: its JSON report.
fn doctor_inside(cg: &Path, args: &[&str]) -> Value {
    let mut w = in_cgroup_as_nobody(cg);
    let out = Command::new(w.remove(0))
        .args(w)
        .arg(guardian_bin())
        .args(["doctor", "--json"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run guardian doctor");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The superblock options of the cgroup2 mount at `mount`.
fn super_options(mount: &Path) -> Option<String> {
    mountinfo().into_iter().find(|m| m.fstype == "cgroup2" && m.point == mount).map(|m| m.super_options)
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
        let ctx = Ctx::new("cg-doctor-mode");
        let n = &ctx.nonce;
        let mut g = start(&ctx, Some(inside), &["--cgroup", request, "--", "sh", "-c", &format!(": 1000.{n}")]);
        let f = g.finish();
        match f.named("spawned").first() {
            Some(s) => {
                assert_eq!(f.code, Some(0), "stderr: {}", f.stderr);
                assert_eq!(report["mode"], s["mode"], "--cgroup {request} in {}: doctor {report}", inside.display());
            }
            None => {
                assert_eq!(f.code, Some(125), "no spawned event only when guardian refuses: {}", f.stderr);
                assert!(report["mode"].is_null(), "doctor says guardian would not start: {report}");
            }
        }
        reports.push(report);
    }
    let mounted_with = |opt: &str| super_options(&mount).is_some_and(|o| o.split(',').any(|x| x == opt));
    for report in reports {
        assert_eq!(report["cgroup"]["nsdelegate"].as_bool(), Some(mounted_with("nsdelegate")), "{report}");
        // uid 65534 gets no cgroup namespace, so the kernel refuses nobody a move out.
        assert_eq!(report["cgroup"]["move_out_refused"], "never", "{report}");
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

/// Starts guardian as [`start`] does, its stdout (the provider's) in a file; returns the
/// guardian and that file.
fn start_capturing(ctx: &Ctx, args: &[&str]) -> (Guardian, PathBuf) {
    let out = ctx.path(&format!("stdout-{}.txt", random_digits(6)));
    let file = std::fs::File::create(&out).expect("create stdout file");
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let (opts, cmd) = args.split_at(split);
    let g = ctx.guardian().privileged().args(opts).command(cmd.iter().skip(1)).stdout(file.into()).spawn();
    (g, out)
}

#[test]
fn a_privileged_guardian_starts_the_provider_in_a_cgroup_namespace_at_its_leaf() {
    let mount = need_delegation!();
    if !cap_sys_admin() {
        skip!("no CAP_SYS_ADMIN, so guardian creates no cgroup namespace");
    }
    let cg = TestCgroup::new(&mount, false);
    let path = cg.path.to_string_lossy().into_owned();
    let ctx = Ctx::new("cg-namespace");
    let n = &ctx.nonce;
    // guardian as root (where the test runs): the provider sees its leaf as "/".
    let provider =
        format!(": 1000.{n}; echo \"ns-root=$(sed -n 's/^0:://p' /proc/self/cgroup)\"; readlink /proc/self/ns/cgroup");
    let (mut g, stdout) = start_capturing(&ctx, &["--cgroup", &path, "--", "sh", "-c", &provider]);
    let leaf = leaf(&g);
    let f = g.finish();
    let out = std::fs::read_to_string(&stdout).unwrap_or_default();
    assert_eq!(f.code, Some(0), "stdout: {out}; stderr: {}", f.stderr);
    assert!(out.contains("ns-root=/\n"), "the provider's cgroup namespace is rooted at its leaf: {out}");
    let own_ns = std::fs::read_link("/proc/self/ns/cgroup").expect("own cgroup ns");
    assert!(out.contains("cgroup:["), "the provider printed its namespace: {out}");
    assert!(!out.contains(own_ns.to_string_lossy().as_ref()), "a new namespace: {out}");
    assert!(!leaf.exists());
}

/// Mounts a cgroup2 with `options` in a private mount namespace. cgroup2 has one superblock:
/// its root flags (nsdelegate among them) are set by every mount from the initial cgroup
/// namespace, system-wide, so this is how a test switches nsdelegate on and back off.
fn set_cgroup2_flags(options: &str) -> bool {
    let dir = std::env::temp_dir().join(format!("guardian-test-cg2-{}", random_digits(9)));
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
        skip!("no CAP_SYS_ADMIN, so guardian creates no cgroup namespace");
    }
    need_program!("unshare", "util-linux");
    let _flags = CGROUP2_FLAGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(host) = super_options(&mount) else {
        panic!("no cgroup2 mount at {} in mountinfo", mount.display());
    };
    let cg = TestCgroup::new(&mount, false);
    let path = cg.path.to_string_lossy().into_owned();
    let ctx = Ctx::new("cg-nsdelegate");
    // guardian as root: the provider starts in a cgroup namespace rooted at its leaf and tries
    // what any same-uid descendant may: write itself into the delegated parent.
    let escape = || {
        let provider = format!(
            ": 1000.{}; if echo $$ > \"{path}/cgroup.procs\"; then echo outcome=escaped; else echo outcome=refused; fi",
            ctx.nonce
        );
        let (mut g, stdout) = start_capturing(&ctx, &["--cgroup", &path, "--", "sh", "-c", &provider]);
        let f = g.finish();
        let out = std::fs::read_to_string(&stdout).unwrap_or_default();
        assert_eq!(f.code, Some(0), "stdout: {out}; stderr: {}", f.stderr);
        out
    };
    let has_nsdelegate = host.split(',').any(|o| o == "nsdelegate");
    if !has_nsdelegate {
        // The host's own mount: the namespace is no boundary, the move succeeds.
        let out = escape();
        assert!(out.contains("outcome=escaped"), "without nsdelegate the move is allowed: {out}");
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
            skip!(
                "the nsdelegate half: cannot switch nsdelegate on here (a mount outside the initial cgroup namespace, as in a container)"
            );
        }
    }
    let out = escape();
    assert!(out.contains("outcome=refused"), "with nsdelegate the kernel refuses the move: {out}");
}

// ---------------------------------------------------------------------------------------
// Issue 19 item 4, the classes this host can show (tests/vm/scenarios.sh shows the rest, with
// the memory, pids and cpu controllers, on a pure cgroup v2 kernel)

/// A guardian alone at the root of a cgroup namespace (a container's private one, or a
/// guardian nested in another's leaf) is in a delegated cgroup, not in the hierarchy's root:
/// `--cgroup auto` uses it. (It was refused as "the root cgroup, which is not delegated".)
#[test]
fn auto_at_the_root_of_a_cgroup_namespace_uses_that_cgroup() {
    let mount = need_delegation!();
    need_program!("unshare", "util-linux");
    let cg = TestCgroup::new(&mount, true);
    let ctx = Ctx::new("cg-ns-root");
    let n = &ctx.nonce;
    // As root: move into the delegated cgroup, make a cgroup namespace rooted there, then run
    // guardian as uid 65534 (as a rootless container's init would be).
    let script = r#"echo $$ > "$1/cgroup.procs" || exit 99; shift; exec unshare --cgroup setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@""#;
    let provider = format!(": 1000.{n}; sed -n 's/^0:://p' /proc/self/cgroup");
    let mut g = ctx
        .guardian()
        .privileged()
        .args(["--cgroup", "auto"])
        .command(["sh", "-c", &provider])
        .wrapper(["sh".into(), "-c".into(), script.into(), "wrap".into(), cg.path.clone().into_os_string()])
        .spawn();
    let leaf = leaf(&g);
    let f = g.finish();
    assert_eq!(f.code, Some(0), "stderr: {}", f.stderr);
    assert_eq!(leaf.parent(), Some(cg.path.as_path()), "the leaf is made in the namespace's root cgroup");
    assert!(!leaf.exists(), "and removed");
    ctx.assert_nothing_left();
}

/// `guardian sweep --leaf guardian-P-S`, a bare name: the leaf in the current directory, else
/// in guardian's own cgroup; never the empty path (it failed with "sweep: : No such file").
#[test]
fn sweep_leaf_takes_a_bare_leaf_name() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    // A leaf whose guardian cannot be alive: no pid is that large.
    let name = format!("guardian-{}-1", i32::MAX - 1);
    for from_cwd in [true, false] {
        let leaf = cg.path.join(&name);
        std::fs::create_dir(&leaf).expect("mkdir a dead guardian's leaf");
        let mut cmd = if from_cwd {
            let mut c = Command::new(guardian_bin());
            c.current_dir(&cg.path);
            c
        } else {
            // From elsewhere, inside the cgroup as its owner: guardian's own cgroup.
            let mut w = in_cgroup_as_nobody(&cg.path);
            let mut c = Command::new(w.remove(0));
            c.args(w).arg(guardian_bin()).current_dir("/");
            c
        };
        let out = cmd.args(["sweep", "--leaf", &name]).stdin(Stdio::null()).output().expect("run sweep");
        let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "from_cwd={from_cwd}: {text} {err}");
        assert!(text.contains(&format!("removed {}", leaf.display())), "from_cwd={from_cwd}: {text}");
        assert!(!leaf.exists());
    }
}
