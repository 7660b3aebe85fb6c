//! cli::parse: guardian's runtime command-line parser, driven by the option table
//! (`treeguardian_spec::options`). It follows clap's rules for the clap definition built from
//! the same table (the unit tests in `tests.rs` hold the two to the same answers), without
//! clap's cost at every start: building clap's `Command` and parsing with it was ~320k of the
//! ~375k instructions `guardian -- true` ran, 19 mmap/17 munmap calls, ~9.5 kB of heap kept
//! alive, and pages of vtables that static-pie relocation dirties in every process.
//!
//! The rules, as clap applies them:
//! * argv is read left to right; options come first. The first argument that is not an option
//!   (or everything after `--`) starts COMMAND, and every later argument belongs to COMMAND
//!   (`guardian -v sleep -v 1` runs `sleep -v 1`).
//! * `sweep` and `doctor` are subcommands only as the very first argument (`guardian -v doctor`
//!   and `guardian -- doctor` run a program named doctor).
//! * `--long VALUE`, `--long=VALUE`, `-s VALUE`, `-sVALUE`, `-s=VALUE`; flags bundle (`-vv`,
//!   `-wq`, `-vg5s`). A value is never taken from an argument that looks like an option.
//! * An option given twice is refused (but a count such as `-v`). An option's `GUARDIAN_*`
//!   variable is read only when the option is not on the command line (argv beats the
//!   environment), and is checked even when a subcommand runs.
//! * Values are checked as they are met, so `--grace bad --help` is refused and `--help --grace
//!   bad` prints the help; conflicts (a variable's value too) and a missing COMMAND are checked
//!   at the end.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use treeguardian_spec::options::{Commands, Kind, Opt};

use super::fields::Given;
use super::values::{Value, parse_value};
use super::{Sub, VERSION, help};

/// What the command line asks for.
// One value per start, moved once: boxing `Cli` would only add a heap allocation to start-up.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// Run (or run a subcommand) with these settings.
    Run(super::Cli),
    /// Print this text to stdout and exit 0 (`-h`, `--help`, `--version`, `-V`).
    Print(Cow<'static, str>),
}

/// Where a value came from (for the messages, and because an option's variable is read only
/// when the command line did not give it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Short,
    Long,
    Env(&'static str),
}

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

/// The option's bit in a set of options.
fn bit(o: Opt) -> u32 {
    1 << o.index()
}

/// The options one command was given, in the order it met them.
struct Scan {
    command: Commands,
    /// The options given (on the command line, or by their variable).
    given: u32,
    /// The options given by their variable.
    from_env: u32,
    /// How often the command's counting option (`-v`) was met.
    count: u8,
    /// An option was met (a subcommand name after it is COMMAND).
    any: bool,
    /// "guardian", "guardian sweep", "guardian doctor".
    name: &'static str,
    help: (&'static str, &'static str),
}

impl Scan {
    fn new(command: Commands, name: &'static str, help: (&'static str, &'static str)) -> Scan {
        Scan { command, given: 0, from_env: 0, count: 0, any: false, name, help }
    }

    fn was_given(&self, o: Opt) -> bool {
        self.given & bit(o) != 0
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

    /// Reads options until a positional, `--`, or the end, storing each one's value in `cli`.
    fn options<A: AsRef<OsStr>>(
        &mut self,
        cli: &mut Given,
        args: &mut impl Iterator<Item = A>,
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
                let Some(o) = Opt::of(self.command).find(|o| o.long().as_bytes() == name) else {
                    return Err(self.unexpected(arg.as_ref()));
                };
                let takes_value = o.kind().takes_value();
                if !takes_value && let Some(v) = attached {
                    return Err(format!("'--{}' takes no value, but was given '{}'", o.long(), v.to_string_lossy()));
                }
                let taken = if takes_value && attached.is_none() { Some(take_value(o, args)?) } else { None };
                let value = taken.as_ref().map(AsRef::as_ref).or(attached);
                if let Some(text) = self.met(cli, o, value, Source::Long)? {
                    return Ok(Stop::Print(text));
                }
            } else if let Some(flags) = bytes.strip_prefix(b"-").filter(|f| !f.is_empty()) {
                // A bundle of short options: flags, then at most one option that takes the
                // rest of the argument (or the next one) as its value.
                let valid = flags.utf8_chunks().next().map_or("", |chunk| chunk.valid());
                let mut done = false;
                for (at, c) in valid.char_indices() {
                    let Some(o) = Opt::of(self.command).find(|o| o.short() == Some(c)) else {
                        return Err(self.unexpected(OsStr::new(&format!("-{c}"))));
                    };
                    let mut taken = None;
                    let value = if o.kind().takes_value() {
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
                    if let Some(text) = self.met(cli, o, value, Source::Short)? {
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
        cli: &mut Given,
        o: Opt,
        value: Option<&OsStr>,
        source: Source,
    ) -> Result<Option<&'static str>, String> {
        self.any = true;
        match o.kind() {
            Kind::Help => return Ok(Some(if source == Source::Short { self.help.0 } else { self.help.1 })),
            Kind::Version => return Ok(Some(VERSION)),
            Kind::Count(_) => {}
            _ if self.was_given(o) => {
                return Err(format!("the argument '{}' cannot be used multiple times", display(o)));
            }
            _ => {}
        }
        self.given |= bit(o);
        self.store(cli, o, value, source).map(|()| None)
    }

    /// Parses an option's value as its kind takes it and stores it (`None`: a flag met on the
    /// command line).
    fn store(&mut self, cli: &mut Given, o: Opt, value: Option<&OsStr>, source: Source) -> Result<(), String> {
        let v = match (o.kind(), value) {
            (_, Some(v)) => parse_value(o, v).map_err(|why| invalid(o, source, v, &why))?,
            (Kind::Flag, None) => Value::Flag(true),
            (Kind::Count(max), None) => {
                self.count = self.count.saturating_add(1);
                if self.count > max {
                    return Err(format!("'{}' counts up to {max}: give it at most {max} times", display(o)));
                }
                Value::Count(self.count)
            }
            (_, None) => return Ok(()),
        };
        cli.set(o, v);
        Ok(())
    }

    /// The variables of the options the command line did not give, in the table's order, then
    /// the conflicts.
    fn env(&mut self, cli: &mut Given, env: &dyn Fn(&str) -> Option<OsString>) -> Result<(), String> {
        for o in Opt::of(self.command) {
            let Some(name) = o.env() else { continue };
            if self.was_given(o) {
                continue;
            }
            if let Some(v) = env(name) {
                self.given |= bit(o);
                self.from_env |= bit(o);
                self.store(cli, o, Some(&v), Source::Env(name))?;
            }
        }
        for o in Opt::of(self.command) {
            if let Some(other) = o.conflicts().filter(|&p| self.was_given(o) && self.was_given(p)) {
                return Err(self.conflict(o, other));
            }
        }
        Ok(())
    }

    /// `a` and `b` were both given; the message names a variable that gave one.
    fn conflict(&self, a: Opt, b: Opt) -> String {
        let var = |o: Opt| o.env().filter(|_| self.from_env & bit(o) != 0);
        match (var(a), var(b)) {
            (None, None) => {
                format!("the argument '{}' cannot be used with '{}'; give one of them", display(a), display(b))
            }
            (None, Some(v)) | (Some(v), None) => {
                let (given, set) = if var(a).is_some() { (b, a) } else { (a, b) };
                format!(
                    "the argument '{}' cannot be used with '{}' (set by {v}); unset {v} or leave out '{}'",
                    display(given),
                    display(set),
                    display(given)
                )
            }
            (Some(v), Some(w)) => format!(
                "'{}' (set by {v}) cannot be used with '{}' (set by {w}); unset one of them",
                display(a),
                display(b)
            ),
        }
    }
}

/// The value of an option given without one attached: the next argument, unless it looks like
/// an option itself (`-x`, `--x`, `--`), as clap has it.
fn take_value<A: AsRef<OsStr>>(o: Opt, args: &mut impl Iterator<Item = A>) -> Result<A, String> {
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
fn display(o: Opt) -> String {
    match o.value_name() {
        Some(v) => format!("--{} <{v}>", o.long()),
        None => format!("--{}", o.long()),
    }
}

fn invalid(o: Opt, source: Source, value: &OsStr, why: &str) -> String {
    let from = match source {
        Source::Env(name) => format!(" (from {name})"),
        _ => String::new(),
    };
    format!("invalid value '{}' for '{}'{from}: {why}", value.to_string_lossy(), display(o))
}

/// Parses guardian's arguments (`argv[0]` first, skipped) with `env` for the `GUARDIAN_*`
/// variables. The error is one line naming the problem and the fix.
pub fn parse(
    argv: impl IntoIterator<Item = impl AsRef<OsStr>>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Parsed, String> {
    let mut args = argv.into_iter().skip(1);
    let mut cli = Given::default();
    let mut scan = Scan::new(Commands::MAIN, "guardian", (help::MAIN, help::MAIN_LONG));
    let mut command = Vec::new();
    match scan.options(&mut cli, &mut args)? {
        Stop::Print(text) => return Ok(Parsed::Print(with_env_values(text, env))),
        Stop::End => {}
        Stop::Escape => command.extend(args.map(|a| a.as_ref().to_os_string())),
        Stop::Positional(first) => match first.as_ref().to_str() {
            Some(name @ ("sweep" | "doctor")) if !scan.any => {
                if let Some(text) = subcommand(&mut cli, name, &mut args, env)? {
                    return Ok(Parsed::Print(with_env_values(text, env)));
                }
            }
            _ => {
                command.push(first.as_ref().to_os_string());
                command.extend(args.map(|a| a.as_ref().to_os_string()));
            }
        },
    }
    scan.env(&mut cli, env)?;
    if cli.sub.is_none() && command.is_empty() {
        return Err(
            "missing COMMAND: name the program to run, as in 'guardian [OPTIONS] [--] COMMAND [ARGS]...'".into()
        );
    }
    Ok(Parsed::Run(cli.finish(command)))
}

/// `sweep` or `doctor` and their options, stored in `cli.sub`; `Some` is a help text to print.
fn subcommand(
    cli: &mut Given,
    name: &str,
    args: &mut impl Iterator<Item = impl AsRef<OsStr>>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Option<&'static str>, String> {
    let (command, full, help, sub) = match name {
        "sweep" => (Commands::SWEEP, "guardian sweep", help::SWEEP, Sub::Sweep { cgroup: None, leaf: None }),
        _ => (Commands::DOCTOR, "guardian doctor", help::DOCTOR, Sub::Doctor { json: false, cgroup: None }),
    };
    cli.sub = Some(sub);
    // A subcommand has no long help: -h and --help print the same text, as with clap.
    let mut scan = Scan::new(command, full, (help, help));
    let extra = match scan.options(cli, args)? {
        Stop::Print(text) => return Ok(Some(text)),
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
    scan.env(cli, env)?;
    Ok(None)
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
