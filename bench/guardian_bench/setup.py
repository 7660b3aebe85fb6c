"""What the run measures and where: the wrappers (guardian and the Debian anchors, installed when missing), the tree builder compiled from bench/tree.c, the cgroup2 mount for the cgroup columns, and the machine facts for the report."""

import datetime
import os
import platform
import shutil
import subprocess
import sys

from .common import ANCHOR_PACKAGES, BENCH, REPO, say, sh, warn
from .measure import event, run_wrapped


class Wrapper:
    def __init__(self, name, path, prefix, version, guardian=False):
        self.name, self.path, self.prefix = name, path, prefix
        self.version, self.guardian = version, guardian

    def argv(self, provider, opts=()):
        if self.guardian:
            return [self.path, *opts, "--", *provider]
        return [self.path, *self.prefix, *provider]


def dpkg_version(pkg, tag):
    try:
        return sh(["dpkg-query", "-W", "-f=${Version}", pkg], tag, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def apt_install(pkgs, logf, tag):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(logf, "a") as log:
        if sh(["apt-get", "install", "-y", *pkgs], tag, stdin=subprocess.DEVNULL,
                          stdout=log, stderr=log, env=env).returncode == 0:
            return
        for p in pkgs:  # one missing package must not stop the others
            sh(["apt-get", "install", "-y", p], tag, stdin=subprocess.DEVNULL,
                           stdout=log, stderr=log, env=env)


def ensure_packages(args, logf, tag):
    want = [p for p in ANCHOR_PACKAGES if not shutil.which(p)]
    if not shutil.which("hyperfine"):
        want.append("hyperfine")
    if not want:
        return
    if args.no_install or os.geteuid() != 0 or not shutil.which("apt-get"):
        say(f"not installing {' '.join(want)} (--no-install, not root, or no apt-get)")
        return
    say(f"installing {' '.join(want)} from Debian's packages (log: {logf})")
    with open(logf, "a") as log:
        sh(["apt-get", "update"], tag, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    apt_install(want, logf, tag)


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return left.split()[4]
    return None


def build_tree(ctx):
    out = os.path.join(ctx.tmp, "tree")
    src = os.path.join(BENCH, "tree.c")
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        sys.exit("bench: gcc is needed to build bench/tree.c (apt-get install gcc)")
    for extra in (["-static"], []):
        if sh([gcc, "-O2", "-Wall", *extra, "-o", out, src], ctx.setup_tag).returncode == 0:
            return out
    sys.exit("bench: could not compile bench/tree.c")


def find_guardian(ctx, args):
    path = os.environ.get("GUARDIAN") or os.path.join(REPO, "target", "release", "guardian")
    if not os.path.exists(path) and not os.environ.get("GUARDIAN") and not args.no_build \
            and shutil.which("cargo") and os.path.exists(os.path.join(REPO, "Cargo.toml")):
        say(f"building guardian: cargo build --release in {REPO}")
        sh(["cargo", "build", "--release", "-q"], ctx.setup_tag, cwd=REPO)
    if not os.path.exists(path):
        return None, f"no guardian binary at {path} (set GUARDIAN=/path/to/guardian)"
    path = os.path.realpath(path)
    version = "?"
    try:
        version = sh([path, "--version"], ctx.setup_tag, capture_output=True, text=True,
                                 timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        src = os.path.dirname(path)
        commit = sh(["git", "-C", src, "log", "-1", "--format=%h %cs %s"], ctx.setup_tag,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if commit:
            version += f" (built from {commit})"
    except (OSError, subprocess.SubprocessError):
        pass
    w = Wrapper("guardian", path, [], version, guardian=True)
    key = ctx.procs.nonce("probe-guardian")
    try:
        run = run_wrapped(ctx, w, [shutil.which("true")], key, timeout=10)
    finally:
        ctx.procs.cleanup(key)
    if run.rc != 0 or not event(run, "released"):
        return None, (f"{path} does not behave per docs/contract.md yet: `guardian --events-fd 3 -- true` "
                      f"gave rc={run.rc} and events {[e.get('event') for e in run.events]}")
    return w, None


def probe_cgroup(ctx):
    mnt = cgroup2_mount()
    if not mnt:
        return None, "no cgroup2 mount in /proc/self/mountinfo"
    own = "/"
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                own = line[3:].strip()
    base = os.path.join(mnt, own.lstrip("/"), f"guardian-bench-{ctx.run}")
    try:
        os.mkdir(base)
    except OSError as e:
        return None, f"cannot create {base}: {e}"
    ctx.cgroup_dirs.append(base)
    key = ctx.procs.nonce("probe-cgroup")
    try:
        run = run_wrapped(ctx, ctx.guardian, [shutil.which("true")], key, timeout=10,
                          opts=["--cgroup", base])
    finally:
        ctx.procs.cleanup(key)
    sp = event(run, "spawned")
    if run.rc != 0 or not event(run, "released") or not sp or sp.get("mode") != "cgroup":
        return None, (f"`guardian --cgroup {base} -- true` failed (rc={run.rc}, events "
                      f"{[e.get('event') for e in run.events]}, mode {sp.get('mode') if sp else None}): "
                      f"{run.stderr.strip()[-300:]}")
    return base, None


def remove_cgroups(ctx):
    for base in ctx.cgroup_dirs:
        for root, dirs, _ in sorted(os.walk(base, topdown=False), key=lambda x: -len(x[0])):
            try:
                os.rmdir(root)
            except OSError as e:
                warn(f"cannot remove cgroup {root}: {e}")


def machine_info(ctx):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "kernel": platform.release(), "nproc": os.cpu_count()}
    try:
        info["nproc"] = len(os.sched_getaffinity(0))
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem"] = f"{int(f.readline().split()[1]) // 1024} MiB"
        with open("/proc/sys/kernel/pid_max") as f:
            info["pid_max"] = f.read().strip()
        with open("/proc/loadavg") as f:
            info["loadavg"] = " ".join(f.read().split()[:3])
    except OSError:
        pass
    info["processes"] = sum(1 for n in os.listdir("/proc") if n.isdigit())
    return info
