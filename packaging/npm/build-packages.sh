#!/bin/sh
# Builds the platform packages of treeguardian (the esbuild/biome/swc
# convention: one package per platform, selected by npm through `os`/`cpu`):
#
#   platforms/linux-x64/bin/guardian    x86_64-unknown-linux-musl, static
#   platforms/linux-arm64/bin/guardian  aarch64-unknown-linux-musl, static
#
# and packs them with treeguardian into $OUT (default: npm/ in the cargo target
# directory, $CARGO_TARGET_DIR or target/). Each binary's ELF header is checked
# (machine, no interpreter). The binaries come from scripts/build-static.sh
# (reproducible; the other architecture cross-linked with rust-lld). The host's
# platform must build (static glibc when the musl target is not installed); the
# other one is skipped, naming `rustup target add ...`, when its target is not
# installed. This script never adds a rustup target.
#
# Usage: sh packaging/npm/build-packages.sh [--no-pack]
set -eu
npmdir=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$npmdir/../.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
case $target_dir in /*) ;; *) target_dir=$(pwd)/$target_dir ;; esac
export CARGO_TARGET_DIR="$target_dir"
OUT=${OUT:-$target_dir/npm}
pack=1
[ "${1:-}" = "--no-pack" ] && pack=0

host=$(uname -m)
version=$(node -p "require('$npmdir/package.json').version")
built=""

build() { # build ARCH DIR: scripts/build-static.sh (the host's arch falls back to static glibc)
  arch=$1 dir=$2
  fb=""
  [ "$arch" = "$host" ] && fb=--glibc-fallback
  rc=0
  bin=$(sh "$root/scripts/build-static.sh" "$arch" $fb) || rc=$?
  if [ $rc = 3 ]; then
    echo "build-packages: SKIPPED $dir (reason above)"
    return 0
  fi
  [ $rc = 0 ] || exit $rc
  finish "$bin" "$dir" "$arch"
}

finish() { # finish BINARY DIR MACHINE: check, place, record
  bin=$1 dir=$2 machine=$3
  node "$npmdir/support/check-elf.mjs" "$bin" "$machine"
  install -D -m 0755 "$bin" "$npmdir/platforms/$dir/bin/guardian"
  pv=$(node -p "require('$npmdir/platforms/$dir/package.json').version")
  if [ "$pv" != "$version" ]; then
    echo "build-packages: platforms/$dir/package.json has version $pv, treeguardian has $version" >&2
    exit 1
  fi
  built="$built $dir"
}

build x86_64 linux-x64
build aarch64 linux-arm64
echo "build-packages: built:$built"

if [ $pack = 1 ]; then
  mkdir -p "$OUT"
  rm -f "$OUT"/guardian-driver-*.tgz
  (cd "$npmdir" && npm pack --silent --pack-destination "$OUT" >/dev/null)
  for dir in $built; do
    (cd "$npmdir/platforms/$dir" && npm pack --silent --pack-destination "$OUT" >/dev/null)
  done
  ls -l "$OUT"/*.tgz
fi
