//! test_hooks: only with the `test-hooks` cargo feature (off by default, never in a release).
//! A pause between a `/proc` scan and the signals that follow it, so the integration tests can
//! make a scanned pid be reused inside that window deterministically.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::events::Events;
use crate::proctree::Stat;

/// When `GUARDIAN_TEST_PAUSE_FILE` names an existing file: emits `test-pause` with the pids
/// just scanned, then waits until the file is removed.
pub fn pause_after_scan(scanned: &[Stat], events: &mut Events) {
    let Some(path) = std::env::var_os("GUARDIAN_TEST_PAUSE_FILE") else {
        return;
    };
    let path = Path::new(&path);
    if !path.exists() {
        return;
    }
    let pids: Vec<i32> = scanned.iter().map(|s| s.pid).collect();
    events.emit("test-pause", json!({ "pids": pids }));
    while path.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
}
