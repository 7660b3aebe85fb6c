"""Constants, output helpers, the tagged set-up runner `sh`, and the small number formatting shared by the measures and the report."""

import os
import statistics
import subprocess
import sys


BENCH = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # bench/


REPO = os.path.dirname(BENCH)


TAG = "BENCH_NONCE"


PR_SET_CHILD_SUBREAPER = 36


ANCHOR_PACKAGES = ("tini", "dumb-init", "catatonit")


SH_TREE = "sleep 100 & sleep 100 & exit 0"


SH_BASE = "exit 0"


def say(*a):
    print(*a, flush=True)


def warn(*a):
    print("bench:", *a, file=sys.stderr, flush=True)


def sh(argv, tag, **kw):
    """subprocess.run for set-up commands (gcc, apt-get, cargo, ...), tagged with `tag` (the
    run's set-up nonce, `Ctx.setup_tag`) like everything else the harness starts"""
    env = dict(kw.pop("env", None) or os.environ)
    env.pop(TAG, None)
    env = {TAG: tag, **env}
    return subprocess.run(argv, env=env, **kw)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=2):
    """three significant figures or so; digits=0 for counts"""
    if x is None:
        return "–"
    if digits == 0 or isinstance(x, int):
        return f"{x:.0f}"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def mmm(xs, digits=2):
    """median (min–max)"""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    if len(xs) == 1:
        return fmt(xs[0], digits)
    return f"{fmt(statistics.median(xs), digits)} ({fmt(min(xs), digits)}–{fmt(max(xs), digits)})"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def rotate(seq, k):
    seq = list(seq)
    if not seq:
        return seq
    k %= len(seq)
    return seq[k:] + seq[:k]


def mode_name(r):
    s = "SIGTERM respected" if r["sig"] == "term" else "SIGTERM ignored, --grace 0"
    if r["cgroup"]:
        s += ", --cgroup"
    if r["load"]:
        s += ", +load"
    return s
