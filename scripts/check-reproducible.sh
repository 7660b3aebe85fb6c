#!/usr/bin/env bash
# The shipped binaries are reproducible: HEAD, cloned into two directories of different names
# and depths, each built with scripts/build-static.sh into its own target directory, gives
# byte-identical binaries for every architecture this machine builds (x86_64 and aarch64 musl;
# the host's static glibc fallback when its musl target is not installed). Exit 1 naming the
# architecture whose hashes differ. Run by CI (.ci/run) after make dist.
#
# The first build uses the default target directory (target/ in its clone) and cargo's home; the
# second sets CARGO_TARGET_DIR to a directory outside its clone (and builds the host's binary
# through `make release`, so a build that ignores CARGO_TARGET_DIR fails here too) and another
# CARGO_HOME (whose registry is a link to the first's: nothing is downloaded), as on another
# user's machine: the paths of the dependencies' sources must not reach the binary either.
#
# Environment: REPRO_DIR (default: a new directory under $TMPDIR, removed afterwards).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TERM_COLOR=never
work=${REPRO_DIR:-$(mktemp -d)}
[ -n "${REPRO_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
commit=$(git -C "$root" rev-parse HEAD)
say() { printf 'check-reproducible: %s\n' "$*"; }
say "commit $commit, in $work"

# Fetch once (the clones share cargo's registry); the builds then run --frozen.
(cd "$root" && cargo fetch --locked)
dirs=("$work/a" "$work/second-build/with/a/longer/path")
home2=$work/other-cargo-home
mkdir -p "$home2"
ln -sfn "${CARGO_HOME:-$HOME/.cargo}/registry" "$home2/registry"
host=$(uname -m)
for d in "${dirs[@]}"; do
    rm -rf "$d"
    mkdir -p "$(dirname "$d")"
    git clone -q --shared --no-checkout "$root" "$d"
    git -C "$d" checkout -q --detach "$commit"
done
fails=0 compared=0
for arch in x86_64 aarch64; do
    fb=""
    [ "$arch" = "$host" ] && fb=--glibc-fallback
    sums=()
    for d in "${dirs[@]}"; do
        rc=0
        if [ "$d" = "${dirs[0]}" ]; then
            bin=$(cd "$d" && env -u CARGO_TARGET_DIR CARGO_FLAGS=--frozen nice -n 10 sh scripts/build-static.sh "$arch" $fb) || rc=$?
        elif [ "$arch" = "$host" ]; then
            # make release, CARGO_TARGET_DIR outside the clone: the binary must be where it says.
            out=$(cd "$d" && CARGO_HOME=$home2 CARGO_FLAGS=--frozen CARGO_TARGET_DIR="$work/elsewhere" nice -n 10 make --no-print-directory release) || rc=$?
            bin=$work/elsewhere/dist/guardian
            [ $rc != 0 ] || [ "$out" = "release: $bin" ] || { say "make release: '$out', expected 'release: $bin'" >&2; exit 1; }
        else
            bin=$(cd "$d" && CARGO_HOME=$home2 CARGO_FLAGS=--frozen CARGO_TARGET_DIR="$work/elsewhere" nice -n 10 sh scripts/build-static.sh "$arch" $fb) || rc=$?
        fi
        if [ $rc = 3 ]; then
            say "SKIPPED $arch (reason above)"
            continue 2
        fi
        [ $rc = 0 ] || exit $rc
        sums+=("$(sha256sum <"$bin" | cut -d' ' -f1)")
    done
    compared=$((compared + 1))
    if [ "${sums[0]}" = "${sums[1]}" ]; then
        say "$arch: identical (${sums[0]})"
    else
        say "$arch: DIFFERENT: ${sums[0]} in ${dirs[0]}, ${sums[1]} in ${dirs[1]}" >&2
        fails=$((fails + 1))
    fi
done
[ "$compared" -gt 0 ] || { say "nothing was built" >&2; exit 1; }
[ "$fails" = 0 ] || exit 1
say "$compared architecture(s) reproducible"
