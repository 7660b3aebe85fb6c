//! Real denial of each modern interface guardian relies on: a seccomp filter installed in
//! guardian's process before exec makes one syscall fail with ENOSYS or EPERM. For each,
//! guardian must keep every guarantee through its fallback (an escaped setsid child of a
//! fast-exiting provider is cleaned, TERM-ignoring descendants get SIGKILL, nested
//! descendants are peeled, exit status is right, forwarded signals arrive, parent death is
//! noticed) and say which path it took (`fallback` event, `-v` log); or, for signalfd, fail
//! at start with exit 125 and a one-line reason. guardian runs as uid 65534.

use crate::harness::*;

/// guardian with `-vv --grace 300ms`, running `sh -c SCRIPT`, with each of `deny` in force.
fn denied<'a>(ctx: &'a Ctx, deny: &[Deny], script: &str) -> Builder<'a> {
    let mut b = ctx.guardian().args(["-vv", "--grace", "300ms"]).script(script);
    for &(nr, errno) in deny {
        b = b.deny(nr, errno);
    }
    b
}

/// A fast-exiting provider whose setsid, environment-clearing child outlives it.
fn fast_exit(deny: &[Deny]) -> Finished {
    let ctx = Ctx::new("denial-fast-exit");
    let script = format!("setsid env -i {s} & sh -c '{s}; :' & exit 3", s = ctx.sleep());
    let f = denied(&ctx, deny, &script).spawn().finish();
    f.assert_released(3);
    ctx.assert_nothing_left();
    f
}

/// A tree that is fully up before the stop: an escaped child, a TERM-ignoring child (needs
/// SIGKILL), a nested grandchild, and the provider itself, stopped by a SIGTERM forwarded
/// from guardian.
fn forwarded_stop(deny: &[Deny]) -> Finished {
    let ctx = Ctx::new("denial-stop");
    let s = ctx.sleep();
    let script = format!("setsid env -i {s} & (trap '' TERM; {s}) & sh -c '{s}; :' & exec {s}");
    let mut g = denied(&ctx, deny, &script).spawn();
    let spawned = g.wait_event_named("spawned");
    if !deny.is_empty() {
        let status = std::fs::read_to_string(format!("/proc/{}/status", g.pid())).unwrap_or_default();
        assert!(status.contains("Seccomp:\t2"), "the filter is not in force: {status}");
    }
    ctx.wait_sleeps(4);
    assert!(ctx.sleeps().iter().any(|p| p.pid as i64 == spawned["pid"].as_i64().unwrap_or(0)));
    g.signal(libc::SIGTERM);
    let f = g.finish();
    f.assert_released(143);
    assert!(f.one("released")["killed"].as_u64().unwrap_or(0) >= 1, "the TERM-ignoring child needed SIGKILL: {f:#?}");
    ctx.assert_nothing_left();
    f
}

/// guardian's parent dies by SIGKILL: the tree is torn down anyway.
fn parent_death(deny: &[Deny]) {
    let ctx = Ctx::new("denial-parent");
    let s = ctx.sleep();
    // The outer shell is guardian's parent; it carries the tag too (in guardian's argv), so
    // the drop guard would find it.
    let mut parent = denied(&ctx, deny, &format!("setsid env -i {s} & exec {s}"))
        .wrapper(["sh", "-c", r#""$@" & wait"#, "sh"])
        .spawn();
    parent.wait_event_named("spawned");
    ctx.wait_sleeps(2);
    let _ = parent.child.kill();
    parent.wait();
    parent.wait_event("stopping (parent-died)", |e| e["event"] == "stopping" && e["reason"] == "parent-died");
    parent.wait_event_named("released");
    // `released` is written after ECHILD: nothing of the tree may remain.
    let left = ctx.sleeps();
    assert!(left.is_empty(), "left behind: {left:?}");
    ctx.wait_tree_gone();
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

/// `pwritev2` (the events pipe's `RWF_NOWAIT` writes) refused: the pipe is reopened
/// non-blocking through /proc, or (guardian runs as another user than the pipe's, so here)
/// written after poll(); every event still arrives.
#[test]
fn pwritev2_enosys() {
    check_interface(libc::SYS_pwritev2, libc::ENOSYS, "pwritev2");
}

#[test]
fn pwritev2_eperm() {
    check_interface(libc::SYS_pwritev2, libc::EPERM, "pwritev2");
}

/// The refusal is found at the first write, which can be the `error` of a start that failed:
/// its `fallback` events come before it, so `error` stays the last line.
#[test]
fn pwritev2_refused_at_a_failed_start_is_reported_before_the_error() {
    let ctx = Ctx::new("denial-pwritev2-error");
    let missing = ctx.path("missing-program");
    let f = ctx.guardian().args(["-v"]).deny(libc::SYS_pwritev2, libc::EPERM).command([&missing]).spawn().finish();
    assert_eq!(f.code, Some(127), "{f:#?}");
    let names: Vec<_> = f.events.iter().map(|e| e["event"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(names.last().map(String::as_str), Some("error"), "{names:?}");
    assert!(!f.fallbacks("pwritev2").is_empty(), "{f:#?}");
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
        let ctx = Ctx::new("denial-signalfd");
        let f = ctx.guardian().deny(libc::SYS_signalfd4, errno).command(["sh", "-c", &ctx.sleep()]).spawn().finish();
        assert_eq!(f.code, Some(125), "{f:#?}");
        let lines: Vec<&str> = f.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {f:#?}");
        assert!(lines[0].starts_with("guardian: signalfd() failed"), "{f:#?}");
        let err = f.one("error");
        assert_eq!(err["status"], 125);
        assert!(f.named("spawned").is_empty());
        ctx.assert_nothing_left();
    }
}
