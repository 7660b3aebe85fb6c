#!/usr/bin/env python3
"""The sentinel's cost (issue 24), figures in bench/profile.md: private memory of 20 resident
instances and start-up overhead of `WRAPPER -- /bin/true`, for guardian with and without its
sentinel, catatonit, and a user + PID namespace (the other mechanism's kernel side).

usage: python3 bench/sentinel.py [GUARDIAN] [RUNS] [OTHER]   (root: the memory figures read
pagemap; OTHER, another guardian build, e.g. the one before a change, is measured alongside,
its start-up interleaved with the rest)"""

import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from guardian_bench.procs import family_private_kb, wrapper_family  # noqa: E402

G = sys.argv[1] if len(sys.argv) > 1 else "target/dist/guardian"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
OTHER = sys.argv[3] if len(sys.argv) > 3 else None


def env(sentinel):
    e = dict(os.environ)
    e.pop("GUARDIAN_NO_SENTINEL", None)
    if sentinel is not None:
        e["GUARDIAN_NO_SENTINEL"] = sentinel
    return e


def memory(argv0, sentinel=None):
    ps = [subprocess.Popen([argv0, "--", "/bin/sleep", "60"], env=env(sentinel)) for _ in range(20)]
    try:
        time.sleep(1.0)
        fams = [wrapper_family(p.pid) for p in ps]
        kb = [family_private_kb(f) for f in fams]
        return max(len(f) for f in fams), statistics.mean(k for k in kb if k is not None)
    finally:
        for p in ps:
            p.terminate()
        for p in ps:
            p.wait()


def startup():
    cmds = {
        "true": (["/bin/true"], None),
        "guardian, sentinel on": ([G, "--", "/bin/true"], None),
        "guardian, GUARDIAN_NO_SENTINEL=1": ([G, "--", "/bin/true"], "1"),
        "unshare -Urpf --kill-child guardian": (["/usr/bin/unshare", "-Urpf", "--kill-child", G, "--", "/bin/true"], None),
        "unshare -Urpf --kill-child true": (["/usr/bin/unshare", "-Urpf", "--kill-child", "/bin/true"], None),
    }
    if OTHER:
        cmds[f"{OTHER}, sentinel on"] = ([OTHER, "--", "/bin/true"], None)
    if os.path.exists("/usr/bin/catatonit"):
        cmds["catatonit"] = (["/usr/bin/catatonit", "--", "/bin/true"], None)
    res = {k: [] for k in cmds}
    for _ in range(RUNS):
        for k, (argv, s) in cmds.items():
            t = time.perf_counter_ns()
            pid = os.posix_spawn(argv[0], argv, env(s))
            os.waitpid(pid, 0)
            res[k].append((time.perf_counter_ns() - t) / 1e6)
    base = statistics.median(res["true"])
    for k, v in res.items():
        print(f"| {k} | {statistics.median(v):.3f} ms | overhead {statistics.median(v) - base:.3f} ms |")


for name, argv0, s in [("guardian, sentinel on", G, None), ("guardian, GUARDIAN_NO_SENTINEL=1", G, "1"),
                       ("catatonit", "/usr/bin/catatonit", None)] + ([(f"{OTHER}, sentinel on", OTHER, None)] if OTHER else []):
    if os.path.exists(argv0):
        n, kb = memory(argv0, s)
        print(f"| {name} | {n} process(es) | private {kb:.1f} kB |")
startup()
print("load average", open("/proc/loadavg").read().split()[:3])
