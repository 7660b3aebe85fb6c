//! Shared by the client's tests: the guardian binary under test, nonces, and /proc scans.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The guardian under test: `$GUARDIAN_BIN`, else the workspace's `target/<profile>/guardian`
/// (`cargo test --workspace` builds it). When that is missing (`cargo test -p
/// treeguardian-client` on a fresh checkout), it is built once with `cargo build -p treeguardian`.
pub fn guardian() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("GUARDIAN_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("current_exe");
        // target/<profile>/deps/<test> → target/<profile>/guardian
        let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir").to_path_buf();
        let bin = profile_dir.join("guardian");
        if !bin.is_file() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = std::process::Command::new(cargo);
            build.args(["build", "--package", "treeguardian", "--bin", "guardian"]);
            if profile_dir.ends_with("release") {
                build.arg("--release");
            }
            let status =
                build.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).status().expect("cargo build");
            assert!(status.success(), "cargo build -p treeguardian failed");
        }
        assert!(bin.is_file(), "{} missing: run `cargo build -p treeguardian` (or set GUARDIAN_BIN)", bin.display());
        bin
    })
    .clone()
}

/// A tag unique to this test run and call, put in the argv of every process a test starts.
pub fn nonce(label: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("tgc-{label}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Live (non-zombie) processes whose argv contains `tag`.
pub fn tagged(tag: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if !String::from_utf8_lossy(&cmdline).contains(tag) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, r)| r.chars().next().unwrap_or('?'));
        if state != Some('Z') {
            out.push(pid);
        }
    }
    out
}

/// Waits (up to `limit`) until no process carries `tag`; the survivors otherwise.
pub fn gone_within(tag: &str, limit: Duration) -> Result<(), Vec<i32>> {
    let end = Instant::now() + limit;
    loop {
        let left = tagged(tag);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to `limit`) until `n` processes carry `tag`.
pub fn present_within(tag: &str, n: usize, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if tagged(tag).len() >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Kills whatever still carries `tag` (cleanup after a failed assertion; never by name).
pub struct Sweep(pub String);
impl Drop for Sweep {
    fn drop(&mut self) {
        for pid in tagged(&self.0) {
            // SIGKILL only to a process this test tagged; pid just read from /proc.
            let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        }
    }
}
