#!/usr/bin/env bash
# `make dist`: every artefact of a release, built from this checkout into one folder, $DIST_DIR
# (default dist/):
#
#   bin/guardian-VERSION-ARCH-linux-musl     static binaries, x86_64 and aarch64 (reproducible)
#   python/treeguardian-VERSION-py3-none-*.whl   the platform wheels (pip's --find-links folder)
#   sdist/treeguardian-VERSION.tar.gz        the sdist, apart: it only refuses to build (its
#                                            backend names the platforms), so `pip install
#                                            dist/python/*` is never handed it
#   npm/treeguardian-*.tgz                   the driver and its platform packages
#   crates/treeguardian*-VERSION.crate       `cargo package` of the three crates
#   deb/guardian_VERSION_ARCH.deb            the Debian package of each static binary
#   container/guardian-VERSION-image.tar     `podman save` of the Containerfile's image (only
#                                            where podman is installed)
#   SHA256SUMS                               of every file above
#   SKIPPED                                  what this machine could not build, and why
#
# Nothing reaches outside the package registries: `cargo fetch --locked` once, then the binaries
# build with --frozen; a rustup target that is not installed is never added (its artefacts are
# listed in SKIPPED with the command that adds it; the host's binary falls back to static glibc,
# said there too). Installs cargo-deb (cargo install --locked) when missing.
# `make dist-check` checks the result with each ecosystem's own pre-publish check.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TERM_COLOR=never
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
out=$(abs "${DIST_DIR:-dist}")
CARGO_TARGET_DIR=$(abs "${CARGO_TARGET_DIR:-target}")
export CARGO_TARGET_DIR
say() { printf 'dist: %s\n' "$*" >&2; }
step() { printf '\n== dist: %s (%s)\n' "$*" "$(date +%T)" >&2; }

python3 scripts/check-names.py >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
# One commit for every build (build.rs): the same text in the binaries, the wheels and the image.
GUARDIAN_COMMIT=${GUARDIAN_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export GUARDIAN_COMMIT
dirty=""
if [ "$GUARDIAN_COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    dirty=--allow-dirty
    say "the checkout has uncommitted changes: the artefacts are not those of commit $GUARDIAN_COMMIT (fine for a test, not for a release)"
fi
say "treeguardian $version, commit $GUARDIAN_COMMIT, into $out"
rm -rf "$out"
mkdir -p "$out"/{bin,python,sdist,npm,crates,deb}
: >"$out/SKIPPED"
skipped() { printf '%s\n' "$*" >>"$out/SKIPPED"; say "SKIPPED: $*"; }

step "cargo fetch --locked (the only step that may download crates); builds then run --frozen"
cargo fetch --locked
export CARGO_FLAGS=--frozen

step "static binaries (scripts/build-static.sh)"
host=$(uname -m)
built=()
for arch in x86_64 aarch64; do
    fb=""
    [ "$arch" = "$host" ] && fb=--glibc-fallback
    rc=0
    bin=$(sh scripts/build-static.sh "$arch" $fb 2>"$out/.build-$arch.log") || rc=$?
    if [ $rc = 3 ]; then
        skipped "$arch: $(grep -o 'the rustup target.*' "$out/.build-$arch.log" | head -n1)"
        rm -f "$out/.build-$arch.log"
        continue
    fi
    [ $rc = 0 ] || { cat "$out/.build-$arch.log" >&2; exit $rc; }
    if grep -q 'building the fallback' "$out/.build-$arch.log"; then
        skipped "$arch musl: $(grep -o 'the rustup target.*' "$out/.build-$arch.log" | head -n1) (bin/ holds the static glibc build instead)"
    fi
    rm -f "$out/.build-$arch.log"
    triple=$(basename "$(dirname "$(dirname "$bin")")")
    install -m 0755 "$bin" "$out/bin/guardian-$version-${triple/-unknown/}"
    built+=("$triple")
    say "bin/guardian-$version-${triple/-unknown/}: $("$bin" --version 2>/dev/null || echo "(not runnable here)")"
done
[ "${#built[@]}" -gt 0 ] || { say "no binary could be built" ; exit 1; }

step "Python wheels (packaging/python/build-wheels.sh) and the sdist"
sh packaging/python/build-wheels.sh "$out/python" >&2
mv "$out"/python/treeguardian-*.tar.gz "$out/sdist/"

step "npm tarballs (packaging/npm/build-packages.sh)"
OUT="$out/npm" sh packaging/npm/build-packages.sh >&2
for platform in x64 arm64; do
    [ -e "$out/npm/treeguardian-linux-$platform-$version.tgz" ] || skipped "npm treeguardian-linux-$platform: no binary for it (above)"
done

step "crates (cargo package, in dependency order: treeguardian-spec, treeguardian, treeguardian-client)"
# Packaged together, cargo resolves the unpublished treeguardian-spec from the packages it made
# (a local overlay registry). Verified (built from the .crate) by make dist-check.
# shellcheck disable=SC2086
cargo package --locked --no-verify $dirty -p treeguardian-spec -p treeguardian -p treeguardian-client >&2
for c in treeguardian-spec treeguardian treeguardian-client; do
    cp "$CARGO_TARGET_DIR/package/$c-$version.crate" "$out/crates/"
done

step "Debian packages (cargo deb --no-build, of each static binary)"
if ! cargo deb --version >/dev/null 2>&1; then
    say "installing cargo-deb (cargo install cargo-deb --locked; about 4 minutes on 2 cores)"
    cargo install cargo-deb --locked >&2
fi
for triple in "${built[@]}"; do
    # Already stripped (the release profile); the binary build-static.sh made, not a new one.
    cargo deb --package treeguardian --variant static --no-build --no-strip --target "$triple" --output "$out/deb/" >&2
done

step "container image (podman save)"
if command -v podman >/dev/null 2>&1; then
    mkdir -p "$out/container"
    # Local base images (no image registry reachable in CI), as make container-test builds them.
    eval "$(nice -n 10 tests/container/base-images.sh | tail -n 2)"
    tag="localhost/guardian:$version"
    podman build -q -f packaging/container/Containerfile --ignorefile packaging/container/Containerfile.dockerignore \
        --build-arg "BUILD_IMAGE=$BUILD_IMAGE" --build-arg "RUN_IMAGE=$RUN_IMAGE" \
        --build-arg "GUARDIAN_COMMIT=$GUARDIAN_COMMIT" -t "$tag" . >&2
    podman save --format oci-archive -o "$out/container/guardian-$version-image.tar" "$tag" >&2
else
    skipped "container image: podman is not installed (apt-get install podman)"
fi

step "SHA256SUMS"
sums=$(cd "$out" && find . -type f ! -name SHA256SUMS ! -name SKIPPED | sed 's#^\./##' | LC_ALL=C sort | xargs sha256sum)
printf '%s\n' "$sums" >"$out/SHA256SUMS"
cat "$out/SHA256SUMS"
[ -s "$out/SKIPPED" ] && { echo "dist: SKIPPED on this machine:"; sed 's/^/  /' "$out/SKIPPED"; }
echo "dist: $out (treeguardian $version, commit $GUARDIAN_COMMIT)"
