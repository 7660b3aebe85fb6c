#!/bin/sh
# The one way a shipped guardian binary is built (make release, make dist, the npm platform
# packages, the Python wheels): the static musl guardian for ARCH (x86_64 or aarch64), release
# profile, reproducible, into the cargo target directory ($CARGO_TARGET_DIR, else target/).
#
#   sh scripts/build-static.sh ARCH [--glibc-fallback]
#
# Prints the binary's path on stdout (cargo's output goes to stderr) and exits 0. The host's
# architecture builds natively; the other one is cross-linked with rust-lld (shipped with rustup:
# musl needs no C cross toolchain).
#
# Never reaches outside the package registries: a rustup target that is not installed is never
# added here. Without it the script names the one command that adds it and exits 3, except with
# --glibc-fallback for the host's own architecture, where it builds the explicit fallback
# instead (static glibc, crt-static, also a static-pie) and says so on stderr.
#
# Reproducible: the same commit built in two directories gives the same bytes. The paths that
# reach the binary (panic locations: the checkout, cargo's registry, the target directory) are
# remapped to fixed names; the release profile already has codegen-units = 1 and strip; the
# version's commit comes from GUARDIAN_COMMIT or git, never a timestamp (build.rs).
# scripts/check-reproducible.sh checks it.
#
# CARGO_FLAGS (default --locked) is passed to cargo build: `make dist` fetches once and then
# builds with --frozen (no network).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
arch=${1:?usage: build-static.sh x86_64|aarch64 [--glibc-fallback]}
fallback=${2:-}
CARGO=${CARGO:-cargo}
CARGO_FLAGS=${CARGO_FLAGS:---locked}
case $arch in x86_64 | aarch64) ;; *) echo "build-static: unknown architecture '$arch' (x86_64 or aarch64)" >&2; exit 2 ;; esac

# A relative CARGO_TARGET_DIR is relative to the caller's directory, as cargo run there would take it.
target_dir=${CARGO_TARGET_DIR:-$root/target}
case $target_dir in /*) ;; *) target_dir=$(pwd)/$target_dir ;; esac
cargo_home=${CARGO_HOME:-$HOME/.cargo}

triple=$arch-unknown-linux-musl
host=$(uname -m)
sep=$(printf '\037')
# Later remaps win in rustc: the target directory may lie inside the checkout.
flags="--remap-path-prefix=$root=/guardian$sep--remap-path-prefix=$cargo_home=/cargo$sep--remap-path-prefix=$target_dir=/target"

# Installed = its standard library is in the toolchain's sysroot (rustup or not).
if [ ! -d "$(rustc --print sysroot)/lib/rustlib/$triple/lib" ]; then
    if [ "$arch" = "$host" ] && [ "$fallback" = "--glibc-fallback" ]; then
        triple=$arch-unknown-linux-gnu
        echo "build-static: the rustup target $arch-unknown-linux-musl is not installed (add it with: rustup target add $arch-unknown-linux-musl); building the fallback, static glibc ($triple, crt-static)" >&2
        flags="$flags$sep-C${sep}target-feature=+crt-static"
    else
        echo "build-static: SKIPPED $arch: the rustup target $triple is not installed; add it with: rustup target add $triple" >&2
        exit 3
    fi
fi

var=$(echo "$triple" | tr 'a-z-' 'A-Z_')
if [ "$arch" != "$host" ]; then
    # Cross-link with the rust-lld that rustup ships.
    export "CARGO_TARGET_${var}_LINKER=rust-lld"
    flags="$flags$sep-C${sep}linker-flavor=ld.lld"
fi
# --target keeps these flags away from build scripts and proc-macros (they stay dynamic).
# shellcheck disable=SC2086
(cd "$root" && CARGO_ENCODED_RUSTFLAGS=$flags CARGO_TARGET_DIR=$target_dir \
    $CARGO build $CARGO_FLAGS --release --package treeguardian --target "$triple" >&2)
echo "$target_dir/$triple/release/guardian"
