//! doctor::claims (tests only): every doctor message that states what guardian does, checked
//! against the code path it describes (issue 33.5). Each claim names a phrase of doctor's
//! message and the rule in the cited source that makes it true; when the code's rule changes,
//! its claim fails here and the message must be updated with it. (The parent-watch verdicts
//! are checked by calling guardian's own decision, in `mod.rs`'s tests.)

use super::WITHOUT_PIDFDS;

/// doctor's own source: the messages it prints.
const DOCTOR: &str = include_str!("mod.rs");

/// One message's claim: a phrase doctor prints, the file it describes, and the rule there.
struct Claim {
    says: &'static str,
    file: &'static str,
    code: &'static str,
    rule: &'static str,
}

/// Every message that says what guardian does (or would do) instead, with its code path.
const CLAIMS: &[Claim] = &[
    Claim {
        says: "guardian would start the sentinel with fork() instead (a `fallback` event and a -v line say so)",
        file: "sentinel.rs",
        code: include_str!("../sentinel.rs"),
        rule: "the sentinel is a fork of guardian instead",
    },
    Claim {
        says: "guardian would start the sentinel with fork() instead (a `fallback` event and a -v line say so)",
        file: "sentinel.rs",
        code: include_str!("../sentinel.rs"),
        rule: "crate::log::info!(\"sentinel fallback ({errno}): {detail}\")",
    },
    Claim {
        says: "guardian cannot become a child subreaper ({}); it would exit 125",
        file: "main.rs",
        code: include_str!("../main.rs"),
        rule: ".map_err(|e| Failure::guardian(format!(\"prctl(PR_SET_CHILD_SUBREAPER) failed: {e}\")))?",
    },
    Claim {
        says: "signalfd is refused ({}); guardian would exit 125",
        file: "main.rs",
        code: include_str!("../main.rs"),
        rule: "Err(e) => return Err(start_failed(events, Failure::guardian(e))),",
    },
    Claim {
        says: "signalfd is refused ({}); guardian would exit 125",
        file: "signal_step.rs",
        code: include_str!("../signal_step.rs"),
        rule: "let sigfd = sys::signalfd(&handled).map_err(",
    },
    Claim {
        says: "teardown can signal only guardian's own unreaped children (by pid, which cannot be reused before guardian reaps it)",
        file: "teardown/exec.rs",
        code: include_str!("../teardown/exec.rs"),
        rule: "self.events.fallback(\"pidfd_open\", &e, \"signalling only unreaped direct children\")",
    },
    Claim {
        says: "pidfd_send_signal is refused ({}): teardown can signal only guardian's own unreaped children (by pid)",
        file: "pidref.rs",
        code: include_str!("../pidref.rs"),
        rule: "events.fallback(\"pidfd_send_signal\", &e, \"kill() on unreaped direct children only\")",
    },
    Claim {
        says: "guardian starts the provider with fork() + pidfd_open() on the unreaped child instead, which is equally race-free (a `fallback` event says so)",
        file: "spawn.rs",
        code: include_str!("../spawn.rs"),
        rule: "events.fallback(\"clone3\", &e, \"starting the provider with fork() and pidfd_open()\")",
    },
    Claim {
        says: "guardian does not need it (it polls the pidfd and reaps with waitpid)",
        file: "sys/wait.rs",
        code: include_str!("../sys/wait.rs"),
        rule: "`waitid(P_PID, pid, WSTOPPED | WCONTINUED | WNOHANG)`",
    },
    Claim {
        says: "--cgroup auto falls back to plain subreaper mode",
        file: "cgroup/provider.rs",
        code: include_str!("../cgroup/provider.rs"),
        rule: "Err(u) if req == Request::Auto && limits.is_empty() && !errno::is_resource(u.errno) => {",
    },
    Claim {
        says: "guardian would refuse to start (exit 125): {why}",
        file: "cgroup/provider.rs",
        code: include_str!("../cgroup/provider.rs"),
        rule: "Err(u) => Err(Failure::guardian(format!(\"--cgroup {}: {}\", arg.to_string_lossy(), u.message))),",
    },
    Claim {
        says: "{e}; guardian would refuse to start (exit 125)",
        file: "main.rs",
        code: include_str!("../main.rs"),
        rule: "let proc = proctree::open_own().map_err(Failure::guardian)?;",
    },
    Claim {
        says: "the leaf cgroup alone finds the descendants (a `fallback` event says so)",
        file: "main.rs",
        code: include_str!("../main.rs"),
        rule: "what: \"proc\".into(),",
    },
    Claim {
        says: "descendants cannot be found, so guardian would refuse to start (exit 125)",
        file: "main.rs",
        code: include_str!("../main.rs"),
        rule: "return Err(Failure::guardian(BLIND_REFUSAL));",
    },
    Claim {
        says: "each round lists all of /proc instead",
        file: "teardown/exec.rs",
        code: include_str!("../teardown/exec.rs"),
        rule: "if walk { \"walking /proc/PID/task/TID/children\" } else { \"listing all of /proc\" }",
    },
    Claim {
        says: "guardian reads a pidfd's pid from /proc/self/fdinfo instead, which confirms the same identity",
        file: "proctree.rs",
        code: include_str!("../proctree.rs"),
        rule: "self.pidfd_pid_fdinfo(pidfd)",
    },
    Claim {
        says: "descendants are signalled only once they are guardian's unreaped direct children (the tree is peeled from the top)",
        file: "teardown/exec.rs",
        code: include_str!("../teardown/exec.rs"),
        rule: "return (same && proc.pidfd_pid(&fd) == Some(seen.pid)).then(|| PidRef::verified(seen.pid, fd));",
    },
    Claim {
        says: "the leaf is killed by freezing it and SIGKILLing each member",
        file: "teardown/exec.rs",
        code: include_str!("../teardown/exec.rs"),
        rule: "self.events.fallback(\"cgroup.kill\", &e, \"freezing the leaf, SIGKILLing each member, thawing it\")",
    },
    Claim {
        says: "the provider joins its leaf by writing cgroup.procs before exec instead",
        file: "spawn.rs",
        code: include_str!("../spawn.rs"),
        rule: "plan.join_cgroup_procs = cfg.cgroup.map(|(_, procs)| procs);",
    },
    Claim {
        says: "guardian lacks CAP_SYS_ADMIN to start the provider in a cgroup namespace",
        file: "spawn.rs",
        code: include_str!("../spawn.rs"),
        rule: "if leaf.is_some() && crate::cgroup::may_create_namespace() {",
    },
    Claim {
        says: "guardian lacks CAP_SYS_ADMIN to start the provider in a cgroup namespace",
        file: "cgroup/mod.rs",
        code: include_str!("../cgroup/mod.rs"),
        rule: ".is_some_and(|caps| caps & (1 << 21) != 0)",
    },
];

/// Each message is doctor's (so a claim cannot outlive its message) and its rule is in the
/// code it describes (so a message cannot outlive the rule).
#[test]
fn every_doctor_message_about_guardian_names_the_path_guardian_takes() {
    let mut wrong = Vec::new();
    for c in CLAIMS {
        if !DOCTOR.contains(c.says) {
            wrong.push(format!("doctor no longer says {:?}: drop or update its claim", c.says));
        }
        if !c.code.contains(c.rule) {
            wrong.push(format!("{} no longer has {:?}: doctor's {:?} may be false", c.file, c.rule, c.says));
        }
    }
    assert_eq!(wrong, Vec::<String>::new());
}

/// The claims cover every message of doctor that says what guardian would do: each
/// "guardian would", "instead" and "exit 125" phrase of doctor's messages is some claim's.
#[test]
fn every_message_saying_what_guardian_does_has_a_claim() {
    let messages = DOCTOR.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    let (mut unclaimed, mut checked) = (Vec::new(), 0);
    for line in messages.lines().map(str::trim).filter(|l| l.starts_with('"') || l.starts_with("format!(\"")) {
        let said = [
            "guardian would",
            " instead",
            "exit 125",
            "guardian starts",
            "falls back",
            "teardown can",
            "guardian does",
            "guardian lacks",
            "is killed by",
            "are signalled",
            "finds the descendants",
        ];
        if !said.iter().any(|s| line.contains(s)) {
            continue;
        }
        // The parent-watch verdicts are checked against `parent::choose` in mod.rs's tests.
        if line.contains("PR_SET_PDEATHSIG") || line.contains("{OUTSIDE}") {
            continue;
        }
        checked += 1;
        if !CLAIMS.iter().any(|c| line.contains(c.says)) {
            unclaimed.push(line.to_string());
        }
    }
    assert!(checked >= 16, "only {checked} messages found: the scan of doctor's source is broken");
    assert_eq!(unclaimed, Vec::<String>::new(), "doctor messages with no claim in claims.rs");
}

/// The pidfd problems say what teardown does without pidfds (`teardown`, `pidref`): only
/// guardian's own unreaped children are signalled; never "descendants by pid".
#[test]
fn the_pidfd_messages_name_the_path_teardown_takes() {
    let teardown = include_str!("../teardown/exec.rs");
    assert!(teardown.contains("Without pidfds only direct children"), "teardown's rule changed: update doctor");
    assert!(include_str!("../pidref.rs").contains("may only name an unreaped direct child"));
    assert!(WITHOUT_PIDFDS.contains("peeled from the top"));
}
