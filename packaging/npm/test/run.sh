#!/bin/sh
# Run the driver's tests with Node (node --test) and with Bun (bun test), both
# against the guardian binary named by $GUARDIAN_BIN, then type-check
# test/types/usage.ts with `tsc --strict` and run the packed-tarball install
# proof (test/pack.sh). Exits non-zero when anything fails. The devDependencies
# (bun, @modelcontextprotocol/sdk, typescript, @types/node) are installed here
# with `npm install --no-save`; when bun cannot be installed the Bun run is
# skipped with the reason printed (a failure under CI=true).
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

bun=$npmdir/node_modules/.bin/bun
bun_ok() { [ -x "$bun" ] && "$bun" --version >/dev/null 2>&1; }
deps_ok() {
  bun_ok && [ -x node_modules/.bin/tsc ] && [ -f node_modules/@modelcontextprotocol/sdk/package.json ] &&
    [ -f node_modules/@types/node/package.json ]
}
if ! deps_ok; then
  echo "== installing the devDependencies (npm install --no-save)"
  npm install --no-save --no-audit --no-fund >"$out/npm.log" 2>&1 || tail -20 "$out/npm.log"
  # npm may hold back the package's postinstall; it only places the binary.
  if ! bun_ok && [ -f node_modules/bun/install.js ]; then
    node node_modules/bun/install.js >>"$out/npm.log" 2>&1
  fi
fi

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

bun_pass=0 bun_fail=0
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
  if [ "${CI:-}" = true ]; then bun_fail=1; status=1; fi
fi

# tsc --strict on an idiomatic usage example (and @ts-expect-error lines that
# must stay errors), against index.d.ts and the SDK's own types.
types_pass=0 types_fail=0
echo "== tsc --strict test/types/usage.ts"
if [ -x node_modules/.bin/tsc ] && node_modules/.bin/tsc --version &&
   node_modules/.bin/tsc -p test/types/tsconfig.json; then
  types_pass=1
  echo "types: ok"
else
  types_fail=1
  status=1
  echo "types: FAILED (tsc missing or errors above)"
fi

# npm pack + install into an empty directory + a provider under Node and Bun.
echo "== packed tarballs in an empty directory (test/pack.sh)"
sh test/pack.sh "$bun" >"$out/pack.log" 2>&1
pack_rc=$?
cat "$out/pack.log"
pack_pass=$(sed -n 's/^pack: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$out/pack.log" | tail -1)
pack_fail=$(sed -n 's/^pack: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$out/pack.log" | tail -1)
if [ "$pack_rc" != 0 ] || [ -z "$pack_pass" ]; then
  status=1
  [ "${pack_fail:-0}" = 0 ] && pack_fail=1
fi

total_pass=$(( ${node_pass:-0} + ${bun_pass:-0} + types_pass + ${pack_pass:-0} ))
total_fail=$(( ${node_fail:-0} + ${node_cancel:-0} + ${bun_fail:-0} + types_fail + ${pack_fail:-0} ))
[ "$status" != 0 ] && [ "$total_fail" = 0 ] && total_fail=1
echo "npm-driver: $total_pass passed, $total_fail failed"
exit $status
