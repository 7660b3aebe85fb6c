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
        (&["--version"], concat!("guardian ", env!("CARGO_PKG_VERSION"), "\n")),
    ];
    for (args, expected) in cases {
        let out = run(&mut guardian(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(text(&out.stdout), expected, "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
    let out = run(guardian(&["-V"]).env("GUARDIAN_GRACE", "bad"));
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), format!("guardian {}\n", env!("CARGO_PKG_VERSION"))));
    // The help shows a variable's value, as it did with clap.
    let out = run(guardian(&["-h"]).env("GUARDIAN_GRACE", "7s"));
    assert!(text(&out.stdout).contains("[env: GUARDIAN_GRACE=7s]"), "{}", text(&out.stdout));
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
