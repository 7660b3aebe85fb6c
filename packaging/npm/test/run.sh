#!/bin/sh
# Run the driver's tests with Node (node --test) and with Bun (bun test), both
# against the guardian binary named by $GUARDIAN_BIN. Exits non-zero when any
# test fails in either runtime. Bun comes from the npm package `bun`, installed
# here with --no-save; when it cannot be installed the Bun run is skipped with
# the reason printed.
set -u
npmdir=$(cd "$(dirname "$0")/.." && pwd)
cd "$npmdir" || exit 2

if [ -z "${GUARDIAN_BIN:-}" ]; then
  echo "run.sh: GUARDIAN_BIN is not set; point it at the guardian binary" >&2
  exit 2
fi
case $GUARDIAN_BIN in
  /*) ;;
  */*) GUARDIAN_BIN=$(cd "$OLDPWD" && cd "$(dirname "$GUARDIAN_BIN")" && pwd)/$(basename "$GUARDIAN_BIN") ;;
  *) GUARDIAN_BIN=$(command -v "$GUARDIAN_BIN" || echo "$GUARDIAN_BIN") ;;
esac
if [ ! -x "$GUARDIAN_BIN" ]; then
  echo "run.sh: GUARDIAN_BIN=$GUARDIAN_BIN is not an executable file" >&2
  exit 2
fi
export GUARDIAN_BIN

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0

echo "== node $(node --version): node --test test/ (GUARDIAN_BIN=$GUARDIAN_BIN)"
node --test test/ 2>&1 | tee "$out/node.log"
# POSIX sh has no pipefail: read node's verdict from its summary instead.
node_pass=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$out/node.log" | tail -1)
node_fail=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$out/node.log" | tail -1)
node_cancel=$(sed -n 's/^# cancelled \([0-9]*\)$/\1/p' "$out/node.log" | tail -1)
if [ -z "$node_pass" ] || [ "${node_fail:-1}" != 0 ] || [ "${node_cancel:-0}" != 0 ]; then
  echo "run.sh: node run failed (pass=${node_pass:-?} fail=${node_fail:-?} cancelled=${node_cancel:-?})"
  status=1
fi

bun=$npmdir/node_modules/.bin/bun
bun_ok() { [ -x "$bun" ] && "$bun" --version >/dev/null 2>&1; }
bun_pass=0 bun_fail=0
if ! bun_ok; then
  echo "== installing bun (npm install --no-save bun)"
  npm install --no-save --no-audit --no-fund bun >"$out/npm.log" 2>&1
  # npm may hold back the package's postinstall; it only places the binary.
  if ! bun_ok && [ -f node_modules/bun/install.js ]; then
    node node_modules/bun/install.js >>"$out/npm.log" 2>&1
  fi
fi
if bun_ok; then
  echo "== bun $("$bun" --version): bun test ./test/"
  "$bun" test --timeout 120000 ./test/ >"$out/bun.log" 2>&1
  bun_rc=$?
  cat "$out/bun.log"
  bun_pass=$(sed -n 's/^ *\([0-9][0-9]*\) pass$/\1/p' "$out/bun.log" | tail -1)
  bun_fail=$(sed -n 's/^ *\([0-9][0-9]*\) fail$/\1/p' "$out/bun.log" | tail -1)
  if [ "$bun_rc" != 0 ] || [ -z "$bun_pass" ] || [ "${bun_fail:-0}" != 0 ]; then
    echo "run.sh: bun run failed (exit $bun_rc, pass=${bun_pass:-?} fail=${bun_fail:-?})"
    status=1
  fi
else
  echo "run.sh: SKIPPED the Bun run: bun could not be installed from npm:"
  tail -5 "$out/npm.log" 2>/dev/null | sed 's/^/  /'
fi

total_pass=$(( ${node_pass:-0} + ${bun_pass:-0} ))
total_fail=$(( ${node_fail:-0} + ${node_cancel:-0} + ${bun_fail:-0} ))
[ "$status" != 0 ] && [ "$total_fail" = 0 ] && total_fail=1
echo "npm-driver: $total_pass passed, $total_fail failed"
exit $status
