#!/usr/bin/env bash
# PID-1 smoke test without a container engine (fast; .ci/ecosystem): runs guardian
# as PID 1 of a new PID namespace with `unshare --pid --fork --mount-proc`, as the
# Containerfile's ENTRYPOINT would, and checks that
#   1. an orphan that exits on its own is reaped by guardian (no zombie is left under PID 1),
#   2. a setsid, environment-clearing orphan still running when the provider exits is
#      stopped, and nothing tagged with this run's nonce survives (checked in the host /proc),
#   3. the provider's exit status, and 128+N for a provider killed by signal N, propagate.
# The same behaviour under a real engine (podman, the image built from the Containerfile,
# podman stop/kill, kube play) is checked by tests/container/run.sh (make container-test).
# Needs root (unshare). GUARDIAN_BIN picks the binary (default: target/release/guardian,
# built if missing). Idempotent; leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf 'pid1-smoke: %s\n' "$*"; }
die() { printf 'pid1-smoke: FAIL: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (unshare --pid)"
command -v unshare >/dev/null || die "needs unshare (util-linux)"
bin=${GUARDIAN_BIN:-target/release/guardian}
if [ -z "${GUARDIAN_BIN:-}" ] && [ ! -x "$bin" ]; then
    cargo build --release --package treeguardian
fi
bin=$(realpath "$bin")
work=$(mktemp -d)
nonce="pid1-smoke-$$-$(date +%s%N)"
tagged() {
    grep -l -s -a -F "GUARDIAN_SMOKE=$nonce" /proc/[0-9]*/environ | sed 's#^/proc/\([0-9]*\)/environ$#\1#' || true
}
cleanup() {
    local left
    left=$(tagged)
    [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The provider (sh, PID 2 in the namespace):
#  - starts a double-forked orphan that exits at once and waits until it is gone from /proc
#    (reaped by PID 1, not left a zombie);
#  - starts a setsid, env-clearing orphan tagged with the nonce and waits until it runs;
#  - exits 7 at once.
provider='
    set -e
    [ "$(cat /proc/1/comm)" = guardian ] || { echo "PID 1 is $(cat /proc/1/comm), not guardian" >&2; exit 90; }
    deadline() { [ "$(date +%s)" -lt "$end" ]; }
    end=$(( $(date +%s) + 20 ))
    ( sh -c "echo \$\$ > $2/short.pid; exit 0" & )
    until [ -s "$2/short.pid" ]; do deadline || exit 91; done
    short=$(cat "$2/short.pid")
    while [ -e "/proc/$short" ]; do deadline || { echo "orphan $short not reaped: $(cat /proc/$short/stat)" >&2; exit 92; }; done
    setsid env -i "GUARDIAN_SMOKE=$1" sleep 1000 &
    p=$!
    until tr "\0" "\n" 2>/dev/null <"/proc/$p/environ" | grep -qx "GUARDIAN_SMOKE=$1"; do deadline || exit 93; done
    echo "$p" > "$2/long.pid"
    exit 7'
status=0
unshare --pid --fork --mount-proc "$bin" --grace 2s --events-fd 3 -- sh -c "$provider" provider "$nonce" "$work" \
    3>"$work/events.jsonl" || status=$?
events=$(cat "$work/events.jsonl")
[ "$status" = 7 ] || die "exit status $status, expected the provider's 7; events: $events"
grep -q '"event":"spawned".*"guardian_pid":1,"mode":"pid1"' <<<"$events" || die "guardian did not run as PID 1: $events"
[ -s "$work/long.pid" ] || die "the provider never saw its orphan start"
left=$(tagged)
[ -z "$left" ] || die "tagged orphan(s) $left survived guardian as PID 1"
grep -q '"event":"released","ts":[0-9.]*,"status":7' <<<"$events" || die "no released with status 7: $events"
say "PID 1: orphan reaped while the provider ran, setsid orphan stopped, status 7 propagated"

status=0
unshare --pid --fork --mount-proc "$bin" --grace 1s -- sh -c 'kill -TERM $$' || status=$?
[ "$status" = 143 ] || die "provider killed by SIGTERM: exit status $status, expected 143"
status=0
unshare --pid --fork --mount-proc "$bin" -- /nonexistent/command 2>/dev/null || status=$?
[ "$status" = 127 ] || die "missing command: exit status $status, expected 127"
say "PID 1: 143 for a provider killed by SIGTERM, 127 for a missing command; all checks passed"
