//! Resource exhaustion: guardian still tears the tree down and releases correctly with few
//! file descriptors, with a large tree, under a fork storm that hits RLIMIT_NPROC, with an
//! events pipe nobody reads, with stdout/stderr closed, and with a broken stderr pipe.

use crate::harness::*;

/// The events reader never reads and the pipe is already full when guardian starts; guardian
/// runs as `uid` (`None`: root; another user cannot reopen root's pipe through /proc). It must
/// still tear the tree down, release, and exit with the provider's status, and never give up
/// on the events writer. Returns guardian's stderr (`-v`).
fn full_events_never_block_release(fifo: bool, uid: Option<u32>) -> String {
    let ctx = Ctx::new(if fifo { "full-events-fifo" } else { "full-events-pipe" });
    let script = format!("setsid env -i {} & exit 7", ctx.sleep());
    let b = ctx.guardian().args(["--grace", "300ms", "-v"]).script(&script);
    let b = if fifo { b.events_unread_full_fifo() } else { b.events_unread_full() };
    let mut g = match uid {
        Some(uid) => b.uid(uid),
        None => b.privileged(),
    }
    .spawn();
    let status = g.wait();
    let stderr = g.stderr();
    assert_eq!(status.code(), Some(7), "uid {uid:?}: {stderr}");
    ctx.assert_nothing_left();
    assert!(!stderr.contains("write failed"), "uid {uid:?}: the events writer gave up: {stderr}");
    // Whatever guardian managed to write is whole JSON lines after the filler.
    let rest = g.drain_unread();
    let text = String::from_utf8_lossy(&rest);
    for line in text.trim_start_matches('#').lines().filter(|l| !l.is_empty()) {
        assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "torn line {line:?}");
    }
    stderr
}

/// An anonymous pipe: `RWF_NOWAIT` on guardian's dup (Linux 6.4+), else its own reopened
/// description, else (another user's pipe) writes after poll().
#[test]
fn full_events_pipe_never_blocks_release() {
    full_events_never_block_release(false, None);
    need_root!("run guardian as another user than the pipe's creator");
    full_events_never_block_release(false, Some(NOBODY));
}

/// A named FIFO, which the kernel refuses `RWF_NOWAIT` for (6.18 as on the kernels before
/// 6.4 for every pipe): guardian reopens it through /proc as its own non-blocking description;
/// as another user than the FIFO's (mode 0600) it cannot, and writes only after poll()
/// reports room. The reopen is the designed path (nothing reported); the poll() writes are a
/// fallback, reported with why.
#[test]
fn full_named_fifo_events_never_block_release() {
    let polled =
        |stderr: &str| stderr.contains("pwritev2 refused (EOPNOTSUPP") && stderr.contains("open refused (EACCES");
    let stderr = full_events_never_block_release(true, None);
    assert!(!polled(&stderr), "reopened, nothing to report: {stderr}");
    need_root!("run guardian as another user than the FIFO's owner");
    let stderr = full_events_never_block_release(true, Some(NOBODY));
    assert!(polled(&stderr), "the poll() fallback is reported with why: {stderr}");
}

/// 200 descendants with RLIMIT_NOFILE 16: guardian opens one pidfd at a time.
#[test]
fn low_nofile_with_200_descendants() {
    let ctx = Ctx::new("low-nofile");
    let script = format!("i=0; while [ $i -lt 200 ]; do setsid {s} & i=$((i+1)); done; exec {s}", s = ctx.sleep());
    let mut g = ctx.guardian().args(["--grace", "5s"]).script(&script).rlimit(libc::RLIMIT_NOFILE as i32, 16).spawn();
    g.wait_event_named("spawned");
    ctx.wait_sleeps(201);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", g.pid())).unwrap_or_default();
    assert!(limits.lines().any(|l| l.starts_with("Max open files") && l.contains(" 16 ")), "{limits}");
    g.signal(libc::SIGTERM);
    let f = g.finish();
    f.assert_released(143);
    assert!(f.one("released")["signalled"].as_u64().unwrap_or(0) >= 200, "{f:#?}");
    ctx.assert_nothing_left();
}

/// A tree of 10 000 descendants (100 forkers with 99 children each, shells blocked on a
/// FIFO), all orphaned at once when the provider exits.
#[test]
fn ten_thousand_descendants() {
    let pid_max: usize =
        std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let running = all_procs().len();
    if pid_max < running + 12_000 {
        skip!("pid_max {pid_max} leaves no room for 10 000 more processes ({running} running)");
    }
    let ctx = Ctx::new("10k");
    let (hold, ready) = (ctx.fifo("hold"), ctx.fifo("ready"));
    // Each forker starts 99 shells that block reading fd 3 (a FIFO nobody writes), reports on
    // fd 4 and blocks too; the provider waits for all 100 reports, then exits.
    let script = format!(
        "exec 3<>'{}' 4<>'{}'; i=0; while [ $i -lt 100 ]; do \
         (j=0; while [ $j -lt 99 ]; do (read x <&3) & j=$((j+1)); done; echo >&4; read x <&3) & i=$((i+1)); done; \
         i=0; while [ $i -lt 100 ]; do read x <&4; i=$((i+1)); done; exit 0",
        hold.display(),
        ready.display()
    );
    let mut g = ctx.guardian().args(["--grace", "10s"]).script(&script).spawn();
    // Starting 10 000 processes is the slow part; on a loaded machine it may take a while.
    g.deadline = DEADLINE * 4;
    let f = g.finish();
    f.assert_released(0);
    let rel = f.one("released");
    assert!(rel["reaped"].as_u64().unwrap_or(0) >= 10_000, "{rel}");
    assert!(rel["signalled"].as_u64().unwrap_or(0) >= 10_000, "{rel}");
    assert_eq!(rel["killed"], 0, "shells die of SIGTERM: {rel}");
    ctx.assert_nothing_left();
}

/// A fork storm that runs into RLIMIT_NPROC: guardian runs as its own uid with a low limit,
/// the storm fills it; `--timeout` stops the tree, which must converge and be reaped.
#[test]
fn fork_storm_at_rlimit_nproc() {
    need_root!("run guardian as a uid of its own");
    let ctx = Ctx::new("nproc-storm");
    // A uid no other test or engineer uses, so the per-uid process count is ours alone.
    let uid = 40_000 + (std::process::id() % 20_000);
    let py = r#"
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"#;
    let f = ctx
        .guardian()
        .args(["--timeout", "1s", "--grace", "200ms"])
        .command(["python3", "-c", py, &ctx.nonce])
        .uid(uid)
        .rlimit(libc::RLIMIT_NPROC as i32, 64)
        .spawn()
        .finish();
    assert_eq!(f.code, Some(124), "{f:#?}");
    assert_eq!(f.named("released").len(), 1, "{f:#?}");
    assert!(f.one("released")["reaped"].as_u64().unwrap_or(0) >= 30, "the storm reached its limit: {f:#?}");
    ctx.assert_nothing_left();
    let left: Vec<ProcInfo> = all_procs().into_iter().filter(|p| p.uid == uid).collect();
    assert!(left.is_empty(), "processes of uid {uid} remain: {left:?}");
}

/// stdout and stderr closed (`>&- 2>&-`), with -vv logging and a fallback logged while the
/// provider starts: nothing is confused, the tree is cleaned.
#[test]
fn closed_stdout_and_stderr() {
    let ctx = Ctx::new("closed-stdio");
    let script = format!("setsid env -i {} & exit 4", ctx.sleep());
    let f = ctx
        .guardian()
        .args(["-vv", "--grace", "300ms"])
        .script(&script)
        .close_stdout()
        .close_stderr()
        .deny(libc::SYS_clone3, libc::ENOSYS)
        .spawn()
        .finish();
    f.assert_released(4);
    assert!(!f.fallbacks("clone3").is_empty(), "{f:#?}");
    ctx.assert_nothing_left();
}

/// stderr is a pipe nobody reads any more: every log line raises EPIPE and SIGPIPE; the
/// events pipe is closed by its reader too. guardian carries on; a SIGPIPE sent by someone
/// else is forwarded like any other signal.
#[test]
fn sigpipe_on_stderr_and_events() {
    let ctx = Ctx::new("sigpipe");
    let script = format!("trap 'exit 6' PIPE; setsid env -i {s} & {s} & wait", s = ctx.sleep());
    let mut g =
        ctx.guardian().args(["-vv", "--grace", "300ms"]).script(&script).broken_stderr().events_unread().spawn();
    drop(g.unread.take());
    ctx.wait_sleeps(2);
    g.signal(libc::SIGPIPE);
    let status = g.wait();
    assert_eq!(status.code(), Some(6), "the provider got the forwarded SIGPIPE");
    ctx.assert_nothing_left();
}

/// Issue 22.2: at every small open-files limit guardian either runs the provider or refuses
/// (125, nothing started) with a message naming the real cause, the fd limit and its value;
/// running out of fds is never reported as a missing /proc, a cgroup that is not delegated,
/// or a missing kernel feature, with or without `--cgroup auto`.
#[test]
fn a_small_fd_limit_is_named_as_the_cause() {
    for cgroup in [false, true] {
        for n in 4..=12u64 {
            let ctx = Ctx::new("nofile");
            let mut b = ctx.guardian().no_events().rlimit(libc::RLIMIT_NOFILE as i32, n);
            if cgroup {
                b = b.args(["--cgroup", "auto"]);
            }
            // No redirection: dash saves fds above 10, which a limit of 10 refuses.
            let mut g = b.script(&format!("touch {}/ran", ctx.dir.display())).spawn();
            let end = g.wait_end();
            let err = g.stderr();
            let what = format!("RLIMIT_NOFILE {n}, cgroup {cgroup}: {end:?}, stderr: {err}");
            for wrong in ["/proc is missing", "delegated", "needs signalfd", "another PID namespace"] {
                assert!(!err.contains(wrong), "blames the wrong cause ({wrong}): {what}");
            }
            match end {
                End::Code(0) => assert!(ctx.path("ran").exists(), "{what}"),
                End::Code(125) => {
                    assert!(err.contains(&format!("(RLIMIT_NOFILE) is {n}")), "the limit is not named: {what}");
                    assert!(!ctx.path("ran").exists(), "the provider ran: {what}");
                }
                _ => panic!("{what}"),
            }
            ctx.assert_nothing_left();
        }
    }
}

/// Issue 22.2, the events' side: at a small open-files limit no capability is reported as
/// missing for want of an fd: no `fallback` event carries EMFILE (guardian refuses with the
/// cause in an `error` event instead, or runs).
#[test]
fn a_small_fd_limit_is_never_a_fallback() {
    for cgroup in [false, true] {
        for n in 5..=14u64 {
            let ctx = Ctx::new("nofile-ev");
            let mut b = ctx.guardian().rlimit(libc::RLIMIT_NOFILE as i32, n);
            if cgroup {
                b = b.args(["--cgroup", "auto"]);
            }
            let mut g = b.script(&format!("touch {}/ran", ctx.dir.display())).spawn();
            let f = g.finish();
            let what = format!("RLIMIT_NOFILE {n}, cgroup {cgroup}: {f:#?}");
            assert!(f.named("fallback").iter().all(|e| e["errno"] != "EMFILE"), "a fallback for EMFILE: {what}");
            match f.end() {
                End::Code(0) => assert!(ctx.path("ran").exists(), "{what}"),
                End::Code(125) => {
                    let err = f.named("error");
                    assert!(
                        err.iter().any(|e| e["message"].as_str().is_some_and(|m| m.contains("RLIMIT_NOFILE"))),
                        "the error event does not name the limit: {what}"
                    );
                }
                _ => panic!("{what}"),
            }
            ctx.assert_nothing_left();
        }
    }
}
