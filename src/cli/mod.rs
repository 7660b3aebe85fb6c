//! cli: the command line and the `GUARDIAN_*` environment variables. Every option is defined
//! once, in the option table (`treeguardian_spec::options`: names, variable, kind of value, help,
//! default). `parse.rs` reads argv and the environment by that table into a validated [`Cli`]
//! (or help, or the version); a bad option becomes a one-line error and exit status 125.
//! `values.rs` parses a value of each kind. guardian itself does not link clap (building its
//! `Command` was ~85% of guardian's start-up instructions): the unit tests (`tests.rs`) parse
//! with the clap definition built from the same table and compare, and xtask generates the man
//! page, the completions, the help texts below and `spec/options.json` from it.

use std::ffi::OsString;
use std::time::Duration;

use treeguardian_spec::options::Opt;

mod parse;
#[cfg(test)]
mod tests;
mod values;

pub use parse::{Parsed, parse};
use values::Value;
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

/// guardian's settings: one field per option of the table (set by [`Cli::set`]), with the
/// table's defaults (the unit tests check them against the table's through clap).
#[derive(Debug, PartialEq)]
pub struct Cli {
    pub sub: Option<Sub>,
    pub grace: Duration,
    pub stop_signal: crate::signals::StopSignal,
    pub forward_to: ForwardTo,
    pub events_fd: Option<i32>,
    pub events_file: Option<OsString>,
    pub timeout: Option<Duration>,
    pub wait_descendants: bool,
    pub no_parent_watch: bool,
    pub no_sentinel: bool,
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

/// Every variable guardian reads its settings from (each option's variable in the table).
pub fn env_vars() -> impl Iterator<Item = &'static str> {
    treeguardian_spec::options::env_vars()
}

impl Default for Cli {
    fn default() -> Cli {
        Cli {
            sub: None,
            grace: Duration::from_secs(1),
            stop_signal: crate::signals::StopSignal::TERM,
            forward_to: ForwardTo::Provider,
            events_fd: None,
            events_file: None,
            timeout: None,
            wait_descendants: false,
            no_parent_watch: false,
            no_sentinel: false,
            cgroup: None,
            memory_max: None,
            pids_max: None,
            cpu_max: None,
            verbose: 0,
            quiet: false,
            command: Vec::new(),
        }
    }
}

impl Cli {
    /// Stores an option's value: the one place that knows which field an option sets. The
    /// parser has checked that the value is of the option's kind.
    fn set(&mut self, o: Opt, v: Value) {
        match (o, v) {
            (Opt::Grace, Value::Duration(d)) => self.grace = d,
            (Opt::StopSignal, Value::Signal(s)) => self.stop_signal = s,
            (Opt::ForwardTo, Value::Word(w)) => {
                self.forward_to = if w == "group" { ForwardTo::Group } else { ForwardTo::Provider };
            }
            (Opt::EventsFd, Value::Fd(n)) => self.events_fd = Some(n),
            (Opt::EventsFile, Value::Path(p)) => self.events_file = Some(p),
            // 0 is no timeout, as with coreutils timeout.
            (Opt::Timeout, Value::Duration(d)) => self.timeout = Some(d).filter(|d| !d.is_zero()),
            (Opt::WaitDescendants, Value::Flag(b)) => self.wait_descendants = b,
            (Opt::NoParentWatch, Value::Flag(b)) => self.no_parent_watch = b,
            (Opt::NoSentinel, Value::Flag(b)) => self.no_sentinel = b,
            (Opt::Cgroup, Value::Path(p)) => self.cgroup = Some(p),
            (Opt::MemoryMax, Value::Text(t)) => self.memory_max = Some(t),
            (Opt::PidsMax, Value::Text(t)) => self.pids_max = Some(t),
            (Opt::CpuMax, Value::Text(t)) => self.cpu_max = Some(t),
            (Opt::Verbose, Value::Count(n)) => self.verbose = n,
            (Opt::Quiet, Value::Flag(b)) => self.quiet = b,
            (Opt::SweepCgroup | Opt::DoctorCgroup, Value::Path(p)) => match &mut self.sub {
                Some(Sub::Sweep { cgroup, .. } | Sub::Doctor { cgroup, .. }) => *cgroup = Some(p),
                None => {}
            },
            (Opt::Leaf, Value::Path(p)) => {
                if let Some(Sub::Sweep { leaf, .. }) = &mut self.sub {
                    *leaf = Some(p);
                }
            }
            (Opt::Json, Value::Flag(b)) => {
                if let Some(Sub::Doctor { json, .. }) = &mut self.sub {
                    *json = b;
                }
            }
            // Help and version are printed, never stored; a value of another kind cannot come
            // from the parser (values.rs makes the kind's value).
            _ => {}
        }
    }
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
