//! doctor: `guardian doctor [--json] [--cgroup auto|PATH]`. Checks which of guardian's
//! guarantees hold on this machine by doing each thing for real (a short-lived probe child
//! for the pidfd, clone3 and waitid checks, a temporary leaf cgroup for `CLONE_INTO_CGROUP`
//! and `cgroup.kill`), never by reading the kernel version; reports the mode guardian would
//! run in with the given `--cgroup`, and one line per problem saying what to change.
//!
//! Exit status: 0 when every guarantee holds in that mode, 1 when guardian would run
//! degraded (or refuse to start). Every probe child is killed and reaped, every leaf removed,
//! before doctor returns; every fd it opens is close-on-exec.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::proctree::Proc;
use crate::sys;

/// Outcome of one probe: `ok` is `None` when it could not be tried.
#[derive(Debug, Clone)]
struct Probe {
    ok: Option<bool>,
    errno: Option<&'static str>,
    detail: String,
}

impl Probe {
    fn pass(detail: impl Into<String>) -> Probe {
        Probe { ok: Some(true), errno: None, detail: detail.into() }
    }
    fn fail(e: &io::Error, detail: impl Into<String>) -> Probe {
        let errno = e.raw_os_error().map(crate::errno::name);
        Probe { ok: Some(false), errno, detail: format!("{}: {e}", detail.into()) }
    }
    fn failed(detail: impl Into<String>) -> Probe {
        Probe { ok: Some(false), errno: None, detail: detail.into() }
    }
    fn untested(detail: impl Into<String>) -> Probe {
        Probe { ok: None, errno: None, detail: detail.into() }
    }
    fn holds(&self) -> bool {
        self.ok == Some(true)
    }
    fn json(&self) -> Value {
        json!({"ok": self.ok, "errno": self.errno, "detail": self.detail})
    }
}

use crate::cgroup::mount::{Mount, parse_proc_cgroup, read_all_mounts};
use crate::cgroup::{Hierarchy, Parent, Request};

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
    me: i32,
    own_proc: bool,
    mode: Option<&'static str>,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) -> Option<&'static str> {
    if me != 1 && rustix::process::getppid().is_none() {
        problems.push(Problem::new(
            "parent-watch",
            "the parent is outside guardian's PID namespace (getppid() is 0, as under docker/podman/kubectl exec or nsenter -p): \
             parent death is watched with PR_SET_PDEATHSIG(SIGRTMAX) instead of a pidfd (a `fallback` event says so); it fires \
             when the parent *thread* that started guardian exits, and a SIGRTMAX sent from outside the namespace counts as parent death",
            "start guardian from a process inside its PID namespace, or run it as the namespace's PID 1",
        ));
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

/// A reason guardian would run degraded, with the fix.
struct Problem {
    what: &'static str,
    problem: String,
    fix: String,
}

impl Problem {
    fn new(what: &'static str, problem: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem { what, problem: problem.into(), fix: fix.into() }
    }
}

struct ChildProbes {
    clone3_pidfd: Probe,
    pidfd_open: Probe,
    pidfd_send_signal: Probe,
    waitid_pidfd: Probe,
}

/// Starts a parked child (clone3 with CLONE_PIDFD, else fork), probes pidfd_open,
/// pidfd_send_signal (signal 0) and waitid(P_PIDFD) on it, and always kills and reaps it.
fn probe_child() -> ChildProbes {
    let (clone3_pidfd, forked) = match sys::spawn_parked_child(sys::Start::Clone3 { cgroup: None, extra: 0 }) {
        Ok(sys::Child { pid, pidfd }) => {
            (Probe::pass("clone3(CLONE_PIDFD) started a child and returned its pidfd"), Ok((pid, pidfd)))
        }
        Err(e) => {
            let probe = Probe::fail(&e, "clone3(CLONE_PIDFD)");
            (probe, sys::spawn_parked_child(sys::Start::Fork).map(|c| (c.pid, None)))
        }
    };
    let (pid, clone_fd) = match forked {
        Ok(x) => x,
        Err(e) => {
            let p = Probe::fail(&e, "fork() of a probe child");
            return ChildProbes {
                clone3_pidfd,
                pidfd_open: Probe::untested(p.detail.clone()),
                pidfd_send_signal: Probe::untested(p.detail.clone()),
                waitid_pidfd: Probe::untested(p.detail),
            };
        }
    };
    let (pidfd_open, opened) = match sys::pidfd_open(pid) {
        Ok(fd) => (Probe::pass(format!("pidfd_open({pid}) on an unreaped child")), Some(fd)),
        Err(e) => (Probe::fail(&e, format!("pidfd_open({pid})")), None),
    };
    let pidfd: Option<OwnedFd> = clone_fd.or(opened);
    let pidfd_send_signal = match &pidfd {
        Some(fd) => match sys::pidfd_send_signal(fd.as_fd(), 0, 0) {
            Ok(()) => Probe::pass("pidfd_send_signal(pidfd, 0) reached the probe child"),
            Err(e) => Probe::fail(&e, "pidfd_send_signal(pidfd, 0)"),
        },
        None => Probe::untested("no pidfd to signal through"),
    };
    // Stop the child: through the pidfd if that works, else kill() on the unreaped child.
    let killed = pidfd.as_ref().is_some_and(|fd| sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL, 0).is_ok());
    if !killed {
        let _ = sys::kill(pid, libc::SIGKILL);
    }
    let waitid_pidfd = match &pidfd {
        Some(fd) => match wait_pidfd(fd.as_fd()) {
            Ok(true) => Probe::pass("waitid(P_PIDFD, WEXITED) reaped the probe child (killed by SIGKILL)"),
            Ok(false) => {
                let _ = sys::reap_blocking(pid);
                Probe::failed("waitid(P_PIDFD) returned without the child's exit")
            }
            Err(e) => {
                let _ = sys::reap_blocking(pid);
                Probe::fail(&e, "waitid(P_PIDFD, WEXITED)")
            }
        },
        None => {
            let _ = sys::reap_blocking(pid);
            Probe::untested("no pidfd to wait on")
        }
    };
    ChildProbes { clone3_pidfd, pidfd_open, pidfd_send_signal, waitid_pidfd }
}

/// `waitid(P_PIDFD, fd, WEXITED)`: whether it reported the child killed by SIGKILL.
fn wait_pidfd(fd: BorrowedFd<'_>) -> io::Result<bool> {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    loop {
        match waitid(WaitId::PidFd(fd), WaitIdOptions::EXITED) {
            Ok(Some(st)) => return Ok(st.killed() && st.terminating_signal() == Some(libc::SIGKILL)),
            Ok(None) => return Ok(false),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
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
    /// guardian may start the provider in a cgroup namespace rooted at its leaf.
    namespace: bool,
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
    };
    let h = match Hierarchy::find() {
        Ok(h) => h,
        Err(why) => {
            facts.own_rel =
                fs::read_to_string("/proc/self/cgroup").ok().and_then(|t| parse_proc_cgroup(&t).map(String::from));
            facts.own_usable = Probe::failed(why.clone());
            facts.path_usable = request.filter(|r| *r != "auto").map(|_| Probe::failed(why));
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
        Err(u) => (Probe { ok: Some(false), errno: Some(crate::errno::name(u.errno)), detail: u.message }, None),
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
        let (created, kill_file, clone_into) = probe_leaf(&parent, &h, me);
        facts.kill_file = kill_file;
        facts.clone_into_cgroup = clone_into;
        if let Err(why) = created {
            // guardian would fail the same way when it creates its leaf there.
            let probe = Probe::failed(why);
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
            Probe::failed(format!("{} is missing (Linux before 5.14)", kill.display()))
        };
    }
    facts
}

/// Creates a temporary leaf below `parent`, starts a parked child in it with
/// clone3(CLONE_INTO_CGROUP), checks from /proc that it landed there, kills it with
/// `cgroup::leaf::kill` (guardian's own kill), reaps it and removes the leaf. Returns whether
/// the leaf could be created, and the (`cgroup.kill`, `CLONE_INTO_CGROUP`) probes.
fn probe_leaf(parent: &Parent, h: &Hierarchy, me: i32) -> (Result<(), String>, Probe, Probe) {
    let name = format!("guardian-doctor-{me}");
    let leaf = parent.dir.join(&name);
    let rel = format!("{}/{name}", parent.rel.trim_end_matches('/'));
    if let Err(e) = fs::create_dir(&leaf) {
        let p = Probe::fail(&e, format!("mkdir {}", leaf.display()));
        return (Err(p.detail.clone()), Probe::untested(p.detail.clone()), p);
    }
    let (kill, clone) = probe_in_leaf(&leaf, &rel, h);
    // The reaped child may take a moment to leave the leaf.
    let _ = crate::cgroup::leaf::wait_empty(&leaf, Duration::from_secs(2));
    if let Err(e) = crate::cgroup::leaf::remove_tree(&leaf) {
        crate::warn!("could not remove the probe cgroup {}: {e}", leaf.display());
    }
    (Ok(()), kill, clone)
}

fn probe_in_leaf(leaf: &Path, rel: &str, h: &Hierarchy) -> (Probe, Probe) {
    let kill_path = leaf.join("cgroup.kill");
    let dir = match fs::File::open(leaf) {
        Ok(d) => d,
        Err(e) => {
            let p = Probe::fail(&e, format!("open {}", leaf.display()));
            return (Probe::untested(p.detail.clone()), p);
        }
    };
    let (pid, pidfd) = match sys::spawn_parked_child(sys::Start::Clone3 { cgroup: Some(dir.as_fd()), extra: 0 }) {
        Ok(sys::Child { pid, pidfd }) => (pid, pidfd),
        Err(e) => {
            let p = Probe::fail(&e, "clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)");
            let k = if kill_path.exists() {
                Probe::pass(format!("{} exists (not exercised: no child could be placed)", kill_path.display()))
            } else {
                Probe::failed(format!("{} is missing (Linux before 5.14)", kill_path.display()))
            };
            return (k, p);
        }
    };
    let expected = h.relative(leaf);
    let landed =
        fs::read_to_string(format!("/proc/{pid}/cgroup")).ok().and_then(|t| parse_proc_cgroup(&t).map(String::from));
    let clone_probe = match (&landed, &expected) {
        (Some(l), Some(e)) if l == e => {
            Probe::pass(format!("clone3(CLONE_INTO_CGROUP) started a child directly in {}", leaf.display()))
        }
        _ => Probe::failed(format!(
            "the child started with CLONE_INTO_CGROUP is in {}, not {}",
            landed.as_deref().unwrap_or("?"),
            expected.as_deref().unwrap_or("?")
        )),
    };
    let kill_probe = match crate::cgroup::leaf::kill(leaf, rel, None) {
        Ok(crate::cgroup::Killed::KillFile) => {
            Probe::pass(format!("writing 1 to {} killed the leaf's child", kill_path.display()))
        }
        Ok(crate::cgroup::Killed::FreezeAndKill(_)) => {
            Probe::failed(format!("{} is missing (Linux before 5.14)", kill_path.display()))
        }
        Err(e) => Probe::fail(&e, format!("write {}", kill_path.display())),
    };
    if !kill_probe.holds() {
        let sent = pidfd.as_ref().is_some_and(|fd| sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL, 0).is_ok());
        if !sent {
            let _ = sys::kill(pid, libc::SIGKILL);
        }
    }
    let status = sys::reap_blocking(pid);
    let kill_probe = match (kill_probe.holds(), status) {
        (true, Ok(st)) if st.signal() == Some(libc::SIGKILL) => kill_probe,
        (true, _) => {
            Probe::failed(format!("{} was written but the child was not killed by SIGKILL", kill_path.display()))
        }
        (false, _) => kill_probe,
    };
    (kill_probe, clone_probe)
}

struct ProcFacts {
    own_namespace: bool,
    hidepid: Option<String>,
    subset: Option<String>,
    children_file: Probe,
}

fn proc_facts(mounts: &[Mount], me: i32) -> ProcFacts {
    let own_namespace = Proc::open().ok().is_some_and(|mut p| p.is_own_namespace());
    let proc_mount = mounts.iter().rev().find(|m| m.mount_point == Path::new("/proc") && m.fstype == "proc");
    let opt = |key: &str| proc_mount.and_then(|m| m.option(key)).map(String::from);
    // doctor is single-threaded: its main thread's tid is its pid.
    let children = PathBuf::from(format!("/proc/self/task/{me}/children"));
    let children_file = if children.exists() {
        Probe::pass(format!("{} exists", children.display()))
    } else {
        Probe::failed(format!("{} is missing (kernel without CONFIG_PROC_CHILDREN)", children.display()))
    };
    ProcFacts { own_namespace, hidepid: opt("hidepid"), subset: opt("subset"), children_file }
}

/// Runs every check; prints the report; returns the exit status.
pub fn run(json_out: bool, request: Option<&OsString>) -> i32 {
    let me = std::process::id() as i32;
    let is_root = rustix::process::geteuid().is_root();
    let request = request.map(OsString::as_os_str);
    // A reaper must not have SIGCHLD ignored, or the kernel reaps the probe children.
    if sys::is_ignored(libc::SIGCHLD) {
        let _ = sys::set_default_disposition(libc::SIGCHLD);
    }

    let kernel = sys::uname_release();
    let subreaper = match rustix::process::Pid::from_raw(me) {
        Some(pid) => match rustix::process::set_child_subreaper(Some(pid)) {
            Ok(()) => match rustix::process::child_subreaper() {
                Ok(Some(_)) => Probe::pass("PR_SET_CHILD_SUBREAPER took effect (PR_GET_CHILD_SUBREAPER says so)"),
                Ok(None) => Probe::failed("PR_SET_CHILD_SUBREAPER succeeded but PR_GET_CHILD_SUBREAPER reads 0"),
                Err(e) => Probe::fail(&e.into(), "prctl(PR_GET_CHILD_SUBREAPER)"),
            },
            Err(e) => Probe::fail(&e.into(), "prctl(PR_SET_CHILD_SUBREAPER)"),
        },
        None => Probe::failed("no pid"),
    };
    let signalfd = match sys::signalfd(&sys::SigSet::empty()) {
        Ok(_fd) => Probe::pass("signalfd(SFD_CLOEXEC) created"),
        Err(e) => Probe::fail(&e, "signalfd()"),
    };
    let child = probe_child();
    let mounts = read_all_mounts().unwrap_or_default();
    let cg = cgroup_facts(request, me);
    let procf = proc_facts(&mounts, me);

    let mut problems = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mode = mode_for(request, me, &cg, &mut problems);
    if !subreaper.holds() {
        problems.push(Problem::new(
            "subreaper",
            format!("guardian cannot become a child subreaper ({}); it would exit 125", subreaper.detail),
            "run on Linux 3.4 or later, outside a seccomp profile that denies prctl(PR_SET_CHILD_SUBREAPER)",
        ));
    }
    if !signalfd.holds() {
        problems.push(Problem::new(
            "signalfd",
            format!("signalfd is refused ({}); guardian would exit 125", signalfd.detail),
            "allow signalfd/signalfd4 in the seccomp profile",
        ));
    }
    if !child.pidfd_open.holds() {
        problems.push(Problem::new(
            "pidfd_open",
            format!("pidfd_open is refused ({}): the parent watch polls getppid() every 250 ms and descendants are signalled by pid after a /proc check", child.pidfd_open.detail),
            "use Linux 5.3 or later, and allow pidfd_open in the seccomp profile (e.g. Docker 20.10+ / libseccomp 2.4.2+)",
        ));
    }
    if child.pidfd_send_signal.ok == Some(false) {
        problems.push(Problem::new(
            "pidfd_send_signal",
            format!(
                "pidfd_send_signal is refused ({}): descendants would be signalled by pid",
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
    let mode = startup_checks(me, procf.own_namespace, mode, &mut problems, &mut notes);
    if let Some(h) = &procf.hidepid
        && h != "0"
        && h != "off"
        && !is_root
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
    if !procf.children_file.holds() {
        notes.push(format!("{}; guardian does not need it (it scans /proc/PID/stat)", procf.children_file.detail));
    }
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
        notes.push(match (nsdelegate, cg.namespace) {
            (true, true) => "the provider starts in a cgroup namespace rooted at its leaf and the cgroup2 mount has nsdelegate: the kernel refuses its tree any move out of the leaf".into(),
            (true, false) => "the cgroup2 mount has nsdelegate, but guardian lacks CAP_SYS_ADMIN to start the provider in a cgroup namespace: a descendant of this uid can move itself out of the leaf (into a cgroup.procs it may write) and escape the leaf's kill".into(),
            (false, true) => "the provider starts in a cgroup namespace rooted at its leaf, but the cgroup2 mount lacks nsdelegate, so the namespace is no boundary: a descendant of this uid can move itself out of the leaf (into a cgroup.procs it may write) and escape the leaf's kill".into(),
            (false, false) => "the cgroup2 mount lacks nsdelegate (and guardian lacks CAP_SYS_ADMIN for a cgroup namespace): a descendant of this uid can move itself out of the leaf (into a cgroup.procs it may write) and escape the leaf's kill".into(),
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

    let degraded = !problems.is_empty();
    if json_out {
        let probe_map = |pairs: Vec<(&str, &Probe)>| {
            let mut m = Map::new();
            for (k, p) in pairs {
                m.insert(k.to_string(), p.json());
            }
            Value::Object(m)
        };
        let report = json!({
            "guardian_version": env!("CARGO_PKG_VERSION"),
            "kernel": kernel,
            "pid": me,
            "euid": rustix::process::geteuid().as_raw(),
            "cgroup_request": request.map(|r| r.to_string_lossy().into_owned()),
            "mode": mode,
            "checks": probe_map(vec![
                ("subreaper", &subreaper),
                ("signalfd", &signalfd),
                ("clone3_pidfd", &child.clone3_pidfd),
                ("pidfd_open", &child.pidfd_open),
                ("pidfd_send_signal", &child.pidfd_send_signal),
                ("waitid_pidfd", &child.waitid_pidfd),
                ("clone_into_cgroup", &cg.clone_into_cgroup),
                ("cgroup_kill", &cg.kill_file),
                ("cgroup_delegated", &cg.own_usable),
                ("proc_children_file", &procf.children_file),
            ]),
            "cgroup": {
                "mount": cg.mount.as_ref().map(|m| m.mount_point.to_string_lossy().into_owned()),
                "mount_root": cg.mount.as_ref().map(|m| m.root.clone()),
                "own": cg.own_rel,
                "own_dir": cg.own_dir.as_ref().map(|d| d.to_string_lossy().into_owned()),
                "delegated": cg.own_usable.holds(),
                "nsdelegate": cg.nsdelegate,
                "namespace": cg.namespace,
                "controllers": cg.controllers,
                "auto_usable": cg.own_usable.holds(),
                "path_usable": cg.path_usable.as_ref().map(Probe::holds),
            },
            "proc": {
                "own_namespace": procf.own_namespace,
                "hidepid": procf.hidepid,
                "subset": procf.subset,
                "children_file": procf.children_file.holds(),
            },
            "degraded": problems.iter().map(|p| json!({"what": p.what, "problem": p.problem, "fix": p.fix})).collect::<Vec<_>>(),
            "notes": notes,
        });
        println!("{report}");
    } else {
        print_human(&kernel, mode, request, &subreaper, &signalfd, &child, &cg, &procf, &problems, &notes);
    }
    i32::from(degraded)
}

fn mark(p: &Probe) -> &'static str {
    match p.ok {
        Some(true) => "ok  ",
        Some(false) => "FAIL",
        None => "--  ",
    }
}

#[allow(clippy::too_many_arguments)]
fn print_human(
    kernel: &str,
    mode: Option<&str>,
    request: Option<&OsStr>,
    subreaper: &Probe,
    signalfd: &Probe,
    child: &ChildProbes,
    cg: &CgroupFacts,
    procf: &ProcFacts,
    problems: &[Problem],
    notes: &[String],
) {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("guardian {} doctor", env!("CARGO_PKG_VERSION")));
    line(format!("kernel              {kernel}"));
    for (name, p) in [
        ("subreaper", subreaper),
        ("signalfd", signalfd),
        ("clone3 CLONE_PIDFD", &child.clone3_pidfd),
        ("pidfd_open", &child.pidfd_open),
        ("pidfd_send_signal", &child.pidfd_send_signal),
        ("waitid P_PIDFD", &child.waitid_pidfd),
    ] {
        line(format!("{name:<19} {} {}", mark(p), p.detail));
    }
    let show = |o: &Option<String>| o.clone().unwrap_or_else(|| "none".into());
    line(format!(
        "cgroup2 mount       {}",
        cg.mount.as_ref().map(|m| m.mount_point.display().to_string()).unwrap_or_else(|| "none".into())
    ));
    line(format!(
        "own cgroup          {} ({})",
        show(&cg.own_rel),
        cg.own_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_else(|| "not reachable".into())
    ));
    line(format!("delegated           {} {}", mark(&cg.own_usable), cg.own_usable.detail));
    line(format!(
        "nsdelegate          {}; cgroup namespace for the provider: {}",
        match cg.nsdelegate {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        },
        if cg.namespace { "yes (CAP_SYS_ADMIN)" } else { "no (needs CAP_SYS_ADMIN)" }
    ));
    line(format!(
        "controllers         {}",
        cg.controllers
            .as_ref()
            .map(|c| if c.is_empty() { "none".into() } else { c.join(" ") })
            .unwrap_or_else(|| "unknown".into())
    ));
    line(format!("CLONE_INTO_CGROUP   {} {}", mark(&cg.clone_into_cgroup), cg.clone_into_cgroup.detail));
    line(format!("cgroup.kill         {} {}", mark(&cg.kill_file), cg.kill_file.detail));
    line(format!(
        "/proc               {}, hidepid={}",
        if procf.own_namespace { "this PID namespace's" } else { "missing or another namespace's" },
        procf.hidepid.as_deref().unwrap_or("off")
    ));
    line(format!("children file       {} {}", mark(&procf.children_file), procf.children_file.detail));
    let req = request.map(|r| r.to_string_lossy().into_owned()).unwrap_or_else(|| "not given".into());
    line(format!("mode                {} (--cgroup {req})", mode.unwrap_or("none: guardian would not start")));
    for n in notes {
        line(format!("note: {n}"));
    }
    if problems.is_empty() {
        line("every guarantee holds in this mode".into());
    } else {
        line(format!("degraded: {} problem(s)", problems.len()));
        for p in problems {
            line(format!("problem ({}): {}", p.what, p.problem));
            line(format!("  fix: {}", p.fix));
        }
    }
    print!("{out}");
}
