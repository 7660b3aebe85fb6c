#!/usr/bin/env bash
# Soak test (not part of `make test`): many guardians over mixed providers, then checks that
# nothing leaked. Prints the figures recorded in docs/soak.md.
#
#   scripts/soak.sh [SEQUENTIAL=1000] [CONCURRENT=50]
#
# Environment: GUARDIAN (binary; default: target/release/guardian, built if missing),
# SOAK_CGROUP=1 to run every fourth sequential guardian with --cgroup auto (needs a
# delegated cgroup; `guardian doctor` says whether there is one).
#
# Every process the soak starts carries a nonce in its argv (`sleep 1000.<nonce>`); the leak
# check scans /proc for it, and the cleanup on exit kills survivors by PID (never by name).
set -uo pipefail

SEQ=${1:-1000}
CONC=${2:-50}
cd "$(dirname "$0")/.."
G=${GUARDIAN:-target/release/guardian}
if [ ! -x "$G" ]; then
    cargo build --release -q || exit 2
fi
NONCE=$(( (RANDOM << 15 | RANDOM) % 900000000 + 100000000 ))
S="sleep 1000.$NONCE"
WORK=$(mktemp -d)
trap 'cleanup' EXIT

tagged_pids() {
    # One grep over every cmdline; the bracket keeps grep's own argv from matching.
    grep -lsa "1000[.]$NONCE" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3
}
cleanup() {
    local p
    for p in $(tagged_pids); do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$WORK"
}

fail=0
note() { printf '%s\n' "$*"; }
bad() { printf 'FAIL: %s\n' "$*"; fail=$((fail + 1)); }

# --- providers: name, expected status, guardian options, script
provider() {
    case $1 in
        fast) echo "0|--grace 2s|exit 0" ;;
        orphan) echo "3|--grace 2s|setsid env -i $S & exit 3" ;;
        stubborn) echo "0|--grace 100ms|(trap '' TERM; $S) & (trap '' TERM; setsid $S) & exit 0" ;;
        burst) echo "0|--grace 2s|i=0; while [ \$i -lt 20 ]; do $S & i=\$((i+1)); done; exit 0" ;;
    esac
}
KINDS=(fast orphan stubborn burst)

cg_before=$(find /sys/fs/cgroup -maxdepth 6 -type d -name 'guardian-*' 2>/dev/null | wc -l)
zombies_before=$(awk '$3=="Z"' /proc/[0-9]*/stat 2>/dev/null | wc -l)

# --- 1. sequential
note "== $SEQ sequential guardians ($G, nonce $NONCE)"
start=$(date +%s.%N)
declare -A count
for i in $(seq 1 "$SEQ"); do
    kind=${KINDS[$((i % 4))]}
    IFS='|' read -r want opts script <<<"$(provider "$kind")"
    cg=""
    if [ "${SOAK_CGROUP:-0}" = 1 ] && [ $((i % 4)) = 1 ]; then cg="--cgroup auto"; fi
    # shellcheck disable=SC2086
    "$G" $opts $cg --events-fd 3 -- sh -c "$script" 3>"$WORK/ev" </dev/null >/dev/null 2>"$WORK/err"
    rc=$?
    count[$kind]=$(( ${count[$kind]:-0} + 1 ))
    if [ "$rc" != "$want" ]; then bad "run $i ($kind): status $rc, want $want: $(head -c 300 "$WORK/err")"; fi
    if [ "$(tail -n 1 "$WORK/ev" | grep -c '"event":"released"')" != 1 ]; then bad "run $i ($kind): last event is not released"; fi
    left=$(tagged_pids | wc -l)
    if [ "$left" != 0 ]; then bad "run $i ($kind): $left tagged processes after release"; fi
done
end=$(date +%s.%N)
note "sequential: $SEQ runs (${count[fast]} fast, ${count[orphan]} orphan, ${count[stubborn]} stubborn, ${count[burst]} burst) in $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s"

# --- 2. fds while tearing down a 200-process burst, from strace of one guardian
note "== fds during a 200-process teardown (strace)"
if command -v strace >/dev/null; then
    strace -qq -e trace=openat,pidfd_open,pipe2,signalfd4,fcntl,dup,dup2,dup3,socket,clone3 -o "$WORK/st" \
        "$G" --grace 2s -- sh -c "i=0; while [ \$i -lt 200 ]; do setsid $S & i=\$((i+1)); done; exit 0" \
        </dev/null >/dev/null 2>&1
    maxfd=$(grep -E '^(openat|pidfd_open|signalfd4|fcntl|dup|dup2|dup3|socket)\(' "$WORK/st" |
        sed -nE 's/.*= ([0-9]+)$/\1/p' | sort -n | tail -n 1)
    pidfds=$(grep -c '^pidfd_open(' "$WORK/st")
    note "burst teardown: $pidfds pidfd_open calls, highest fd number guardian held: $maxfd"
    [ "${maxfd:-99}" -le 12 ] || bad "guardian held fd $maxfd during a teardown (one fd per descendant?)"
else
    note "strace missing: skipped"
fi

# --- 3. concurrent: resident guardians, fd count while their providers sleep, then stop
note "== $CONC concurrent guardians"
pids=()
for i in $(seq 1 "$CONC"); do
    kind=${KINDS[$((i % 4))]}
    IFS='|' read -r _ opts script <<<"$(provider "$kind")"
    # The provider stays until told: its script runs, but ends in a sleep instead of exiting.
    script=${script%exit [0-9]}"exec $S"
    # shellcheck disable=SC2086
    "$G" $opts --events-fd 3 -- sh -c "$script" 3>"$WORK/ev.$i" </dev/null >/dev/null 2>"$WORK/err.$i" &
    pids+=($!)
done
# Wait until every guardian has spawned its provider.
for i in $(seq 1 "$CONC"); do
    for _ in $(seq 1 3000); do grep -q '"spawned"' "$WORK/ev.$i" 2>/dev/null && break; sleep 0.01; done
done
fds=$(for p in "${pids[@]}"; do ls "/proc/$p/fd" 2>/dev/null | wc -l; done | sort -n | uniq -c | awk '{printf "%s guardians: %s fds; ", $1, $2}')
rss=$(for p in "${pids[@]}"; do awk '/^VmRSS/{print $2}' "/proc/$p/status"; done | sort -n | awk '{a[NR]=$1} END {print a[1] "-" a[NR] " kB"}')
note "resident fds: $fds"
note "resident RSS: $rss"
for p in "${pids[@]}"; do kill -TERM "$p"; done
cstatus=()
for p in "${pids[@]}"; do wait "$p"; cstatus+=($?); done
other=$(printf '%s\n' "${cstatus[@]}" | grep -vc '^143$')
[ "$other" = 0 ] || bad "concurrent: $other guardians did not exit 143: ${cstatus[*]}"
note "concurrent: ${#cstatus[@]} stopped by SIGTERM, $(( ${#cstatus[@]} - other )) exited 143"

# --- 4. leaks
left=$(tagged_pids | wc -l)
[ "$left" = 0 ] || bad "$left tagged processes left"
mine_z=$(awk -v me=$$ '$3=="Z" && $4==me' /proc/[0-9]*/stat 2>/dev/null | wc -l)
[ "$mine_z" = 0 ] || bad "$mine_z zombies of this script"
zombies_after=$(awk '$3=="Z"' /proc/[0-9]*/stat 2>/dev/null | wc -l)
cg_after=$(find /sys/fs/cgroup -maxdepth 6 -type d -name 'guardian-*' 2>/dev/null | wc -l)
note "leaks: $left tagged processes, $mine_z zombies of ours (machine-wide zombies $zombies_before -> $zombies_after, other users' included), guardian-* cgroup leaves $cg_before -> $cg_after"
if [ "$cg_after" -gt "$cg_before" ]; then bad "cgroup leaves left: $(find /sys/fs/cgroup -maxdepth 6 -type d -name 'guardian-*')"; fi

if [ "$fail" = 0 ]; then note "soak: OK"; else note "soak: $fail failures"; fi
[ "$fail" = 0 ]
