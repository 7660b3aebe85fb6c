#!/bin/sh
# The Python driver's CI lane: everything from PyPI into fresh venvs, the wheels from $1
# (target/wheels, made by `make wheels`), nothing from the source tree on sys.path.
#  1. an empty venv gets only the wheel: `guardian` is on the venv's PATH and nowhere else,
#     and runs a provider; `python -m treeguardian` too; the sdist refuses to build, naming why;
#  2. pytest under the current mcp 2.x and under mcp 1.30.0 (the last 1.x), with two real
#     servers from PyPI (mcp-server-time, mcp-server-git) in a venv of their own;
#  3. mypy --strict on the package and on examples/usage.py.
# pytest's exit 5 (nothing collected) is a failure like any other non-zero status.
set -eu
pydir=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$pydir/../.." && pwd)
wheels=${1:-$root/target/wheels}
case $wheels in /*) ;; *) wheels=$root/$wheels ;; esac
work=${PYTHON_TEST_DIR:-$root/target/python-test}
MCP2=${MCP2:-mcp>=2,<3}
MCP1=${MCP1:-mcp==1.30.0}
PIP="pip install -q --disable-pip-version-check"
say() { printf '\n-- python: %s (%s)\n' "$1" "$(date +%T)"; }

rm -rf "$work" && mkdir -p "$work"
ls "$wheels"/treeguardian-*-py3-none-*"$(uname -m)"*.whl >/dev/null

say "an empty venv gets the wheel; guardian on its PATH only"
python3 -m venv "$work/empty"
# (pip through the venv's python: no script of the system's)
"$work/empty/bin/python" -m $PIP --no-index --find-links "$wheels" treeguardian
if PATH=/usr/local/bin:/usr/bin:/bin command -v guardian >/dev/null; then
  echo "python: a guardian is on the system PATH; this proof needs a machine without one" >&2; exit 1
fi
found=$(PATH="$work/empty/bin:/usr/bin:/bin" command -v guardian)
[ "$found" = "$work/empty/bin/guardian" ] || { echo "python: guardian on PATH is '$found'" >&2; exit 1; }
out=$(cd / && env -i PATH="$work/empty/bin:/usr/bin:/bin" guardian -- sh -c 'setsid sleep 1000 & echo provider ran')
[ "$out" = "provider ran" ] || { echo "python: the installed guardian did not run the provider: $out" >&2; exit 1; }
# A guardian from before 0.2.0 (its spawned event has no version: main before the version
# change) is accepted through the driver's test-only variable, said here; conftest.py does the
# same for pytest. A 0.2.0 binary needs neither.
gv=$("$work/empty/bin/guardian" --version | awk '{print $2}')
accept=
case $gv in 0.0.*|0.1.*) accept=TREEGUARDIAN_TEST_ACCEPT_GUARDIAN_VERSION=none
  echo "python: guardian $gv predates the version check: accepted for this run ($accept)" ;; esac
(cd / && env -i PATH=/usr/bin:/bin $accept "$work/empty/bin/python" - <<'PY')
import subprocess, treeguardian, os, sys
path = treeguardian.binary()
assert path == os.path.join(os.path.dirname(sys.executable), "guardian"), path
with treeguardian.Popen(["sh", "-c", "exit 7"]) as p:
    assert p.wait(30) == 7 and p.released is not None and p.released.status == 7
out = subprocess.run([sys.executable, "-m", "treeguardian", "--version"], capture_output=True, text=True).stdout
assert out.startswith("guardian "), out
print("python: installed wheel ok:", path, out.strip())
PY
say "pip takes each wheel on musl and glibc platforms (its own tag rules), and the binary needs no libc"
# No musl distribution's Python can be installed here (no image registry), so pip's resolver is
# given the platform tags such a host's pip offers (PEP 656 and 600: a musl 1.2 host takes
# musllinux_1_2 down to _1_0; a glibc 2.28 host manylinux_2_28 down to _2_17 and manylinux2014),
# and the binary is checked to be static: no ELF interpreter, so it runs on any libc.
for host in musl-1.1 musl-1.2 glibc-2.17 glibc-2.28; do
  for arch in x86_64 aarch64; do
    case $host in
      musl-1.1) plats="musllinux_1_1 musllinux_1_0" ;;
      musl-1.2) plats="musllinux_1_2 musllinux_1_1 musllinux_1_0" ;;
      glibc-2.17) plats="manylinux_2_17 manylinux2014" ;;
      glibc-2.28) plats="manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_25 manylinux_2_24 manylinux_2_17 manylinux2014" ;;
    esac
    flags=; for p in $plats; do flags="$flags --platform ${p}_$arch"; done
    # shellcheck disable=SC2086
    "$work/empty/bin/python" -m pip download -q --disable-pip-version-check --no-index --find-links "$wheels" \
      --only-binary=:all: $flags --python-version 3.12 -d "$work/platform-$host-$arch" treeguardian
    got=$(ls "$work/platform-$host-$arch")
    case $got in
      treeguardian-*-py3-none-*"$arch".whl) echo "python: a $host $arch host's pip takes $got" ;;
      *) echo "python: a $host $arch host's pip took '$got'" >&2; exit 1 ;;
    esac
  done
done
for whl in "$wheels"/treeguardian-*-py3-none-*.whl; do
  python3 - "$whl" <<'PY'
import struct, sys, zipfile
whl = sys.argv[1]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith("/scripts/guardian"))
    elf = z.read(name)
assert elf[:4] == b"\x7fELF" and elf[4] == 2, "not a 64-bit ELF"
phoff, = struct.unpack_from("<Q", elf, 0x20)
phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
types = [struct.unpack_from("<I", elf, phoff + i * phentsize)[0] for i in range(phnum)]
assert 3 not in types, f"{whl}: the guardian binary has an ELF interpreter (PT_INTERP): it is not static"
print(f"python: {whl.rsplit('/', 1)[-1]}: guardian is static (no PT_INTERP)")
PY
done

say "the sdist refuses to build, with the reason"
# (the sdist is not for pip's folder: it may sit beside the wheels or in a folder of its own)
sdist=$(ls "$wheels"/treeguardian-*.tar.gz "$wheels"/../sdist/treeguardian-*.tar.gz 2>/dev/null | head -1)
if "$work/empty/bin/python" -m $PIP --no-build-isolation "$sdist" >"$work/sdist.log" 2>&1; then
  echo "python: the sdist built a wheel; it must refuse" >&2; exit 1
fi
grep -q "no wheel fits this platform" "$work/sdist.log" || { cat "$work/sdist.log"; echo "python: the sdist's refusal lacks its message" >&2; exit 1; }
echo "python: sdist refused: $(grep -o 'no wheel fits this platform ([^)]*)' "$work/sdist.log" | head -1)"

say "the aarch64 wheel's guardian runs (qemu-user, from Debian's qemu-user-static, unpacked only)"
aarch=$(ls "$wheels"/treeguardian-*-py3-none-*aarch64*.whl)
mkdir -p "$work/qemu" "$work/aarch64"
(cd "$work/qemu" && { apt-get download qemu-user-static >/dev/null 2>&1 ||
  { apt-get update -qq && apt-get download qemu-user-static >/dev/null; }; } && dpkg -x qemu-user-static_*.deb x)
python3 -m zipfile -e "$aarch" "$work/aarch64"
chmod +x "$work"/aarch64/treeguardian-*.data/scripts/guardian
# qemu-user 7.2 refuses PR_SET_CHILD_SUBREAPER, so only the binary's start is proven here.
v=$("$work/qemu/x/usr/bin/qemu-aarch64-static" "$work"/aarch64/treeguardian-*.data/scripts/guardian --version)
case $v in "guardian "*) echo "python: aarch64 wheel: $v" ;; *) echo "python: the aarch64 guardian did not run: $v" >&2; exit 1 ;; esac

say "venvs: servers from PyPI, hosts with $MCP2 and $MCP1"
python3 -m venv "$work/servers" && "$work/servers/bin/python" -m $PIP mcp-server-time mcp-server-git &
python3 -m venv "$work/mcp2" && "$work/mcp2/bin/python" -m $PIP "$MCP2" pytest anyio trio mypy &
python3 -m venv "$work/mcp1" && "$work/mcp1/bin/python" -m $PIP "$MCP1" pytest anyio trio &
wait
for v in mcp2 mcp1; do
  "$work/$v/bin/python" -m $PIP --no-index --find-links "$wheels" treeguardian
  "$work/$v/bin/python" -c 'import mcp, importlib.metadata as m; print("python: venv", m.version("mcp"), "anyio", m.version("anyio"))'
done

status=0
for v in mcp2 mcp1; do
  say "pytest under $v"
  # From the test directory: the installed package is imported, not packaging/python's.
  (cd "$pydir/test" && TREEGUARDIAN_TEST_SERVERS_BIN="$work/servers/bin" \
    timeout 900 "$work/$v/bin/python" -m pytest -q -rxXs -p no:cacheprovider --durations=5 .) || { rc=$?; echo "python: pytest under $v: exit $rc" >&2; status=1; }
done

say "mypy --strict (the package, examples/usage.py, and examples/drop_in.py: the standard types accept the driver's)"
(cd "$pydir" && "$work/mcp2/bin/python" -m mypy --strict --cache-dir "$work/mypy-cache" treeguardian examples/usage.py examples/drop_in.py) || status=1
exit $status
