//! Teardown against trees that hide from it or that a careless teardown mistreats:
//! a process whose main thread exited (state `Z` while other threads run), a process that
//! counts how often it hears the stop signal, a process with thousands of children (a
//! `children` file longer than a page), and a provider guardian may not signal.
//!
//! The programs are small C sources compiled here (`cc -pthread`); each carries the test's
//! nonce in argv. A process whose main thread exited has an empty `cmdline`, so it is found
//! through its live threads' `task/TID/cmdline` and held by a pidfd the test closes with a
//! SIGKILL, whatever happens.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use crate::harness::*;

/// A process whose main thread exits while a second thread lives on. argv: MODE (`pthread`:
/// `pthread_exit` in main; `sys`: the raw `exit` syscall on the main thread) LOG TAG. The
/// live thread records the stop signal in LOG and then exits the whole process.
const MAIN_THREAD_EXIT: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static int logfd;
static void on_term(int s) { (void)s; write(logfd, "TERM\n", 5); _exit(0); }
static void *live(void *a) { (void)a; for (;;) pause(); return 0; }
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    logfd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, 0);
    pthread_t t;
    if (pthread_create(&t, 0, live, 0)) return 3;
    if (!strcmp(argv[1], "sys")) syscall(SYS_exit, 0);
    pthread_exit(0);
}
"#;

/// The C the counting programs share: `count(LOG)` installs a SIGTERM handler that appends a
/// line to LOG (unblocking SIGTERM in the calling thread), writes LOG.ready and waits forever.
macro_rules! counting_prelude {
    () => {
        r#"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int logfd;
static void on_term(int s) { (void)s; write(logfd, "T\n", 2); }
static void count(const char *log) {
    logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, 0);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &term, 0);
    char ready[4096];
    snprintf(ready, sizeof ready, "%s.ready", log);
    close(open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0666));
    for (;;) pause();
}
"#
    };
}

/// Counts every SIGTERM it receives (a line in LOG each) and otherwise ignores them; writes
/// LOG.ready once its handler is in place. argv: LOG TAG [CHILDLOG]: with CHILDLOG, first
/// forks a child that does the same with CHILDLOG.
const COUNTER: &str = concat!(
    counting_prelude!(),
    r#"
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (argc > 3 && fork() == 0) count(argv[3]);
    count(argv[1]);
}
"#
);

/// Forks N children that each record the stop signal (a line in LOG, a byte to the parent)
/// and keep running; the parent ignores the stop signal, writes LOG.ready once every child
/// can hear it, and once all N have heard it, kills them, reaps them and exits. So no child
/// leaves its parent's `children` file before every one of them was reached. argv: N LOG TAG.
const FAN: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static int logfd, heard[2];
static void on_term(int s) { (void)s; write(logfd, "T\n", 2); write(heard[1], "T", 1); }
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n = atoi(argv[1]);
    pid_t *kids = calloc(n, sizeof *kids);
    logfd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (!kids || logfd < 0 || pipe(heard)) return 3;
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    /* Blocked across fork: a child that hears SIGTERM before its handler exists keeps it pending. */
    sigprocmask(SIG_BLOCK, &term, &old);
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] < 0) return 3;
        if (kids[i] == 0) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_term;
            sigaction(SIGTERM, &sa, 0);
            sigprocmask(SIG_SETMASK, &old, 0);
            for (;;) pause();
        }
    }
    signal(SIGTERM, SIG_IGN);
    sigprocmask(SIG_SETMASK, &old, 0);
    char ready[4096];
    snprintf(ready, sizeof ready, "%s.ready", argv[2]);
    close(open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0666));
    char buf[256];
    for (int got = 0; got < n;) {
        ssize_t r = read(heard[0], buf, sizeof buf);
        if (r > 0) got += r;
        else if (r < 0 && errno != EINTR) return 4;
    }
    for (int i = 0; i < n; i++) kill(kids[i], SIGKILL);
    while (wait(0) > 0 || errno == EINTR) {}
    return 0;
}
"#;

/// Set-user-ID root: becomes root in every uid (real, effective, saved), so an unprivileged
/// guardian may not signal it, creates `ready` in its working directory and waits. Only
/// `nobody` may use it (and only group 65534 may run it at all). argv: TAG.
const BECOME_ROOT: &str = r#"
#include <fcntl.h>
#include <unistd.h>
int main(void) {
    if (getuid() != 65534) return 2;
    if (setresgid(0, 0, 0) || setresuid(0, 0, 0)) return 3;
    close(open("ready", O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    for (;;) pause();
}
"#;

/// Removes a set-user-ID program when the test ends, even when it fails (`Ctx` keeps the files
/// of a failed test).
struct SetuidProgram(PathBuf);

impl Drop for SetuidProgram {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// (state, num_threads) of `pid` from `/proc/PID/stat`.
fn state_threads(pid: i32) -> Option<(u8, u32)> {
    let buf = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    Some((*f.first()?.as_bytes().first()?, f.get(17)?.parse().ok()?))
}

/// The processes whose main thread exited while another thread of theirs, tagged with
/// `nonce`, runs: `Z` with more than one thread, found through `task/TID/cmdline`.
fn leaderless(nonce: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if !matches!(state_threads(pid), Some((b'Z', n)) if n > 1) {
            continue;
        }
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        let tagged = tasks.flatten().any(|t| {
            fs::read(t.path().join("cmdline")).is_ok_and(|c| c.windows(nonce.len()).any(|w| w == nonce.as_bytes()))
        });
        if tagged {
            out.push(pid);
        }
    }
    out
}

/// A pidfd on a process the test must not leave behind: SIGKILL through it when dropped.
struct Held(i32);

impl Held {
    fn new(pid: i32) -> Held {
        Held(
            rustix::process::Pid::from_raw(pid)
                .ok_or(rustix::io::Errno::SRCH)
                .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()))
                .map(std::os::fd::IntoRawFd::into_raw_fd)
                .unwrap_or_else(|e| panic!("pidfd_open({pid}): {e}")),
        )
    }

    /// Whether the whole process has exited (the pidfd polls readable).
    fn gone(&self) -> bool {
        let mut p = libc::pollfd { fd: self.0, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: our own pidfd; null siginfo; then closed once.
        unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, self.0, libc::SIGKILL, std::ptr::null::<u8>(), 0);
            libc::close(self.0);
        }
    }
}

fn lines(ctx: &Ctx, name: &str) -> Vec<String> {
    fs::read_to_string(ctx.path(name)).unwrap_or_default().lines().map(str::to_string).collect()
}

/// guardian as PID 1 of a fresh PID namespace, as nobody.
fn pid1_wrapper(mount_proc: bool) -> Vec<&'static str> {
    let mut w = vec!["unshare", "--pid", "--fork"];
    if mount_proc {
        w.push("--mount-proc");
    }
    w.extend(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]);
    w
}

// ---------------------------------------------------------------------------------------
// Item 1: a descendant whose main thread exited is a live process.

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Scan,
    Pid1,
}

fn main_thread_exit(how: &str, mode: Mode) {
    let ctx = Ctx::new(&format!("leaderless-{how}"));
    let prog = ctx.c_program("leaderless", MAIN_THREAD_EXIT);
    ctx.fifo("go");
    // A long grace: the process exits on the stop signal, so only a failure waits for it.
    let builder = ctx.guardian().args(["--grace", "10s"]).script(&format!(
        "{} {how} term.log {} & until read _ < go 2>/dev/null; do :; done; exit 3",
        prog.display(),
        ctx.tag()
    ));
    let builder = match mode {
        Mode::Scan => builder,
        Mode::Pid1 => builder.privileged().wrapper(pid1_wrapper(true)),
    };
    let mut g = builder.spawn();
    let pid = wait_for("a tagged process whose main thread exited", || leaderless(&ctx.nonce).first().copied());
    let held = Held::new(pid);
    ctx.release(&ctx.path("go"));
    let code = g.wait_code();
    let ev = g.events();
    assert_eq!(code, 3, "guardian did not release with the provider's status; events {ev:#?}; stderr: {}", g.stderr());
    assert!(held.gone(), "the process whose main thread exited still lives");
    // It heard the stop signal (its live thread recorded it), not only SIGKILL.
    assert_eq!(lines(&ctx, "term.log"), ["TERM"], "events {ev:#?}");
    if let Mode::Scan = mode {
        assert!(signalled_pids(&ev, "stop").contains(&pid), "no stop signal event names {pid}: {ev:#?}");
    }
    ctx.assert_nothing_left();
}

#[test]
fn pthread_exit_in_main_is_stopped_in_scan_mode() {
    main_thread_exit("pthread", Mode::Scan);
}

#[test]
fn sys_exit_on_main_thread_is_stopped_in_scan_mode() {
    main_thread_exit("sys", Mode::Scan);
}

#[test]
fn pthread_exit_in_main_is_stopped_as_pid1() {
    need_pid_namespace!();
    main_thread_exit("pthread", Mode::Pid1);
}

/// The abandon path names what it leaves behind: a provider guardian may not signal.
#[test]
fn unsignallable_provider_is_named_and_no_signal_is_claimed() {
    need_root!("install a set-user-ID root program");
    let ctx = Ctx::new("unsignallable");
    let prog = ctx.c_program("become-root", BECOME_ROOT);
    let _remove = SetuidProgram(prog.clone());
    // Owned by root, set-user-ID, executable by group 65534 only: guardian (nobody) starts it,
    // and it becomes root.
    let c = std::ffi::CString::new(prog.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 0, NOBODY) }, 0);
    fs::set_permissions(&prog, fs::Permissions::from_mode(0o4750)).expect("chmod u+s");
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--timeout", "1s", "--grace", "1s"])
        .command([prog.to_str().expect("utf-8 path"), tag.as_str()])
        .spawn();
    let spawned = g.wait_event_named("spawned");
    let provider = spawned["pid"].as_i64().expect("spawned.pid") as i32;
    wait_for("the provider to become root", || ctx.path("ready").exists().then_some(()));
    // A forwarded signal cannot reach it either.
    g.signal(libc::SIGUSR1);
    assert_eq!(g.wait_code(), 125, "stderr: {}", g.stderr());
    let ev = g.events();
    let claimed: Vec<_> = ev.iter().filter(|e| e["event"] == "signal" && e["pid"] == provider).collect();
    assert!(claimed.is_empty(), "signal events claim the provider was signalled: {claimed:#?}");
    let error = find(&ev, |e| e["event"] == "error").expect("an error event").1;
    let named = |field: &str| error[field].as_array().is_some_and(|a| a.iter().any(|p| p == provider));
    assert!(named("unkillable"), "the provider is not named unkillable: {error}");
    assert!(named("remaining"), "the provider is not named as remaining: {error}");
    assert!(error["message"].as_str().unwrap_or("").contains(&provider.to_string()), "{error}");
}

// ---------------------------------------------------------------------------------------
// Item 6: each process hears the stop signal once per teardown.

/// A descendant that counts SIGTERMs and ignores them hears exactly one, then is killed;
/// under `--timeout`, so does the provider (also a counter, with a counting child).
fn stop_signal_once(mode: Mode, mount_proc: bool, timeout: bool, extra: &[&str]) {
    let ctx = Ctx::new("stop-once");
    let prog = ctx.c_program("counter", COUNTER);
    let tag = ctx.tag();
    // Long enough for the counters' handlers to run on a loaded machine before SIGKILL, and for
    // a repeating teardown to repeat the signal many times.
    let builder = ctx.guardian().args(["--grace", "5s"]).args(extra);
    let builder = if timeout {
        let p = prog.to_str().expect("utf-8 path");
        builder.args(["--timeout", "3s"]).command([p, "provider.log", tag.as_str(), "child.log"])
    } else {
        builder.script(&format!(
            "{} child.log {tag} & while [ ! -e child.log.ready ]; do sleep 0.01; done; exit 7",
            prog.display()
        ))
    };
    let builder = match mode {
        Mode::Scan => builder,
        Mode::Pid1 => builder.privileged().wrapper(pid1_wrapper(mount_proc)),
    };
    let mut g = builder.spawn();
    let code = g.wait_code();
    let ev = g.events();
    assert_eq!(code, if timeout { 124 } else { 7 }, "events {ev:#?}; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    assert!(ctx.path("child.log.ready").exists(), "the descendant never started; stderr: {}", g.stderr());
    assert_eq!(lines(&ctx, "child.log"), ["T"], "the descendant's SIGTERMs; events {ev:#?}");
    if timeout {
        assert_eq!(lines(&ctx, "provider.log"), ["T"], "the provider's SIGTERMs; events {ev:#?}");
    }
    let kill = find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL");
    assert!(kill.is_some(), "the counters ignore SIGTERM, so SIGKILL must have followed: {ev:#?}");
    // `released` counts what was signalled, in every mode where guardian can see it: one
    // descendant got the stop signal and needed SIGKILL (without the namespace's /proc, a
    // kill(-1) cannot be counted: signalled is null, killed 0).
    let released = g.final_events().pop().expect("released");
    if mode == Mode::Pid1 && !mount_proc {
        assert_eq!((released["signalled"].is_null(), released["killed"].as_u64()), (true, Some(0)), "{released}");
    } else {
        assert_eq!((released["signalled"].as_u64(), released["killed"].as_u64()), (Some(1), Some(1)), "{released}");
    }
}

#[test]
fn stop_signal_once_to_descendants_in_scan_mode() {
    stop_signal_once(Mode::Scan, false, false, &[]);
}

#[test]
fn stop_signal_once_to_provider_and_descendants_under_timeout_in_scan_mode() {
    stop_signal_once(Mode::Scan, false, true, &[]);
}

/// The provider's process group (its child is in it) hears the timeout's stop signal from the
/// round, not a second time through the group.
#[test]
fn stop_signal_once_under_timeout_with_forward_to_group() {
    stop_signal_once(Mode::Scan, false, true, &["--forward-to", "group"]);
}

#[test]
fn stop_signal_once_to_descendants_as_pid1() {
    need_pid_namespace!();
    stop_signal_once(Mode::Pid1, true, false, &[]);
}

#[test]
fn stop_signal_once_to_provider_and_descendants_under_timeout_as_pid1() {
    need_pid_namespace!();
    stop_signal_once(Mode::Pid1, true, true, &[]);
}

#[test]
fn stop_signal_once_as_pid1_without_the_namespaces_proc() {
    need_pid_namespace!();
    stop_signal_once(Mode::Pid1, false, false, &[]);
    stop_signal_once(Mode::Pid1, false, true, &[]);
}

/// A process forked after its parent heard the stop signal (a parent that cleans up on SIGTERM
/// by starting a helper) hears the stop signal too, from a later round, before the grace ends.
/// guardian's child that handled the signal has its `children` read again, not only at the
/// round that signalled it.
#[test]
fn a_process_forked_after_its_parent_heard_the_stop_signal_hears_it_too() {
    let ctx = Ctx::new("stop-newcomer");
    let n = &ctx.nonce;
    // The inner sh is guardian's child once the provider exits; on SIGTERM it waits a moment
    // (so the round that signalled it has read its children already), then forks the newcomer.
    // It drops its own TERM trap first: a child forked while the trap is set would catch a
    // SIGTERM that lands before its exec and lose it there (the test's race, not guardian's).
    let inner = format!(
        "trap 'trap - TERM; sleep 0.3 || :; sleep 1000.{n}2 & echo $! > newcomer.pid' TERM; sleep 1000.{n}1 &\n\
         echo $$ > parent.pid; while :; do wait; done\n"
    );
    fs::write(ctx.path("inner.sh"), inner).expect("write inner.sh");
    let mut g = ctx
        .guardian()
        .args(["--grace", "5s"])
        .script("sh inner.sh & while [ ! -s parent.pid ]; do sleep 0.01; done; exit 3")
        .spawn();
    let code = g.wait_code();
    let ev = g.events();
    assert_eq!(code, 3, "events {ev:#?}; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    let newcomer = ctx.wait_pid_file("newcomer.pid");
    let heard = |sig: &str| {
        ev.iter().any(|e| {
            e["event"] == "signal"
                && e["signal"] == sig
                && e["pids"].as_array().is_some_and(|p| p.iter().any(|x| x.as_i64() == Some(i64::from(newcomer))))
        })
    };
    assert!(heard("SIGTERM"), "the newcomer {newcomer} never had the stop signal: {ev:#?}");
    assert!(!heard("SIGKILL"), "the newcomer {newcomer} was left to SIGKILL: {ev:#?}");
}

// ---------------------------------------------------------------------------------------
// Item 7: a `children` file longer than a page is read to its end.

/// 2 000 children of one process, and every one hears the stop signal; none leaves before
/// all have. Their `children` file is about 12 KiB: one read returns at most a page of it,
/// and a read loop that took a short read for the end stopped near 8 KiB with a fresh
/// buffer, near 4 KiB with a grown one (1 000 children fit in 8 KiB, so the test needs more).
/// The grace is long; the tree exits by itself as soon as every child was reached.
#[test]
fn every_child_of_a_wide_parent_hears_the_stop_signal() {
    const N: usize = 2000;
    let ctx = Ctx::new("wide");
    let prog = ctx.c_program("fan", FAN);
    let mut g = ctx
        .guardian()
        .args(["--grace", "25s"])
        .script(&format!(
            "{} {N} got.log {} & while [ ! -e got.log.ready ]; do sleep 0.01; done; exit 4",
            prog.display(),
            ctx.tag()
        ))
        .spawn();
    let code = g.wait_code();
    let ev = g.events();
    let got = lines(&ctx, "got.log").len();
    assert_eq!(got, N, "children that heard the stop signal; stderr: {}", g.stderr());
    assert_eq!(code, 4, "stderr: {}", g.stderr());
    assert!(find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGKILL").is_none(), "SIGKILL was needed");
    ctx.assert_nothing_left();
}

/// A chain of shells, SIGKILLed at once (`--grace 0`): each process is killed once and
/// counted once, although the deeper ones are killed through pidfds and then, as their
/// parents die, reparented to guardian, whose kill rounds SIGKILL its own children by pid.
#[test]
fn each_process_of_a_chain_is_killed_once() {
    const DEPTH: usize = 6;
    let ctx = Ctx::new("chain-once");
    let s = ctx.sleep();
    fs::write(
        ctx.path("nest.sh"),
        // `: > ready`, not `touch ready`: an external touch could still be alive (a seventh
        // process) when the provider sees the file and exits.
        format!("if [ \"$1\" -gt 0 ]; then sh ./nest.sh $(($1 - 1)) & wait; else : > ready; exec {s}; fi\n"),
    )
    .unwrap();
    let mut g = ctx
        .guardian()
        .args(["--grace", "0"])
        .script(&format!("sh ./nest.sh {} & while [ ! -e ready ]; do sleep 0.01; done; exit 0", DEPTH - 1))
        .spawn();
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    let ev = g.final_events();
    let rel = ev.last().unwrap();
    assert_eq!(rel["event"], "released");
    assert_eq!(rel["reaped"], DEPTH as u64, "{rel}");
    assert_eq!(rel["killed"], DEPTH as u64, "each process counted once: {ev:?}");
    let mut pids: Vec<i64> = ev
        .iter()
        .filter(|e| e["event"] == "signal" && e["signal"] == "SIGKILL" && e["target"] == "descendants")
        .flat_map(|e| e["pids"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_i64())
        .collect();
    assert_eq!(pids.len(), DEPTH, "SIGKILL reported once per process: {ev:?}");
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), DEPTH, "SIGKILL reported once per process: {ev:?}");
    ctx.assert_nothing_left();
}

// ---------------------------------------------------------------------------------------
// Review: a child forked by a thread other than the main thread is in that thread's
// `children` file, not the main thread's.

/// Counts every SIGTERM it receives (a line in LOG) and otherwise ignores them; first starts
/// a second thread that forks a child which counts its own SIGTERMs in CHILDLOG (and writes
/// CHILDLOG.ready). argv: LOG TAG CHILDLOG.
const THREAD_FORKER: &str = concat!(
    counting_prelude!(),
    r#"
static const char *childlog;
static void *forker(void *a) {
    (void)a;
    if (fork() == 0) count(childlog);
    for (;;) pause();
    return 0;
}
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    childlog = argv[3];
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, 0);
    pthread_t t;
    if (pthread_create(&t, 0, forker, 0)) return 3;
    count(argv[1]);
}
"#
);

/// Runs PROGRAM (argv: parent.log TAG child.log) as the provider's child, lets the provider
/// exit once both logs are ready, and returns guardian's events once everything is gone.
fn parent_and_child_logs(ctx: &Ctx, name: &str, source: &str) -> Vec<Value> {
    let prog = ctx.c_program(name, source);
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--grace", "2s"])
        .script(&format!(
            "{} parent.log {tag} child.log & \
             while [ ! -e child.log.ready ] || [ ! -e parent.log.ready ]; do sleep 0.01; done; exit 7",
            prog.display()
        ))
        .spawn();
    let code = g.wait_code();
    let ev = g.events();
    assert_eq!(code, 7, "events {ev:#?}; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    ev
}

/// guardian's child (after the provider's exit) is multi-threaded, and its child was forked
/// by its second thread: that grandchild existed at the first stop round, so it must hear the
/// stop signal once, not only the SIGKILL at the end of the grace.
#[test]
fn a_child_forked_by_a_second_thread_of_guardians_child_hears_the_stop_signal() {
    let ctx = Ctx::new("thread-fork");
    let ev = parent_and_child_logs(&ctx, "thread-forker", THREAD_FORKER);
    assert_eq!(lines(&ctx, "parent.log"), ["T"], "guardian's child's SIGTERMs; events {ev:#?}");
    assert_eq!(lines(&ctx, "child.log"), ["T"], "the thread-forked grandchild's SIGTERMs; events {ev:#?}");
}

/// The same with the provider itself multi-threaded, under `--timeout` (stop rounds while
/// the provider lives).
#[test]
fn a_child_forked_by_a_second_thread_of_the_provider_hears_the_timeouts_stop_signal() {
    let ctx = Ctx::new("thread-fork-provider");
    let prog = ctx.c_program("thread-forker", THREAD_FORKER);
    let tag = ctx.tag();
    let p = prog.to_str().expect("utf-8 path");
    let mut g = ctx
        .guardian()
        .args(["--timeout", "1s", "--grace", "2s"])
        .command([p, "provider.log", tag.as_str(), "child.log"])
        .spawn();
    let code = g.wait_code();
    let ev = g.events();
    assert_eq!(code, 124, "events {ev:#?}; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    assert!(ctx.path("child.log.ready").exists(), "the grandchild never started");
    assert_eq!(lines(&ctx, "provider.log"), ["T"], "the provider's SIGTERMs; events {ev:#?}");
    assert_eq!(lines(&ctx, "child.log"), ["T"], "the thread-forked grandchild's SIGTERMs; events {ev:#?}");
}

/// As PID 1 with the namespace's own `/proc`, where `pidfd_open` is refused only when the
/// teardown first needs it (the provider came from clone3 with its pidfd): guardian's child
/// hears the stop signal from the first round, then the round after the fallback must not
/// `kill(-1)` it a second time.
#[test]
fn stop_signal_once_as_pid1_when_pidfd_open_is_refused_midway() {
    need_pid_namespace!();
    let ctx = Ctx::new("stop-once-pidfd");
    let prog = ctx.c_program("counter", COUNTER);
    let tag = ctx.tag();
    let mut g = ctx
        .guardian()
        .args(["--grace", "2s", "-vv"])
        .deny(libc::SYS_pidfd_open, libc::EPERM)
        .script(&format!(
            "{} child.log {tag} grandchild.log & \
             while [ ! -e child.log.ready ] || [ ! -e grandchild.log.ready ]; do sleep 0.01; done; exit 7",
            prog.display()
        ))
        .privileged()
        .wrapper(pid1_wrapper(true))
        .spawn();
    let code = g.wait_code();
    let ev = g.events();
    assert_eq!(code, 7, "events {ev:#?}; stderr: {}", g.stderr());
    ctx.assert_nothing_left();
    assert_eq!(lines(&ctx, "child.log"), ["T"], "guardian's child's SIGTERMs; events {ev:#?}; stderr {}", g.stderr());
}

/// Forks a child that counts its SIGTERMs in CHILDLOG, then its main thread exits
/// (`pthread_exit`) while a second thread counts the process's SIGTERMs in LOG: the child
/// moves to the live thread's `children` file. argv: LOG TAG CHILDLOG.
const LEADERLESS_PARENT: &str = concat!(
    counting_prelude!(),
    r#"
static const char *log_;
static void *live(void *a) { (void)a; count(log_); return 0; }
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    log_ = argv[1];
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, 0);
    if (fork() == 0) count(argv[3]);
    pthread_t t;
    if (pthread_create(&t, 0, live, 0)) return 3;
    pthread_exit(0);
}
"#
);

/// guardian's child is a process whose main thread exited (a `Z` leader with a live thread):
/// its child, forked before, now sits in the live thread's `children` file, and must hear the
/// stop signal.
#[test]
fn the_child_of_a_leaderless_child_of_guardian_hears_the_stop_signal() {
    let ctx = Ctx::new("leaderless-parent");
    let ev = parent_and_child_logs(&ctx, "leaderless-parent", LEADERLESS_PARENT);
    assert_eq!(lines(&ctx, "parent.log"), ["T"], "the leaderless process's SIGTERMs; events {ev:#?}");
    assert_eq!(lines(&ctx, "child.log"), ["T"], "its child's SIGTERMs; events {ev:#?}");
}
