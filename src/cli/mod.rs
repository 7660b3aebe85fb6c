//! cli: the command line and the `GUARDIAN_*` environment variables. `parse.rs` turns argv
//! and the environment into a validated [`Cli`] (or help, or the version); a bad option becomes
//! a one-line error and exit status 125. `values.rs` parses option values (durations, signals,
//! limits). `spec.rs` is the clap definition these follow: guardian itself does not link clap
//! (building its `Command` was ~85% of guardian's start-up instructions); its unit tests check
//! the parser against the definition, and xtask generates the man page, the completions and the
//! help texts below from it.

use std::ffi::OsString;
use std::time::Duration;

mod parse;
#[cfg(test)]
mod spec;
#[cfg(test)]
mod tests;
mod values;

pub use parse::{Parsed, parse};
#[cfg(test)]
pub use values::parse_duration;

/// Where forwarded signals go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardTo {
    /// The provider process only (through its pidfd).
    Provider,
    /// The provider's process group (safe while the unreaped provider pins the pgid).
    Group,
}

/// guardian's settings, as `spec::Cli` defines them (same fields, same meaning).
#[derive(Debug, PartialEq)]
pub struct Cli {
    pub sub: Option<Sub>,
    pub grace: Duration,
    pub stop_signal: crate::signals::StopSignal,
    pub forward_to: ForwardTo,
    pub events_fd: Option<i32>,
    pub timeout: Option<Duration>,
    pub wait_descendants: bool,
    pub no_parent_watch: bool,
    pub cgroup: Option<OsString>,
    pub memory_max: Option<String>,
    pub pids_max: Option<String>,
    pub cpu_max: Option<String>,
    pub verbose: u8,
    pub quiet: bool,
    pub command: Vec<OsString>,
}

/// Subcommands. A provider named like one of them must follow `--` (or an option).
#[derive(Debug, PartialEq)]
pub enum Sub {
    Sweep { cgroup: Option<OsString>, leaf: Option<OsString> },
    Doctor { json: bool, cgroup: Option<OsString> },
}

/// Every variable guardian reads its settings from: each option's `env` in `spec.rs` (a unit
/// test checks the list against it), and `GUARDIAN_VERBOSE`. Sorted, one string (a table of
/// `&str` would be relocated at every start, see parse.rs).
const ENV_VARS: &str = "GUARDIAN_CGROUP GUARDIAN_CPU_MAX GUARDIAN_EVENTS_FD GUARDIAN_FORWARD_TO GUARDIAN_GRACE \
GUARDIAN_MEMORY_MAX GUARDIAN_NO_PARENT_WATCH GUARDIAN_PIDS_MAX GUARDIAN_STOP_SIGNAL GUARDIAN_TIMEOUT GUARDIAN_VERBOSE \
GUARDIAN_WAIT_DESCENDANTS";

/// The variables of [`ENV_VARS`].
pub fn env_vars() -> impl Iterator<Item = &'static str> {
    ENV_VARS.split(' ')
}

/// The help texts, clap's renderings of `spec.rs` written by `xtask man` (`make man`); the
/// unit tests fail when they are stale. `-h` prints the short one, `--help` the long one (the
/// subcommands have one rendering for both, as with clap). `[env: NAME=]` is completed with the
/// variable's value when printed (`parse::with_env_values`), as clap did.
pub mod help {
    pub const MAIN: &str = include_str!("../../man/help/guardian.txt");
    pub const MAIN_LONG: &str = include_str!("../../man/help/guardian.long.txt");
    pub const SWEEP: &str = include_str!("../../man/help/guardian-sweep.txt");
    pub const DOCTOR: &str = include_str!("../../man/help/guardian-doctor.txt");
}

/// `guardian --version`.
pub const VERSION: &str = concat!("guardian ", env!("CARGO_PKG_VERSION"), "\n");

/// Log verbosity: 0 quiet (fatal only), 1 warnings (default), 2 info (-v), 3 debug (-vv).
/// `env` looks up `GUARDIAN_VERBOSE` (0 to 3).
pub fn verbosity(cli: &Cli, env: &dyn Fn(&str) -> Option<OsString>) -> u8 {
    if cli.quiet {
        return 0;
    }
    let from_env = env("GUARDIAN_VERBOSE").and_then(|v| v.to_str()?.parse::<u8>().ok()).unwrap_or(0);
    1 + cli.verbose.max(from_env).min(3)
}
