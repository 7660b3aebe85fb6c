//! The probes: each interface guardian relies on, and each fallback it can take, exercised
//! for real. A parked probe child (clone3 with `CLONE_PIDFD`, else fork) for the pidfd calls,
//! the pidfd's identity (`PIDFD_GET_INFO`, else fdinfo), the `children`-file walk and
//! `waitid`; a temporary leaf cgroup for `CLONE_INTO_CGROUP`, the cgroup namespace and
//! `cgroup.kill`; the parent watch on doctor's real parent. Every probe child is killed and
//! reaped, every leaf removed, before a probe returns.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cgroup::mount::parse_proc_cgroup;
use crate::cgroup::{Hierarchy, Parent};
use crate::proctree::Proc;
use crate::supervise::parent::{self, Choice};
use crate::sys;

/// Outcome of one probe: `ok` is `None` when it could not be tried.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    pub ok: Option<bool>,
    pub errno: Option<&'static str>,
    pub detail: String,
}

impl Probe {
    /// The interface did what guardian needs.
    pub fn pass(detail: impl Into<String>) -> Probe {
        Probe { ok: Some(true), errno: None, detail: detail.into() }
    }
    /// A call failed with an error: its errno name is recorded, `call` and the error text
    /// make the detail.
    pub fn call_failed(e: &io::Error, call: impl Into<String>) -> Probe {
        let errno = e.raw_os_error();
        // A resource error (EMFILE: the fd limit) is named as such, with the limit's value.
        let why = if errno.is_some_and(crate::errno::is_resource) { crate::errno::explain(e) } else { e.to_string() };
        Probe { ok: Some(false), errno: errno.map(crate::errno::name), detail: format!("{}: {why}", call.into()) }
    }
    /// The calls succeeded (or there was none to make) but the outcome is not what guardian
    /// needs: no errno, `detail` says what was seen.
    pub fn fell_short(detail: impl Into<String>) -> Probe {
        Probe { ok: Some(false), errno: None, detail: detail.into() }
    }
    /// A failure that carries an errno without an `io::Error` (`cgroup::Unusable`).
    pub fn refused(errno: i32, detail: impl Into<String>) -> Probe {
        Probe { ok: Some(false), errno: Some(crate::errno::name(errno)), detail: detail.into() }
    }
    /// Could not be tried: `detail` says why.
    pub fn untested(detail: impl Into<String>) -> Probe {
        Probe { ok: None, errno: None, detail: detail.into() }
    }
    pub fn holds(&self) -> bool {
        self.ok == Some(true)
    }
    pub fn json(&self) -> Value {
        json!({"ok": self.ok, "errno": self.errno, "detail": self.detail})
    }
}

/// PR_SET_CHILD_SUBREAPER on doctor itself, read back with PR_GET_CHILD_SUBREAPER.
pub(super) fn subreaper(me: i32) -> Probe {
    let Some(pid) = rustix::process::Pid::from_raw(me) else { return Probe::fell_short("no pid") };
    match rustix::process::set_child_subreaper(Some(pid)) {
        Ok(()) => match rustix::process::child_subreaper() {
            Ok(Some(_)) => Probe::pass("PR_SET_CHILD_SUBREAPER took effect (PR_GET_CHILD_SUBREAPER says so)"),
            Ok(None) => Probe::fell_short("PR_SET_CHILD_SUBREAPER succeeded but PR_GET_CHILD_SUBREAPER reads 0"),
            Err(e) => Probe::call_failed(&e.into(), "prctl(PR_GET_CHILD_SUBREAPER)"),
        },
        Err(e) => Probe::call_failed(&e.into(), "prctl(PR_SET_CHILD_SUBREAPER)"),
    }
}

/// A signalfd, created and closed.
pub(super) fn signalfd() -> Probe {
    match sys::signalfd(&sys::SigSet::empty()) {
        Ok(_fd) => Probe::pass("signalfd(SFD_CLOEXEC) created"),
        Err(e) => Probe::call_failed(&e, "signalfd()"),
    }
}

pub(super) struct ChildProbes {
    pub clone3_pidfd: Probe,
    pub pidfd_open: Probe,
    pub pidfd_send_signal: Probe,
    pub waitid_pidfd: Probe,
    /// `PIDFD_GET_INFO` (Linux 6.13) named the child: how guardian confirms which process a
    /// pidfd refers to.
    pub pidfd_get_info: Probe,
    /// Its fallback, `Pid:` in `/proc/self/fdinfo/FD`, through the code guardian runs
    /// (tried only when `PIDFD_GET_INFO` fails: otherwise guardian never reads it).
    pub pidfd_fdinfo: Probe,
    /// The `children` files (CONFIG_PROC_CHILDREN) listed the child, as guardian's walk
    /// reads them; else rounds list all of `/proc`.
    pub children_file: Probe,
}

/// Starts a parked child (clone3 with CLONE_PIDFD, else fork); probes pidfd_open,
/// pidfd_send_signal (signal 0), the pidfd's identity check (`PIDFD_GET_INFO`, else fdinfo),
/// the `children`-file walk and waitid(P_PIDFD) on it; always kills and reaps it.
pub(super) fn probe_child() -> ChildProbes {
    let (clone3_pidfd, forked) = match sys::spawn_parked_child(sys::Start::Clone3 { cgroup: None, extra: 0 }) {
        Ok(sys::Child { pid, pidfd }) => {
            (Probe::pass("clone3(CLONE_PIDFD) started a child and returned its pidfd"), Ok((pid, pidfd)))
        }
        Err(e) => {
            let probe = Probe::call_failed(&e, "clone3(CLONE_PIDFD)");
            (probe, sys::spawn_parked_child(sys::Start::Fork).map(|c| (c.pid, None)))
        }
    };
    let (pid, clone_fd) = match forked {
        Ok(x) => x,
        Err(e) => {
            let p = Probe::call_failed(&e, "fork() of a probe child");
            return ChildProbes {
                clone3_pidfd,
                pidfd_open: Probe::untested(p.detail.clone()),
                pidfd_send_signal: Probe::untested(p.detail.clone()),
                waitid_pidfd: Probe::untested(p.detail.clone()),
                pidfd_get_info: Probe::untested(p.detail.clone()),
                pidfd_fdinfo: Probe::untested(p.detail),
                children_file: children_file(None),
            };
        }
    };
    let (pidfd_open, opened) = match sys::pidfd_open(pid) {
        Ok(fd) => (Probe::pass(format!("pidfd_open({pid}) on an unreaped child")), Some(fd)),
        Err(e) => (Probe::call_failed(&e, format!("pidfd_open({pid})")), None),
    };
    let pidfd: Option<OwnedFd> = clone_fd.or(opened);
    let pidfd_send_signal = match &pidfd {
        Some(fd) => match sys::pidfd_send_signal(fd.as_fd(), 0, 0) {
            Ok(()) => Probe::pass("pidfd_send_signal(pidfd, 0) reached the probe child"),
            Err(e) => Probe::call_failed(&e, "pidfd_send_signal(pidfd, 0)"),
        },
        None => Probe::untested("no pidfd to signal through"),
    };
    let (pidfd_get_info, pidfd_fdinfo) = match &pidfd {
        Some(fd) => pidfd_identity(fd, pid),
        None => (Probe::untested("no pidfd to ask"), Probe::untested("no pidfd to ask")),
    };
    let children_file = children_file(Some(pid));
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
                Probe::fell_short("waitid(P_PIDFD) returned without the child's exit")
            }
            Err(e) => {
                let _ = sys::reap_blocking(pid);
                Probe::call_failed(&e, "waitid(P_PIDFD, WEXITED)")
            }
        },
        None => {
            let _ = sys::reap_blocking(pid);
            Probe::untested("no pidfd to wait on")
        }
    };
    ChildProbes {
        clone3_pidfd,
        pidfd_open,
        pidfd_send_signal,
        waitid_pidfd,
        pidfd_get_info,
        pidfd_fdinfo,
        children_file,
    }
}

/// Which pid `fd` (a pidfd on the live child `pid`) names: `PIDFD_GET_INFO`, and when that
/// fails, guardian's fallback (`Proc::pidfd_pid`, which then reads the fdinfo).
fn pidfd_identity(fd: &OwnedFd, pid: i32) -> (Probe, Probe) {
    let get_info = match sys::pidfd_get_pid(fd.as_fd()) {
        Ok(p) if p == pid => Probe::pass(format!("ioctl(PIDFD_GET_INFO) named the probe child ({pid})")),
        Ok(p) => Probe::fell_short(format!("ioctl(PIDFD_GET_INFO) named {p}, not the probe child {pid}")),
        Err(e) => Probe::call_failed(&e, "ioctl(PIDFD_GET_INFO)"),
    };
    if get_info.holds() {
        return (get_info, Probe::untested("not needed: PIDFD_GET_INFO answers"));
    }
    let fdinfo = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let mut proc = match Proc::open() {
        Ok(proc) => proc,
        Err(e) => return (get_info, Probe::call_failed(&e, "open /proc")),
    };
    match proc.own_namespace() {
        Ok(true) => {}
        Ok(false) => return (get_info, Probe::untested("/proc belongs to another PID namespace")),
        Err(e) => return (get_info, Probe::call_failed(&e, "read /proc/self/stat")),
    }
    let fallback = match proc.pidfd_pid(fd) {
        Some(p) if p == pid => Probe::pass(format!("Pid: in {fdinfo} named the probe child ({pid})")),
        Some(p) => Probe::fell_short(format!("Pid: in {fdinfo} named {p}, not the probe child {pid}")),
        None => Probe::fell_short(format!("{fdinfo} has no Pid: line naming the probe child {pid}")),
    };
    (get_info, fallback)
}

/// Whether guardian's walk of the `children` files finds `child` (a live child of doctor), or
/// without one, whether the files exist. `GUARDIAN_TEST_FULL_SCAN` (test-hooks builds) makes
/// guardian list all of `/proc` anyway, so it fails this probe too.
fn children_file(child: Option<i32>) -> Probe {
    let me = std::process::id() as i32;
    // doctor is single-threaded: its main thread's tid is its pid.
    let path = format!("/proc/{me}/task/{me}/children");
    if crate::test_hooks::forced_full_scan() {
        return Probe::fell_short(format!("GUARDIAN_TEST_FULL_SCAN is set (test-hooks build): {path} is not used"));
    }
    let mut proc = match Proc::open() {
        Ok(proc) => proc,
        Err(e) => return Probe::call_failed(&e, "open /proc"),
    };
    match proc.own_namespace() {
        Ok(true) => {}
        Ok(false) => return Probe::untested("/proc belongs to another PID namespace"),
        Err(e) => return Probe::call_failed(&e, "read /proc/self/stat"),
    }
    if !proc.has_children_files() {
        return Probe::fell_short(format!("{path} is missing (kernel without CONFIG_PROC_CHILDREN)"));
    }
    match child {
        None => Probe::pass(format!("{path} exists")),
        Some(pid) if proc.walk(me).iter().any(|s| s.pid == pid) => {
            Probe::pass(format!("walking {path} found the probe child ({pid})"))
        }
        Some(pid) => Probe::fell_short(format!("walking {path} did not find the probe child ({pid})")),
    }
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

/// What a temporary leaf showed: whether it could be created, and the `cgroup.kill`,
/// `CLONE_INTO_CGROUP` and cgroup namespace probes.
pub(super) struct LeafProbes {
    pub created: Result<(), String>,
    pub kill_file: Probe,
    pub clone_into_cgroup: Probe,
    /// The child started in a cgroup namespace of its own, as guardian starts the provider.
    pub namespace: Probe,
}

/// Creates a temporary leaf below `parent`, starts a parked child in it with
/// clone3(CLONE_INTO_CGROUP) (and `CLONE_NEWCGROUP` where guardian would use it: the same
/// `spawn::clone3_into_leaf`), checks from /proc where it landed, kills it with
/// `cgroup::leaf::kill` (guardian's own kill), reaps it and removes the leaf.
pub(super) fn probe_leaf(parent: &Parent, h: &Hierarchy, me: i32) -> LeafProbes {
    let name = format!("guardian-doctor-{me}");
    let leaf = parent.dir.join(&name);
    let rel = format!("{}/{name}", parent.rel.trim_end_matches('/'));
    if let Err(e) = fs::create_dir(&leaf) {
        let p = Probe::call_failed(&e, format!("mkdir {}", leaf.display()));
        return LeafProbes {
            created: Err(p.detail.clone()),
            kill_file: Probe::untested(p.detail.clone()),
            namespace: Probe::untested(p.detail.clone()),
            clone_into_cgroup: p,
        };
    }
    let (kill_file, clone_into_cgroup, namespace) = probe_in_leaf(&leaf, &rel, h);
    // The reaped child may take a moment to leave the leaf.
    let _ = crate::cgroup::tree::wait_empty(&leaf, Duration::from_secs(2));
    if let Err(e) = crate::cgroup::tree::remove_tree(&leaf) {
        crate::log::warn!("could not remove the probe cgroup {}: {e}", leaf.display());
    }
    LeafProbes { created: Ok(()), kill_file, clone_into_cgroup, namespace }
}

/// The (`cgroup.kill`, `CLONE_INTO_CGROUP`, cgroup namespace) probes inside an existing leaf.
fn probe_in_leaf(leaf: &Path, rel: &str, h: &Hierarchy) -> (Probe, Probe, Probe) {
    let kill_path = leaf.join("cgroup.kill");
    let dir = match fs::File::open(leaf) {
        Ok(d) => d,
        Err(e) => {
            let p = Probe::call_failed(&e, format!("open {}", leaf.display()));
            return (Probe::untested(p.detail.clone()), Probe::untested(p.detail.clone()), p);
        }
    };
    let (pid, pidfd) = match crate::spawn::clone3_into_leaf(Some(dir.as_fd()), sys::spawn_parked_child) {
        Ok(sys::Child { pid, pidfd }) => (pid, pidfd),
        Err(e) => {
            let p = Probe::call_failed(&e, "clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)");
            let ns = Probe::untested(p.detail.clone());
            let k = if kill_path.exists() {
                Probe::pass(format!("{} exists (not exercised: no child could be placed)", kill_path.display()))
            } else {
                Probe::fell_short(format!("{} is missing (Linux before 5.14)", kill_path.display()))
            };
            return (k, p, ns);
        }
    };
    let namespace = cgroup_namespace(pid);
    let expected = h.relative(leaf);
    let landed =
        fs::read_to_string(format!("/proc/{pid}/cgroup")).ok().and_then(|t| parse_proc_cgroup(&t).map(String::from));
    let clone_probe = match (&landed, &expected) {
        (Some(l), Some(e)) if l == e => {
            Probe::pass(format!("clone3(CLONE_INTO_CGROUP) started a child directly in {}", leaf.display()))
        }
        _ => Probe::fell_short(format!(
            "the child started with CLONE_INTO_CGROUP is in {}, not {}",
            landed.as_deref().unwrap_or("?"),
            expected.as_deref().unwrap_or("?")
        )),
    };
    let kill_probe = match crate::cgroup::tree::kill(leaf, rel, None) {
        Ok(crate::cgroup::Killed::KillFile) => {
            Probe::pass(format!("writing 1 to {} killed the leaf's child", kill_path.display()))
        }
        Ok(crate::cgroup::Killed::FreezeAndKill(_)) => {
            Probe::fell_short(format!("{} is missing (Linux before 5.14)", kill_path.display()))
        }
        Err(e) => Probe::call_failed(&e, format!("write {}", kill_path.display())),
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
            Probe::fell_short(format!("{} was written but the child was not killed by SIGKILL", kill_path.display()))
        }
        (false, _) => kill_probe,
    };
    (kill_probe, clone_probe, namespace)
}

/// Whether the live child `pid` has a cgroup namespace other than doctor's.
fn cgroup_namespace(pid: i32) -> Probe {
    let link = |p: &str| fs::read_link(p).map_err(|e| Probe::call_failed(&e, format!("readlink {p}")));
    let theirs = format!("/proc/{pid}/ns/cgroup");
    match (link("/proc/self/ns/cgroup"), link(&theirs)) {
        (Ok(a), Ok(b)) if a != b => Probe::pass("the probe child started in a cgroup namespace rooted at its leaf"),
        (Ok(_), Ok(_)) if !crate::cgroup::may_create_namespace() => {
            Probe::fell_short("no CAP_SYS_ADMIN: the provider would share guardian's cgroup namespace")
        }
        (Ok(_), Ok(_)) => Probe::fell_short(
            "clone3(CLONE_NEWCGROUP) was refused: the provider would share guardian's cgroup namespace",
        ),
        (Err(p), _) | (_, Err(p)) => p,
    }
}

/// How guardian would watch its parent (start-up step 5): the choice guardian itself makes
/// (`supervise::parent::choose`, not a copy of it), and whether it took effect here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Watch {
    pub choice: Choice,
    /// The pidfd opened, or `PR_SET_PDEATHSIG` took effect.
    pub works: bool,
}

/// Tries guardian's parent watch for real: `pidfd_open` on the parent, or where the parent is
/// outside the PID namespace, `PR_SET_PDEATHSIG` with the signal guardian would pick (set,
/// then cleared at once). The probe holds when the preferred path, a pidfd, works.
pub(super) fn parent_watch(me: i32, kill_signal: Option<i32>) -> (Watch, Probe) {
    let choice = parent::choice_here(me, kill_signal);
    let watch = |works| Watch { choice, works };
    let outside = "the parent is outside this PID namespace (getppid() is 0)";
    match choice {
        Choice::Pid1 => (watch(true), Probe::untested("PID 1 of its namespace: no parent to watch")),
        Choice::Pid(ppid) => match sys::pidfd_open(ppid) {
            Ok(_fd) => (watch(true), Probe::pass(format!("pidfd_open({ppid}) on the parent"))),
            Err(e) => (watch(false), Probe::call_failed(&e, format!("pidfd_open({ppid}) on the parent"))),
        },
        Choice::Unwatched => {
            (watch(false), Probe::fell_short(format!("{outside} and every real-time signal is ignored")))
        }
        Choice::Deathsig(sig) => {
            let name = parent::signal_name(sig);
            match sys::set_pdeathsig(sig) {
                Ok(()) => {
                    let _ = sys::set_pdeathsig(0);
                    let probe =
                        Probe::fell_short(format!("{outside}: PR_SET_PDEATHSIG({name}) took effect (and was cleared)"));
                    (watch(true), probe)
                }
                Err(e) => (watch(false), Probe::call_failed(&e, format!("{outside}: prctl(PR_SET_PDEATHSIG, {name})"))),
            }
        }
    }
}

/// guardian's split for real (`sys::clone_vm`, the function guardian calls): a child that
/// shares doctor's memory on a freshly mapped 8 MiB stack, and exits at once.
pub(super) fn clone_vm() -> Probe {
    fn child((): ()) -> ! {
        sys::Raw::exit(0)
    }
    match sys::clone_vm((), child) {
        Ok(pid) => {
            let _ =
                rustix::process::waitpid(rustix::process::Pid::from_raw(pid), rustix::process::WaitOptions::empty());
            Probe::pass(
                "clone(CLONE_VM) started a child on its own stack, as guardian starts itself behind the sentinel",
            )
        }
        Err((e, ())) => Probe::refused(e.error().raw_os_error().unwrap_or(0), e.describe()),
    }
}
