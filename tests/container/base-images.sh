#!/usr/bin/env bash
# Local base images for packaging/container/Containerfile, for a host without an image registry
# (CI reaches only crates.io, PyPI, npm and Debian apt). Made from scratch with debootstrap and
# `podman import`; kept in podman's storage, so a second run reuses them.
#   RUN_IMAGE   (stands in for debian:bookworm-slim): debootstrap --variant=minbase bookworm.
#   BUILD_IMAGE (stands in for rust:1-bookworm): the same rootfs plus gcc and libc6-dev (the
#               linker driver cargo calls), with this host's rustup toolchain copied into
#               /usr/local/rustup (docs left out) and the musl target added to that copy, laid
#               out like the official image (RUSTUP_HOME, CARGO_HOME, PATH); the Containerfile's
#               `rustup target add` then finds the target installed. It trusts the host's
#               local CAs (/usr/local/share/ca-certificates) for crates.io behind a proxy.
# Prints the two tags as shell assignments on its last two lines (BUILD_IMAGE=..., RUN_IMAGE=...).
# Needs root, debootstrap, podman; CONTAINERS_CONF as tests/container/run.sh sets it.
set -euo pipefail
say() { printf 'base-images: %s\n' "$*" >&2; }
die() { printf 'base-images: FAIL: %s\n' "$*" >&2; exit 1; }

mirror=${GUARDIAN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
sysroot=$(rustc --print sysroot) || die "no rustc on PATH"
toolchain=$(basename "$sysroot")
rustc_version=$(rustc -V | awk '{print $2}')
host=$(rustc -vV | sed -n 's/^host: //p')
musl=${host/-gnu/-musl}
RUN_IMAGE=${GUARDIAN_RUN_IMAGE:-localhost/guardian-ci/debian:bookworm-minbase}
BUILD_IMAGE=${GUARDIAN_BUILD_IMAGE:-localhost/guardian-ci/rust:$rustc_version-bookworm}

work=$(mktemp -d /var/tmp/guardian-base-images.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

rootfs() { # a minbase bookworm rootfs in $work/rootfs: from RUN_IMAGE when present, else debootstrap
    mkdir -p "$work/rootfs"
    if podman image exists "$RUN_IMAGE"; then
        local c
        c=$(podman create "$RUN_IMAGE" true)
        timeout 600 podman export "$c" | tar -C "$work/rootfs" -x
        podman rm -f "$c" >/dev/null
        return
    fi
    command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"
    say "debootstrap --variant=minbase bookworm from $mirror"
    timeout 900 debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
}

if podman image exists "$RUN_IMAGE"; then
    say "$RUN_IMAGE: present in podman's storage"
else
    rootfs
    say "podman import -> $RUN_IMAGE"
    # PATH as debian:bookworm-slim sets it: podman run supplies a default, kube play does not.
    tar -C "$work/rootfs" -c . | timeout 600 podman import \
        --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD=["bash"]' - "$RUN_IMAGE" >/dev/null
fi

if podman image exists "$BUILD_IMAGE"; then
    say "$BUILD_IMAGE: present in podman's storage"
else
    [ -d "$work/rootfs/usr" ] || rootfs
    r=$work/rootfs
    say "gcc and libc6-dev into the rootfs (chroot apt-get)"
    cp /etc/resolv.conf "$r/etc/resolv.conf"
    # The build stage fetches crates from crates.io: trust the local CAs this host trusts (a
    # TLS-inspecting proxy's, for one); update-ca-certificates below adds them to the bundle.
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
        mkdir -p "$r/usr/local/share/ca-certificates"
        cp /usr/local/share/ca-certificates/*.crt "$r/usr/local/share/ca-certificates/"
    fi
    timeout 600 chroot "$r" sh -c 'apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev ca-certificates >/dev/null &&
        update-ca-certificates >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*' || die "apt-get install gcc libc6-dev in the rootfs failed"
    say "this host's toolchain $toolchain (rustc $rustc_version) into /usr/local/rustup, without docs"
    mkdir -p "$r/usr/local/rustup/toolchains" "$r/usr/local/cargo/bin"
    tar -C "$(dirname "$sysroot")" -c --exclude="$toolchain/share/doc" "$toolchain" | tar -C "$r/usr/local/rustup/toolchains" -x
    printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\nauto_self_update = "disable"\n\n[overrides]\n' \
        "$toolchain" >"$r/usr/local/rustup/settings.toml"
    rustup_bin=$(command -v rustup) || die "no rustup on PATH"
    install -m 0755 "$(realpath "$rustup_bin")" "$r/usr/local/cargo/bin/rustup"
    for p in cargo rustc rustdoc cargo-fmt rustfmt cargo-clippy clippy-driver; do
        ln -sf rustup "$r/usr/local/cargo/bin/$p"
    done
    if [ ! -d "$r/usr/local/rustup/toolchains/$toolchain/lib/rustlib/$musl" ]; then
        say "rustup target add $musl (into the copy only)"
        RUSTUP_HOME=$r/usr/local/rustup CARGO_HOME=$r/usr/local/cargo timeout 600 \
            "$r/usr/local/cargo/bin/rustup" target add --toolchain "$toolchain" "$musl" >&2 ||
            die "rustup target add $musl failed (static.rust-lang.org unreachable?)"
    fi
    rm -rf "$r/usr/local/rustup/downloads" "$r/usr/local/rustup/tmp"
    say "podman import -> $BUILD_IMAGE"
    tar -C "$r" -c . | timeout 600 podman import \
        --change 'ENV=RUSTUP_HOME=/usr/local/rustup' \
        --change 'ENV=CARGO_HOME=/usr/local/cargo' \
        --change 'ENV=PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD=["bash"]' - "$BUILD_IMAGE" >/dev/null
fi
echo "BUILD_IMAGE=$BUILD_IMAGE"
echo "RUN_IMAGE=$RUN_IMAGE"
