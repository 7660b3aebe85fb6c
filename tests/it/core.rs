//! The seed's acceptance criteria (issue 2), one named test each, with guardian running
//! unprivileged (uid/gid 65534 when the suite runs as root).

use crate::harness::*;

/// Clean up a normal provider tree after cooperative exit: children, a subshell tree, a
/// double-forked orphan and a nested shell all get the stop signal, nothing needs SIGKILL,
/// and the 10 s grace period is not spent waiting for them.
#[test]
fn cooperative_exit_cleans_the_tree() {
    let ctx = Ctx::new("cooperative");
    ctx.fifo("go");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--grace", "10s"])
        .script(&format!(
            r#"{s} & echo $! >> pids
( {s} & echo $! >> pids; wait ) & echo $! >> pids
( {s} & echo $! >> pids ) &
sh -c '{s} & echo $! >> pids; wait' {tag} & echo $! >> pids
until read _ < go 2>/dev/null; do :; done
exit 0"#
        ))
        .spawn();
    let pids: Vec<i32> = wait_for("six descendants", || {
        let text = std::fs::read_to_string(ctx.path("pids")).ok()?;
        let v: Vec<i32> = text.lines().filter_map(|l| l.parse().ok()).collect();
        (v.len() == 6).then_some(v)
    });
    for &p in &pids {
        wait_for("descendant tagged and alive", || (alive(p) && cmdline(p).is_some()).then_some(()));
    }
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    for &p in &pids {
        assert!(!alive(p), "descendant {p} survived");
    }
    let ev = g.final_events();
    let rel = ev.last().unwrap();
    assert_eq!(rel["status"], 0);
    assert!(rel["signalled"].as_u64().unwrap() >= 4, "{rel}");
    assert_eq!(rel["killed"], 0, "cooperative descendants needed SIGKILL: {rel}");
    assert!(rel["teardown_ms"].as_f64().unwrap() < 9000.0, "cooperative teardown waited for the grace: {rel}");
    assert!(signalled_pids(&ev, "kill").is_empty());
}

/// Clean up a child that clears its environment, calls setsid, and outlives a fast-exiting
/// provider (the race the project exists for). Repeated, with cooperative and TERM-ignoring
/// children, because the provider exits before the child has even exec'd.
#[test]
fn setsid_env_clearing_child_of_fast_exiting_provider_is_cleaned() {
    for round in 0..6 {
        let ctx = Ctx::new("setsid");
        let s = ctx.sleep();
        let tag = ctx.tag();
        let ignore = if round % 2 == 1 { "trap '' TERM;" } else { "" };
        let mut g = ctx
            .guardian()
            .args(["--grace", "300ms"])
            .script(&format!(
                r#"env -i /usr/bin/setsid /bin/sh -c "{ignore} echo \$\$ > child; exec {s}" {tag} & exit 0"#
            ))
            .spawn();
        assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
        // The promise: when guardian exits, nothing of the tree is left, not even a zombie.
        ctx.assert_nothing_left();
        if let Some(pid) = ctx.read_line_file("child").and_then(|p| p.parse::<i32>().ok()) {
            assert!(stat(pid).is_none_or(|(s, ..)| s != b'Z'), "child {pid} left as a zombie");
        }
        let ev = g.final_events();
        let rel = ev.last().unwrap();
        assert!(rel["reaped"].as_u64().unwrap() >= 1, "the setsid child was never reaped by guardian: {ev:?}");
    }
}

/// Clean up the tree after abrupt driver termination: the driver (guardian's parent) is
/// SIGKILLed; guardian notices through its parent's pidfd and tears everything down.
#[test]
fn tree_is_cleaned_after_driver_sigkill() {
    let ctx = Ctx::new("driver");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut driver = ctx
        .guardian()
        .args(["--grace", "1s"])
        .wrapper([
            "sh".to_string(),
            "-c".into(),
            r#""$@" & echo $! > guardian.pid; wait"#.into(),
            format!("driver-{tag}"),
        ])
        .script(&format!(
            r#"sh -c 'trap "echo TERM >> term.log; exit 0" TERM; echo $$ > trapper; {s} & wait' {tag} &
setsid sh -c 'trap "" TERM; echo $$ > stubborn; exec {s}' {tag} &
{s} & echo started > ready
wait"#
        ))
        .spawn();
    let gpid = ctx.wait_pid_file("guardian.pid");
    ctx.wait_pid_file("stubborn");
    wait_for("provider ready", || ctx.read_line_file("ready"));
    // The TERM trap is installed before the driver dies.
    ctx.wait_pid_file("trapper");
    let _ = driver.child.kill();
    let _ = driver.wait();
    // guardian is no longer our child: follow it through its events and /proc.
    let rel = driver.wait_event_named("released");
    ctx.wait_tree_gone();
    assert!(!alive(gpid), "guardian still running");
    let ev = driver.final_events();
    let (stop_i, stop) = find(&ev, |e| e["event"] == "stopping").expect("stopping event");
    assert_eq!(stop["reason"], "parent-died");
    let (exit_i, _) = find(&ev, |e| e["event"] == "exit").unwrap();
    assert!(stop_i < exit_i);
    assert!(
        find(&ev, |e| e["event"] == "signal" && e["reason"] == "parent-died").is_some(),
        "no parent-died signal: {ev:?}"
    );
    assert_eq!(rel["status"], 143, "{rel}");
    assert!(rel["killed"].as_u64().unwrap() >= 1, "the TERM-ignoring setsid child must have been killed: {rel}");
    assert_eq!(ctx.read_line_file("term.log").as_deref(), Some("TERM"));
}

/// Keep concurrent provider trees isolated: two guardians of the same user, process group
/// and session; B's teardown (and a group-forwarded signal to B) never reach A's tree.
#[test]
fn concurrent_trees_stay_isolated() {
    let ctx_a = Ctx::new("isolated-a");
    let ctx_b = Ctx::new("isolated-b");
    let tree = |ctx: &Ctx| {
        let s = ctx.sleep();
        let tag = ctx.tag();
        format!(
            r#"for sig in HUP INT USR1 USR2 TERM; do trap "echo $sig >> provider.log" $sig; done
sh -c 'for sig in HUP INT USR1 USR2 TERM; do trap "echo $sig >> child.log" $sig; done; echo $$ > child; while :; do wait; done' {tag} &
( {s} & echo $! > grandchild ) &
{s} &
echo $$ > provider
until read _ < go 2>/dev/null; do :; done
exit 0"#
        )
    };
    ctx_a.fifo("go");
    ctx_b.fifo("go");
    let mut a = ctx_a.guardian().args(["--grace", "1s"]).script(&tree(&ctx_a)).spawn();
    let mut b = ctx_b.guardian().args(["--grace", "1s", "--forward-to", "group"]).script(&tree(&ctx_b)).spawn();
    let a_pids: Vec<i32> = ["provider", "child", "grandchild"].iter().map(|f| ctx_a.wait_pid_file(f)).collect();
    let b_child = ctx_b.wait_pid_file("child");
    ctx_b.wait_pid_file("grandchild");
    ctx_b.wait_pid_file("provider");
    // The sentinel, guardian, provider, child, grandchild, sleep: wait for the transient
    // subshell to go.
    let a_all = wait_for("A's tree to settle", || {
        let v = tagged_pids(&ctx_a.nonce);
        (v.len() == 6).then_some(v)
    });

    // A signal to B's group reaches B's group only.
    b.signal(libc::SIGUSR1);
    wait_for("USR1 in B's child", || ctx_b.read_line_file("child.log").filter(|l| l.contains("USR1")));
    // B's provider exits: B tears its tree down (child traps TERM and keeps running, so B
    // needs SIGKILL too) and releases.
    ctx_b.release(&ctx_b.path("go"));
    assert_eq!(b.wait_code(), 0, "stderr: {}", b.stderr());
    ctx_b.assert_nothing_left();
    assert!(!alive(b_child));
    let b_ev = b.final_events();
    assert!(b_ev.last().unwrap()["killed"].as_u64().unwrap() >= 1);

    // A is untouched: every process alive, nothing recorded.
    for &p in &a_all {
        assert!(alive(p), "A's process {p} died during B's teardown");
    }
    assert_eq!(ctx_a.read_line_file("provider.log"), None);
    assert_eq!(ctx_a.read_line_file("child.log"), None);
    let b_signalled: Vec<i32> = ["stop", "kill"].iter().flat_map(|r| signalled_pids(&b_ev, r)).collect();
    for p in &a_all {
        assert!(!b_signalled.contains(p), "B signalled A's process {p}");
    }

    // Now A: its provider exits, its tree goes, B's (gone) pids are not in A's events.
    ctx_a.release(&ctx_a.path("go"));
    assert_eq!(a.wait_code(), 0, "stderr: {}", a.stderr());
    ctx_a.assert_nothing_left();
    let a_ev = a.final_events();
    let a_signalled: Vec<i32> = ["stop", "kill"].iter().flat_map(|r| signalled_pids(&a_ev, r)).collect();
    assert!(a_signalled.contains(&a_pids[1]), "A's child not signalled: {a_ev:?}");
    assert!(!a_signalled.contains(&b_child));
}

/// Preserve exit-before-release ordering and bounded shutdown: a provider and a descendant
/// that both ignore SIGTERM; SIGTERM to guardian arms the stop, SIGKILL comes at the grace
/// deadline (not before), `exit` precedes `released`, which is last.
#[test]
fn exit_precedes_released_and_shutdown_is_bounded() {
    let ctx = Ctx::new("bounded");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .args(["--grace", "1s"])
        .script(&format!(r#"trap '' TERM; {s} & echo $! > child; echo $$ > provider; wait"#))
        .spawn();
    let child = ctx.wait_pid_file("child");
    ctx.wait_pid_file("provider");
    let sent = std::time::Instant::now();
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_end(), killed_by(libc::SIGKILL), "stderr: {}", g.stderr());
    let took = sent.elapsed();
    ctx.assert_nothing_left();
    assert!(!alive(child));
    let ev = g.final_events();
    let (si, stopping) = find(&ev, |e| e["event"] == "stopping").expect("stopping");
    assert_eq!(stopping["reason"], "signal");
    assert_eq!(stopping["grace_ms"], 1000);
    let (fi, _) = find(&ev, |e| e["event"] == "signal" && e["reason"] == "forwarded" && e["signal"] == "SIGTERM")
        .expect("TERM forwarded");
    let (ki, kill) = find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL" && e["target"] == "provider")
        .expect("provider SIGKILLed");
    let (ei, exit) = find(&ev, |e| e["event"] == "exit").unwrap();
    let ri = ev.len() - 1;
    assert!(fi < ki && si < ki && ki < ei && ei < ri, "order: {ev:#?}");
    assert_eq!(exit["signal"], "SIGKILL");
    assert_eq!(exit["code"], serde_json::Value::Null);
    assert!(ts(kill) - ts(stopping) >= 0.999, "SIGKILL before the grace ended: {ev:?}");
    assert!(signalled_pids(&ev, "kill").contains(&child), "descendant not SIGKILLed: {ev:?}");
    assert_eq!(ev[ri]["status"], 137);
    // Bounded: a generous sanity bound, not a benchmark.
    assert!(took.as_secs() < 20, "shutdown took {took:?}");
}
