//! Tests that need a private PID namespace (root only: skipped visibly otherwise, and a
//! failure as root when the namespace cannot be made): PID-1 mode, and the deterministic
//! PID-reuse test, which steers PID allocation with `ns_last_pid` while guardian is paused
//! between its /proc scan and its signalling (the `test-hooks` feature's
//! `GUARDIAN_TEST_PAUSE_FILE`: run in `make test`'s second pass).

use std::process::{Command, Stdio};

use crate::harness::*;

/// Skips without root or without PID namespaces in the kernel; as root, asserts that
/// `unshare` can make one.
macro_rules! need_pidns {
    () => {
        need_root!("create a PID namespace and steer ns_last_pid");
        if !std::path::Path::new("/proc/self/ns/pid").exists() {
            skip!("the kernel has no PID namespaces (/proc/self/ns/pid)");
        }
        need_program!("unshare", "util-linux");
        let st =
            Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).stderr(Stdio::null()).status();
        assert!(
            st.as_ref().is_ok_and(|s| s.success()),
            "`unshare --pid --fork --mount-proc true` failed as root ({st:?}): run the suite with CAP_SYS_ADMIN"
        );
    };
}

/// guardian as PID 1 of a fresh namespace (`unshare --pid --fork [--mount-proc]`), as nobody:
/// it reaps, stops the whole namespace with the stop signal (a trap records it), SIGKILLs
/// what ignores it after the grace, and exits with the provider's status.
fn pid1_mode(mount_proc: bool) {
    let ctx = Ctx::new(if mount_proc { "pid1-proc" } else { "pid1-noproc" });
    ctx.fifo("go");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut wrapper: Vec<&str> = vec!["unshare", "--pid", "--fork"];
    if mount_proc {
        wrapper.push("--mount-proc");
    }
    wrapper.extend(SETPRIV_NOBODY);
    let mut g = ctx
        .guardian()
        .privileged()
        .wrapper(wrapper)
        .args(["--grace", "1s"])
        .script(&format!(
            r#"sh -c 'trap "echo TERM >> term.log; exit 0" TERM; echo $$ > trapper; {s} & wait' {tag} &
setsid sh -c 'trap "" TERM; echo $$ > stubborn; exec {s}' {tag} &
( {s} & ) &
until read _ < go 2>/dev/null; do :; done
exit 5"#
        ))
        .spawn();
    let spawned = g.wait_event_named("spawned");
    assert_eq!(spawned["mode"], "pid1", "{spawned}");
    assert_eq!(spawned["guardian_pid"], 1);
    ctx.wait_pid_file("trapper");
    ctx.wait_pid_file("stubborn");
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 5, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let term = ctx.read_line_file("term.log").unwrap_or_default();
    assert!(term.starts_with("TERM"), "the trapping descendant never got SIGTERM: {term:?}");
    let ev = g.final_events();
    let stop = find(&ev, |e| e["event"] == "signal" && e["reason"] == "stop").expect("stop signal").1;
    assert_eq!(stop["target"], "namespace");
    let exit = find(&ev, |e| e["event"] == "exit").unwrap().1;
    let kill = find(&ev, |e| e["event"] == "signal" && e["reason"] == "kill").expect("kill signal").1;
    assert!(ts(kill) - ts(exit) >= 0.999, "SIGKILL before the grace ended: {ev:?}");
    assert_eq!(ev.last().unwrap()["status"], 5);
}

#[test]
fn pid1_mode_with_mount_proc_tears_down() {
    need_pidns!();
    pid1_mode(true);
}

#[test]
fn pid1_mode_without_mount_proc_tears_down() {
    need_pidns!();
    pid1_mode(false);
}

/// As PID 1, guardian exits 128+N for a provider killed by signal N (the kernel would ignore
/// a signal PID 1 sends itself), quietly; `unshare --fork` passes the code on.
#[test]
fn pid1_exits_128_plus_n_for_a_provider_killed_by_signal_n() {
    need_pidns!();
    for sig in [libc::SIGTERM, libc::SIGKILL, libc::SIGSEGV] {
        let ctx = Ctx::new("pid1-signal");
        let mut wrapper: Vec<&str> = vec!["unshare", "--pid", "--fork", "--mount-proc"];
        wrapper.extend(SETPRIV_NOBODY);
        let mut g =
            ctx.guardian().privileged().wrapper(wrapper).script(&format!("ulimit -c 0; kill -{sig} $$")).spawn();
        assert_eq!(g.wait_end(), End::Code(128 + sig), "signal {sig}; stderr: {}", g.stderr());
        assert!(!g.stderr().contains("could not end by signal"), "{}", g.stderr());
        let ev = g.final_events();
        assert_eq!(ev[0]["guardian_pid"], 1, "{ev:?}");
        assert_eq!(ev.last().unwrap()["status"], 128 + sig);
        ctx.assert_nothing_left();
    }
}

/// `NSpid:` of a host pid: its pid in every namespace, outermost first.
fn nspids(host_pid: i32) -> Option<Vec<i32>> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(line.split_whitespace().filter_map(|p| p.parse().ok()).collect())
}

/// The host pid of the tagged process whose innermost pid is `ns_pid`.
fn host_pid_of(nonce: &str, ns_pid: i32) -> Option<i32> {
    tagged_pids(nonce).into_iter().find(|&p| nspids(p).is_some_and(|v| v.len() > 1 && v.last() == Some(&ns_pid)))
}

/// Revalidate process identity before signalling and never target a reused PID.
///
/// Deterministic: inside a private PID namespace, guardian (nobody, not PID 1) scans its tree
/// and is paused (test hook) before signalling the descendants below its own children (those
/// are pinned and signalled first: D's parent ignores the stop signal, so it lives on to reap
/// D). Meanwhile the scanned descendant D exits and is reaped by its own parent, and
/// `ns_last_pid` is steered so that an *unrelated* process U (same uid, so guardian would be
/// permitted to signal it) gets D's pid. guardian resumes with D's stale entry: it must not
/// signal U, then or later.
#[test]
fn reused_pid_is_never_signalled() {
    need_hooks!();
    need_pidns!();
    let ctx = Ctx::new("pid-reuse");
    ctx.fifo("go");
    ctx.fifo("end");
    let pause = ctx.path("pause");
    std::fs::write(&pause, "").unwrap();
    let s = ctx.sleep();
    let tag = ctx.tag();
    // The namespace's init is a root shell that runs guardian as nobody and outlives it
    // until the test is done looking (the namespace dies with its init).
    let init = format!(
        r#"{} "$@"; echo $? > guardian.rc; until read _ < end 2>/dev/null; do :; done; exit 0"#,
        SETPRIV_NOBODY.join(" ")
    );
    let mut g = ctx
        .guardian()
        .privileged()
        .wrapper(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", init.as_str(), &format!("init-{tag}")])
        .env("GUARDIAN_TEST_PAUSE_FILE", &pause)
        .args(["--grace", "5s"])
        .script(&format!(
            r#"sh -c 'trap "" TERM; {s} & echo $! > victim; wait $!; echo reaped > victim-reaped; exec {s}' {tag} &
until read _ < go 2>/dev/null; do :; done
exit 0"#
        ))
        .spawn();
    let victim: i32 = ctx.wait_pid_file("victim");
    let victim_host = wait_for("victim's host pid", || host_pid_of(&ctx.nonce, victim));
    let spawned = g.wait_event_named("spawned");
    assert_eq!(spawned["mode"], "subreaper", "guardian must not be PID 1 here: {spawned}");

    // The provider exits; guardian scans (D is in the scan) and pauses before signalling.
    ctx.release(&ctx.path("go"));
    let paused = g.wait_event_named("test-pause");
    let scanned: Vec<i64> = paused["pids"].as_array().unwrap().iter().filter_map(|p| p.as_i64()).collect();
    assert!(scanned.contains(&(victim as i64)), "D ({victim}) not in the scan: {paused}");

    // D exits and its parent reaps it: the pid is free.
    assert!(signal_tagged(victim_host, &ctx.nonce, libc::SIGKILL));
    wait_for("D reaped by its parent", || ctx.read_line_file("victim-reaped"));
    wait_for("D's /proc entry gone", || stat(victim_host).is_none().then_some(()));

    // U, unrelated to guardian, takes D's pid: steer allocation inside the namespace.
    let init_host = wait_for("the namespace's init", || {
        tagged_pids(&ctx.nonce).into_iter().find(|&p| stat(p).is_some_and(|(_, ppid, _)| ppid == g.pid()))
    });
    let u_script = format!(
        r#"for sig in TERM HUP INT QUIT USR1 USR2 CONT ALRM; do trap "echo $sig >> u.log" $sig 2>/dev/null; done; echo $$ > u.pid; {s} & C=$!; echo $C > u.child; while kill -0 $C 2>/dev/null; do wait $C; done; echo child-gone >> u.log; exec {s}"#
    );
    let steer = format!(
        r#"echo {} > /proc/sys/kernel/ns_last_pid || exit 1
{} sh -c '{u_script}' u-{tag} &
echo $! > u.forked
wait"#,
        victim - 1,
        SETPRIV_NOBODY.join(" ")
    );
    let mut nsenter = Command::new("nsenter")
        .args(["--target", &init_host.to_string(), "--pid", "--", "sh", "-c", &steer, &format!("steer-{tag}")])
        .current_dir(&ctx.dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("nsenter");
    let u: i32 = ctx.wait_pid_file("u.pid");
    assert_eq!(u, victim, "PID steering failed: U got {u}, D had {victim} (something else forked in the namespace)");
    let u_host = wait_for("U's host pid", || host_pid_of(&ctx.nonce, u));
    // U's child C is a newcomer for guardian's next round whose parent pid is D's old pid: the
    // newcomer check must see that this parent is not the process it knew.
    let u_child: i32 = ctx.wait_pid_file("u.child");
    let u_child_host = wait_for("U's child's host pid", || host_pid_of(&ctx.nonce, u_child));
    assert_ne!(u_host, victim_host);

    // Resume guardian: it must discard D's stale entry, and never treat U as its own.
    std::fs::remove_file(&pause).unwrap();
    let rel = g.wait_event_named("released");
    wait_for("guardian's status", || ctx.read_line_file("guardian.rc"));
    assert_eq!(ctx.read_line_file("guardian.rc").as_deref(), Some("0"), "stderr: {}", g.stderr());
    assert!(alive(u_host), "the unrelated process that reused D's pid was killed");
    assert!(alive(u_child_host), "the child of the unrelated process was killed");
    assert_eq!(ctx.read_line_file("u.log"), None, "the unrelated process received a signal");
    let ev = g.final_events();
    for reason in ["stop", "kill"] {
        let hit = signalled_pids(&ev, reason);
        assert!(!hit.contains(&victim), "guardian signalled reused pid {victim}: {ev:?}");
        assert!(!hit.contains(&u_child), "guardian signalled U's child {u_child}: {ev:?}");
    }
    assert_eq!(rel["status"], 0);

    // Done: let the namespace go (its init exits, the kernel kills what is left in it).
    ctx.release(&ctx.path("end"));
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    let _ = nsenter.kill();
    let _ = nsenter.wait();
}
