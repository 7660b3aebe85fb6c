//! Terminal hand-off, in a real pseudo-terminal (util-linux `script`): a guardian in the
//! terminal's foreground gives it to the provider's new process group (and the shell gets it
//! back afterwards); a guardian started in the background never steals it.

use std::process::Command;

use crate::harness::*;

fn nonce() -> String {
    format!("guardian-test-tty-{}", random_digits(12))
}

/// Runs `shell` (a `sh -c` script, with job control on when `job_control`) inside `script`,
/// guardian as `nobody` when the suite runs as root. `Err` with the reason when no pty can be
/// had.
fn in_pty(shell: &str, job_control: bool) -> Result<String, String> {
    let guardian = guardian_bin().display().to_string();
    let drop = if is_root() { format!("{} ", SETPRIV_NOBODY.join(" ")) } else { String::new() };
    let script = shell.replace("GUARDIAN", &format!("{drop}{guardian}"));
    let out = Command::new("script")
        .args(["-qec", &format!("sh -c '{}{script}'", if job_control { "set -m; " } else { "" }), "/dev/null"])
        .output()
        .map_err(|e| format!("cannot run script: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!("script failed ({}): {text}", out.status));
    }
    Ok(text)
}

/// The pty's output, or a (counted) skip when the host has no usable pseudo-terminal.
macro_rules! pty_run {
    ($cmd:expr) => {
        pty_run!($cmd, true)
    };
    ($cmd:expr, $job_control:expr) => {{
        need_program!("script", "bsdutils");
        if is_root() {
            need_program!("setpriv", "util-linux");
        }
        match in_pty($cmd, $job_control) {
            Ok(text) => text,
            Err(why) => skip!("no usable pseudo-terminal: {why}"),
        }
    }};
}

/// "tag pgid=A tpgid=B" from the provider's own view of its group and the terminal's.
pub(crate) fn groups(text: &str, tag: &str) -> (i64, i64) {
    let line = text.lines().find(|l| l.contains(tag)).unwrap_or_else(|| panic!("no '{tag}' line in: {text}"));
    let field = |k: &str| -> i64 {
        let v = line.split(k).nth(1).unwrap_or_else(|| panic!("no {k} in {line}"));
        v.split_whitespace().next().and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("bad {k} in {line}"))
    };
    (field("pgid="), field("tpgid="))
}

const REPORT: &str = r#"sh -c "echo TAG pgid=\$(ps -o pgid= -p \$\$) tpgid=\$(ps -o tpgid= -p \$\$)" NONCE"#;

#[test]
fn foreground_guardian_hands_the_terminal_to_the_provider_and_back() {
    let n = nonce();
    let cmd = format!(
        "GUARDIAN -- {}; echo shell pgid=$(ps -o pgid= -p $$) tpgid=$(ps -o tpgid= -p $$)",
        REPORT.replace("TAG", "provider").replace("NONCE", &n)
    );
    let text = pty_run!(&cmd);
    let (pgid, tpgid) = groups(&text, "provider");
    assert_eq!(pgid, tpgid, "the provider's group should own the terminal: {text}");
    let (shell_pgid, shell_tpgid) = groups(&text, "shell");
    assert_ne!(shell_pgid, pgid, "the provider runs in a group of its own: {text}");
    assert_eq!(shell_pgid, shell_tpgid, "the shell has the terminal back afterwards: {text}");
}

#[test]
fn background_guardian_never_steals_the_terminal() {
    let n = nonce();
    let cmd = format!(
        "GUARDIAN -- {} & wait; echo shell pgid=$(ps -o pgid= -p $$) tpgid=$(ps -o tpgid= -p $$)",
        REPORT.replace("TAG", "provider").replace("NONCE", &n)
    );
    let text = pty_run!(&cmd);
    let (pgid, tpgid) = groups(&text, "provider");
    assert_ne!(pgid, tpgid, "a background guardian must not give the terminal away: {text}");
    let (shell_pgid, shell_tpgid) = groups(&text, "shell");
    assert_eq!(shell_pgid, shell_tpgid, "the shell keeps the terminal: {text}");
    assert_eq!(tpgid, shell_pgid, "the terminal stayed with the shell the whole time: {text}");
}

/// A script without job control runs guardian in its own process group, so guardian hands the
/// terminal to the provider's group and must take it back itself: also when the exec failed
/// (the child took the foreground before it knew), or the script's next read from the terminal
/// fails with EIO.
#[test]
fn failed_exec_gives_the_terminal_back_to_a_script_without_job_control() {
    let n = nonce();
    let cmd = format!("GUARDIAN -- /nonexistent-{n}; echo shell pgid=$(ps -o pgid= -p $$) tpgid=$(ps -o tpgid= -p $$)");
    let text = pty_run!(&cmd, false);
    let (shell_pgid, shell_tpgid) = groups(&text, "shell");
    assert_eq!(shell_pgid, shell_tpgid, "the script's group has the terminal back after exit 127: {text}");
}

/// The terminal comes back to guardian's group (and so to a script without job control) also
/// when the provider, an interactive shell, had passed it on to a job of its own and died
/// while that job held it.
#[test]
fn terminal_comes_back_from_a_job_of_a_provider_that_died() {
    let n = random_digits(12);
    let cmd = format!(
        r#"GUARDIAN -- bash --norc --noprofile -ic "(sleep 0.5; kill -9 \$\$) & sleep 20.{n}; true" 2>/dev/null; echo shell pgid=$(ps -o pgid= -p $$) tpgid=$(ps -o tpgid= -p $$)"#
    );
    let text = pty_run!(&cmd, false);
    let (shell_pgid, shell_tpgid) = groups(&text, "shell");
    assert_eq!(shell_pgid, shell_tpgid, "the script's group has the terminal back: {text}");
}

/// guardian's process group outside its PID namespace (`unshare -pf guardian ...` from a
/// terminal): guardian cannot tell whether that group holds the terminal, so the provider stays
/// in it, in the foreground with it, and can read the terminal (in a group of its own it would
/// stop on its first read, with nobody to hand it the terminal).
#[test]
fn provider_shares_the_terminal_when_guardians_group_is_outside_its_namespace() {
    need_root!("unshare --pid");
    need_program!("unshare", "util-linux");
    let n = random_digits(12);
    let cmd = format!(
        "unshare --pid --fork --mount-proc GUARDIAN -- sh -c \"echo provider stat=\\$(ps -o stat= -p \\$\\$)\" {n}"
    );
    let text = pty_run!(&cmd, false);
    let line = text.lines().find(|l| l.contains("provider stat=")).unwrap_or_else(|| panic!("no report in: {text}"));
    assert!(line.contains('+'), "the provider is in the terminal's foreground group: {text}");
}

/// `shell` (with job control, `set -m`) inside `script`, with `input` typed at the terminal;
/// stdin stays open until the shell is done (`script` ends its session at EOF on stdin).
pub(crate) fn in_pty_typing(shell: &str, input: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let guardian = guardian_bin().display().to_string();
    let setpriv = if is_root() { format!("{} ", SETPRIV_NOBODY.join(" ")) } else { String::new() };
    let script = shell.replace("GUARDIAN", &format!("{setpriv}{guardian}"));
    let mut child = Command::new("script")
        .args(["-qec", &format!("sh -c 'set -m; {script}'"), "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run script: {e}"))?;
    let mut stdin = child.stdin.take().expect("stdin");
    let _ = stdin.write_all(input.as_bytes());
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout.read_to_end(&mut text);
        text
    });
    let status = wait_for("the pty session to end", || child.try_wait().expect("try_wait"));
    drop(stdin);
    let text = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    if !status.success() {
        return Err(format!("script failed ({status}): {text}"));
    }
    Ok(text)
}

/// An interactive shell under guardian as PID 1 of a new PID namespace, started at a terminal
/// without a new session (tini's `test_tty_shell_exit_0`), and under a guardian that
/// `nsenter -p` starts in an existing namespace: guardian's group lies outside the namespace,
/// yet the shell gets a group of its own holding the terminal, runs its jobs in the
/// foreground (job control), and `exit 0` is status 0 (issue 22.6: dash said "Cannot set tty
/// process group (No such process)" and exited 2).
#[test]
fn interactive_shell_keeps_its_terminal_when_guardians_group_is_outside_its_namespace() {
    need_root!("unshare --pid");
    need_program!("unshare", "util-linux");
    need_program!("nsenter", "util-linux");
    need_program!("script", "bsdutils");
    need_program!("setpriv", "util-linux");
    if !std::path::Path::new("/bin/dash").exists() {
        panic!("dash is not installed: install dash");
    }
    let n = random_digits(12);
    let ns = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sleep", &format!("100.{n}")])
        .spawn()
        .expect("start a PID namespace");
    let init = wait_for("the namespace's init", || {
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", ns.id())).ok()?;
        kids.split_whitespace().next()?.parse::<i32>().ok()
    });
    // The typed lines are echoed: the reports' tags are joined only when they run.
    let job = r#"sh -c "echo JOB''OUT pgid=\$(ps -o pgid= -p \$\$) tpgid=\$(ps -o tpgid= -p \$\$)""#;
    let input = format!("echo SHELL''OUT pgid=$(ps -o pgid= -p $$) tpgid=$(ps -o tpgid= -p $$)\n{job}\nexit 0\n");
    for (how, prefix) in [
        ("unshare -pf", "unshare --pid --fork --mount-proc".to_string()),
        ("nsenter -p", format!("nsenter -t {init} -p -m")),
    ] {
        let text = match in_pty_typing(&format!("{prefix} GUARDIAN -- dash -i; echo status=$?"), &input) {
            Ok(text) => text,
            Err(why) => {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(ns.id() as i32).expect("pid"),
                    rustix::process::Signal::KILL,
                );
                panic!("{how}: {why}")
            }
        };
        assert!(!text.contains("Cannot set tty process group"), "{how}: {text}");
        assert!(text.contains("status=0"), "{how}: exit 0 is status 0: {text}");
        let (pgid, tpgid) = groups(&text, "SHELLOUT");
        assert_eq!(pgid, tpgid, "{how}: the shell's group holds the terminal: {text}");
        let (job_pgid, job_tpgid) = groups(&text, "JOBOUT");
        assert_eq!(job_pgid, job_tpgid, "{how}: the shell's job runs in the foreground: {text}");
        assert_ne!(job_pgid, pgid, "{how}: in a group of its own (job control): {text}");
    }
    let mut ns = ns;
    let _ = ns.kill();
    let _ = ns.wait();
}
