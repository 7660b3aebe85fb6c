#!/usr/bin/env bash
# The container lane (make container-test; .ci/run): guardian as PID 1 of real podman containers
# and as the entrypoint of a Kubernetes Pod under `podman kube play`, built from the repository's
# packaging/container/Containerfile with local base images (tests/container/base-images.sh; no
# registry is needed). Checks:
#   stop       podman stop of a TERM-proof tree: ends after GUARDIAN_GRACE with exit 137, well
#              before the engine's own SIGKILL (stop timeout 30 s), nothing of the tree left;
#   status     a provider's own status (exit 3), a provider dying of SIGTERM (143 as PID 1), a
#              cooperative provider answering podman stop with its own status, a missing command;
#   kill       podman kill -s USR1 / HUP reach the provider, TERM is a stop request;
#   orphans    setsid TERM-proof orphans and 50 short-lived orphans: zombies are reaped while
#              the provider runs, the orphans are killed after the grace when it exits;
#   kube       packaging/container/kubernetes.yaml (image, command and pod name substituted)
#              under podman kube play, as written and with shareProcessNamespace: true: the
#              kubelet's stop (podman stop -t terminationGracePeriodSeconds) of a TERM-proof
#              tree ends after GUARDIAN_GRACE with 137; podman kube down of a running pod ends it
#              within the grace plus a margin; nothing of the tree is left either way.
# Every process started carries this run's nonce in its argv (and environment), and is looked
# for in the host's /proc; containers, pods and the built image are removed on any exit. Prints
# `container: N passed, N failed` last; exits 1 on any failure. Skips (SKIPPED: container
# lane: <reason>, exit 0) only when this host cannot run podman at all (`podman info` fails).
# Needs root. Installs podman, runc and debootstrap with apt when missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

say() { printf 'container: %s\n' "$*"; }
pass=0 fail=0
ok() { pass=$((pass + 1)); say "ok: $*"; }
bad() { fail=$((fail + 1)); say "FAIL: $*"; }
skip() {
    echo "SKIPPED: container lane: $*"
    echo "container: 0 passed, 0 failed, 1 skipped"
    exit 0
}
now() { date +%s%N; }
ms_since() { echo $((($(now) - $1) / 1000000)); }

[ "$(id -u)" = 0 ] || { echo "container: FAIL: needs root (rootful podman, debootstrap)" >&2; exit 1; }

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
    say "apt-get install ${need[*]}"
    apt-get -o DPkg::Lock::Timeout=600 update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need[@]}" >/dev/null ||
        { echo "container: FAIL: apt-get install ${need[*]} failed"; echo "container: 0 passed, 1 failed"; exit 1; }
fi

nonce="gct$$x$(date +%s%N)"
work=$(mktemp -d /var/tmp/guardian-container-test.XXXXXX)
image="localhost/guardian-ci/guardian:$nonce"
# Podman 4.3 (Debian 12) on this kind of host: runc and cgroupfs (no systemd as init), and
# lowered rlimits (podman's default nofile of 1048576, and an nproc above what the runtime may
# set here, make runc fail with "error setting rlimits ... operation not permitted").
cat >"$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
export CONTAINERS_CONF=$work/containers.conf
P() { timeout 120 podman "$@"; }

# Every container, pod and YAML file this run creates is named with the nonce.
tagged() { # host PIDs whose argv or environment holds the nonce
    local p
    for p in /proc/[0-9]*; do
        { grep -qaF "$nonce" "$p/cmdline" || grep -qaF "$nonce" "$p/environ"; } 2>/dev/null && echo "${p#/proc/}"
    done
    true
}
cleanup() {
    local c p left
    for p in $(podman pod ls -q --filter "name=$nonce" 2>/dev/null); do timeout 60 podman pod rm -f -t 0 "$p" >/dev/null 2>&1; done
    for c in $(podman ps -aq --filter "name=$nonce" 2>/dev/null); do timeout 60 podman rm -f -t 0 "$c" >/dev/null 2>&1; done
    timeout 60 podman rmi -f "$image" >/dev/null 2>&1
    left=$(tagged)
    [ -z "$left" ] || kill -KILL $left 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND until it succeeds
    local secs=$1 what=$2 end
    shift 2
    end=$(($(date +%s) + secs))
    until "$@"; do
        [ "$(date +%s)" -lt "$end" ] || { say "timed out after ${secs}s waiting for $what"; return 1; }
        sleep 0.2
    done
}
count_tagged() { tagged | grep -c . || true; }
none_tagged() { [ -z "$(tagged)" ]; }
logs_have() { podman logs "$1" 2>/dev/null | grep -x -- "$2" >/dev/null; }
state() { podman inspect -f "{{.State.$2}}" "$1" 2>/dev/null; }
stopped() { [ "$(state "$1" Status)" = exited ]; }
# Zombies in the PID namespace of host PID $1 whose parent is that namespace's PID 1.
zombies_under_init() {
    local init=$1 ns p n=0
    ns=$(readlink "/proc/$init/ns/pid") || { echo 0; return; }
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] || continue
        read -r _ _ st pp _ <"$p/stat" 2>/dev/null || continue
        [ "$st" = Z ] && [ "$pp" = "$init" ] && n=$((n + 1))
    done 2>/dev/null
    echo "$n"
}

# --- a host that cannot run podman at all --------------------------------------------------
podman info >/dev/null 2>&1 || skip "podman info fails: $(podman info 2>&1 | tail -1)"

# --- base images and the image ---------------------------------------------------------------
t0=$(now)
if ! out=$(nice -n 10 tests/container/base-images.sh); then
    bad "local base images (tests/container/base-images.sh)"
    echo "container: $pass passed, $fail failed"
    exit 1
fi
eval "$(printf '%s\n' "$out" | grep -E '^(BUILD|RUN)_IMAGE=')"
say "base images $BUILD_IMAGE, $RUN_IMAGE ready in $(ms_since "$t0") ms"
# podman info works, so a container that cannot start is a failure (a runtime setting this lane
# gets wrong, as the rlimits were), never a skip.
if ! probe=$(timeout 120 podman run --rm --name "probe-$nonce" "$RUN_IMAGE" sh -c "echo runs-$nonce" 2>&1); then
    bad "podman cannot start a container: $(printf '%s' "$probe" | tail -1)"
    echo "container: $pass passed, $fail failed"
    exit 1
fi

t0=$(now)
if nice -n 10 timeout 1200 podman build --layers=false \
    -f packaging/container/Containerfile --ignorefile packaging/container/Containerfile.dockerignore \
    --build-arg "BUILD_IMAGE=$BUILD_IMAGE" --build-arg "RUN_IMAGE=$RUN_IMAGE" \
    -t "$image" . >"$work/build.log" 2>&1; then
    ok "podman build -f packaging/container/Containerfile (the documented command, local base images) in $(ms_since "$t0") ms"
else
    tail -30 "$work/build.log"
    bad "podman build -f packaging/container/Containerfile failed"
    echo "container: $pass passed, $fail failed"
    exit 1
fi

# --- stop: a TERM-proof tree, podman stop -t 30, GUARDIAN_GRACE=3s ------------------------------
grace=3
engine_timeout=30
c=stop-$nonce
# The provider and a setsid grandchild ignore SIGTERM (inherited across exec: the sleeps too).
P run -d --name "$c" -e "GUARDIAN_GRACE=${grace}s" -e "GCT_NONCE=$nonce" "$image" sh -c '
    echo "pid1=$(cat /proc/1/comm)"
    trap "" TERM
    setsid sh -c "while :; do sleep 1; done" "orphan-$0" &
    echo ready
    while :; do sleep 1; done' "stop-$nonce" >/dev/null
if wait_for 60 "the stop test's provider" logs_have "$c" ready &&
    wait_for 30 "its setsid orphan" sh -c "[ \$(ps -eo args | grep -c '[o]rphan-stop-$nonce') -ge 1 ]"; then
    logs_have "$c" pid1=guardian && ok "guardian is PID 1 of the container" || bad "PID 1 is not guardian: $(podman logs "$c" 2>&1 | head -3)"
    t0=$(now)
    P stop -t "$engine_timeout" "$c" >/dev/null
    el=$(ms_since "$t0")
    code=$(state "$c" ExitCode)
    if [ "$code" = 137 ] && [ "$el" -ge $((grace * 1000)) ] && [ "$el" -lt $(((grace + 5) * 1000)) ]; then
        ok "podman stop -t $engine_timeout of a TERM-proof tree: exit 137 after ${el} ms (GUARDIAN_GRACE=${grace}s, the engine's SIGKILL would come at ${engine_timeout}s)"
    else
        bad "podman stop of a TERM-proof tree: exit $code after ${el} ms (expected 137 after ${grace}-$((grace + 5)) s, before the engine's ${engine_timeout}s)"
    fi
    wait_for 10 "the stop test's tree to be gone" none_tagged && ok "stop: nothing of the tree left" || bad "stop: left behind: $(tagged)"
else
    bad "the stop test's container did not start: $(podman logs "$c" 2>&1 | tail -3)"
fi
P rm -f -t 0 "$c" >/dev/null 2>&1

# --- status: the provider's own status -------------------------------------------------------
code=0
P run --rm --name "st3-$nonce" -e "GCT_NONCE=$nonce" "$image" sh -c 'exit 3' "st3-$nonce" || code=$?
[ "$code" = 3 ] && ok "a provider's exit 3 is the container's status" || bad "provider exit 3: podman run gave $code"
code=0
P run --rm --name "st143-$nonce" -e "GCT_NONCE=$nonce" "$image" sh -c 'kill -TERM $$' "st143-$nonce" || code=$?
[ "$code" = 143 ] && ok "a provider dying of SIGTERM gives 143 (guardian as PID 1: 128+N)" || bad "provider killed by SIGTERM: podman run gave $code, expected 143"
code=0
P run --rm --name "st127-$nonce" "$image" "/nonexistent/cmd-$nonce" >/dev/null 2>&1 || code=$?
[ "$code" = 127 ] && ok "a missing command gives 127" || bad "missing command: podman run gave $code, expected 127"
c=coop-$nonce
P run -d --name "$c" -e GUARDIAN_GRACE=10s -e "GCT_NONCE=$nonce" "$image" sh -c '
    trap "echo stopping; exit 3" TERM
    echo ready
    while :; do sleep 1 & wait $!; done' "coop-$nonce" >/dev/null
if wait_for 60 "the cooperative provider" logs_have "$c" ready; then
    t0=$(now)
    P stop -t "$engine_timeout" "$c" >/dev/null
    el=$(ms_since "$t0")
    code=$(state "$c" ExitCode)
    [ "$code" = 3 ] && [ "$el" -lt 10000 ] && logs_have "$c" stopping &&
        ok "podman stop of a cooperative provider: its own status 3 after ${el} ms (inside GUARDIAN_GRACE=10s)" ||
        bad "cooperative provider: exit $code after ${el} ms, logs: $(podman logs "$c" 2>&1 | tr '\n' ' ')"
else
    bad "the cooperative provider did not start"
fi
P rm -f -t 0 "$c" >/dev/null 2>&1

# --- kill: podman kill -s forwards signals to the provider -----------------------------------
c=kill-$nonce
P run -d --name "$c" -e "GCT_NONCE=$nonce" "$image" sh -c '
    trap "echo got-USR1" USR1
    trap "echo got-HUP" HUP
    trap "echo got-TERM; exit 4" TERM
    echo ready
    while :; do sleep 1 & wait $!; done' "kill-$nonce" >/dev/null
if wait_for 60 "the kill test's provider" logs_have "$c" ready; then
    for sig in USR1 HUP; do
        P kill -s "$sig" "$c" >/dev/null
        wait_for 10 "got-$sig" logs_have "$c" "got-$sig" && ok "podman kill -s $sig reaches the provider" || bad "podman kill -s $sig: not seen by the provider"
    done
    P kill -s TERM "$c" >/dev/null
    if wait_for 15 "the kill test's container to exit" stopped "$c"; then
        code=$(state "$c" ExitCode)
        [ "$code" = 4 ] && logs_have "$c" got-TERM && ok "podman kill -s TERM: a stop request, the provider's status 4" || bad "podman kill -s TERM: exit $code"
    else
        bad "podman kill -s TERM: the container still runs"
    fi
else
    bad "the kill test's provider did not start"
fi
P rm -f -t 0 "$c" >/dev/null 2>&1

# --- orphans: setsid TERM-proof orphans and short-lived ones ---------------------------------
c=orph-$nonce
P run -d --name "$c" -e GUARDIAN_GRACE=2s -e "GCT_NONCE=$nonce" "$image" sh -c '
    trap "exit 0" USR2
    for i in 1 2 3; do
        setsid sh -c "trap \"\" TERM; while :; do sleep 1; done" "orphan$i-$0" &
    done
    i=0
    while [ $i -lt 50 ]; do ( sh -c "exit 0" "short-$0" & ); i=$((i + 1)); done
    echo spawned
    while :; do sleep 1 & wait $!; done' "orph-$nonce" >/dev/null
if wait_for 60 "the orphan test's provider" logs_have "$c" spawned; then
    init=$(state "$c" Pid)
    orphans() { ps -eo args | grep -c "[o]rphan[0-9]-orph-$nonce" || true; }
    wait_for 30 "3 setsid orphans" sh -c "[ \$(ps -eo args | grep -c '[o]rphan[0-9]-orph-$nonce') = 3 ]" &&
        ok "3 setsid orphans run" || bad "setsid orphans: $(orphans) of 3 seen"
    no_zombies() { [ "$(zombies_under_init "$init")" = 0 ]; }
    wait_for 20 "guardian (PID 1) to reap 50 exited orphans" no_zombies &&
        ok "zombies under PID 1: 0 (50 short-lived orphans reaped while the provider runs)" ||
        bad "zombies under PID 1: $(zombies_under_init "$init")"
    t0=$(now)
    P kill -s USR2 "$c" >/dev/null
    if wait_for 20 "the orphan test's container to exit" stopped "$c"; then
        el=$(ms_since "$t0")
        code=$(state "$c" ExitCode)
        [ "$code" = 0 ] && ok "the provider's status 0 after its TERM-proof setsid orphans were killed (${el} ms, GUARDIAN_GRACE=2s)" ||
            bad "orphan test: exit $code"
    else
        bad "orphan test: the container still runs with the provider gone"
    fi
    wait_for 10 "the orphans to be gone" none_tagged && ok "orphans: nothing of the tree left" || bad "orphans left behind: $(tagged)"
else
    bad "the orphan test's provider did not start"
fi
P rm -f -t 0 "$c" >/dev/null 2>&1

# --- kube: packaging/container/kubernetes.yaml under podman kube play / kube down -------------
# The YAML as written (GUARDIAN_GRACE 20s, terminationGracePeriodSeconds 30), with the image, the
# command (a TERM-proof tree, so the grace is used in full) and the pod's name substituted.
kube_yaml() { # kube_yaml SHARED OUT
    python3 - "$1" "$2" "$image" "$nonce" packaging/container/kubernetes.yaml <<'PY'
import json, re, sys
shared, out, image, nonce, src = sys.argv[1:]
y = open(src).read()
script = ('echo "pid1=$(cat /proc/1/comm)"; trap "" TERM; '
          'setsid sh -c "while :; do sleep 1; done" "orphan-$0" & '
          'echo ready; while :; do sleep 1; done')
args = json.dumps(["sh", "-c", script, f"kube{shared}-{nonce}"])
y, n1 = re.subn(r"(?m)^(\s*image:) guardian-example\b.*$", rf"\1 {image}", y)
y, n2 = re.subn(r"(?m)^(\s*args:) \[.*\]$", lambda m: f"{m.group(1)} {args}", y)
y, n3 = re.subn(r"(?m)^(  name:) guarded-server$", rf"\1 kube{shared}-{nonce}", y)
n4 = 1
if shared == "1":
    y, n4 = re.subn(r"(?m)^  # shareProcessNamespace: false.*$", "  shareProcessNamespace: true", y)
if (n1, n2, n3, n4) != (1, 1, 1, 1):
    sys.exit(f"kubernetes.yaml changed shape: substitutions {n1, n2, n3, n4}")
open(out, "w").write(y)
PY
}
kube_grace=$(python3 -c 'import re,sys; y=open(sys.argv[1]).read(); print(re.search(r"GUARDIAN_GRACE\s*\n\s*value: \"(\d+)s\"", y).group(1))' packaging/container/kubernetes.yaml)
term_grace=$(sed -n 's/^ *terminationGracePeriodSeconds: *\([0-9]*\).*/\1/p' packaging/container/kubernetes.yaml)
# kube_up SHARED WHAT: podman kube play of the substituted YAML, then wait for the provider and
# its setsid orphan. Sets yaml, pod, c (the server container).
kube_up() {
    local shared=$1 what=$2
    pod=kube$shared-$nonce
    c=$pod-server
    yaml=$work/$pod.yaml
    kube_yaml "$shared" "$yaml" || { bad "$what: cannot substitute kubernetes.yaml"; return 1; }
    if ! P kube play "$yaml" >"$work/$pod.play.log" 2>&1; then
        bad "$what: podman kube play failed: $(tail -3 "$work/$pod.play.log")"
        return 1
    fi
    wait_for 60 "$what: the provider" logs_have "$c" ready &&
        wait_for 30 "$what: the setsid orphan" sh -c "ps -eo args | grep -q '[o]rphan-$pod'" ||
        { bad "$what: the provider did not start: $(podman logs "$c" 2>&1 | tail -3)"; return 1; }
}
kube_down() { # kube_down WHAT: podman kube down, timed into $el
    local t0
    t0=$(now)
    P kube down "$yaml" >"$work/$pod.down.log" 2>&1 || bad "$1: podman kube down failed: $(tail -3 "$work/$pod.down.log")"
    el=$(ms_since "$t0")
}
pod_gone() { ! podman pod exists "$pod"; }
for shared in 0 1; do
    what="kube play (shareProcessNamespace: $([ $shared = 1 ] && echo true || echo false))"
    # 1. The kubelet's stop of the app container: the stop signal, terminationGracePeriodSeconds,
    #    then SIGKILL (podman stop -t of the container; the kubelet stops the pause container
    #    only after the app containers, while podman 4.3's `pod stop` stops the pause container
    #    at once, which with a shared PID namespace kills every process in it), then podman kube
    #    down removes the pod.
    if kube_up "$shared" "$what"; then
        pid1=$(podman logs "$c" 2>/dev/null | sed -n 's/^pid1=//p')
        if [ "$shared" = 0 ]; then
            [ "$pid1" = guardian ] && ok "$what: guardian is PID 1" || bad "$what: PID 1 is $pid1"
        else
            [ -n "$pid1" ] && [ "$pid1" != guardian ] && ok "$what: PID 1 is the pod's $pid1, guardian runs as a subreaper" || bad "$what: PID 1 is '$pid1'"
        fi
        say "$what: the server container's stop timeout from the YAML: $(podman inspect -f '{{.Config.StopTimeout}}' "$c" 2>/dev/null) s"
        t0=$(now)
        P stop -t "$term_grace" "$c" >/dev/null 2>&1
        el=$(ms_since "$t0")
        code=$(state "$c" ExitCode)
        if [ "$code" = 137 ] && [ "$el" -ge $((kube_grace * 1000)) ] && [ "$el" -lt $(((kube_grace + 5) * 1000)) ]; then
            ok "$what: the kubelet's stop (podman stop -t $term_grace of the container) of a TERM-proof tree: exit 137 after ${el} ms (GUARDIAN_GRACE=${kube_grace}s inside terminationGracePeriodSeconds=${term_grace})"
        else
            bad "$what: podman stop -t $term_grace: exit $code after ${el} ms (expected 137 after ${kube_grace}-$((kube_grace + 5)) s)"
        fi
        wait_for 10 "$what: the tree to be gone" none_tagged && ok "$what: after the stop, nothing of the tree left" || bad "$what: left behind after the stop: $(tagged)"
        kube_down "$what"
        pod_gone && ok "$what: podman kube down removed the stopped pod (${el} ms)" || bad "$what: the pod still exists after kube down"
    fi
    # 2. podman kube down of the running pod.
    if kube_up "$shared" "$what"; then
        kube_down "$what"
        if [ "$el" -lt $(((kube_grace + 5) * 1000)) ]; then
            ok "$what: podman kube down of the running pod ended it in ${el} ms (within GUARDIAN_GRACE=${kube_grace}s + 5 s$([ "$el" -lt $((kube_grace * 1000)) ] && echo "; podman $(podman version -f '{{.Client.Version}}') stops without waiting for the grace"))"
        else
            bad "$what: podman kube down of the running pod took ${el} ms (more than GUARDIAN_GRACE=${kube_grace}s + 5 s)"
        fi
        pod_gone || bad "$what: the pod still exists after kube down"
        wait_for 10 "$what: the tree to be gone" none_tagged && ok "$what: after kube down, nothing of the tree left" || bad "$what: left behind after kube down: $(tagged)"
    fi
done

echo "container: $pass passed, $fail failed"
[ "$fail" = 0 ]
