#!/bin/sh
# Runs inside the systemd VM (Debian 12, systemd as PID 1), started by guardian-lane.service
# from the payload disk (/payload: guardian, this script). Every result is a marker line on the
# second serial port (/dev/ttyS1), which run.sh reads after the VM powered off:
#   GL-PASS <name>  |  GL-FAIL <name>: <why>  |  GL-INFO <text>  |  GL-DONE
# Every wait is bounded; the unit's ExecStopPost powers the machine off however this ends.
set -u
OUT=/dev/ttyS1
say() { printf '%s\n' "$*" >"$OUT"; }
pass() { say "GL-PASS $1"; }
fail() { say "GL-FAIL $1: $2"; }
info() { say "GL-INFO $*"; }

install -m 0755 /payload/guardian /usr/local/bin/guardian
[ -x /payload/guardian-before ] && install -m 0755 /payload/guardian-before /usr/local/bin/guardian-before
info "kernel $(uname -r); $(systemctl --version | head -n1); cgroup $(stat -fc %T /sys/fs/cgroup)"

# wait_until SECONDS CMD...: polls CMD every 0.2 s until it succeeds or SECONDS pass.
wait_until() {
    _end=$(($(date +%s) + $1)); shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$_end" ] && return 1
        sleep 0.2
    done
}
gone() { ! kill -0 "$1" 2>/dev/null; }
# json_str FILE EVENT FIELD: the string FIELD of the first EVENT line of FILE (no jq here).
json_str() { grep "\"event\":\"$2\"" "$1" | head -n1 | sed -n "s/.*\"$3\":\"\([^\"]*\)\".*/\1/p"; }
json_num() { grep "\"event\":\"$2\"" "$1" | head -n1 | sed -n "s/.*\"$3\":\([0-9-]*\).*/\1/p"; }

# Not /run: it is mounted noexec.
W=/var/tmp/gl
mkdir -p $W && chmod 1777 $W
# A provider: a setsid orphan (out of the provider's group and session) that guardian must
# stop, then the given exit status.
cat >$W/provider <<'EOF'
#!/bin/sh
setsid sleep 1001 &
echo $! >"$1/orphan"
echo $$ >"$1/provider"
exit "$2"
EOF
chmod 0755 $W/provider

# checks NAME DIR STATUS EXPECTED EVENTS: the tree is gone, the status is right, the leaf
# guardian made (named by `spawned`) was removed, as `released.cgroup` says.
checks() {
    name=$1 dir=$2 status=$3 expected=$4 ev=$5
    ok=1
    [ "$status" = "$expected" ] || { fail "$name" "status $status, expected $expected"; ok=0; }
    orphan=$(cat "$dir/orphan" 2>/dev/null)
    if [ -z "$orphan" ] || ! wait_until 10 gone "$orphan"; then
        fail "$name" "the setsid orphan ${orphan:-?} is still running"; ok=0
    fi
    mode=$(json_str "$ev" spawned mode)
    leaf=$(json_str "$ev" spawned cgroup)
    [ "$mode" = cgroup ] || { fail "$name" "mode ${mode:-none}, expected cgroup: $(head -c 400 "$ev")"; ok=0; }
    if [ -n "$leaf" ]; then
        [ -d "$leaf" ] && { fail "$name" "the leaf $leaf is still there"; ok=0; }
        [ "$(json_str "$ev" released cgroup)" = "$leaf" ] || { fail "$name" "released does not name the removed leaf"; ok=0; }
        info "$name: leaf $leaf"
    fi
    [ $ok = 1 ] && pass "$name"
}

# 1. As root: a transient scope with delegation, guardian --cgroup auto inside it.
d=$W/root-scope && mkdir -p $d
timeout 60 systemd-run --scope -p Delegate=yes guardian --cgroup auto --events-fd 3 -- $W/provider $d 7 3>$d/events.jsonl
checks root-scope $d $? 7 $d/events.jsonl

# The user manager of the lingering user (started at boot: /var/lib/systemd/linger/tester).
if wait_until 60 systemctl is-active --quiet user@1000.service; then
    pass user-manager
else
    fail user-manager "user@1000.service is $(systemctl is-active user@1000.service)"
fi
# as_user CMD: runs CMD (a shell line) as tester, with the user manager's environment.
as_user() {
    timeout 90 runuser -u tester -- env XDG_RUNTIME_DIR=/run/user/1000 \
        DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus sh -c "$1"
}

# 2. The README's line, as the unprivileged user: a user scope delegated to that user.
d=$W/user-scope && mkdir -p $d && chown tester $d
cp $W/provider $d/provider
as_user "cd $d && systemd-run --user --scope -p Delegate=yes guardian --cgroup auto --events-fd 3 -- ./provider $d 9 3>events.jsonl"
checks user-scope $d $? 9 $d/events.jsonl

# 3. --memory-max under the user's delegation: an OOM kill in the leaf is reported and the
#    status is the provider's (SIGKILL: guardian dies of it too, so the shell says 137).
d=$W/user-memory && mkdir -p $d && chown tester $d
as_user "cd $d && systemd-run --user --scope -p Delegate=yes guardian --cgroup auto --memory-max 24M --events-fd 3 -- sh -c 'setsid sleep 1002 & echo \$! > orphan; tail /dev/zero' 3>events.jsonl"
status=$?
ev=$d/events.jsonl
oom=$(json_num $ev released oom_kill)
if [ "$status" = 137 ] && [ "${oom:-0}" -ge 1 ]; then
    checks user-memory $d 137 137 $ev
else
    fail user-memory "status $status (expected 137), released.oom_kill ${oom:-none}: $(tail -c 600 $ev)"
fi

# 4. Service units: ExecStart=guardian -- ..., stopped by `systemctl stop`. The tree is gone,
#    the main process's status is the provider's (killed by SIGTERM), the unit ends inactive
#    with Result=success (not failed), and with --cgroup auto the leaf was removed.
# unit_test NAME BINARY KILLMODE ARGS: writes, starts and stops gl-NAME.service.
unit_test() {
    name=$1 bin=$2 killmode=$3 args=$4
    d=$W/$name && mkdir -p $d
    cat >/run/systemd/system/gl-$name.service <<EOF
[Service]
ExecStart=/usr/local/bin/$bin -vv $args -- /bin/sh -c 'setsid sleep 1003 & echo \$! > $d/orphan; echo \$\$ > $d/provider; exec sleep 1004'
KillMode=$killmode
Delegate=yes
Environment=GUARDIAN_GRACE=2s
TimeoutStopSec=10s
ExecStopPost=/bin/sh -c 'echo "\$SERVICE_RESULT \$EXIT_CODE \$EXIT_STATUS" > $d/result'
EOF
    systemctl daemon-reload
    systemctl start gl-$name.service
    if ! wait_until 30 test -s $d/orphan; then
        fail "$name" "the provider never ran: $(systemctl status gl-$name.service 2>&1 | tail -5)"
        return
    fi
    # The leaf exists while it runs (cgroup mode).
    cg=/sys/fs/cgroup$(systemctl show -P ControlGroup gl-$name.service)
    leaf=$(ls -d "$cg"/guardian-* 2>/dev/null | head -n1)
    timeout 30 systemctl stop gl-$name.service
    # An inactive unit is unloaded at once (its properties reset), so the unit records its
    # end itself (ExecStopPost gets SERVICE_RESULT, EXIT_CODE, EXIT_STATUS); a failed one stays.
    wait_until 10 test -s $d/result
    read -r result code st <$d/result
    state=$(systemctl is-failed gl-$name.service)
    info "$name ($bin, KillMode=$killmode): $state, SERVICE_RESULT=$result EXIT_CODE=$code EXIT_STATUS=$st leaf=${leaf:-none}"
    ok=1
    for p in $(cat $d/orphan) $(cat $d/provider); do
        wait_until 10 gone "$p" || { fail "$name" "process $p still running"; ok=0; }
    done
    if [ "$bin" = guardian-before ]; then
        # The binary before the change (exit 143): the unit is left failed. Evidence only.
        info "BEFORE $name: the unit ends $state, $result (main process $code $st)"
        systemctl reset-failed gl-$name.service 2>/dev/null
        return
    fi
    [ "$state" != failed ] && [ "$result" = success ] || { fail "$name" "the unit ended $state, $result"; ok=0; }
    # guardian (the main process) died of SIGTERM, as its provider did.
    [ "$code" = killed ] && [ "$st" = TERM ] || { fail "$name" "main process $code $st, expected killed TERM"; ok=0; }
    if [ -n "$leaf" ]; then
        journalctl -q -u gl-$name.service -o cat | grep -q "removed the leaf cgroup $leaf" ||
            { fail "$name" "guardian did not report removing $leaf: $(journalctl -q -u gl-$name.service -o cat | tail -5)"; ok=0; }
    elif [ -n "$args" ]; then
        fail "$name" "no leaf under $cg while it ran"; ok=0
    fi
    journalctl -q -u gl-$name.service -o cat | grep -q 'released: status 143' ||
        { fail "$name" "no 'released: status 143' in the journal"; ok=0; }
    [ $ok = 1 ] && pass "$name"
}
unit_test svc-plain guardian control-group ""
unit_test svc-mixed guardian mixed ""
unit_test svc-cgroup guardian mixed "--cgroup auto"
# 5. A provider that ignores SIGTERM, under KillMode=mixed: guardian's grace (GUARDIAN_GRACE)
#    ends in its SIGKILL well inside TimeoutStopSec. The stop takes the grace, the tree is
#    gone, and guardian dies of SIGKILL as its provider did, so systemd reports Result=signal
#    (without guardian, systemd's own SIGKILL at TimeoutStopSec gives Result=timeout).
#    With TimeoutStopSec below the grace, systemd's final SIGKILL of the whole cgroup comes
#    first: the tree still dies, but guardian never releases it (Result=timeout).
cat >$W/stubborn <<'EOF'
#!/bin/sh
trap '' TERM
setsid sh -c 'trap "" TERM; echo $$ > "$1/orphan"; exec sleep 1005' sh "$1" &
echo $$ >"$1/provider"
while :; do sleep 1; done
EOF
chmod 0755 $W/stubborn
# stubborn NAME GRACE TIMEOUTSTOPSEC EXPECTED_RESULT [UNIT LINE]
stubborn() {
    name=$1 grace=$2 tss=$3 expected=$4 extra=${5:-}
    d=$W/$name && mkdir -p $d
    cat >/run/systemd/system/gl-$name.service <<EOF
[Service]
ExecStart=/usr/local/bin/guardian -v --cgroup auto -- $W/stubborn $d
KillMode=mixed
Delegate=yes
Environment=GUARDIAN_GRACE=$grace
TimeoutStopSec=$tss
ExecStopPost=/bin/sh -c 'echo "\$SERVICE_RESULT \$EXIT_CODE \$EXIT_STATUS" > $d/result'
$extra
EOF
    systemctl daemon-reload
    systemctl start gl-$name.service
    if ! wait_until 30 test -s $d/orphan; then
        fail "$name" "the provider never ran: $(systemctl status gl-$name.service 2>&1 | tail -5)"
        return
    fi
    t0=$(date +%s%N)
    timeout 60 systemctl stop gl-$name.service
    ms=$((($(date +%s%N) - t0) / 1000000))
    wait_until 10 test -s $d/result
    read -r result code st <$d/result
    info "$name (GUARDIAN_GRACE=$grace, TimeoutStopSec=$tss): stop took $ms ms, SERVICE_RESULT=$result EXIT_CODE=$code EXIT_STATUS=$st"
    ok=1
    for p in $(cat $d/orphan) $(cat $d/provider); do
        wait_until 10 gone "$p" || { fail "$name" "process $p still running"; ok=0; }
    done
    [ "$result" = "$expected" ] || { fail "$name" "Result=$result, expected $expected"; ok=0; }
    if [ "$expected" = signal ] || [ -n "$extra" ]; then
        [ "$code $st" = "killed KILL" ] || { fail "$name" "main process $code $st, expected killed KILL"; ok=0; }
        journalctl -q -u gl-$name.service -o cat | grep -q 'released: status 137' ||
            { fail "$name" "guardian did not release the tree itself"; ok=0; }
    fi
    systemctl reset-failed gl-$name.service 2>/dev/null
    [ $ok = 1 ] && pass "$name"
}
stubborn svc-stubborn 2s 20s signal
stubborn svc-stubborn-success 2s 20s success SuccessExitStatus=SIGKILL
stubborn svc-short-timeout 10s 2s timeout

# 6. One intent is one stop request (issue 29.1). With the default KillMode=control-group,
#    `systemctl stop` sends SIGTERM to every process of the unit: the sentinel (the main
#    process) and guardian proper both hear it, a few milliseconds apart, from PID 1. guardian
#    folds the two into one request, so the provider, which traps TERM and cleans up for
#    0.5 s, keeps its grace: its marker exists, it exits 0, and the unit ends inactive with
#    Result=success (main process exited 0). Before the fold the second delivery read as
#    "kill now" and the provider was SIGKILLed about 1 ms in.
cat >$W/cleaner <<'EOF'
#!/usr/bin/perl
# A provider with a shutdown hook: on SIGTERM, 0.5 s of cleanup (no child process, which the
# control group's SIGTERM would reach too), then the marker, then exit 0.
my $d = $ARGV[0];
$SIG{TERM} = sub { select(undef, undef, undef, 0.5); open(my $f, ">", "$d/cleaned"); print $f "done\n"; close $f; exit 0 };
open(my $p, ">", "$d/provider"); print $p "$$\n"; close $p;
sleep 1 while 1;
EOF
chmod 0755 $W/cleaner
# default_killmode NAME BINARY: a unit without KillMode= (control-group), stopped.
default_killmode() {
    name=$1 bin=$2
    d=$W/$name && mkdir -p $d
    cat >/run/systemd/system/gl-$name.service <<EOF
[Service]
ExecStart=/usr/local/bin/$bin -vv -- $W/cleaner $d
Environment=GUARDIAN_GRACE=10s
TimeoutStopSec=30s
ExecStopPost=/bin/sh -c 'echo "\$SERVICE_RESULT \$EXIT_CODE \$EXIT_STATUS" > $d/result'
EOF
    systemctl daemon-reload
    systemctl start gl-$name.service
    if ! wait_until 30 test -s $d/provider; then
        fail "$name" "the provider never ran: $(systemctl status gl-$name.service 2>&1 | tail -5)"
        return
    fi
    timeout 60 systemctl stop gl-$name.service
    wait_until 10 test -s $d/result
    read -r result code st <$d/result
    state=$(systemctl is-active gl-$name.service)
    marker=$(cat $d/cleaned 2>/dev/null)
    info "$name ($bin, default KillMode): $state, SERVICE_RESULT=$result EXIT_CODE=$code EXIT_STATUS=$st marker=${marker:-none}"
    if [ "$bin" = guardian-before ]; then
        info "BEFORE $name: marker ${marker:-missing}, main process $code $st"
        systemctl reset-failed gl-$name.service 2>/dev/null
        return
    fi
    ok=1
    wait_until 10 gone "$(cat $d/provider)" || { fail "$name" "the provider is still running"; ok=0; }
    [ "$marker" = done ] || { fail "$name" "no cleanup marker: the provider lost its grace"; ok=0; }
    [ "$state" = inactive ] && [ "$result" = success ] || { fail "$name" "the unit ended $state, $result"; ok=0; }
    [ "$code $st" = "exited 0" ] || { fail "$name" "main process $code $st, expected exited 0"; ok=0; }
    if journalctl -q -u gl-$name.service -o cat | grep -q 'kill-request'; then
        fail "$name" "guardian read a second stop request: $(journalctl -q -u gl-$name.service -o cat | grep -m1 kill-request)"
        ok=0
    fi
    systemctl reset-failed gl-$name.service 2>/dev/null
    [ $ok = 1 ] && pass "$name"
}
default_killmode svc-default-killmode guardian

if [ -x /usr/local/bin/guardian-before ]; then
    unit_test svc-before-plain guardian-before control-group ""
    unit_test svc-before-cgroup guardian-before mixed "--cgroup auto"
    default_killmode svc-before-default-killmode guardian-before
fi

say GL-DONE
