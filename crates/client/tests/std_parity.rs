//! The standard library's process-API expectations, run side by side: every test below runs
//! once against `std::process::Command` (module `plain`) and once against
//! `treeguardian_client::Command` (module `driver`), with the same body and the same
//! assertions: kill status, spawn errors, try_wait, output, status, wait_with_output, stdin,
//! environment, directory, process group. A host that swaps the import keeps these.

mod common;

use std::io::{ErrorKind, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Sweep, gone_within, nonce, present_within};

const LIMIT: Duration = Duration::from_secs(20);

/// The process group of `pid` (field 5 of /proc/<pid>/stat).
fn pgrp(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(2)?.parse().ok()
}

macro_rules! both {
    ($($(#[$meta:meta])* fn $name:ident() $body:block)*) => {
        /// Against `std::process::Command`.
        mod plain {
            use super::*;
            // std's `process_group` is an extension trait's; the driver's is inherent.
            #[allow(unused_imports)]
            use std::os::unix::process::CommandExt as _;
            fn new(program: &str) -> std::process::Command {
                std::process::Command::new(program)
            }
            $($(#[$meta])* #[test] fn $name() $body)*
        }
        /// Against `treeguardian_client::Command` (the guardian under test).
        mod driver {
            use super::*;
            fn new(program: &str) -> treeguardian_client::Command {
                let mut cmd = treeguardian_client::Command::new(program);
                cmd.guardian(common::guardian());
                cmd
            }
            $($(#[$meta])* #[test] fn $name() $body)*
        }
    };
}

both! {
    /// `kill()` then `wait()`: killed by SIGKILL (std: the child; the driver: the provider and
    /// its tree, through the kill request).
    fn kill_status_is_sigkill() {
        let tag = nonce("p-kill");
        let _sweep = Sweep(tag.clone());
        let mut child = new("sh").args(["-c", "read x", &tag]).stdin(Stdio::piped()).spawn().expect("spawn");
        assert!(present_within(&tag, 1, LIMIT));
        child.kill().expect("kill");
        let status = child.wait().expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        assert_eq!(status.code(), None);
        assert!(!status.success());
        // The same status again; a kill after the exit is not an error.
        assert_eq!(child.wait().expect("wait again"), status);
        child.kill().expect("kill after exit");
        gone_within(&tag, LIMIT).expect("nothing left");
    }

    fn a_missing_program_is_not_found_at_spawn() {
        for program in ["/nonexistent/tgc-program", "tgc-no-such-program-on-path"] {
            let err = new(program).spawn().expect_err("spawn");
            assert_eq!(err.kind(), ErrorKind::NotFound, "{program}: {err}");
        }
        let err = new("sh").env("PATH", "/nonexistent").spawn().expect_err("spawn");
        assert_eq!(err.kind(), ErrorKind::NotFound, "the command's PATH: {err}");
    }

    fn a_program_that_is_not_executable_is_permission_denied_at_spawn() {
        for program in ["/etc/passwd", "/tmp"] {
            let err = new(program).spawn().expect_err("spawn");
            assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{program}: {err}");
        }
    }

    fn output_captures_stdout_stderr_and_status() {
        let out = new("sh").args(["-c", "echo out; echo err >&2; exit 3"]).output().expect("output");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        // stdin is null for output(): a reader sees its end at once.
        let out = new("sh").args(["-c", "cat; echo done"]).output().expect("output");
        assert_eq!(out.stdout, b"done\n");
    }

    fn status_is_the_exit_status() {
        assert_eq!(new("sh").args(["-c", "exit 5"]).status().expect("status").code(), Some(5));
        assert!(new("true").status().expect("status").success());
        let status = new("sh").args(["-c", "kill -TERM $$"]).status().expect("status");
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    }

    fn try_wait_is_none_while_running_then_the_status() {
        let tag = nonce("p-trywait");
        let _sweep = Sweep(tag.clone());
        let mut child = new("sh").args(["-c", "read x; exit 7", &tag]).stdin(Stdio::piped()).spawn().expect("spawn");
        assert!(child.try_wait().expect("try_wait").is_none());
        drop(child.stdin.take());
        let end = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < end, "never exited");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(7));
        assert_eq!(child.try_wait().expect("again").map(|s| s.code()), Some(Some(7)));
        assert_eq!(child.wait().expect("wait").code(), Some(7));
    }

    fn stdin_and_stdout_pipes_with_wait_with_output() {
        let mut child = new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn");
        child.stdin.as_mut().expect("stdin").write_all(b"hello").expect("write");
        let out = child.wait_with_output().expect("wait_with_output");
        assert_eq!(out.stdout, b"hello");
        assert!(out.status.success());
    }

    fn environment_and_directory_reach_the_program() {
        let out = new("/usr/bin/env").env_clear().env("FOO", "bar").output().expect("output");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "FOO=bar\n", "only what the command set");
        let out = new("sh").args(["-c", "echo $TGC_X; pwd"]).env("TGC_X", "1").current_dir("/tmp").output().expect("output");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n/tmp\n");
        let out = new("sh").args(["-c", "echo ${HOME-unset}"]).env_remove("HOME").output().expect("output");
        assert_eq!(out.stdout, b"unset\n");
    }

    fn process_group_zero_is_a_group_of_its_own() {
        let tag = nonce("p-pgroup");
        let _sweep = Sweep(tag.clone());
        let mut child = new("sh").args(["-c", "read x; exit 0", &tag]).stdin(Stdio::piped()).process_group(0).spawn().expect("spawn");
        let id = child.id();
        assert_eq!(pgrp(id), i32::try_from(id).ok(), "the started process leads its group");
        drop(child.stdin.take());
        assert!(child.wait().expect("wait").success());
    }
}
