#!/bin/sh
# Builds treeguardian's wheels: the static musl guardian for x86_64 and aarch64 (from
# scripts/build-static.sh: reproducible, the other architecture cross-linked with rust-lld),
# each ELF-checked and placed as the wheel's script, plus the sdist. Output: $1 (default:
# wheels/ in the cargo target directory, $CARGO_TARGET_DIR or target/). An architecture whose
# rustup target is not installed is skipped, naming the command that adds it; the host's own
# falls back to static glibc. This script never adds a rustup target.
set -eu
pydir=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$pydir/../.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
case $target_dir in /*) ;; *) target_dir=$(pwd)/$target_dir ;; esac
export CARGO_TARGET_DIR="$target_dir"
out=${1:-$target_dir/wheels}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
host=$(uname -m)
rm -f "$out"/treeguardian-*.whl "$out"/treeguardian-*.tar.gz
mkdir -p "$out"

for arch in x86_64 aarch64; do
  fb=""
  [ "$arch" = "$host" ] && fb=--glibc-fallback
  rc=0
  bin=$(sh "$root/scripts/build-static.sh" "$arch" $fb) || rc=$?
  if [ $rc = 3 ]; then
    echo "build-wheels: SKIPPED $arch (reason above)"
    continue
  fi
  [ $rc = 0 ] || exit $rc
  python3 "$pydir/build_backend/treeguardian_build.py" wheel --binary "$bin" --arch "$arch" --out "$out"
done
python3 "$pydir/build_backend/treeguardian_build.py" sdist --out "$out"
ls -l "$out"
