//! Stop requests (plan §2, issue 14.1-2), kill now (plan §3), a real-time signal storm
//! (issue 9.8) and a provider stopped from outside (issue 10, without a terminal). guardian
//! runs as nobody throughout (in the PID-namespace test, root only makes the namespace).

mod common;

use std::process::{Command, Stdio};

use common::*;

/// Waits until `file` (written line by line by a trap) contains `line`.
fn wait_line(ctx: &Ctx, file: &str, line: &str) {
    wait_for(&format!("{line} in {file}"), || {
        let text = std::fs::read_to_string(ctx.path(file)).ok()?;
        text.lines().any(|l| l == line).then_some(())
    });
}

/// `NSpid:` of a host pid: its pid in every namespace, outermost first.
fn nspids(host_pid: i32) -> Option<Vec<i32>> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(line.split_whitespace().filter_map(|p| p.parse().ok()).collect())
}

/// The provider's state letter in /proc/PID/stat.
fn state(pid: i32) -> Option<u8> {
    stat(pid).map(|(s, _, _)| s)
}

/// A provider that shuts down gracefully only on SIGINT (as servers whose image says
/// `STOPSIGNAL SIGINT`), run under `GUARDIAN_STOP_SIGNAL=INT` as PID 1 of a PID namespace:
/// SIGTERM (what `podman kill -s TERM` sends) and SIGINT (what `podman stop` sends for that
/// image) are both stop requests, and the provider gets SIGINT, so guardian ends with the
/// provider's own status long before the 60 s grace.
#[test]
fn term_and_the_stop_signal_both_stop_a_pid1_provider_with_its_own_status() {
    if !is_root()
        || !Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    {
        eprintln!("SKIPPED term_and_the_stop_signal_both_stop...: needs root and unshare(1) for a PID namespace");
        return;
    }
    for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGINT, "INT")] {
        let ctx = Ctx::new("stop-signal-int");
        // A background job of sh ignores SIGINT; perl restores it, so the descendant can
        // hear the stop signal at the provider's exit.
        let tag = ctx.tag();
        let mut g = ctx
            .guardian()
            .privileged()
            .wrapper([
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .env("GUARDIAN_STOP_SIGNAL", "INT")
            .args(["--grace", "60s"])
            .script(&format!(
                r#"trap 'echo INT >> sig.log; exit 7' INT
trap 'echo TERM >> sig.log' TERM
perl -e '$SIG{{INT}} = "DEFAULT"; sleep 1000' {tag} &
echo $$ > ready
while :; do wait; done"#
            ))
            .spawn();
        let spawned = g.wait_event_named("spawned");
        assert_eq!(spawned["mode"], "pid1", "{spawned}");
        ctx.wait_pid_file("ready");
        let host = wait_for("guardian's host pid", || {
            tagged_pids(&ctx.nonce)
                .into_iter()
                .find(|&p| nspids(p).is_some_and(|v| v.len() > 1 && v.last() == Some(&1)))
        });
        assert!(signal_tagged(host, &ctx.nonce, sig), "could not send SIG{name} to guardian");
        assert_eq!(g.wait_code(), 7, "SIG{name}: the provider's own status; stderr: {}", g.stderr());
        ctx.assert_nothing_left();
        let log = std::fs::read_to_string(ctx.path("sig.log")).unwrap_or_default();
        assert_eq!(log, "INT\n", "SIG{name}: the provider hears the stop signal, once, and nothing else");
        let ev = g.final_events();
        assert_eq!(find(&ev, |e| e["event"] == "stopping").expect("stopping").1["reason"], "signal");
        let sent = find(&ev, |e| e["event"] == "signal" && e["target"] == "provider").expect("signal to provider").1;
        assert_eq!(sent["signal"], "SIGINT", "SIG{name}: {ev:#?}");
        assert!(find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL").is_none(), "{ev:#?}");
    }
}

/// A provider stopped with SIGSTOP hears the stop request: the stop signal, then SIGCONT, so
/// it exits with its own status instead of being SIGKILLed at the deadline (137). While it is
/// stopped guardian reports it (`stopped`) and does not stop itself.
#[test]
fn stopped_provider_gets_the_stop_signal_and_sigcont() {
    let ctx = Ctx::new("stopped-provider");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .args(["--grace", "60s"])
        .script(&format!(
            r#"trap 'echo TERM >> sig.log; exit 9' TERM
{s} &
echo $$ > ready
while :; do wait; done"#
        ))
        .spawn();
    let provider = ctx.wait_pid_file("ready");
    assert!(signal_tagged(provider, &ctx.nonce, libc::SIGSTOP));
    let stopped = g.wait_event_named("stopped");
    assert_eq!(stopped["signal"], "SIGSTOP");
    assert_eq!(stopped["pid"], provider);
    assert_eq!(state(provider), Some(b'T'));
    // guardian neither stops itself nor hangs: it still answers a stop request.
    assert_ne!(state(g.pid()), Some(b'T'), "guardian stopped itself without a terminal hand-off");
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 9, "the provider's own status, not 137; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    wait_line(&ctx, "sig.log", "TERM");
    let ev = g.final_events();
    assert!(find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL" && e["target"] == "provider").is_none());
}

/// A provider stopped from outside and continued from outside: `stopped`, then `continued`,
/// and guardian keeps supervising (SIGTERM still ends it; the grace still bounds it).
#[test]
fn provider_stopped_and_continued_from_outside_is_reported() {
    let ctx = Ctx::new("stop-cont");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .args(["--grace", "1s"])
        .script(&format!(r#"trap '' TERM; {s} & echo $$ > ready; while :; do wait; done"#))
        .spawn();
    let provider = ctx.wait_pid_file("ready");
    assert!(signal_tagged(provider, &ctx.nonce, libc::SIGSTOP));
    g.wait_event_named("stopped");
    assert!(signal_tagged(provider, &ctx.nonce, libc::SIGCONT));
    g.wait_event_named("continued");
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 137, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

/// Kill now: with a 60 s grace and a tree that ignores SIGTERM, a second SIGTERM ends the
/// grace at once: `stopping` with reason `kill-request`, SIGKILL to the tree, `released`.
#[test]
fn second_stop_request_kills_the_tree_now() {
    let ctx = Ctx::new("kill-now");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .args(["--grace", "60s"])
        .script(&format!(
            r#"trap '' TERM
sh -c 'trap "" TERM; echo $$ > child; exec {s}' {tag} &
echo $$ > ready
while :; do wait; done"#,
            tag = ctx.tag()
        ))
        .spawn();
    ctx.wait_pid_file("ready");
    let child = ctx.wait_pid_file("child");
    g.signal(libc::SIGTERM);
    let first = g.wait_event("stopping (signal)", |e| e["event"] == "stopping");
    assert_eq!(first["reason"], "signal");
    assert_eq!(first["grace_ms"], 60000);
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 137, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    assert!(!alive(child));
    let ev = g.final_events();
    let kill_request =
        find(&ev, |e| e["event"] == "stopping" && e["reason"] == "kill-request").expect("kill-request").1;
    assert_eq!(kill_request["grace_ms"], 0);
    let kill = find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL" && e["target"] == "provider");
    assert!(kill.is_some_and(|(_, k)| ts(k) >= ts(kill_request)), "{ev:#?}");
    assert!(signalled_pids(&ev, "kill").contains(&child), "descendant not SIGKILLed: {ev:#?}");
}

/// Issue 9 item 8: descendants flood guardian with queued real-time signals. guardian reads
/// them in bounded batches and serves its deadline in between: the TERM-ignoring descendant
/// is SIGKILLed when the 1 s grace ends and guardian releases (within the harness's generous
/// deadline; no speed is asserted).
#[test]
fn realtime_signal_storm_cannot_delay_the_sigkill() {
    let ctx = Ctx::new("rt-storm");
    ctx.fifo("go");
    let s = ctx.sleep();
    let tag = ctx.tag();
    // Each flooder waits until the provider has exited (it is then reparented to guardian,
    // the subreaper), then queues real-time signals at guardian as fast as it can.
    let flood = r#"$SIG{TERM}="IGNORE"; my $p0 = getppid(); open(my $f, ">>", "flooders"); print $f "$$\n"; close $f;
select(undef, undef, undef, 0.005) while getppid() == $p0;
my $g = getppid(); my $n = 0; while (1) { kill(35 + ($n++ % 20), $g); }"#;
    let mut g = ctx
        .guardian()
        .args(["--grace", "1s"])
        .script(&format!(
            r#"for i in 1 2 3 4; do perl -e '{flood}' {tag} & done
sh -c 'trap "" TERM; echo $$ > stubborn; exec {s}' {tag} &
until [ "$(wc -l < flooders 2>/dev/null)" -ge 4 ]; do sleep 0.01; done
echo $$ > ready
until read _ < go 2>/dev/null; do :; done
exit 3"#
        ))
        .spawn();
    ctx.wait_pid_file("ready");
    let stubborn = ctx.wait_pid_file("stubborn");
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 3, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    let killed = signalled_pids(&ev, "kill");
    assert!(killed.contains(&stubborn), "the TERM-ignoring descendant was not SIGKILLed: {ev:#?}");
    let flooders: Vec<i32> = std::fs::read_to_string(ctx.path("flooders"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(flooders.len(), 4);
    assert!(flooders.iter().all(|p| killed.contains(p)), "flooders {flooders:?} not all SIGKILLed: {killed:?}");
}
