#!/bin/sh
# The Rust client (crates/client) builds without a warning under every combination of its
# features, as a user's build would see it (issue 31: no warning in a user's build under any
# feature combination). `cargo hack --feature-powerset check` does the same where cargo-hack is
# installed; this loop needs nothing but cargo. Cargo replays the warnings of crates it does not
# rebuild, so a warning is seen on every run. Usage: scripts/client-features.sh [cargo args...]
set -eu
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
features=$(sed -n '/^\[features\]/,/^\[/p' crates/client/Cargo.toml | sed -n 's/^\([a-z][a-z0-9_-]*\) = .*/\1/p' | grep -vx default)
set -- $features
n=$#
total=$((1 << n))
failed=0
i=0
while [ $i -lt $total ]; do
    combo=""
    j=0
    for f in $features; do
        if [ $(((i >> j) & 1)) -eq 1 ]; then combo="$combo${combo:+,}$f"; fi
        j=$((j + 1))
    done
    out=$($CARGO check --quiet --package treeguardian-client --no-default-features ${combo:+--features "$combo"} --lib 2>&1) || {
        echo "client-features: [${combo:-no features}] does not build:" >&2; echo "$out" >&2; failed=1; i=$((i + 1)); continue; }
    if printf '%s\n' "$out" | grep -q '^warning'; then
        echo "client-features: [${combo:-no features}] warns:" >&2; echo "$out" >&2; failed=1
    else
        echo "client-features: [${combo:-no features}] ok"
    fi
    i=$((i + 1))
done
[ $failed -eq 0 ] || { echo "client-features: a feature combination of treeguardian-client warns or fails (above)" >&2; exit 1; }
echo "client-features: all $total feature combinations build without a warning"
