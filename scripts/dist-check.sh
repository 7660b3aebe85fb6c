#!/usr/bin/env bash
# `make dist-check`: each ecosystem's own pre-publish check on what `make dist` put in
# $DIST_DIR (default dist/), and the one version everywhere. Installs what it needs through the
# ecosystems' own clients: twine into a venv (pip), lintian (apt-get) when missing.
#
#   versions  scripts/check-names.py (every manifest: the one version, license, repository,
#             description, keywords, rust-version / engines / requires-python, classifiers) and
#             every artefact's file name and embedded version
#   crates    cargo publish --dry-run, the three crates in dependency order (treeguardian-spec,
#             treeguardian, treeguardian-client); cargo builds each from its packaged sources,
#             the later ones against the earlier ones' packages
#   npm       npm publish --dry-run of each tarball, and npm pack's contents: exactly the files
#             each package.json lists, the binary executable
#   python    twine check --strict on the wheels and the sdist
#   deb       lintian (tags allowed below, each with why)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TERM_COLOR=never
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
out=$(abs "${DIST_DIR:-dist}")
CARGO_TARGET_DIR=$(abs "${CARGO_TARGET_DIR:-target}")
export CARGO_TARGET_DIR
work=$CARGO_TARGET_DIR/dist-check
fails=0
say() { printf 'dist-check: %s\n' "$*"; }
fail() { printf 'dist-check: FAIL: %s\n' "$*" >&2; fails=$((fails + 1)); }
step() { printf '\n== dist-check: %s (%s)\n' "$*" "$(date +%T)"; }
[ -s "$out/SHA256SUMS" ] || { echo "dist-check: $out/SHA256SUMS missing: run make dist first" >&2; exit 1; }
mkdir -p "$work"

step "SHA256SUMS"
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the files"

step "one version (scripts/check-names.py) and in every artefact"
python3 scripts/check-names.py >/dev/null || fail "scripts/check-names.py (above)"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
while read -r _ f; do
    case $f in
        SKIPPED) ;;
        bin/guardian-"$version"-*|python/treeguardian-"$version"-py3-none-*.whl|sdist/treeguardian-"$version".tar.gz) ;;
        npm/treeguardian-"$version".tgz|npm/treeguardian-linux-*-"$version".tgz) ;;
        crates/treeguardian-"$version".crate|crates/treeguardian-spec-"$version".crate|crates/treeguardian-client-"$version".crate) ;;
        deb/guardian_"$version"-*_*.deb|deb/guardian_"$version"_*.deb|container/guardian-"$version"-image.tar) ;;
        *) fail "$f: not an artefact of version $version" ;;
    esac
done <"$out/SHA256SUMS"
for b in "$out"/bin/guardian-*; do
    case $b in *"$(uname -m)"*) ;; *) continue ;; esac
    v=$("$b" --version)
    case $v in "guardian $version ("*" "*")") say "$(basename "$b") --version: $v" ;; *) fail "$b --version: '$v'" ;; esac
done
for c in treeguardian-spec treeguardian treeguardian-client; do
    [ -f "$out/crates/$c-$version.crate" ] || fail "crates/$c-$version.crate missing"
done

step "crates: cargo publish --dry-run, in dependency order"
dirty=""
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=--allow-dirty
# shellcheck disable=SC2086
if ! cargo publish --dry-run --locked $dirty -p treeguardian-spec -p treeguardian -p treeguardian-client; then
    fail "cargo publish --dry-run"
fi
# What was checked is what dist/ holds.
for c in treeguardian-spec treeguardian treeguardian-client; do
    cmp -s "$CARGO_TARGET_DIR/package/$c-$version.crate" "$out/crates/$c-$version.crate" ||
        fail "crates/$c-$version.crate differs from what cargo publish --dry-run checked (run make dist again)"
done

step "npm: npm publish --dry-run and npm pack contents"
for t in "$out"/npm/*.tgz; do
    name=$(basename "$t" .tgz)
    # Every file in the tarball is one package.json's "files" names (a name ending in / is a
    # folder: every file below it), and every name there brought at least one file.
    got=$(tar -tzf "$t" | LC_ALL=C sort)
    why=$(tar -xzOf "$t" package/package.json | GOT="$got" node -e '
        const p = JSON.parse(require("fs").readFileSync(0, "utf8"));
        const names = [...p.files, "package.json"].map((f) => "package/" + f);
        const got = process.env.GOT.split("\n").filter(Boolean);
        const covers = (n, f) => (n.endsWith("/") ? f.startsWith(n) : f === n);
        const stray = got.filter((f) => !names.some((n) => covers(n, f)));
        const empty = names.filter((n) => !got.some((f) => covers(n, f)));
        if (stray.length) console.log(`holds files package.json does not list: ${stray.join(" ")}`);
        if (empty.length) console.log(`package.json lists what the tarball lacks: ${empty.join(" ")}`);')
    [ -z "$why" ] || fail "$name: $why"
    if tar -tzf "$t" | grep -qx package/bin/guardian; then
        mode=$(tar -tvzf "$t" package/bin/guardian | cut -c1-10)
        [ "$mode" = "-rwxr-xr-x" ] || fail "$name: bin/guardian is $mode, not executable"
    fi
    if (cd "$work" && npm publish --dry-run --tag dist-check "$t" >"$work/npm-$name.log" 2>&1); then
        say "$name: npm publish --dry-run ok"
    else
        cat "$work/npm-$name.log" >&2; fail "$name: npm publish --dry-run"
    fi
done

step "python: twine check --strict"
if [ ! -x "$work/venv/bin/twine" ]; then
    python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install -q twine
fi
"$work/venv/bin/twine" check --strict "$out"/python/*.whl "$out"/sdist/*.tar.gz || fail "twine check"

step "deb: lintian"
if ! command -v lintian >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian >/dev/null
fi
# Allowed, each with why (every other error or warning fails):
#   statically-linked-binary, shared-library-lacks-prerequisites: guardian is static on purpose
#     (one stays resident per provider: its private memory is the cost; it runs in any root
#     filesystem, as PID 1 of a container too). The x86_64 build is a static-pie (ET_DYN with no
#     interpreter, for ASLR), which lintian takes for a shared library; the aarch64 one is a
#     plain static executable;
#   empty-field (Depends): the static binary depends on nothing, and cargo-deb still writes the
#     field, empty;
#   no-changelog: cargo-deb writes no Debian changelog (CHANGELOG.md is the project's; the
#     package is not built from a Debian source package);
#   copyright-not-using-common-license-for-apache2: the copyright file is LICENSE as the project
#     ships it (MIT or Apache-2.0, both texts); the common-licenses reference is an archive rule.
allow=statically-linked-binary,shared-library-lacks-prerequisites,empty-field,no-changelog,copyright-not-using-common-license-for-apache2
for d in "$out"/deb/*.deb; do
    if lintian --fail-on error,warning --suppress-tags "$allow" --tag-display-limit 0 "$d"; then
        say "$(basename "$d"): lintian ok"
    else
        fail "$(basename "$d"): lintian (tags above; fix them or allow one in scripts/dist-check.sh with why)"
    fi
done

echo
if [ "$fails" -gt 0 ]; then
    echo "dist-check: $fails check(s) failed" >&2
    exit 1
fi
echo "dist-check: every check passed ($out, treeguardian $version)"
