"""docs/teardown.svg: guardian's teardown time against tree size, one line per mode."""

import statistics

from .common import mode_name


COLOURS = {("term", False): "#1f77b4", ("ignore", False): "#d62728",
           ("term", True): "#2ca02c", ("ignore", True): "#9467bd"}


def write_svg(ctx, cfg, path):
    td = [r for r in ctx.res.get("teardown", []) if r["wrapper"] == "guardian" and r.get("teardown_ms") is not None]
    W, H = 1200, 490
    pw, ph, top, left0, gap = 300, 300, 60, 70, 50
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="16">guardian teardown time '
         '(provider exit to release, released.teardown_ms) against tree size</text>',
         f'<text x="{W / 2}" y="42" text-anchor="middle" fill="#555">median over rounds, bars min–max; '
         f'log–log; {ctx.info["kernel"]}, {ctx.info["nproc"]} CPUs, {ctx.info["date"]}</text>']
    if not td:
        o.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="14">no guardian teardown '
                 f'figures in this run ({ctx.guardian_reason or "see benchmarks.md"})</text>')
        o.append("</svg>")
        with open(path, "w") as f:
            f.write("\n".join(o))
        return
    import math
    xs = sorted({r["n"] for r in td})
    ys = [r["teardown_ms"] for r in td if r["teardown_ms"] > 0] + \
        [r["floor_ms"] for r in ctx.res.get("teardown", []) if r.get("floor_ms")]
    ylo = 10 ** math.floor(math.log10(min(ys))) if ys else 0.01
    yhi = 10 ** math.ceil(math.log10(max(ys))) if ys else 1000
    if yhi <= ylo:
        yhi = ylo * 10
    xlo, xhi = math.log10(min(xs)) - 0.2, math.log10(max(xs)) + 0.2

    def px(left, n):
        return left + (math.log10(n) - xlo) / (xhi - xlo) * pw

    def py(v):
        v = max(v, ylo)
        return top + ph - (math.log10(v) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)) * ph

    modes = []
    for r in td:
        mk = (r["sig"], r["cgroup"], r["load"])
        if mk not in modes:
            modes.append(mk)
    for i, shape in enumerate(("flat", "chain", "orphans")):
        left = left0 + i * (pw + gap)
        o.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        o.append(f'<text x="{left + pw / 2}" y="{top - 6}" text-anchor="middle" font-weight="bold">{shape}</text>')
        e = math.log10(ylo)
        while e <= math.log10(yhi) + 1e-9:
            y = py(10 ** e)
            o.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
            if i == 0:
                o.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
            e += 1
        for n in xs:
            x = px(left, n)
            o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="#eee"/>')
            o.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{n}</text>')
        o.append(f'<text x="{left + pw / 2}" y="{top + ph + 34}" text-anchor="middle">descendants</text>')
        for mk in modes:
            colour = COLOURS[(mk[0], mk[1])]
            dash = ' stroke-dasharray="5,4"' if mk[2] else ""
            pts = []
            for n in xs:
                v = [r["teardown_ms"] for r in td if r["shape"] == shape and r["n"] == n and (r["sig"], r["cgroup"], r["load"]) == mk]
                if not v:
                    continue
                x, y = px(left, n), py(statistics.median(v))
                pts.append(f"{x:.1f},{y:.1f}")
                o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{py(min(v)):.1f}" y2="{py(max(v)):.1f}" stroke="{colour}"/>')
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
            if len(pts) > 1:
                o.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>')
    floors = [r for r in ctx.res.get("teardown", []) if r.get("floor_ms")]
    if floors:
        for i, shape in enumerate(("flat", "chain", "orphans")):
            left = left0 + i * (pw + gap)
            pts = []
            for n in xs:
                v = [r["floor_ms"] for r in floors if r["shape"] == shape and r["n"] == n]
                if v:
                    pts.append(f"{px(left, n):.1f},{py(statistics.median(v)):.1f}")
            if len(pts) > 1:
                o.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="#444" stroke-width="1.5" stroke-dasharray="1,3"/>')
        modes_n = len(modes)
        x = left0 + (modes_n % 4) * 265
        y = top + ph + 52 + (modes_n // 4) * 18
        o.append(f'<line x1="{x}" x2="{x + 24}" y1="{y - 4}" y2="{y - 4}" stroke="#444" stroke-width="2" stroke-dasharray="1,3"/>')
        o.append(f'<text x="{x + 30}" y="{y}">reference: harness SIGKILL + reap</text>')
    o.append(f'<text x="18" y="{top + ph / 2}" transform="rotate(-90 18 {top + ph / 2})" text-anchor="middle">teardown ms</text>')
    ly = top + ph + 52
    for j, mk in enumerate(modes):
        x = left0 + (j % 4) * 265
        y = ly + (j // 4) * 18
        colour = COLOURS[(mk[0], mk[1])]
        dash = ' stroke-dasharray="5,4"' if mk[2] else ""
        o.append(f'<line x1="{x}" x2="{x + 24}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{x + 30}" y="{y}">{mode_name({"sig": mk[0], "cgroup": mk[1], "load": mk[2]})}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o))
