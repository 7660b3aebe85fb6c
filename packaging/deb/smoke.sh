#!/usr/bin/env bash
# Debian package smoke test, run by CI as root: builds the .deb with cargo-deb, installs it
# with dpkg -i, checks `guardian --version`, `man guardian` and a real provider tree torn
# down by the installed binary, then removes the package. Idempotent: it installs cargo-deb
# and man-db only when missing, and removes the package again even when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf 'deb-smoke: %s\n' "$*"; }
die() { printf 'deb-smoke: FAIL: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (dpkg -i); run it in CI or under sudo"

if ! command -v man >/dev/null || ! dpkg -s man-db >/dev/null 2>&1; then
    say "installing man-db"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq man-db >/dev/null
fi
if ! command -v cargo-deb >/dev/null && ! cargo deb --version >/dev/null 2>&1; then
    say "installing cargo-deb (cargo install cargo-deb --locked; about 4 minutes on 2 cores)"
    start=$(date +%s)
    cargo install cargo-deb --locked
    say "cargo-deb installed in $(( $(date +%s) - start ))s"
fi

say "building the package"
target_dir=${CARGO_TARGET_DIR:-target}
rm -f "$target_dir"/debian/guardian_*.deb
make deb
deb=$(ls "$target_dir"/debian/guardian_*.deb)
say "built $deb ($(stat -c %s "$deb") bytes)"

installed=0
cleanup() {
    if [ "$installed" = 1 ]; then
        dpkg -r guardian >/dev/null 2>&1 || true
    fi
    [ -n "${work:-}" ] && rm -rf "$work"
}
trap cleanup EXIT
work=$(mktemp -d)

# --path-include: Debian container images often exclude /usr/share/man from dpkg.
dpkg -i --path-include='/usr/share/man/man1/guardian.1.gz' "$deb" >/dev/null
installed=1
say "installed: $(dpkg-query -W -f='${Package} ${Version}' guardian)"

want="guardian $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
got=$(/usr/bin/guardian --version)
# `guardian VERSION (COMMIT TARGET)`
case "$got" in "$want ("*" "*")") ;; *) die "guardian --version printed '$got', expected '$want (COMMIT TARGET)'" ;; esac
say "guardian --version: $got"

page=$(man -w guardian) || die "man -w guardian found no page"
case "$page" in /usr/share/man/man1/guardian.1*) ;; *) die "man guardian resolves to $page" ;; esac
MANWIDTH=80 man guardian 2>"$work/man.err" | grep -q '^EXIT STATUS' || die "man guardian has no EXIT STATUS section"
[ ! -s "$work/man.err" ] || die "man guardian warned: $(cat "$work/man.err")"
say "man guardian: $page renders"

for f in /usr/share/bash-completion/completions/guardian /usr/share/zsh/vendor-completions/_guardian \
         /usr/share/fish/vendor_completions.d/guardian.fish; do
    [ -s "$f" ] || die "missing completion file $f"
done
bash -c 'source /usr/share/bash-completion/completions/guardian && complete -p guardian' >/dev/null \
    || die "the bash completion does not load"

# A real tree: the provider starts a setsid, environment-clearing orphan tagged with a nonce,
# waits until the orphan runs (its environ shows the tag), and exits at once. guardian must
# stop and reap it before it exits.
nonce="deb-smoke-$$-$(date +%s%N)"
# Pids whose environment carries the nonce (grep -s: processes come and go during the scan).
tagged() {
    grep -l -s -a -F "GUARDIAN_SMOKE=$nonce" /proc/[0-9]*/environ | sed 's#^/proc/\([0-9]*\)/environ$#\1#' || true
}
/usr/bin/guardian --grace 2s --events-fd 3 -- sh -c '
    setsid env -i "GUARDIAN_SMOKE=$1" sleep 1000 &
    p=$!
    end=$(( $(date +%s) + 10 ))
    until tr "\0" "\n" 2>/dev/null <"/proc/$p/environ" | grep -qx "GUARDIAN_SMOKE=$1"; do
        [ "$(date +%s)" -lt "$end" ] || { echo "orphan never started" >&2; exit 3; }
    done
    echo "$p" >"$2"
    exit 7' provider "$nonce" "$work/orphan.pid" 3>"$work/events.jsonl" && status=0 || status=$?
[ "$status" = 7 ] || die "guardian exited $status, expected the provider's 7; events: $(cat "$work/events.jsonl")"
[ -s "$work/orphan.pid" ] || die "the provider never saw its orphan start"
left=$(tagged)
[ -z "$left" ] || { kill -KILL $left 2>/dev/null || true; die "tagged orphan(s) $left survived guardian"; }
grep -q '"event":"released"' "$work/events.jsonl" || die "no released event: $(cat "$work/events.jsonl")"
grep '"event":"released"' "$work/events.jsonl" | grep -q '"signalled":[1-9]' \
    || die "released does not count the orphan: $(grep released "$work/events.jsonl")"
say "tree torn down: orphan $(cat "$work/orphan.pid") gone, $(grep -o '"teardown_ms":[0-9.]*' "$work/events.jsonl")"

dpkg -r guardian >/dev/null
installed=0
[ ! -e /usr/bin/guardian ] || die "/usr/bin/guardian is still there after dpkg -r"
say "removed; all checks passed"
