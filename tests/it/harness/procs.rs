//! `/proc`: stat parsing, tagged-process finders, and the one killer, which signals through a
//! pidfd only after re-checking the tag (a recycled pid is never hit).

use std::fs;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Reads `/proc/PID/cmdline` (NULs kept); `None` when the process is gone or a zombie. A
/// process whose main thread exited while others live (`pthread_exit` in main: state Z, see
/// [`leader_exited`]) has an empty cmdline of its own; its argv is read through a live
/// thread's `/proc/PID/task/TID/cmdline`, so every finder and the killer still see it.
pub fn cmdline(pid: i32) -> Option<Vec<u8>> {
    let c = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if !c.is_empty() {
        return Some(c);
    }
    fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find_map(|t| fs::read(t.path().join("cmdline")).ok().filter(|c| !c.is_empty()))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn carries(pid: i32, nonce: &str) -> bool {
    cmdline(pid).is_some_and(|c| contains(&c, nonce.as_bytes()))
}

/// Every pid in `/proc` but the test's own for which `pred` holds, newest first.
pub fn pids_where(pred: impl Fn(i32) -> bool) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut pids: Vec<i32> = fs::read_dir("/proc")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    pids.retain(|&p| p != me && pred(p));
    pids.sort_unstable_by(|a, b| b.cmp(a));
    pids
}

/// Every live process whose argv contains `nonce` (zombies have no cmdline and don't count;
/// a process whose main thread exited does, see [`cmdline`]).
pub fn tagged_pids(nonce: &str) -> Vec<i32> {
    pids_where(|p| carries(p, nonce))
}

/// Live `sleep` processes whose argument starts with `1000.PREFIX`: exact argv elements, so the
/// shells and guardians whose scripts name the nonce do not count.
pub fn tagged_sleeps(prefix: &str) -> Vec<i32> {
    let want = format!("1000.{prefix}");
    pids_where(|p| {
        let Some(c) = cmdline(p) else { return false };
        let argv: Vec<&[u8]> = c.split(|&b| b == 0).collect();
        argv.first().is_some_and(|a| a.ends_with(b"sleep"))
            && argv.get(1).is_some_and(|a| a.starts_with(want.as_bytes()))
    })
}

/// The fields of `/proc/PID/stat` after the command's closing `)`: `[0]` is the state.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let buf = fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    Some(rest.split_ascii_whitespace().map(String::from).collect())
}

/// (state, ppid, starttime) from `/proc/PID/stat`.
pub fn stat(pid: i32) -> Option<(u8, i32, u64)> {
    let f = stat_fields(pid)?;
    Some((*f.first()?.as_bytes().first()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// The session id from `/proc/PID/stat`.
pub fn session_of(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(3)?.parse().ok()
}

/// The number of threads from `/proc/PID/stat`.
pub fn threads(pid: i32) -> Option<u32> {
    stat_fields(pid)?.get(17)?.parse().ok()
}

/// Whether `pid`'s main thread exited while other threads live (`pthread_exit` in main): the
/// kernel shows state Z, yet the process runs (a zombie leader is counted in its threads
/// until the whole group is gone, so a real zombie has one).
pub fn leader_exited(pid: i32) -> bool {
    matches!(stat(pid), Some((b'Z', _, _))) && threads(pid).is_some_and(|t| t > 1)
}

/// Whether `pid` is alive: it exists and is not a zombie, or only its main thread exited
/// ([`leader_exited`]).
pub fn alive(pid: i32) -> bool {
    matches!(stat(pid), Some((s, _, _)) if s != b'Z' && s != b'X') || leader_exited(pid)
}

/// One process as the hardening tests look at it.
#[derive(Clone, Debug)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    pub uid: u32,
    /// argv joined with spaces.
    pub cmdline: String,
}

pub fn proc_info(pid: i32) -> Option<ProcInfo> {
    let (state, ppid, _) = stat(pid)?;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()?;
    let raw = cmdline(pid).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ").trim_end().to_string();
    Some(ProcInfo { pid, ppid, state: char::from(state), uid, cmdline })
}

pub fn all_procs() -> Vec<ProcInfo> {
    pids_where(|_| true).into_iter().filter_map(proc_info).collect()
}

/// "PID: argv" for failure messages.
pub fn describe(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .map(|&p| format!("{p}: {}", String::from_utf8_lossy(&cmdline(p).unwrap_or_default()).replace('\0', " ")))
        .collect()
}

/// Sends `sig` to `pid` through a pidfd, only if its argv still holds `nonce` once the pidfd
/// is open (so a recycled pid is never hit). A process whose main thread exited is a
/// thread-group leader still: `pidfd_open` works on it, the tag is re-checked through its
/// live threads ([`cmdline`]), and the signal reaches the whole group.
pub fn signal_tagged(pid: i32, nonce: &str, sig: i32) -> bool {
    let Some(fd) = rustix::process::Pid::from_raw(pid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
    else {
        return false;
    };
    carries(pid, nonce)
        // SAFETY: fd is an open pidfd; null siginfo.
        && unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_fd(), sig, std::ptr::null::<u8>(), 0) } == 0
}

/// Kills every process tagged with `nonce` until none is left; returns the pids it hit. Each
/// one is stopped and killed as soon as it is found, newest pid first, so a hopping chain
/// cannot outrun the cleanup.
pub fn kill_tagged(nonce: &str) -> Vec<i32> {
    let mut hit = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    let mut quiet_rounds = 0;
    while Instant::now() < end && quiet_rounds < 3 {
        let mut found = false;
        for pid in pids_where(|_| true) {
            if !carries(pid, nonce) {
                continue;
            }
            found = true;
            signal_tagged(pid, nonce, libc::SIGSTOP);
            if signal_tagged(pid, nonce, libc::SIGKILL) && !hit.contains(&pid) {
                hit.push(pid);
            }
        }
        quiet_rounds = if found { 0 } else { quiet_rounds + 1 };
        std::thread::sleep(Duration::from_millis(5));
    }
    hit
}
