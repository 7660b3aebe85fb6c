//! The fallback route: a host that is not dumpable (`PR_SET_DUMPABLE` 0) cannot have its
//! `/proc/<pid>/fd/<n>` opened by guardian, so the crate passes the events pipe as an
//! inherited fd (`--events-fd`, through `pre_exec`). Its own test binary: the setting is the
//! whole process's.

mod common;

use std::time::Duration;

use common::{Sweep, gone_within, guardian, nonce};
use treeguardian_client::Command;

#[test]
fn a_non_dumpable_host_passes_the_events_fd() {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable).expect("prctl");
    let tag = nonce("notdumpable");
    let _sweep = Sweep(tag.clone());
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!("setsid sh -c 'sleep 300; : {tag}' & read x; exit 4")).guardian(guardian());
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    assert!(child.wait_spawned().is_ok());
    let argv = std::fs::read(format!("/proc/{}/cmdline", child.guardian_pid())).expect("guardian's cmdline");
    let text = String::from_utf8_lossy(&argv).replace('\0', " ");
    assert!(text.contains("--events-fd ") && !text.contains("--events-file"), "{text}");
    let released = child.wait_released().expect("released");
    assert_eq!(released.status, 4);
    gone_within(&tag, Duration::from_secs(20)).expect("nothing left");
}
