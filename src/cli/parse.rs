//! cli::parse: guardian's runtime command-line parser. It follows the clap definition in
//! `spec.rs` token by token (the unit tests in `tests.rs` hold the two to the same answers),
//! without clap's cost at every start: building clap's `Command` and parsing with it was
//! ~320k of the ~375k instructions `guardian -- true` ran, 19 mmap/17 munmap calls, ~9.5 kB of
//! heap kept alive, and pages of vtables that static-pie relocation dirties in every process.
//!
//! The rules, as clap applies them to `spec.rs`:
//! * argv is read left to right; options come first. The first argument that is not an option
//!   (or everything after `--`) starts COMMAND, and every later argument belongs to COMMAND
//!   (`guardian -v sleep -v 1` runs `sleep -v 1`).
//! * `sweep` and `doctor` are subcommands only as the very first argument (`guardian -v doctor`
//!   and `guardian -- doctor` run a program named doctor).
//! * `--long VALUE`, `--long=VALUE`, `-s VALUE`, `-sVALUE`, `-s=VALUE`; flags bundle (`-vv`,
//!   `-wq`, `-vg5s`). A value is never taken from an argument that looks like an option.
//! * An option given twice is refused (but `-v`, which counts). An option's `GUARDIAN_*`
//!   variable is read only when the option is not on the command line (argv beats the
//!   environment), and is checked even when a subcommand runs.
//! * Values are checked as they are met, so `--grace bad --help` is refused and `--help --grace
//!   bad` prints the help; conflicts and a missing COMMAND are checked at the end.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use super::values::{parse_cpu, parse_duration, parse_memory, parse_pids, parse_signal};
use super::{Cli, ForwardTo, Sub, VERSION, help};

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// Run (or run a subcommand) with these settings.
    Run(Cli),
    /// Print this text to stdout and exit 0 (`-h`, `--help`, `--version`, `-V`).
    Print(Cow<'static, str>),
}

/// Every option of every command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Id {
    Grace,
    StopSignal,
    ForwardTo,
    EventsFd,
    Timeout,
    WaitDescendants,
    NoParentWatch,
    Cgroup,
    MemoryMax,
    PidsMax,
    CpuMax,
    Verbose,
    Quiet,
    Help,
    Version,
    SweepCgroup,
    Leaf,
    Json,
    DoctorCgroup,
}

// The names are `match`es, not fields of the tables below: a table of `&str` is a table of
// pointers, which static-pie relocation writes at every start (one more private page in
// every resident guardian); code is shared.
impl Id {
    fn long(self) -> &'static str {
        match self {
            Id::Grace => "grace",
            Id::StopSignal => "stop-signal",
            Id::ForwardTo => "forward-to",
            Id::EventsFd => "events-fd",
            Id::Timeout => "timeout",
            Id::WaitDescendants => "wait-descendants",
            Id::NoParentWatch => "no-parent-watch",
            Id::Cgroup | Id::SweepCgroup | Id::DoctorCgroup => "cgroup",
            Id::MemoryMax => "memory-max",
            Id::PidsMax => "pids-max",
            Id::CpuMax => "cpu-max",
            Id::Verbose => "verbose",
            Id::Quiet => "quiet",
            Id::Help => "help",
            Id::Version => "version",
            Id::Leaf => "leaf",
            Id::Json => "json",
        }
    }

    /// The value's name for options that take one (`--grace <DURATION>`).
    fn value(self) -> Option<&'static str> {
        Some(match self {
            Id::Grace | Id::Timeout => "DURATION",
            Id::StopSignal => "SIG",
            Id::ForwardTo => "TARGET",
            Id::EventsFd | Id::PidsMax => "N",
            Id::Cgroup | Id::DoctorCgroup => "auto|PATH",
            Id::SweepCgroup => "PATH",
            Id::MemoryMax => "SIZE",
            Id::CpuMax => "CPUS",
            Id::Leaf => "LEAF",
            Id::WaitDescendants | Id::NoParentWatch | Id::Verbose | Id::Quiet | Id::Help | Id::Version | Id::Json => {
                return None;
            }
        })
    }

    fn env(self) -> Option<&'static str> {
        Some(match self {
            Id::Grace => "GUARDIAN_GRACE",
            Id::StopSignal => "GUARDIAN_STOP_SIGNAL",
            Id::ForwardTo => "GUARDIAN_FORWARD_TO",
            Id::EventsFd => "GUARDIAN_EVENTS_FD",
            Id::Timeout => "GUARDIAN_TIMEOUT",
            Id::WaitDescendants => "GUARDIAN_WAIT_DESCENDANTS",
            Id::NoParentWatch => "GUARDIAN_NO_PARENT_WATCH",
            Id::Cgroup | Id::SweepCgroup => "GUARDIAN_CGROUP",
            Id::MemoryMax => "GUARDIAN_MEMORY_MAX",
            Id::PidsMax => "GUARDIAN_PIDS_MAX",
            Id::CpuMax => "GUARDIAN_CPU_MAX",
            _ => return None,
        })
    }
}

/// An option of a command: its id and short form (the rest is `Id`'s).
struct Opt {
    id: Id,
    short: Option<char>,
}

impl Opt {
    fn long(&self) -> &'static str {
        self.id.long()
    }

    fn value(&self) -> Option<&'static str> {
        self.id.value()
    }
}

const fn opt(id: Id, short: Option<char>) -> Opt {
    Opt { id, short }
}

/// guardian's own options, in `spec.rs`'s order (the order clap reads their variables in).
const MAIN: &[Opt] = &[
    opt(Id::Grace, Some('g')),
    opt(Id::StopSignal, Some('s')),
    opt(Id::ForwardTo, None),
    opt(Id::EventsFd, None),
    opt(Id::Timeout, Some('t')),
    opt(Id::WaitDescendants, Some('w')),
    opt(Id::NoParentWatch, None),
    opt(Id::Cgroup, None),
    opt(Id::MemoryMax, None),
    opt(Id::PidsMax, None),
    opt(Id::CpuMax, None),
    opt(Id::Verbose, Some('v')),
    opt(Id::Quiet, Some('q')),
    opt(Id::Help, Some('h')),
    opt(Id::Version, Some('V')),
];

const SWEEP: &[Opt] = &[opt(Id::SweepCgroup, None), opt(Id::Leaf, None), opt(Id::Help, Some('h'))];

const DOCTOR: &[Opt] = &[opt(Id::Json, None), opt(Id::DoctorCgroup, None), opt(Id::Help, Some('h'))];

/// Where a value came from (for the messages, and because an option's variable is read only
/// when the command line did not give it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Short,
    Long,
    Env(&'static str),
}

/// Stores one option's value (`None`: a flag met on the command line).
type Apply<'a> = dyn FnMut(&Opt, Option<&OsStr>, Source) -> Result<(), String> + 'a;

/// How a command's option scan ended.
enum Stop<A> {
    /// No arguments left.
    End,
    /// `--`: every argument after it is a positional.
    Escape,
    /// The first positional argument.
    Positional(A),
    /// `-h`, `--help`, `-V`, `--version`.
    Print(&'static str),
}

/// The options one command was given, in the order it met them.
struct Scan<'t> {
    table: &'t [Opt],
    /// Bit `i` set: `table[i]` was given (on the command line, or by its variable).
    given: u32,
    /// An option was met (a subcommand name after it is COMMAND).
    any: bool,
    /// "guardian", "guardian sweep", "guardian doctor".
    name: &'static str,
    help: (&'static str, &'static str),
}

impl Scan<'_> {
    fn was_given(&self, id: Id) -> bool {
        self.table.iter().position(|o| o.id == id).is_some_and(|i| self.given & (1 << i) != 0)
    }

    fn unexpected(&self, arg: &OsStr) -> String {
        let arg = arg.to_string_lossy();
        match self.name {
            "guardian" => format!(
                "unexpected argument '{arg}' found (COMMAND's own options go after COMMAND; a COMMAND that starts with '-' goes after '--')"
            ),
            name => format!("unexpected argument '{arg}' found ('{name}' takes only the options its --help lists)"),
        }
    }

    /// Reads options until a positional, `--`, or the end; `apply` stores each one's value.
    fn options<A: AsRef<OsStr>>(
        &mut self,
        args: &mut impl Iterator<Item = A>,
        apply: &mut Apply<'_>,
    ) -> Result<Stop<A>, String> {
        while let Some(arg) = args.next() {
            let bytes = arg.as_ref().as_bytes();
            if bytes == b"--" {
                return Ok(Stop::Escape);
            }
            if let Some(rest) = bytes.strip_prefix(b"--") {
                let mut parts = rest.splitn(2, |&b| b == b'=');
                let name = parts.next().unwrap_or_default();
                let attached = parts.next().map(OsStr::from_bytes);
                let Some((i, o)) = self.table.iter().enumerate().find(|(_, o)| o.long().as_bytes() == name) else {
                    return Err(self.unexpected(arg.as_ref()));
                };
                if o.value().is_none()
                    && let Some(v) = attached
                {
                    return Err(format!("'--{}' takes no value, but was given '{}'", o.long(), v.to_string_lossy()));
                }
                let taken = match (o.value(), attached) {
                    (Some(_), None) => Some(take_value(o, args)?),
                    _ => None,
                };
                let value = taken.as_ref().map(AsRef::as_ref).or(attached);
                if let Some(text) = self.met((i, o), value, Source::Long, apply)? {
                    return Ok(Stop::Print(text));
                }
            } else if let Some(flags) = bytes.strip_prefix(b"-").filter(|f| !f.is_empty()) {
                // A bundle of short options: flags, then at most one option that takes the
                // rest of the argument (or the next one) as its value.
                let valid = flags.utf8_chunks().next().map_or("", |chunk| chunk.valid());
                let mut done = false;
                for (at, c) in valid.char_indices() {
                    let Some((i, o)) = self.table.iter().enumerate().find(|(_, o)| o.short == Some(c)) else {
                        return Err(self.unexpected(OsStr::new(&format!("-{c}"))));
                    };
                    let mut taken = None;
                    let value = if o.value().is_some() {
                        done = true;
                        let rest = flags.get(at + c.len_utf8()..).unwrap_or_default();
                        if rest.is_empty() {
                            taken = Some(take_value(o, args)?);
                        }
                        Some(match &taken {
                            Some(t) => t.as_ref(),
                            None => OsStr::from_bytes(rest.strip_prefix(b"=").unwrap_or(rest)),
                        })
                    } else {
                        None
                    };
                    if let Some(text) = self.met((i, o), value, Source::Short, apply)? {
                        return Ok(Stop::Print(text));
                    }
                    if done {
                        break;
                    }
                }
                if !done && valid.len() < flags.len() {
                    let invalid = flags.get(valid.len()..).unwrap_or_default();
                    let bad = format!("-{}", OsStr::from_bytes(invalid).to_string_lossy());
                    return Err(self.unexpected(OsStr::new(&bad)));
                }
            } else {
                return Ok(Stop::Positional(arg));
            }
        }
        Ok(Stop::End)
    }

    /// One option met on the command line; `Some` is a text to print (help, version).
    fn met(
        &mut self,
        (i, o): (usize, &Opt),
        value: Option<&OsStr>,
        source: Source,
        apply: &mut Apply<'_>,
    ) -> Result<Option<&'static str>, String> {
        self.any = true;
        match o.id {
            Id::Help => return Ok(Some(if source == Source::Short { self.help.0 } else { self.help.1 })),
            Id::Version => return Ok(Some(VERSION)),
            Id::Verbose => {}
            _ if self.given & (1 << i) != 0 => {
                return Err(format!("the argument '{}' cannot be used multiple times", display(o)));
            }
            _ => {}
        }
        self.given |= 1 << i;
        apply(o, value, source)?;
        Ok(None)
    }

    /// The variables of the options the command line did not give, in the table's order.
    fn env(&mut self, env: &dyn Fn(&str) -> Option<OsString>, apply: &mut Apply<'_>) -> Result<(), String> {
        for (i, o) in self.table.iter().enumerate() {
            let Some(name) = o.id.env() else { continue };
            if self.given & (1 << i) != 0 {
                continue;
            }
            if let Some(v) = env(name) {
                self.given |= 1 << i;
                apply(o, Some(&v), Source::Env(name))?;
            }
        }
        Ok(())
    }
}

/// The value of an option given without one attached: the next argument, unless it looks like
/// an option itself (`-x`, `--x`, `--`), as clap has it.
fn take_value<A: AsRef<OsStr>>(o: &Opt, args: &mut impl Iterator<Item = A>) -> Result<A, String> {
    match args.next() {
        Some(v) if !(v.as_ref().as_bytes().starts_with(b"-") && v.as_ref().len() > 1) => Ok(v),
        _ => Err(format!(
            "a value is required for '{}' but none was supplied (a value that starts with '-' must be attached: --{}=VALUE)",
            display(o),
            o.long()
        )),
    }
}

/// `--grace <DURATION>`, `--quiet`.
fn display(o: &Opt) -> String {
    match o.value() {
        Some(v) => format!("--{} <{v}>", o.long()),
        None => format!("--{}", o.long()),
    }
}

fn invalid(o: &Opt, source: Source, value: &OsStr, why: &str) -> String {
    let from = match source {
        Source::Env(name) => format!(" (from {name})"),
        _ => String::new(),
    };
    format!("invalid value '{}' for '{}'{from}: {why}", value.to_string_lossy(), display(o))
}

/// An option's value as text; a value that is not UTF-8 is refused (only paths and COMMAND
/// may be any bytes).
fn text<'v>(o: &Opt, source: Source, value: &'v OsStr) -> Result<&'v str, String> {
    value.to_str().ok_or_else(|| invalid(o, source, value, "it is not valid UTF-8"))
}

fn checked<T>(o: &Opt, source: Source, value: &OsStr, parse: fn(&str) -> Result<T, String>) -> Result<T, String> {
    parse(text(o, source, value)?).map_err(|why| invalid(o, source, value, &why))
}

/// clap's `BoolishValueParser`, for a flag's variable.
fn boolish(o: &Opt, source: Source, value: &OsStr) -> Result<bool, String> {
    match text(o, source, value)?.to_lowercase().as_str() {
        "y" | "yes" | "t" | "true" | "on" | "1" => Ok(true),
        "n" | "no" | "f" | "false" | "off" | "0" => Ok(false),
        _ => Err(invalid(o, source, value, "use true or false (also yes/no, on/off, 1/0)")),
    }
}

/// The value an option was met with (flags: `None` on the command line, their variable's
/// text from the environment).
fn flag(o: &Opt, source: Source, value: Option<&OsStr>) -> Result<bool, String> {
    value.map_or(Ok(true), |v| boolish(o, source, v))
}

fn os(value: Option<&OsStr>) -> Option<OsString> {
    value.map(OsStr::to_os_string)
}

/// Parses guardian's arguments (`argv[0]` first, skipped) with `env` for the `GUARDIAN_*`
/// variables. The error is one line naming the problem and the fix.
pub fn parse(
    argv: impl IntoIterator<Item = impl AsRef<OsStr>>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Parsed, String> {
    let mut args = argv.into_iter().skip(1);
    let mut cli = Cli {
        sub: None,
        grace: Duration::from_secs(1),
        stop_signal: crate::signals::StopSignal::TERM,
        forward_to: ForwardTo::Provider,
        events_fd: None,
        timeout: None,
        wait_descendants: false,
        no_parent_watch: false,
        cgroup: None,
        memory_max: None,
        pids_max: None,
        cpu_max: None,
        verbose: 0,
        quiet: false,
        command: Vec::new(),
    };
    let mut apply = |o: &Opt, v: Option<&OsStr>, source: Source| -> Result<(), String> {
        let value = v.unwrap_or_default();
        match o.id {
            Id::Grace => cli.grace = checked(o, source, value, parse_duration)?,
            Id::StopSignal => cli.stop_signal = checked(o, source, value, parse_signal)?,
            Id::ForwardTo => {
                cli.forward_to = match text(o, source, value)? {
                    "provider" => ForwardTo::Provider,
                    "group" => ForwardTo::Group,
                    _ => return Err(invalid(o, source, value, "use provider or group")),
                }
            }
            Id::EventsFd => {
                let n = text(o, source, value)?.parse::<i64>().ok().and_then(|n| i32::try_from(n).ok());
                cli.events_fd = Some(n.filter(|n| *n >= 0).ok_or_else(|| {
                    invalid(o, source, value, "use the number of an open file descriptor (0 to 2147483647)")
                })?);
            }
            Id::Timeout => cli.timeout = Some(checked(o, source, value, parse_duration)?),
            Id::WaitDescendants => cli.wait_descendants = flag(o, source, v)?,
            Id::NoParentWatch => cli.no_parent_watch = flag(o, source, v)?,
            Id::Cgroup => cli.cgroup = os(v),
            Id::MemoryMax => cli.memory_max = Some(checked(o, source, value, parse_memory)?),
            Id::PidsMax => cli.pids_max = Some(checked(o, source, value, parse_pids)?),
            Id::CpuMax => cli.cpu_max = Some(checked(o, source, value, parse_cpu)?),
            Id::Verbose => cli.verbose = cli.verbose.saturating_add(1),
            Id::Quiet => cli.quiet = true,
            Id::Help | Id::Version | Id::SweepCgroup | Id::Leaf | Id::Json | Id::DoctorCgroup => {}
        }
        Ok(())
    };
    let mut scan = Scan { table: MAIN, given: 0, any: false, name: "guardian", help: (help::MAIN, help::MAIN_LONG) };
    let mut command = Vec::new();
    let mut sub = None;
    match scan.options(&mut args, &mut apply)? {
        Stop::Print(text) => return Ok(Parsed::Print(with_env_values(text, env))),
        Stop::End => {}
        Stop::Escape => command.extend(args.map(|a| a.as_ref().to_os_string())),
        Stop::Positional(first) => match first.as_ref().to_str() {
            Some(name @ ("sweep" | "doctor")) if !scan.any => match subcommand(name, &mut args, env)? {
                Ok(s) => sub = Some(s),
                Err(text) => return Ok(Parsed::Print(with_env_values(text, env))),
            },
            _ => {
                command.push(first.as_ref().to_os_string());
                command.extend(args.map(|a| a.as_ref().to_os_string()));
            }
        },
    }
    scan.env(env, &mut apply)?;
    if scan.was_given(Id::Verbose) && scan.was_given(Id::Quiet) {
        return Err("the argument '--verbose' cannot be used with '--quiet'; give one of them".into());
    }
    if sub.is_none() && command.is_empty() {
        return Err(
            "missing COMMAND: name the program to run, as in 'guardian [OPTIONS] [--] COMMAND [ARGS]...'".into()
        );
    }
    cli.sub = sub;
    cli.command = command;
    Ok(Parsed::Run(cli))
}

/// `sweep` or `doctor` and their options; `Err` is a help text to print.
fn subcommand(
    name: &str,
    args: &mut impl Iterator<Item = impl AsRef<OsStr>>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Result<Sub, &'static str>, String> {
    let (mut cgroup, mut leaf, mut json, mut cgroup_from) = (None, None, false, None);
    let mut apply = |o: &Opt, v: Option<&OsStr>, source: Source| -> Result<(), String> {
        match o.id {
            Id::SweepCgroup | Id::DoctorCgroup => {
                cgroup = os(v);
                cgroup_from = Some(source);
            }
            Id::Leaf => leaf = os(v),
            Id::Json => json = true,
            _ => {}
        }
        Ok(())
    };
    let (table, full, help) = match name {
        "sweep" => (SWEEP, "guardian sweep", help::SWEEP),
        _ => (DOCTOR, "guardian doctor", help::DOCTOR),
    };
    // A subcommand has no long help: -h and --help print the same text, as with clap.
    let mut scan = Scan { table, given: 0, any: false, name: full, help: (help, help) };
    let extra = match scan.options(args, &mut apply)? {
        Stop::Print(text) => return Ok(Err(text)),
        Stop::End => None,
        Stop::Escape => args.next(),
        Stop::Positional(arg) => Some(arg),
    };
    if let Some(extra) = extra {
        return Err(format!(
            "unexpected argument '{}' found: 'guardian {name}' takes no COMMAND (to run a program named {name}, use 'guardian -- {name} ...')",
            extra.as_ref().to_string_lossy()
        ));
    }
    scan.env(env, &mut apply)?;
    if leaf.is_some() && cgroup.is_some() {
        return Err(match cgroup_from {
            Some(Source::Env(var)) => format!(
                "the argument '--leaf <LEAF>' cannot be used with '--cgroup <PATH>' (set by {var}); unset {var} to sweep one leaf"
            ),
            _ => "the argument '--cgroup <PATH>' cannot be used with '--leaf <LEAF>'; give one of them".into(),
        });
    }
    Ok(Ok(match name {
        "sweep" => Sub::Sweep { cgroup, leaf },
        _ => Sub::Doctor { json, cgroup },
    }))
}

/// The help names each option's variable with its current value, as clap printed it
/// (`[env: GUARDIAN_GRACE=5s]`); the generated text has `[env: GUARDIAN_GRACE=]`.
fn with_env_values(text: &'static str, env: &dyn Fn(&str) -> Option<OsString>) -> Cow<'static, str> {
    const OPEN: &str = "[env: ";
    let mut out = String::new();
    let mut rest = text;
    let mut changed = false;
    while let Some((before, after)) = rest.split_once(OPEN) {
        let Some((name, tail)) = after.split_once("=]") else { break };
        out.push_str(before);
        out.push_str(OPEN);
        out.push_str(name);
        out.push('=');
        if let Some(value) = env(name) {
            out.push_str(&value.to_string_lossy());
            changed = true;
        }
        out.push(']');
        rest = tail;
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(rest);
    Cow::Owned(out)
}
