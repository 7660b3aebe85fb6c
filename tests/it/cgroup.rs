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
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let (opts, cmd) = args.split_at(split);
    let b = ctx.guardian().privileged().args(opts).command(cmd.iter().skip(1));
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
    assert!(name.starts_with(&format!("guardian-{}-", g.pid())), "leaf name carries the guardian pid: {name}");
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
    assert_eq!(f.code, Some(143), "stderr: {}", f.stderr);
    assert!(tagged_sleeps(n).is_empty(), "every tagged process is gone");
    assert!(!leaf.exists(), "the leaf was removed");
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

#[test]
fn sweep_removes_a_dead_guardians_leaf_and_keeps_a_live_ones() {
    let mount = need_delegation!();
    let cg = TestCgroup::new(&mount, true);
    let (ca, cb) = (Ctx::new("cg-a"), Ctx::new("cg-b"));
    let (na, nb) = (&ca.nonce, &cb.nonce);
    let mut a = start(
        &ca,
        Some(&cg.path),
        &["--cgroup", "auto", "--", "sh", "-c", &format!("trap '' TERM; sleep 1000.{na} & wait")],
    );
    let mut b = start(&cb, Some(&cg.path), &["--cgroup", "auto", "--", "sleep", &format!("1000.{nb}")]);
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
    assert_eq!(b.finish().code, Some(143), "stderr: {}", b.stderr());
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
    assert_eq!(b.finish().code, Some(143), "stderr: {}", b.stderr());
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
    assert_eq!(f.code, Some(137), "the provider ignored SIGTERM; stderr: {}", f.stderr);
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
