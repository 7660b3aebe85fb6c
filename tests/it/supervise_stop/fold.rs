//! One intent is one stop request (issue 29.1), and the kill request (`--kill-signal`). A stop
//! request that reaches both of guardian's processes (the sentinel and guardian proper), or
//! reaches guardian twice from one sender (coreutils `timeout`: the pid, then the group), is
//! one request: the provider keeps its grace. A deliberate second request, after the fold
//! window, still kills at once; so does the kill request, with no stop signal at all.

use std::time::{Duration, Instant};

use crate::harness::*;

/// The fold window (`supervise::state::classify::FOLD_WINDOW`), and a margin beyond it for a
/// request that must count as a second one.
const FOLD_WINDOW: Duration = Duration::from_millis(250);
const PAST_THE_WINDOW: Duration = Duration::from_millis(400);

/// A provider that cleans up for 0.5 s when it hears SIGTERM, writes `cleaned`, exits 0 (as
/// a server with a shutdown hook). perl, so that no child of its own is signalled meanwhile.
fn cleaning_provider(ctx: &Ctx) -> Vec<String> {
    let script = r#"$SIG{TERM} = sub { select(undef, undef, undef, 0.5); open(my $f, ">", "cleaned"); print $f "done\n"; close $f; exit 0 };
open(my $r, ">", "ready.tmp"); print $r "$$\n"; close $r; rename("ready.tmp", "ready");
sleep 1 while 1;"#;
    vec!["perl".into(), "-e".into(), script.into(), ctx.tag()]
}

/// The grace held: the provider cleaned up and exited 0, one `stopping` (a stop request),
/// no kill request, no SIGKILL.
fn assert_grace_kept(ctx: &Ctx, ev: &[Value], what: &str) {
    assert_eq!(ctx.read_line_file("cleaned").as_deref(), Some("done"), "{what}: the provider lost its grace: {ev:#?}");
    let stopping: Vec<&Value> = ev.iter().filter(|e| e["event"] == "stopping").collect();
    assert_eq!(stopping.len(), 1, "{what}: one stop request: {ev:#?}");
    assert!(find(ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL").is_none(), "{what}: {ev:#?}");
    let released = find(ev, |e| e["event"] == "released").expect("released").1;
    assert_eq!(released["status"], 0, "{what}: {ev:#?}");
}

/// systemd's default `KillMode=control-group`: `systemctl stop` sends SIGTERM to every process
/// of the unit, the sentinel and guardian proper included, a few milliseconds apart (either
/// order). guardian proper hears it directly and through the sentinel, from one sender: one
/// request, and the provider's 0.5 s cleanup completes. (Before the fold: 6 of 6 runs read a
/// second request and SIGKILLed the provider about 1 ms in.)
#[test]
fn a_stop_that_reaches_the_sentinel_and_guardian_proper_is_one_request() {
    for (sentinel_first, gap_ms) in [(true, 5), (false, 5), (true, 100)] {
        let ctx = Ctx::new("fold-control-group");
        let mut g = ctx.guardian().args(["--grace", "60s"]).command(cleaning_provider(&ctx)).spawn();
        ctx.wait_pid_file("ready");
        let (sentinel, proper) = (g.pid(), g.inner_pid());
        assert_ne!(sentinel, proper, "guardian runs behind a sentinel here");
        let (first, second) = if sentinel_first { (sentinel, proper) } else { (proper, sentinel) };
        assert!(signal_tagged(first, &ctx.nonce, libc::SIGTERM));
        std::thread::sleep(Duration::from_millis(gap_ms));
        assert!(signal_tagged(second, &ctx.nonce, libc::SIGTERM));
        assert_eq!(g.wait_end(), End::Code(0), "stderr: {}", g.stderr());
        ctx.assert_nothing_left();
        assert_grace_kept(&ctx, &g.final_events(), &format!("sentinel first {sentinel_first}, {gap_ms} ms"));
    }
}

/// coreutils `timeout` sends its signal to guardian's pid and then to its own process group
/// (guardian's too), from one pid: one request, with or without the sentinel. `timeout` is
/// made to fire by SIGALRM (what its own timer sends), once the provider is ready. The kernel
/// merges the two deliveries when guardian reads neither before the second comes (most runs),
/// so the same pair is also sent from one shell 30 ms apart, which no merge hides. (Before the
/// fold: 16 of 40 runs with `--no-sentinel` lost the grace as they came, 5 of 5 with the gap.)
#[test]
fn coreutils_timeouts_pid_then_group_signal_is_one_request() {
    need_program!("timeout", "coreutils");
    need_program!("setsid", "util-linux");
    for no_sentinel in [false, true] {
        let ctx = Ctx::new("fold-timeout");
        let extra: &[&str] = if no_sentinel { &["--no-sentinel"] } else { &[] };
        let mut g = ctx
            .guardian()
            .wrapper(["timeout", "--preserve-status", "-s", "TERM", "1000"])
            .args(["--grace", "60s"])
            .args(extra.iter().copied())
            .command(cleaning_provider(&ctx))
            .spawn();
        ctx.wait_pid_file("ready");
        g.wait_event_named("spawned");
        g.signal(libc::SIGALRM);
        assert_eq!(g.wait_end(), End::Code(0), "no sentinel {no_sentinel}: stderr: {}", g.stderr());
        ctx.assert_nothing_left();
        assert_grace_kept(&ctx, &g.final_events(), &format!("timeout, no sentinel {no_sentinel}"));

        // The same pair from one shell (its builtin kill), 30 ms apart: the pid, then the
        // group (the shell leads it, through setsid, and only traps TERM).
        let ctx = Ctx::new("fold-pid-then-group");
        let go = ctx.fifo("go");
        let sender = r#"trap : TERM
"$@" & child=$!
read -r _ < go
kill -TERM $child
sleep 0.03
kill -TERM 0
while kill -0 $child 2>/dev/null; do wait $child; done"#;
        let mut g = ctx
            .guardian()
            .wrapper(["setsid", "bash", "-c", sender, "sender"])
            .args(["--grace", "60s"])
            .args(extra.iter().copied())
            .command(cleaning_provider(&ctx))
            .spawn();
        ctx.wait_pid_file("ready");
        g.wait_event_named("spawned");
        ctx.release(&go);
        g.wait();
        ctx.assert_nothing_left();
        assert_grace_kept(&ctx, &g.final_events(), &format!("pid then group 30 ms apart, no sentinel {no_sentinel}"));
    }
}

/// An outer guardian's teardown (here: its parent, the sentinel the test started, SIGKILLed)
/// signals an inner guardian's two processes: its provider (the inner sentinel) with the stop
/// signal, and every descendant (inner guardian proper among them) in its round, all from one
/// pid. The inner guardian reads one request: its provider cleans up and the inner guardian
/// reports a stop without a kill. (Before the fold: 5 of 5 lost the grace.)
#[test]
fn an_outer_guardians_round_over_an_inner_guardian_is_one_request() {
    let ctx = Ctx::new("fold-nested");
    let inner_events = ctx.path("inner.jsonl");
    let mut inner: Vec<String> = vec![
        guardian_bin().display().to_string(),
        "--grace".into(),
        "60s".into(),
        "--events-file".into(),
        inner_events.display().to_string(),
        "--".into(),
    ];
    inner.extend(cleaning_provider(&ctx));
    let mut g = ctx.guardian().args(["--grace", "30s"]).command(inner).spawn();
    ctx.wait_pid_file("ready");
    g.wait_event_named("spawned");
    // The outer guardian's parent dies: its teardown starts (reason parent-died).
    g.signal(libc::SIGKILL);
    g.wait();
    // The events stream ends when outer guardian proper closes it on its way out; with its
    // sentinel killed nobody waits on guardian proper, so its own exit may follow a moment
    // later (everything it guarded was reaped before `released`).
    ctx.wait_tree_gone();
    let outer = g.events();
    let stopping = find(&outer, |e| e["event"] == "stopping").expect("outer stopping").1;
    assert_eq!(stopping["reason"], "parent-died", "{outer:#?}");
    let text = std::fs::read_to_string(&inner_events).expect("inner events");
    let ev = parse_events(&text);
    assert_grace_kept(&ctx, &ev, "inner guardian");
    assert!(find(&ev, |e| e["event"] == "stopping" && e["reason"] == "kill-request").is_none(), "{ev:#?}");
}

/// A deliberate second `kill -TERM` by the same sender, after the fold window, still ends the
/// grace at once (the provider ignores SIGTERM; the grace is 60 s).
#[test]
fn a_second_request_after_the_window_still_kills_at_once() {
    let ctx = Ctx::new("fold-second");
    let mut g = ctx
        .guardian()
        .args(["--grace", "60s"])
        .script(&format!("trap '' TERM; echo $$ > ready; exec {}", ctx.sleep()))
        .spawn();
    ctx.wait_pid_file("ready");
    g.wait_event_named("spawned");
    g.signal(libc::SIGTERM);
    let first = Instant::now();
    assert_eq!(g.wait_event_named("stopping")["reason"], "signal");
    // Within the window the same sender's delivery is the same request...
    if first.elapsed() < FOLD_WINDOW / 2 {
        g.signal(libc::SIGTERM);
    }
    // ...after it, a second one.
    std::thread::sleep(PAST_THE_WINDOW.saturating_sub(first.elapsed()));
    let second = Instant::now();
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_end(), killed_by(libc::SIGKILL), "stderr: {}", g.stderr());
    assert!(second.elapsed() < Duration::from_secs(30), "killed at once, not at the 60 s deadline");
    ctx.assert_nothing_left();
    let ev = g.final_events();
    let stops: Vec<&Value> = ev.iter().filter(|e| e["event"] == "stopping").collect();
    assert_eq!(stops.len(), 2, "{ev:#?}");
    assert_eq!(stops[1]["reason"], "kill-request");
}

/// `--kill-signal` (here `GUARDIAN_KILL_SIGNAL=RTMAX`, as the drivers start guardian): that
/// signal, to the pid the host started (the sentinel forwards it) or to a guardian without a
/// sentinel, also when the caller ignored it, SIGKILLs the provider and its tree at once: the
/// provider hears no SIGTERM,
/// guardian dies of SIGKILL as the provider did, nothing is left, and the variable is not in
/// the provider's environment (a nested guardian does not inherit it).
#[test]
fn the_kill_signal_kills_the_whole_tree_at_once_without_a_stop_signal() {
    let rtmax = libc::SIGRTMAX();
    // Also when the caller ignored the kill signal: it is handled all the same, as SIGTERM is.
    let ignoring = format!("trap '' {rtmax}; exec \"$@\"");
    for (no_sentinel, ignored) in [(false, false), (true, false), (false, true)] {
        let ctx = Ctx::new("kill-signal");
        let extra: &[&str] = if no_sentinel { &["--no-sentinel"] } else { &[] };
        let wrapper: &[&str] = if ignored { &["bash", "-c", &ignoring, "ignoring"] } else { &[] };
        let mut g = ctx
            .guardian()
            .wrapper(wrapper.iter().copied())
            .env("GUARDIAN_KILL_SIGNAL", "RTMAX")
            .args(["--grace", "60s"])
            .args(extra.iter().copied())
            .script(&format!(
                r#"trap 'echo TERM >> sig.log' TERM
env | grep '^GUARDIAN_KILL_SIGNAL=' > env.txt
sh -c 'trap "echo TERM >> sig.log" TERM; echo $$ > child; while :; do sleep 1; done' {tag} &
echo $$ > ready
while :; do wait; done"#,
                tag = ctx.tag()
            ))
            .spawn();
        ctx.wait_pid_file("ready");
        let child = ctx.wait_pid_file("child");
        g.signal(rtmax);
        assert_eq!(g.wait_end(), killed_by(libc::SIGKILL), "no sentinel {no_sentinel}: stderr: {}", g.stderr());
        ctx.assert_nothing_left();
        assert!(!alive(child));
        assert_eq!(std::fs::read_to_string(ctx.path("sig.log")).unwrap_or_default(), "", "a SIGTERM was heard");
        assert_eq!(std::fs::read_to_string(ctx.path("env.txt")).unwrap_or_default(), "", "inherited the variable");
        let ev = g.final_events();
        let stopping: Vec<&Value> = ev.iter().filter(|e| e["event"] == "stopping").collect();
        assert_eq!(stopping.len(), 1, "{ev:#?}");
        assert_eq!((&stopping[0]["reason"], &stopping[0]["grace_ms"]), (&"kill-request".into(), &0.into()));
        assert!(find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGTERM").is_none(), "{ev:#?}");
        assert!(signalled_pids(&ev, "kill").contains(&child), "{ev:#?}");
        assert_eq!(find(&ev, |e| e["event"] == "released").expect("released").1["status"], 128 + libc::SIGKILL);
    }
}

/// A kill signal that is also a stop request, or one that cannot be received, is refused
/// before anything starts: exit 125, one line naming the fix.
#[test]
fn a_kill_signal_that_is_a_stop_request_or_uncatchable_is_refused() {
    let ctx = Ctx::new("kill-signal-refused");
    for (args, says) in [
        (&["--kill-signal", "TERM"][..], "RTMAX"),
        (&["--stop-signal", "INT", "--kill-signal", "INT"][..], "stop signal"),
        (&["--kill-signal", "KILL"][..], "--kill-signal RTMAX"),
        (&["--kill-signal", "STOP"][..], "RTMAX for --kill-signal"),
    ] {
        let marker = ctx.path("started");
        let out = std::process::Command::new(guardian_bin())
            .args(args)
            .args(["--", "touch"])
            .arg(&marker)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run guardian");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains("kill") && err.contains(says), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
}
