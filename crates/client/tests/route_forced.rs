//! `TREEGUARDIAN_EVENTS_INHERIT` in the host's environment forces the inherited-fd route (for
//! a host whose security module refuses guardian the /proc path). Its own test binary: the
//! variable is the whole process's.

mod common;

use treeguardian_client::Command;

#[test]
fn the_variable_forces_the_inherited_fd() {
    // SAFETY: the only test of this binary, set before anything else reads the environment
    // (libtest's main thread only waits for it meanwhile).
    unsafe { std::env::set_var("TREEGUARDIAN_EVENTS_INHERIT", "1") };
    let mut cmd = Command::new("cat");
    cmd.guardian(common::guardian()).stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    assert!(child.wait_spawned().is_ok());
    let argv = std::fs::read(format!("/proc/{}/cmdline", child.guardian_pid())).expect("guardian's cmdline");
    let text = String::from_utf8_lossy(&argv).replace('\0', " ");
    assert!(text.contains("--events-fd ") && !text.contains("--events-file"), "{text}");
    assert_eq!(child.wait_released().expect("released").status, 0);
}
