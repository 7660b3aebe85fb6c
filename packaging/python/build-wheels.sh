#!/bin/sh
# Builds treeguardian's wheels: the static musl guardian for x86_64 and aarch64 (the host's
# natively, the other cross-linked with rust-lld, shipped with rustup: no C cross toolchain),
# each ELF-checked and placed as the wheel's script, plus the sdist. Output: $1 (target/wheels).
# A target whose rustup target cannot be added is skipped with the reason printed; the host's
# own must build.
set -eu
pydir=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$pydir/../.." && pwd)
out=${1:-$root/target/wheels}
case $out in /*) ;; *) out=$root/$out ;; esac
CARGO=${CARGO:-cargo}
host=$(uname -m)
rm -f "$out"/treeguardian-*.whl "$out"/treeguardian-*.tar.gz
mkdir -p "$out"

for arch in x86_64 aarch64; do
  triple=$arch-unknown-linux-musl
  if ! rustup target list --installed 2>/dev/null | grep -qx "$triple" &&
     ! timeout 180 rustup target add "$triple" >/dev/null 2>&1; then
    if [ "$arch" = "$host" ]; then
      echo "build-wheels: the rustup target $triple cannot be added; the host's wheel needs it" >&2
      exit 1
    fi
    echo "build-wheels: SKIPPED $arch: the rustup target $triple cannot be added here"
    continue
  fi
  if [ "$arch" = "$host" ]; then
    (cd "$root" && $CARGO build --release --package treeguardian --target "$triple")
  else
    var=$(echo "$triple" | tr 'a-z-' 'A-Z_')
    (cd "$root" && env "CARGO_TARGET_${var}_LINKER=rust-lld" "CARGO_TARGET_${var}_RUSTFLAGS=-C linker-flavor=ld.lld" \
      $CARGO build --release --package treeguardian --target "$triple")
  fi
  python3 "$pydir/build_backend/treeguardian_build.py" wheel \
    --binary "$root/target/$triple/release/guardian" --arch "$arch" --out "$out"
done
python3 "$pydir/build_backend/treeguardian_build.py" sdist --out "$out"
ls -l "$out"
