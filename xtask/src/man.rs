//! man: renders `guardian.1`. clap_mangen supplies the title, NAME, SYNOPSIS, DESCRIPTION,
//! OPTIONS and VERSION sections from the clap definition; the sections clap has no place for
//! (subcommands in detail, signals, exit status, events, environment, examples) are written
//! here with `roff`, from the same facts as `docs/contract.md`.

use std::io;

use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};

/// Exit statuses, as in docs/contract.md.
const EXIT_STATUS: &[(&str, &str)] = &[
    ("the provider's code", "The provider exited normally, and every descendant is gone."),
    (
        "128+N",
        "The provider was killed by signal N: guardian then dies of signal N itself, with core dumps off, as sudo and coreutils timeout do, so its parent sees what it would have seen without guardian (a shell's $? is 128+N: 143 for SIGTERM, 137 for SIGKILL). As PID 1, where the kernel would ignore the signal, guardian exits 128+N.",
    ),
    ("124", "--timeout fired; the tree was stopped."),
    (
        "125",
        "guardian's own failure: a bad option, a setup system call that failed, or descendants that could \
         not be killed (they are named). Otherwise nothing guardian started is left running.",
    ),
    ("126", "COMMAND was found but is not executable."),
    ("127", "COMMAND was not found."),
];

/// Events on --events-fd, as in docs/contract.md.
const EVENTS: &[(&str, &str)] = &[
    ("fallback", "what (the interface that was refused: pidfd_open, clone3, ...), errno (ENOSYS, EPERM, ...), detail"),
    (
        "spawned",
        "pid, pgid, guardian_pid, mode (subreaper, pid1, cgroup), cgroup (leaf path or null), version (guardian's version)",
    ),
    ("stopping", "reason (signal, timeout, parent-died, kill-request), grace_ms (0 for kill-request)"),
    (
        "signal",
        "signal (a name such as SIGTERM), target (provider, group, descendants, namespace, cgroup), pid (the \
         provider, for targets provider and group), cgroup (the leaf, for target cgroup), pids (array, for \
         descendants, cgroup, and namespace when counted), reason (forwarded, stop, kill, parent-died, timeout)",
    ),
    ("stopped", "pid (the provider), signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU): the provider stopped"),
    ("continued", "pid (the provider): the provider was continued"),
    ("exit", "pid, code (integer or null), signal (name or null), core_dumped (boolean)"),
    (
        "released",
        "status (guardian's exit status), signalled (descendants sent the stop signal; null where they \
         cannot be counted), killed (descendants that needed SIGKILL), reaped (descendants guardian reaped), \
         teardown_ms (provider exit to release), cgroup (the removed leaf, or null), oom_kill (the leaf's \
         oom_kill count with --memory-max, else null), provider_user_ms, provider_system_ms (the provider's CPU \
         time in milliseconds, with the children it reaped, as time(1) reports it), provider_max_rss_kb (their \
         largest peak resident set size, kB), tree_user_ms, tree_system_ms, tree_max_rss_kb (the same for the \
         whole reaped tree, orphans included)",
    ),
    (
        "error",
        "status (125, 126 or 127), message, unkillable (when a teardown is abandoned: the pids guardian may \
         not signal), remaining (when a teardown is abandoned: the tree's processes still visible)",
    ),
];

const EVENT_EXAMPLE: &str = r#"{"event":"spawned","ts":81234.500112,"pid":4242,"pgid":4242,"guardian_pid":4241,"mode":"subreaper","cgroup":null,"version":"0.2.0"}
{"event":"exit","ts":81235.100871,"pid":4242,"code":0,"signal":null,"core_dumped":false}
{"event":"signal","ts":81235.101020,"signal":"SIGTERM","target":"descendants","pids":[4250],"reason":"stop"}
{"event":"released","ts":81235.103377,"status":0,"signalled":1,"killed":0,"reaped":1,"teardown_ms":2.506,"cgroup":null,"oom_kill":null,"provider_user_ms":1.207,"provider_system_ms":0.951,"provider_max_rss_kb":3712,"tree_user_ms":1.842,"tree_system_ms":1.633,"tree_max_rss_kb":3712}"#;

const EXAMPLES: &[(&str, &str)] = &[
    ("Run an MCP server; whatever it leaves behind is stopped when it exits:", "guardian -- npx -y some-mcp-server"),
    (
        "Give the tree five seconds to stop and record what happened:",
        "guardian --grace 5s --events-fd 3 -- ./provider 3>events.jsonl",
    ),
    (
        "Bound a test run to ten minutes, stopping it with SIGINT:",
        "guardian --timeout 10m --stop-signal INT -- make test",
    ),
    (
        "A provider whose setsid, environment-clearing child outlives it; the child is stopped and reaped \
         before guardian exits:",
        "guardian -v --events-fd 1 -- sh -c 'setsid env -i sleep 1000 & echo provider done'",
    ),
    (
        "A shell script that must not leak its background jobs:",
        "exec guardian --grace 2s -- ./build-and-serve.sh \"$@\"",
    ),
    (
        "As a container entrypoint (see packaging/container/Containerfile):",
        "docker run --rm -it guardian-example sh -c 'sleep 1000 & exec my-server'",
    ),
    ("Check which guarantees hold on this machine:", "guardian doctor\nguardian doctor --json --cgroup auto"),
];

fn para(roff: &mut Roff, text: &str) {
    roff.control("PP", []);
    roff.text([roman(text)]);
}

fn tagged(roff: &mut Roff, tag: Vec<Inline>, text: &str) {
    roff.control("TP", []);
    roff.text(tag);
    roff.text([roman(text)]);
}

fn literal(roff: &mut Roff, text: &str) {
    roff.control("RS", ["4"]);
    roff.control("nf", []);
    for line in text.lines() {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
    roff.control("RE", []);
}

fn extra_description(roff: &mut Roff) {
    para(
        roff,
        "The provider gets a new process group, the terminal's foreground when guardian had it, and exactly \
         the environment (less the GUARDIAN_* settings below), working directory, file descriptors, signal \
         mask and ignored signals guardian was started with (none of guardian's own descriptors).",
    );
    para(
        roff,
        "When guardian's parent dies, even by SIGKILL, guardian stops the tree the same way \
         (unless --no-parent-watch). guardian signals a process only through a pidfd whose identity it has \
         just revalidated, so a reused PID is never hit. As PID 1 of a PID namespace (a container), it reaps \
         every orphan and reaches the whole namespace with kill(-1).",
    );
    para(
        roff,
        "-- may be omitted when COMMAND does not start with -. A command literally named doctor or sweep \
         must follow --.",
    );
}

fn subcommands(roff: &mut Roff) {
    roff.control("SH", ["SUBCOMMANDS"]);
    tagged(
        roff,
        vec![bold("guardian doctor"), roman(" [--json] [--cgroup "), italic("auto|PATH"), roman("]")],
        "Checks, by doing each for real on a short-lived child, which of guardian's guarantees hold on this \
         machine: kernel version, child subreaper, pidfd_open, pidfd_send_signal, waitid(P_PIDFD), clone3 with \
         CLONE_PIDFD and CLONE_INTO_CGROUP, signalfd, the cgroup2 mount, guardian's own cgroup and whether it \
         is delegated to this user, cgroup.kill, the available controllers, /proc visibility (hidepid) and the \
         children file. It names the mode guardian would run in with the given --cgroup setting, and prints a \
         line per problem saying what to change. --json prints one JSON object instead. Exit status 0 when \
         every guarantee holds in that mode, 1 when guardian would run degraded, 2 when it would refuse to \
         start (exit 125, e.g. an unusable --cgroup PATH), 125 on a usage error.",
    );
    tagged(
        roff,
        vec![bold("guardian sweep"), roman(" [--cgroup "), italic("PATH"), roman("]")],
        "In cgroup mode: finds leaf cgroups below PATH (default: guardian's own cgroup) whose guardian has \
         died, kills their processes and removes them.",
    );
}

fn signals_section(roff: &mut Roff) {
    roff.control("SH", ["SIGNALS"]);
    para(
        roff,
        "Every catchable signal guardian receives (HUP, INT, QUIT, TERM, USR1, USR2, WINCH, CONT, TSTP, \
         ALRM, the real-time signals, ...) is forwarded to the provider, or to its process group with \
         --forward-to group. SIGTERM is also the owner's request to stop: if the provider has not exited \
         within the grace period, the whole tree gets SIGKILL. The stop signal (--stop-signal) is what the \
         remaining descendants are sent when a teardown begins. SIGCHLD is used for reaping and never \
         forwarded. The fault signals (ILL, TRAP, ABRT, BUS, FPE, SEGV, SYS) and the C library's reserved \
         signals 32-34 are forwarded like any other when another process sends them; a real fault inside \
         guardian still ends it at once. \
         Signals that were ignored when guardian started stay ignored, for guardian and for the provider, \
         except SIGTERM and the stop signal, which are always stop requests; an ignored stop signal is \
         reset to its default action for the provider.",
    );
    para(
        roff,
        "Only the two signals no process can catch escape guardian: SIGKILL ends it without a teardown \
         (unless guardian is PID 1 of a namespace, its descendants keep running; see \
         docs/threat-model.md), and SIGSTOP suspends it until SIGCONT.",
    );
}

fn exit_status(roff: &mut Roff) {
    roff.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in EXIT_STATUS {
        tagged(roff, vec![bold(*status)], meaning);
    }
}

fn events(roff: &mut Roff) {
    roff.control("SH", ["EVENTS"]);
    para(
        roff,
        "With --events-fd N, guardian writes one JSON object per line to file descriptor N, which it takes \
         over (the provider never inherits it). Every line has event (its name) and ts (CLOCK_MONOTONIC in \
         seconds, a float with microseconds). exit always precedes released; released (or error, when the \
         provider could not be started) is the last line, then the descriptor is closed. Readers must ignore \
         fields they do not know: new ones may be added. A full pipe never blocks the teardown.",
    );
    for (name, fields) in EVENTS {
        tagged(roff, vec![bold(*name)], fields);
    }
    para(roff, "Example:");
    literal(roff, EVENT_EXAMPLE);
}

fn environment(roff: &mut Roff, cmd: &clap::Command) {
    roff.control("SH", ["ENVIRONMENT"]);
    para(
        roff,
        "Each option's variable is used when the option is not given on the command line. guardian removes \
         all of these variables from the provider's environment, so a nested guardian starts from its own settings.",
    );
    for arg in cmd.get_arguments() {
        let Some(env) = arg.get_env() else { continue };
        let long = arg.get_long().unwrap_or_default();
        let what = match long {
            "verbose" => " (a count, 0 to 3: the same as giving -v that many times)".to_string(),
            "timeout" => " (0: no timeout)".to_string(),
            _ => String::new(),
        };
        tagged(roff, vec![bold(env.to_string_lossy().into_owned())], &format!("Same as --{long}{what}."));
    }
    para(
        roff,
        "A variable that is set is checked like the option's value, even when it is empty: an empty \
         or malformed value is a usage error (exit status 125) that names the variable.",
    );
}

fn examples(roff: &mut Roff) {
    roff.control("SH", ["EXAMPLES"]);
    for (what, command) in EXAMPLES {
        para(roff, what);
        literal(roff, command);
    }
}

fn see_also(roff: &mut Roff) {
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "prctl(2) (PR_SET_CHILD_SUBREAPER), pidfd_open(2), pidfd_send_signal(2), clone3(2), signalfd(2), \
         cgroups(7), pid_namespaces(7), timeout(1), systemd-run(1), tini, dumb-init, catatonit",
    )]);
}

/// The full page. Each piece is rendered with roff's apostrophe preamble; only the first
/// keeps it.
pub fn render(cmd: clap::Command) -> io::Result<Vec<u8>> {
    let version = cmd.get_version().unwrap_or_default().to_string();
    let man = Man::new(cmd.clone()).manual("User Commands").source(format!("guardian {version}"));
    let mut page = Page { out: Vec::new(), preamble: Roff::new().render().into_bytes() };
    // Written by hand: roff drops the empty date argument of .TH, which would shift the
    // source into the date's place. The date stays empty so the page is reproducible.
    page.out.extend_from_slice(&page.preamble);
    page.out.extend_from_slice(format!(".TH GUARDIAN 1 \"\" \"guardian {version}\" \"User Commands\"\n").as_bytes());
    page.clap(|w| man.render_name_section(w))?;
    page.clap(|w| man.render_synopsis_section(w))?;
    page.clap(|w| man.render_description_section(w))?;
    page.own(extra_description)?;
    page.clap(|w| man.render_options_section(w))?;
    page.own(subcommands)?;
    page.own(signals_section)?;
    page.own(exit_status)?;
    page.own(events)?;
    page.own(|r| environment(r, &cmd))?;
    page.own(examples)?;
    page.own(see_also)?;
    page.clap(|w| man.render_version_section(w))?;
    Ok(page.out)
}

struct Page {
    out: Vec<u8>,
    preamble: Vec<u8>,
}

impl Page {
    fn clap(&mut self, render: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> io::Result<()> {
        let mut buf = Vec::new();
        render(&mut buf)?;
        let text = buf.strip_prefix(self.preamble.as_slice()).unwrap_or(&buf);
        self.out.extend_from_slice(text);
        Ok(())
    }

    fn own(&mut self, build: impl FnOnce(&mut Roff)) -> io::Result<()> {
        let mut roff = Roff::new();
        build(&mut roff);
        self.clap(|w| roff.to_writer(w))
    }
}
