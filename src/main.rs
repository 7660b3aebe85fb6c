//! guardian: a Linux process-tree guardian. `main` wires the modules together in the order
//! the guarantees need, the start-up steps of docs/design.md ("Start-up order", one numbering
//! that the `// N. Title` comments below follow, checked by `docs_drift`): parse options,
//! refuse set-id (1), not dumpable (1b), take over the events fd (2: a failed setup step is
//! reported there as an `error` event), read the handled signals from a signalfd (3), split
//! off the sentinel (3b), become a child subreaper (4), watch the parent (5), choose how to
//! find descendants (6), make the leaf cgroup (7), take the terminal (7b), and only then start
//! the provider (8); then probe whether pidfds may signal (9), hand start-up's memory back
//! (10), and the supervise loop runs until release. Whatever ends guardian comes
//! back here as a status or an `exit::Failure`, and `main` turns it into the exit status
//! (`exit::end`: a provider killed by signal N makes guardian die of N, unless it is PID 1).
//!
//! Modules (docs/design.md maps their files; `docs_drift` keeps this list, the map and the
//! house complete): `cgroup` (leaf cgroups, `sweep`), `cli` (options), `doctor` (capability
//! check), `errno` (errno names), `events` (JSON Lines), `exit` (exit statuses, `Failure`),
//! `log`, `pidref` (process handle), `proctree` (/proc), `sentinel` (the parent left behind),
//! `signal_step` (start-up's signal step), `signals` (names, handled set), `spawn` (provider
//! start), `status` (wait statuses), `supervise` (event loop, states, grace period), `sys` (all
//! `unsafe`: the crate denies it elsewhere), `teardown` (signalling rounds), `test_hooks`
//! (the tests' hooks), `writer` (writes that never block).

#![deny(unsafe_code)]
// guardian's entry point is `sys/start.rs`'s C `main`, without the Rust runtime's start-up
// (see there). Test builds keep libtest's.
#![cfg_attr(not(test), no_main)]

mod cgroup;
mod cli;
#[cfg(test)]
mod docs_drift;
mod doctor;
mod errno;
mod events;
mod exit;
mod log;
mod pidref;
mod proctree;
#[cfg(test)]
mod proptests;
mod sentinel;
mod signal_step;
mod signals;
mod spawn;
mod status;
mod supervise;
// The one exemption: every `unsafe` block of guardian is in `sys`.
#[allow(unsafe_code)]
mod sys;
mod teardown;
mod test_hooks;
mod writer;

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use crate::events::{Event, Events};
use crate::exit::Failure;
use crate::log::{debug, fatal, info, warn};
use crate::supervise::{ParentWatch, Settings, Supervisor, Target};
use crate::teardown::{Discovery, Tree};

// The process's entry point (`sys/start.rs`): the C `main`, without the Rust runtime's
// start-up, calling `run_main` with argv. Test builds keep libtest's.
#[cfg(not(test))]
sys::start::entry_point!(run_main);

/// Blind mode without a leaf: refused before the provider starts.
const BLIND_REFUSAL: &str = "/proc is missing or belongs to another PID namespace and guardian is not PID 1: it could not find the provider's descendants to stop them; mount a /proc for this PID namespace, use --cgroup, or run guardian as PID 1 of the namespace";

/// The one place guardian's outcome becomes its exit status: a status to exit with, or a
/// [`Failure`] whose one-line message is printed first (`exit` names the statuses; a status
/// of 128+N from a provider killed by signal N ends guardian by N, see `exit::end`). Called by
/// the entry point (`sys/start.rs`) with argv.
#[cfg_attr(test, allow(dead_code))]
fn run_main(args: impl Iterator<Item = &'static OsStr>) -> ! {
    finish(run(args))
}

/// Ends guardian with `result`'s status, after printing a failure's message.
fn finish(result: Result<exit::Ending, Failure>) -> ! {
    let ending = match result {
        Ok(ending) => ending,
        Err(Failure { status, message }) => {
            fatal!("{message}");
            exit::Ending::Exit(status)
        }
    };
    // Exits with a status, or dies of the signal that killed the provider (`exit::end`).
    exit::end(ending)
}

fn run(args: impl Iterator<Item = &'static OsStr>) -> Result<exit::Ending, Failure> {
    // The GUARDIAN_* variables, in one pass over the environment (see sys::vars_with_prefix).
    let vars = sys::vars_with_prefix(b"GUARDIAN_");
    let env = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let cli = match cli::parse(args, &env) {
        Ok(cli::Parsed::Run(cli)) => cli,
        Ok(cli::Parsed::Print(text)) => {
            // Help and version go to stdout with status 0, as clap printed them (a closed
            // stdout is not an error here either).
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            return Ok(exit::Ending::Exit(0));
        }
        Err(message) => return Err(Failure::guardian(format!("{message}; see 'guardian --help'"))),
    };
    log::set_level(cli::verbosity(&cli));
    // The kill signal may not also be a stop request (a rule between two options).
    if let Some(kill) = cli.kill_signal {
        signals::check_kill_signal(kill, cli.stop_signal).map_err(Failure::guardian)?;
    }
    if let Some(sub) = &cli.sub {
        // A subcommand supervises nothing: it is interrupted and stopped as any program is.
        if let Err(e) = sys::start::restore_caller_mask() {
            log::debug!("sigprocmask(SIG_SETMASK) failed: {e}; signals stay blocked");
        }
        return match sub {
            cli::Sub::Sweep { cgroup, leaf } => cgroup::sweep(cgroup.as_deref(), leaf.as_deref()),
            // The subcommand's --cgroup, else the one guardian itself would use (GUARDIAN_CGROUP).
            cli::Sub::Doctor { json, cgroup } => {
                Ok(doctor::run(*json, cgroup.as_ref().or(cli.cgroup.as_ref()), cli.no_sentinel, cli.kill_signal))
            }
        }
        .map(exit::Ending::Exit);
    }
    setup_and_supervise(cli)
}

/// What setup produced for the supervise loop.
struct Started {
    sigfd: OwnedFd,
    parent: Option<ParentWatch>,
    discovery: Discovery,
    proc: Option<proctree::Proc>,
    leaf: Option<cgroup::Leaf>,
    spawned: spawn::Spawned,
    /// guardian's controlling terminal (`/dev/tty`), if it has one.
    tty: Option<OwnedFd>,
    take_terminal: bool,
    /// `pidfd_send_signal` may be used (start-up step 9).
    pidfds: bool,
}

/// Start-up steps 4 to 9, up to and including the provider's start (steps 1 to 3b are
/// [`setup_and_supervise`]'s); on failure nothing it started is left running, and the caller
/// reports the failure as an `error` event.
fn start(
    cli: &cli::Cli,
    mut proper: sentinel::Proper,
    setup: signal_step::Setup,
    events: &mut Events,
) -> Result<Started, Failure> {
    let me = proper.me;
    let job_in_foreground = proper.job_in_foreground;
    proper.report(events);
    let signal_step::Setup { sigfd, original_mask, sigchld_ignored, .. } = setup;

    // 4. Subreaper before the provider exists, so every orphan of its tree comes to us.
    rustix::process::set_child_subreaper(Some(
        rustix::process::Pid::from_raw(me).ok_or_else(|| Failure::guardian("bad pid"))?,
    ))
    .map_err(|e| Failure::guardian(format!("prctl(PR_SET_CHILD_SUBREAPER) failed: {e}")))?;

    // 5. Parent watch (`supervise::parent`): pidfd on the parent, re-checked after opening;
    //    PR_SET_PDEATHSIG when the parent is outside guardian's PID namespace.
    //    Behind a sentinel the parent is the sentinel, watched whatever --no-parent-watch says
    //    (armed at the split; the sentinel watches the host's process, or not, as that option
    //    says).
    let parent = match proper.parent {
        None if cli.no_parent_watch => None,
        armed => supervise::parent::watch(events, me, armed, cli.kill_signal)?,
    };

    // 6. Discovery mode: how descendants will be found at teardown. Only a /proc that is
    //    missing or another namespace's means blind; any other error (EMFILE: the fd limit)
    //    is named and fatal.
    let proc = proctree::open_own().map_err(Failure::guardian)?;
    let own_proc = proc.is_some();
    let discovery = match (own_proc, me == 1) {
        (true, false) => Discovery::Scan,
        (_, true) => Discovery::Broadcast,
        (false, false) => Discovery::Blind,
    };

    // 7. Leaf cgroup, before the provider exists, so none of its tree is born outside. The
    //    supervisor owns it from its `Start` on.
    let limits = cgroup::Limits {
        memory_max: cli.memory_max.clone(),
        pids_max: cli.pids_max.clone(),
        cpu_max: cli.cpu_max.clone(),
    };
    let leaf = cgroup::leaf_for_provider(cli.cgroup.as_deref(), &limits, me, events)?;

    // Blind: neither /proc nor kill(-1) can find the descendants. Only a leaf contains them;
    // without one guardian would leave orphans behind, so it refuses before starting anything.
    if discovery == Discovery::Blind {
        if leaf.is_none() {
            return Err(Failure::guardian(BLIND_REFUSAL));
        }
        debug!("/proc is missing or belongs to another PID namespace: the leaf cgroup finds the descendants");
        events.emit(Event::Fallback {
            what: "proc".into(),
            errno: "ENOENT".into(),
            detail: "/proc cannot list or verify descendants; the leaf cgroup contains them: cgroup.kill at the grace deadline, the stop signal reaches only the provider".into(),
        });
    }

    // 7b. Terminal: guardian's controlling terminal is `/dev/tty`, whatever fds 0-2 are. The
    //    provider gets its foreground at start only if guardian's group holds it (never from
    //    the background) and fd 0 is that terminal (an interactive command); otherwise it gets
    //    it when it first reads or sets the terminal while guardian's group holds it.
    //    A group outside guardian's PID namespace reads as 0, and so does a foreground group
    //    that is not visible: no comparison of the two can be trusted, so no job control
    //    through guardian. But an interactive command (fd 0 the terminal) still gets a group
    //    of its own and the foreground at start, if a zero-length read says guardian's group
    //    holds it, as tini does (issue 22.6): in guardian's invisible group a shell such as
    //    dash reads its group and the foreground as 0, and fails to set them back at exit.
    let mut handover = None;
    let tty = match sys::open_controlling_terminal() {
        Ok(Some(t)) if sentinel::job_pgrp() == 0 => {
            debug!("guardian's process group is outside its PID namespace: no job control through guardian");
            // Behind a sentinel guardian has left that group: it asked before it left.
            let holds = job_in_foreground.unwrap_or_else(|| sys::in_foreground(t.as_fd()).unwrap_or(false));
            if sys::is_controlling_terminal(std::io::stdin().as_fd()) && holds {
                debug!("guardian's group holds the terminal: the provider gets a group of its own and the foreground");
                handover = Some(t);
            }
            None
        }
        Ok(tty) => tty,
        Err(e) => {
            debug!("opening /dev/tty failed ({e}): no job control through guardian");
            None
        }
    };
    let take_terminal = tty.as_ref().is_some_and(|t| {
        sys::tcgetpgrp(t.as_raw_fd()).ok() == Some(sentinel::job_pgrp())
            && sys::is_controlling_terminal(std::io::stdin().as_fd())
    });

    // 8. Spawn: start the provider.
    let cfg = spawn::SpawnConfig {
        argv: &cli.command,
        original_mask,
        restore_sigchld_ignored: sigchld_ignored,
        take_terminal: tty
            .as_ref()
            .filter(|_| take_terminal)
            .or(handover.as_ref())
            .map(|t| (t.as_raw_fd(), sentinel::job_pgrp())),
        new_group: sys::getpgrp() != 0 || handover.is_some(),
        cgroup: leaf.as_ref().map(|l| (l.dir_fd(), l.procs_fd())),
    };
    let mut spawned = spawn::spawn(&cfg, events)?;

    // 9. Pidfd signalling probe: can pidfds signal? A pidfd on guardian itself, or else on the
    //    provider (its unreaped child), both always permitted targets, tells a refused
    //    interface from a denied target.
    let pidfds = match sys::pidfd_open(me) {
        Ok(fd) => pidref::probe_pidfd_signal(fd.as_fd(), events),
        Err(_) => spawned.provider.pidfd().is_none_or(|fd| pidref::probe_pidfd_signal(fd, events)),
    };
    if !pidfds {
        spawned.provider.refuse_pidfd_signals();
    }
    Ok(Started { sigfd, parent, discovery, proc, leaf, spawned, tty, take_terminal, pidfds })
}

/// Steps 0 to 2b; guardian goes on in [`supervise`] and ends through [`finish`].
fn setup_and_supervise(cli: cli::Cli) -> Result<exit::Ending, Failure> {
    // 1. Refuse set-id: guardian signals processes; it must not do so with borrowed privileges.
    if sys::is_setid() {
        return Err(Failure::guardian(
            "refusing to run setuid/setgid (real and effective ids differ); install guardian without the set-id bit",
        ));
    }
    // The started process's pid (the sentinel's split, start-up step 3b, gives guardian another).
    let me = std::process::id() as i32;

    // 1b. Not dumpable: /proc/<guardian>/fd and ptrace are closed to a same-uid provider, which
    //    could otherwise reopen the events pipe through /proc and forge events. The provider's
    //    exec makes it dumpable again (its own business).
    let dumpable = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);

    // 2. Events fd: taken over before guardian opens any fd of its own (a signalfd could
    //    otherwise reuse a closed number the caller named), and before the provider could
    //    inherit it.
    let (events, events_note) = match (cli.events_fd, &cli.events_file) {
        (Some(n), _) => Events::open(n).map_err(Failure::guardian)?,
        (None, Some(path)) => (events::open_file(Path::new(path)).map_err(Failure::guardian)?, None),
        (None, None) => (Events::disabled(), None),
    };
    // Diagnostics never block guardian from here on (a stderr pipe nobody reads); nothing is
    // logged before this point but a fatal error.
    log::never_block();
    if let Err(e) = dumpable {
        warn!("prctl(PR_SET_DUMPABLE, 0) failed: {e}; a same-uid provider could reach guardian's fds through /proc");
    }
    if let Some(note) = events_note {
        debug!("{note}");
    }

    // 3. Signals: every catchable one has been blocked since guardian's first instant
    //    (`sys::start`); keep the caller's mask for the provider and read the handled ones
    //    from a signalfd (`signal_step::setup`).
    test_hooks::pause_before_signal_setup();
    let setup = match signal_step::setup(cli.stop_signal, cli.kill_signal) {
        Ok(setup) => setup,
        Err(e) => return Err(start_failed(events, Failure::guardian(e))),
    };
    if setup.stop_signal_ignored {
        debug!(
            "the stop signal {} was ignored; the provider gets it at its default action",
            signals::name(cli.stop_signal.get())
        );
    }
    test_hooks::fault_after_signal_setup();

    // 3b. Sentinel (`sentinel`): unless guardian is PID 1 (or it is turned off), the
    //     process the host started stays behind as a small parent and guardian goes on in a
    //     new process sharing its memory, so that a SIGKILL of the host's process is a parent
    //     death guardian sees. Everything guardian owns moves into it; the sentinel keeps
    //     plain values. The rest of guardian (and its exit) happens in that closure.
    let plan = sentinel::Plan {
        me,
        sigfd: setup.sigfd.as_raw_fd(),
        watch_parent: !cli.no_parent_watch,
        events_fd: events.raw_fd(),
        turned_off: cli.no_sentinel,
    };
    sentinel::split(
        plan,
        Box::new(move |split| -> std::convert::Infallible {
            finish(match split {
                Ok(proper) => supervise(cli, proper, setup, events),
                Err(failure) => Err(start_failed(events, failure)),
            })
        }),
    )
}

/// A start-up failure becomes an `error` event (the events are flushed and closed).
fn start_failed(mut events: Events, failure: Failure) -> Failure {
    events.emit(Event::Error { status: failure.status, message: failure.message.clone(), abandoned: None });
    events.close(std::time::Duration::from_secs(1));
    failure
}

/// Setup steps 3 to 9 and the supervise loop, in guardian proper (behind the sentinel, on
/// the stack `sys::clone_vm` gave it).
fn supervise(
    cli: cli::Cli,
    proper: sentinel::Proper,
    setup: signal_step::Setup,
    mut events: Events,
) -> Result<exit::Ending, Failure> {
    let me = proper.me;
    let Started { sigfd, parent, discovery, proc, leaf, spawned, tty, take_terminal, pidfds } =
        match start(&cli, proper, setup, &mut events) {
            Ok(started) => started,
            Err(failure) => return Err(start_failed(events, failure)),
        };
    let mode = match (&leaf, me == 1) {
        (Some(_), _) => "cgroup",
        (None, true) => "pid1",
        (None, false) => "subreaper",
    };
    let leaf_path = leaf.as_ref().map(|l| l.path_text());
    info!(
        "started provider {} (pgid {}, mode {mode}, discovery {}, pidfd {}, cgroup {})",
        spawned.provider.pid,
        spawned.pgid,
        discovery.name(),
        spawned.provider.pidfd().is_some(),
        leaf_path.as_deref().unwrap_or("none")
    );
    events.emit(Event::Spawned {
        pid: spawned.provider.pid,
        pgid: spawned.pgid,
        // The pid the host started and knows: the sentinel's when there is one.
        guardian_pid: sentinel::pid().unwrap_or(me),
        mode,
        cgroup: leaf_path,
    });

    let settings = Settings {
        grace: cli.grace,
        stop_signal: cli.stop_signal,
        kill_signal: cli.kill_signal,
        // Without a group of its own the provider shares guardian's (its caller's): only the
        // provider can be the target.
        forward_to: if spawned.pgid == spawned.provider.pid {
            cli.forward_to
        } else {
            if cli.forward_to == Target::Group {
                warn!(
                    "--forward-to group: guardian's process group is outside its PID namespace, so the provider has no group of its own; signals go to the provider"
                );
            }
            Target::Provider
        },
        timeout: cli.timeout,
        wait_descendants: cli.wait_descendants,
    };
    let tree = Tree::new(discovery, proc, cli.stop_signal, pidfds);
    let sup = Supervisor::new(supervise::Start {
        settings,
        sigfd,
        provider: spawned.provider,
        provider_pgid: spawned.pgid,
        parent,
        events,
        tree,
        leaf,
        tty,
        gave_terminal: take_terminal,
    });
    // 10. Start-up memory: everything start-up needed is done: the parsed command line (the
    //     provider's argv and the option strings) is freed, then start-up's heap and stack
    //     pages are handed back before idling.
    drop(cli);
    sys::release_startup_memory();
    sup.run().map(|outcome| outcome.ending(me == 1))
}
