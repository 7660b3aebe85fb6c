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
//!
//! The tests are split by behaviour: `teardown.rs` (the tree in and out of the leaf), `sweep.rs`
//! (`guardian sweep`) and `setup.rs` (which mode guardian starts in, or its refusal). The C
//! programs they build are all here: `tests/vm/run` compiles them for its guest from this file. The named
//! scenarios below ([`delegated`], [`run_in_leaf`], [`assert_tree_gone`]) are their common shape.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// The common set-up: a delegated test cgroup (removed by its drop guard) and a context for a
/// test named `name`, as `(mount, cgroup, ctx)`; skips (or fails) as [`need_delegation`] does.
/// The context is dropped before the cgroup: its cleanup kills, through a pidfd, what
/// `cgroup.kill` in the cgroup's cleanup cannot.
macro_rules! delegated {
    ($name:expr) => {{
        let mount = need_delegation!();
        let cg = TestCgroup::new(&mount, true);
        (mount, cg, Ctx::new($name))
    }};
}

/// Two guardians side by side in one delegated cgroup: `(mount, cgroup, (ctx_a, ctx_b))`.
macro_rules! delegated_pair {
    ($a:expr, $b:expr) => {{
        let (mount, cg, a) = delegated!($a);
        (mount, cg, (a, Ctx::new($b)))
    }};
}

/// A delegated cgroup with a C program of the test's (skips where it cannot be built, as
/// [`need_cc`] says): `(mount, cgroup, ctx, program)`.
macro_rules! delegated_with_program {
    ($name:expr, $program:expr, $source:expr) => {{
        need_cc!($program);
        let (mount, cg, ctx) = delegated!($name);
        let bin = ctx.c_program($program, $source);
        (mount, cg, ctx, bin)
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

/// The common scenario: guardian `ARGS` as uid 65534 in a fresh leaf below `cg`, run to its
/// end; what it did, and the leaf it reported.
fn run_in_leaf(ctx: &Ctx, cg: &TestCgroup, args: &[&str]) -> (Finished, PathBuf) {
    let mut g = start(ctx, Some(&cg.path), args);
    let leaf = leaf(&g);
    (g.finish(), leaf)
}

/// The common ending: every process tagged `n` is gone and the leaf was removed.
fn assert_tree_gone(n: &str, leaf: &Path) {
    assert!(tagged_sleeps(n).is_empty(), "the tree is gone: {:?}", tagged_sleeps(n));
    assert!(!leaf.exists(), "the leaf {} was removed", leaf.display());
}

/// `guardian sweep ARGS` as uid 65534: its exit code and stdout (stderr appended for messages).
fn sweep_as_nobody(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(guardian_bin())
        .arg("sweep")
        .args(args)
        .output()
        .expect("run guardian sweep");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

fn cgroup_kill(events: &[Value]) -> Option<&Value> {
    events.iter().find(|v| v["event"] == "signal" && v["target"] == "cgroup" && v["signal"] == "SIGKILL")
}

fn rel_of(mount: &Path, dir: &Path) -> String {
    format!("/{}", dir.strip_prefix(mount).expect("below the mount").display())
}

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

mod setup;
mod sweep;
mod teardown;
