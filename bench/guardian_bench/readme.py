"""The Performance table of README.md, made from the same figures as docs/benchmarks.md.

`bench/run` rewrites the table between the README's markers whenever it writes docs/ (and so
does `--report-only`); `bench/run --check-readme` fails when the README's table is not the one
docs/benchmarks-raw.json gives, so the README cannot drift from the regenerated report (issue
22.7)."""

import json
import os

from .common import fmt, med

BEGIN = "<!-- bench:readme-table:begin (written by bench/run from docs/benchmarks-raw.json) -->"
END = "<!-- bench:readme-table:end -->"
ORDER = ("guardian", "tini", "dumb-init", "catatonit")


def _count(n):
    return f"{n:,.0f}".replace(",", " ")


def table(res, names):
    """the README's table (a list of lines) from a run's results"""
    names = [n for n in ORDER if n in names]
    st = res.get("startup", {}).get("times", {})
    base = med(st.get("(no wrapper)", []))
    mem, idle, rel = res.get("memory", {}), res.get("idle", {}), res.get("release", {})
    td, drv = res.get("teardown", []), res.get("driver", {})

    def startup(w):
        m = med(st.get(w, []))
        return "–" if m is None or base is None else f"{fmt(m - base)} ms"

    def uss(w):
        return f"{fmt(med(mem[w]['uss']), 0)} kB" if w in mem else "–"

    def wakeups(w):
        return fmt(med(idle[w]["wakeups"]), 0) if w in idle else "–"

    def release(w):
        r = rel.get(w)
        if not r:
            return "–"
        if r.get("teardown"):
            return f"{fmt(med(r['teardown']), 2)} ms"
        return f"exits at once, leaves {fmt(med(r['survivors']), 0)}"

    def teardown(w):
        rows = [r for r in td if r["wrapper"] == w and r["shape"] == "flat" and r["n"] == 1000
                and r["sig"] == "term" and not r["cgroup"] and not r["load"]]
        if not rows:
            return "–"
        ms = med([r.get("teardown_ms") for r in rows])
        if ms is not None:
            return f"{fmt(ms)} ms"
        left = med([r["survivors"] for r in rows])
        if left:
            return f"leaves {_count(left)}"
        return "waits for nothing (its group got SIGTERM; setsid orphans escape)"

    def driver(w):
        r = drv.get(w)
        if not r:
            return "–"
        gone = med(r["gone_ms"])
        return "survives" if gone is None else f"{fmt(gone)} ms"

    rows = [
        ("start-up overhead (`X -- true`)", startup),
        ("private memory (USS) per resident wrapper", uss),
        ("idle wake-ups per 10 s", wakeups),
        ("provider exit to release, 2 cooperative children", release),
        ("1 000 flat SIGTERM-respecting descendants: teardown", teardown),
        ("driver SIGKILLed: tree gone after", driver),
    ]
    out = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    out += [f"| {label} | " + " | ".join(f(w) for w in names) + " |" for label, f in rows]
    return out


def _split(text):
    try:
        head, rest = text.split(BEGIN + "\n", 1)
        body, tail = rest.split(END, 1)
    except ValueError:
        return None
    return head, body, tail


def readme_path(out):
    return os.path.join(os.path.dirname(os.path.abspath(out)), "README.md")


def write(res, names, readme):
    """rewrites the table between the markers; returns False when the README has no markers"""
    with open(readme) as f:
        parts = _split(f.read())
    if parts is None:
        return False
    head, _, tail = parts
    with open(readme, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(table(res, names)) + "\n" + END + tail)
    return True


def check(raw_path, readme):
    """None when the README's table is the one raw_path gives, else a one-line problem"""
    with open(raw_path) as f:
        raw = json.load(f)
    with open(readme) as f:
        parts = _split(f.read())
    if parts is None:
        return f"{readme}: no table markers ({BEGIN!r} ... {END!r})"
    want = "\n".join(table(raw["results"], list(raw["wrappers"]))) + "\n"
    if parts[1] != want:
        return (f"{readme}: the Performance table differs from {raw_path}; run "
                f"`bench/run --report-only {raw_path}` and commit README.md")
    return None
