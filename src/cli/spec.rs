//! cli::spec: guardian's command line as a clap definition, the *specification* of the
//! runtime parser (`parse.rs`). The guardian binary does not link clap: this file is compiled
//! into guardian's unit tests (clap is a dev-dependency), which check that `parse.rs` and this
//! definition agree on every command line and environment they generate and that the help
//! texts guardian prints are clap's rendering of it, and into xtask, which generates the man
//! page, the shell completions and those help texts (`man/help/`) from it.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};

use super::values::{parse_cpu, parse_duration, parse_memory, parse_pids, parse_signal};

/// Where forwarded signals go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ForwardTo {
    /// The provider process only (through its pidfd).
    Provider,
    /// The provider's process group (safe while the unreaped provider pins the pgid).
    Group,
}

const AFTER_HELP: &str = "\
Exit status: the provider's exit code; when signal N killed it, guardian dies of N too (a
shell's $? is 128+N; as PID 1 it exits 128+N); 124 when --timeout fired; 125 guardian's own
failure; 126 COMMAND not executable; 127 COMMAND not found.

Events (--events-fd N): JSON Lines with `event` and a monotonic `ts`: spawned, stopping,
signal, exit, released (always last; exit always before it), error, fallback.

cgroup mode (--cgroup auto|PATH): the provider starts in a fresh leaf guardian-<pid>-<start>
below a delegated cgroup v2 directory; teardown ends with cgroup.kill and the leaf is removed.
With auto and no delegated cgroup, guardian runs as a plain subreaper. `guardian sweep` removes
the leaves of guardians that were killed, never one whose guardian lives.

Examples:
  guardian -- npx -y some-mcp-server
  guardian --grace 5s --events-fd 3 -- ./provider 3>events.jsonl
  guardian --timeout 10m --stop-signal INT -- make test
  guardian --cgroup auto --pids-max 512 -- ./provider";

/// A process-tree guardian: runs COMMAND as a subreaper's child and, when it exits, stops
/// and reaps every process it left behind before exiting with its status.
#[derive(Parser, Debug)]
#[command(
    name = "guardian",
    version,
    about = "Run a command; when it exits, stop and reap every process it left behind, then exit with its status.",
    long_about = "guardian becomes a child subreaper before COMMAND exists, so every orphan of the \
command's tree (double-forked, setsid, environment-clearing) is reparented to it. When the command \
exits (or guardian is told to stop, times out, or its parent dies), guardian sends the stop signal \
to every remaining descendant, waits up to the grace period, SIGKILLs the rest, reaps until no child \
remains, and only then exits with the command's status.",
    after_help = AFTER_HELP,
    subcommand_negates_reqs = true,
    disable_help_subcommand = true,
    override_usage = "guardian [OPTIONS] [--] COMMAND [ARGS]...\n       guardian sweep [--cgroup PATH | --leaf LEAF]\n       guardian doctor [--json] [--cgroup auto|PATH]",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub sub: Option<Sub>,

    /// Time between the stop signal and SIGKILL (e.g. 0, 500ms, 10s, 1.5s, 1m; bare number = seconds).
    #[arg(short = 'g', long, env = "GUARDIAN_GRACE", default_value = "1s", value_name = "DURATION",
          value_parser = parse_duration)]
    pub grace: Duration,

    /// Signal sent to the tree to stop it (name or number: TERM, INT, HUP, 15, RTMIN+2); receiving
    /// it is a stop request, like SIGTERM. Not KILL (use --grace 0), STOP, CONT, CHLD, TSTP, TTIN
    /// or TTOU.
    #[arg(short = 's', long, env = "GUARDIAN_STOP_SIGNAL", default_value = "TERM", value_name = "SIG",
          value_parser = parse_signal)]
    pub stop_signal: i32,

    /// Where signals guardian receives are forwarded.
    #[arg(long, env = "GUARDIAN_FORWARD_TO", value_enum, default_value_t = ForwardTo::Provider,
          value_name = "TARGET")]
    pub forward_to: ForwardTo,

    /// Write JSON Lines events to this inherited file descriptor (never passed on to COMMAND).
    #[arg(long, env = "GUARDIAN_EVENTS_FD", value_name = "N",
          value_parser = clap::value_parser!(i32).range(0..))]
    pub events_fd: Option<i32>,

    /// Stop the tree after this long and exit 124 (as coreutils timeout).
    #[arg(short = 't', long, env = "GUARDIAN_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// After COMMAND exits, let its descendants finish on their own instead of stopping them
    /// (parent death, --timeout and SIGTERM still stop them).
    #[arg(short = 'w', long, env = "GUARDIAN_WAIT_DESCENDANTS", action = ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub wait_descendants: bool,

    /// Do not tear the tree down when guardian's parent process dies.
    #[arg(long, env = "GUARDIAN_NO_PARENT_WATCH", action = ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub no_parent_watch: bool,

    /// Start the provider in a fresh leaf cgroup: `auto` (guardian's own cgroup, if delegated to
    /// this user; otherwise plain subreaper mode) or the path of a delegated cgroup v2 directory.
    #[arg(long, env = "GUARDIAN_CGROUP", value_name = "auto|PATH")]
    pub cgroup: Option<OsString>,

    /// Limit the leaf's memory (memory.max: bytes or 512M, 2G, max). Needs --cgroup and a
    /// delegated memory controller; an OOM kill is reported in the `released` event.
    #[arg(long, env = "GUARDIAN_MEMORY_MAX", value_name = "SIZE", value_parser = parse_memory)]
    pub memory_max: Option<String>,

    /// Limit the number of processes in the leaf (pids.max). Needs --cgroup and a delegated pids controller.
    #[arg(long, env = "GUARDIAN_PIDS_MAX", value_name = "N", value_parser = parse_pids)]
    pub pids_max: Option<String>,

    /// Limit the leaf's CPU time (cpu.max): CPUs (0.5, 2) or "QUOTA PERIOD" in microseconds.
    /// Needs --cgroup and a delegated cpu controller.
    #[arg(long, env = "GUARDIAN_CPU_MAX", value_name = "CPUS", value_parser = parse_cpu)]
    pub cpu_max: Option<String>,

    /// Log what guardian does to stderr, prefixed "guardian:" (repeat for more; env GUARDIAN_VERBOSE=0..3).
    #[arg(short = 'v', long, action = ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Print only fatal errors.
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// The provider command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Subcommands. A provider named like one of them must follow `--`.
#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Find leaf cgroups whose guardian has died, kill their processes and remove them.
    Sweep {
        /// The delegated cgroup directory to sweep (default: guardian's own cgroup).
        #[arg(long, env = "GUARDIAN_CGROUP", value_name = "PATH")]
        cgroup: Option<OsString>,
        /// Only this leaf (the path the `spawned` event names): kill what is left in it (also a
        /// process cgroup.kill misses) and remove it, unless its guardian lives (then exit 1).
        #[arg(long, value_name = "LEAF", conflicts_with = "cgroup")]
        leaf: Option<OsString>,
    },
    /// Check which of guardian's guarantees hold on this machine, and in which mode it would run.
    Doctor {
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// The --cgroup setting to evaluate.
        #[arg(long, value_name = "auto|PATH")]
        cgroup: Option<OsString>,
    },
}
