"""The six measures (start-up, memory, idle wake-ups, release latency, teardown scaling, driver death), each `m_*(ctx, rnd)` appending its figures to `ctx.res`."""

import fcntl
import json
import os
import select
import shutil
import signal
import sys
import time

from .common import BENCH, SH_BASE, SH_TREE, fmt, med, rotate, say, warn
from .procs import (children_of, count_survivors, ctxt_switches, exact, family_private_kb, kill_floor, pin, tagged,
                    wait_fds, wrapper_family)


class Run:
    pass


def run_wrapped(ctx, w, provider, nonce, timeout, opts=(), events=True, readyfile=None):
    """Run one wrapper until it exits.  Records t0 (spawn), t_end (the
    monotonic time its pidfd became readable, i.e. it exited), rc, guardian's
    events, and the tree helper's ready timestamp (provider exit)."""
    r = None
    fds = []
    opts = list(opts)
    if w.guardian and events:
        r, wr = os.pipe()
        try:
            fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        hi = fcntl.fcntl(wr, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(wr)
        fds = [(hi, 3)]
        opts += ["--events-fd", "3"]
    errf = os.path.join(ctx.tmp, f"{nonce}.err")
    run = Run()
    run.nonce, run.wrapper = nonce, w.name
    run.t0 = time.monotonic()
    pid = ctx.procs.spawn(w.argv(provider, opts), nonce, fds=fds, stderr=errf)
    if fds:
        os.close(fds[0][0])
    pfd = ctx.procs.pidfd(pid)
    p = select.poll()
    p.register(pfd, select.POLLIN)
    if r is not None:
        p.register(r, select.POLLIN)
    buf = bytearray()
    run.t_end = None
    run.timed_out = False
    run.events_eof = r is None
    deadline = run.t0 + timeout
    while run.t_end is None or not run.events_eof:
        now = time.monotonic()
        if run.t_end is None and now > deadline and not run.timed_out:
            run.timed_out = True
            warn(f"{w.name}: no exit after {timeout:.0f} s, killing it ({nonce})")
            signal.pidfd_send_signal(pfd, signal.SIGKILL)
            deadline = now + 10
        if run.t_end is not None and now > run.t_end + 2.0:
            break  # the events fd outlived the wrapper (something kept it open)
        for fd, _ in p.poll(100):
            if fd == pfd:
                run.t_end = time.monotonic()
                p.unregister(pfd)
            elif fd == r:
                data = os.read(r, 1 << 20)
                if data:
                    buf += data
                else:
                    run.events_eof = True
                    p.unregister(r)
    if r is not None:
        os.close(r)
    run.rc = ctx.procs.wait(pid, timeout=10)
    run.pid = pid
    run.events = []
    for line in bytes(buf).decode(errors="replace").splitlines():
        try:
            run.events.append(json.loads(line))
        except ValueError:
            run.events.append({"event": "unparsable", "line": line})
    run.ready_ts = None
    if readyfile:
        try:
            with open(readyfile) as f:
                run.ready_ts = float(f.read().strip())
        except (OSError, ValueError):
            pass
        try:
            os.unlink(readyfile)
        except OSError:
            pass
    try:
        with open(errf, errors="replace") as f:
            run.stderr = f.read()[-2000:]
        os.unlink(errf)
    except OSError:
        run.stderr = ""
    return run


def event(run, name):
    for e in run.events:
        if e.get("event") == name:
            return e
    return None


def m_startup(ctx, rnd):
    true = shutil.which("true")
    cmds = [("(no wrapper)", [true])] + [(w.name, w.argv([true])) for w in ctx.wrappers]
    order = rotate(cmds, rnd)
    res = ctx.res.setdefault("startup", {"method": None, "times": {}})
    key = ctx.procs.nonce("startup")
    if ctx.hyperfine:
        out = os.path.join(ctx.tmp, f"hyperfine-{rnd}.json")
        argv = [ctx.hyperfine, "-N", "--warmup", str(ctx.cfg.startup_warmup), "--runs",
                str(ctx.cfg.startup_runs), "--style", "none", "--export-json", out]
        for name, cmd in order:
            argv += ["-n", name, " ".join(cmd)]
        logf = os.path.join(ctx.tmp, "hyperfine.log")
        pid = ctx.procs.spawn(argv, key, stdout=logf, stderr=logf)
        rc = ctx.procs.wait(pid, timeout=900)
        ctx.procs.cleanup(exact(key), [pid])
        if rc == 0:
            with open(out) as f:
                data = json.load(f)
            for r in data["results"]:
                res["times"].setdefault(r["command"], []).extend(t * 1000 for t in r["times"])
            res["method"] = (f"hyperfine {ctx.hyperfine_version} -N (no shell), "
                             f"{ctx.cfg.startup_warmup} warm-up + {ctx.cfg.startup_runs} runs "
                             "per command per round, command order rotated each round")
            return
        warn(f"hyperfine failed (rc={rc}, log {logf}); timing with perf_counter_ns instead")
    # fallback: interleave run by run
    for _ in range(ctx.cfg.startup_runs):
        for name, cmd in order:
            t0 = time.perf_counter_ns()
            pid = ctx.procs.spawn(cmd, key)
            ctx.procs.wait(pid, timeout=30)
            res["times"].setdefault(name, []).append((time.perf_counter_ns() - t0) / 1e6)
    ctx.procs.cleanup(exact(key))
    res["method"] = (f"posix_spawn + pidfd wait timed with time.perf_counter_ns, "
                     f"{ctx.cfg.startup_runs} runs per command per round, interleaved run by run")


def settle_wrappers(pids, timeout=3.0):
    """wait until each wrapper has started its provider"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(children_of(p) for p in pids):
            break
        time.sleep(0.01)


def m_memory(ctx, rnd):
    res = ctx.res.setdefault("memory", {})
    hold = str(int(ctx.cfg.idle + 60))
    for w in rotate(ctx.wrappers, rnd):
        key = ctx.procs.nonce(f"mem-{w.name}")
        pids = []
        try:
            for _ in range(ctx.cfg.mem_count):
                pids.append(ctx.procs.spawn(w.argv(["/bin/sleep", hold]), key))
            settle_wrappers(pids)
            time.sleep(0.3)
            samples = []
            for pid in pids:
                # Every process of the wrapper (guardian's sentinel and guardian): their PSS
                # and RSS add up; their USS is the pages only they map (a copy-on-write page
                # the two share counts once), from the page frames where root can read them.
                family = wrapper_family(pid)
                total = {"uss": 0, "pss": 0, "rss": 0}
                for member in family:
                    vals = {}
                    try:
                        with open(f"/proc/{member}/smaps_rollup") as f:
                            for line in f:
                                parts = line.split()
                                if len(parts) >= 3 and parts[2] == "kB":
                                    vals[parts[0].rstrip(":")] = int(parts[1])
                    except OSError:
                        continue
                    if "Pss" in vals:
                        total["uss"] += vals.get("Private_Clean", 0) + vals.get("Private_Dirty", 0)
                        total["pss"] += vals["Pss"]
                        total["rss"] += vals.get("Rss", 0)
                if total["pss"]:
                    private = family_private_kb(family) if len(family) > 1 else None
                    if private is not None:
                        total["uss"] = private
                    total["procs"] = len(family)
                    samples.append(total)
        finally:
            ctx.procs.cleanup(key, pids)
        if samples:
            r = res.setdefault(w.name, {"uss": [], "pss": [], "rss": [], "n": [], "procs": []})
            for k in ("uss", "pss", "rss"):
                r[k].append(sum(s[k] for s in samples) / len(samples))
            r.setdefault("procs", []).append(max(s["procs"] for s in samples))
            r["n"].append(len(samples))
    say("  memory: " + ", ".join(f"{n} USS {fmt(r['uss'][-1], 0)} kB" for n, r in res.items()))


def m_idle(ctx, rnd):
    res = ctx.res.setdefault("idle", {})
    hold = str(int(ctx.cfg.idle + 60))
    started = []
    try:
        for w in rotate(ctx.wrappers, rnd):
            key = ctx.procs.nonce(f"idle-{w.name}")
            started.append((w, key, ctx.procs.spawn(w.argv(["/bin/sleep", hold]), key)))
        settle_wrappers([p for _, _, p in started])
        time.sleep(0.5)
        before = {key: ctxt_switches(pid) for _, key, pid in started}
        time.sleep(ctx.cfg.idle)
        after = {key: ctxt_switches(pid) for _, key, pid in started}
        for w, key, pid in started:
            b, a = before[key], after[key]
            r = res.setdefault(w.name, {"wakeups": [], "threads": []})
            if a is None or b is None:
                r["wakeups"].append(None)
                warn(f"{w.name} died during the idle window")
                continue
            r["wakeups"].append(a[0] - b[0])
            r["threads"].append(a[1])
    finally:
        for w, key, pid in started:
            ctx.procs.cleanup(key, [pid])
    say(f"  idle {ctx.cfg.idle:g} s: " + ", ".join(f"{n} {r['wakeups'][-1]}" for n, r in res.items()))


def m_release(ctx, rnd):
    res = ctx.res.setdefault("release", {})
    for rep in range(ctx.cfg.release_reps):
        for w in rotate(ctx.wrappers, rnd * ctx.cfg.release_reps + rep):
            r = res.setdefault(w.name, {"base": [], "tree": [], "teardown": [], "observed": [],
                                        "survivors": [], "rc": []})
            k0 = ctx.procs.nonce(f"rel0-{w.name}")
            try:
                b = run_wrapped(ctx, w, ["/bin/sh", "-c", SH_BASE], k0, timeout=30)
            finally:
                ctx.procs.cleanup(k0)
            k1 = ctx.procs.nonce(f"rel1-{w.name}")
            try:
                t = run_wrapped(ctx, w, ["/bin/sh", "-c", SH_TREE], k1, timeout=30)
                surv = count_survivors(exact(k1), settle=not w.guardian)
            finally:
                ctx.procs.cleanup(k1)
            r["base"].append((b.t_end - b.t0) * 1000)
            r["tree"].append((t.t_end - t.t0) * 1000)
            r["survivors"].append(surv)
            r["rc"].append(t.rc)
            if w.guardian:
                ex, rel = event(t, "exit"), event(t, "released")
                r["teardown"].append(rel.get("teardown_ms") if rel else None)
                r["observed"].append((t.t_end - ex["ts"]) * 1000 if ex else None)
                if not rel or not ex:
                    ctx.note(f"release: guardian gave no exit/released event (rc={t.rc}): {t.stderr[-300:]}")
    say("  release: " + ", ".join(
        f"{n} {fmt(med(r['tree']) - med(r['base']))} ms, {r['survivors'][-1]} left" for n, r in res.items()))


def tree_cmd(ctx, shape, n, sig, end, readyfile):
    return [ctx.tree, shape, str(n), sig, end, readyfile]


def m_teardown(ctx, rnd):
    recs = ctx.res.setdefault("teardown", [])
    loads = [False] + ([True] if ctx.cfg.load and ctx.guardian else [])
    for load in loads:
        load_key = load_pid = None
        if load:
            load_key = ctx.procs.nonce("load")
            rf = os.path.join(ctx.tmp, f"{load_key}.ready")
            load_pid = ctx.procs.spawn(tree_cmd(ctx, "flat", ctx.cfg.load, "term", "stay", rf), load_key)
            t0 = time.monotonic()
            while not os.path.exists(rf) and time.monotonic() < t0 + 120:
                time.sleep(0.02)
            say(f"  load: {len(tagged(exact(load_key)))} unrelated sleepers running")
        try:
            for shape in ("flat", "chain", "orphans"):
                for n in ctx.cfg.sizes:
                    if shape == "chain" and n > ctx.cfg.chain_max:
                        ctx.skip(f"chain of {n}: deeper than --chain-max {ctx.cfg.chain_max} "
                                 "(building a deep chain is quadratic on this host, see notes)")
                        continue
                    for sig in ("term", "ignore"):
                        for cg in ([False, True] if ctx.cgroup else [False]):
                            # the anchors do not tear down: what they do is the same every
                            # round, so they run in the first round only; but the floor (the
                            # harness killing what an anchor left) is taken in every round, by
                            # one anchor, so guardian's median of rounds faces a median of
                            # floors measured beside it, under the same load
                            floor_taker = next((w for w in ctx.wrappers if not w.guardian), None)
                            ws = [w for w in ctx.wrappers
                                  if w.guardian or not (cg or load) and (rnd == 0 or w is floor_taker)]
                            for w in rotate(ws, rnd + n):
                                recs.append(teardown_one(ctx, w, shape, n, sig, cg, load, rnd))
        finally:
            if load:
                ctx.procs.cleanup(load_key, [load_pid])


def teardown_one(ctx, w, shape, n, sig, cg, load, rnd):
    key = ctx.procs.nonce(f"td-{w.name}-{shape}-{n}-{sig}")
    rf = os.path.join(ctx.tmp, f"{key}.ready")
    opts = []
    if w.guardian:
        if sig == "ignore":
            opts += ["--grace", "0"]
        if cg:
            opts += ["--cgroup", ctx.cgroup]
    rec = {"wrapper": w.name, "shape": shape, "n": n, "sig": sig, "cgroup": cg, "load": load,
           "round": rnd}
    try:
        run = run_wrapped(ctx, w, tree_cmd(ctx, shape, n, sig, "exit", rf), key, opts=opts,
                          timeout=60 + n * 0.02, readyfile=rf)
        rec["survivors"] = count_survivors(exact(key), settle=not w.guardian)
        if not w.guardian and rec["survivors"] == n:
            rec["floor_ms"] = kill_floor(ctx.procs, exact(key))
    finally:
        rec["cleaned"] = ctx.procs.cleanup(key)
    rec["rc"] = run.rc
    rec["timed_out"] = run.timed_out
    rec["build_s"] = (run.ready_ts - run.t0) if run.ready_ts else None
    rec["exit_after_ready_ms"] = (run.t_end - run.ready_ts) * 1000 if run.ready_ts else None
    if run.ready_ts is None:
        ctx.note(f"{w.name} {shape} {n} {sig}: the tree helper never reported ready "
                 f"(rc={run.rc}): {run.stderr[-300:]}")
    if w.guardian:
        ex, rel = event(run, "exit"), event(run, "released")
        rec["teardown_ms"] = rel.get("teardown_ms") if rel else None
        rec["observed_ms"] = (run.t_end - ex["ts"]) * 1000 if ex else None
        rec["released_minus_exit_ms"] = (rel["ts"] - ex["ts"]) * 1000 if ex and rel else None
        rec["notice_ms"] = (ex["ts"] - run.ready_ts) * 1000 if ex and run.ready_ts else None
        for f in ("signalled", "killed", "reaped", "status"):
            rec[f] = rel.get(f) if rel else None
        sp = event(run, "spawned")
        rec["mode"] = sp.get("mode") if sp else None
        rec["events_eof"] = run.events_eof
        problems = []
        if not rel:
            problems.append("no released event")
        if run.rc != 0:
            problems.append(f"exit status {run.rc}")
        if rec["survivors"]:
            problems.append(f"{rec['survivors']} descendants still alive after it exited")
        if rel and rel.get("reaped") is not None and rel.get("signalled") is not None and cg is False \
                and max(rel.get("reaped") or 0, rel.get("signalled") or 0) < n:
            problems.append(f"released says signalled={rel.get('signalled')} reaped={rel.get('reaped')} for {n} descendants")
        if not run.events_eof:
            problems.append("events fd not closed when guardian exited")
        if run.timed_out:
            problems.append("timed out")
        if problems:
            ctx.note(f"guardian {shape} n={n} {sig}{' cgroup' if cg else ''}{' +load' if load else ''}: "
                     + "; ".join(problems) + (f" (stderr: {run.stderr.strip()[-200:]})" if run.stderr.strip() else ""))
        say(f"  {w.name:9} {shape:7} {n:5} {sig:6} {'cg ' if cg else '   '}{'load ' if load else '     '}"
            f"teardown {fmt(rec['teardown_ms'])} ms, observed {fmt(rec['observed_ms'])} ms, "
            f"left {rec['survivors']}, rc {run.rc}")
    else:
        say(f"  {w.name:9} {shape:7} {n:5} {sig:6}    exits {fmt(rec['exit_after_ready_ms'])} ms "
            f"after the provider, leaves {rec['survivors']}/{n}"
            + (f"; harness SIGKILL+reap of them: {fmt(rec['floor_ms'])} ms" if rec.get("floor_ms") else ""))
    return rec


def m_driver(ctx, rnd):
    res = ctx.res.setdefault("driver", {})
    for w in rotate(ctx.wrappers, rnd):
        key = ctx.procs.nonce(f"drv-{w.name}")
        rf = os.path.join(ctx.tmp, f"{key}.ready")
        argv = [sys.executable, os.path.join(BENCH, "driver.py"), "--",
                *w.argv(tree_cmd(ctx, "flat", ctx.cfg.driver_tree, "term", "stay", rf))]
        errf = os.path.join(ctx.tmp, f"{key}.err")
        dpid = ctx.procs.spawn(argv, key, stderr=errf)
        fds = {}
        r = res.setdefault(w.name, {"gone_ms": [], "wrapper_ms": [], "alive": [], "tree": []})
        try:
            t0 = time.monotonic()
            while not os.path.exists(rf) and time.monotonic() < t0 + 30:
                time.sleep(0.01)
            if not os.path.exists(rf):
                ctx.note(f"driver-death {w.name}: the tree never got ready")
                continue
            time.sleep(0.05)
            kids = children_of(dpid)
            wpid = kids[0] if kids else None
            fds = pin([p for p in tagged(exact(key)) if p != dpid], exact(key))
            tree = {p: fd for p, fd in fds.items() if p != wpid}
            t_kill = time.monotonic()
            signal.pidfd_send_signal(ctx.procs.pidfd(dpid), signal.SIGKILL)
            seen = wait_fds(list(fds.values()), ctx.cfg.driver_timeout)
            gone = [seen[fd] for p, fd in tree.items() if fd in seen]
            alive = len(tree) - len(gone)
            r["tree"].append(len(tree))
            r["alive"].append(alive)
            r["gone_ms"].append((max(gone) - t_kill) * 1000 if not alive and gone else None)
            wfd = fds.get(wpid)
            r["wrapper_ms"].append((seen[wfd] - t_kill) * 1000 if wfd in seen else None)
        finally:
            for fd in fds.values():
                os.close(fd)
            ctx.procs.cleanup(key, [dpid])
            try:
                os.unlink(rf)
            except OSError:
                pass
        if w.guardian and r["alive"] and r["alive"][-1]:
            ctx.note(f"driver-death: guardian left {r['alive'][-1]} of {r['tree'][-1]} tree processes "
                     f"alive {ctx.cfg.driver_timeout:g} s after its parent was SIGKILLed")
    say("  driver death: " + ", ".join(
        f"{n} " + (f"gone in {fmt(r['gone_ms'][-1])} ms" if r["gone_ms"] and r["gone_ms"][-1] is not None
                   else f"{r['alive'][-1] if r['alive'] else '?'} alive") for n, r in res.items()))
