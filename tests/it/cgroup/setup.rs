//! Where guardian starts the provider, or why it refuses: `auto`'s fallback to the subreaper,
//! the one-line errors for an unusable path (exit 125), doctor's agreement with the mode guardian
//! runs in, and the cgroup namespace a privileged guardian gives the provider (with and without
//! nsdelegate, and at the root of one).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::harness::*;

use super::*;

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
