//! driver: what every driver shares, generated from spec/driver.json by tests/generated.rs
//! (`GUARDIAN_BLESS=1 cargo test -p treeguardian-client --test generated`). Do not edit: a
//! stale copy fails that test.

/// The one environment variable naming the guardian binary.
pub const BINARY_VARIABLE: &str = "GUARDIAN_BIN";
/// The oldest guardian this crate drives (`spawned.version`).
pub const MIN_GUARDIAN_VERSION: &str = "0.2.0";
/// The event and field carrying guardian's version.
pub const VERSION_EVENT: &str = "spawned";
pub const VERSION_FIELD: &str = "version";
/// The longest wait, in seconds, for guardian to block SIGTERM before a stop or kill request.
pub const READY_WAIT_SECONDS: u64 = 5;
/// The kill request: this variable in guardian's environment names the signal...
pub const KILL_SIGNAL_VARIABLE: &str = "GUARDIAN_KILL_SIGNAL";
/// ... also settable as this option ...
pub const KILL_SIGNAL_OPTION: &str = "kill-signal";
/// ... by this name ...
pub const KILL_SIGNAL: &str = "RTMAX";
/// ... whose number the driver sends to the pid it started.
pub const KILL_SIGNAL_NUMBER: i32 = 64;
/// The stop request: this signal, once.
pub const STOP_SIGNAL: &str = "TERM";
pub const STOP_SIGNAL_NUMBER: i32 = 15;
/// Durations are rounded up to this many nanoseconds...
pub const DURATION_RESOLUTION_NS: u64 = 1;
/// ... and refused above this many seconds.
pub const DURATION_MAX_SECONDS: u64 = 18446744073;
