//! `--events-file PATH` (and `GUARDIAN_EVENTS_FILE`): the events stream for callers that pass
//! no fd. The same ordering and completeness as `--events-fd` (`exit` before `released`,
//! `released` last and on disk before guardian exits), a file created 0600 and appended to,
//! a FIFO with a reader, never inherited by the provider, and exit 125 with one line (nothing
//! started) for a path that cannot carry events. guardian runs unprivileged (nobody as root).

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use crate::harness::*;

/// The events the file holds now, checked like [`Guardian::final_events`]: `ts` never goes
/// back, one `exit` before the one `released`, which is the last line.
fn final_events_in(text: &str) -> Vec<Value> {
    assert!(text.ends_with('\n'), "the last line is incomplete: {text:?}");
    let ev = parse_events(text);
    assert!(!ev.is_empty(), "no events");
    for w in ev.windows(2) {
        assert!(ts(&w[1]) >= ts(&w[0]), "ts goes back: {} then {}", w[0], w[1]);
    }
    assert_eq!(ev.last().expect("last")["event"], "released", "released is not last: {ev:#?}");
    assert_eq!(ev.iter().filter(|e| e["event"] == "released").count(), 1, "{ev:#?}");
    let exit = ev.iter().position(|e| e["event"] == "exit").expect("an exit event");
    assert!(exit < ev.len() - 1);
    ev
}

/// The provider lists where its fds point into `fds`; none may be the events file.
fn assert_not_inherited(ctx: &Ctx, events: &std::path::Path) {
    let fds = fs::read_to_string(ctx.path("fds")).expect("the provider's fd list");
    let name = events.to_string_lossy();
    assert!(!fds.lines().any(|l| l == name), "the provider inherited the events file: {fds}");
    assert!(fds.lines().any(|l| l.ends_with("/fds")), "the fd list is not what it seems: {fds}");
}

const LIST_FDS: &str = "for f in /proc/$$/fd/*; do readlink \"$f\"; done > fds";

/// A regular file: created 0600 (umask 022 on top), the whole stream on disk by the time
/// guardian has exited (a reader that waits for the exit reads `released` last), with the
/// setsid orphan stopped; a second run appends, never truncates.
#[test]
fn file_carries_the_whole_stream_and_is_appended_to() {
    let ctx = Ctx::new("events-file");
    let path = ctx.path("events.jsonl");
    let s = ctx.sleep();
    for run in 1..=2 {
        let mut g = ctx
            .guardian()
            .no_events()
            .arg("--events-file")
            .arg(&path)
            .script(&format!("{LIST_FDS}; setsid {s} & exit 3"))
            .spawn();
        assert_eq!(g.wait_code(), 3, "stderr: {}", g.stderr());
        ctx.assert_nothing_left();
        let text = fs::read_to_string(&path).expect("events file");
        let runs: Vec<&str> = text.split_inclusive('\n').collect();
        // Each run's lines are complete and in order; the second run follows the first.
        let released: Vec<usize> =
            runs.iter().enumerate().filter(|(_, l)| l.contains("\"released\"")).map(|(i, _)| i).collect();
        assert_eq!(released.len(), run, "run {run}: {text}");
        let last_run_start = if run == 1 { 0 } else { released[0] + 1 };
        let ev = final_events_in(&runs[last_run_start..].concat());
        assert_eq!(ev[0]["event"], "spawned", "{ev:#?}");
        assert_eq!(ev.last().unwrap()["status"], 3);
        assert_eq!(signalled_pids(&ev, "stop").len(), 1, "the setsid sleep got the stop signal: {ev:#?}");
        assert_not_inherited(&ctx, &path);
    }
    let meta = fs::metadata(&path).expect("stat");
    assert_eq!(meta.mode() & 0o777, 0o600, "created readable by its owner only");
    if is_root() {
        assert_eq!(meta.uid(), NOBODY, "created by the user guardian runs as");
    }
}

/// `GUARDIAN_EVENTS_FILE` works like the option, and is not passed on to the provider.
#[test]
fn variable_names_the_file_and_is_not_inherited() {
    let ctx = Ctx::new("events-file-env");
    let path = ctx.path("events.jsonl");
    let mut g = ctx
        .guardian()
        .no_events()
        .env("GUARDIAN_EVENTS_FILE", &path)
        .script("echo \"${GUARDIAN_EVENTS_FILE-unset}\" > env; exit 0")
        .spawn();
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    final_events_in(&fs::read_to_string(&path).expect("events file"));
    assert_eq!(ctx.read_line_file("env").as_deref(), Some("unset"));
}

/// A FIFO whose reader is there before guardian starts: read to end of file, the stream is
/// complete (guardian closes its end after `released`), the provider does not hold it, and a
/// stop request (SIGTERM, as the MCP SDK's killpg sends) is reported in order.
#[test]
fn fifo_with_a_reader_gets_every_line_then_eof() {
    let ctx = Ctx::new("events-file-fifo");
    let path = ctx.fifo("events");
    // O_NONBLOCK: opening the read end must not wait for guardian, the writer.
    let mut reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .expect("open the FIFO for reading");
    let s = ctx.sleep();
    let mut g = ctx
        .guardian()
        .no_events()
        .args(["--grace", "5s"])
        .arg("--events-file")
        .arg(&path)
        .script(&format!("{LIST_FDS}; {s} & wait"))
        .spawn();
    ctx.wait_sleeps(1);
    wait_for("the provider's fd list", || ctx.read_line_file("fds").map(|_| ()));
    g.signal(libc::SIGTERM);
    let status = g.wait();
    assert_eq!(exit_status_code(status), 128 + libc::SIGTERM, "stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    // Every line is in the pipe now (guardian exited); read until the writer's end is gone.
    let mut text = Vec::new();
    wait_for("end of file on the events FIFO", || match reader.read_to_end(&mut text) {
        Ok(_) => Some(()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => panic!("reading the FIFO: {e}"),
    });
    let ev = final_events_in(&String::from_utf8(text).expect("utf-8"));
    let stopping = ev.iter().position(|e| e["event"] == "stopping" && e["reason"] == "signal").expect("stopping");
    let exit = ev.iter().position(|e| e["event"] == "exit").expect("exit");
    assert!(stopping < exit, "{ev:#?}");
    assert_not_inherited(&ctx, &path);
}

/// Paths that cannot carry events: exit 125, one line naming the path and the fix, and the
/// provider never started (it would leave a file).
#[test]
fn unusable_paths_are_refused_before_anything_starts() {
    let ctx = Ctx::new("events-file-bad");
    let fifo = ctx.fifo("no-reader");
    let missing = ctx.path("missing/events.jsonl");
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["--events-file".into(), fifo.clone().into()], "open the FIFO for reading"),
        (vec!["--events-file".into(), missing.clone().into()], "create the directory first"),
        (vec!["--events-file".into(), ctx.dir.clone().into()], "is a directory"),
        (vec!["--events-file=".into()], "the path is empty"),
        (vec!["--events-fd".into(), "2".into(), "--events-file".into(), ctx.path("e").into()], "cannot be used with"),
    ];
    for (args, fix) in cases {
        let mut g = ctx.guardian().no_events().args(args.clone()).script("touch started").spawn();
        assert_eq!(g.wait_code(), 125, "{args:?}");
        let err = g.stderr();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.contains(fix), "{args:?}: {err:?} lacks {fix:?}");
        assert!(!ctx.path("started").exists(), "{args:?}: the provider ran");
        ctx.assert_nothing_left();
    }
    assert!(!ctx.path("e").exists(), "a refused command line created the events file");
}

/// The exit status of a guardian whose provider died of a signal: 128+N when guardian exits,
/// or guardian dies of the same signal (the decided change for guardian when not PID 1).
fn exit_status_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().or_else(|| st.signal().map(|s| 128 + s)).expect("an exit status or a signal")
}
