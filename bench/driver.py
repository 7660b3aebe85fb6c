#!/usr/bin/env python3
"""Driver for bench/run's driver-death measure.

    driver.py -- WRAPPER [ARGS...]

Spawns the wrapper (which runs a process tree) as its own child and then just
waits on it, like a supervisor or CI job would.  bench/run SIGKILLs this
process once the tree is complete and times how long the tree takes to go.
If the wrapper exits first, the driver exits with its status.
"""
import os
import subprocess
import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: driver.py -- WRAPPER [ARGS...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    rc = child.wait()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
