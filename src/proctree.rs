//! proctree: guardian's view of its process tree through `/proc`. Parses `/proc/PID/stat`
//! (after the last `)`: comm may hold spaces and parentheses), lists every process, computes
//! the descendants of guardian in breadth-first order (parents before children), and checks
//! that a pidfd still names the process a scan saw (`PIDFD_GET_INFO`, else
//! `/proc/self/fdinfo`). Where the kernel has `/proc/PID/task/TID/children`
//! (CONFIG_PROC_CHILDREN), [`Proc::walk`] reaches the descendants top-down, at a cost that
//! follows the tree, not the number of processes on the machine; elsewhere a round lists all
//! of `/proc`.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{Dir, Mode, OFlags};

/// The fields of `/proc/PID/stat` guardian uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub state: u8,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Number of threads (field 20): which `task/*/children` files hold its children.
    pub threads: u32,
    /// Start time in clock ticks since boot (field 22): with the pid, a process identity.
    pub starttime: u64,
}

impl Stat {
    /// Whether the process has exited and only waits to be reaped. `stat` describes the main
    /// thread: a process whose main thread exited (`pthread_exit` in `main`, or `SYS_exit` on
    /// the main thread) shows `Z` while its other threads run. Such a process lives: it keeps
    /// its pid, `pidfd_open` works on it, a process-directed signal reaches its live threads,
    /// and it is not reaped before the last one exits. `num_threads` still counts the exited
    /// leader, so a process is dead only when it shows `Z` as its one thread (or `X`).
    pub fn is_dead(&self) -> bool {
        self.state == b'X' || (self.state == b'Z' && self.threads <= 1)
    }
}

/// Parses the text of `/proc/PID/stat`.
pub fn parse_stat(buf: &[u8]) -> Option<Stat> {
    let open = buf.iter().position(|&b| b == b'(')?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(&buf[..open]).ok()?.trim().parse().ok()?;
    let rest = std::str::from_utf8(buf.get(close + 1..)?).ok()?;
    // Fields after comm start at field 3 (state).
    let mut it = rest.split_ascii_whitespace();
    let state = *it.next()?.as_bytes().first()?;
    let ppid = it.next()?.parse().ok()?;
    let pgrp = it.next()?.parse().ok()?;
    let session = it.next()?.parse().ok()?;
    // Skip fields 7..=19 (13 fields) to reach num_threads, field 20, then starttime, field 22.
    let threads = it.nth(13)?.parse().ok()?;
    let starttime = it.nth(1)?.parse().ok()?;
    Some(Stat { pid, state, ppid, pgrp, session, threads, starttime })
}

/// How much of a `/proc` file one `read` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extent {
    /// The kernel formats the whole file at once (`stat`, `cgroup`, fdinfo: one `show` into
    /// a buffer that grows until it fits) and a read returns as much of it as asked for, so
    /// a short read is the end: that saves a second read per process on every scan.
    OnePiece,
    /// The kernel formats the file record by record (`children`: one record per child) and
    /// a read returns at most one page of them, so only a read of 0 bytes is the end.
    Records,
}

/// An open `/proc` directory, reused for every scan.
pub struct Proc {
    dir: OwnedFd,
    buf: Vec<u8>,
    /// `PIDFD_GET_INFO` answers (Linux 6.13); else a pidfd's pid is read from its fdinfo.
    pidfd_info: bool,
}

/// Opens `/proc` and judges whether it is guardian's PID namespace's: `Ok(Some)` when it is,
/// `Ok(None)` when it is missing (ENOENT, ENOTDIR) or another namespace's; any other error
/// (the fd limit, memory) is `Err` with its cause explained, never taken for a missing /proc.
pub fn open_own() -> Result<Option<Proc>, String> {
    let mut proc = match Proc::open() {
        Ok(p) => p,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => return Ok(None),
        Err(e) => return Err(format!("opening /proc failed: {}", crate::errno::explain(&e))),
    };
    match proc.own_namespace() {
        Ok(true) => Ok(Some(proc)),
        Ok(false) => Ok(None),
        Err(e) => Err(format!("reading /proc/self/stat failed: {}", crate::errno::explain(&e))),
    }
}

impl Proc {
    pub fn open() -> io::Result<Proc> {
        let dir = rustix::fs::open("/proc", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Proc { dir, buf: Vec::with_capacity(512), pidfd_info: true })
    }

    /// Whether this `/proc` belongs to guardian's PID namespace (its `self` is our pid). Only
    /// a `self` that is missing (ENOENT: guardian is not in that namespace) or names another
    /// pid says no; any other error (EMFILE, ENOMEM, ...) is returned, never taken for a no.
    pub fn own_namespace(&mut self) -> io::Result<bool> {
        match self.read_file("self/stat", Extent::OnePiece) {
            Ok(n) => Ok(parse_stat(&self.buf[..n]).map(|s| s.pid) == Some(std::process::id() as i32)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads `/proc/PID/stat`, keeping the error.
    pub fn try_stat(&mut self, pid: i32) -> io::Result<Stat> {
        let n = self.read_file(&format!("{pid}/stat"), Extent::OnePiece)?;
        parse_stat(&self.buf[..n]).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable stat"))
    }

    /// Reads `/proc/PID/stat`; `None` when the process is gone or hidden.
    pub fn stat(&mut self, pid: i32) -> Option<Stat> {
        self.read_stat_path(&format!("{pid}/stat"))
    }

    /// The text of `/proc/PID/cgroup`; `None` when the process is gone.
    pub fn cgroup(&mut self, pid: i32) -> Option<String> {
        let n = self.read_file(&format!("{pid}/cgroup"), Extent::OnePiece).ok()?;
        Some(String::from_utf8_lossy(&self.buf[..n]).into_owned())
    }

    fn read_stat_path(&mut self, path: &str) -> Option<Stat> {
        let n = self.read_file(path, Extent::OnePiece).ok()?;
        parse_stat(&self.buf[..n])
    }

    /// Reads a `/proc` file into `buf`; returns its length.
    fn read_file(&mut self, path: &str, extent: Extent) -> io::Result<usize> {
        let fd = rustix::fs::openat(&self.dir, path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        self.buf.resize(self.buf.capacity().max(1024), 0);
        let mut len = 0;
        loop {
            let n = rustix::io::read(&fd, &mut self.buf[len..])?;
            len += n;
            if n == 0 || (extent == Extent::OnePiece && len < self.buf.len()) {
                return Ok(len);
            }
            if len == self.buf.len() {
                self.buf.resize(len * 2, 0);
            }
        }
    }

    /// The `stat` of each of `pids` that still exists.
    pub fn stats(&mut self, pids: &[i32]) -> Vec<Stat> {
        pids.iter().filter_map(|&pid| self.stat(pid)).collect()
    }

    /// The pids in `/proc`: a directory listing only, cheap next to reading every `stat`.
    pub fn list(&mut self) -> io::Result<Vec<i32>> {
        let dirfd =
            rustix::fs::openat(&self.dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let mut pids = Vec::with_capacity(256);
        let mut dir = Dir::read_from(&dirfd)?;
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name.first().is_some_and(u8::is_ascii_digit) {
                if let Some(pid) = std::str::from_utf8(name).ok().and_then(|s| s.parse::<i32>().ok()) {
                    pids.push(pid);
                }
            }
        }
        Ok(pids)
    }

    /// Whether this kernel has `/proc/PID/task/TID/children` files.
    pub fn has_children_files(&mut self) -> bool {
        let me = std::process::id();
        self.read_file(&format!("{me}/task/{me}/children"), Extent::Records).is_ok()
    }

    /// The children of process `pid`, from the `children` file of each of its threads (of the
    /// main thread alone when it has one). `threads`: how many it has, when its `stat` was read;
    /// otherwise (`None`, or 0) the link count of its `task` directory tells, in one `statx`.
    /// `None` when it is gone or unreadable.
    pub fn children(&mut self, pid: i32, threads: Option<u32>, out: &mut Vec<i32>) -> Option<()> {
        let threads = match threads {
            None | Some(0) => self.threads(pid)?,
            Some(n) => n,
        };
        let many = threads > 1;
        let tids = if many { self.tasks(pid)? } else { vec![pid] };
        for tid in tids {
            // A thread that exited since the task list was read has no file any more: its
            // siblings' children still count (only the one thread of a process that is gone
            // makes the whole process unreadable).
            let Ok(n) = self.read_file(&format!("{pid}/task/{tid}/children"), Extent::Records) else {
                if many {
                    continue;
                }
                return None;
            };
            let text = std::str::from_utf8(&self.buf[..n]).ok()?;
            out.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
        Some(())
    }

    /// How many threads a process has: `/proc/PID/task` links its `.`, its `..` and one
    /// directory per thread (a main thread that exited while others run still counts).
    fn threads(&mut self, pid: i32) -> Option<u32> {
        let st = rustix::fs::statat(&self.dir, format!("{pid}/task"), rustix::fs::AtFlags::empty()).ok()?;
        Some((st.st_nlink as u32).saturating_sub(2))
    }

    fn tasks(&mut self, pid: i32) -> Option<Vec<i32>> {
        let fd = rustix::fs::openat(
            &self.dir,
            format!("{pid}/task"),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut dir = Dir::read_from(&fd).ok()?;
        let mut tids = Vec::new();
        while let Some(Ok(entry)) = dir.read() {
            if let Some(tid) = std::str::from_utf8(entry.file_name().to_bytes()).ok().and_then(|s| s.parse().ok()) {
                tids.push(tid);
            }
        }
        Some(tids)
    }

    /// The descendants of `root`, breadth-first, read top-down through the `children` files.
    /// A child whose `stat` no longer names that parent (it died, or was reparented while the
    /// walk ran) is left to the next round; `waitpid`'s ECHILD, not the walk, says when the
    /// tree is empty.
    pub fn walk(&mut self, root: i32) -> Vec<Stat> {
        let mut out = Vec::new();
        let Some(top) = self.stat(root) else { return out };
        let mut queue = std::collections::VecDeque::from([top]);
        let mut kids = Vec::new();
        while let Some(parent) = queue.pop_front() {
            kids.clear();
            if self.children(parent.pid, Some(parent.threads), &mut kids).is_none() {
                continue;
            }
            for &pid in &kids {
                if let Some(st) = self.stat(pid).filter(|st| st.ppid == parent.pid) {
                    out.push(st);
                    // An exited process has no children left: they were reparented (to
                    // guardian, the subreaper) before it became a zombie.
                    if !st.is_dead() {
                        queue.push_back(st);
                    }
                }
            }
        }
        out
    }

    /// The pid a pidfd refers to now: `None` when the process has been reaped. Asked with
    /// `PIDFD_GET_INFO` (one ioctl), or where the kernel lacks it (before 6.13) read from
    /// `Pid:` in the pidfd's fdinfo (open, read, close).
    pub fn pidfd_pid(&mut self, pidfd: &impl AsFd) -> Option<i32> {
        if self.pidfd_info {
            match crate::sys::pidfd_get_pid(pidfd.as_fd()) {
                Ok(pid) => return (pid > 0).then_some(pid),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return None,
                Err(e) => {
                    crate::log::debug!("PIDFD_GET_INFO refused ({e}); a pidfd's pid is read from its fdinfo instead");
                    self.pidfd_info = false;
                }
            }
        }
        self.pidfd_pid_fdinfo(pidfd)
    }

    /// The pid a pidfd refers to, from `Pid:` in its fdinfo (-1 once reaped).
    fn pidfd_pid_fdinfo(&mut self, pidfd: &impl AsFd) -> Option<i32> {
        let n = self.read_file(&format!("self/fdinfo/{}", pidfd.as_fd().as_raw_fd()), Extent::OnePiece).ok()?;
        let text = std::str::from_utf8(&self.buf[..n]).ok()?;
        let line = text.lines().find_map(|l| l.strip_prefix("Pid:"))?;
        let pid: i32 = line.trim().parse().ok()?;
        (pid > 0).then_some(pid)
    }
}

/// The descendants of `root` in `all`, breadth-first (every parent before its children).
pub fn descendants(all: &[Stat], root: i32) -> Vec<Stat> {
    let mut children: HashMap<i32, Vec<usize>> = HashMap::with_capacity(all.len());
    for (i, s) in all.iter().enumerate() {
        if s.pid != root {
            children.entry(s.ppid).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        if let Some(kids) = children.get(&parent) {
            for &i in kids {
                out.push(all[i]);
                queue.push(all[i].pid);
            }
        }
    }
    // `queue` is a stack, so restore parent-before-child order by depth.
    let mut depth: HashMap<i32, u32> = HashMap::with_capacity(out.len() + 1);
    depth.insert(root, 0);
    for s in &out {
        let d = depth.get(&s.ppid).copied().unwrap_or(0) + 1;
        depth.insert(s.pid, d);
    }
    out.sort_by_key(|s| depth.get(&s.pid).copied().unwrap_or(0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLEEP: &[u8] = b"4242 (sleep) S 4241 4242 4200 34816 4242 4194304 92 0 0 0 0 0 0 0 20 0 1 0 987654 8273920 191 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn parses_plain_stat() {
        let s = parse_stat(SLEEP).unwrap();
        assert_eq!(
            s,
            Stat { pid: 4242, state: b'S', ppid: 4241, pgrp: 4242, session: 4200, threads: 1, starttime: 987654 }
        );
    }

    #[test]
    fn parses_hostile_comm() {
        let buf = b"77 (a) b) (c ) Z 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0\n";
        let s = parse_stat(buf).unwrap();
        assert_eq!((s.pid, s.state, s.ppid, s.pgrp, s.session, s.starttime), (77, b'Z', 1, 2, 3, 55));
    }

    #[test]
    fn a_zombie_main_thread_with_live_threads_is_alive() {
        let st = |state, threads| Stat { pid: 9, state, ppid: 1, pgrp: 9, session: 9, threads, starttime: 1 };
        assert!(st(b'Z', 1).is_dead(), "a zombie: only its exited main thread is left");
        assert!(st(b'X', 1).is_dead());
        assert!(!st(b'Z', 2).is_dead(), "main thread exited, another thread runs");
        assert!(!st(b'S', 1).is_dead() && !st(b'T', 3).is_dead());
    }

    #[test]
    fn rejects_truncated_or_garbage() {
        assert_eq!(parse_stat(b""), None);
        assert_eq!(parse_stat(b"12 (x"), None);
        assert_eq!(parse_stat(b"12 (x) S 1 2 3"), None);
        assert_eq!(parse_stat(b"x (y) S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5"), None);
        assert_eq!(parse_stat(b") 12 ( S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5"), None);
    }

    #[test]
    fn descendants_are_breadth_first_and_exclude_strangers() {
        let p = |pid, ppid| Stat { pid, state: b'S', ppid, pgrp: pid, session: pid, threads: 1, starttime: 1 };
        let all = [p(1, 0), p(10, 1), p(20, 10), p(30, 20), p(21, 10), p(40, 30), p(99, 1), p(31, 21)];
        let d: Vec<i32> = descendants(&all, 10).iter().map(|s| s.pid).collect();
        assert_eq!(d.len(), 5);
        let pos = |x| d.iter().position(|&v| v == x).unwrap();
        assert!(pos(20) < pos(30) && pos(30) < pos(40) && pos(21) < pos(31));
        assert!(!d.contains(&99) && !d.contains(&1) && !d.contains(&10));
    }

    #[test]
    fn walk_finds_children_and_grandchildren() {
        let mut proc = Proc::open().unwrap();
        if !proc.has_children_files() {
            eprintln!("skipped: this kernel has no /proc/PID/task/TID/children");
            return;
        }
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30.271828 & echo $!; wait", "proctree-walk-test"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let me = std::process::id() as i32;
        let found = proc.walk(me);
        // The grandchild first, while its parent (not yet reaping it) pins its pid.
        let _ = kill_pid(grandchild);
        let _ = child.kill();
        let _ = child.wait();
        let pos = |pid| found.iter().position(|s| s.pid == pid);
        let (c, g) = (pos(child.id() as i32), pos(grandchild));
        assert!(c.is_some() && g.is_some(), "walk found {found:?}");
        assert!(c < g, "parents come before their children");
        assert_eq!(found[g.unwrap()].ppid, child.id() as i32);
    }

    /// Both ways of reading a pidfd's pid agree: the child's pid while it lives (or is a
    /// zombie), `None` once reaped. `pidfd_info` off is the path of kernels before 6.13.
    #[test]
    fn pidfd_pid_with_and_without_pidfd_get_info() {
        let mut proc = Proc::open().unwrap();
        let mut child = std::process::Command::new("sleep").arg("30.14159").spawn().unwrap();
        let pid = child.id() as i32;
        let fd = crate::sys::pidfd_open(pid).unwrap();
        let both = |proc: &mut Proc| {
            let with = proc.pidfd_pid(&fd);
            proc.pidfd_info = false;
            let without = proc.pidfd_pid(&fd);
            proc.pidfd_info = true;
            (with, without)
        };
        let live = both(&mut proc);
        let _ = child.kill();
        let dying = both(&mut proc);
        let _ = child.wait();
        let reaped = both(&mut proc);
        assert_eq!(live, (Some(pid), Some(pid)));
        assert_eq!(dying, (Some(pid), Some(pid)));
        assert_eq!(reaped, (None, None));
        if crate::sys::pidfd_get_pid(fd.as_fd()).is_err_and(|e| e.raw_os_error() != Some(libc::ESRCH)) {
            eprintln!("note: PIDFD_GET_INFO is refused here: both answers came from fdinfo");
        }
    }

    fn kill_pid(pid: i32) -> std::io::Result<()> {
        crate::sys::kill(pid, libc::SIGKILL)
    }

    #[test]
    fn reads_own_stat() {
        let mut proc = Proc::open().unwrap();
        assert!(proc.own_namespace().unwrap());
        let me = proc.stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(proc.list().unwrap().contains(&me.pid));
        assert_eq!(proc.stats(&[me.pid])[0].starttime, me.starttime);
    }
}
