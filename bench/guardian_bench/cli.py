"""Command line, the run's order (set-up, rounds of every measure, outputs) and the final cleanup."""

import argparse
import ctypes
import os
import secrets
import shutil
import signal
import sys
import time

from . import DESCRIPTION
from .common import ANCHOR_PACKAGES, BENCH, PR_SET_CHILD_SUBREAPER, say, sh, warn
from .ctx import Cfg, Ctx
from .measure import m_driver, m_idle, m_memory, m_release, m_startup, m_teardown
from . import readme
from .report import report_only, write_outputs
from .setup import Wrapper, build_tree, dpkg_version, ensure_packages, find_guardian, machine_info, probe_cgroup, remove_cgroups


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="bench/run", description=DESCRIPTION)
    ap.add_argument("--smoke", action="store_true",
                    help="one round, tiny trees, 1 s idle window: a quick check (CI)")
    ap.add_argument("--rounds", type=int, help="rounds (default 3, smoke 1)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(BENCH), "docs"), help="output directory (default docs/)")
    ap.add_argument("--sizes", help="tree sizes, comma-separated (default 10,100,1000,10000; smoke 10,100)")
    ap.add_argument("--chain-max", type=int, default=1000,
                    help="deepest chain to build (default 1000: fork cost grows with depth)")
    ap.add_argument("--idle", type=float, help="idle window in seconds (default 10, smoke 1)")
    ap.add_argument("--load", type=int, help="unrelated sleepers for the +load runs (default 5000, smoke 300; 0: skip)")
    ap.add_argument("--only", help="comma-separated subset of: startup,memory,idle,release,teardown,driver")
    ap.add_argument("--wrappers", help="comma-separated subset of: guardian,tini,dumb-init,catatonit")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install missing anchors/hyperfine")
    ap.add_argument("--no-build", action="store_true", help="do not cargo build guardian when it is missing")
    ap.add_argument("--check-readme", action="store_true",
                    help="only check that README.md's Performance table is the one docs/benchmarks-raw.json gives")
    ap.add_argument("--report-only", metavar="RAW_JSON", help="only re-render the report and plot from a raw.json")
    a = ap.parse_args(argv)
    cfg = Cfg(
        argv=argv,
        smoke=a.smoke,
        rounds=a.rounds or (1 if a.smoke else 3),
        sizes=[int(x) for x in a.sizes.split(",")] if a.sizes else ([10, 100] if a.smoke else [10, 100, 1000, 10000]),
        chain_max=a.chain_max,
        idle=a.idle if a.idle is not None else (1.0 if a.smoke else 10.0),
        load=a.load if a.load is not None else (300 if a.smoke else 5000),
        startup_runs=30 if a.smoke else 200,
        startup_warmup=3 if a.smoke else 10,
        mem_count=20,
        release_reps=2 if a.smoke else 10,
        driver_tree=20 if a.smoke else 100,
        driver_timeout=1.0 if a.smoke else 5.0,
        only=a.only.split(",") if a.only else ["startup", "memory", "idle", "release", "teardown", "driver"],
        wrappers=a.wrappers.split(",") if a.wrappers else ["guardian", *ANCHOR_PACKAGES],
    )
    if max(cfg.sizes) + cfg.load > 20000:
        ap.error("largest tree + load must stay under 20000 processes (pid_max is small here)")
    return a, cfg


def main(argv):
    args, cfg = parse_args(argv)
    if args.check_readme:
        docs = os.path.join(os.path.dirname(BENCH), "docs")
        problem = readme.check(os.path.join(docs, "benchmarks-raw.json"), readme.readme_path(docs))
        if problem:
            print(f"bench/run --check-readme: {problem}", file=sys.stderr)
            return 1
        say("README.md's Performance table matches docs/benchmarks-raw.json")
        return 0
    if args.report_only:
        say(report_only(args.report_only, os.path.abspath(args.out)))
        return 0
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        warn("could not become a child subreaper; orphans will go to init")
    try:  # the anchors' survivors are pinned with one pidfd each
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = max(soft, 65536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        pass
    run = secrets.token_hex(6)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join("/tmp", f"guardian-bench-{run}")
    os.makedirs(tmp)
    ctx = Ctx(run, tmp, cfg)
    t_start = time.monotonic()
    say(f"guardian bench: run nonce {run}, scratch {tmp}, output {out}")
    try:
        ensure_packages(args, os.path.join(tmp, "apt.log"), ctx.setup_tag)
        ctx.tree = build_tree(ctx)
        ctx.info = machine_info(ctx)
        hf = shutil.which("hyperfine")
        ctx.hyperfine = hf
        if hf:
            ctx.hyperfine_version = sh([hf, "--version"], ctx.setup_tag, capture_output=True,
                                                   text=True).stdout.split()[-1]
        wrappers = []
        if "guardian" in cfg.wrappers:
            g, why = find_guardian(ctx, args)
            if g:
                wrappers.append(g)
                ctx.guardian = g
            else:
                ctx.missing.append(("guardian", why))
                ctx.guardian_reason = why
                say(f"guardian skipped: {why}")
        prefixes = {"tini": ["-s", "--"], "dumb-init": ["--"], "catatonit": ["--"]}
        for p in ANCHOR_PACKAGES:
            if p not in cfg.wrappers:
                continue
            path = shutil.which(p)
            if path:
                wrappers.append(Wrapper(p, path, prefixes[p], f"{dpkg_version(p, ctx.setup_tag)} (Debian package)"))
            else:
                ctx.missing.append((p, "not installed and could not be installed"))
                say(f"{p}: missing, skipped")
        ctx.wrappers = wrappers
        if not wrappers:
            sys.exit("bench: no wrapper to measure")
        if ctx.guardian and "teardown" in cfg.only:
            ctx.cgroup, why = probe_cgroup(ctx)
            if why:
                ctx.skip(f"cgroup columns: {why}")
                say(f"cgroup mode skipped: {why}")
        if os.path.exists("/proc/1/comm"):
            with open("/proc/1/comm") as f:
                ctx.host_notes.append(f"PID 1 here is `{f.read().strip()}`; the harness makes itself a child "
                                      "subreaper so that the orphans the anchors leave behind come to it "
                                      "and are killed and reaped by PID.")
        say(f"wrappers: {', '.join(w.name + ' ' + w.version for w in wrappers)}")
        measures = [("startup", m_startup), ("memory", m_memory), ("idle", m_idle),
                    ("release", m_release), ("teardown", m_teardown), ("driver", m_driver)]
        for rnd in range(cfg.rounds):
            for name, fn in measures:
                if name in cfg.only:
                    say(f"round {rnd + 1}/{cfg.rounds}: {name}")
                    fn(ctx, rnd)
            ctx.rounds_done = rnd + 1
            if rnd + 1 < cfg.rounds:  # a run cut short still leaves the rounds it finished
                ctx.elapsed = time.monotonic() - t_start
                write_outputs(ctx, cfg, out)
                say(f"round {rnd + 1} written to {out} (partial until the last round)")
        elapsed = time.monotonic() - t_start
        ctx.elapsed = elapsed
        report = write_outputs(ctx, cfg, out)
        say(f"done in {elapsed:.0f} s: {report}, {os.path.join(out, 'teardown.svg')}, {os.path.join(out, 'benchmarks-raw.json')}")
        return 0
    except KeyboardInterrupt:
        warn("interrupted; cleaning up")
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        left = ctx.procs.cleanup(f"{run}-")
        if left:
            warn(f"final cleanup killed {left} leftover processes")
        remove_cgroups(ctx)
        shutil.rmtree(tmp, ignore_errors=True)
