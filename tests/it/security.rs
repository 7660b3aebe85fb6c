//! The testable claims of docs/threat-model.md: a provider that becomes a subreaper is still
//! cleaned; the provider inherits none of guardian's fds and cannot reach them through
//! /proc (no forged events); it cannot ptrace guardian; guardian refuses to run set-id.

use std::ffi::OsStr;
use std::path::PathBuf;

use crate::harness::*;

/// An empty file in the test's directory that any uid may write.
fn out_file(ctx: &Ctx) -> PathBuf {
    let p = ctx.path("out");
    std::fs::write(&p, b"").expect("create output file");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
    p
}

/// A child of the provider sets PR_SET_CHILD_SUBREAPER and adopts an orphaned grandchild;
/// it ignores SIGTERM. It is still guardian's descendant, so both are stopped and reaped.
#[test]
fn subreaper_inside_the_tree_is_still_cleaned() {
    let ctx = Ctx::new("subreaper");
    let py = format!(
        r#"
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{arg}"])
    os._exit(0)
os.wait()
signal.pause()
"#,
        arg = ctx.sleep_arg(1000)
    );
    let script = format!("python3 -c '{py}' {id} & exec {s}", id = ctx.nonce, s = ctx.sleep());
    let mut g = ctx.guardian().args(["--grace", "300ms"]).command(["sh", "-c", &script]).spawn();
    g.wait_event_named("spawned");
    // Wait until the grandchild was adopted by the subreaper (its parent is the python).
    wait_for("the subreaper to adopt the grandchild", || {
        let py = ctx.live().into_iter().find(|p| p.cmdline.starts_with("python3"))?;
        ctx.sleeps().iter().any(|s| s.ppid == py.pid).then_some(())
    });
    g.signal(libc::SIGTERM);
    let f = g.finish();
    f.assert_released(143);
    assert!(f.one("released")["killed"].as_u64().unwrap_or(0) >= 1, "the TERM-ignoring subreaper: {f:#?}");
    ctx.assert_nothing_left();
}

/// The provider has no fd of guardian's (only 0, 1, 2), and even with the same uid as
/// guardian and its events pipe, it cannot open guardian's fds through /proc/PID/fd to forge
/// events, nor ptrace guardian.
#[test]
fn provider_cannot_reach_the_events_fd_or_trace_guardian() {
    let ctx = Ctx::new("no-reach");
    let out = out_file(&ctx);
    let py = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
found = []
for fd in range(3, 1024):
    try:
        found.append("%d=%s" % (fd, os.readlink("/proc/self/fd/%d" % fd)))
    except OSError:
        pass
forged = []
gdir = "/proc/%d/fd" % os.getppid()
try:
    names = os.listdir(gdir)
except OSError as e:
    names = []
    forged.append("listdir:%s" % e.errno)
for n in names:
    try:
        with open(os.path.join(gdir, n), "w") as f:
            f.write("{\"event\":\"released\",\"forged\":true}\n")
        forged.append("wrote:" + n)
    except OSError as e:
        pass
r = libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
err = ctypes.get_errno()
if r == 0:
    libc.ptrace(17, os.getppid(), 0, 0)  # PTRACE_DETACH
with open(sys.argv[1], "w") as f:
    f.write("inherited=%s\nforged=%s\nptrace=%d,%d\n" % (",".join(found), ",".join(forged), r, err))
"#;
    // guardian, its events pipe and the provider all belong to uid 65534: the pipe between
    // guardian and `cat` is made by a shell of that uid, which passes guardian's events on
    // to the test's pipe (its fd 3, moved to 4 so guardian's fd 3 is the pipe to `cat`).
    let mut g = ctx
        .guardian()
        .wrapper(["sh", "-c", r#"exec 4>&3; "$@" 3>&1 >/dev/null 4>&- | cat >&4"#, "sh"])
        .args(["--grace", "300ms"])
        .command([OsStr::new("python3"), OsStr::new("-c"), OsStr::new(py), out.as_os_str(), OsStr::new(&ctx.nonce)])
        .spawn();
    let f = g.finish();
    assert_eq!(f.code, Some(0), "{f:#?}");
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(report.contains("inherited=\n"), "the provider inherited fds: {report}");
    assert!(!report.contains("wrote:"), "the provider wrote into guardian's fds: {report}");
    assert!(report.contains("ptrace=-1,1\n"), "PTRACE_ATTACH must fail with EPERM: {report}");
    assert!(f.events.iter().all(|e| e.get("forged").is_none()), "{f:#?}");
    f.assert_released(0);
    ctx.assert_nothing_left();
}

/// Installed set-uid or set-gid (real and effective ids differ), guardian refuses to run:
/// exit 125, one line, nothing started.
#[test]
fn refuses_to_run_setuid_or_setgid() {
    need_root!("chown the copy");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for (name, mode) in [("suid", 0o4755), ("sgid", 0o2755)] {
        let ctx = Ctx::new("setid");
        let copy = dir.join(format!("guardian-{name}-{}", ctx.nonce));
        std::fs::copy(guardian_bin(), &copy).expect("copy guardian");
        std::os::unix::fs::chown(&copy, Some(NOBODY), Some(NOBODY)).expect("chown");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(mode)).expect("chmod");
        let f = ctx.guardian().privileged().binary(&copy).command(["sh", "-c", &ctx.sleep()]).spawn().finish();
        let _ = std::fs::remove_file(&copy);
        assert_eq!(f.code, Some(125), "{name}: {f:#?}");
        assert_eq!(f.stderr.lines().count(), 1, "{f:#?}");
        assert!(f.stderr.contains("refusing to run setuid/setgid"), "{f:#?}");
        assert!(f.events.is_empty(), "nothing was started: {f:#?}");
        ctx.assert_nothing_left();
    }
}

/// `--forward-to group`: once the provider (the group leader) is reaped, its pgid may be
/// recycled, so nothing is forwarded to the group any more, although members still run.
#[test]
fn group_forwarding_stops_when_the_leader_is_reaped() {
    let ctx = Ctx::new("group-leader");
    let out = out_file(&ctx);
    // A member of the provider's group (not setsid) that records any SIGUSR1 it gets.
    let script = format!(
        "(trap 'echo got >> {out}' USR1; {s} & wait; {s} & wait) & exit 0",
        out = out.display(),
        s = ctx.sleep()
    );
    let mut g = ctx
        .guardian()
        .args(["-vv", "--forward-to", "group", "--wait-descendants"])
        .command(["sh", "-c", &script])
        .spawn();
    g.wait_event_named("exit");
    ctx.wait_sleeps(1);
    g.signal(libc::SIGUSR1);
    wait_for("the 'not forwarded' log", || g.stderr().contains("SIGUSR1 not forwarded").then_some(()));
    g.signal(libc::SIGTERM);
    let f = g.finish();
    let got = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(f.events.iter().all(|e| e["reason"] != "forwarded"), "{f:#?}");
    assert!(got.is_empty(), "the group got a signal after its leader was reaped: {got}");
    assert_eq!(f.code, Some(0), "{f:#?}");
    ctx.assert_nothing_left();
}
