//! Resource exhaustion: guardian still tears the tree down and releases correctly with few
//! file descriptors, with a large tree, under a fork storm that hits RLIMIT_NPROC, with an
//! events pipe nobody reads, with stdout/stderr closed, and with a broken stderr pipe.

mod hardening_support;

use hardening_support::*;

fn sh(opts: &[&str], script: &str) -> Vec<String> {
    let mut v: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    v.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    v
}

/// The events reader never reads and the pipe is already full when guardian starts; guardian
/// runs as another user than the pipe's creator (so it cannot reopen the pipe through /proc).
/// It must still tear the tree down, release, and exit with the provider's status.
#[test]
fn full_events_pipe_never_blocks_release() {
    for uid in [None, Some(NOBODY)] {
        let tag = Tag::new();
        let script = format!("setsid env -i {} & exit 7", tag.sleep());
        let mut cmd = guardian(&sh(&["--events-fd", "3", "--grace", "300ms"], &script)).events(EventsMode::UnreadFull);
        if let Some(uid) = uid {
            cmd = cmd.uid(uid);
        }
        let mut g = cmd.spawn();
        let status = g.wait();
        assert_eq!(status.code(), Some(7), "uid {uid:?}: {}", g.stderr());
        tag.assert_gone();
        // Whatever guardian managed to write is whole JSON lines after the filler.
        let rest = g.drain_unread();
        let text = String::from_utf8_lossy(&rest);
        for line in text.trim_start_matches('#').lines().filter(|l| !l.is_empty()) {
            assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "torn line {line:?}");
        }
    }
}

/// 200 descendants with RLIMIT_NOFILE 16: guardian opens one pidfd at a time.
#[test]
fn low_nofile_with_200_descendants() {
    let tag = Tag::new();
    let script = format!("i=0; while [ $i -lt 200 ]; do setsid {s} & i=$((i+1)); done; exec {s}", s = tag.sleep());
    let mut g = guardian(&sh(&["--events-fd", "3", "--grace", "5s"], &script))
        .nobody()
        .rlimit(libc::RLIMIT_NOFILE as i32, 16)
        .spawn();
    g.wait_event("spawned");
    tag.wait_sleeps(201);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", g.pid)).unwrap_or_default();
    assert!(limits.lines().any(|l| l.starts_with("Max open files") && l.contains(" 16 ")), "{limits}");
    g.signal(libc::SIGTERM);
    let f = g.finish();
    f.assert_released(143);
    assert!(f.one("released")["signalled"].as_u64().unwrap_or(0) >= 200, "{f:#?}");
    tag.assert_gone();
}

/// A tree of 10 000 descendants (100 forkers with 99 children each, shells blocked on a
/// FIFO), all orphaned at once when the provider exits.
#[test]
fn ten_thousand_descendants() {
    let pid_max: usize =
        std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let running = all_procs().len();
    if pid_max < running + 12_000 {
        eprintln!("skipped: pid_max {pid_max} leaves no room for 10 000 more processes ({running} running)");
        return;
    }
    let tag = Tag::new();
    let dir = std::env::temp_dir().join(format!("guardian-10k-{}", tag.id));
    std::fs::create_dir(&dir).expect("temp dir");
    let (hold, ready) = (dir.join("hold"), dir.join("ready"));
    for fifo in [&hold, &ready] {
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8 path")).expect("path");
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo");
        // mkfifo applies the umask; uid 65534 must open both for reading and writing.
        std::fs::set_permissions(fifo, std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
    }
    // Each forker starts 99 shells that block reading fd 3 (a FIFO nobody writes), reports on
    // fd 4 and blocks too; the provider waits for all 100 reports, then exits.
    let script = format!(
        ": {}; exec 3<>'{}' 4<>'{}'; i=0; while [ $i -lt 100 ]; do \
         (j=0; while [ $j -lt 99 ]; do (read x <&3) & j=$((j+1)); done; echo >&4; read x <&3) & i=$((i+1)); done; \
         i=0; while [ $i -lt 100 ]; do read x <&4; i=$((i+1)); done; exit 0",
        tag.id,
        hold.display(),
        ready.display()
    );
    let mut g = guardian(&sh(&["--events-fd", "3", "--grace", "10s"], &script)).nobody().spawn();
    // Starting 10 000 processes is the slow part; on a loaded machine it may take a while.
    g.deadline = DEADLINE * 4;
    let f = g.finish();
    let _ = std::fs::remove_dir_all(&dir);
    f.assert_released(0);
    let rel = f.one("released");
    assert!(rel["reaped"].as_u64().unwrap_or(0) >= 10_000, "{rel}");
    assert!(rel["signalled"].as_u64().unwrap_or(0) >= 10_000, "{rel}");
    assert_eq!(rel["killed"], 0, "shells die of SIGTERM: {rel}");
    tag.assert_gone();
}

/// A fork storm that runs into RLIMIT_NPROC: guardian runs as its own uid with a low limit,
/// the storm fills it; `--timeout` stops the tree, which must converge and be reaped.
#[test]
fn fork_storm_at_rlimit_nproc() {
    let tag = Tag::new();
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
    let argv = ["--events-fd", "3", "--timeout", "1s", "--grace", "200ms", "--", "python3", "-c", py, &tag.id];
    let mut g = guardian(&argv).uid(uid).rlimit(libc::RLIMIT_NPROC as i32, 64).spawn();
    let f = g.finish();
    assert_eq!(f.code, Some(124), "{f:#?}");
    assert_eq!(f.named("released").len(), 1, "{f:#?}");
    assert!(f.one("released")["reaped"].as_u64().unwrap_or(0) >= 30, "the storm reached its limit: {f:#?}");
    tag.assert_gone();
    let left: Vec<ProcInfo> = all_procs().into_iter().filter(|p| p.uid == uid).collect();
    assert!(left.is_empty(), "processes of uid {uid} remain: {left:?}");
}

/// stdout and stderr closed (`>&- 2>&-`), with -vv logging and a fallback logged while the
/// provider starts: nothing is confused, the tree is cleaned.
#[test]
fn closed_stdout_and_stderr() {
    let tag = Tag::new();
    let script = format!("setsid env -i {} & exit 4", tag.sleep());
    let mut g = guardian(&sh(&["-vv", "--events-fd", "3", "--grace", "300ms"], &script))
        .nobody()
        .close_stdout()
        .close_stderr()
        .deny(libc::SYS_clone3, libc::ENOSYS)
        .spawn();
    let f = g.finish();
    f.assert_released(4);
    assert!(!f.fallbacks("clone3").is_empty(), "{f:#?}");
    tag.assert_gone();
}

/// stderr is a pipe nobody reads any more: every log line raises EPIPE and SIGPIPE; the
/// events pipe is closed by its reader too. guardian carries on; a SIGPIPE sent by someone
/// else is forwarded like any other signal.
#[test]
fn sigpipe_on_stderr_and_events() {
    let tag = Tag::new();
    let script = format!("trap 'exit 6' PIPE; setsid env -i {s} & {s} & wait", s = tag.sleep());
    let mut g = guardian(&sh(&["-vv", "--events-fd", "3", "--grace", "300ms"], &script))
        .nobody()
        .broken_stderr()
        .events(EventsMode::Unread)
        .spawn();
    drop(g.unread.take());
    tag.wait_sleeps(2);
    g.signal(libc::SIGPIPE);
    let status = g.wait();
    assert_eq!(status.code(), Some(6), "the provider got the forwarded SIGPIPE");
    tag.assert_gone();
}
