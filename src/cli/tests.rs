//! The runtime parser (`parse.rs`) against the clap definition built from the same option table
//! (`treeguardian_spec::clap`, with guardian's value parsers): generated command lines and
//! environments must give the same settings, the same help or version text, or be refused by
//! both; the help texts guardian prints must be clap's. Then the behaviours users rely on, one
//! by one, with the messages they get.
//!
//! clap reads an option's variable from the process environment, so the comparisons run in a
//! child test process (this test binary, `--exact`, one test thread) that sets the variables
//! itself.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::Duration;

use clap::builder::{TypedValueParser, ValueParser};
use proptest::prelude::*;
use treeguardian_spec::options::{Commands, Kind, Opt};

use super::fields::Given;
use super::values::{Value, parse_value};
use super::{Cli, Parsed, Sub, env_vars, help, parse};
use crate::signals::Target;

/// What a parser made of a command line.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
enum Outcome {
    Run(Cli),
    Print(String),
    Refused(String),
}

/// guardian's own value parser for an option, as clap takes one.
#[derive(Clone)]
struct ByOpt(Opt);

impl TypedValueParser for ByOpt {
    type Value = Value;

    fn parse_ref(&self, cmd: &clap::Command, _: Option<&clap::Arg>, value: &OsStr) -> Result<Value, clap::Error> {
        parse_value(self.0, value).map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e).with_cmd(cmd))
    }
}

/// The clap definition, built now (clap reads the variables when it is built), with
/// guardian's value parsers (a choice's words stay clap's possible values, as in the help).
fn clap_command() -> clap::Command {
    // The version as `--version` prints it: the package version, the commit and the target.
    let version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("GUARDIAN_BUILD_INFO"), ")");
    treeguardian_spec::clap::command(version, &|o| {
        Some(match o.kind() {
            Kind::Choice(words) => ValueParser::new(
                clap::builder::PossibleValuesParser::new(words.split(' '))
                    .try_map(move |s: String| parse_value(o, OsStr::new(&s))),
            ),
            _ => ValueParser::new(ByOpt(o)),
        })
    })
}

/// Stores what clap matched for one command's options, through the same `Given::set`.
fn store(m: &clap::ArgMatches, command: Commands, cli: &mut Given) {
    use treeguardian_spec::clap::id;
    for o in Opt::of(command) {
        let v = match o.kind() {
            Kind::Help | Kind::Version => continue,
            Kind::Flag => Value::Flag(m.get_flag(id(o))),
            Kind::Count(_) => Value::Count(m.get_count(id(o))),
            _ => match m.get_one::<Value>(id(o)) {
                Some(v) => v.clone(),
                None => continue,
            },
        };
        cli.set(o, v);
    }
}

/// clap, reading the variables from the process environment.
fn by_clap(argv: &[OsString]) -> Outcome {
    use clap::error::ErrorKind;
    match clap_command().try_get_matches_from(argv) {
        Ok(m) => {
            let mut cli = Given::default();
            let mut command = Vec::new();
            store(&m, Commands::MAIN, &mut cli);
            match m.subcommand() {
                Some(("sweep", sm)) => {
                    cli.sub = Some(Sub::Sweep { cgroup: None, leaf: None });
                    store(sm, Commands::SWEEP, &mut cli);
                }
                Some((_, sm)) => {
                    cli.sub = Some(Sub::Doctor { json: false, cgroup: None });
                    store(sm, Commands::DOCTOR, &mut cli);
                }
                None => command = m.get_many::<OsString>("command").into_iter().flatten().cloned().collect(),
            }
            Outcome::Run(cli.finish(command))
        }
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            Outcome::Print(e.to_string())
        }
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

fn by_hand(argv: &[OsString], env: &dyn Fn(&str) -> Option<OsString>) -> Outcome {
    match parse(argv.iter().cloned(), env) {
        Ok(Parsed::Run(c)) => Outcome::Run(c),
        Ok(Parsed::Print(text)) => Outcome::Print(text.into_owned()),
        Err(e) => Outcome::Refused(e),
    }
}

fn os(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

fn argv(args: &[&str]) -> Vec<OsString> {
    std::iter::once("guardian").chain(args.iter().copied()).map(OsString::from).collect()
}

/// The hand parser with the given variables (and no others).
fn hand(args: &[&str], vars: &[(&str, &str)]) -> Outcome {
    let vars: Vec<(String, OsString)> = vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
    by_hand(&argv(args), &|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

fn run(args: &[&str], vars: &[(&str, &str)]) -> Cli {
    match hand(args, vars) {
        Outcome::Run(c) => c,
        other => panic!("{args:?} {vars:?}: {other:?}"),
    }
}

fn refused(args: &[&str], vars: &[(&str, &str)]) -> String {
    match hand(args, vars) {
        Outcome::Refused(e) => {
            assert!(!e.is_empty() && !e.contains('\n'), "{args:?}: not one line: {e:?}");
            e
        }
        other => panic!("{args:?} {vars:?} should be refused: {other:?}"),
    }
}

// ---- the comparison with clap, in a child process ----

/// Arguments the generated command lines are made of: every option in each of its forms, good
/// and bad values, subcommand names, `--`, `-`, and bytes that are not UTF-8.
const TOKENS: &[&[u8]] = &[
    b"-g",
    b"--grace",
    b"--grace=1s",
    b"-g5s",
    b"-g=2",
    b"-g=",
    b"--grace=",
    b"5s",
    b"0",
    b"1.5",
    b"bad",
    b"-s",
    b"--stop-signal",
    b"INT",
    b"KILL",
    b"--stop-signal=HUP",
    b"-sRTMIN+2",
    b"--forward-to",
    b"--forward-to=group",
    b"group",
    b"provider",
    b"Group",
    b"--events-fd",
    b"--events-fd=3",
    b"3",
    b"-1",
    b"+4",
    b"99999999999",
    b"-t",
    b"--timeout",
    b"10m",
    b"-t1h",
    b"-w",
    b"--wait-descendants",
    b"--wait-descendants=yes",
    b"--no-parent-watch",
    b"--no-parent-watch=",
    b"--cgroup",
    b"--cgroup=auto",
    b"auto",
    b"/sys/fs/cgroup/x",
    b"--memory-max",
    b"512M",
    b"12X",
    b"--pids-max",
    b"64",
    b"--cpu-max",
    b"0.5",
    b"50000 100000",
    b"--cpu-max=max",
    b"-v",
    b"-vv",
    b"--verbose",
    b"--verbose=1",
    b"-q",
    b"--quiet",
    b"-wq",
    b"-vq",
    b"-vg5s",
    b"-gv",
    b"-v5",
    b"-qw",
    b"-h",
    b"--help",
    b"-V",
    b"--version",
    b"-hv",
    b"-vh",
    b"-vV",
    b"--help=x",
    b"-gh",
    b"--",
    b"-",
    b"",
    b"sweep",
    b"doctor",
    b"help",
    b"--leaf",
    b"--leaf=/x/l",
    b"/x/leaf",
    b"--json",
    b"--json=1",
    b"sleep",
    b"true",
    b"-x",
    b"--foo",
    b"--=x",
    b"---",
    b"-\xc3\xa9",
    b"\xff",
    b"-\xff",
    b"-v\xff",
    b"-g\xff",
    b"--cgroup=\xff",
    b"--grace=\xff",
    b"--\xff",
    b"--cgroup=a=b",
];

/// Values for a variable, by its option's kind: empty, not UTF-8, junk, good ones, and ones too
/// large to hold. Every `GUARDIAN_*` variable of the table gets them.
fn env_values(name: &str) -> Vec<&'static [u8]> {
    let kind = Opt::ALL.iter().find(|o| o.env() == Some(name)).map(|o| o.kind());
    let mut v: Vec<&'static [u8]> = vec![b"", b"\xff", b"bad", b" "];
    v.extend_from_slice(match kind {
        Some(Kind::Duration) => &[
            b"2s",
            b"0",
            b"1.5m",
            b"18446744073.709551615s",
            b"18446744074",
            b"100000000000s",
            b"99999999999999999999999999999999999999999h",
        ],
        Some(Kind::Signal) => &[b"INT", b"KILL", b"15", b"sigusr1", b"65", b"99999999999"],
        Some(Kind::Choice(_)) => &[b"group", b"provider", b"GROUP"],
        Some(Kind::Fd) => &[b"3", b"-1", b"+7", b" 3", b"2147483648", b"99999999999999999999"],
        Some(Kind::Path) => &[b"auto", b"/sys/fs/cgroup/a", b"-x"],
        Some(Kind::Size) => &[b"512M", b"max", b"1X", b"16777216T", b"18446744073709551616"],
        Some(Kind::Limit) => &[b"64", b"0", b"max", b"18446744073709551616"],
        Some(Kind::Cpus) => &[b"0.5", b"50000 100000", b"max", b"4097", b"1e400"],
        Some(Kind::Flag) => &[b"1", b"0", b"yes", b"No", b"TRUE", b"off", b"t", b"maybe"],
        Some(Kind::Count(_)) => &[b"0", b"1", b"3", b"4", b"-1", b"debug", b"yes", b"256", b"2.0", b"99999999999"],
        Some(Kind::Help | Kind::Version) | None => &[],
    });
    v
}

/// Every variable the table names (clap reads each option's `env`).
fn option_vars() -> Vec<&'static str> {
    env_vars().collect()
}

fn compare(args: &[Vec<u8>], vars: &[(&str, Option<&[u8]>)]) -> Result<(), String> {
    for &(name, value) in vars {
        crate::sys::set_env_in_test_child(name, value.map(OsStr::from_bytes));
    }
    let argv: Vec<OsString> = std::iter::once(OsString::from("guardian")).chain(args.iter().map(|a| os(a))).collect();
    let clap = by_clap(&argv);
    let hand = by_hand(&argv, &|name| std::env::var_os(name));
    let same = match (&clap, &hand) {
        (Outcome::Refused(_), Outcome::Refused(e)) => !e.is_empty() && !e.contains('\n'),
        (a, b) => a == b,
    };
    if same { Ok(()) } else { Err(format!("argv {argv:?}\nenv {vars:?}\nclap: {clap:?}\nhand: {hand:?}")) }
}

/// Runs in the child process only (the parent sets `CLI_EQUIVALENCE_CHILD`).
#[test]
fn equivalence_child() {
    if std::env::var_os("CLI_EQUIVALENCE_CHILD").is_none() {
        return;
    }
    let names = option_vars();
    // The help texts guardian prints are clap's, with no variable set and with each set.
    for (args, text) in [
        (&["-h"][..], help::MAIN),
        (&["--help"], help::MAIN_LONG),
        (&["sweep", "-h"], help::SWEEP),
        (&["sweep", "--help"], help::SWEEP),
        (&["doctor", "-h"], help::DOCTOR),
        (&["doctor", "--help"], help::DOCTOR),
    ] {
        let argv = argv(args);
        assert_eq!(
            by_clap(&argv),
            Outcome::Print(text.to_string()),
            "{args:?}: run 'make man' to regenerate man/help/"
        );
        let all: Vec<(&str, Option<&[u8]>)> = names.iter().map(|&n| (n, Some(&b"x y"[..]))).collect();
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        compare(&args, &all).unwrap();
        let none: Vec<(&str, Option<&[u8]>)> = names.iter().map(|&n| (n, None)).collect();
        compare(&args, &none).unwrap();
    }

    // Every single token alone, then after an option, then generated lines.
    let none: Vec<(&str, Option<&[u8]>)> = names.iter().map(|&n| (n, None)).collect();
    for t in TOKENS {
        for prefix in [&[][..], &[b"-v".to_vec()], &[b"true".to_vec()], &[b"sweep".to_vec()], &[b"doctor".to_vec()]] {
            let mut args = prefix.to_vec();
            args.push(t.to_vec());
            compare(&args, &none).unwrap();
            args.push(b"true".to_vec());
            compare(&args, &none).unwrap();
        }
    }
    // Each variable with each of its values, alone and against the option on the command line.
    for &name in &names {
        for value in env_values(name) {
            let mut vars = none.clone();
            for v in vars.iter_mut().filter(|v| v.0 == name) {
                v.1 = Some(value);
            }
            for args in [
                &["true"][..],
                &["sweep"],
                &["doctor"],
                &["sweep", "--leaf", "l"],
                &["-w", "--no-parent-watch", "-g1", "true"],
                &["--cgroup", "c", "sweep"],
                &["-h"],
            ] {
                let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
                compare(&args, &vars).unwrap();
            }
        }
    }

    let token = proptest::sample::select(TOKENS.to_vec()).prop_map(|t| t.to_vec());
    let args = proptest::collection::vec(token, 0..7);
    let var = |name: &'static str| {
        let values = env_values(name);
        proptest::option::weighted(0.3, proptest::sample::select(values)).prop_map(move |v| (name, v))
    };
    let vars: Vec<_> = names.iter().map(|&n| var(n)).collect();
    let config = ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() };
    proptest::test_runner::TestRunner::new(config)
        .run(&(args, vars), |(args, vars)| compare(&args, &vars).map_err(proptest::test_runner::TestCaseError::fail))
        .unwrap();
}

/// The parent: runs [`equivalence_child`] in a child process of this test binary.
#[test]
fn parser_agrees_with_clap() {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", "cli::tests::equivalence_child", "--test-threads=1", "--nocapture"]);
    for name in env_vars() {
        cmd.env_remove(name);
    }
    let out = cmd.env("CLI_EQUIVALENCE_CHILD", "1").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}

#[test]
fn consumed_variables_are_the_ones_clap_reads() {
    let cmd = clap_command();
    let mut names: Vec<String> = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(|s| s.get_arguments()))
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.dedup();
    let mut ours: Vec<&str> = env_vars().collect();
    ours.sort_unstable();
    assert_eq!(names, ours);
}

/// spec/options.json (for the drivers) is the table's rendering now.
#[test]
fn options_json_is_up_to_date() {
    assert!(
        include_str!("../../spec/options.json") == treeguardian_spec::options::to_json(),
        "spec/options.json is stale: run 'make options' and commit it"
    );
}

// ---- behaviours, one by one (no environment needed: the hand parser takes a lookup) ----

#[test]
fn defaults() {
    let c = run(&["true"], &[]);
    assert_eq!(c.grace, Duration::from_secs(1));
    assert_eq!(c.stop_signal.get(), libc::SIGTERM);
    assert_eq!(c.forward_to, Target::Provider);
    assert_eq!((c.events_fd, c.timeout, c.wait_descendants, c.no_parent_watch), (None, None, false, false));
    assert_eq!((c.verbose, c.quiet, c.sub), (0, false, None));
    assert_eq!(c.command, ["true"]);
}

#[test]
fn long_and_short_forms() {
    for args in [&["--grace", "5s"][..], &["--grace=5s"], &["-g", "5s"], &["-g5s"], &["-g=5s"], &["-vg5s"]] {
        let mut v = args.to_vec();
        v.push("true");
        assert_eq!(run(&v, &[]).grace, Duration::from_secs(5), "{args:?}");
    }
    assert_eq!(run(&["-vv", "true"], &[]).verbose, 2);
    assert_eq!(run(&["-v", "--verbose", "-v", "true"], &[]).verbose, 3);
    let c = run(&["-wq", "true"], &[]);
    assert!(c.wait_descendants && c.quiet);
    assert_eq!(run(&["--cgroup", "-", "true"], &[]).cgroup.as_deref(), Some(OsStr::new("-")));
    assert_eq!(run(&["--cgroup=a=b", "true"], &[]).cgroup.as_deref(), Some(OsStr::new("a=b")));
    assert_eq!(run(&["--events-fd", "3", "--forward-to", "group", "true"], &[]).events_fd, Some(3));
}

#[test]
fn command_starts_at_the_first_positional_or_after_the_double_dash() {
    let c = run(&["-v", "sleep", "-v", "1"], &[]);
    assert_eq!(c.verbose, 1);
    assert_eq!(c.command, ["sleep", "-v", "1"]);
    assert_eq!(run(&["--grace", "0", "--", "-weird", "x"], &[]).command, ["-weird", "x"]);
    assert_eq!(run(&["sleep", "--", "-h"], &[]).command, ["sleep", "--", "-h"]);
    assert_eq!(run(&["--", "--"], &[]).command, ["--"]);
    // A subcommand's name is a subcommand only as the first argument.
    assert_eq!(run(&["--", "doctor", "--json"], &[]).command, ["doctor", "--json"]);
    assert_eq!(run(&["-v", "doctor"], &[]).command, ["doctor"]);
    assert!(matches!(run(&["doctor", "--json"], &[]).sub, Some(Sub::Doctor { json: true, cgroup: None })));
    let c = run(&["sweep", "--leaf", "/l"], &[]);
    assert_eq!(c.sub, Some(Sub::Sweep { cgroup: None, leaf: Some("/l".into()) }));
}

#[test]
fn command_and_paths_need_not_be_utf8() {
    let argv = vec![os(b"guardian"), os(b"--cgroup"), os(b"/c/\xff"), os(b"\xfe\xff"), os(b"a\x80")];
    match by_hand(&argv, &|_| None) {
        Outcome::Run(c) => {
            assert_eq!(c.command, [os(b"\xfe\xff"), os(b"a\x80")]);
            assert_eq!(c.cgroup, Some(os(b"/c/\xff")));
        }
        other => panic!("{other:?}"),
    }
    let argv = vec![os(b"guardian"), os(b"sweep"), os(b"--leaf"), os(b"/l\xff")];
    assert!(matches!(by_hand(&argv, &|_| None), Outcome::Run(Cli { sub: Some(Sub::Sweep { .. }), .. })));
    let e = match by_hand(&[os(b"guardian"), os(b"--grace=\xff"), os(b"true")], &|_| None) {
        Outcome::Refused(e) => e,
        other => panic!("{other:?}"),
    };
    assert!(e.contains("--grace") && e.contains("not valid UTF-8"), "{e}");
}

#[test]
fn environment_and_its_precedence() {
    let c = run(&["true"], &[("GUARDIAN_GRACE", "3s"), ("GUARDIAN_STOP_SIGNAL", "INT"), ("GUARDIAN_EVENTS_FD", "4")]);
    assert_eq!(
        (c.grace, c.stop_signal, c.events_fd),
        (Duration::from_secs(3), crate::signals::StopSignal::parse("INT").unwrap(), Some(4))
    );
    // argv beats the environment, whose value is then not even checked.
    assert_eq!(run(&["-g", "2s", "true"], &[("GUARDIAN_GRACE", "soon")]).grace, Duration::from_secs(2));
    for (value, expected) in
        [("1", true), ("yes", true), ("ON", true), ("true", true), ("0", false), ("no", false), ("off", false)]
    {
        let c = run(&["true"], &[("GUARDIAN_WAIT_DESCENDANTS", value), ("GUARDIAN_NO_PARENT_WATCH", value)]);
        assert_eq!((c.wait_descendants, c.no_parent_watch), (expected, expected), "{value}");
    }
    let e = refused(&["true"], &[("GUARDIAN_WAIT_DESCENDANTS", "maybe")]);
    assert!(e.contains("GUARDIAN_WAIT_DESCENDANTS") && e.contains("true or false"), "{e}");
    // A bad variable is refused even for a subcommand, and names itself.
    let e = refused(&["doctor"], &[("GUARDIAN_GRACE", "soon")]);
    assert!(
        e.starts_with("invalid value 'soon' for '--grace <DURATION>' (from GUARDIAN_GRACE): invalid duration"),
        "{e}"
    );
    // GUARDIAN_CGROUP is guardian's --cgroup, and sweep's.
    let c = run(&["sweep"], &[("GUARDIAN_CGROUP", "/c")]);
    assert_eq!(c.sub, Some(Sub::Sweep { cgroup: Some("/c".into()), leaf: None }));
    assert_eq!(c.cgroup, Some("/c".into()));
    let e = refused(&["sweep", "--leaf", "/l"], &[("GUARDIAN_CGROUP", "/c")]);
    assert!(e.contains("unset GUARDIAN_CGROUP"), "{e}");
}

#[test]
fn help_and_version_are_printed() {
    assert_eq!(hand(&["-h"], &[]), Outcome::Print(help::MAIN.into()));
    assert_eq!(hand(&["--help", "--grace", "bad"], &[]), Outcome::Print(help::MAIN_LONG.into()));
    assert_eq!(hand(&["-v", "-q", "-h"], &[]), Outcome::Print(help::MAIN.into()), "conflicts are checked last");
    assert_eq!(hand(&["doctor", "--help"], &[]), Outcome::Print(help::DOCTOR.into()));
    assert_eq!(hand(&["sweep", "-h"], &[]), Outcome::Print(help::SWEEP.into()));
    for v in ["-V", "--version"] {
        let want = format!("guardian {} ({})\n", env!("CARGO_PKG_VERSION"), env!("GUARDIAN_BUILD_INFO"));
        assert_eq!(hand(&[v], &[]), Outcome::Print(want));
    }
    // Help names each option's variable with its value, as clap did.
    match hand(&["-h"], &[("GUARDIAN_GRACE", "5s")]) {
        Outcome::Print(text) => assert!(text.contains("[env: GUARDIAN_GRACE=5s]"), "{text}"),
        other => panic!("{other:?}"),
    }
    // Options after COMMAND are COMMAND's.
    assert_eq!(run(&["sleep", "-h"], &[]).command, ["sleep", "-h"]);
    // A value is checked when met: before a later --help.
    refused(&["--grace", "bad", "--help"], &[]);
}

#[test]
fn refusals_name_the_problem() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "missing COMMAND"),
        (&["--"], "missing COMMAND"),
        (&["-v"], "missing COMMAND"),
        (&["--grace"], "a value is required for '--grace <DURATION>'"),
        (&["--grace", "--", "true"], "a value is required for '--grace <DURATION>'"),
        (&["--grace", "-5s", "true"], "a value is required for '--grace <DURATION>'"),
        (&["--grace", "soon", "true"], "invalid value 'soon' for '--grace <DURATION>': invalid duration"),
        (&["-s", "KILL", "true"], "SIGKILL cannot be the stop signal"),
        (&["--forward-to", "both", "true"], "use provider or group"),
        (&["--events-fd", "-1", "true"], "a value is required for '--events-fd <N>'"),
        (&["--events-fd=-1", "true"], "invalid value '-1' for '--events-fd <N>'"),
        (&["--events-fd=x", "true"], "invalid value 'x' for '--events-fd <N>'"),
        (
            &["--events-fd", "3", "--events-file", "e", "true"],
            "'--events-file <PATH>' cannot be used with '--events-fd <N>'",
        ),
        (&["--memory-max", "12X", "true"], "invalid memory size"),
        (&["-x", "true"], "unexpected argument '-x' found"),
        (&["-v5", "true"], "unexpected argument '-5' found"),
        (&["--foo", "true"], "unexpected argument '--foo' found"),
        (&["--json", "true"], "unexpected argument '--json' found"),
        (&["-v", "-q", "true"], "'--verbose' cannot be used with '--quiet'"),
        (&["-vq", "true"], "'--verbose' cannot be used with '--quiet'"),
        (&["-q", "-q", "true"], "'--quiet' cannot be used multiple times"),
        (&["-g1", "--grace=2", "true"], "'--grace <DURATION>' cannot be used multiple times"),
        (&["--wait-descendants=yes", "true"], "'--wait-descendants' takes no value"),
        (&["sweep", "--cgroup", "a", "--leaf", "b"], "'--leaf <LEAF>' cannot be used with '--cgroup <PATH>'"),
        (&["doctor", "x"], "'guardian doctor' takes no COMMAND"),
        (&["doctor", "-v"], "unexpected argument '-v' found"),
        (&["doctor", "-V"], "unexpected argument '-V' found"),
    ];
    for (args, expected) in cases {
        let e = refused(args, &[]);
        assert!(e.contains(expected), "{args:?}: {e:?} lacks {expected:?}");
    }
}
