//! `guardian doctor`: runs the real binary and checks its report against this machine.
//! Every doctor run is tagged with a nonce in its environment (inherited by its probe
//! children), so the tests can prove through /proc that nothing it started outlives it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::harness::*;

/// Runs `guardian doctor ARGS`, asserts nothing it started survives it, returns its output.
fn doctor(args: &[&str]) -> Output {
    let ctx = Ctx::new("doctor");
    ctx.run_env_tagged(ctx.subcommand(&["doctor"]).args(args))
}

fn json_of(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("doctor --json printed invalid JSON ({e}): {text}"))
}

/// The exit status matches the `degraded` list: 0 when empty, 1 otherwise.
fn assert_status_matches(out: &Output, report: &Value) {
    let degraded = report["degraded"].as_array().expect("degraded is an array");
    let code = out.status.code().expect("doctor exited normally");
    // 2: guardian would refuse to start (no mode); 1: degraded; 0: every guarantee holds.
    let want = if report["mode"].is_null() {
        2
    } else if degraded.is_empty() {
        0
    } else {
        1
    };
    assert_eq!(code, want, "status vs mode and degraded: {report:#}");
    for p in degraded {
        for field in ["what", "problem", "fix"] {
            assert!(p[field].as_str().is_some_and(|s| !s.is_empty()), "problem without {field}: {p}");
        }
    }
}

/// The first cgroup2 mount point in our own mountinfo.
fn first_cgroup2_mount() -> Option<String> {
    mountinfo().into_iter().find(|m| m.fstype == "cgroup2").map(|m| m.point.display().to_string())
}

#[test]
fn json_report_matches_this_machine() {
    let out = doctor(&["--json"]);
    let r = json_of(&out);
    assert_status_matches(&out, &r);

    let uname = Command::new("uname").arg("-r").output().expect("uname -r");
    assert_eq!(r["kernel"].as_str(), Some(String::from_utf8_lossy(&uname.stdout).trim()));
    // Every interface below exists on the kernels guardian is tested on (>= 5.10), and was
    // exercised for real on a probe child.
    for check in ["subreaper", "signalfd", "clone3_pidfd", "pidfd_open", "pidfd_send_signal", "waitid_pidfd"] {
        assert_eq!(r["checks"][check]["ok"], Value::Bool(true), "{check}: {}", r["checks"][check]);
        assert!(r["checks"][check]["detail"].is_string());
    }
    assert_eq!(r["mode"].as_str(), Some("subreaper"));
    assert_eq!(r["cgroup_request"], Value::Null);

    // cgroup facts agree with what this test process sees (doctor runs in our cgroup).
    assert_eq!(r["cgroup"]["mount"].as_str().map(String::from), first_cgroup2_mount());
    let own = fs::read_to_string("/proc/self/cgroup").expect("read /proc/self/cgroup");
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).map(String::from);
    assert_eq!(r["cgroup"]["own"].as_str().map(String::from), own);
    assert!(r["cgroup"]["controllers"].is_array() || r["cgroup"]["controllers"].is_null());
    assert!(r["cgroup"]["delegated"].is_boolean());

    // /proc: ours, and the hidepid option as mountinfo has it.
    assert_eq!(r["proc"]["own_namespace"], Value::Bool(true));
    let children = Path::new("/proc/self/task").join(std::process::id().to_string()).join("children");
    assert_eq!(r["proc"]["children_file"], Value::Bool(children.exists()));
    assert_eq!(r["checks"]["proc_children_file"]["ok"], Value::Bool(children.exists()), "{r:#}");
    assert!(r["notes"].is_array());

    // The parent (this test) is in doctor's PID namespace: watched through a pidfd.
    assert_eq!(r["checks"]["parent_watch"]["ok"], Value::Bool(true), "{r:#}");
    // How a pidfd's pid is confirmed: PIDFD_GET_INFO (Linux 6.13+), else the fdinfo, which
    // then must work (a note, not a problem).
    match r["checks"]["pidfd_get_info"]["ok"].as_bool() {
        Some(true) => assert!(r["checks"]["pidfd_fdinfo"]["ok"].is_null(), "{r:#}"),
        Some(false) => {
            assert_eq!(r["checks"]["pidfd_fdinfo"]["ok"], Value::Bool(true), "{r:#}");
            assert!(notes_of(&r).iter().any(|n| n.contains("PIDFD_GET_INFO is unavailable")), "{r:#}");
        }
        None => panic!("PIDFD_GET_INFO was not tried: {r:#}"),
    }
    assert!(!problems_of(&r).contains(&"pidfd-identity".to_string()), "{r:#}");
}

fn notes_of(r: &Value) -> Vec<String> {
    r["notes"].as_array().map(|a| a.iter().filter_map(|n| n.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// The `what` of every problem in the report.
fn problems_of(r: &Value) -> Vec<String> {
    r["degraded"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["what"].as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// `guardian doctor --json` (as uid 65534 when root) with each of `deny` refused by seccomp
/// (`Builder::deny`), plus `env`: its report; asserts the exit status matches the report and
/// that nothing doctor started survives it.
fn doctor_denied(deny: &[Deny], env: &[(&str, &str)]) -> Value {
    let ctx = Ctx::new("doctor-denied");
    let stdout = ctx.path("doctor.json");
    let file = fs::File::create(&stdout).expect("create doctor.json");
    let mut b = ctx
        .guardian()
        .no_events()
        .args(["doctor", "--json"])
        .env("GUARDIAN_TEST_NONCE", &ctx.nonce)
        .stdout(file.into());
    for &(nr, errno) in deny {
        b = b.deny(nr, errno);
    }
    for (k, v) in env {
        b = b.env(*k, *v);
    }
    let f = b.spawn().finish();
    assert_eq!(ctx.env_tagged(), Vec::<i32>::new(), "doctor left a probe process running");
    let text = fs::read_to_string(&stdout).expect("read doctor.json");
    let r: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("doctor --json printed invalid JSON ({e}): {text}; stderr: {}", f.stderr));
    let degraded = !problems_of(&r).is_empty();
    // 2 where guardian would refuse to start (no mode), else 1 when degraded.
    let want = if r["mode"].is_null() { 2 } else { i32::from(degraded) };
    assert_eq!(f.code, Some(want), "status vs mode and degraded: {r:#}; stderr: {}", f.stderr);
    r
}

fn check<'a>(r: &'a Value, name: &str) -> &'a Value {
    let c = &r["checks"][name];
    assert!(c.is_object(), "no check {name}: {r:#}");
    c
}

fn name_of(errno: i32) -> &'static str {
    if errno == libc::ENOSYS { "ENOSYS" } else { "EPERM" }
}

/// Every refused interface shows up as a failed check with its errno, and as the problem or
/// note its fallback deserves (a problem when a guarantee weakens).
#[test]
fn refused_pidfd_open_is_a_problem_and_the_parent_watch_falls_back() {
    for errno in [libc::ENOSYS, libc::EPERM] {
        let r = doctor_denied(&[(libc::SYS_pidfd_open, errno)], &[]);
        let c = check(&r, "pidfd_open");
        assert_eq!((c["ok"].as_bool(), c["errno"].as_str()), (Some(false), Some(name_of(errno))), "{r:#}");
        assert!(problems_of(&r).contains(&"pidfd_open".to_string()), "{r:#}");
        // The parent watch takes the same fallback (getppid() polling), said once.
        let w = check(&r, "parent_watch");
        assert_eq!((w["ok"].as_bool(), w["errno"].as_str()), (Some(false), Some(name_of(errno))), "{r:#}");
        assert!(!problems_of(&r).contains(&"parent-watch".to_string()), "{r:#}");
        // clone3's pidfd still lets doctor ask which pid it names.
        assert!(check(&r, "pidfd_get_info")["ok"].is_boolean(), "{r:#}");
    }
}

#[test]
fn refused_pidfd_send_signal_is_a_problem() {
    let r = doctor_denied(&[(libc::SYS_pidfd_send_signal, libc::EPERM)], &[]);
    let c = check(&r, "pidfd_send_signal");
    assert_eq!((c["ok"].as_bool(), c["errno"].as_str()), (Some(false), Some("EPERM")), "{r:#}");
    assert!(problems_of(&r).contains(&"pidfd_send_signal".to_string()), "{r:#}");
}

#[test]
fn refused_clone3_is_a_note_and_the_fork_child_is_probed() {
    let r = doctor_denied(&[(libc::SYS_clone3, libc::ENOSYS)], &[]);
    let c = check(&r, "clone3_pidfd");
    assert_eq!((c["ok"].as_bool(), c["errno"].as_str()), (Some(false), Some("ENOSYS")), "{r:#}");
    assert!(notes_of(&r).iter().any(|n| n.starts_with("clone3 is refused")), "{r:#}");
    assert!(!problems_of(&r).iter().any(|p| p.starts_with("clone3")), "{r:#}");
    // The forked child was probed all the same (pidfd_open on it, the children-file walk).
    assert_eq!(check(&r, "pidfd_open")["ok"], Value::Bool(true), "{r:#}");
    let walked = check(&r, "proc_children_file");
    if walked["ok"] == Value::Bool(true) {
        assert!(walked["detail"].as_str().is_some_and(|d| d.contains("found the probe child")), "{r:#}");
    }
}

#[test]
fn refused_signalfd_is_a_problem() {
    let r = doctor_denied(&[(libc::SYS_signalfd4, libc::EPERM)], &[]);
    let c = check(&r, "signalfd");
    assert_eq!((c["ok"].as_bool(), c["errno"].as_str()), (Some(false), Some("EPERM")), "{r:#}");
    assert!(problems_of(&r).contains(&"signalfd".to_string()), "{r:#}");
}

/// Without `PIDFD_GET_INFO` (an ioctl: seccomp refuses every ioctl here, as a kernel before
/// 6.13 refuses this one), guardian reads a pidfd's pid from its fdinfo: probed for real, a
/// note and not a problem.
#[test]
fn refused_pidfd_get_info_falls_back_to_fdinfo_as_a_note() {
    let r = doctor_denied(&[(libc::SYS_ioctl, libc::EPERM)], &[]);
    let c = check(&r, "pidfd_get_info");
    assert_eq!((c["ok"].as_bool(), c["errno"].as_str()), (Some(false), Some("EPERM")), "{r:#}");
    let f = check(&r, "pidfd_fdinfo");
    assert_eq!(f["ok"], Value::Bool(true), "{r:#}");
    assert!(f["detail"].as_str().is_some_and(|d| d.contains("/proc/self/fdinfo/")), "{r:#}");
    assert!(notes_of(&r).iter().any(|n| n.contains("PIDFD_GET_INFO is unavailable") && n.contains("fdinfo")), "{r:#}");
    assert!(!problems_of(&r).contains(&"pidfd-identity".to_string()), "{r:#}");
}

/// Without pidfds at all there is nothing to ask `PIDFD_GET_INFO` about: not tried, and no
/// identity problem on top of the pidfd_open one.
#[test]
fn without_pidfds_the_identity_check_is_untested() {
    let r = doctor_denied(&[(libc::SYS_pidfd_open, libc::ENOSYS), (libc::SYS_clone3, libc::ENOSYS)], &[]);
    assert!(check(&r, "pidfd_get_info")["ok"].is_null(), "{r:#}");
    assert!(check(&r, "pidfd_fdinfo")["ok"].is_null(), "{r:#}");
    assert!(problems_of(&r).contains(&"pidfd_open".to_string()), "{r:#}");
    assert!(!problems_of(&r).contains(&"pidfd-identity".to_string()), "{r:#}");
}

/// Where guardian would list all of /proc instead of walking the children files (a kernel
/// without CONFIG_PROC_CHILDREN; here forced by the test hook guardian's rounds obey), doctor
/// says so in a note: the same descendants are found, so no guarantee weakens.
#[test]
fn a_full_proc_listing_is_reported_as_a_note() {
    need_hooks!();
    let r = doctor_denied(&[], &[("GUARDIAN_TEST_FULL_SCAN", "1")]);
    assert_eq!(check(&r, "proc_children_file")["ok"], Value::Bool(false), "{r:#}");
    assert_eq!(r["proc"]["children_file"], Value::Bool(false), "{r:#}");
    assert!(notes_of(&r).iter().any(|n| n.contains("each round lists all of /proc instead")), "{r:#}");
    assert!(!problems_of(&r).iter().any(|p| p.contains("children")), "{r:#}");
}

#[test]
fn human_output_agrees_with_exit_status() {
    let out = doctor(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("kernel "), "{text}");
    assert!(text.contains("mode                subreaper"), "{text}");
    match out.status.code() {
        Some(0) => assert!(text.contains("every guarantee holds in this mode"), "{text}"),
        Some(1) => assert!(text.contains("degraded:") && text.contains("fix:"), "{text}"),
        Some(2) => assert!(text.contains("would refuse to start") || text.contains("would not start"), "{text}"),
        other => panic!("unexpected status {other:?}: {text}"),
    }
}

/// Issue 22 item 8b: where guardian would refuse to start (exit 125), doctor says so with its
/// own status 2, never 1 ("would run degraded"): a missing path, a regular file, a directory
/// outside the cgroup2 mount.
#[test]
fn unusable_cgroup_path_is_reported_as_refusing_to_start() {
    let ctx = Ctx::new("doctor-unusable-path");
    let file = ctx.path("not-a-cgroup");
    std::fs::write(&file, "x").expect("write a regular file");
    let missing = format!("/nonexistent-{}", random_digits(12));
    let dir = std::env::temp_dir().to_string_lossy().into_owned();
    for path in [missing.as_str(), file.to_str().expect("utf-8 path"), dir.as_str()] {
        let out = doctor(&["--json", "--cgroup", path]);
        let r = json_of(&out);
        assert_status_matches(&out, &r);
        assert_eq!(out.status.code(), Some(2), "{path}: {r:#}");
        assert_eq!(r["mode"], Value::Null, "guardian would not start with --cgroup {path}");
        assert_eq!(r["cgroup_request"].as_str(), Some(path));
        assert!(r["degraded"].as_array().is_some_and(|d| d.iter().any(|p| p["what"] == "cgroup")), "{r:#}");
        // guardian itself agrees: it refuses to start, and starts nothing.
        let g = std::process::Command::new(guardian_bin())
            .args(["--cgroup", path, "--", "true"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run guardian");
        assert_eq!(g.status.code(), Some(125), "{path}: {}", String::from_utf8_lossy(&g.stderr));
        let text = doctor(&["--cgroup", path]);
        assert_eq!(text.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&text.stdout).contains("would refuse to start"), "{path}");
    }
}

#[test]
fn cgroup_auto_probes_a_leaf_and_removes_it() {
    let out = doctor(&["--json", "--cgroup", "auto"]);
    let r = json_of(&out);
    assert_status_matches(&out, &r);
    let usable = r["cgroup"]["auto_usable"].as_bool().expect("auto_usable");
    if !usable {
        assert_eq!(r["mode"].as_str(), Some("subreaper"));
        assert!(r["degraded"].as_array().is_some_and(|d| d.iter().any(|p| p["what"] == "cgroup")));
        skip!("the leaf checks: no delegated cgroup here ({})", r["checks"]["cgroup_delegated"]);
    }
    assert_eq!(r["mode"].as_str(), Some("cgroup"));
    // The probe started a child directly in a temporary leaf and checked where it landed.
    assert_eq!(r["checks"]["clone_into_cgroup"]["ok"], Value::Bool(true), "{r:#}");
    let own_dir = PathBuf::from(r["cgroup"]["own_dir"].as_str().expect("own_dir"));
    let pid = r["pid"].as_i64().expect("pid");
    assert!(!own_dir.join(format!("guardian-doctor-{pid}")).exists(), "doctor left its probe leaf behind");
    // The probe child started as guardian starts the provider: in a cgroup namespace of its
    // own exactly when doctor (as this test) has CAP_SYS_ADMIN.
    let ns = &r["checks"]["cgroup_namespace"];
    assert_eq!(ns["ok"].as_bool(), Some(cap_sys_admin()), "{r:#}");
    assert_eq!(r["cgroup"]["namespace"].as_bool(), Some(cap_sys_admin()), "{r:#}");
    // Same answer when the setting comes from the environment, as for guardian itself.
    let ctx = Ctx::new("doctor-env");
    let out = ctx.run_env_tagged(ctx.subcommand(&["doctor", "--json"]).env("GUARDIAN_CGROUP", "auto"));
    assert_eq!(json_of(&out)["mode"].as_str(), Some("cgroup"));
}

#[test]
fn foreign_proc_is_a_problem_and_own_proc_is_not() {
    need_root!("make a PID namespace");
    need_program!("unshare", "util-linux");
    let ctx = Ctx::new("doctor-pidns");
    // sh is PID 1 of the new namespace, doctor is PID 2 and sees the host's /proc.
    let out = ctx.run_env_tagged(
        Command::new("unshare")
            .args(["--pid", "--fork", "--", "sh", "-c", "\"$0\" doctor --json; exit $?"])
            .arg(guardian_bin()),
    );
    let r = json_of(&out);
    assert_status_matches(&out, &r);
    assert_eq!(r["proc"]["own_namespace"], Value::Bool(false));
    assert!(r["degraded"].as_array().is_some_and(|d| d.iter().any(|p| p["what"] == "proc")), "{r:#}");

    let out = ctx.run_env_tagged(
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--", "sh", "-c", "\"$0\" doctor --json; exit $?"])
            .arg(guardian_bin()),
    );
    let r = json_of(&out);
    assert_status_matches(&out, &r);
    assert_eq!(r["proc"]["own_namespace"], Value::Bool(true));
    assert!(r["degraded"].as_array().is_some_and(|d| !d.iter().any(|p| p["what"] == "proc")), "{r:#}");
}

#[test]
fn usage_errors_exit_125() {
    let out = doctor(&["--bogus"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("guardian: "));
}

/// CAP_SYS_ADMIN in this process's effective set (doctor inherits it).
fn cap_sys_admin() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|c| c & (1 << 21) != 0)
    })
}

/// A reader that goes away (`guardian doctor | head -1`) does not turn doctor's answer into a
/// panic: the status is still 0 or 1.
#[test]
fn a_closed_stdout_is_not_a_crash() {
    for args in [&["doctor", "--json"][..], &["doctor"][..]] {
        let mut child = std::process::Command::new(guardian_bin())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn guardian doctor");
        drop(child.stdout.take());
        let status = child.wait().expect("wait for doctor");
        assert!(matches!(status.code(), Some(0 | 1)), "{args:?}: {status:?}");
    }
}

/// Issue 29.6: doctor exits 2 exactly where guardian would exit 125. A refused subreaper
/// (prctl) or signalfd: guardian refuses to start, and doctor says so with 2, not 1.
#[test]
fn doctor_exits_2_where_guardian_exits_125() {
    for nr in [libc::SYS_prctl, libc::SYS_signalfd4] {
        let r = doctor_denied(&[(nr, libc::EPERM)], &[]);
        assert!(r["mode"].is_null(), "syscall {nr}: guardian would refuse to start: {r:#}");
        let ctx = Ctx::new("doctor-vs-guardian");
        let mut g = ctx.guardian().no_events().deny(nr, libc::EPERM).command(ctx.sh("touch ran")).spawn();
        assert_eq!(g.wait_code(), 125, "syscall {nr}: {}", g.stderr());
        assert!(!ctx.path("ran").exists());
    }
}

/// Issue 29.5: doctor probes the sentinel's `clone(CLONE_VM)` for real, and under a filter that
/// refuses it says what guardian does: a forked sentinel, every guarantee kept (a note).
#[test]
fn a_refused_clone_vm_is_probed_and_the_forked_sentinel_named() {
    use std::os::unix::process::CommandExt;
    let ctx = Ctx::new("doctor-clone-vm");
    let program = crate::sentinel::refuse_clone_vm();
    let mut cmd = ctx.subcommand(&["doctor", "--json"]);
    cmd.env_remove("GUARDIAN_NO_SENTINEL");
    // SAFETY: prctl calls only, on memory prepared before the fork.
    unsafe { cmd.pre_exec(move || install_seccomp(&program)) };
    let out = ctx.run_env_tagged(&mut cmd);
    let r = json_of(&out);
    assert_status_matches(&out, &r);
    let c = check(&r, "clone_vm");
    assert_eq!((c["ok"].as_bool(), c["errno"].as_str()), (Some(false), Some("EPERM")), "{r:#}");
    assert!(notes_of(&r).iter().any(|n| n.starts_with("sentinel: on, as a fork")), "{r:#}");
    // Without the filter the probe holds.
    let out = doctor(&["--json"]);
    assert_eq!(check(&json_of(&out), "clone_vm")["ok"], Value::Bool(true), "{:#}", json_of(&out));
}
