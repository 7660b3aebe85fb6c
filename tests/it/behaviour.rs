//! guardian's contract beyond the seed criteria: exit codes, stdout, signal forwarding,
//! grace handling, hard trees (stopped, fork storms, PID hoppers), reaping, fd hygiene,
//! `--wait-descendants` and `--forward-to group`. guardian runs unprivileged throughout.

use std::fs::File;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use crate::harness::*;

const WAIT_GO: &str = "until read _ < go 2>/dev/null; do :; done";

#[test]
fn exit_code_zero_and_n_pass_through() {
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("exit 255", 255)] {
        let ctx = Ctx::new("exit-code");
        let mut g = ctx.guardian().script(script).spawn();
        assert_eq!(g.wait_code(), code, "{script}; stderr: {}", g.stderr());
        let ev = g.final_events();
        let exit = find(&ev, |e| e["event"] == "exit").unwrap().1;
        assert_eq!(exit["code"], code);
        assert_eq!(exit["signal"], serde_json::Value::Null);
        assert_eq!(ev.last().unwrap()["status"], code);
        ctx.assert_nothing_left();
    }
}

/// A provider killed by signal N: guardian (not PID 1) dies of N itself, as sudo and coreutils
/// `timeout` do (a shell's `$?` stays 128+N), with the events saying N and `released.status`
/// 128+N. Core-dumping signals leave no core of guardian, although its core limit is
/// unlimited and `core_pattern` would write one into its working directory.
#[test]
fn provider_killed_by_signal_kills_guardian_with_it() {
    for sig in
        [libc::SIGTERM, libc::SIGKILL, libc::SIGINT, libc::SIGHUP, libc::SIGSEGV, libc::SIGABRT, libc::SIGQUIT, 40]
    {
        let ctx = Ctx::new("exit-signal");
        let mut g = ctx
            .guardian()
            .rlimit(libc::RLIMIT_CORE as i32, libc::RLIM_INFINITY)
            .script(&format!("ulimit -c 0; kill -{sig} $$"))
            .spawn();
        let st = g.wait();
        assert_eq!(End::of(st), killed_by(sig), "signal {sig}; stderr: {}", g.stderr());
        assert_eq!(End::of(st).shell_status(), 128 + sig);
        assert!(!st.core_dumped(), "guardian dumped core on signal {sig}");
        let cores: Vec<_> = std::fs::read_dir(&ctx.dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("core"))
            .collect();
        assert!(cores.is_empty(), "core files after signal {sig}: {cores:?}");
        assert!(!g.stderr().contains("could not end by signal"), "{}", g.stderr());
        let ev = g.final_events();
        let exit = find(&ev, |e| e["event"] == "exit").unwrap().1;
        assert!(exit["signal"].as_str().is_some_and(|n| n.starts_with("SIG")), "{exit}");
        assert_eq!(exit["code"], serde_json::Value::Null);
        assert_eq!(ev.last().unwrap()["status"], 128 + sig, "released.status stays 128+N");
    }
}

/// A provider that exits 128+N by itself is an exit, not a death by N.
#[test]
fn provider_exiting_128_plus_n_is_an_exit() {
    let ctx = Ctx::new("exit-143");
    let mut g = ctx.guardian().script("exit 143").spawn();
    assert_eq!(g.wait_end(), End::Code(143), "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

#[test]
fn timeout_stops_the_tree_and_exits_124() {
    let ctx = Ctx::new("timeout");
    let s = ctx.sleep();
    let mut g =
        ctx.guardian().args(["--timeout", "300ms", "--grace", "5s"]).script(&format!("{s} & {s}; exit 0")).spawn();
    assert_eq!(g.wait_code(), 124, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    assert_eq!(find(&ev, |e| e["event"] == "stopping").unwrap().1["reason"], "timeout");
    assert!(find(&ev, |e| e["event"] == "signal" && e["reason"] == "timeout").is_some(), "{ev:?}");
    let rel = ev.last().unwrap();
    assert_eq!(rel["status"], 124);
    assert_eq!(rel["killed"], 0, "cooperative tree needed SIGKILL: {rel}");
}

/// guardian's own failures: one `guardian:` line on stderr, exit 125, nothing started.
#[test]
fn bad_invocations_exit_125_and_start_nothing() {
    let cases: &[&[&str]] = &[
        &["--bogus-option"],
        &["--grace", "soon"],
        &["--grace", "-1s"],
        &["--timeout", "1x"],
        &["--stop-signal", "NOPE"],
        &["--stop-signal", "0"],
        &["--forward-to", "everyone"],
        &["--events-fd", "9"],
        &["--events-fd", "-3"],
    ];
    for args in cases {
        let ctx = Ctx::new("bad-option");
        let s = ctx.sleep_arg(1000);
        let mut g = ctx.guardian().no_events().args(args.iter()).command(["sleep", s.as_str()]).spawn();
        assert_eq!(g.wait_code(), 125, "{args:?}; stderr: {}", g.stderr());
        let err = g.stderr();
        assert_eq!(err.lines().count(), 1, "{args:?}: expected one line, got {err:?}");
        assert!(err.starts_with("guardian:"), "{args:?}: {err:?}");
        ctx.assert_nothing_left();
    }
}

#[test]
fn command_not_executable_exits_126() {
    let ctx = Ctx::new("not-exec");
    let path = ctx.path(&format!("not-executable-{}", ctx.tag()));
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    let mut g = ctx.guardian().command([path]).spawn();
    assert_eq!(g.wait_code(), 126, "stderr: {}", g.stderr());
    assert_eq!(g.stderr().lines().count(), 1, "{}", g.stderr());
    let ev = g.events();
    let last = ev.last().expect("an error event");
    assert_eq!(last["event"], "error");
    assert_eq!(last["status"], 126);
    assert!(find(&ev, |e| e["event"] == "released" || e["event"] == "spawned").is_none(), "{ev:?}");
}

#[test]
fn command_not_found_exits_127() {
    let ctx = Ctx::new("not-found");
    for cmd in [format!("no-such-command-{}", ctx.tag()), format!("/nonexistent/{}", ctx.tag())] {
        let mut g = ctx.guardian().command([cmd.as_str()]).spawn();
        assert_eq!(g.wait_code(), 127, "{cmd}; stderr: {}", g.stderr());
        assert_eq!(g.stderr().lines().count(), 1, "{}", g.stderr());
        let ev = g.events();
        let last = ev.last().expect("an error event");
        assert_eq!(last["event"], "error");
        assert_eq!(last["status"], 127);
    }
}

#[test]
fn stdout_passes_through_intact() {
    let ctx = Ctx::new("stdout");
    let seq = ctx.tagged_program("seq");
    let mut g =
        ctx.guardian().stdout(Stdio::piped()).command([seq.as_os_str(), "1".as_ref(), "200000".as_ref()]).spawn();
    let mut out = Vec::new();
    g.child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    let expected: String = (1..=200_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(out.len(), expected.len());
    assert!(out == expected.as_bytes(), "stdout differs");
    g.final_events();
}

/// Every catchable signal guardian receives reaches the provider, one at a time.
#[test]
fn each_forwarded_signal_arrives() {
    let ctx = Ctx::new("forward");
    let s = ctx.sleep();
    let sigs = ["HUP", "INT", "QUIT", "USR1", "USR2", "WINCH", "CONT", "TSTP", "ALRM"];
    let mut g = ctx
        .guardian()
        .script(&format!(
            r#"for s in {}; do trap "echo $s >> sig.log" $s; done
trap 'echo TERM >> sig.log; exit 0' TERM
{s} &
echo $$ > ready
while :; do wait; done"#,
            sigs.join(" ")
        ))
        .spawn();
    let provider = ctx.wait_pid_file("ready");
    for name in sigs {
        let num = match name {
            "HUP" => libc::SIGHUP,
            "INT" => libc::SIGINT,
            "QUIT" => libc::SIGQUIT,
            "USR1" => libc::SIGUSR1,
            "USR2" => libc::SIGUSR2,
            "WINCH" => libc::SIGWINCH,
            "CONT" => libc::SIGCONT,
            "TSTP" => libc::SIGTSTP,
            "ALRM" => libc::SIGALRM,
            _ => unreachable!(),
        };
        g.signal(num);
        ctx.wait_line("sig.log", name);
        assert!(alive(provider), "provider died of SIG{name}");
    }
    assert!(find(&g.events(), |e| e["event"] == "stopping").is_none(), "a non-TERM signal armed a stop");
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    for name in sigs.iter().chain(&["TERM"]) {
        let sig = format!("SIG{name}");
        assert!(
            find(&ev, |e| e["event"] == "signal"
                && e["reason"] == "forwarded"
                && e["signal"] == sig.as_str()
                && e["target"] == "provider")
            .is_some(),
            "no forwarded {sig} event"
        );
    }
}

/// HUP, INT and USR1 are only forwarded (the provider keeps running); SIGTERM also arms a
/// bounded stop: a provider that survives it is SIGKILLed once the grace period is over.
#[test]
fn sigterm_arms_a_bounded_stop_while_other_signals_only_forward() {
    let ctx = Ctx::new("term-stop");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .args(["--grace", "1s"])
        .script(&format!(
            r#"for s in HUP INT USR1 TERM; do trap "echo $s >> sig.log" $s; done
{s} &
echo $$ > ready
while :; do wait; done"#
        ))
        .spawn();
    let provider = ctx.wait_pid_file("ready");
    for (name, num) in [("HUP", libc::SIGHUP), ("INT", libc::SIGINT), ("USR1", libc::SIGUSR1)] {
        g.signal(num);
        ctx.wait_line("sig.log", name);
    }
    assert!(alive(provider));
    assert!(find(&g.events(), |e| e["event"] == "stopping").is_none());
    g.signal(libc::SIGTERM);
    ctx.wait_line("sig.log", "TERM");
    assert_eq!(g.wait_end(), killed_by(libc::SIGKILL), "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    let stopping = find(&ev, |e| e["event"] == "stopping").unwrap().1;
    assert_eq!(stopping["reason"], "signal");
    let kill = find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL" && e["target"] == "provider")
        .expect("provider SIGKILLed")
        .1;
    assert_eq!(kill["reason"], "kill");
    assert!(ts(kill) - ts(stopping) >= 0.999, "SIGKILL before the grace ended: {ev:?}");
    assert_eq!(find(&ev, |e| e["event"] == "exit").unwrap().1["signal"], "SIGKILL");
}

/// A descendant that ignores SIGTERM gets it at the provider's exit and SIGKILL only when
/// the grace period is over.
#[test]
fn sigterm_ignoring_descendant_is_killed_after_grace_not_before() {
    let ctx = Ctx::new("ignore-term");
    ctx.fifo("go");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--grace", "1500ms"])
        .script(&format!(r#"sh -c "trap '' TERM; echo \$\$ > stubborn; exec {s}" {tag} & {WAIT_GO}; exit 3"#))
        .spawn();
    let stubborn = ctx.wait_pid_file("stubborn");
    wait_for("stubborn exec'd", || cmdline(stubborn).filter(|c| c.starts_with(b"sleep")));
    ctx.release(&ctx.path("go"));
    let stop = g.wait_event("stop signal", |e| e["event"] == "signal" && e["reason"] == "stop");
    assert!(stop["pids"].as_array().unwrap().iter().any(|p| p == stubborn), "{stop}");
    assert_eq!(stop["signal"], "SIGTERM");
    // Inside the grace period it still runs (it ignores TERM); SIGKILL has not come.
    let exit = g.wait_event_named("exit");
    // Dead here only if the SIGKILL event was already written (alive first, events second).
    if !alive(stubborn) {
        assert!(g.events().iter().any(|e| e["signal"] == "SIGKILL"), "killed before SIGKILL was sent");
    }
    assert_eq!(g.wait_code(), 3, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    let (_, kill) = find(&ev, |e| e["event"] == "signal" && e["reason"] == "kill").expect("a kill event");
    assert!(kill["pids"].as_array().unwrap().iter().any(|p| p == stubborn));
    assert!(ts(kill) - ts(&exit) >= 1.499, "SIGKILL {:.3}s after exit, before the 1.5s grace", ts(kill) - ts(&exit));
    let rel = ev.last().unwrap();
    assert_eq!(rel["killed"], 1, "{rel}");
    assert_eq!(rel["status"], 3);
}

/// Stopped descendants are continued so they can act on the stop signal.
#[test]
fn stopped_descendants_are_cleaned() {
    let ctx = Ctx::new("stopped");
    ctx.fifo("go");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--grace", "10s"])
        .script(&format!(
            r#"sh -c 'trap "echo TERM >> term.log; exit 0" TERM; echo $$ > trapper; {s} & wait' {tag} &
{s} & echo $! > sleeper
{WAIT_GO}; exit 0"#
        ))
        .spawn();
    let trapper = ctx.wait_pid_file("trapper");
    let sleeper = ctx.wait_pid_file("sleeper");
    for p in [trapper, sleeper] {
        assert!(signal_tagged(p, &ctx.nonce, libc::SIGSTOP));
        wait_for("stopped", || (stat(p)?.0 == b'T').then_some(()));
    }
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    // The stopped shell ran its TERM trap: it was continued after the stop signal.
    assert_eq!(ctx.read_line_file("term.log").as_deref(), Some("TERM"));
    let rel = g.final_events().pop().unwrap();
    assert_eq!(rel["killed"], 0, "stopped descendants needed SIGKILL: {rel}");
    assert!(rel["teardown_ms"].as_f64().unwrap() < 9000.0, "{rel}");
}

/// Two forkers that ignore SIGTERM keep starting TERM-ignoring children while the provider
/// exits; guardian converges: releases, and nothing of the tree is left.
#[test]
fn fork_storm_converges() {
    fork_storm(Discovery::Walk);
}

/// The same storm, found by listing all of /proc (kernels without the `children` files).
#[test]
fn fork_storm_converges_listing_all_of_proc() {
    need_hooks!();
    fork_storm(Discovery::Listing);
}

/// How the guardian under test finds descendants: the `children` files (where the kernel has
/// them), or a listing of all of /proc (forced through the test-hooks feature, so the tests
/// that use it start with `need_hooks!()`).
#[derive(Clone, Copy, PartialEq)]
enum Discovery {
    Walk,
    Listing,
}

fn with_discovery(b: Builder<'_>, d: Discovery) -> Builder<'_> {
    let b = b.arg("-vv");
    if d == Discovery::Listing { b.env("GUARDIAN_TEST_FULL_SCAN", "1") } else { b }
}

fn assert_discovery(stderr: &str, d: Discovery) {
    if d == Discovery::Listing {
        assert!(stderr.contains("found by listing all of /proc"), "stderr: {stderr}");
    }
}

fn fork_storm(discovery: Discovery) {
    let ctx = Ctx::new("storm");
    let sleep = ctx.tagged_program("sleep");
    let tag = ctx.tag();
    ctx.fifo("go");
    std::fs::write(
        ctx.path("storm.sh"),
        format!(
            "trap '' TERM\necho started >> started\ni=0\nwhile [ $i -lt 300 ]; do {} 1000 & i=$((i+1)); done\nwait\n",
            sleep.display()
        ),
    )
    .unwrap();
    let mut g = with_discovery(ctx.guardian(), discovery)
        .args(["--grace", "500ms"])
        .script(&format!(r#"sh storm.sh {tag} & sh storm.sh {tag} & {WAIT_GO}; exit 0"#))
        .spawn();
    wait_for("both forkers started", || {
        let n = std::fs::read_to_string(ctx.path("started")).ok()?.lines().count();
        (n == 2).then_some(())
    });
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let rel = g.final_events().pop().unwrap();
    assert!(rel["killed"].as_u64().unwrap() >= 2, "{rel}");
    assert_discovery(&g.stderr(), discovery);
}

/// A "PID hopper": every few ms a process forks a child that calls setsid, and exits. Every
/// generation ignores SIGTERM. guardian still catches and kills all of them.
#[test]
fn pid_hopper_converges() {
    pid_hopper(Discovery::Walk);
}

/// The same hopper, found by listing all of /proc.
#[test]
fn pid_hopper_converges_listing_all_of_proc() {
    need_hooks!();
    pid_hopper(Discovery::Listing);
}

fn pid_hopper(discovery: Discovery) {
    // Bounded, so an escaped hopper dies out by itself (~10 s at 2 ms a generation).
    const GENERATIONS: u32 = 5000;
    let ctx = Ctx::new("hopper");
    ctx.fifo("go");
    let sleep = ctx.tagged_program("sleep");
    let tag = ctx.tag();
    std::fs::write(
        ctx.path("hop.sh"),
        format!(
            "trap '' TERM\necho $$ >> hops\n[ \"$1\" -gt 0 ] || exit 0\n/usr/bin/setsid sh hop.sh $(($1 - 1)) {tag} &\n{} 0.005\nexit 0\n",
            sleep.display()
        ),
    )
    .unwrap();
    let mut g = with_discovery(ctx.guardian(), discovery)
        .args(["--grace", "300ms"])
        .script(&format!("sh hop.sh {GENERATIONS} {tag} & {WAIT_GO}; exit 0"))
        .spawn();
    wait_for("20 hops", || {
        let n = std::fs::read_to_string(ctx.path("hops")).ok()?.lines().count();
        (n >= 20).then_some(())
    });
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let rel = g.final_events().pop().unwrap();
    assert!(rel["reaped"].as_u64().unwrap() >= 20, "{rel}");
    assert!(rel["killed"].as_u64().unwrap() >= 1, "{rel}");
    // guardian cut the chain: it did not just run out of generations.
    let hops = std::fs::read_to_string(ctx.path("hops")).unwrap().lines().count();
    assert!(hops <= GENERATIONS as usize, "the hopper ran to its end ({hops} generations): guardian never caught it");
    assert_discovery(&g.stderr(), discovery);
}

/// An orphan that exits while the provider still runs is reaped at once: its /proc entry
/// disappears entirely (not just a zombie).
#[test]
fn no_zombie_lingers_while_provider_runs() {
    let ctx = Ctx::new("zombie");
    ctx.fifo("go");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .script(&format!(r#"( sh -c 'echo $$ > orphan; {WAIT_GO}; exit 0' {tag} & ) ; {s} & echo $! > sleeper; wait"#))
        .spawn();
    let orphan = ctx.wait_pid_file("orphan");
    let sleeper = ctx.wait_pid_file("sleeper");
    let (_, _, orphan_start) = stat(orphan).expect("orphan alive");
    let guardian = g.inner_pid();
    wait_for("orphan adopted by guardian", || (stat(orphan)?.1 == guardian).then_some(()));
    ctx.release(&ctx.path("go"));
    wait_for("orphan's /proc entry to disappear", || match stat(orphan) {
        None => Some(()),
        Some((_, _, start)) if start != orphan_start => Some(()), // pid reused: ours is gone
        Some(_) => None,
    });
    assert!(alive(sleeper), "the provider's tree was disturbed");
    assert!(find(&g.events(), |e| e["event"] == "exit").is_none(), "provider exited early");
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_end(), killed_by(libc::SIGTERM), "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let rel = g.final_events().pop().unwrap();
    assert!(rel["reaped"].as_u64().unwrap() >= 2, "{rel}");
}

fn fds_of(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort();
    v
}

/// The provider gets exactly the caller's fds: no signalfd, pidfd, /proc dir or events fd.
#[test]
fn no_fd_leaks_into_the_provider() {
    let ctx = Ctx::new("fds");
    let s = ctx.sleep_arg(1000);
    // Events on fd 3 and an extra fd 5 for the provider.
    let extra = File::create(ctx.path("extra")).unwrap();
    let mut g = ctx.guardian().pass_fd(extra, 5).command(["sleep", s.as_str()]).spawn();
    let pid = g.wait_event_named("spawned")["pid"].as_i64().unwrap() as i32;
    wait_for("provider exec'd", || cmdline(pid).filter(|c| c.starts_with(b"sleep\0")));
    // Right after exec, sleep's C library may hold a locale file open for a moment (as fd 3);
    // an fd guardian leaked would stay, so wait for the set to settle, then check it.
    let end = std::time::Instant::now() + DEADLINE;
    while fds_of(pid) != [0, 1, 2, 5] && std::time::Instant::now() < end {
        std::thread::sleep(POLL);
    }
    assert_eq!(fds_of(pid), [0, 1, 2, 5], "with --events-fd 3 the provider must not have fd 3");
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_end(), killed_by(libc::SIGTERM), "stderr: {}", g.stderr());
    g.final_events();

    // Events on fd 7, and the caller deliberately passes fd 3: the provider keeps 3 only.
    let events = ctx.path("events-7.jsonl");
    let mut g = ctx
        .guardian()
        .no_events()
        .args(["--events-fd", "7"])
        .pass_fd(File::create(&events).unwrap(), 7)
        .pass_fd(File::create(ctx.path("extra3")).unwrap(), 3)
        .command(["sleep", s.as_str()])
        .spawn();
    let pid = wait_for("spawned on fd 7", || {
        let ev = parse_events(&std::fs::read_to_string(&events).ok()?);
        ev.into_iter().find(|e| e["event"] == "spawned")?["pid"].as_i64()
    }) as i32;
    wait_for("provider exec'd", || cmdline(pid).filter(|c| c.starts_with(b"sleep\0")));
    assert_eq!(fds_of(pid), [0, 1, 2, 3]);
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_end(), killed_by(libc::SIGTERM), "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

/// `--wait-descendants`: after the provider exits, a descendant finishes on its own; guardian
/// sends it nothing and releases only once it is gone.
#[test]
fn wait_descendants_lets_a_descendant_finish() {
    let ctx = Ctx::new("wait-desc");
    ctx.fifo("go");
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--wait-descendants", "--grace", "200ms"])
        .script(&format!(
            r#"setsid sh -c 'trap "echo TERM >> term.log" TERM; echo $$ > worker; {WAIT_GO}; echo finished > done; exit 0' {tag} & exit 4"#
        ))
        .spawn();
    let worker = ctx.wait_pid_file("worker");
    g.wait_event_named("exit");
    // The provider is gone; the worker goes on, untouched.
    assert!(alive(worker));
    assert!(find(&g.events(), |e| e["event"] == "signal" || e["event"] == "released").is_none());
    ctx.release(&ctx.path("go"));
    assert_eq!(g.wait_code(), 4, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    assert_eq!(ctx.read_line_file("done").as_deref(), Some("finished"));
    assert_eq!(ctx.read_line_file("term.log"), None);
    let ev = g.final_events();
    assert!(find(&ev, |e| e["event"] == "signal").is_none(), "{ev:?}");
    assert_eq!(ev.last().unwrap()["reaped"], 1);
}

/// `--forward-to group` delivers to every member of the provider's process group.
#[test]
fn forward_to_group_reaches_the_whole_group() {
    let ctx = Ctx::new("group");
    let s = ctx.sleep();
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--forward-to", "group"])
        .script(&format!(
            r#"trap 'echo provider >> usr1.log' USR1
trap 'exit 0' TERM
sh -c 'trap "echo member >> usr1.log" USR1; trap "exit 0" TERM; echo $$ > member; {s} & while :; do wait; done' {tag} &
{s} &
echo $$ > provider
while :; do wait; done"#
        ))
        .spawn();
    let provider = ctx.wait_pid_file("provider");
    let member = ctx.wait_pid_file("member");
    assert_eq!(stat(member).unwrap().1, provider, "member is the provider's child");
    g.signal(libc::SIGUSR1);
    ctx.wait_line("usr1.log", "provider");
    ctx.wait_line("usr1.log", "member");
    g.signal(libc::SIGTERM);
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let ev = g.final_events();
    assert!(find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGUSR1" && e["target"] == "group").is_some());
}

/// A broken events pipe (the reader went away) never stops the teardown.
#[test]
fn broken_events_pipe_never_stops_the_teardown() {
    use std::os::fd::FromRawFd;
    let ctx = Ctx::new("broken-events");
    let s = ctx.sleep();
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned here only.
    let (read, write) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    drop(read);
    let mut g = ctx
        .guardian()
        .no_events()
        .args(["--events-fd", "3", "--grace", "300ms"])
        .pass_fd(write, 3)
        .script(&format!("{s} & sh -c 'trap \"\" TERM; exec {s}' {} & exit 6", ctx.tag()))
        .spawn();
    assert_eq!(g.wait_code(), 6, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
}

/// `released` says what the tree cost (issue 13.4): the provider's CPU time and peak RSS
/// include the child it waited for; the tree's add the orphan guardian reaped.
#[test]
fn released_reports_the_cpu_time_and_peak_rss_of_provider_and_tree() {
    let ctx = Ctx::new("rusage");
    let burn = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done";
    // The first burner is the provider's own child (waited for); the second outlives the
    // provider and is reaped by guardian (--wait-descendants lets it finish).
    let f = ctx
        .guardian()
        .args(["--wait-descendants"])
        .script(&format!("({burn}); ({burn}; echo done > orphan) & exit 0"))
        .spawn()
        .finish();
    f.assert_released(0);
    ctx.assert_nothing_left();
    assert_eq!(ctx.read_line_file("orphan").as_deref(), Some("done"), "{f:#?}");
    let rel = f.one("released");
    let num = |k: &str| rel[k].as_f64().unwrap_or_else(|| panic!("released.{k} is not a number: {rel}"));
    assert!(num("provider_user_ms") > 0.0, "the provider's waited child burned user time: {rel}");
    assert!(num("tree_user_ms") >= num("provider_user_ms"), "{rel}");
    assert!(num("tree_system_ms") >= num("provider_system_ms"), "{rel}");
    let cpu = |who: &str| num(&format!("{who}_user_ms")) + num(&format!("{who}_system_ms"));
    assert!(cpu("tree") > cpu("provider"), "the orphan's CPU time counts for the tree only: {rel}");
    assert!(num("provider_max_rss_kb") > 0.0, "{rel}");
    assert!(num("tree_max_rss_kb") >= num("provider_max_rss_kb"), "{rel}");
}
