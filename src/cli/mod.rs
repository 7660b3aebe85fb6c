//! cli: the command line and the `GUARDIAN_*` environment variables. Every option is defined
//! once, in the option table (`treeguardian_spec::options`: names, variable, kind of value, help,
//! default). `parse.rs` reads argv and the environment by that table into a validated [`Cli`]
//! (or help, or the version); a bad option becomes a one-line error and exit status 125.
//! `values.rs` parses a value of each kind; `fields.rs` binds each option to its field of
//! [`Cli`], with the table's default, in one row per option. guardian itself does not link clap (building its
//! `Command` was ~85% of guardian's start-up instructions): the unit tests (`tests.rs`) parse
//! with the clap definition built from the same table and compare, and xtask generates the man
//! page, the completions, the help texts below and `spec/options.json` from it.

use std::ffi::OsString;

mod fields;
mod parse;
#[cfg(test)]
mod tests;
mod values;

pub use fields::Cli;
pub use parse::{Parsed, parse};
#[cfg(test)]
pub use values::parse_duration;

/// Subcommands. A provider named like one of them must follow `--` (or an option).
#[derive(Clone, Debug, PartialEq)]
pub enum Sub {
    Sweep { cgroup: Option<OsString>, leaf: Option<OsString> },
    Doctor { json: bool, cgroup: Option<OsString> },
}

/// Every variable guardian reads its settings from (each option's variable in the table).
pub fn env_vars() -> impl Iterator<Item = &'static str> {
    treeguardian_spec::options::env_vars()
}

/// The help texts, clap's renderings of the option table written by `xtask man` (`make man`); the
/// unit tests fail when they are stale. `-h` prints the short one, `--help` the long one (the
/// subcommands have one rendering for both, as with clap). `[env: NAME=]` is completed with the
/// variable's value when printed (`parse::with_env_values`), as clap did.
pub mod help {
    pub const MAIN: &str = include_str!("../../man/help/guardian.txt");
    pub const MAIN_LONG: &str = include_str!("../../man/help/guardian.long.txt");
    pub const SWEEP: &str = include_str!("../../man/help/guardian-sweep.txt");
    pub const DOCTOR: &str = include_str!("../../man/help/guardian-doctor.txt");
}

/// `guardian --version`: `guardian 0.2.0 (<commit> <target>)`, the commit and target from build.rs
/// (`unknown` for a build outside git). Drivers read the version from the `spawned` event instead.
pub const VERSION: &str = concat!("guardian ", env!("CARGO_PKG_VERSION"), " (", env!("GUARDIAN_BUILD_INFO"), ")\n");

/// Log verbosity: 0 quiet (fatal only), 1 warnings (default), 2 info (-v), 3 debug (-vv), 4 (-vvv).
pub fn verbosity(cli: &Cli) -> u8 {
    if cli.quiet { 0 } else { 1 + cli.verbose.min(3) }
}
