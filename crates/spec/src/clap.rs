//! clap: guardian's command line as a clap `Command`, built from the option table
//! (`options.rs`) and the command texts below. Only with the `clap` feature, which guardian's
//! unit tests (its differential test parses with this `Command`) and xtask (help texts, man
//! page, completions) turn on; the guardian binary never links clap.

use clap::builder::{ArgAction, BoolishValueParser, PossibleValuesParser, ValueParser};
use clap::{Arg, Command};

use crate::options::{Commands, Kind, Opt};

/// The short description (`-h`).
pub const ABOUT: &str =
    "Run a command; when it exits, stop and reap every process it left behind, then exit with its status.";

/// The long description (`--help`, the man page's DESCRIPTION).
pub const LONG_ABOUT: &str = "guardian becomes a child subreaper before COMMAND exists, so every orphan of \
the command's tree (double-forked, setsid, environment-clearing) is reparented to it. When the command exits \
(or guardian is told to stop, times out, or its parent dies), guardian sends the stop signal to every \
remaining descendant, waits up to the grace period, SIGKILLs the rest, reaps until no child remains, and only \
then exits with the command's status.";

/// The help's last part. Its event list is checked against the event schema
/// (`src/events/schema_test.rs`).
pub const AFTER_HELP: &str = "\
Exit status: the provider's exit code; when signal N killed it, guardian dies of N too (a
shell's $? is 128+N; as PID 1 it exits 128+N); 124 when --timeout fired; 125 guardian's own
failure; 126 COMMAND not executable; 127 COMMAND not found.

Events (--events-fd N): JSON Lines with `event` and a monotonic `ts`: spawned, stopping,
signal, stopped, continued, exit, released (always last; exit always before it), error,
fallback.

cgroup mode (--cgroup auto|PATH): the provider starts in a fresh leaf guardian-<pid>-<start>
below a delegated cgroup v2 directory; teardown ends with cgroup.kill and the leaf is removed.
With auto and no delegated cgroup, guardian runs as a plain subreaper. `guardian sweep` removes
the leaves of guardians that were killed, never one whose guardian lives.

Examples:
  guardian -- npx -y some-mcp-server
  guardian --grace 5s --events-fd 3 -- ./provider 3>events.jsonl
  guardian --timeout 10m --stop-signal INT -- make test
  guardian --cgroup auto --pids-max 512 -- ./provider";

const USAGE: &str = "guardian [OPTIONS] [--] COMMAND [ARGS]...\n       guardian sweep [--cgroup PATH | --leaf LEAF]\n       guardian doctor [--json] [--cgroup auto|PATH]";

const SWEEP_ABOUT: &str = "Find leaf cgroups whose guardian has died, kill their processes and remove them";
const DOCTOR_ABOUT: &str = "Check which of guardian's guarantees hold on this machine, and in which mode it would run";

/// The option's argument id in the `Command` (unique within its command: the long name).
pub fn id(o: Opt) -> &'static str {
    o.long()
}

/// guardian's `Command`, version `version`. `parser` gives the value parser of the options that
/// take a value (guardian's tests give guardian's own; `None`: clap's for `OsString`, and the
/// words of a choice). Flags are clap's `SetTrue` with its `BoolishValueParser` for the
/// variable, counts clap's `Count` within `0..=max`.
pub fn command(version: &'static str, parser: &dyn Fn(Opt) -> Option<ValueParser>) -> Command {
    let mut main = Command::new("guardian")
        .version(version)
        .about(ABOUT)
        .long_about(LONG_ABOUT)
        .after_help(AFTER_HELP)
        .override_usage(USAGE)
        .subcommand_negates_reqs(true)
        .disable_help_subcommand(true)
        .args_conflicts_with_subcommands(true)
        .disable_help_flag(true)
        .disable_version_flag(true);
    main = main.args(args(Commands::MAIN, parser)).arg(
        Arg::new("command")
            .help("The provider command and its arguments")
            .value_name("COMMAND")
            .required(true)
            .trailing_var_arg(true)
            .num_args(1..)
            .value_parser(clap::value_parser!(std::ffi::OsString)),
    );
    let sweep = Command::new("sweep").about(SWEEP_ABOUT).disable_help_flag(true).args(args(Commands::SWEEP, parser));
    let doctor =
        Command::new("doctor").about(DOCTOR_ABOUT).disable_help_flag(true).args(args(Commands::DOCTOR, parser));
    // As clap words its own help flag when the long help differs from the short one.
    main = main.mut_arg(id(Opt::Help), |a| {
        a.help("Print help (see more with '--help')").long_help("Print help (see a summary with '-h')")
    });
    main.subcommand(sweep).subcommand(doctor)
}

fn args(command: Commands, parser: &dyn Fn(Opt) -> Option<ValueParser>) -> Vec<Arg> {
    Opt::of(command).map(|o| arg(o, parser)).collect()
}

fn arg(o: Opt, parser: &dyn Fn(Opt) -> Option<ValueParser>) -> Arg {
    let s = o.spec();
    let mut a = Arg::new(id(o)).long(s.long).help(s.help);
    if let Some(c) = s.short {
        a = a.short(c);
    }
    if let Some(env) = s.env {
        a = a.env(env);
    }
    if let Some(name) = s.value_name {
        a = a.value_name(name);
    }
    if let Some(default) = s.default {
        a = a.default_value(default);
    }
    if let Some(other) = s.conflicts {
        a = a.conflicts_with(id(other));
    }
    match s.kind {
        Kind::Help => a.action(ArgAction::Help),
        Kind::Version => a.action(ArgAction::Version),
        Kind::Flag => a.action(ArgAction::SetTrue).value_parser(BoolishValueParser::new()),
        Kind::Count(max) => a.action(ArgAction::Count).value_parser(clap::value_parser!(u8).range(0..=i64::from(max))),
        kind => {
            let a = a.action(ArgAction::Set);
            match (parser(o), kind) {
                (Some(p), _) => a.value_parser(p),
                (None, Kind::Choice(words)) => {
                    a.value_parser(PossibleValuesParser::new(words.split(' ').collect::<Vec<_>>()))
                }
                (None, _) => a.value_parser(clap::value_parser!(std::ffi::OsString)),
            }
        }
    }
}
