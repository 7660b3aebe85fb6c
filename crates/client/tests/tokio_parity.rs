//! tokio's process-API expectations, run side by side: every test below runs once against
//! `tokio::process::Command` (module `plain`) and once against
//! `treeguardian_client::tokio::Command` (module `driver`), with the same body: kill status,
//! start_kill, spawn errors, try_wait, id, output, status, a wait cancelled by a timeout and
//! resumed, wait in `select!`, kill_on_drop, and `From<std::process::Command>` /
//! `From<tokio::process::Command>` for the driver.

mod common;

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use common::{Sweep, gone_within, nonce, present_within};
use tokio::io::AsyncWriteExt;

const LIMIT: Duration = Duration::from_secs(20);

macro_rules! both {
    ($($(#[$meta:meta])* async fn $name:ident() $body:block)*) => {
        /// Against `tokio::process::Command`.
        mod plain {
            use super::*;
            fn new(program: &str) -> tokio::process::Command {
                tokio::process::Command::new(program)
            }
            $($(#[$meta])* #[tokio::test] async fn $name() $body)*
        }
        /// Against `treeguardian_client::tokio::Command` (the guardian under test).
        mod driver {
            use super::*;
            fn new(program: &str) -> treeguardian_client::tokio::Command {
                let mut cmd = treeguardian_client::tokio::Command::new(program);
                cmd.guardian(common::guardian());
                cmd
            }
            $($(#[$meta])* #[tokio::test] async fn $name() $body)*
        }
    };
}

both! {
    /// `kill().await`: SIGKILL, and `id()` is `None` once reaped.
    async fn kill_status_is_sigkill() {
        let tag = nonce("t-kill");
        let _sweep = Sweep(tag.clone());
        let mut child = new("sh").args(["-c", "read x", &tag]).stdin(Stdio::piped()).spawn().expect("spawn");
        assert!(child.id().is_some());
        assert!(present_within(&tag, 1, LIMIT));
        child.kill().await.expect("kill");
        let status = child.wait().await.expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        assert_eq!(child.id(), None);
        child.start_kill().expect("start_kill after the exit is not an error");
        gone_within(&tag, LIMIT).expect("nothing left");
    }

    /// `start_kill()`, then a wait cancelled by a timeout, then the wait again.
    async fn a_cancelled_wait_resumes() {
        let tag = nonce("t-timeout");
        let _sweep = Sweep(tag.clone());
        let mut child = new("sh").args(["-c", "read x", &tag]).stdin(Stdio::piped()).spawn().expect("spawn");
        let stdin = child.stdin.take();
        assert!(tokio::time::timeout(Duration::from_millis(100), child.wait()).await.is_err(), "still running");
        assert!(child.try_wait().expect("try_wait").is_none());
        child.start_kill().expect("start_kill");
        let status = tokio::time::timeout(LIMIT, child.wait()).await.expect("exits").expect("wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        assert_eq!(child.try_wait().expect("try_wait").map(|s| s.signal()), Some(Some(libc::SIGKILL)));
        drop(stdin);
        gone_within(&tag, LIMIT).expect("nothing left");
    }

    async fn a_missing_program_is_not_found_at_spawn() {
        let err = new("/nonexistent/tgc-program").spawn().expect_err("spawn");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        let err = new("/etc/passwd").spawn().expect_err("spawn");
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    }

    async fn output_and_status() {
        let out = new("sh").args(["-c", "echo out; echo err >&2; exit 3"]).output().await.expect("output");
        assert_eq!((out.status.code(), &out.stdout[..], &out.stderr[..]), (Some(3), &b"out\n"[..], &b"err\n"[..]));
        assert_eq!(new("sh").args(["-c", "exit 5"]).status().await.expect("status").code(), Some(5));
    }

    async fn stdin_stdout_and_wait_with_output() {
        let mut child = new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn");
        child.stdin.as_mut().expect("stdin").write_all(b"hello").await.expect("write");
        drop(child.stdin.take());
        let out = child.wait_with_output().await.expect("wait_with_output");
        assert_eq!(out.stdout, b"hello");
    }

    /// `wait(&mut self)` in a `select!` whose other branch uses the child too (after the
    /// select): the shape that needs `&mut self`.
    async fn wait_in_select() {
        let mut child = new("sh").args(["-c", "read x; exit 4"]).stdin(Stdio::piped()).spawn().expect("spawn");
        // (wait() closes the child's stdin: keep it open while the first wait is cancelled)
        let stdin = child.stdin.take();
        tokio::select! {
            _ = child.wait() => panic!("still reading"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        drop(stdin);
        let status = tokio::select! {
            status = child.wait() => status.expect("wait"),
            _ = tokio::time::sleep(LIMIT) => panic!("no exit"),
        };
        assert_eq!(status.code(), Some(4));
    }

    /// tokio's `kill_on_drop(true)`: a dropped child is killed (the driver: the whole tree).
    async fn kill_on_drop_kills() {
        let tag = nonce("t-kod");
        let _sweep = Sweep(tag.clone());
        let mut cmd = new("sh");
        cmd.args(["-c", "read x", &tag]).stdin(Stdio::piped()).kill_on_drop(true);
        assert!(cmd.get_kill_on_drop());
        let child = cmd.spawn().expect("spawn");
        assert!(present_within(&tag, 1, LIMIT));
        drop(child);
        gone_within(&tag, LIMIT).expect("killed on drop");
    }
}

/// The driver from a host's existing commands: program, args, environment (a cleared one
/// too), directory and process group carry over.
mod from_commands {
    use super::*;

    #[tokio::test]
    async fn from_tokio_and_std_commands() {
        let mut tokio_cmd = tokio::process::Command::new("/usr/bin/env");
        tokio_cmd.env_clear().env("FOO", "bar").current_dir("/tmp").process_group(0).kill_on_drop(true);
        let mut cmd = treeguardian_client::tokio::Command::from(tokio_cmd);
        assert!(cmd.get_kill_on_drop());
        assert_eq!(cmd.get_current_dir(), Some(std::path::Path::new("/tmp")));
        cmd.guardian(common::guardian());
        let out = cmd.output().await.expect("output");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "FOO=bar\n", "env_clear() carried over");

        let mut std_cmd = std::process::Command::new("sh");
        std_cmd.args(["-c", "echo $TGC_Y; pwd"]).env("TGC_Y", "y").env_remove("HOME").current_dir("/tmp");
        let mut cmd = treeguardian_client::Command::from(std_cmd);
        assert_eq!(cmd.get_args().count(), 2);
        cmd.guardian(common::guardian());
        let out = cmd.output().expect("output");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "y\n/tmp\n");
    }
}
