//! Stop requests (plan §2, issue 14.1-2), kill now (plan §3), a real-time signal storm
//! (issue 9.8) and a provider stopped from outside (issue 10, without a terminal). guardian
//! runs as nobody throughout (in the PID-namespace test, root only makes the namespace).

use crate::harness::*;

mod fold;

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
    need_root!("unshare --pid --fork --mount-proc");
    need_program!("unshare", "util-linux");
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
perl -e '$SIG{{INT}} = "DEFAULT"; open(my $f, ">", "perl.ready"); close($f); sleep 1000' {tag} &
echo $$ > ready
while :; do wait; done"#
            ))
            .spawn();
        let spawned = g.wait_event_named("spawned");
        assert_eq!(spawned["mode"], "pid1", "{spawned}");
        ctx.wait_pid_file("ready");
        // The descendant hears INT only once perl reset it from the background job's SIG_IGN.
        wait_for("perl to restore SIGINT", || ctx.path("perl.ready").exists().then_some(()));
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
    ctx.wait_line("sig.log", "TERM");
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
    assert_eq!(g.wait_end(), killed_by(libc::SIGKILL), "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

/// Kill now: with a 60 s grace and a tree that ignores SIGTERM, a second SIGTERM (after the
/// fold window: `fold.rs`) ends the grace at once: `stopping` with reason `kill-request`,
/// SIGKILL to the tree, `released`.
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
    // A deliberate second request: later than the fold window after the first.
    std::thread::sleep(std::time::Duration::from_millis(400));
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_end(), killed_by(libc::SIGKILL), "stderr: {}", g.stderr());
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

/// Runs guardian's argv under `script(1)`: a new session on a pseudo-terminal, guardian's
/// group in the foreground, no job control (the `sh -c` that script starts has none, so
/// guardian's process group is orphaned).
const UNDER_SCRIPT: [&str; 4] = ["bash", "-c", r#"exec script -qec "${*@Q}" /dev/null"#, "bash"];

/// Fields of /proc/PID/stat after the command: (state, pgrp, tpgid).
fn job_fields(pid: i32) -> Option<(u8, i32, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some((rest.first()?.as_bytes()[0], rest.get(2)?.parse().ok()?, rest.get(5)?.parse().ok()?))
}

/// A provider that holds the terminal guardian handed it, stopped with SIGSTOP from
/// outside: not a job-control stop, so guardian does not stop itself (it reports `stopped`
/// and keeps supervising), and SIGTERM still ends the tree with the provider's own status.
#[test]
fn sigstop_from_outside_on_a_terminal_does_not_stop_guardian() {
    let ctx = Ctx::new("pty-sigstop");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .wrapper(UNDER_SCRIPT)
        .args(["--grace", "60s"])
        .script(&format!(r#"trap 'exit 9' TERM; {s} & echo $$ > ready; while :; do wait; done"#))
        .spawn();
    let spawned = g.wait_event_named("spawned");
    let guardian = spawned["guardian_pid"].as_i64().expect("guardian_pid") as i32;
    let provider = ctx.wait_pid_file("ready");
    let (_, pgrp, tpgid) = job_fields(provider).expect("provider's stat");
    assert_eq!(tpgid, pgrp, "guardian did not hand the terminal to the provider's group");
    assert!(signal_tagged(provider, &ctx.nonce, libc::SIGSTOP));
    let stopped = g.wait_event_named("stopped");
    assert_eq!(stopped["signal"], "SIGSTOP");
    assert_ne!(job_fields(guardian).map(|f| f.0), Some(b'T'), "guardian stopped itself");
    assert!(signal_tagged(guardian, &ctx.nonce, libc::SIGTERM));
    assert_eq!(g.wait_code(), 9, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

/// A provider that stops itself with SIGTSTP (as a full-screen program does on ^Z) on a
/// terminal without job control: guardian's own stop would be discarded by the kernel
/// (orphaned group), so guardian continues the provider instead of hanging with it.
#[test]
fn job_stop_without_job_control_continues_the_provider() {
    let ctx = Ctx::new("pty-tstp");
    let mut g = ctx
        .guardian()
        .wrapper(UNDER_SCRIPT)
        .script(r#"echo $$ > ready; kill -TSTP $$; echo resumed > resumed; exit 4"#)
        .spawn();
    ctx.wait_pid_file("ready");
    assert_eq!(g.wait_code(), 4, "stderr: {}", g.stderr());
    assert_eq!(ctx.read_line_file("resumed").as_deref(), Some("resumed"));
    ctx.assert_nothing_left();
    let ev = g.final_events();
    let stopped = find(&ev, |e| e["event"] == "stopped").expect("stopped").1;
    assert_eq!(stopped["signal"], "SIGTSTP");
}

/// A job-control stop stops the provider's whole process group (here the provider stops its
/// own group while it waits on a foreground child). A stop request then continues the whole
/// group after the stop signal: SIGCONT to the provider alone left it waiting on its stopped
/// child until the SIGKILL at the end of the 60 s grace.
#[test]
fn stop_request_continues_a_group_stopped_by_job_control() {
    let ctx = Ctx::new("group-stop");
    let nap = ctx.sleep_arg(0);
    let mut g = ctx
        .guardian()
        .args(["--grace", "60s"])
        .script(&format!(
            // The provider waits in `wait` (interruptible) rather than running foreground
            // commands: dash starts those with vfork, and a vfork parent cannot stop while its
            // stopped child has not exec'd, so the group's stop would never be complete.
            r#"trap 'exit 6' TERM
echo $$ > ready
{long} &
( sleep {nap}; kill -TSTP 0 ) &
while :; do wait; done"#,
            long = ctx.sleep()
        ))
        .spawn();
    let provider = ctx.wait_pid_file("ready");
    let stopped = g.wait_event_named("stopped");
    assert_eq!(stopped["signal"], "SIGTSTP");
    assert_eq!(stopped["pid"], provider);
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 6, "the provider's own status; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

/// SIGTERM and the stop signal are stop requests even when guardian's caller ignored them (a
/// background job of a non-interactive shell starts with SIGINT and SIGQUIT ignored, `trap ''
/// TERM` ignores TERM): guardian still hears them, and the provider gets the stop signal at its
/// default action, so a plain `sleep` provider dies of it (128+N) instead of lasting until the
/// SIGKILL (137).
#[test]
fn an_ignored_stop_signal_still_stops_and_reaches_the_provider() {
    for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGINT, "INT")] {
        let ctx = Ctx::new("ignored-stop-signal");
        let trap = format!("trap '' {name}; exec \"$@\"");
        let mut g = ctx
            .guardian()
            .wrapper(["sh", "-c", trap.as_str(), "ignoring-caller"])
            .args(["--grace", "60s", "--stop-signal", name])
            .script(&format!("echo $$ > ready; exec {}", ctx.sleep()))
            .spawn();
        ctx.wait_pid_file("ready");
        g.signal(sig);
        let stopping = g.wait_event_named("stopping");
        assert_eq!(stopping["reason"], "signal", "{name}");
        assert_eq!(g.wait_end(), killed_by(sig), "the provider died of the stop signal {name}; stderr: {}", g.stderr());
        ctx.assert_nothing_left();
    }
}

/// With `--forward-to group`, the owner's stop request reaches the provider's whole process
/// group (the stop signal, once per process): a provider that waits for its group's worker to
/// finish ends with its own status, and a member that survives the stop signal does not hear
/// it again when the rounds start at the provider's exit.
#[test]
fn forward_to_group_stop_request_reaches_the_group_once() {
    let ctx = Ctx::new("group-stop-request");
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--grace", "2s", "--forward-to", "group"])
        .script(&format!(
            r#"sh -c 'trap "echo worker >> term.log; exit 0" TERM; echo $$ > worker; while :; do sleep 0.05; done' worker-{tag} &
worker=$!
sh -c 'trap "echo survivor >> term.log" TERM; echo $$ > survivor; while :; do sleep 0.05; done' survivor-{tag} &
trap 'wait $worker; exit 7' TERM
echo $$ > ready
while :; do wait; done"#
        ))
        .spawn();
    let provider = ctx.wait_pid_file("ready");
    let worker = ctx.wait_pid_file("worker");
    let survivor = ctx.wait_pid_file("survivor");
    for p in [worker, survivor] {
        assert_eq!(stat(p).map(|s| s.1), Some(provider), "{p} is the provider's child");
    }
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 7, "the provider waited for its worker; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let log = std::fs::read_to_string(ctx.path("term.log")).unwrap_or_default();
    assert_eq!(log.lines().filter(|l| *l == "worker").count(), 1, "term.log: {log}");
    assert_eq!(
        log.lines().filter(|l| *l == "survivor").count(),
        1,
        "the stop signal once per process; term.log: {log}"
    );
}

/// A signal that arrives during guardian's start-up, before it reads signals from its signalfd
/// (held there by a test hook), is handled as once guardian runs, not by its default action:
/// guardian blocks every catchable signal as its first act, so it waits pending like one
/// pending at exec. SIGTERM is a stop request (`stopping`, the tree released); the signals whose
/// default action would end guardian (HUP, INT, QUIT, USR1, USR2, ALRM) are forwarded to the
/// provider once it runs. Without the block guardian died of each with no event at all. (The
/// kernel's own part of exec, before guardian's first instruction, stays a window only the
/// caller can close: by blocking the signal across the exec, or by waiting until guardian
/// blocks SIGTERM; the drivers wait.)
#[test]
fn a_signal_during_start_up_is_handled_as_once_guardian_runs() {
    need_hooks!();
    let signals = [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
    ];
    for (sig, name) in signals {
        let ctx = Ctx::new(&format!("start-up-{name}"));
        let pause = ctx.path("pause");
        std::fs::write(&pause, b"").expect("pause file");
        let mut g = ctx
            .guardian()
            .env("GUARDIAN_TEST_START_PAUSE_FILE", &pause)
            .script(&format!("echo started > started; exec {}", ctx.sleep()))
            .spawn();
        let reached = ctx.path("pause.reached");
        wait_for("guardian paused in its start-up", || reached.exists().then_some(()));
        g.signal(sig);
        std::fs::remove_file(&pause).expect("release the pause");
        let end = g.wait_end();
        let ev = g.final_events();
        if sig == libc::SIGTERM {
            let stopping = find(&ev, |e| e["event"] == "stopping").map(|(_, e)| e["reason"].clone());
            assert_eq!(stopping, Some(serde_json::json!("signal")), "{name}: ended {end:?}: {ev:#?}");
        } else {
            let forwarded = find(&ev, |e| e["event"] == "signal" && e["reason"] == "forwarded" && e["signal"] == name);
            assert!(forwarded.is_some(), "{name} was not forwarded: ended {end:?}: {ev:#?}");
        }
        ctx.assert_nothing_left();
    }
}
