#!/usr/bin/env bash
# `make dist-install-check`: a new user with only the dist/ folder ($DIST_DIR) installs each
# package the way the READMEs' "Install" sections say (the local commands that stand in for the
# registries until the packages are published), into an empty venv, an empty npm project and an
# empty cargo project, and runs the README's example in each, with a provider that leaves a
# setsid orphan behind (tagged with a nonce in its argv): the example must end with the orphan
# gone. Nothing from the source tree is used: the work happens in a fresh directory, with dist/
# copied there first. Needs network only for the registries (crates.io for the client's own
# dependencies). Leaves nothing running, even when a step fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
src=$(abs "${DIST_DIR:-dist}")
[ -s "$src/SHA256SUMS" ] || { echo "dist-install-check: $src/SHA256SUMS missing: run make dist first" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
work=$(mktemp -d /tmp/dist-install-check.XXXXXX)
# The orphan's argv is unique: sleep's duration carries the nonce in its decimals.
nonce="1000.$$$(date +%s%N)"
fails=0
say() { printf 'dist-install-check: %s\n' "$*"; }
fail() { printf 'dist-install-check: FAIL: %s\n' "$*" >&2; fails=$((fails + 1)); }
step() { printf '\n== dist-install-check: %s (%s)\n' "$*" "$(date +%T)"; }
# Processes whose argv carries the nonce (the orphans the examples' providers leave behind).
tagged() {
    local p c
    for p in /proc/[0-9]*; do
        { c=$(tr '\0' ' ' <"$p/cmdline"); } 2>/dev/null || continue
        case $c in "sleep $nonce"*) echo "${p#/proc/}" ;; esac
    done
}
cleanup() {
    for p in $(tagged); do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
# The provider every example runs: a setsid orphan (sleep, its argv tagged), then exit.
provider="setsid sleep $nonce & echo provider done"
no_orphans() { # no_orphans WHAT
    local left
    left=$(tagged)
    if [ -n "$left" ]; then fail "$1: left running: $left"; else say "$1: no process left behind"; fi
}

cp -r "$src" "$work/dist"
cd "$work"
(cd dist && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS"
arch=$(uname -m)
npm_arch=${arch/x86_64/x64}
npm_arch=${npm_arch/aarch64/arm64}

step "Python: pip install --no-index --find-links dist/python treeguardian (empty venv)"
python3 -m venv venv
if venv/bin/pip install -q --no-index --find-links dist/python treeguardian; then
    PATH="$work/venv/bin:$PATH" guardian --version | grep -q "^guardian $version (" || fail "venv guardian --version"
    # The README's first example (packaging/python/README.md), with this provider.
    cat >example.py <<EOF
import subprocess
import treeguardian

with treeguardian.Popen(["sh", "-c", "$provider"], stdout=subprocess.PIPE, grace=5, timeout="30m") as p:
    print(p.guardian_pid, p.wait_spawned(10).pid)   # guardian's pid, the provider's
    print(p.stdout.read().decode().strip())
print(p.returncode, p.outcome, p.released)          # leaving the block stops the tree and waits
assert p.returncode == 0, p.returncode
assert p.released is not None and p.released.reaped >= 1, p.released
EOF
    # No guardian on PATH but the venv's (not activated: the driver finds the wheel's binary).
    if env -u GUARDIAN_BIN PATH=/usr/bin:/bin venv/bin/python example.py; then say "Python example ran"; else fail "Python example"; fi
    no_orphans "Python example"
else
    fail "pip install from dist/python"
fi

step "npm: npm install of the tarballs (empty project)"
mkdir npmproj
(cd npmproj && npm init -y >/dev/null)
if [ ! -e "dist/npm/treeguardian-linux-$npm_arch-$version.tgz" ]; then
    fail "dist/npm has no treeguardian-linux-$npm_arch package for this machine"
elif (cd npmproj && npm install --no-audit --no-fund --loglevel=error \
        "../dist/npm/treeguardian-linux-$npm_arch-$version.tgz" "../dist/npm/treeguardian-$version.tgz"); then
    # The README's first example (packaging/npm/README.md), with this provider.
    cat >npmproj/example.mjs <<EOF
import { spawnGuarded } from 'treeguardian';

const g = spawnGuarded('sh', ['-c', '$provider'], { grace: '2s', stdio: ['pipe', 'pipe', 'inherit'] });
const spawned = await g.spawned;
console.log('provider', g.providerPid, 'under guardian', g.guardianPid, 'version', spawned.version);
const released = await g.stop({ timeout: 5000 });
console.log(released);
if (released.reaped < 1) throw new Error('nothing reaped');
EOF
    if (cd npmproj && env -u GUARDIAN_BIN PATH=/usr/bin:/bin node example.mjs); then say "npm example ran"; else fail "npm example"; fi
    no_orphans "npm example"
else
    fail "npm install of dist/npm tarballs"
fi

step "Rust: cargo install of the treeguardian .crate, and treeguardian-client in an empty cargo project"
mkdir crates
for c in dist/crates/*.crate; do tar -xzf "$c" -C crates; done
# Until published: the unpacked crates stand in for crates.io's (the README's local commands).
patch="patch.crates-io.treeguardian-spec.path=\"$work/crates/treeguardian-spec-$version\""
if cargo install --quiet --locked --path "crates/treeguardian-$version" --root "$work/cargo-root" --config "$patch"; then
    "$work/cargo-root/bin/guardian" --version | grep -q "^guardian $version (" || fail "cargo install: guardian --version"
else
    fail "cargo install --path crates/treeguardian-$version"
fi
cargo new --quiet demo
# The patch first: cargo add resolves the client's treeguardian-spec dependency at once.
printf '\n[patch.crates-io]\ntreeguardian-spec = { path = "../crates/treeguardian-spec-%s" }\n' "$version" >>demo/Cargo.toml
(cd demo && cargo add --quiet treeguardian-client --path "../crates/treeguardian-client-$version") || fail "cargo add treeguardian-client"
(
    cd demo
    # The README's first example (crates/client/README.md: the drop-in for std's Command), with
    # this provider.
    cat >src/main.rs <<EOF
use std::process::Stdio;
use treeguardian_client::Command; // was: use std::process::Command;

fn main() -> std::io::Result<()> {
    let mut child = Command::new("sh").args(["-c", "$provider"]).stdout(Stdio::piped()).spawn()?;
    let status = child.wait()?; // the provider's status, once its whole tree is gone
    println!("{status}; descendants reaped: {:?}", child.released().map(|r| r.reaped));
    assert!(status.success(), "{status}");
    assert!(child.released().is_some_and(|r| r.reaped >= 1), "nothing reaped");
    Ok(())
}
EOF
) || fail "cargo project setup"
if (cd demo && RUSTFLAGS="-D warnings" cargo build --quiet 2>&1) &&
    (cd demo && GUARDIAN_BIN="$work/cargo-root/bin/guardian" ./target/debug/demo); then
    say "Rust example ran"
else
    fail "Rust example (build with -D warnings, or run)"
fi
no_orphans "Rust example"

echo
[ "$fails" = 0 ] || { echo "dist-install-check: $fails step(s) failed" >&2; exit 1; }
echo "dist-install-check: Python, npm and Rust installed from dist/ alone and ran their examples"
