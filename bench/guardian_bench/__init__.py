"""guardian's benchmark harness (python3 >= 3.11, stdlib only).

Runs guardian and the anchors (tini, dumb-init, catatonit) in the same run,
interleaved, for several rounds, and writes a markdown report, an SVG plot and
the raw figures.  See bench/README.md for what each figure means.

    bench/run [--smoke] [--rounds N] [--out DIR] [...]

Every process this harness starts carries BENCH_NONCE=<run>-<seq>-<what> in its
environment (fork() and exec() keep it); the harness is a child subreaper, and
it cleans up only processes that carry its nonce, by PID, through pidfds.
"""

DESCRIPTION = __doc__.split("\n\n")[0]
