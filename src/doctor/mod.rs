//! doctor: `guardian doctor [--json] [--cgroup auto|PATH]`. Checks which of guardian's
//! guarantees hold on this machine by doing each thing for real (a short-lived probe child
//! for the pidfd, clone3 and waitid checks, a temporary leaf cgroup for `CLONE_INTO_CGROUP`
//! and `cgroup.kill`), never by reading the kernel version; reports the mode guardian would
//! run in with the given `--cgroup`, and one line per problem saying what to change.
//!
//! [`run`] gathers the [`Facts`] (the probes live in `probes`, the cgroup facts come from
//! `cgroup`, the code guardian runs), judges them into problems and notes, and prints the
//! `report`. A refused interface whose fallback weakens a guarantee is a problem; one whose
//! fallback keeps every guarantee is a note.
//!
//! Exit status: 0 when every guarantee holds in that mode, 1 when guardian would run
//! degraded, 2 when guardian would refuse to start (its exit 125, e.g. an unusable
//! `--cgroup PATH`). Every probe child is killed and reaped, every leaf removed,
//! before doctor returns; every fd it opens is close-on-exec.

#[cfg(test)]
mod claims;
mod probes;
mod report;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::cgroup::mount::{Mount, parse_proc_cgroup, read_all_mounts};
use crate::cgroup::{Hierarchy, Parent, Request};
use crate::sys;

use crate::supervise::parent::{self, Choice};
use probes::{ChildProbes, Probe, Watch};
use report::Report;

/// Runs every check; prints the report; returns the exit status.
/// `no_sentinel`: `--no-sentinel` / `GUARDIAN_NO_SENTINEL`, and `kill_signal`:
/// `--kill-signal` / `GUARDIAN_KILL_SIGNAL`, as guardian would start with them.
pub fn run(json_out: bool, request: Option<&OsString>, no_sentinel: bool, kill_signal: Option<i32>) -> i32 {
    let request = request.map(OsString::as_os_str);
    let report = judge(request, Facts::gather(request, kill_signal), no_sentinel);
    // A reader that went away (`guardian doctor | head -1`) is not doctor's failure: the
    // status still says what it found (println! would panic on EPIPE).
    let text = if json_out { format!("{}\n", report.json()) } else { report.human() };
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    report.status()
}

/// What doctor found out about this machine, before judging it.
pub(super) struct Facts {
    kernel: String,
    me: i32,
    euid: u32,
    subreaper: Probe,
    signalfd: Probe,
    child: ChildProbes,
    /// How guardian would watch its parent, and the probe of it.
    watch: Watch,
    parent_watch: Probe,
    /// `clone(CLONE_VM)` as guardian's split makes it (the sentinel).
    clone_vm: Probe,
    cgroup: CgroupFacts,
    proc: ProcFacts,
}

impl Facts {
    fn gather(request: Option<&OsStr>, kill_signal: Option<i32>) -> Facts {
        let me = std::process::id() as i32;
        // A reaper must not have SIGCHLD ignored, or the kernel reaps the probe children.
        if sys::is_ignored(libc::SIGCHLD) {
            let _ = sys::set_default_disposition(libc::SIGCHLD);
        }
        let kernel = sys::uname_release();
        let subreaper = probes::subreaper(me);
        let signalfd = probes::signalfd();
        let child = probes::probe_child();
        let mounts = read_all_mounts().unwrap_or_default();
        let cgroup = cgroup_facts(request, me);
        let proc = proc_facts(&mounts);
        // Last: with the parent outside the namespace this sets PR_SET_PDEATHSIG for a moment,
        // when no probe child is left.
        let (watch, parent_watch) = probes::parent_watch(me, kill_signal);
        let clone_vm =
            if me == 1 { Probe::untested("PID 1 of its namespace: no sentinel") } else { probes::clone_vm() };
        let euid = rustix::process::geteuid().as_raw();
        Facts { kernel, me, euid, subreaper, signalfd, child, watch, parent_watch, clone_vm, cgroup, proc }
    }
}

/// A reason guardian would run degraded, with the fix.
pub(super) struct Problem {
    what: &'static str,
    problem: String,
    fix: String,
}

impl Problem {
    fn new(what: &'static str, problem: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem { what, problem: problem.into(), fix: fix.into() }
    }
}

/// The verdict: the mode guardian would run in, the problems and the notes.
fn judge(request: Option<&OsStr>, facts: Facts, no_sentinel: bool) -> Report<'_> {
    let mut problems = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mode = mode_for(request, facts.me, &facts.cgroup, &mut problems);
    // A refused subreaper or signalfd: guardian exits 125, doctor 2.
    let mode = if judge_interfaces(&facts, &mut problems, &mut notes) { None } else { mode };
    judge_sentinel(facts.me, no_sentinel, &facts.clone_vm, &mut problems, &mut notes);
    let mode = startup_checks(&facts, mode, &mut problems, &mut notes);
    judge_proc(&facts, &mut problems, &mut notes);
    judge_cgroup(&facts.cgroup, mode, request, &mut problems, &mut notes);
    Report { request, facts, mode, problems, notes }
}

/// The sentinel (issue 24): whether a SIGKILL of the process the host starts still tears the
/// tree down. Off by choice is a problem (that SIGKILL would leave the tree running); off
/// because guardian would be PID 1 or its parent is outside its namespace is a note.
fn judge_sentinel(me: i32, turned_off: bool, clone: &Probe, problems: &mut Vec<Problem>, notes: &mut Vec<String>) {
    let fix = "drop --no-sentinel (and unset GUARDIAN_NO_SENTINEL)";
    match crate::sentinel::off_reason(me, turned_off) {
        // What `sentinel::split` does when `sys::clone_vm` fails: a forked sentinel.
        None if clone.ok == Some(false) => notes.push(format!(
            "sentinel: on, as a fork: {}; guardian would start the sentinel with fork() instead (a `fallback` event and a -v line say so): the same guarantees, but each page either process writes is copied",
            clone.detail
        )),
        None => notes.push(
            "sentinel: on; the process the host starts stays as a small parent of guardian, so its SIGKILL (kill_on_drop, Popen.kill(), kill -9) still tears the tree down".into(),
        ),
        Some(why) if turned_off => problems.push(Problem::new(
            "sentinel",
            format!("no sentinel process: {why}; a SIGKILL of guardian's process would leave the tree running"),
            fix,
        )),
        Some(why) => notes.push(format!("sentinel: off, {why}")),
    }
}

/// The process interfaces: subreaper, signalfd, the pidfd calls, clone3, waitid. True when
/// guardian would refuse to start (exit 125).
fn judge_interfaces(f: &Facts, problems: &mut Vec<Problem>, notes: &mut Vec<String>) -> bool {
    let child = &f.child;
    let refuses = !f.subreaper.holds() || !f.signalfd.holds();
    if !f.subreaper.holds() {
        problems.push(Problem::new(
            "subreaper",
            format!("guardian cannot become a child subreaper ({}); it would exit 125", f.subreaper.detail),
            "run on Linux 3.4 or later, outside a seccomp profile that denies prctl(PR_SET_CHILD_SUBREAPER)",
        ));
    }
    if !f.signalfd.holds() {
        problems.push(Problem::new(
            "signalfd",
            format!("signalfd is refused ({}); guardian would exit 125", f.signalfd.detail),
            "allow signalfd/signalfd4 in the seccomp profile",
        ));
    }
    if !child.pidfd_open.holds() {
        problems.push(Problem::new(
            "pidfd_open",
            format!(
                "pidfd_open is refused ({}): the parent watch polls getppid() every {} ms, and teardown can signal only guardian's own unreaped children (by pid, which cannot be reused before guardian reaps it): {WITHOUT_PIDFDS}",
                child.pidfd_open.detail,
                parent::PARENT_POLL.as_millis()
            ),
            "use Linux 5.3 or later, and allow pidfd_open in the seccomp profile (e.g. Docker 20.10+ / libseccomp 2.4.2+)",
        ));
    }
    if child.pidfd_send_signal.ok == Some(false) {
        problems.push(Problem::new(
            "pidfd_send_signal",
            format!(
                "pidfd_send_signal is refused ({}): teardown can signal only guardian's own unreaped children (by pid): {WITHOUT_PIDFDS}",
                child.pidfd_send_signal.detail
            ),
            "use Linux 5.1 or later, and allow pidfd_send_signal in the seccomp profile",
        ));
    }
    if !child.clone3_pidfd.holds() {
        notes.push(format!(
            "clone3 is refused ({}); guardian starts the provider with fork() + pidfd_open() on the unreaped child instead, which is equally race-free (a `fallback` event says so)",
            child.clone3_pidfd.detail
        ));
    }
    if !child.waitid_pidfd.holds() {
        notes.push(format!(
            "waitid(P_PIDFD) is unavailable ({}); guardian does not need it (it polls the pidfd and reaps with waitpid)",
            child.waitid_pidfd.detail
        ));
    }
    refuses
}

/// What teardown does without usable pidfds (`teardown::exec`: "Without pidfds only direct
/// children ... can be signalled safely"; `pidref`): said in doctor's own words.
const WITHOUT_PIDFDS: &str =
    "the tree is peeled from the top, each layer signalled once its parent died and it was reparented to guardian";

fn mode_for(request: Option<&OsStr>, me: i32, cg: &CgroupFacts, problems: &mut Vec<Problem>) -> Option<&'static str> {
    let plain = if me == 1 { "pid1" } else { "subreaper" };
    let Some(req) = request else { return Some(plain) };
    if req == "auto" {
        if cg.own_usable.holds() {
            return Some("cgroup");
        }
        problems.push(Problem::new(
            "cgroup",
            format!("--cgroup auto falls back to plain subreaper mode: {}", cg.own_usable.detail),
            "delegate a cgroup to this user (e.g. run under `systemd-run --user --scope -p Delegate=yes`), \
             or pass --cgroup PATH with a writable cgroup2 directory; without a cgroup, a SIGKILLed guardian \
             leaves its tree behind",
        ));
        return Some(plain);
    }
    if cg.path_usable.as_ref().is_some_and(Probe::holds) {
        return Some("cgroup");
    }
    let why = cg.path_usable.as_ref().map(|p| p.detail.clone()).unwrap_or_default();
    problems.push(Problem::new(
        "cgroup",
        format!("--cgroup {}: guardian would refuse to start (exit 125): {why}", req.to_string_lossy()),
        "pass a directory on the cgroup2 mount that this user can write (the directory and the cgroup.procs \
         of its common ancestor with guardian's cgroup), or use --cgroup auto",
    ));
    None
}

/// What the start-up steps that depend on where guardian runs would do (docs/design.md,
/// start-up steps 5 and 6): the parent watch when the parent is outside guardian's PID
/// namespace, and blind mode (a foreign or missing /proc, not PID 1), which guardian refuses
/// without a leaf cgroup. Returns the mode, `None` when guardian would refuse to start.
fn startup_checks(
    f: &Facts,
    mut mode: Option<&'static str>,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) -> Option<&'static str> {
    let (problem, refuses) = judge_parent_watch(f.watch, &f.parent_watch.detail, f.child.pidfd_open.holds());
    problems.extend(problem);
    if refuses {
        mode = None;
    }
    let (me, own_proc) = (f.me, f.proc.own_namespace);
    if let Some(e) = &f.proc.error {
        problems.push(Problem::new(
            "proc",
            format!("{e}; guardian would refuse to start (exit 125)"),
            "give guardian the resource the error names",
        ));
        return None;
    }
    if own_proc || me == 1 {
        return mode;
    }
    if mode == Some("cgroup") {
        notes.push(
            "/proc is missing or belongs to another PID namespace: the leaf cgroup alone finds the descendants (a `fallback` event says so)"
                .into(),
        );
        return mode;
    }
    problems.push(Problem::new(
        "proc",
        "/proc is missing or belongs to another PID namespace and guardian is not PID 1: descendants cannot be found, so guardian would refuse to start (exit 125)",
        "mount a /proc of this PID namespace (e.g. unshare --mount-proc), use --cgroup, or run guardian as PID 1 of the namespace",
    ));
    None
}

/// doctor's verdict on guardian's parent watch (`supervise::parent::choose`'s choice, and
/// whether it took effect): the problem to report, and whether guardian would refuse to start.
/// `detail`: the probe's; `pidfd_open`: whether pidfd_open works at all (its own problem
/// then says so).
fn judge_parent_watch(watch: Watch, detail: &str, pidfd_open: bool) -> (Option<Problem>, bool) {
    const OUTSIDE: &str = "the parent is outside guardian's PID namespace (getppid() is 0, as under docker/podman/kubectl exec or nsenter -p)";
    const FIX: &str = "start guardian from a process inside its PID namespace, or run it as the namespace's PID 1";
    let problem = match (watch.choice, watch.works) {
        (Choice::Pid1, _) | (Choice::Pid(_), true) => None,
        // Without pidfd_open at all, the pidfd_open problem says so already.
        (Choice::Pid(_), false) if !pidfd_open => None,
        (Choice::Pid(_), false) => Some(Problem::new(
            "parent-watch",
            format!(
                "a pidfd on the parent cannot be opened ({detail}): parent death is noticed by checking getppid() every {} ms (a `fallback` event says so)",
                parent::PARENT_POLL.as_millis()
            ),
            "allow pidfd_open on the parent (a seccomp or LSM policy refuses it)",
        )),
        (Choice::Deathsig(sig), true) => {
            let sig = parent::signal_name(sig);
            Some(Problem::new(
                "parent-watch",
                format!(
                    "{OUTSIDE}: parent death is watched with PR_SET_PDEATHSIG({sig}) instead of a pidfd (a `fallback` event says so); it fires \
                     when the parent *thread* that started guardian exits, and a {sig} sent from outside the namespace counts as parent death"
                ),
                FIX,
            ))
        }
        (Choice::Unwatched, _) => Some(Problem::new(
            "parent-watch",
            format!(
                "{OUTSIDE} and every real-time signal is ignored, so none is free for PR_SET_PDEATHSIG: parent death is not noticed (a `fallback` event says so)"
            ),
            format!("{FIX}, or leave a real-time signal at its default disposition"),
        )),
        (Choice::Deathsig(_), false) => {
            return (
                Some(Problem::new(
                    "parent-watch",
                    format!(
                        "{OUTSIDE} and PR_SET_PDEATHSIG is refused ({detail}): guardian would refuse to start (exit 125)"
                    ),
                    format!("{FIX}, or pass --no-parent-watch"),
                )),
                true,
            );
        }
    };
    (problem, false)
}

/// The `/proc` mount (its `children` files are probed on the probe child).
struct ProcFacts {
    own_namespace: bool,
    /// /proc could not be judged (not missing: another error, such as EMFILE), explained.
    error: Option<String>,
    hidepid: Option<String>,
    subset: Option<String>,
}

fn proc_facts(mounts: &[Mount]) -> ProcFacts {
    let (own_namespace, error) = match crate::proctree::open_own() {
        Ok(own) => (own.is_some(), None),
        Err(e) => (false, Some(e)),
    };
    let proc_mount = mounts.iter().rev().find(|m| m.mount_point == Path::new("/proc") && m.fstype == "proc");
    let opt = |key: &str| proc_mount.and_then(|m| m.option(key)).map(String::from);
    ProcFacts { own_namespace, error, hidepid: opt("hidepid"), subset: opt("subset") }
}

struct CgroupFacts {
    /// The mount that holds the leaf's parent (or guardian's own cgroup).
    mount: Option<Mount>,
    own_rel: Option<String>,
    own_dir: Option<PathBuf>,
    controllers: Option<Vec<String>>,
    /// `--cgroup auto` would get a leaf in guardian's own cgroup (the delegation check of
    /// `cgroup::check_parent`, the one guardian runs).
    own_usable: Probe,
    /// `--cgroup PATH` would get a leaf there.
    path_usable: Option<Probe>,
    kill_file: Probe,
    clone_into_cgroup: Probe,
    /// The mount has `nsdelegate` (cgroup namespaces are delegation boundaries).
    nsdelegate: Option<bool>,
    /// guardian may start the provider in a cgroup namespace rooted at its leaf: the leaf
    /// probe's answer, else whether guardian has CAP_SYS_ADMIN.
    namespace: bool,
    /// The probe child started in its own cgroup namespace (`untested` without a leaf).
    namespace_probe: Probe,
}

fn read_trimmed(path: &Path) -> io::Result<String> {
    fs::read_to_string(path).map(|s| s.trim().to_string())
}

fn cgroup_facts(request: Option<&OsStr>, me: i32) -> CgroupFacts {
    let untested = || Probe::untested("no usable cgroup to create a leaf in");
    let mut facts = CgroupFacts {
        mount: None,
        own_rel: None,
        own_dir: None,
        controllers: None,
        own_usable: Probe::untested("no cgroup2 mount"),
        path_usable: None,
        kill_file: untested(),
        clone_into_cgroup: untested(),
        nsdelegate: None,
        namespace: crate::cgroup::may_create_namespace(),
        namespace_probe: untested(),
    };
    let h = match Hierarchy::find() {
        Ok(h) => h,
        Err(why) => {
            facts.own_rel =
                fs::read_to_string("/proc/self/cgroup").ok().and_then(|t| parse_proc_cgroup(&t).map(String::from));
            facts.own_usable = Probe::fell_short(why.clone());
            facts.path_usable = request.filter(|r| *r != "auto").map(|_| Probe::fell_short(why));
            return facts;
        }
    };
    facts.own_rel = Some(h.own_rel.clone());
    facts.own_dir = Some(h.own_dir.clone());
    facts.controllers = read_trimmed(&h.own_dir.join("cgroup.controllers"))
        .ok()
        .map(|s| s.split_whitespace().map(String::from).collect());
    let judge = |req: &Request| match crate::cgroup::check_parent(&h, req) {
        Ok(p) => (Probe::pass(format!("leaves can be created in {}", p.dir.display())), Some(p)),
        Err(u) => (Probe::refused(u.errno, u.message), None),
    };
    let (own, own_parent) = judge(&Request::Auto);
    facts.own_usable = own;
    // Where a leaf would go for the requested mode, and the probe on it.
    let target: Option<Parent> = match request {
        Some(r) if r != "auto" => {
            let (p, parent) = judge(&Request::from_arg(r));
            facts.path_usable = Some(p);
            parent
        }
        _ => own_parent,
    };
    let shown = target.as_ref().map_or(h.own_dir.clone(), |p| p.dir.clone());
    facts.mount = h.mounts.iter().find(|m| shown.starts_with(&m.mount_point)).cloned();
    facts.nsdelegate = Some(h.nsdelegate(&shown));
    if let Some(parent) = target {
        let leaf = probes::probe_leaf(&parent, &h, me);
        facts.kill_file = leaf.kill_file;
        facts.clone_into_cgroup = leaf.clone_into_cgroup;
        if leaf.namespace.ok.is_some() {
            facts.namespace = leaf.namespace.holds();
        }
        facts.namespace_probe = leaf.namespace;
        if let Err(why) = leaf.created {
            // guardian would fail the same way when it creates its leaf there.
            let probe = Probe::fell_short(why);
            match request {
                Some(r) if r != "auto" => facts.path_usable = Some(probe),
                _ => facts.own_usable = probe,
            }
        }
    } else if h.own_rel != "/" {
        let kill = h.own_dir.join("cgroup.kill");
        facts.kill_file = if kill.exists() {
            Probe::pass(format!("{} exists", kill.display()))
        } else {
            Probe::fell_short(format!("{} is missing (Linux before 5.14)", kill.display()))
        };
    }
    facts
}

/// `/proc`: its mount options, the `children` files, and how a pidfd's pid is confirmed.
fn judge_proc(f: &Facts, problems: &mut Vec<Problem>, notes: &mut Vec<String>) {
    let (procf, child) = (&f.proc, &f.child);
    if let Some(h) = &procf.hidepid
        && h != "0"
        && h != "off"
        && f.euid != 0
    {
        problems.push(Problem::new(
            "hidepid",
            format!(
                "/proc is mounted with hidepid={h}: descendants that change their user id become invisible to guardian"
            ),
            "mount /proc without hidepid, or with gid=<a group guardian's user is in>",
        ));
    }
    if procf.subset.as_deref() == Some("pid") {
        notes.push("/proc is mounted with subset=pid".into());
    }
    // Only where guardian scans /proc (its own namespace's, not as PID 1).
    if !procf.own_namespace || f.me == 1 {
        return;
    }
    if !child.children_file.holds() {
        notes.push(format!(
            "the children files cannot be walked ({}); each round lists all of /proc instead: the same descendants are found, at a cost that grows with every process on the machine",
            child.children_file.detail
        ));
    }
    // guardian confirms a pidfd's pid only where it opens pidfds on descendants.
    if child.pidfd_open.holds() && child.pidfd_get_info.ok == Some(false) {
        if child.pidfd_fdinfo.holds() {
            notes.push(format!(
                "PIDFD_GET_INFO is unavailable ({}; Linux 6.13+); guardian reads a pidfd's pid from /proc/self/fdinfo instead, which confirms the same identity",
                child.pidfd_get_info.detail
            ));
        } else {
            problems.push(Problem::new(
                "pidfd-identity",
                format!(
                    "neither PIDFD_GET_INFO ({}) nor the pidfd's fdinfo ({}) says which process a pidfd names: descendants are signalled only once they are guardian's unreaped direct children (the tree is peeled from the top)",
                    child.pidfd_get_info.detail, child.pidfd_fdinfo.detail
                ),
                "use Linux 6.13 or later for PIDFD_GET_INFO, or let guardian read /proc/self/fdinfo",
            ));
        }
    }
}

/// The leaf's interfaces in cgroup mode, or what `--cgroup auto` would add otherwise.
fn judge_cgroup(
    cg: &CgroupFacts,
    mode: Option<&str>,
    request: Option<&OsStr>,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) {
    if mode == Some("cgroup") {
        if !cg.kill_file.holds() {
            problems.push(Problem::new(
                "cgroup.kill",
                format!(
                    "cgroup.kill cannot be used ({}): the leaf is killed by freezing it and SIGKILLing each member",
                    cg.kill_file.detail
                ),
                "use Linux 5.14 or later for cgroup.kill",
            ));
        }
        if !cg.clone_into_cgroup.holds() {
            notes.push(format!(
                "CLONE_INTO_CGROUP does not work ({}); the provider joins its leaf by writing cgroup.procs before exec instead",
                cg.clone_into_cgroup.detail
            ));
        }
        let nsdelegate = cg.nsdelegate == Some(true);
        // Why there is no namespace: the leaf probe's answer when it ran.
        let no_namespace = match cg.namespace_probe.ok {
            Some(false) => {
                format!("guardian cannot start the provider in a cgroup namespace ({})", cg.namespace_probe.detail)
            }
            _ => "guardian lacks CAP_SYS_ADMIN to start the provider in a cgroup namespace".into(),
        };
        let escape = "a descendant of this uid can move itself out of the leaf (into a cgroup.procs it may write) and escape the leaf's kill";
        notes.push(match (nsdelegate, cg.namespace) {
            // guardian creates the namespace only with CAP_SYS_ADMIN, which the provider then
            // inherits: with it, setns(2) into another cgroup namespace (PID 1's) lifts the
            // boundary. Say exactly for whom the guarantee holds.
            (true, true) => "the provider starts in a cgroup namespace rooted at its leaf and the cgroup2 mount has nsdelegate: the kernel refuses any move out of the leaf to every process of the tree without CAP_SYS_ADMIN. A process that keeps guardian's CAP_SYS_ADMIN can setns(2) into PID 1's cgroup namespace and move itself out: guardian still kills it at teardown while guardian lives (it stays a descendant), but after a SIGKILLed guardian `guardian sweep` cannot find it. Drop the capability in the provider where that matters (setpriv --bounding-set -sys_admin --inh-caps -sys_admin, or run it as another user)".into(),
            (true, false) => format!("the cgroup2 mount has nsdelegate, but {no_namespace}: {escape}"),
            (false, true) => format!("the provider starts in a cgroup namespace rooted at its leaf, but the cgroup2 mount lacks nsdelegate, so the namespace is no boundary: {escape}"),
            (false, false) => format!("the cgroup2 mount lacks nsdelegate (and {no_namespace}): {escape}"),
        });
    } else if request.is_none() {
        if cg.own_usable.holds() {
            notes.push(
                "a delegated cgroup is available: --cgroup auto would also contain a tree whose guardian is SIGKILLed"
                    .into(),
            );
        } else {
            notes.push(
                "without a cgroup, a guardian that is itself SIGKILLed cannot stop its tree (see `guardian doctor --cgroup auto`)"
                    .into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// doctor's verdict on the parent watch for every choice guardian's own decision
    /// (`parent::choose`) can make, each working or refused: it names the mechanism
    /// `parent::watch` then uses, and says "exit 125" exactly where guardian refuses to start.
    #[test]
    fn the_parent_watch_verdict_agrees_with_guardians_decision_in_every_mode() {
        let (min, max) = crate::signals::sigrt_range();
        let cases = [
            (1, None, None),
            (7, Some(3), None),
            (7, None, None),
            (7, None, Some(max)),
            (7, None, Some(-1)), // every real-time signal ignored
        ];
        for (me, ppid, ignored) in cases {
            let choice =
                parent::choose(me, ppid, |s| ignored == Some(s) || (ignored == Some(-1) && (min..=max).contains(&s)));
            for works in [true, false] {
                let (problem, refuses) = judge_parent_watch(Watch { choice, works }, "probe detail", true);
                let text = problem.as_ref().map(|p| p.problem.clone()).unwrap_or_default();
                let what = format!("{choice:?} works={works}: {text:?}");
                match (choice, works) {
                    (Choice::Pid1, _) | (Choice::Pid(_), true) => assert!(problem.is_none(), "{what}"),
                    (Choice::Pid(_), false) => {
                        // The interval guardian's fallback event names.
                        let interval = parent::poll_fallback();
                        let ms = interval.split_whitespace().find(|w| w.parse::<u64>().is_ok()).unwrap_or("?");
                        assert!(text.contains(&format!("every {ms} ms")), "{what}");
                    }
                    (Choice::Deathsig(sig), true) => {
                        assert!(text.contains(&format!("PR_SET_PDEATHSIG({})", parent::signal_name(sig))), "{what}")
                    }
                    (Choice::Deathsig(_), false) => assert!(refuses && text.contains("exit 125"), "{what}"),
                    (Choice::Unwatched, _) => assert!(text.contains("not noticed"), "{what}"),
                }
                assert_eq!(refuses, text.contains("exit 125"), "{what}");
            }
        }
        assert_eq!(parent::choose(7, None, |_| false), Choice::Deathsig(max));
    }
}
