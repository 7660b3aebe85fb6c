//! `src/driver.rs` is what spec/driver.json says now: the crate's constants shared with the
//! other drivers (binary variable, minimum guardian, ready wait, kill and stop requests,
//! duration rule) are generated from it, never copied. A stale file fails here;
//! `GUARDIAN_BLESS=1 cargo test -p treeguardian-client --test generated` rewrites it.
//! Also: the duration the crate refuses is refused by guardian with the same message.

mod common;

use std::path::Path;

fn generate(spec: &serde_json::Value) -> String {
    let s = |v: &serde_json::Value| -> String {
        let text = v.as_str().unwrap_or_else(|| panic!("spec/driver.json: {v} is not a string"));
        format!("{text:?}")
    };
    let n =
        |v: &serde_json::Value| -> u64 { v.as_u64().unwrap_or_else(|| panic!("spec/driver.json: {v} is not a count")) };
    let kill = &spec["kill_request"];
    let stop = &spec["stop_request"];
    let duration = &spec["duration"];
    format!(
        "//! driver: what every driver shares, generated from spec/driver.json by tests/generated.rs
//! (`GUARDIAN_BLESS=1 cargo test -p treeguardian-client --test generated`). Do not edit: a
//! stale copy fails that test.

/// The one environment variable naming the guardian binary.
pub const BINARY_VARIABLE: &str = {};
/// The oldest guardian this crate drives (`spawned.version`).
pub const MIN_GUARDIAN_VERSION: &str = {};
/// The event and field carrying guardian's version.
pub const VERSION_EVENT: &str = {};
pub const VERSION_FIELD: &str = {};
/// The longest wait, in seconds, for guardian to block SIGTERM before a stop or kill request.
pub const READY_WAIT_SECONDS: u64 = {};
/// The kill request: this variable in guardian's environment names the signal...
pub const KILL_SIGNAL_VARIABLE: &str = {};
/// ... also settable as this option ...
pub const KILL_SIGNAL_OPTION: &str = {};
/// ... by this name ...
pub const KILL_SIGNAL: &str = {};
/// ... whose number the driver sends to the pid it started.
pub const KILL_SIGNAL_NUMBER: i32 = {};
/// The stop request: this signal, once.
pub const STOP_SIGNAL: &str = {};
pub const STOP_SIGNAL_NUMBER: i32 = {};
/// Durations are rounded up to this many nanoseconds...
pub const DURATION_RESOLUTION_NS: u64 = {};
/// ... and refused above this many seconds.
pub const DURATION_MAX_SECONDS: u64 = {};
",
        s(&spec["binary_variable"]),
        s(&spec["min_guardian_version"]),
        s(&spec["version_field"]["event"]),
        s(&spec["version_field"]["field"]),
        n(&spec["ready_wait_seconds"]),
        s(&kill["variable"]),
        s(&kill["option"]),
        s(&kill["signal"]),
        n(&kill["number"]),
        s(&stop["signal"]),
        n(&stop["number"]),
        n(&duration["resolution_ns"]),
        n(&duration["max_seconds"]),
    )
}

#[test]
fn driver_rs_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(json) = std::fs::read_to_string(root.join("../../spec/driver.json")) else {
        // (a packaged crate has no spec/: the check is the repository's)
        let line = "SKIPPED: driver_rs_is_current: spec/driver.json is not beside this crate\n";
        print!("{line}");
        if let Some(log) = std::env::var_os("GUARDIAN_TEST_SKIP_LOG") {
            use std::io::Write;
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map(|mut f| f.write_all(line.as_bytes()));
        }
        return;
    };
    let spec: serde_json::Value = serde_json::from_str(&json).expect("spec/driver.json is JSON");
    let want = generate(&spec);
    let path = root.join("src/driver.rs");
    if std::env::var_os("GUARDIAN_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write src/driver.rs");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "crates/client/src/driver.rs is stale: run `GUARDIAN_BLESS=1 cargo test -p treeguardian-client --test generated` and commit it"
    );
}

/// A duration above guardian's maximum is the spawn's `InvalidInput`, with the message guardian
/// itself prints for that value (checked against the binary), and nothing starts.
#[test]
fn a_duration_guardian_refuses_is_refused_with_its_message() {
    let too_long = std::time::Duration::from_nanos(u64::MAX) + std::time::Duration::from_nanos(1);
    let mut cmd = treeguardian_client::Command::new("true");
    cmd.guardian(common::guardian()).grace(too_long);
    let err = cmd.spawn().expect_err("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let out = std::process::Command::new(common::guardian())
        .args(["--grace", &format!("{}ns", too_long.as_nanos()), "--", "true"])
        .output()
        .expect("guardian");
    assert_eq!(out.status.code(), Some(125));
    let guardians = String::from_utf8_lossy(&out.stderr);
    assert!(guardians.contains(&err.to_string()), "guardian says {guardians:?}, the crate {err}");
}
