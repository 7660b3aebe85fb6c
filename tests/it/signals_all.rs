//! Signals: every signal another process can send to guardian, 1 to 64, is read from its
//! signalfd and forwarded; only SIGKILL and SIGSTOP (which nobody can catch) end guardian
//! without a teardown. A real fault inside guardian still ends it at once, and the provider
//! starts with exactly the caller's signal mask and ignored set (issue 15, issue 9 item 2).
//!
//! The provider is a small C program compiled here with `cc`: it blocks every signal and reads
//! them from its own signalfd (raw syscalls, so the C library's reserved 32-34 work too),
//! logging number and sender, and keeps a `setsid` child tagged with the test's nonce.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use crate::harness::*;

const HELPER_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sigaction (x86_64, aarch64). */
struct ksa { unsigned long handler, flags, restorer, mask; };

static void die(const char *what) { perror(what); _exit(120); }

static void append(const char *path, const char *line) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line)) die("append");
    close(fd);
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "wrap")) {
        /* wrap BLOCK IGNORE PROG ARGS...: set the raw mask, ignore exactly IGNORE (every
           other signal SIG_DFL), exec PROG. A glibc parent that used posix_spawn (cargo, so
           the test process) hands 32 and 33 over ignored; this gives a known start. */
        unsigned long block = strtoul(argv[2], 0, 16), ignore = strtoul(argv[3], 0, 16);
        for (int s = 1; s <= 64; s++) {
            if (s == SIGKILL || s == SIGSTOP) continue;
            struct ksa act = { (unsigned long)((ignore >> (s - 1) & 1) ? SIG_IGN : SIG_DFL), 0, 0, 0 };
            if (syscall(SYS_rt_sigaction, s, &act, 0, 8) != 0) die("rt_sigaction");
        }
        if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &block, 0, 8) != 0) die("rt_sigprocmask");
        execvp(argv[4], argv + 4);
        die("execvp");
    }
    if (argc >= 3 && !strcmp(argv[1], "status")) {
        /* status OUT [TAG]: copy this process's Sig* lines of /proc/self/status to OUT. */
        FILE *in = fopen("/proc/self/status", "r");
        char line[256], out[4096] = "";
        if (!in) die("/proc/self/status");
        while (fgets(line, sizeof line, in))
            if (!strncmp(line, "Sig", 3) && strlen(out) + strlen(line) < sizeof out) strcat(out, line);
        append(argv[2], out);
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "catch")) {
        /* catch LOG CHILD_PIDFILE SLEEP_ARG: block and read every signal; log "signo pid code";
           keep a setsid `sleep SLEEP_ARG`; exit 0 after SIGTERM. */
        unsigned long all = ~0UL, none = 0;
        if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, 8) != 0) die("rt_sigprocmask");
        int sfd = syscall(SYS_signalfd4, -1, &all, 8, SFD_CLOEXEC);
        if (sfd < 0) die("signalfd4");
        pid_t child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            char buf[32];
            setsid();
            syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, 0, 8);
            snprintf(buf, sizeof buf, "%d\n", (int)getpid());
            append(argv[3], buf);
            execlp("sleep", "sleep", argv[4], (char *)0);
            die("exec sleep");
        }
        append(argv[2], "ready\n");
        for (;;) {
            struct signalfd_siginfo si;
            char buf[64];
            ssize_t n = read(sfd, &si, sizeof si);
            if (n != sizeof si) die("read signalfd");
            snprintf(buf, sizeof buf, "%u %u %d\n", si.ssi_signo, si.ssi_pid, si.ssi_code);
            append(argv[2], buf);
            if (si.ssi_signo == SIGTERM) return 0;
        }
    }
    fprintf(stderr, "usage: helper wrap|status|catch ...\n");
    return 2;
}
"#;

/// (signo, sender pid) of every signal the provider logged.
fn received(log: &Path) -> Vec<(i32, i32)> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.as_bytes().first().is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// Every signal 1-64 but SIGKILL and SIGSTOP, sent with kill(2) to an unprivileged guardian:
/// guardian survives each one and forwards it (the provider reads it with guardian as the
/// sender), including the fault signals, which used to kill guardian (ILL, TRAP, ABRT, FPE,
/// SYS) or be swallowed by the Rust runtime's stack-overflow handler (SEGV, BUS), and the C
/// library's reserved 32-34. SIGCHLD is guardian's own and is not forwarded. SIGTERM, last,
/// starts the stop: the provider receives it, and nothing of the tree is left afterwards.
/// Before that, guardian's own /proc status shows every signal but KILL and STOP blocked and
/// no handler installed.
#[test]
fn every_signal_but_kill_and_stop_is_survived_and_forwarded() {
    every_signal(false);
}

/// The same with guardian as PID 1 of a PID namespace (a container's init), signalled from the
/// parent namespace as `docker kill -s SIG` does: a default-action signal to init from an
/// ancestor namespace used to be dropped by the kernel for the fault signals, now each one is
/// forwarded.
#[test]
fn every_signal_reaches_the_provider_of_a_pid1_guardian() {
    need_root!("unshare --pid --fork --mount-proc");
    need_program!("unshare", "util-linux");
    every_signal(true);
}

fn every_signal(pid1: bool) {
    let ctx = Ctx::new(if pid1 { "signals-all-pid1" } else { "signals-all" });
    let log = ctx.path("received.log");
    let child_file = ctx.path("child.pid");
    let helper = ctx.c_program("sighelper", HELPER_C);
    // Nothing blocked or ignored when guardian starts (a signal ignored then stays ignored, so
    // it could not reach the provider).
    let wrap = [helper.as_os_str().to_owned(), "wrap".into(), "0".into(), "0".into()];
    let builder = if pid1 {
        let mut w: Vec<std::ffi::OsString> = ["unshare", "--pid", "--fork", "--mount-proc"].map(Into::into).into();
        w.extend(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"].map(Into::into));
        w.extend(wrap);
        ctx.guardian().privileged().wrapper(w)
    } else {
        ctx.guardian().wrapper(wrap)
    };
    let mut g = builder
        .command([
            helper.as_os_str().to_owned(),
            "catch".into(),
            log.clone().into_os_string(),
            child_file.clone().into_os_string(),
            ctx.sleep_arg(1000).into(),
        ])
        .spawn();
    wait_for("the provider to block its signals", || {
        fs::read_to_string(&log).ok().filter(|t| t.starts_with("ready\n")).map(drop)
    });
    ctx.wait_pid_file("child.pid");
    let spawned = g.wait_event_named("spawned");
    assert_eq!(spawned["mode"], if pid1 { "pid1" } else { "subreaper" }, "{spawned}");
    // guardian's pid here, and as the provider sees it (the sender of what it forwards).
    let (target, sender) = if pid1 {
        // The wrappers' and guardian's argv hold the provider's too: match on argv[0..2].
        let mut argv01 = helper.as_os_str().as_encoded_bytes().to_vec();
        argv01.extend_from_slice(b"\0catch\0");
        let provider = wait_for("the provider's pid", || {
            tagged_pids(&ctx.nonce).into_iter().find(|&p| cmdline(p).is_some_and(|c| c.starts_with(&argv01)))
        });
        let (_, ppid, _) = stat(provider).expect("the provider's stat");
        (ppid, 1)
    } else {
        // Behind the sentinel: signals go to the host's child, and arrive from guardian's own.
        (g.pid(), g.inner_pid())
    };
    let pidfd = rustix::process::Pid::from_raw(target)
        .map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()))
        .expect("a pid")
        .expect("pidfd_open(guardian)");
    assert!(
        cmdline(target).is_some_and(|c| c.starts_with(guardian_bin().as_os_str().as_encoded_bytes())),
        "pid {target} is guardian: {:?}",
        cmdline(target).map(|c| String::from_utf8_lossy(&c).into_owned())
    );
    let send = |sig: i32| {
        // SAFETY: pidfd is an open pidfd on guardian; null siginfo means kill(2)'s SI_USER.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                std::os::fd::AsRawFd::as_raw_fd(&pidfd),
                sig,
                std::ptr::null::<u8>(),
                0,
            )
        };
        assert_eq!(rc, 0, "pidfd_send_signal({sig}): {}", std::io::Error::last_os_error());
    };
    // guardian blocks everything the kernel lets it block, and runs no handler (the Rust
    // runtime's SIGSEGV/SIGBUS handlers were reset before the mask was set).
    let status = fs::read_to_string(format!("/proc/{target}/status")).expect("guardian's status");
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default();
    let all = (1..=64u32).filter(|&s| s != 9 && s != 19).fold(0u64, |m, s| m | 1 << (s - 1));
    assert_eq!(field("SigBlk:"), format!("{all:016x}"), "guardian's mask: {status}");
    assert_eq!(field("SigCgt:"), "0000000000000000", "guardian's handlers: {status}");
    let before = tagged_pids(&ctx.nonce);
    assert!(before.len() >= 2, "the provider and its setsid child run: {:?}", describe(&before));

    for sig in (1..=64).filter(|&s| ![libc::SIGKILL, libc::SIGSTOP, libc::SIGTERM].contains(&s)) {
        send(sig);
        if sig != libc::SIGCHLD {
            wait_for(&format!("the provider to receive signal {sig} from guardian"), || {
                if let Ok(Some(st)) = g.child.try_wait() {
                    panic!("guardian ended on signal {sig} ({st:?}), leaving its tree; stderr: {}", g.stderr());
                }
                received(&log).contains(&(sig, sender)).then_some(())
            });
        }
        assert!(
            g.child.try_wait().expect("try_wait").is_none(),
            "guardian died from signal {sig}; stderr: {}",
            g.stderr()
        );
    }
    assert!(!received(&log).contains(&(libc::SIGCHLD, sender)), "SIGCHLD is guardian's own, not forwarded");
    assert!(before.iter().all(|&p| alive(p)), "forwarded signals reached only the provider");

    send(libc::SIGTERM);
    let code = g.wait_code();
    drop(pidfd);
    assert_eq!(code, 0, "the provider's status after it exited on SIGTERM; stderr: {}", g.stderr());
    let ev = g.final_events();
    assert!(
        ev.iter().any(|e| e["event"] == "stopping" && e["reason"] == "signal"),
        "SIGTERM started the stop: {ev:#?}"
    );
    assert!(received(&log).contains(&(libc::SIGTERM, sender)), "the provider received SIGTERM from guardian");
    ctx.assert_nothing_left();
}

/// The provider starts with the caller's signal mask and ignored set, exactly, including the
/// C library's reserved numbers (restored with a raw rt_sigprocmask; glibc's wrapper drops
/// them), SIGCHLD ignored as the caller had it, and no handler of guardian's (the Rust
/// runtime's SIGSEGV/SIGBUS handlers are not inherited: SigCgt is empty).
#[test]
fn provider_gets_the_callers_mask_and_ignored_set() {
    let ctx = Ctx::new("signals-mask");
    let bits = |sigs: &[i32]| sigs.iter().fold(0u64, |m, &s| m | 1 << (s - 1));
    let block = bits(&[libc::SIGHUP, libc::SIGUSR1, libc::SIGTERM, 32, 33, 34, 40, 64]);
    let ignore = bits(&[libc::SIGUSR2, libc::SIGCHLD, libc::SIGWINCH, 33, 35]);
    let out = ctx.path("status.txt");
    let helper = ctx.c_program("sighelper", HELPER_C);
    let mut g = ctx
        .guardian()
        .wrapper([
            helper.as_os_str().to_owned(),
            "wrap".into(),
            format!("{block:x}").into(),
            format!("{ignore:x}").into(),
        ])
        .command([helper.as_os_str().to_owned(), "status".into(), out.clone().into_os_string(), ctx.tag().into()])
        .spawn();
    assert_eq!(g.wait_code(), 0, "stderr: {}", g.stderr());
    let status = fs::read_to_string(&out).expect("the provider wrote its status");
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in {status}"));
        u64::from_str_radix(line[name.len()..].trim(), 16).expect("hex mask")
    };
    // The whole mask, 32-34 included, in every build: musl unblocks its own 33 and 34 only when
    // a handler is installed through its sigaction, and guardian's entry point (sys/start.rs)
    // installs none (README, Limitations; design.md, start-up step 3).
    assert_eq!(field("SigBlk:"), block, "mask: {status}");
    assert_eq!(field("SigIgn:"), ignore, "ignored set: {status}");
    assert_eq!(field("SigCgt:"), 0, "no inherited handler: {status}");
    ctx.assert_nothing_left();
}

/// A real fault inside guardian ends it at once although every signal is blocked: the kernel
/// forces a synchronous SIGSEGV through the mask (a stack overflow here, with the default
/// action: the Rust runtime's handler is gone, so no "overflowed its stack" message and no
/// abort), and `abort()` (what `panic = "abort"` calls) unblocks SIGABRT. The hook fires after
/// the signal step and before the provider exists.
#[test]
fn a_fault_inside_guardian_still_ends_it() {
    need_hooks!();
    for (fault, sig) in [("overflow", libc::SIGSEGV), ("abort", libc::SIGABRT)] {
        let ctx = Ctx::new(&format!("signals-fault-{fault}"));
        let mut g = ctx
            .guardian()
            .env("GUARDIAN_TEST_FAULT", fault)
            .script(&format!("echo started > started; {}", ctx.sleep()))
            .spawn();
        let st = g.wait();
        assert_eq!(st.signal(), Some(sig), "{fault}: guardian ended by {st:?}; stderr: {}", g.stderr());
        assert!(g.stderr().contains("test hook"), "the hook ran: {}", g.stderr());
        assert!(!g.stderr().contains("overflowed its stack"), "{}", g.stderr());
        assert!(g.events().iter().all(|e| e["event"] != "spawned"), "{:?}", g.events());
        assert!(!ctx.path("started").exists());
        ctx.assert_nothing_left();
    }
}

/// Issue 29.7: a signal guardian raises itself is never forwarded. Under a low
/// `RLIMIT_FSIZE`, guardian's own writes pass the limit (the `--events-file`, or a `-vv` log on
/// a file) and the kernel raises SIGXFSZ at guardian (`SI_USER` from guardian's own pid).
/// Forwarded, it killed the provider, and guardian with it. Now the failed write is handled as
/// any failed write (the events, or the log, stop there), the signal is dropped, the provider
/// keeps running and hears every signal actually sent to guardian, and a stop request still
/// ends it normally.
#[test]
fn a_sigxfsz_from_guardians_own_write_is_not_forwarded() {
    const LIMIT: u64 = 1024;
    for log in [false, true] {
        let ctx = Ctx::new(if log { "own-xfsz-log" } else { "own-xfsz-events" });
        let events = ctx.path("events.jsonl");
        let mut b = ctx.guardian().rlimit(libc::RLIMIT_FSIZE as i32, LIMIT);
        b = if log {
            b.arg("-vv")
        } else {
            b.no_events().args([std::ffi::OsString::from("--events-file"), events.clone().into()])
        };
        let mut g =
            b.script("trap 'echo USR1 >> usr1.log' USR1; echo $$ > ready; while :; do sleep 0.05; done").spawn();
        let provider = ctx.wait_pid_file("ready");
        // Each forwarded signal is a `signal` event and log lines: past the limit well before
        // the last one.
        for n in 1..=12 {
            g.signal(libc::SIGUSR1);
            wait_for(&format!("the provider to hear SIGUSR1 #{n}"), || {
                let heard = fs::read_to_string(ctx.path("usr1.log")).unwrap_or_default();
                (heard.lines().count() >= n).then_some(())
            });
        }
        let written = fs::metadata(if log { &g.stderr_path } else { &events }).map(|m| m.len()).unwrap_or(0);
        assert!(written + 300 > LIMIT, "log {log}: guardian's writes did not reach the limit ({written} bytes)");
        assert!(alive(provider), "log {log}: the provider died (of guardian's own SIGXFSZ): {}", g.stderr());
        g.signal(libc::SIGTERM);
        assert_eq!(g.wait_end(), killed_by(libc::SIGTERM), "log {log}: the stop request ends it as usual");
        ctx.assert_nothing_left();
        if log {
            let ev = g.final_events();
            assert!(find(&ev, |e| e["event"] == "signal" && e["signal"] == "SIGXFSZ").is_none(), "{ev:#?}");
            assert_eq!(find(&ev, |e| e["event"] == "released").expect("released").1["status"], 128 + libc::SIGTERM);
        }
    }
}
