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
fn groups(text: &str, tag: &str) -> (i64, i64) {
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
