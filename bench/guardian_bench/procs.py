"""Processes: spawning, reaping, finding by nonce and killing through pidfds. `Procs.cleanup` is the one cleanup path: it pins every process carrying the run's nonce with a pidfd, re-checks the nonce, then signals (a reused PID is never hit)."""

import os
import select
import signal
import time

from .common import TAG, warn


def env_has(pid, key, nkey):
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        data = os.read(fd, 1 << 18)
    except OSError:
        return False
    finally:
        os.close(fd)
    return data.startswith(key) or nkey in data


def keys(prefix):
    key = f"{TAG}={prefix}".encode()
    return key, b"\0" + key


def tagged(prefix):
    """Live processes whose environment carries BENCH_NONCE=<prefix>...
    (zombies have no environment: they count as gone)."""
    key, nkey = keys(prefix)
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and env_has(name, key, nkey):
            out.append(int(name))
    return out


def exact(nonce):
    """prefix that matches one nonce only (the environment entry ends in NUL)"""
    return nonce + "\0"


def pin(pids, prefix):
    """pidfds for those pids that still carry the nonce once pinned"""
    key, nkey = keys(prefix)
    out = {}
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        if env_has(pid, key, nkey):
            out[pid] = fd
        else:
            os.close(fd)
    return out


def signal_tagged(prefix, sig=signal.SIGKILL):
    """Signal every live process carrying the nonce; race-free: the pidfd is
    opened first and the nonce checked after, so a reused PID is never hit."""
    n = 0
    pids = tagged(prefix)
    for i in range(0, len(pids), 1000):
        for pid, fd in pin(pids[i:i + 1000], prefix).items():
            try:
                signal.pidfd_send_signal(fd, sig)
                n += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return n


def kill_floor(procs, prefix):
    """Reference figure: the harness pins every survivor with a pidfd, then
    times SIGKILL to all of them plus reaping them all (they are orphans that
    came to the harness, a subreaper).  None when there is nothing to kill."""
    pids = tagged(prefix)
    fds = {}
    try:
        fds = pin(pids, prefix)
    except OSError:  # out of fds: no floor this time
        pass
    try:
        if not fds or len(fds) < len(pids):
            return None
        t0 = time.monotonic()
        for fd in fds.values():
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
        me = os.getpid()
        while True:
            procs.reap()
            if not [c for c in children_of(me) if c not in procs.live]:
                break
            if time.monotonic() > t0 + 60:
                return None
            time.sleep(0.0005)
        return (time.monotonic() - t0) * 1000
    finally:
        for fd in fds.values():
            os.close(fd)


def ctxt_switches(pid):
    """voluntary + involuntary context switches summed over all threads"""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total, len(tids)


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def wait_fds(fds, timeout):
    """poll until every fd is readable; returns {fd: monotonic time it became
    readable} for those that did before the timeout"""
    seen = {}
    p = select.poll()
    for fd in fds:
        p.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while len(seen) < len(fds):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd, _ in p.poll(max(1, int(left * 1000))):
            if fd not in seen:
                seen[fd] = time.monotonic()
                p.unregister(fd)
    return seen


class Procs:
    """Spawns tagged children and reaps everything (we are a subreaper, so
    orphans of the trees we build come to us)."""

    def __init__(self, run):
        self.run = run
        self.seq = 0
        self.live = {}  # pid -> pidfd, spawned by us and not reaped yet
        self.status = {}  # pid -> wait status, reaped but not collected
        self.base_env = {k: v for k, v in os.environ.items()
                         if not k.startswith("GUARDIAN") and k != TAG}

    def nonce(self, what):
        self.seq += 1
        return f"{self.run}-{self.seq:05d}-{what}"

    def spawn(self, argv, nonce, fds=(), stdout=None, stderr=None, setsid=False):
        env = {TAG: nonce}
        env.update(self.base_env)
        fa = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
        for target, dest in ((1, stdout), (2, stderr)):
            if dest is None:
                fa.append((os.POSIX_SPAWN_OPEN, target, "/dev/null", os.O_WRONLY, 0))
            elif isinstance(dest, int):
                fa.append((os.POSIX_SPAWN_DUP2, dest, target))
            else:
                fa.append((os.POSIX_SPAWN_OPEN, target, dest,
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
        for src, target in fds:
            fa.append((os.POSIX_SPAWN_DUP2, src, target))
        pid = os.posix_spawn(argv[0], argv, env, file_actions=fa, setsid=setsid)
        self.status.pop(pid, None)
        self.live[pid] = os.pidfd_open(pid)
        return pid

    def pidfd(self, pid):
        return self.live[pid]

    def reap(self):
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = self.live.pop(pid, None)
            if fd is not None:
                os.close(fd)
                self.status[pid] = st

    def wait(self, pid, timeout=None):
        """exit code (as waitstatus_to_exitcode) of a spawned child, or None on timeout"""
        if pid not in self.status:
            fd = self.live.get(pid)
            if fd is None:
                return None
            if not wait_fds([fd], 1e9 if timeout is None else timeout):
                return None
            try:
                _, st = os.waitpid(pid, 0)
                os.close(self.live.pop(pid))
                self.status[pid] = st
            except ChildProcessError:
                self.reap()
        st = self.status.pop(pid, None)
        return None if st is None else os.waitstatus_to_exitcode(st)

    def settle(self, timeout=10.0):
        """reap until no child of ours is left but the ones we track"""
        deadline = time.monotonic() + timeout
        while True:
            self.reap()
            extra = [c for c in children_of(os.getpid()) if c not in self.live]
            if not extra:
                return True
            if time.monotonic() > deadline:
                warn(f"{len(extra)} untracked children still around: {extra[:10]}")
                return False
            time.sleep(0.002)

    def cleanup(self, prefix, pids=(), timeout=30.0):
        """SIGKILL everything carrying the nonce, reap it, collect the given
        tracked pids.  Returns how many processes had to be killed."""
        deadline = time.monotonic() + timeout
        killed = 0
        while True:
            n = signal_tagged(prefix)
            killed += n
            self.reap()
            if n == 0:
                break
            if time.monotonic() > deadline:
                warn(f"cleanup of {prefix!r}: processes keep appearing")
                break
            time.sleep(0.005)
        for pid in pids:
            if pid in self.live or pid in self.status:
                self.wait(pid, timeout=5)
        self.settle()
        return killed


def count_survivors(prefix, settle):
    """Tagged processes still alive.  With settle, wait until the count has
    stopped falling (dumb-init, for one, SIGTERMs its group as it exits)."""
    n = len(tagged(prefix))
    if not settle:
        return n
    deadline = time.monotonic() + 2.0
    while n and time.monotonic() < deadline:
        time.sleep(0.1)
        m = len(tagged(prefix))
        if m == n:
            break
        n = m
    return n


def wrapper_family(pid):
    """the wrapper's own processes: `pid` and its descendants running the same executable
    (guardian's sentinel and guardian itself, issue 24); the provider is not one of them"""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return [pid]
    family, todo = [pid], [pid]
    while todo:
        for c in children_of(todo.pop()):
            try:
                if os.readlink(f"/proc/{c}/exe") == exe:
                    family.append(c)
                    todo.append(c)
            except OSError:
                pass
    return family


def distinct_mm(pids):
    """One pid per address space: processes started with clone(CLONE_VM) (guardian behind
    its sentinel) share one mm, whose pages the kernel counts as mapped once, so each mm is
    read once. kcmp(KCMP_VM) tells; where it is refused every pid counts as its own."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)
    out = []
    for pid in pids:
        if nr is None or not any(libc.syscall(nr, pid, o, 1, 0, 0) == 0 for o in out):
            out.append(pid)
    return out


def family_private_kb(pids):
    """kB of the pages mapped by these processes and by nobody else (the family's USS: a
    page copy-on-write shared by a sentinel and its guardian counts once, which the sum of
    their USS misses, and an address space two of them share, clone(CLONE_VM), is read once):
    /proc/PID/pagemap for the frames, /proc/kpagecount for their map counts. None when the
    frames cannot be read (not root)."""
    seen = {}
    try:
        kpc = open("/proc/kpagecount", "rb")
    except OSError:
        return None
    with kpc:
        for pid in distinct_mm(pids):
            try:
                maps = open(f"/proc/{pid}/maps").read().splitlines()
                pm = open(f"/proc/{pid}/pagemap", "rb")
            except OSError:
                continue
            with pm:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "[vsyscall]" in line:
                        continue
                    pm.seek(lo // 4096 * 8)
                    data = pm.read((hi - lo) // 4096 * 8)
                    for i in range(0, len(data), 8):
                        e = int.from_bytes(data[i:i + 8], "little")
                        if e >> 63 & 1:
                            pfn = e & ((1 << 55) - 1)
                            if pfn == 0:
                                return None
                            seen[pfn] = seen.get(pfn, 0) + 1
        private = 0
        for pfn, n in seen.items():
            kpc.seek(pfn * 8)
            if int.from_bytes(kpc.read(8), "little") == n:
                private += 1
    return private * 4
