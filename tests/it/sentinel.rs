//! The sentinel (issue 24): a SIGKILL of the process the host started leads to the same
//! bounded teardown as any other parent death, unprivileged, without a cgroup. Each host
//! (a shell's `kill -9 $!`, Python's `Popen.kill()`, tokio's `kill_on_drop` at runtime drop,
//! `killpg(SIGKILL)` of the host's group) runs guardian (as `nobody` under root) over a tree
//! of `setsid` children that ignore SIGTERM; nothing may be left after grace + margin.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

const GRACE_MS: u64 = 300;
/// What the teardown may take beyond the grace on a loaded machine.
const MARGIN: Duration = Duration::from_secs(10);

/// The provider: ignores SIGTERM; a `setsid` child and a `setsid` double-forked orphan that
/// ignore it too (the dispositions survive exec), and one plain child; then `ready`.
fn tree(ctx: &Ctx) -> String {
    let s = ctx.sleep();
    format!("trap '' TERM; setsid sh -c 'exec {s}' & setsid sh -c '{s} & :' & {s} & touch ready; wait")
}

/// `sh -c 'exec guardian --grace … --events-fd 3 -- sh -c TREE TAG 3>events'`: the host's
/// child is guardian's own process (the `exec`), with its events in a file.
fn guardian_argv(ctx: &Ctx) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("exec \"$0\" --grace {GRACE_MS}ms --events-fd 3 -- sh -c \"$1\" \"$2\" 3>\"$3\""),
        guardian_bin().display().to_string(),
        tree(ctx),
        ctx.tag(),
        ctx.path("events").display().to_string(),
    ]
}

/// A host program, run as `nobody` when the suite runs as root (as users would).
fn host(ctx: &Ctx, argv: &[String]) -> Command {
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).args(argv);
        c
    } else {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    cmd.current_dir(&ctx.dir).stdin(Stdio::null());
    cmd
}

/// Runs a host to its end (bounded), its stdout and stderr in files (a leaked tree would hold a
/// pipe open forever): (status, stdout).
fn run_host(ctx: &Ctx, mut cmd: Command) -> (std::process::ExitStatus, String) {
    let out = ctx.path(&format!("host-out-{}", random_digits(6)));
    let err = ctx.path(&format!("host-err-{}", random_digits(6)));
    cmd.stdout(std::fs::File::create(&out).expect("host stdout file"));
    cmd.stderr(std::fs::File::create(&err).expect("host stderr file"));
    let mut child = cmd.spawn().expect("start the host");
    let status = wait_for("the host to exit", || child.try_wait().expect("try_wait"));
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let errors = std::fs::read_to_string(&err).unwrap_or_default();
    if !errors.is_empty() {
        eprintln!("host stderr: {errors}");
    }
    (status, text)
}

/// Waits for the tree (three tagged sleeps and `ready`).
fn wait_ready(ctx: &Ctx) {
    ctx.wait_sleeps(3);
    wait_for("the provider's ready file", || ctx.path("ready").exists().then_some(()));
}

/// Nothing tagged is left within grace + margin, and the events say the parent died and the
/// tree was released.
fn assert_torn_down(ctx: &Ctx) {
    wait_for_within("every tagged process to be gone", Duration::from_millis(GRACE_MS) + MARGIN, &mut || {
        tagged_pids(&ctx.nonce).is_empty().then_some(())
    });
    let events = parse_events(&std::fs::read_to_string(ctx.path("events")).unwrap_or_default());
    assert!(
        events.iter().any(|e| e["event"] == "stopping" && e["reason"] == "parent-died"),
        "no parent-died stop: {events:#?}"
    );
    assert_eq!(events.last().map(|e| e["event"].clone()), Some("released".into()), "{events:#?}");
}

macro_rules! need_host_tools {
    () => {
        if is_root() {
            need_program!("setpriv", "util-linux");
        }
    };
}

#[test]
fn kill_9_of_the_process_a_shell_started_tears_the_tree_down() {
    let ctx = Ctx::new("sentinel-kill9");
    need_host_tools!();
    let g = guardian_argv(&ctx);
    let quoted: Vec<String> = g.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect();
    let script = format!(
        "{} & echo $! > host-child; while [ ! -e ready ]; do sleep 0.05; done; kill -9 $!; wait $!; echo $? > status",
        quoted.join(" ")
    );
    let (status, _) = run_host(&ctx, host(&ctx, &["sh".into(), "-c".into(), script]));
    assert!(status.success(), "{status}");
    assert_eq!(ctx.read_line_file("status").as_deref(), Some("137"), "the shell saw its child killed");
    assert_torn_down(&ctx);
}

/// `python3 -c SCRIPT`, with the guardian command line and an action after `ready`.
fn python_host(ctx: &Ctx, action: &str) -> Command {
    let script = format!(
        "import os, signal, subprocess, sys, time\n\
         p = subprocess.Popen(sys.argv[1:], start_new_session=True)\n\
         while not os.path.exists('ready'): time.sleep(0.05)\n\
         {action}\n\
         print(p.wait())\n"
    );
    // The system's interpreter: one a user's PATH finds (a pyenv shim) may be closed to nobody.
    let python = if std::path::Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let mut argv = vec![python.to_string(), "-c".into(), script];
    argv.extend(guardian_argv(ctx));
    host(ctx, &argv)
}

#[test]
fn popen_kill_from_python_tears_the_tree_down() {
    let ctx = Ctx::new("sentinel-popen-kill");
    need_host_tools!();
    need_program!("python3", "python3");
    let (status, out) = run_host(&ctx, python_host(&ctx, "p.kill()"));
    assert_eq!(out.trim(), "-9", "{status}: {out}");
    assert_torn_down(&ctx);
}

#[test]
fn killpg_sigkill_of_the_hosts_group_tears_the_tree_down() {
    let ctx = Ctx::new("sentinel-killpg");
    need_host_tools!();
    need_program!("python3", "python3");
    let (status, out) = run_host(&ctx, python_host(&ctx, "os.killpg(p.pid, signal.SIGKILL)"));
    assert_eq!(out.trim(), "-9", "{status}: {out}");
    assert_torn_down(&ctx);
}

/// A group SIGTERM reaches the sentinel only (guardian and the tree are in other groups): one
/// stop request with its grace, never a kill request.
#[test]
fn group_sigterm_is_one_stop_request() {
    let ctx = Ctx::new("sentinel-killpg-term");
    need_host_tools!();
    need_program!("python3", "python3");
    let (status, out) = run_host(&ctx, python_host(&ctx, "os.killpg(p.pid, signal.SIGTERM)"));
    assert!(status.success(), "{status}: {out}");
    wait_for_within("every tagged process to be gone", Duration::from_millis(GRACE_MS) + MARGIN, &mut || {
        tagged_pids(&ctx.nonce).is_empty().then_some(())
    });
    let events = parse_events(&std::fs::read_to_string(ctx.path("events")).unwrap_or_default());
    let stops: Vec<_> = events.iter().filter(|e| e["event"] == "stopping").collect();
    assert_eq!(stops.len(), 1, "one stop request: {events:#?}");
    assert_eq!(stops[0]["reason"], "signal");
    assert_eq!(stops[0]["grace_ms"], GRACE_MS);
    let kill =
        events.iter().find(|e| e["event"] == "signal" && e["signal"] == "SIGKILL").expect("SIGKILL at the deadline");
    assert!(ts(kill) - ts(stops[0]) >= GRACE_MS as f64 / 1000.0 - 0.01, "SIGKILL before the grace ended: {events:#?}");
    // The provider died of the SIGKILL: the host sees it as guardian's end (137, or -9 once
    // guardian ends by the provider's signal).
    let code = out.trim().to_string();
    assert!(code == "137" || code == "-9", "{code}");
}

/// The tokio host of `tests/hosts/tokio-host`, built on first use.
fn tokio_host() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hosts/tokio-host");
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tokio-host");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status()
        .ok()?;
    status.success().then(|| target.join("debug/tokio-host"))
}

#[test]
fn tokio_kill_on_drop_at_runtime_drop_tears_the_tree_down() {
    let ctx = Ctx::new("sentinel-tokio");
    need_host_tools!();
    let Some(bin) = tokio_host() else { panic!("building tests/hosts/tokio-host failed (it needs crates.io once)") };
    // nobody must be able to run it: copy it into the test's directory.
    let copy = ctx.path("tokio-host");
    std::fs::copy(&bin, &copy).expect("copy tokio-host");
    let mut argv = vec![copy.display().to_string(), ctx.path("ready").display().to_string()];
    argv.extend(guardian_argv(&ctx));
    let (status, out) = run_host(&ctx, host(&ctx, &argv));
    assert!(status.success(), "{status}: {out}");
    assert_torn_down(&ctx);
}

/// Someone looks guardian itself up (the sentinel's child) and SIGKILLs it: the tree is
/// reparented to the sentinel, which SIGKILLs and reaps it, then dies of SIGKILL too.
#[test]
fn sigkill_of_guardian_itself_is_cleaned_by_the_sentinel() {
    let ctx = Ctx::new("sentinel-inner-kill");
    let mut g = ctx.guardian().arg("--grace").arg(format!("{GRACE_MS}ms")).command(ctx.sh(&tree(&ctx))).spawn();
    wait_ready(&ctx);
    let sentinel = g.pid();
    let inner = wait_for("guardian's own process", || {
        let kids = std::fs::read_to_string(format!("/proc/{sentinel}/task/{sentinel}/children")).ok()?;
        kids.split_whitespace().next()?.parse::<i32>().ok()
    });
    assert_ne!(inner, sentinel);
    // SAFETY: plain kill of a pid we just read; the test's tree is the only user of it.
    assert_eq!(unsafe { libc::kill(inner, libc::SIGKILL) }, 0);
    let st = g.wait();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(libc::SIGKILL), "{st}");
    ctx.assert_nothing_left();
}

/// `--no-sentinel` (`GUARDIAN_NO_SENTINEL=1`): no extra process (the provider's parent is the
/// host's child), and a bad value is a usage error naming the variable.
#[test]
fn sentinel_can_be_turned_off() {
    let ctx = Ctx::new("sentinel-off");
    let mut g = ctx.guardian().env("GUARDIAN_NO_SENTINEL", "1").command(ctx.sh("echo $PPID > ppid")).spawn();
    assert_eq!(g.wait_code(), 0);
    assert_eq!(ctx.wait_pid_file("ppid"), g.pid());
    let mut g = ctx.guardian().arg("--no-sentinel").command(ctx.sh("echo $PPID > ppid1")).spawn();
    assert_eq!(g.wait_code(), 0);
    assert_eq!(ctx.wait_pid_file("ppid1"), g.pid());
    let mut g = ctx.guardian().command(ctx.sh("echo $PPID > ppid2")).spawn();
    assert_eq!(g.wait_code(), 0);
    assert_ne!(ctx.wait_pid_file("ppid2"), g.pid(), "by default guardian runs behind a sentinel");
    let mut bad = ctx.guardian().env("GUARDIAN_NO_SENTINEL", "maybe").command(ctx.sh("touch ran")).spawn();
    assert_eq!(bad.wait_code(), 125);
    assert!(bad.stderr().contains("GUARDIAN_NO_SENTINEL"), "{}", bad.stderr());
    assert!(!ctx.path("ran").exists());
}

/// As PID 1 there is no sentinel: the provider's parent is guardian, PID 1.
#[test]
fn pid1_has_no_sentinel() {
    need_pid_namespace!();
    let ctx = Ctx::new("sentinel-pid1");
    let mut g = ctx
        .guardian()
        .wrapper(["unshare", "--pid", "--fork", "--mount-proc"])
        .privileged()
        .command(ctx.sh("echo $PPID > ppid"))
        .spawn();
    assert_eq!(g.wait_code(), 0);
    assert_eq!(ctx.wait_pid_file("ppid"), 1);
    assert_eq!(g.events().iter().find(|e| e["event"] == "spawned").expect("spawned")["guardian_pid"], 1);
}

/// The spawned event names the pid the host started (the sentinel).
#[test]
fn spawned_event_names_the_pid_the_host_started() {
    let ctx = Ctx::new("sentinel-pid");
    let mut g = ctx.guardian().command(ctx.sh(":")).spawn();
    assert_eq!(g.wait_code(), 0);
    let spawned = g.events().into_iter().find(|e| e["event"] == "spawned").expect("spawned");
    assert_eq!(spawned["guardian_pid"], g.pid());
}

/// `doctor` says whether the sentinel is on, and why not where it is off.
#[test]
fn doctor_reports_the_sentinel() {
    let doctor = |env: Option<&str>| {
        let mut c = Command::new(guardian_bin());
        c.args(["doctor", "--json"]);
        match env {
            Some(v) => c.env("GUARDIAN_NO_SENTINEL", v),
            None => c.env_remove("GUARDIAN_NO_SENTINEL"),
        };
        let out = c.output().expect("run doctor");
        // A usage error (125) prints no report.
        let v = serde_json::from_slice::<serde_json::Value>(&out.stdout).map(|v| v.to_string());
        (out.status.code(), v.unwrap_or_default())
    };
    let (_, on) = doctor(None);
    assert!(on.contains("sentinel: on"), "{on}");
    let (code, off) = doctor(Some("1"));
    assert_eq!(code, Some(1), "turned off, guardian would run degraded: {off}");
    assert!(off.contains("--no-sentinel, GUARDIAN_NO_SENTINEL"), "{off}");
    let (code, _) = doctor(Some("maybe"));
    assert_eq!(code, Some(125), "a bad value is a usage error, as for every variable");
}

/// `GUARDIAN_NO_SENTINEL` configures this guardian only: the provider does not inherit it.
#[test]
fn the_setting_is_not_passed_on_to_the_provider() {
    let ctx = Ctx::new("sentinel-env");
    let mut g = ctx
        .guardian()
        .env("GUARDIAN_NO_SENTINEL", "0")
        .command(ctx.sh("echo \"[${GUARDIAN_NO_SENTINEL-unset}]\" > seen"))
        .spawn();
    assert_eq!(g.wait_code(), 0);
    assert_eq!(ctx.read_line_file("seen").as_deref(), Some("[unset]"));
}

/// The sentinel and guardian share one address space (`clone(CLONE_VM)`): no page is
/// duplicated copy-on-write, which is what keeps the pair at one process's memory
/// (`bench/profile.md`). `kcmp(KCMP_VM)` answers 0 for two processes with the same mm.
#[test]
fn guardian_shares_the_sentinels_address_space() {
    need_root!("compare two non-dumpable processes' address spaces with kcmp");
    let ctx = Ctx::new("sentinel-vm");
    let mut g = ctx.guardian().script(&ctx.sleep()).spawn();
    let inner = g.inner_pid();
    assert_ne!(inner, g.pid(), "guardian runs behind a sentinel");
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes integers only.
    let same = unsafe { libc::syscall(libc::SYS_kcmp, g.pid(), inner, KCMP_VM, 0, 0) };
    let err = std::io::Error::last_os_error();
    g.signal(libc::SIGTERM);
    g.wait();
    if same == -1 && err.raw_os_error() == Some(libc::ENOSYS) {
        skip!("kcmp is not built into this kernel (CONFIG_KCMP)");
    }
    assert_eq!(same, 0, "kcmp(KCMP_VM) of sentinel {} and guardian {inner}: {same} ({err})", g.pid());
    ctx.assert_nothing_left();
}

/// Issue 29.2: guardian proper held (test hook) right after it checked that its parent is the
/// sentinel, the sentinel is SIGKILLed there: the watch was armed on the sentinel itself (a
/// pidfd taken before the check), not on whatever `getppid()` says later, so the death is
/// noticed and the tree is torn down.
#[test]
fn a_sentinel_killed_while_guardian_checks_it_still_ends_in_a_teardown() {
    need_hooks!();
    let ctx = Ctx::new("sentinel-window");
    let pause = ctx.path("pause");
    std::fs::write(&pause, b"").expect("create the pause file");
    let mut g = ctx
        .guardian()
        .arg("--grace")
        .arg(format!("{GRACE_MS}ms"))
        .env("GUARDIAN_TEST_SENTINEL_PAUSE_FILE", &pause)
        .command(ctx.sh(&tree(&ctx)))
        .spawn();
    let reached = ctx.path("pause.reached");
    wait_for("guardian proper to reach the window", || reached.exists().then_some(()));
    g.signal(libc::SIGKILL);
    // The sentinel is dead (a zombie, our unreaped child) before guardian proper goes on.
    let sentinel = g.pid();
    wait_for("the sentinel to die", || (stat(sentinel).map(|s| s.0) == Some(b'Z')).then_some(()));
    std::fs::remove_file(&pause).expect("release guardian proper");
    let st = g.wait();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(libc::SIGKILL), "{st}");
    let events = g.events();
    assert!(
        events.iter().any(|e| e["event"] == "stopping" && e["reason"] == "parent-died"),
        "the sentinel's death went unnoticed: {events:#?}"
    );
    ctx.assert_nothing_left();
}

/// Issue 29.10: the host itself is SIGKILLed (the sentinel's parent). The sentinel tells
/// guardian, which tears the tree down; the sentinel ends only after every descendant is gone,
/// with guardian's status (never 125 at once). A subreaper stands in for whoever reaps the
/// orphaned sentinel (an outer guardian, init) and records when and how it ended.
#[test]
fn a_killed_host_leaves_a_sentinel_that_ends_after_the_tree_with_guardians_status() {
    killed_host_case("sentinel-host-killed", false);
}

/// As above, with the host's caller having ignored every real-time signal (the sentinel's word
/// that the host died rides on the lowest): guardian still hears the word and tears down.
#[test]
fn a_killed_host_is_noticed_when_the_caller_ignored_the_real_time_signals() {
    killed_host_case("sentinel-host-killed-rt-ignored", true);
}

/// The host (`sh -c`, as nobody when root) starts guardian in the background and is SIGKILLed
/// once the provider runs; a subreaper reaps the orphaned sentinel and counts what is left.
/// `ignore_rt`: the subreaper sets every real-time signal to SIG_IGN first (inherited by the
/// host and guardian).
fn killed_host_case(tag: &str, ignore_rt: bool) {
    let ctx = Ctx::new(tag);
    need_host_tools!();
    need_program!("python3", "python3");
    let g = guardian_argv(&ctx);
    let quoted: Vec<String> = g.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect();
    let script =
        format!("{} & echo $! > sentinel-pid; while [ ! -e ready ]; do sleep 0.05; done; kill -9 $$", quoted.join(" "));
    // The reaper: a subreaper that runs the host, then waits for the orphaned sentinel and
    // counts the live tagged processes (not itself) the moment it has reaped it.
    let ignore = if ignore_rt {
        "import signal\nfor s in range(signal.SIGRTMIN, signal.SIGRTMAX + 1): signal.signal(s, signal.SIG_IGN)\n"
    } else {
        ""
    };
    let reaper = format!("{ignore}{REAPER}");
    const REAPER: &str = "import ctypes, os, subprocess, sys\n\
         ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)\n\
         host = subprocess.Popen(sys.argv[1:])\n\
         host.wait()\n\
         sentinel = int(open('sentinel-pid').read())\n\
         nonce = os.environ['NONCE']\n\
         while True:\n\
         \x20   pid, st = os.waitpid(-1, 0)\n\
         \x20   if pid == sentinel: break\n\
         left = []\n\
         for p in os.listdir('/proc'):\n\
         \x20   if not p.isdigit() or int(p) == os.getpid(): continue\n\
         \x20   try:\n\
         \x20       if nonce.encode() in open('/proc/%s/cmdline' % p, 'rb').read(): left.append(p)\n\
         \x20   except OSError: pass\n\
         print(os.waitstatus_to_exitcode(st), len(left))\n";
    let mut argv = vec!["/usr/bin/python3".to_string(), "-c".into(), reaper];
    argv.extend(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "sh", "-c"].map(String::from));
    if !is_root() {
        argv.truncate(3);
        argv.extend(["sh", "-c"].map(String::from));
    }
    argv.push(script);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env("NONCE", &ctx.nonce).current_dir(&ctx.dir).stdin(Stdio::null());
    let (status, out) = run_host(&ctx, cmd);
    assert!(status.success(), "{status}: {out}");
    let mut words = out.split_whitespace();
    let code: i32 = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("reaper said {out:?}"));
    let left: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("reaper said {out:?}"));
    assert_eq!(left, 0, "the sentinel ended while {left} tagged processes still ran");
    let events = parse_events(&std::fs::read_to_string(ctx.path("events")).unwrap_or_default());
    assert!(
        events.iter().any(|e| e["event"] == "stopping" && e["reason"] == "parent-died"),
        "no parent-died stop: {events:#?}"
    );
    let released = events.last().filter(|e| e["event"] == "released").unwrap_or_else(|| panic!("{events:#?}"));
    let code = if code < 0 { 128 - code } else { code };
    assert_ne!(code, 125, "the sentinel reported guardian's own failure");
    assert_eq!(i64::from(code), released["status"].as_i64().unwrap_or(-1), "the sentinel ends as guardian ended");
    ctx.assert_nothing_left();
}

/// Issue 29.3: `unshare -pf sh -c 'guardian -- … & kill -9 $!'`: guardian's process group is
/// outside its PID namespace, but the shell that starts and kills it is inside, so the
/// sentinel is used and the SIGKILL tears the tree down. The shell (PID 1 there) stays until
/// the test has seen the tree gone: its exit would end the namespace and prove nothing.
#[test]
fn kill_9_inside_a_pid_namespace_whose_group_is_outside_tears_the_tree_down() {
    need_pid_namespace!();
    let ctx = Ctx::new("sentinel-unshare-kill9");
    let g = guardian_argv(&ctx);
    let quoted: Vec<String> = g.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect();
    let script = format!(
        "{} & while [ ! -e ready ]; do sleep 0.05; done; kill -9 $!; wait $!; echo $? > status; \
         i=0; while [ ! -e done ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        quoted.join(" ")
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script]).current_dir(&ctx.dir).stdin(Stdio::null());
    let mut child = cmd.spawn().expect("start unshare");
    wait_for("the shell's status line", || ctx.read_line_file("status"));
    assert_eq!(ctx.read_line_file("status").as_deref(), Some("137"), "the shell saw its child killed");
    wait_for_within(
        "the tree to be gone while the namespace lives",
        Duration::from_millis(GRACE_MS) + MARGIN,
        &mut || ctx.sleeps().is_empty().then_some(()),
    );
    std::fs::write(ctx.path("done"), b"").expect("let the shell go");
    let st = wait_for("unshare to exit", || child.try_wait().expect("try_wait"));
    assert!(st.success(), "{st}");
    let events = parse_events(&std::fs::read_to_string(ctx.path("events")).unwrap_or_default());
    assert!(
        events.iter().any(|e| e["event"] == "stopping" && e["reason"] == "parent-died"),
        "no parent-died stop: {events:#?}"
    );
    ctx.assert_nothing_left();
}

/// A seccomp filter that refuses `clone` with `CLONE_VM` (EPERM) and allows everything else
/// (a plain fork, clone3): as some container profiles, valgrind and emulators do.
pub fn refuse_clone_vm() -> Vec<libc::sock_filter> {
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xC000_00B7;
    let f = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter { code: code as u16, jt, jf, k };
    const LD_W_ABS: u32 = 0x20;
    const JEQ_K: u32 = 0x15;
    const JSET_K: u32 = 0x45;
    const RET_K: u32 = 0x06;
    vec![
        f(LD_W_ABS, 0, 0, 4), // arch
        f(JEQ_K, 1, 0, AUDIT_ARCH),
        f(RET_K, 0, 0, 0x8000_0000), // kill the process
        f(LD_W_ABS, 0, 0, 0),        // nr
        f(JEQ_K, 0, 3, libc::SYS_clone as u32),
        f(LD_W_ABS, 0, 0, 16), // args[0], low word: the flags
        f(JSET_K, 0, 1, libc::CLONE_VM as u32),
        f(RET_K, 0, 0, 0x0005_0000 | libc::EPERM as u32),
        f(RET_K, 0, 0, 0x7fff_0000), // allow
    ]
}

/// Runs guardian (`-v`, events to the file `events`) over the tree with `setup` applied in the
/// child before exec, SIGKILLs the process it started once the tree is ready, and returns
/// guardian's stderr; the tree must then be torn down (a forked sentinel keeps the promise).
fn kill_9_with(ctx: &Ctx, setup: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static) -> String {
    use std::os::unix::process::CommandExt;
    let err = ctx.path("stderr");
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("exec \"$0\" -v --grace {GRACE_MS}ms --events-fd 3 -- sh -c \"$1\" \"$2\" 3>\"$3\""),
        &guardian_bin().display().to_string(),
        &tree(ctx),
        &ctx.tag(),
        &ctx.path("events").display().to_string(),
    ])
    .current_dir(&ctx.dir)
    .stdin(Stdio::null())
    .stderr(std::fs::File::create(&err).expect("stderr file"));
    // SAFETY: `setup` makes only async-signal-safe calls (prctl, setrlimit) on memory prepared
    // before the fork.
    unsafe { cmd.pre_exec(setup) };
    let mut child = cmd.spawn().expect("start guardian");
    wait_ready(ctx);
    // SAFETY: our unreaped child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let st = wait_for("the killed process", || child.try_wait().expect("try_wait"));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(libc::SIGKILL), "{st}");
    assert_torn_down(ctx);
    std::fs::read_to_string(&err).unwrap_or_default()
}

/// The `fallback` event about the sentinel (there must be one).
fn sentinel_fallback(ctx: &Ctx) -> serde_json::Value {
    let events = parse_events(&std::fs::read_to_string(ctx.path("events")).unwrap_or_default());
    events
        .into_iter()
        .find(|e| e["event"] == "fallback" && e["what"] == "sentinel")
        .unwrap_or_else(|| panic!("no sentinel fallback event in {}", ctx.path("events").display()))
}

/// Issue 29.5: `clone(CLONE_VM)` refused by seccomp is a fallback, not exit 125: the sentinel
/// is a fork, a `fallback` event and a `-v` line say so, and a SIGKILL of the process the host
/// started still tears the tree down.
#[test]
fn a_refused_clone_vm_falls_back_to_a_forked_sentinel() {
    let ctx = Ctx::new("sentinel-clone-refused");
    let program = refuse_clone_vm();
    let stderr = kill_9_with(&ctx, move || install_seccomp(&program));
    let fb = sentinel_fallback(&ctx);
    assert_eq!(fb["errno"], "EPERM", "{fb}");
    assert!(fb["detail"].as_str().unwrap_or_default().contains("clone(CLONE_VM) was refused"), "{fb}");
    assert!(stderr.contains("sentinel fallback (EPERM)"), "no -v line: {stderr}");
}

/// Issue 29.6: under an `RLIMIT_AS` that leaves no room for guardian's 8 MiB stack, the error
/// names the stack's mmap and the limit (not "clone failed: ENOMEM"), and guardian falls back
/// to a forked sentinel as for a refused clone.
#[test]
fn an_address_space_limit_too_small_for_the_stack_is_named_and_falls_back() {
    let ctx = Ctx::new("sentinel-rlimit-as");
    // What guardian itself maps (read from a guardian without a sentinel), plus 4 MiB: room
    // for guardian and the provider, none for another 8 MiB stack.
    let mut probe = ctx.guardian().arg("--no-sentinel").script(&ctx.sleep()).spawn();
    let peak = wait_for("guardian's VmPeak", || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", probe.pid())).ok()?;
        status.lines().find_map(|l| l.strip_prefix("VmPeak:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    });
    probe.signal(libc::SIGTERM);
    probe.wait();
    let limit = (peak + 4096) * 1024;
    let stderr = kill_9_with(&ctx, move || {
        let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
        // SAFETY: setrlimit reads `rl`, which lives for the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    });
    let fb = sentinel_fallback(&ctx);
    let detail = fb["detail"].as_str().unwrap_or_default();
    assert_eq!(fb["errno"], "ENOMEM", "{fb}");
    assert!(detail.contains("stack") && detail.contains("RLIMIT_AS"), "{fb}");
    assert!(stderr.contains("RLIMIT_AS"), "no -v line: {stderr}");
}

/// Issue 29.9: the teardown a SIGKILL of the sentinel starts is guardian's ordinary one, so a
/// descendant that left the leaf (here moved to a sibling cgroup of the delegation, which
/// uid 65534 may do without a cgroup namespace; on pure cgroup v2 a root provider's `setns`,
/// tests/vm) is still found as guardian's descendant and ended.
#[test]
fn a_killed_sentinel_ends_a_descendant_that_left_the_leaf() {
    need_root!("delegate a cgroup to uid 65534");
    let Some(mount) = cgroup2_mount() else {
        skip!("no cgroup2 mount");
    };
    let ctx = Ctx::new("sentinel-escapee");
    let cg = TestCgroup::new(&mount, true);
    let start = cg.path.join("g");
    std::fs::create_dir(&start).expect("mkdir g");
    std::os::unix::fs::chown(start.join("cgroup.procs"), Some(65534), Some(65534)).expect("chown g");
    let out = cg.path.join("out");
    let s = ctx.sleep();
    let script = format!(
        "mkdir -p {o}; sh -c 'echo $$ > {o}/cgroup.procs && exec {s}' & {s} & touch ready; wait",
        o = out.display()
    );
    let mut g = ctx
        .guardian()
        .privileged()
        .args(["--grace", &format!("{GRACE_MS}ms"), "--cgroup", &cg.path.display().to_string()])
        .wrapper(in_cgroup_as_nobody(&start))
        .command(ctx.sh(&script))
        .spawn();
    wait_for("the provider's ready file", || ctx.path("ready").exists().then_some(()));
    let escapee = wait_for("a sleep outside the leaf", || {
        ctx.wait_sleeps(2).into_iter().map(|p| p.pid).find(|&p| cgroup_of(p).is_some_and(|c| c.ends_with("/out")))
    });
    g.signal(libc::SIGKILL);
    g.wait();
    wait_for_within("every tagged process to be gone", Duration::from_millis(GRACE_MS) + MARGIN, &mut || {
        tagged_pids(&ctx.nonce).is_empty().then_some(())
    });
    assert!(!alive(escapee), "the escapee {escapee} lives on");
}

/// Issue 29.3's other side: where the process group alone is outside the PID namespace the
/// sentinel is on, and guardian proper leaves that group for one of its own; an interactive
/// shell under it (a `sh` that is PID 1 of the namespace starts guardian, at a terminal, with
/// no new session) must still get a group of its own holding the terminal, as it did without a
/// sentinel (issue 22.6). guardian proper asks whether the job holds the terminal before it
/// leaves the job's group.
#[test]
fn an_interactive_shell_keeps_its_terminal_behind_a_sentinel_whose_group_is_outside() {
    need_pid_namespace!();
    need_program!("script", "bsdutils");
    need_program!("setpriv", "util-linux");
    if !std::path::Path::new("/bin/dash").exists() {
        panic!("dash is not installed: install dash");
    }
    // Every process of the session carries the nonce (the inner sh's $0), so the context's
    // drop ends them whatever happens.
    let ctx = Ctx::new("sentinel-tty-outside");
    let input = "echo SHELL''OUT pgid=$(ps -o pgid= -p $$) tpgid=$(ps -o tpgid= -p $$)\nexit 0\n";
    // `; :` keeps the namespace's sh from exec'ing guardian: guardian is its child, not PID 1.
    let shell = format!(
        r#"unshare --pid --fork --mount-proc /bin/sh -c "\"\$@\"; :" sh-{} GUARDIAN -- dash -i; echo status=$?"#,
        ctx.tag()
    );
    let text = crate::terminal::in_pty_typing(&shell, input).unwrap_or_else(|why| panic!("{why}"));
    assert!(!text.contains("Cannot set tty process group"), "{text}");
    assert!(text.contains("status=0"), "exit 0 is status 0: {text}");
    let (pgid, tpgid) = crate::terminal::groups(&text, "SHELLOUT");
    assert_eq!(pgid, tpgid, "the shell's group holds the terminal: {text}");
}
