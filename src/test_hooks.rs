//! test_hooks: the integration tests' hooks into product code, called without any `cfg`. With
//! the `test-hooks` cargo feature (never in a release) they obey `GUARDIAN_TEST_*` environment
//! variables; without it each one is an empty stub the optimiser removes, so the shipped binary
//! reads no such variable. `make test` runs the suite against the shipped configuration first,
//! then only the tests that need these hooks against a `test-hooks` build. The hooks: a pause
//! between a `/proc` scan and its signals (PID-reuse test), a forced full `/proc` listing, a
//! real fault right after start-up's signal step (`GUARDIAN_TEST_FAULT`), a pause just
//! before it (`GUARDIAN_TEST_START_PAUSE_FILE`), and a pause in guardian proper right after it
//! checked that its parent is the sentinel (`GUARDIAN_TEST_SENTINEL_PAUSE_FILE`).

#[cfg(feature = "test-hooks")]
pub use hooks::*;
#[cfg(not(feature = "test-hooks"))]
pub use stubs::*;

#[cfg(feature = "test-hooks")]
mod hooks {
    use std::path::Path;
    use std::time::Duration;

    use crate::events::Events;
    use crate::proctree::Stat;

    /// When `GUARDIAN_TEST_PAUSE_FILE` names an existing file: emits `test-pause` with the pids
    /// just scanned, then waits until the file is removed (so a test can make a scanned pid be
    /// reused inside that window deterministically).
    pub fn pause_after_scan(scanned: &[Stat], events: &mut Events) {
        let Some(path) = std::env::var_os("GUARDIAN_TEST_PAUSE_FILE") else {
            return;
        };
        let path = Path::new(&path);
        if !path.exists() {
            return;
        }
        let pids: Vec<i32> = scanned.iter().map(|s| s.pid).collect();
        // Not a product event (no `Event` variant): its own line, in the stream's shape.
        let ts = crate::sys::monotonic().as_micros() as f64 / 1e6;
        events.emit_test_line(&format!("{{\"event\":\"test-pause\",\"ts\":{ts},\"pids\":{pids:?}}}\n"));
        while path.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// When `GUARDIAN_TEST_START_PAUSE_FILE` names an existing file: creates `FILE.reached`
    /// and waits until the file is removed, just before start-up's signal step (so a test can
    /// send a signal inside guardian's start-up deterministically).
    pub fn pause_before_signal_setup() {
        hold("GUARDIAN_TEST_START_PAUSE_FILE");
    }

    /// When `GUARDIAN_TEST_SENTINEL_PAUSE_FILE` names an existing file: the same, in guardian
    /// proper just after it checked that its parent is the sentinel and before its parent
    /// watch is used (so a test can SIGKILL the sentinel inside that window).
    pub fn pause_behind_sentinel() {
        hold("GUARDIAN_TEST_SENTINEL_PAUSE_FILE");
    }

    /// Creates `FILE.reached` and waits until `FILE` (named by `var`) is removed.
    fn hold(var: &str) {
        let Some(path) = std::env::var_os(var) else {
            return;
        };
        let path = std::path::PathBuf::from(path);
        if !path.exists() {
            return;
        }
        let mut reached = path.clone().into_os_string();
        reached.push(".reached");
        let _ = std::fs::write(&reached, b"");
        while path.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `GUARDIAN_TEST_FULL_SCAN` set: discover descendants by listing all of `/proc` even where
    /// the kernel has the `children` files, so the tests exercise that path on any kernel.
    pub fn forced_full_scan() -> bool {
        std::env::var_os("GUARDIAN_TEST_FULL_SCAN").is_some()
    }

    /// When `GUARDIAN_TEST_FAULT` is set, right after start-up blocked every signal and before the
    /// provider exists: a real fault inside guardian, to show that the blocked mask does not
    /// keep it alive. `overflow` overflows the main thread's stack (a SIGSEGV the kernel forces
    /// through the mask; with the Rust runtime's handler left in place it would print "has
    /// overflowed its stack" and abort instead); `abort` calls `abort()`, what `panic = "abort"`
    /// ends in, which unblocks SIGABRT itself.
    pub fn fault_after_signal_setup() {
        match std::env::var("GUARDIAN_TEST_FAULT").as_deref() {
            Ok("overflow") => {
                crate::log::warn!("test hook: overflowing the stack");
                std::hint::black_box(recurse(0));
            }
            Ok("abort") => {
                crate::log::warn!("test hook: abort()");
                std::process::abort();
            }
            _ => {}
        }
    }

    /// Recursion the optimiser cannot turn into a loop: each frame keeps 4 KiB alive.
    fn recurse(depth: u64) -> u64 {
        if depth == u64::MAX {
            return 0;
        }
        let frame = std::hint::black_box([depth as u8; 4096]);
        frame[usize::from(frame[0]) % 4096] as u64 + recurse(depth + 1)
    }
}

/// The shipped configuration: every hook does nothing.
#[cfg(not(feature = "test-hooks"))]
mod stubs {
    use crate::events::Events;
    use crate::proctree::Stat;

    #[inline(always)]
    pub fn pause_after_scan(_scanned: &[Stat], _events: &mut Events) {}

    #[inline(always)]
    pub fn forced_full_scan() -> bool {
        false
    }

    #[inline(always)]
    pub fn fault_after_signal_setup() {}

    #[inline(always)]
    pub fn pause_before_signal_setup() {}

    #[inline(always)]
    pub fn pause_behind_sentinel() {}
}
