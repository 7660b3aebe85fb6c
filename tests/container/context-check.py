#!/usr/bin/env python3
"""Does the image's build stage hold every file the build needs?

Reproduces, without a container engine, what `podman build` / `docker build` give the build
stage of packaging/container/Containerfile:
  1. the build context: the checkout's files (git ls-files: tracked, plus untracked files that
     .gitignore does not exclude) minus what Containerfile.dockerignore excludes (dockerignore
     rules: last matching pattern wins, `!` re-includes, a pattern matching a directory covers
     everything under it);
  2. the build stage: only what its COPY lines take from that context, placed under WORKDIR;
  3. the stage's `cargo build` (from its RUN line, without --release and --target so that it
     stays a cheap incremental debug build on the host) run in an empty temporary directory
     holding only those files, with --locked.
It fails (exit 1) when a COPY source is missing from the context or the build fails there, e.g.
when the binary includes a file (include_str!) that no COPY line names or the ignore file keeps
out. Usage: tests/container/context-check.py [--keep]  (from anywhere in the checkout).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONTAINERFILE = os.path.join(ROOT, "packaging", "container", "Containerfile")
IGNOREFILE = CONTAINERFILE + ".dockerignore"
TARGET_DIR = os.path.join(ROOT, "target", "context-check")


def fail(msg):
    print(f"context-check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def instructions(path):
    """(keyword, rest) per instruction, with continuation lines joined and comments dropped."""
    out, cur = [], ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if cur and s.lstrip().startswith("#"):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            kw, _, rest = cur.strip().partition(" ")
            out.append((kw.upper(), rest.strip()))
            cur = ""
    return out


def build_stage(instrs):
    """The instructions of the stage that runs `cargo build`."""
    stages, cur = [], None
    for kw, rest in instrs:
        if kw == "FROM":
            cur = []
            stages.append(cur)
        elif cur is not None:
            cur.append((kw, rest))
    for st in stages:
        if any(kw == "RUN" and "cargo build" in rest for kw, rest in st):
            return st
    fail(f"no stage of {CONTAINERFILE} runs `cargo build`")


def pattern_regex(pat):
    """A dockerignore pattern (Go filepath.Match plus `**`) as a regex on slash paths."""
    out, i = "", 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**", i):
            out += ".*"
            i += 2
            if i < len(pat) and pat[i] == "/":
                i += 1
                out += "/?" if out.endswith(".*") else ""
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            j = pat.find("]", i)
            if j < 0:
                out += re.escape(c)
            else:
                cls = pat[i + 1 : j].replace("\\", "\\\\")
                if cls.startswith("^") or cls.startswith("!"):
                    cls = "^" + cls[1:]
                out += f"[{cls}]"
                i = j
        else:
            out += re.escape(c)
        i += 1
    return re.compile(f"^{out}$")


def ignore_rules(path):
    rules = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            neg = s.startswith("!")
            if neg:
                s = s[1:].strip()
            s = os.path.normpath(s).lstrip("/")
            rules.append((neg, pattern_regex(s)))
    return rules


def excluded(rel, rules):
    """Last matching rule wins; a rule matching any parent directory matches the file."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    verdict = False
    for neg, rx in rules:
        if any(rx.match(p) for p in prefixes):
            verdict = not neg
    return verdict


def context_files():
    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
        ).stdout.decode()
        names = set(out.split("\0"))
    except (OSError, subprocess.CalledProcessError):
        # Not a git checkout (a source tarball): every file except target/ and .git/.
        names = set()
        for d, dirs, fs in os.walk(ROOT):
            dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(d, x), ROOT) not in ("target", ".git")]
            names.update(os.path.relpath(os.path.join(d, f), ROOT) for f in fs)
    rules = ignore_rules(IGNOREFILE)
    return sorted(
        f for f in names if f and os.path.isfile(os.path.join(ROOT, f)) and not excluded(f, rules)
    )


def copy_stage(stage, files, dest_root):
    workdir = "/"
    copied = 0
    for kw, rest in stage:
        if kw == "WORKDIR":
            workdir = os.path.join(workdir, rest)
            continue
        if kw != "COPY":
            continue
        args = shlex.split(rest)
        if any(a.startswith("--from") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        if len(args) < 2:
            fail(f"cannot read COPY {rest}")
        *srcs, dest = args
        dest_abs = os.path.join(workdir, dest)
        for src in srcs:
            src = os.path.normpath(src).lstrip("/")
            rx = pattern_regex(src)
            hits = [f for f in files if rx.match(f) or f.startswith(src + "/")]
            if not hits:
                fail(
                    f"COPY {src}: not in the build context "
                    f"(missing, or excluded by {os.path.relpath(IGNOREFILE, ROOT)})"
                )
            for f in hits:
                if f.startswith(src + "/"):  # a directory: its contents go under dest
                    rel = os.path.join(dest_abs, f[len(src) + 1 :])
                elif dest.endswith("/") or len(srcs) > 1:
                    rel = os.path.join(dest_abs, os.path.basename(f))
                else:
                    rel = dest_abs
                target = os.path.join(dest_root, rel.lstrip("/"))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(os.path.join(ROOT, f), target)
                copied += 1
    return workdir, copied


def cargo_command(stage):
    for kw, rest in stage:
        if kw == "RUN" and "cargo build" in rest:
            cmd = re.search(r"cargo build[^&;|]*", rest).group(0)
            argv = shlex.split(cmd)
            out, skip = [], False
            for a in argv:
                if skip:
                    skip = False
                    continue
                if a == "--target":
                    skip = True
                    continue
                if a == "--release" or a.startswith("--target="):
                    continue
                out.append(a)
            if "--locked" not in out:
                out.append("--locked")
            return out
    fail("no `cargo build` RUN line")


def main():
    keep = "--keep" in sys.argv[1:]
    stage = build_stage(instructions(CONTAINERFILE))
    files = context_files()
    tmp = tempfile.mkdtemp(prefix="guardian-context-check-")
    try:
        workdir, copied = copy_stage(stage, files, tmp)
        src = os.path.join(tmp, workdir.lstrip("/"))
        argv = cargo_command(stage)
        print(
            f"context-check: {len(files)} files in the build context, {copied} copied by the build "
            f"stage's COPY lines; running `{' '.join(argv)}` in {src} (only those files)",
            flush=True,
        )
        env = dict(os.environ, CARGO_TARGET_DIR=TARGET_DIR, CARGO_TERM_COLOR="never")
        rc = subprocess.run(argv, cwd=src, env=env).returncode
        if rc != 0:
            fail(
                f"the build stage's cargo build fails with only the files its COPY lines take "
                f"(exit {rc}): add the missing path to a COPY line of "
                f"{os.path.relpath(CONTAINERFILE, ROOT)} and admit it in "
                f"{os.path.relpath(IGNOREFILE, ROOT)}"
            )
        print("context-check: the build stage holds every file the build needs")
    finally:
        if keep:
            print(f"context-check: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
