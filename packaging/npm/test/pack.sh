#!/bin/sh
# The install proof: `npm pack` treeguardian and this host's platform
# package (platforms/linux-<arch>, built by build-packages.sh / `make
# npm-packages`), install both tarballs into an empty directory, offline, with
# no guardian on PATH and no GUARDIAN_BIN, and run a provider through the
# installed module under Node and under Bun (support/pack-smoke.mjs).
#
#   sh test/pack.sh [BUN]
#
# Prints `pack: N passed, N failed` last. Without the built binary the check
# is skipped (exit 0, reason printed), except under CI=true where it fails.
set -u
npmdir=$(cd "$(dirname "$0")/.." && pwd)
bun=${1:-}
case $(uname -m) in
  x86_64) dir=linux-x64 ;;
  aarch64 | arm64) dir=linux-arm64 ;;
  *) echo "pack: SKIPPED: no platform package for $(uname -m)"; echo "pack: 0 passed, 0 failed"; exit 0 ;;
esac
if [ ! -x "$npmdir/platforms/$dir/bin/guardian" ]; then
  if [ "${CI:-}" = true ]; then
    echo "pack: platforms/$dir/bin/guardian is missing; run 'make npm-packages' first"
    echo "pack: 0 passed, 1 failed"
    exit 1
  fi
  echo "pack: SKIPPED: platforms/$dir/bin/guardian is not built (make npm-packages)"
  echo "pack: 0 passed, 0 failed"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "pack: ok: $*"; }
ko() { fail=$((fail + 1)); echo "pack: FAILED: $*"; }

# PATH for everything below: node's directory and the system's, which must not
# hold a guardian (else the proof would prove nothing).
nodedir=$(dirname "$(command -v node)")
cleanpath="$nodedir:/usr/bin:/bin"
if env PATH="$cleanpath" sh -c 'command -v guardian' >/dev/null 2>&1; then
  ko "a guardian is on PATH ($cleanpath); cannot prove the install brings its own"
fi

(cd "$npmdir" && npm pack --silent --pack-destination "$tmp" >/dev/null) &&
  (cd "$npmdir/platforms/$dir" && npm pack --silent --pack-destination "$tmp" >/dev/null) ||
  { ko "npm pack"; echo "pack: $pass passed, $fail failed"; exit 1; }
ls "$tmp"/*.tgz | sed 's/^/pack: tarball /'
for t in "$tmp"/*.tgz; do
  tar -tzf "$t" | grep -q '^package/package.json$' || ko "$t has no package.json"
done
tar -tzf "$tmp/treeguardian-$dir-"*.tgz | grep -qx 'package/bin/guardian' || ko "the $dir tarball has no bin/guardian"
for f in index.js index.d.ts lib/child.js lib/spec.js lib/spec.d.ts scripts/check-install.cjs README.md; do
  tar -tzf "$tmp"/treeguardian-0*.tgz | grep -qx "package/$f" || ko "the treeguardian tarball has no $f (package.json files)"
done

# The install check (scripts/check-install.cjs): treeguardian without this platform's package
# fails at npm install, naming the package to add; GUARDIAN_BIN is the escape hatch.
alone=$tmp/alone
mkdir -p "$alone"
printf '{ "name": "guardian-pack-alone", "private": true }\n' >"$alone/package.json"
if (cd "$alone" && env -u GUARDIAN_BIN PATH="$cleanpath" npm install --offline --cache "$tmp/cache-alone" \
      --no-audit --no-fund "$tmp"/treeguardian-0*.tgz >"$tmp/alone.log" 2>&1); then
  ko "npm install of treeguardian without treeguardian-$dir succeeded; it must fail at install time"
elif grep -q "npm install treeguardian-$dir@" "$tmp/alone.log"; then
  ok "npm install without treeguardian-$dir fails and names it"
else
  ko "npm install without treeguardian-$dir failed without naming it:"; sed 's/^/  /' "$tmp/alone.log"
fi
rm -rf "$alone/node_modules" "$alone/package-lock.json"
if (cd "$alone" && env GUARDIAN_BIN="$npmdir/platforms/$dir/bin/guardian" PATH="$cleanpath" npm install --offline \
      --cache "$tmp/cache-alone" --no-audit --no-fund "$tmp"/treeguardian-0*.tgz >"$tmp/alone2.log" 2>&1); then
  ok "npm install without treeguardian-$dir passes with GUARDIAN_BIN set"
else
  ko "npm install with GUARDIAN_BIN set failed:"; sed 's/^/  /' "$tmp/alone2.log"
fi

proj=$tmp/project
mkdir -p "$proj"
printf '{ "name": "guardian-pack-smoke", "private": true, "type": "module" }\n' >"$proj/package.json"
cp "$npmdir/support/pack-smoke.mjs" "$proj/smoke.mjs"
# --offline with an empty cache: nothing comes from a registry. The other
# platform's optional dependency cannot be fetched and is skipped, as npm does
# for any optional dependency that does not apply.
if (cd "$proj" && env -u GUARDIAN_BIN PATH="$cleanpath" npm install --offline --cache "$tmp/cache" \
      --no-audit --no-fund "$tmp"/treeguardian-0*.tgz "$tmp/treeguardian-$dir-"*.tgz >"$tmp/install.log" 2>&1); then
  ok "npm install of the tarballs into an empty directory"
else
  ko "npm install of the tarballs:"; sed 's/^/  /' "$tmp/install.log"
fi
[ -x "$proj/node_modules/treeguardian-$dir/bin/guardian" ] && ok "node_modules/treeguardian-$dir/bin/guardian is executable" ||
  ko "node_modules/treeguardian-$dir/bin/guardian is missing"

run() { # run NAME RUNTIME
  if out=$(cd "$proj" && env -u GUARDIAN_BIN PATH="$cleanpath" "$2" smoke.mjs 2>&1); then
    ok "$1: $(echo "$out" | tail -1)"
  else
    ko "$1:"; echo "$out" | sed 's/^/  /'
  fi
}
run "node $(node --version)" "$(command -v node)"
if [ -n "$bun" ] && [ -x "$bun" ]; then
  run "bun $("$bun" --version)" "$bun"
else
  ko "bun is not available for the Bun run"
fi
# treeguardian-mcp from the installed tarball: its bin wraps a config with the guardian of the
# platform package, by absolute path (no GUARDIAN_BIN, no guardian on PATH; python3 from /usr/bin).
printf '{"mcpServers": {"s": {"command": "npx", "args": ["x"]}}}\n' >"$proj/.mcp.json"
if out=$(cd "$proj" && env -u GUARDIAN_BIN PATH="$cleanpath" ./node_modules/.bin/treeguardian-mcp wrap .mcp.json 2>&1) &&
   grep -qF "\"command\": \"$proj/node_modules/treeguardian-$dir/bin/guardian\"" "$proj/.mcp.json"; then
  ok "treeguardian-mcp wrap (the installed bin) wrote the platform package's guardian"
else
  ko "treeguardian-mcp wrap (the installed bin):"; echo "$out" | sed 's/^/  /'; sed 's/^/  /' "$proj/.mcp.json"
fi
echo "pack: $pass passed, $fail failed"
[ "$fail" = 0 ]
