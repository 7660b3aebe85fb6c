//! The command line through the real binary: its own entry point hands argv to the parser
//! (`src/sys/start.rs`), help and version go to stdout with status 0, every refusal is one line
//! on stderr with status 125, options after COMMAND are COMMAND's, `--` and the environment
//! behave as documented, and bytes that are not UTF-8 reach COMMAND untouched. (The parser
//! itself is checked against the clap definition by the unit tests in `src/cli/tests.rs`.)

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Output};

use crate::harness::*;

fn guardian(args: &[&str]) -> Command {
    let mut cmd = Command::new(guardian_bin());
    cmd.args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("GUARDIAN_")) {
            cmd.env_remove(name);
        }
    }
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run guardian")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_and_version_go_to_stdout_with_status_0() {
    let cases: [(&[&str], &str); 6] = [
        (&["-h"], include_str!("../../man/help/guardian.txt")),
        (&["--help"], include_str!("../../man/help/guardian.long.txt")),
        (&["-v", "--help", "--grace", "bad"], include_str!("../../man/help/guardian.long.txt")),
        (&["sweep", "--help"], include_str!("../../man/help/guardian-sweep.txt")),
        (&["doctor", "-h"], include_str!("../../man/help/guardian-doctor.txt")),
        (&["--version"], concat!("guardian ", env!("CARGO_PKG_VERSION"), " (", env!("GUARDIAN_BUILD_INFO"), ")\n")),
    ];
    for (args, expected) in cases {
        let out = run(&mut guardian(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(text(&out.stdout), expected, "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
    let out = run(guardian(&["-V"]).env("GUARDIAN_GRACE", "bad"));
    let version = concat!("guardian ", env!("CARGO_PKG_VERSION"), " (", env!("GUARDIAN_BUILD_INFO"), ")\n");
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), version.to_string()));
    // The help shows a variable's value, as it did with clap.
    let out = run(guardian(&["-h"]).env("GUARDIAN_GRACE", "7s"));
    assert!(text(&out.stdout).contains("[env: GUARDIAN_GRACE=7s]"), "{}", text(&out.stdout));
}

/// `guardian --version` is `guardian <version> (<commit> <target>)`: the commit is the checkout's
/// (12 hex digits; `unknown` outside git), the target the triple it was built for. No timestamp:
/// the text is the same wherever the commit is built (the binaries are reproducible).
#[test]
fn version_names_the_commit_and_the_target() {
    let out = run(&mut guardian(&["--version"]));
    let line = text(&out.stdout);
    let inner = line
        .strip_prefix(concat!("guardian ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("not `guardian VERSION (COMMIT TARGET)`: {line:?}"));
    let (commit, target) = inner.split_once(' ').unwrap_or_else(|| panic!("no target in {line:?}"));
    let head = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    match head {
        Some(head) if std::env::var_os("GUARDIAN_COMMIT").is_none() => assert_eq!(commit, head, "{line:?}"),
        _ => assert!(commit == "unknown" || commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
    }
    let arch = std::env::consts::ARCH;
    assert!(target.starts_with(&format!("{arch}-")) && target.contains("-linux-"), "{line:?}");
}

/// Arguments, variables, and a part of the expected message.
type Refusal = (&'static [&'static str], &'static [(&'static str, &'static str)], &'static str);

#[test]
fn refusals_are_one_line_with_status_125() {
    let cases: [Refusal; 8] = [
        (&[], &[], "missing COMMAND"),
        (&["--grace", "soon", "true"], &[], "invalid value 'soon' for '--grace <DURATION>'"),
        (&["true"], &[("GUARDIAN_TIMEOUT", "later")], "(from GUARDIAN_TIMEOUT)"),
        (&["-v", "-q", "true"], &[], "'--verbose' cannot be used with '--quiet'"),
        (&["--bogus", "true"], &[], "unexpected argument '--bogus' found"),
        (&["-s", "KILL", "true"], &[], "SIGKILL cannot be the stop signal"),
        (&["doctor", "extra"], &[], "'guardian doctor' takes no COMMAND"),
        (&["sweep", "--leaf", "/x"], &[("GUARDIAN_CGROUP", "/y")], "unset GUARDIAN_CGROUP"),
    ];
    for (args, vars, expected) in cases {
        let mut cmd = guardian(args);
        cmd.envs(vars.iter().copied());
        let out = run(&mut cmd);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("guardian: ") && err.ends_with("; see 'guardian --help'\n"), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err:?} lacks {expected:?}");
    }
}

#[test]
fn command_starts_at_the_first_argument_that_is_not_an_option() {
    // `-v -q` after COMMAND are COMMAND's (no conflict), `--` after COMMAND too.
    let out = run(&mut guardian(&["-q", "sh", "-c", "exit $#", "x", "-v", "--", "-q"]));
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = run(&mut guardian(&["--grace=0", "--", "sh", "-c", "exit 7"]));
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    // A subcommand's name after `--` or after an option is a program to run.
    for args in [&["--", "doctor"][..], &["-q", "doctor"]] {
        let out = run(guardian(args).env("PATH", "/nonexistent"));
        assert_eq!(out.status.code(), Some(127), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains("cannot run 'doctor'"), "{args:?}: {}", text(&out.stderr));
    }
    // argv beats the environment, whose value is then not checked.
    let out = run(guardian(&["-g", "0", "true"]).env("GUARDIAN_GRACE", "soon"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn arguments_that_are_not_utf8_reach_command_untouched() {
    let odd = OsString::from_vec(vec![0xff, b'a', 0xfe]);
    let out = run(guardian(&["--", "sh", "-c", r#"[ "$1" = "$(printf '\377a\376')" ]"#, "x"]).arg(&odd));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A refusal: status 125, one line naming `expected`, and COMMAND never ran (it would have
/// created a file).
fn assert_refused_before_start(args: &[&str], vars: &[(&str, &str)], expected: &[&str]) {
    let ctx = Ctx::new("cli_refused");
    let marker = ctx.path("ran");
    let script = format!("touch '{}'", marker.display());
    let mut cmd = guardian(args);
    cmd.args(["--", "sh", "-c", &script]).envs(vars.iter().copied());
    let out = run(&mut cmd);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{args:?} {vars:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?} {vars:?}: {err}");
    for part in expected {
        assert!(err.contains(part), "{args:?} {vars:?}: {err:?} lacks {part:?}");
    }
    assert!(!marker.exists(), "{args:?} {vars:?}: COMMAND ran");
}

/// Issue 22.3: the user gave a number with a unit; the message says it is too large and what
/// the largest is, for the option and for its variable.
#[test]
fn a_duration_too_large_to_hold_says_so_and_gives_the_maximum() {
    for (args, vars) in [
        (&["--grace", "100000000000s"][..], &[][..]),
        (&["-t", "99999999999999999999h"], &[]),
        (&[], &[("GUARDIAN_TIMEOUT", "18446744074")]),
        (&[], &[("GUARDIAN_GRACE", "5124096h")]),
    ] {
        assert_refused_before_start(args, vars, &["too large", "the maximum is 18446744073s"]);
    }
    // The maximum itself is accepted.
    let out = run(&mut guardian(&["--grace", "18446744073s", "true"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// The same class for the other numbers: a limit or an fd number written correctly but too
/// large to hold is called too large, with the maximum.
#[test]
fn a_number_too_large_to_hold_says_so_and_gives_the_maximum() {
    for (args, vars) in [
        (&["--memory-max", "16777216T"][..], &[][..]),
        (&["--pids-max=18446744073709551616"], &[]),
        (&["--cpu-max", "4097"], &[]),
        (&["--events-fd=2147483648"], &[]),
        (&[], &[("GUARDIAN_MEMORY_MAX", "18446744073709551616")]),
        (&[], &[("GUARDIAN_CPU_MAX", "50000 1000001")]),
    ] {
        assert_refused_before_start(args, vars, &["too large", "the maximum is"]);
    }
}

/// Issue 22.4: `--timeout 0` and `GUARDIAN_TIMEOUT=0` mean no timeout, as with coreutils
/// timeout: the provider runs to its own end and its status is guardian's, no `stopping` event.
#[test]
fn timeout_zero_means_no_timeout() {
    for (args, vars) in [(&["--timeout", "0"][..], &[][..]), (&["-t0s"], &[]), (&[], &[("GUARDIAN_TIMEOUT", "0")])] {
        let mut cmd = guardian(args);
        cmd.args(["--events-fd", "1", "--", "sh", "-c", "sleep 0.3; exit 3"]).envs(vars.iter().copied());
        let out = run(&mut cmd);
        let events = parse_events(&text(&out.stdout));
        assert_eq!(out.status.code(), Some(3), "{args:?} {vars:?}: {out:?}");
        assert!(find(&events, |e| e["event"] == "stopping").is_none(), "{args:?} {vars:?}: {events:?}");
        assert!(find(&events, |e| e["event"] == "exit" && e["code"] == 3).is_some(), "{events:?}");
    }
}

/// Issue 22.5: GUARDIAN_VERBOSE is checked like every other variable (a count, 0 to 3), and a
/// good value takes effect.
#[test]
fn guardian_verbose_is_validated_like_the_other_variables() {
    for bad in ["junk", "-1", "debug", "yes", "256", "2.0", "4", ""] {
        assert_refused_before_start(
            &[],
            &[("GUARDIAN_VERBOSE", bad)],
            &["GUARDIAN_VERBOSE", "use a count from 0 to 3"],
        );
    }
    let out = run(guardian(&["--", "true"]).env("GUARDIAN_VERBOSE", "2"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stderr).contains("guardian: "), "GUARDIAN_VERBOSE=2 logged nothing: {out:?}");
    let out = run(guardian(&["--", "true"]).env("GUARDIAN_VERBOSE", "0"));
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(0), String::new()), "{out:?}");
    // The variable against --quiet names itself and the fix.
    assert_refused_before_start(
        &["-q"],
        &[("GUARDIAN_VERBOSE", "1")],
        &["(set by GUARDIAN_VERBOSE)", "unset GUARDIAN_VERBOSE"],
    );
}

/// Issue 22.8a: an empty path is a usage error, not the current directory.
#[test]
fn an_empty_cgroup_path_is_a_usage_error() {
    assert_refused_before_start(&["--cgroup", ""], &[], &["'--cgroup <auto|PATH>'", "the path is empty"]);
    assert_refused_before_start(&["--cgroup="], &[], &["the path is empty"]);
    assert_refused_before_start(&[], &[("GUARDIAN_CGROUP", "")], &["(from GUARDIAN_CGROUP)", "the path is empty"]);
    for args in [&["sweep", "--cgroup", ""][..], &["doctor", "--cgroup="], &["sweep", "--leaf", ""]] {
        let out = run(&mut guardian(args));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains("the path is empty") && err.lines().count() == 1, "{args:?}: {err}");
    }
}
