//! Real denial of each modern interface guardian relies on: a seccomp filter installed in
//! guardian's process before exec makes one syscall fail with ENOSYS or EPERM. For each,
//! guardian must keep every guarantee through its fallback (an escaped setsid child of a
//! fast-exiting provider is cleaned, TERM-ignoring descendants get SIGKILL, nested
//! descendants are peeled, exit status is right, forwarded signals arrive, parent death is
//! noticed) and say which path it took (`fallback` event, `-v` log); or, for signalfd, fail
//! at start with exit 125 and a one-line reason. guardian runs as uid 65534.

mod hardening_support;

use hardening_support::*;

fn args(extra: &[&str], tail: &str) -> Vec<String> {
    let mut v: Vec<String> = ["-vv", "--events-fd", "3", "--grace", "300ms"].iter().map(|s| s.to_string()).collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v.extend(["--".to_string(), "sh".to_string(), "-c".to_string(), tail.to_string()]);
    v
}

fn with_denials(mut cmd: Cmd, deny: &[Deny]) -> Cmd {
    for &(nr, errno) in deny {
        cmd = cmd.deny(nr, errno);
    }
    cmd
}

/// A fast-exiting provider whose setsid, environment-clearing child outlives it.
fn fast_exit(deny: &[Deny]) -> Finished {
    let tag = Tag::new();
    let script = format!("setsid env -i {s} & sh -c '{s}; :' & exit 3", s = tag.sleep());
    let mut g = with_denials(guardian(&args(&[], &script)), deny).nobody().spawn();
    let f = g.finish();
    f.assert_released(3);
    tag.assert_gone();
    f
}

/// A tree that is fully up before the stop: an escaped child, a TERM-ignoring child (needs
/// SIGKILL), a nested grandchild, and the provider itself, stopped by a SIGTERM forwarded
/// from guardian.
fn forwarded_stop(deny: &[Deny]) -> Finished {
    let tag = Tag::new();
    let s = tag.sleep();
    let script = format!("setsid env -i {s} & (trap '' TERM; {s}) & sh -c '{s}; :' & exec {s}");
    let mut g = with_denials(guardian(&args(&[], &script)), deny).nobody().spawn();
    let spawned = g.wait_event("spawned");
    if !deny.is_empty() {
        let status = std::fs::read_to_string(format!("/proc/{}/status", g.pid)).unwrap_or_default();
        assert!(status.contains("Seccomp:\t2"), "the filter is not in force: {status}");
    }
    tag.wait_sleeps(4);
    assert!(tag.sleeps().iter().any(|p| p.pid as i64 == spawned["pid"].as_i64().unwrap_or(0)));
    g.signal(libc::SIGTERM);
    let f = g.finish();
    f.assert_released(143);
    assert!(f.one("released")["killed"].as_u64().unwrap_or(0) >= 1, "the TERM-ignoring child needed SIGKILL: {f:#?}");
    tag.assert_gone();
    f
}

/// guardian's parent dies by SIGKILL: the tree is torn down anyway.
fn parent_death(deny: &[Deny]) {
    let tag = Tag::new();
    let s = tag.sleep();
    let inner = format!("setsid env -i {s} & exec {s}");
    // The outer shell is guardian's parent; it carries the tag too, so the drop guard
    // would find it.
    let outer = format!("\"$G\" -vv --events-fd 3 --grace 300ms -- sh -c '{inner}' & wait; : {}", tag.id);
    let cmd = Cmd::new("sh").arg("-c").arg(outer).env("G", guardian_path());
    let mut parent = with_denials(cmd, deny).nobody().spawn();
    parent.wait_event("spawned");
    tag.wait_sleeps(2);
    parent.kill();
    parent.wait_event_where("stopping", |e| e["reason"] == "parent-died");
    parent.wait_event("released");
    // `released` is written after ECHILD: nothing of the tree may remain.
    let left = tag.sleeps();
    assert!(left.is_empty(), "left behind: {left:?}");
    tag.wait_gone();
}

fn check_interface(nr: libc::c_long, errno: i32, what: &str) {
    let deny = [(nr, errno)];
    let a = fast_exit(&deny);
    let b = forwarded_stop(&deny);
    parent_death(&deny);
    if what == "waitid" {
        // guardian never calls waitid (it reaps with waitpid/wait4): nothing to fall back from.
        assert!(a.named("fallback").is_empty() && b.named("fallback").is_empty(), "{a:#?}\n{b:#?}");
        return;
    }
    let f = &b;
    assert!(!f.fallbacks(what).is_empty(), "no fallback event for {what}: {f:#?}");
    for e in f.fallbacks(what) {
        let name = if errno == libc::ENOSYS { "ENOSYS" } else { "EPERM" };
        assert_eq!(e["errno"], name, "{e}");
    }
    assert!(f.stderr.contains(&format!("{what} refused")), "no log line for the {what} fallback: {}", f.stderr);
}

#[test]
fn pidfd_open_enosys() {
    check_interface(libc::SYS_pidfd_open, libc::ENOSYS, "pidfd_open");
}

#[test]
fn pidfd_open_eperm() {
    check_interface(libc::SYS_pidfd_open, libc::EPERM, "pidfd_open");
}

#[test]
fn pidfd_send_signal_enosys() {
    check_interface(libc::SYS_pidfd_send_signal, libc::ENOSYS, "pidfd_send_signal");
}

#[test]
fn pidfd_send_signal_eperm() {
    check_interface(libc::SYS_pidfd_send_signal, libc::EPERM, "pidfd_send_signal");
}

#[test]
fn clone3_enosys() {
    check_interface(libc::SYS_clone3, libc::ENOSYS, "clone3");
}

#[test]
fn clone3_eperm() {
    check_interface(libc::SYS_clone3, libc::EPERM, "clone3");
}

#[test]
fn waitid_enosys() {
    check_interface(libc::SYS_waitid, libc::ENOSYS, "waitid");
}

#[test]
fn waitid_eperm() {
    check_interface(libc::SYS_waitid, libc::EPERM, "waitid");
}

/// No pidfds at all and no clone3 (a pre-5.2 kernel, or a strict container profile): the
/// whole legacy path, SIGCHLD-driven waits, getppid() polling, kill() on unreaped children.
#[test]
fn no_pidfds_and_no_clone3() {
    let deny = [
        (libc::SYS_pidfd_open, libc::ENOSYS),
        (libc::SYS_pidfd_send_signal, libc::ENOSYS),
        (libc::SYS_clone3, libc::ENOSYS),
    ];
    fast_exit(&deny);
    let f = forwarded_stop(&deny);
    parent_death(&deny);
    assert!(!f.fallbacks("clone3").is_empty() && !f.fallbacks("pidfd_open").is_empty(), "{f:#?}");
    assert!(f.stderr.contains("pidfd false"), "the provider has no pidfd: {}", f.stderr);
}

/// signalfd is required: without it guardian fails before starting anything, with exit
/// 125, a one-line reason on stderr and an `error` event.
#[test]
fn signalfd_refused_fails_at_start() {
    for errno in [libc::ENOSYS, libc::EPERM] {
        let tag = Tag::new();
        let argv = ["--events-fd".to_string(), "3".into(), "--".into(), "sh".into(), "-c".into(), tag.sleep()];
        let mut g = guardian(&argv).deny(libc::SYS_signalfd4, errno).nobody().spawn();
        let f = g.finish();
        assert_eq!(f.code, Some(125), "{f:#?}");
        let lines: Vec<&str> = f.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {f:#?}");
        assert!(lines[0].starts_with("guardian: signalfd() failed"), "{f:#?}");
        let err = f.one("error");
        assert_eq!(err["status"], 125);
        assert!(f.named("spawned").is_empty());
        tag.assert_gone();
    }
}
