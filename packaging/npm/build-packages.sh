#!/bin/sh
# Builds the platform packages of treeguardian (the esbuild/biome/swc
# convention: one package per platform, selected by npm through `os`/`cpu`):
#
#   platforms/linux-x64/bin/guardian    x86_64-unknown-linux-musl, static
#   platforms/linux-arm64/bin/guardian  aarch64-unknown-linux-musl, static
#
# and packs them with treeguardian into $OUT (default target/npm/ at the
# repository root). Each binary's ELF header is checked (machine, no
# interpreter). The host's platform must build; another one is cross-linked
# with rust-lld (shipped with rustup, no C cross toolchain needed) and skipped
# with the reason printed when its target cannot be added.
#
# Usage: sh packaging/npm/build-packages.sh [--no-pack]
set -eu
npmdir=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$npmdir/../.." && pwd)
OUT=${OUT:-$root/target/npm}
CARGO=${CARGO:-cargo}
pack=1
[ "${1:-}" = "--no-pack" ] && pack=0

host=$(uname -m)
version=$(node -p "require('$npmdir/package.json').version")
built=""

build() { # build TRIPLE DIR MACHINE
  triple=$1 dir=$2 machine=$3
  case $triple in "$host"-*) native=1 ;; *) native=0 ;; esac
  if ! rustup target list --installed 2>/dev/null | grep -qx "$triple" &&
     ! timeout 180 rustup target add "$triple" >/dev/null 2>&1; then
    if [ $native = 1 ]; then
      # The explicit fallback (as `make release` does): static glibc, also a static-pie that
      # runs on any distribution.
      gnu=$(echo "$triple" | sed 's/-musl$/-gnu/')
      echo "build-packages: the rustup target $triple cannot be added; building $dir as static glibc ($gnu, crt-static) instead"
      (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" $CARGO build --release --package treeguardian --target "$gnu")
      finish "$root/target/$gnu/release/guardian" "$dir" "$machine"
      return 0
    fi
    echo "build-packages: SKIPPED $dir: the rustup target $triple cannot be added here"
    return 0
  fi
  if [ $native = 1 ]; then
    (cd "$root" && $CARGO build --release --package treeguardian --target "$triple")
  else
    # Cross-link with the rust-lld that rustup ships; musl targets need no C code.
    var=$(echo "$triple" | tr 'a-z-' 'A-Z_')
    if ! (cd "$root" && env "CARGO_TARGET_${var}_LINKER=rust-lld" "CARGO_TARGET_${var}_RUSTFLAGS=-C linker-flavor=ld.lld" \
      $CARGO build --release --package treeguardian --target "$triple"); then
      echo "build-packages: SKIPPED $dir: cross-building $triple with rust-lld failed (output above)"
      return 0
    fi
  fi
  finish "$root/target/$triple/release/guardian" "$dir" "$machine"
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

build x86_64-unknown-linux-musl linux-x64 x86_64
build aarch64-unknown-linux-musl linux-arm64 aarch64
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
