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

/// Issue 29.8: event lines never tear. Two guardians share one FIFO (one page of pipe) whose
/// reader is slow: each has a backlog (hundreds of forwarded real-time signals, each a
/// `signal` line, while nobody reads), and the reader then frees the pipe a page at a time,
/// so both write into the same small gaps. Every line the reader gets parses as one event (whole lines of at
/// most `PIPE_BUF` bytes per write are atomic; a backlog written at once tore 45-88 lines per
/// run), and both streams end with `released`.
#[test]
fn two_guardians_sharing_a_fifo_never_tear_each_others_lines() {
    const SIGNALS: usize = 300;
    const WAVES: usize = 3;
    let ctx = Ctx::new("events-fifo-shared");
    let fifo = ctx.fifo("events.fifo");
    // The reader first (guardian refuses a FIFO without one), non-blocking, slow.
    let mut reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .expect("open the FIFO for reading");
    // One page of pipe: both guardians' backlogs wait for every page the reader frees.
    rustix::pipe::fcntl_setpipe_size(&reader, 4096).expect("F_SETPIPE_SZ");
    // Real-time signal 40 is ignored by the provider (an ignored signal stays ignored across
    // exec), so the forwards are harmless.
    let start = |n: u32| {
        ctx.guardian()
            .no_events()
            .arg("--events-file")
            .arg(&fifo)
            .script(&format!("trap '' 40; echo $$ > ready{n}; exec {}", ctx.sleep()))
            .spawn()
    };
    let mut guardians = [start(1), start(2)];
    ctx.wait_pid_file("ready1");
    ctx.wait_pid_file("ready2");
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut read_some = |text: &mut Vec<u8>| match reader.read(&mut chunk) {
        Ok(n) => {
            text.extend_from_slice(&chunk[..n]);
            n
        }
        Err(_) => 0,
    };
    // Both spawned lines are out before the flood (so the reader has something to wait on).
    wait_for("both spawned events", || {
        read_some(&mut text);
        (String::from_utf8_lossy(&text).matches("\"spawned\"").count() >= 2).then_some(())
    });
    // Three waves, each a backlog in both guardians, drained slowly: a page at a time.
    let forwarded = |text: &[u8]| String::from_utf8_lossy(text).matches("\"forwarded\"").count();
    let deadline = std::time::Instant::now() + DEADLINE;
    for wave in 1..=WAVES {
        for _ in 0..SIGNALS {
            for g in &guardians {
                // SAFETY: sigqueue on our own unreaped children (the pids the test started).
                let value = libc::sigval { sival_ptr: std::ptr::null_mut() };
                assert_eq!(unsafe { libc::sigqueue(g.pid(), 40, value) }, 0, "sigqueue");
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        while forwarded(&text) < 2 * SIGNALS * wave && std::time::Instant::now() < deadline {
            read_some(&mut text);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    for g in &guardians {
        g.signal(libc::SIGTERM);
    }
    // Read on until both have exited, then to the end of file (every write end closed).
    wait_for("both guardians to exit", || {
        read_some(&mut text);
        guardians.iter_mut().all(|g| g.child.try_wait().ok().flatten().is_some()).then_some(())
    });
    wait_for("the end of the FIFO", || match reader.read(&mut chunk) {
        Ok(0) => Some(()),
        Ok(n) => {
            text.extend_from_slice(&chunk[..n]);
            None
        }
        Err(_) => None,
    });
    for g in &mut guardians {
        assert_eq!(g.wait_end(), killed_by(libc::SIGTERM), "stderr: {}", g.stderr());
    }
    ctx.assert_nothing_left();
    let text = String::from_utf8(text).expect("UTF-8");
    assert!(text.ends_with('\n'), "the last line is incomplete");
    let ev = parse_events(&text);
    let forwarded = ev.iter().filter(|e| e["event"] == "signal" && e["reason"] == "forwarded").count();
    assert!(forwarded > SIGNALS * WAVES, "the backlogs were small: only {forwarded} forwarded-signal lines");
    let released = ev.iter().filter(|e| e["event"] == "released").count();
    assert_eq!(released, 2, "both streams end: {} lines", ev.len());
}
