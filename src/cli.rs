//! cli: the command line (clap derive), `GUARDIAN_*` environment variables, and the parsers
//! for durations and signals. Turns argv into a validated [`Options`]; a bad option becomes a
//! one-line error and exit status 125.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};

use crate::signals;

/// Where forwarded signals go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ForwardTo {
    /// The provider process only (through its pidfd).
    Provider,
    /// The provider's process group (safe while the unreaped provider pins the pgid).
    Group,
}

const AFTER_HELP: &str = "\
Exit status: the provider's exit code, or 128+N when signal N killed it; 124 when --timeout
fired; 125 guardian's own failure; 126 COMMAND not executable; 127 COMMAND not found.

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

/// Parses `0`, `500ms`, `10s`, `1.5s`, `1m`, `2h`, `250us`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration '{text}': use a number with a unit such as 500ms, 10s or 1m (a bare number is seconds)"
        )
    };
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1 {
        return Err(bad());
    }
    let nanos_per: u128 = match unit {
        "" | "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "ns" => 1,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(bad()),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let int: u128 = int.parse().map_err(|_| bad())?;
    let mut nanos = int.checked_mul(nanos_per).ok_or_else(bad)?;
    let mut scale = nanos_per;
    for d in frac.bytes() {
        scale /= 10;
        nanos = nanos.checked_add(u128::from(d - b'0') * scale).ok_or_else(bad)?;
    }
    if nanos > u128::from(u64::MAX) {
        return Err(bad());
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// `--memory-max`: `max` or bytes with an optional K/M/G/T suffix (powers of 1024).
pub fn parse_memory(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t == "max" {
        return Ok(t.into());
    }
    let bad = || format!("invalid memory size '{text}': use bytes or a K, M, G or T suffix (e.g. 512M), or max");
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(bad()),
            };
            (&t[..i], mul)
        }
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(mul).map(|v| v.to_string()).ok_or_else(bad)
}

/// `--pids-max`: `max` or a positive count.
pub fn parse_pids(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t == "max" || t.parse::<u64>().is_ok_and(|n| n > 0) {
        Ok(t.into())
    } else {
        Err(format!("invalid process count '{text}': use a positive number or max"))
    }
}

/// `--cpu-max`: cgroup syntax `QUOTA [PERIOD]` in microseconds (`max` for no quota), or a
/// number of CPUs such as `0.5` or `2` (period 100ms).
pub fn parse_cpu(text: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "invalid CPU limit '{text}': use a number of CPUs (0.5, 2) or 'QUOTA PERIOD' in microseconds (50000 100000)"
        )
    };
    let parts: Vec<&str> = text.split_whitespace().collect();
    match parts.as_slice() {
        [q, p] => {
            let period: u64 = p.parse().map_err(|_| bad())?;
            if !(1000..=1_000_000).contains(&period) || !(*q == "max" || q.parse::<u64>().is_ok_and(|v| v >= 1000)) {
                return Err(bad());
            }
            Ok(format!("{q} {period}"))
        }
        ["max"] => Ok("max 100000".into()),
        [cpus] => {
            let v: f64 = cpus.parse().map_err(|_| bad())?;
            if !(v.is_finite() && v > 0.0 && v <= 4096.0) {
                return Err(bad());
            }
            let quota = ((v * 100_000.0).round() as u64).max(1000);
            Ok(format!("{quota} 100000"))
        }
        _ => Err(bad()),
    }
}

/// The stop signal must be one that can end a process and that guardian does not give another
/// meaning: SIGCHLD is guardian's own wake-up, SIGCONT and the job-control stops are job
/// control, SIGSTOP cannot be caught, and SIGKILL is what the grace ends in (`--grace 0`).
fn parse_signal(text: &str) -> Result<i32, String> {
    let sig = signals::parse(text)?;
    match sig {
        libc::SIGKILL => Err(
            "SIGKILL cannot be the stop signal: it is what the grace period ends in; use --grace 0 to send it at once"
                .into(),
        ),
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU | libc::SIGCONT => Err(format!(
            "{} cannot be the stop signal: it stops or continues a process instead of ending it (job control); use TERM, INT, QUIT, HUP or USR1",
            signals::name(sig)
        )),
        libc::SIGCHLD => {
            Err("SIGCHLD cannot be the stop signal: guardian reads it to reap; use TERM, INT, QUIT, HUP or USR1".into())
        }
        _ => Ok(sig),
    }
}

/// Log verbosity: 0 quiet (fatal only), 1 warnings (default), 2 info (-v), 3 debug (-vv).
pub fn verbosity(cli: &Cli) -> u8 {
    if cli.quiet {
        return 0;
    }
    let from_env = std::env::var("GUARDIAN_VERBOSE").ok().and_then(|v| v.parse::<u8>().ok()).unwrap_or(0);
    1 + cli.verbose.max(from_env).min(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_that_cannot_end_a_process_are_refused() {
        for bad in ["KILL", "STOP", "TSTP", "TTIN", "TTOU", "CONT", "CHLD", "9", "SIGCHLD"] {
            let err = parse_signal(bad).expect_err(bad);
            assert!(err.contains("cannot be the stop signal"), "{bad}: {err}");
        }
        for good in ["TERM", "INT", "QUIT", "HUP", "USR1", "RTMIN+2", "15"] {
            assert!(parse_signal(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0.25m"), Ok(Duration::from_secs(15)));
        for bad in ["", "s", "-1s", "1x", "1.s", ".5s", "1..2s", "1 s", "99999999999999999999h", "1e3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn limits() {
        assert_eq!(parse_memory("512M").as_deref(), Ok("536870912"));
        assert_eq!(parse_memory("max").as_deref(), Ok("max"));
        assert_eq!(parse_memory("1000").as_deref(), Ok("1000"));
        assert!(parse_memory("12X").is_err() && parse_memory("").is_err() && parse_memory("-1").is_err());
        assert_eq!(parse_pids("64").as_deref(), Ok("64"));
        assert!(parse_pids("0").is_err());
        assert_eq!(parse_cpu("0.5").as_deref(), Ok("50000 100000"));
        assert_eq!(parse_cpu("50000 100000").as_deref(), Ok("50000 100000"));
        assert_eq!(parse_cpu("max").as_deref(), Ok("max 100000"));
        assert!(parse_cpu("fast").is_err() && parse_cpu("0").is_err() && parse_cpu("5 100000").is_err());
    }

    #[test]
    fn command_line_shapes() {
        let cli = Cli::try_parse_from(["guardian", "-v", "sleep", "-v", "1"]).unwrap();
        assert_eq!(cli.verbose, 1);
        assert_eq!(cli.command, ["sleep", "-v", "1"]);
        let cli = Cli::try_parse_from(["guardian", "--grace", "0", "--", "-weird", "x"]).unwrap();
        assert_eq!(cli.grace, Duration::ZERO);
        assert_eq!(cli.command, ["-weird", "x"]);
        assert!(Cli::try_parse_from(["guardian"]).is_err());
        assert!(Cli::try_parse_from(["guardian", "--grace", "soon", "true"]).is_err());
        assert!(Cli::try_parse_from(["guardian", "--events-fd", "-1", "true"]).is_err());
        let cli = Cli::try_parse_from(["guardian", "doctor", "--json"]).unwrap();
        assert!(matches!(cli.sub, Some(Sub::Doctor { json: true, .. })));
        let cli = Cli::try_parse_from(["guardian", "--", "doctor", "--json"]).unwrap();
        assert!(cli.sub.is_none());
        assert_eq!(cli.command, ["doctor", "--json"]);
    }
}
