//! The version check (COMMON interface 3): a guardian whose `spawned` event has no `version`,
//! or a lower one than spec/driver.json's `min_guardian_version`, is stopped and refused with
//! an error naming both versions and how to get a matching binary; a newer one is accepted. The
//! guardian here is a stand-in script that writes the events a given version would (it opens
//! the `--events-file` path it is given, as guardian does), and exits on the stop request.

mod common;

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use common::nonce;
use treeguardian_client::{Command, Error, driver};

/// A stand-in guardian reporting `version` (`None`: the field left out, as before 0.2.0).
fn stand_in(version: Option<&str>) -> PathBuf {
    let tag = nonce("fake-guardian");
    let path = std::env::temp_dir().join(format!("{tag}.sh"));
    // (inside the script's double quotes: the JSON quotes escaped)
    let field = version.map(|v| format!(r#",\"version\":\"{v}\""#)).unwrap_or_default();
    let script = format!(
        r#"#!/bin/sh
# {tag}
while [ $# -gt 0 ]; do case "$1" in --events-file) ev=$2; shift 2;; --events-fd) ev=/dev/fd/$2; shift 2;; --) break;; *) shift;; esac; done
exec 9>"$ev"
trap 'echo "{{\"event\":\"released\",\"ts\":2.0,\"status\":143,\"signalled\":0,\"killed\":0,\"reaped\":0,\"teardown_ms\":0.0,\"cgroup\":null,\"oom_kill\":null,\"provider_user_ms\":0.0,\"provider_system_ms\":0.0,\"provider_max_rss_kb\":0,\"tree_user_ms\":0.0,\"tree_system_ms\":0.0,\"tree_max_rss_kb\":0}}" >&9; exit 143' TERM
echo "{{\"event\":\"spawned\",\"ts\":1.0,\"pid\":$$,\"pgid\":$$,\"guardian_pid\":$$,\"mode\":\"subreaper\",\"cgroup\":null{field}}}" >&9
i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
"#
    );
    std::fs::write(&path, script).expect("write the stand-in");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn refused(version: Option<&str>) {
    let fake = stand_in(version);
    let mut child = Command::new("true").guardian(&fake).spawn().expect("spawn");
    match child.wait_spawned() {
        Err(Error::Version { found, min, .. }) => {
            assert_eq!(found.as_deref(), version);
            assert_eq!(min, driver::MIN_GUARDIAN_VERSION);
        }
        other => panic!("expected the version refusal, got {other:?}"),
    }
    // The stand-in got the stop request (it writes `released` and exits 143 on SIGTERM).
    let err = child.wait().expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    let text = err.to_string();
    for needle in [driver::MIN_GUARDIAN_VERSION, version.unwrap_or("before 0.2.0"), "cargo install treeguardian"] {
        assert!(text.contains(needle), "{needle:?} missing in: {text}");
    }
    assert!(child.released().is_some(), "the tree was stopped and released");
    let _ = std::fs::remove_file(fake);
}

#[test]
fn a_guardian_without_a_version_is_refused() {
    refused(None);
}

#[test]
fn an_older_guardian_is_refused() {
    refused(Some("0.1.9"));
}

#[test]
fn a_newer_guardian_is_accepted() {
    let fake = stand_in(Some("0.3.0"));
    let mut child = Command::new("true").guardian(&fake).spawn().expect("spawn");
    assert!(child.wait_spawned().is_ok());
    child.stop().expect("stop");
    let status = child.wait().expect("accepted");
    assert_eq!(status.code(), Some(143));
    let _ = std::fs::remove_file(fake);
}
