//! The blocking API against the real guardian: events, wait, drop, kill, errors, fds.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use common::{Sweep, gone_within, guardian, nonce, present_within};
use treeguardian_client::{Command, Error, Event};

const LIMIT: Duration = Duration::from_secs(20);

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).guardian(guardian());
    cmd
}

#[test]
fn events_then_released_and_nothing_left() {
    let tag = nonce("events");
    let _sweep = Sweep(tag.clone());
    let mut child = sh(&format!("setsid sh -c 'sleep 300; : {tag}' & echo hi; exit 3"))
        .stdout(Stdio::piped())
        .grace(Duration::from_secs(5))
        .spawn()
        .expect("spawn");
    let pid = child.wait_spawned().expect("spawned");
    assert!(pid > 0 && child.provider_pid() == Some(pid) && child.guardian_pid() > 0);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert_eq!(out, "hi\n");
    let names: Vec<&str> = child.events().filter_map(|e| e.name()).collect();
    assert_eq!(names.first(), Some(&"spawned"), "{names:?}");
    assert!(names.contains(&"exit") && names.last() == Some(&"released"), "{names:?}");
    // the events were read; wait still returns the released event
    let released = child.wait_released().expect("wait");
    assert_eq!(released.status, 3);
    assert!(released.reaped >= 1, "{released:?}");
    assert_eq!(released.exit_status.and_then(|s| s.code()), Some(3));
    gone_within(&tag, LIMIT).expect("the setsid child was reaped");
}

#[test]
fn drop_stops_the_tree_without_blocking() {
    let tag = nonce("drop");
    let _sweep = Sweep(tag.clone());
    let child = sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}")).spawn().expect("spawn");
    assert!(present_within(&tag, 2, LIMIT), "both tagged processes started");
    let started = std::time::Instant::now();
    drop(child);
    let took = started.elapsed();
    gone_within(&tag, LIMIT).expect("drop stopped the tree");
    // Not a timing assertion on guardian: dropping must not wait for the teardown itself.
    assert!(took < Duration::from_secs(5), "drop blocked for {took:?}");
}

/// `kill()` is the kill request (spec/driver.json): SIGKILL to the provider and its whole tree
/// at once, with no stop signal and no grace, and the status std gives a SIGKILLed child.
/// (Needs guardian's `--kill-signal`, GUARDIAN_KILL_SIGNAL: the "stop" branch.)
#[test]
fn kill_is_sigkill_to_the_tree_now() {
    use std::os::unix::process::ExitStatusExt;
    let tag = nonce("kill");
    let _sweep = Sweep(tag.clone());
    // Each shell says so once its trap is set (a SIGTERM before would end it).
    let script = format!(
        "trap '' TERM; setsid sh -c \"trap '' TERM; echo child; sleep 300; : {tag}\" & echo up; sleep 300; : {tag}"
    );
    let mut child = sh(&script).grace(Duration::from_secs(20)).stdout(Stdio::piped()).spawn().expect("spawn");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    for _ in 0..2 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut lines, &mut line).expect("a line");
        assert!(line == "up\n" || line == "child\n", "{line:?}");
    }
    child.kill().expect("kill");
    let (mut reasons, mut provider_signal, mut signals) = (Vec::new(), None, Vec::new());
    while let Some(e) = child.next_event() {
        match e {
            Event::Stopping { reason, .. } => reasons.push(reason),
            Event::Exit { signal, .. } => provider_signal = signal,
            Event::Signal { signal, .. } => signals.push(signal),
            _ => {}
        }
    }
    assert_eq!(reasons, [treeguardian_client::StopReason::KillRequest]);
    assert!(!signals.iter().any(|s| s == "SIGTERM"), "no stop signal before the kill: {signals:?}");
    // The provider ignores SIGTERM: within a 20 s grace only the kill request's SIGKILL ends it.
    assert_eq!(provider_signal.as_deref(), Some("SIGKILL"));
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    assert!(child.released().is_some());
    gone_within(&tag, LIMIT).expect("nothing left");
}

#[test]
fn stop_is_a_graceful_stop() {
    let tag = nonce("stop");
    let _sweep = Sweep(tag.clone());
    let mut child = sh(&format!("sleep 300; : {tag}")).spawn().expect("spawn");
    assert!(present_within(&tag, 1, LIMIT));
    child.stop().expect("stop");
    let released = child.wait_released().expect("released");
    assert_eq!(released.killed, 0, "{released:?}");
    gone_within(&tag, LIMIT).expect("nothing left");
}

/// A program that exists and is executable but whose exec fails inside guardian (a script
/// whose interpreter is missing: execvp's ENOENT) is guardian's error event, status 127.
/// (A program that is not there at all fails at spawn: tests/std_parity.rs.)
#[test]
fn a_provider_whose_exec_fails_is_guardians_error() {
    use std::os::unix::fs::PermissionsExt;
    let tag = nonce("badinterp");
    let script = std::env::temp_dir().join(format!("{tag}.sh"));
    std::fs::write(&script, "#!/nonexistent/tgc-interpreter\n").expect("write script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut cmd = Command::new(&script);
    cmd.guardian(guardian());
    let mut child = cmd.spawn().expect("guardian itself starts");
    match child.wait_spawned() {
        Err(Error::Guardian { status, message }) => {
            assert_eq!(status, 127, "{message}");
            assert!(message.contains(&tag), "{message}");
        }
        other => panic!("expected guardian's error event, got {other:?}"),
    }
    assert_eq!(child.provider_pid(), None);
    match child.wait_released() {
        Err(Error::Guardian { status: 127, .. }) => {}
        other => panic!("wait: expected guardian's error, got {other:?}"),
    }
    assert_eq!(child.wait().expect("status").code(), Some(127));
    let _ = std::fs::remove_file(&script);
}

/// guardian opens `/proc/<this pid>/fd/<n>` itself, so std spawns it without a `pre_exec`
/// step (posix_spawn, not fork); the events arrive all the same.
#[test]
fn the_events_pipe_is_passed_by_its_proc_path() {
    // (cat runs until wait() closes its stdin: guardian's cmdline is read while it runs)
    // (read once guardian reported `spawned`: right after spawn() its exec may still be
    // loading the program, with no arguments in /proc yet)
    let mut child = sh("exec cat").stdin(Stdio::piped()).spawn().expect("spawn");
    assert!(child.wait_spawned().is_ok());
    let argv = std::fs::read(format!("/proc/{}/cmdline", child.guardian_pid())).expect("guardian's cmdline");
    let want = format!("--events-file\0/proc/{}/fd/", std::process::id());
    assert!(argv.windows(want.len()).any(|w| w == want.as_bytes()), "{:?}", String::from_utf8_lossy(&argv));
    assert_eq!(child.wait_released().expect("released").status, 0);
}

/// Dropped before guardian opened the events pipe (the /proc route): the held write end goes
/// with the reaping thread, so `/proc/<this pid>/fd/<n>` is still there for guardian (no
/// "--events-file ...: its directory does not exist" on its stderr, no exit 125) and guardian
/// stops the tree.
/// To drop it in that moment, guardian is stopped (SIGSTOP) once it blocks SIGTERM, its first
/// act, and continued after the drop; a round counts when guardian had not opened the path
/// yet (its fd 3, the first it opens, is absent), and rounds go on until three counted.
#[test]
fn drop_before_guardian_opened_the_events_pipe_leaves_nothing() {
    let tag = nonce("early-drop");
    let _sweep = Sweep(tag.clone());
    let log = std::env::temp_dir().join(format!("{tag}.stderr"));
    let (mut counted, mut rounds) = (0, 0);
    while counted < 3 {
        rounds += 1;
        assert!(rounds <= 300, "guardian was never caught before opening its events path ({counted} of 3)");
        let err = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("stderr file");
        let child =
            sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}")).stderr(err).spawn().expect("spawn");
        let pid = child.guardian_pid();
        let end = std::time::Instant::now() + LIMIT;
        while !sigterm_blocked(pid) {
            assert!(std::time::Instant::now() < end, "guardian never blocked SIGTERM");
        }
        kill(pid, libc::SIGSTOP);
        while !stopped(pid) {
            assert!(std::time::Instant::now() < end, "guardian did not stop");
        }
        counted += usize::from(std::fs::symlink_metadata(format!("/proc/{pid}/fd/3")).is_err());
        drop(child);
        kill(pid, libc::SIGCONT);
    }
    gone_within(&tag, LIMIT).expect("nothing left");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(!text.contains("--events-file"), "guardian could not open the events pipe: {text}");
}

/// SigBlk of `pid` has SIGTERM (bit 14) set.
fn sigterm_blocked(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("SigBlk:")).and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|m| m & (1 << 14) != 0)
}

/// `pid`'s state letter is T (stopped).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('T')))
        .unwrap_or(false)
}

/// A signal to guardian, this test's unreaped child (its pid cannot have been reused).
fn kill(pid: u32, sig: i32) {
    let sig = rustix::process::Signal::from_named_raw(sig).expect("a signal");
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).expect("a pid"), sig).expect("kill");
}

#[test]
fn a_missing_guardian_names_every_source() {
    let mut cmd = Command::new("true");
    cmd.guardian("/nonexistent/guardian");
    let err = cmd.spawn().expect_err("an error").to_string();
    for needle in ["/nonexistent/guardian", "GUARDIAN_BIN", "PATH", "cargo install treeguardian", "npm"] {
        assert!(err.contains(needle), "{needle} not in: {err}");
    }
}

/// The events pipe reaches guardian only: no fd of the provider but its stdout is a pipe this
/// process opened for the spawn (the events pipe's read end stays open here, so its inode would
/// show).
#[test]
fn the_provider_inherits_no_events_fd() {
    fn links(pid: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
            if let Ok(target) = std::fs::read_link(e.path()) {
                out.push((e.file_name().to_string_lossy().into_owned(), target.to_string_lossy().into_owned()));
            }
        }
        out
    }
    let before: Vec<String> = links("self").into_iter().map(|(_, t)| t).collect();
    let mut child = sh("for f in /proc/$$/fd/*; do echo \"${f##*/} $(readlink $f)\"; done")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let ours: Vec<String> =
        links("self").into_iter().map(|(_, t)| t).filter(|t| t.starts_with("pipe:") && !before.contains(t)).collect();
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.wait().expect("released");
    assert!(ours.len() >= 2, "the stdout and events pipes: {ours:?}");
    let leaked: Vec<&str> = out
        .lines()
        .filter(|l| l.split_once(' ').is_some_and(|(fd, target)| fd != "1" && ours.iter().any(|o| o == target)))
        .collect();
    assert!(leaked.is_empty(), "the provider holds this process's pipes: {leaked:?} (all: {out})");
}

/// Every flag the builder writes is one guardian knows (its --help), and, once
/// spec/options.json exists, one that file lists.
#[test]
fn option_flags_are_guardians() {
    let help = std::process::Command::new(guardian()).arg("--help").output().expect("guardian --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in treeguardian_client::option_flags() {
        assert!(help.contains(flag.as_str()), "guardian --help does not list {flag}");
    }
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/options.json");
    if let Ok(text) = std::fs::read_to_string(&spec) {
        for flag in treeguardian_client::option_flags() {
            let name = flag.trim_start_matches('-');
            assert!(
                text.contains(&format!("\"{flag}\"")) || text.contains(&format!("\"{name}\"")),
                "spec/options.json does not list {flag}"
            );
        }
    }
}

/// The crate never sends SIGKILL (to guardian or anyone): a SIGKILLed guardian orphans the
/// tree. Its only signals are the stop request (SIGTERM) and the kill request (RTMAX), sent in
/// one place, through the pidfd (or the unreaped pid).
#[test]
fn the_crate_never_sends_sigkill() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut signals = 0;
    for entry in std::fs::read_dir(&dir).expect("src") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        // (`libc::SIGKILL =>`: the process-wrap child maps a SIGKILL asked of it to the kill
        // request; it is matched, never sent)
        let text = text.replace("libc::SIGKILL =>", "");
        for needle in ["Signal::KILL", "libc::SIGKILL", "libc::kill(", "Signal::from_named_raw(9"] {
            assert!(!text.contains(needle), "{} contains {needle}", path.display());
        }
        signals += text.matches("pidfd_send_signal(").count() + text.matches("kill_process(").count();
    }
    assert_eq!(
        signals, 4,
        "two sends (the handles' and the process-wrap child's): each the pidfd, and the pid fallback"
    );
}

/// A stop request after guardian released the tree (and exited, unreaped) is not an error.
#[test]
fn stop_after_release_is_ok() {
    let mut child = sh("exit 0").spawn().expect("spawn");
    while child.next_event().is_some() {}
    // Wait until guardian is a zombie (exited, not reaped): the signal then finds no process.
    let stat = format!("/proc/{}/stat", child.guardian_pid());
    let end = std::time::Instant::now() + LIMIT;
    while !std::fs::read_to_string(&stat).unwrap_or_default().rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
    {
        assert!(std::time::Instant::now() < end, "guardian did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.stop().expect("stop after release");
    child.kill().expect("kill after release");
    assert_eq!(child.wait_released().expect("released").status, 0);
}

/// The `released` figures stay reachable after a drop (issue 30.4): the reaping thread reads
/// the rest of the events for the handle taken before.
#[test]
fn released_is_reachable_after_a_drop() {
    let tag = nonce("drop-released");
    let _sweep = Sweep(tag.clone());
    let mut child = sh(&format!("setsid sh -c 'sleep 300; : {tag}' & sleep 300; : {tag}")).spawn().expect("spawn");
    let handle = child.released_handle();
    assert!(child.wait_spawned().is_ok());
    assert!(present_within(&tag, 2, LIMIT));
    drop(child);
    let released = handle.wait_timeout(LIMIT).expect("released after the drop");
    // The drop's stop request: the provider ended by SIGTERM, and guardian with it.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(released.exit_status.and_then(|s| s.signal()), Some(libc::SIGTERM), "{released:?}");
    assert!(handle.is_finished());
    gone_within(&tag, LIMIT).expect("nothing left");
}
