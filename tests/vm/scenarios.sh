#!/bin/sh
# vm-test scenarios (issue 19 Must 2, issue 19 item 4): run by /init as root inside the guest,
# on a pure cgroup v2 hierarchy mounted with nsdelegate, cpu memory pids enabled at the root.
# Each scenario prints `VMTEST PASS <name>` or `VMTEST FAIL <name>: <why>`. guardian runs as
# uid 65534 inside a cgroup delegated to it (chown, as systemd's Delegate=yes) where users run
# it, as root where the scenario is about root. Every process carries the nonce N in argv;
# every wait is bounded (wait_until); the guest is thrown away afterwards.
CG=/sys/fs/cgroup
G=/bin/guardian
N=$$$(date +%s)
W=/tmp/vm; mkdir -p $W; chmod 1777 $W

pass() { echo "VMTEST PASS $1"; }
fail() { echo "VMTEST FAIL $1: $2"; }
# check NAME COND-DESCRIPTION COMMAND...: one assertion; records the first failure of NAME.
ok=1
expect() { if ! eval "$2"; then ok=0; fail "$1" "$3"; fi; }
done_() { [ $ok = 1 ] && pass "$1"; ok=1; }

NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups --"
# in_cg DIR CMD...: CMD runs in cgroup DIR (moved there as root first). A script, not a
# function, so that `in_cg ... &` gives in $! the pid that becomes CMD.
printf '#!/bin/sh\necho $$ > "$1/cgroup.procs" || exit 99\nshift\nexec "$@"\n' > $W/in_cg
chmod 755 $W/in_cg
in_cg=$W/in_cg
# deleg NAME: a cgroup below the root handed to uid 65534 (systemd's Delegate=yes).
deleg() {
    mkdir -p "$CG/$1"
    for f in "" /cgroup.procs /cgroup.subtree_control /cgroup.threads; do chown 65534:65534 "$CG/$1$f"; done
    echo "$CG/$1"
}
# wait_until SECONDS 'condition': polls every 0.1 s; false when the time runs out.
wait_until() {
    i=0; lim=$(($1 * 10)); shift
    while ! eval "$1"; do i=$((i + 1)); [ $i -ge $lim ] && return 1; sleep 0.1; done
}
# ev FILE EVENT FIELD: a field of the first EVENT line in the events FILE (quotes stripped).
ev() { grep "\"event\":\"$2\"" "$1" | head -1 | sed -n "s/.*\"$3\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" | tr -d '"'; }
# tagged: pids whose argv carries the nonce (not this shell's).
tagged() { for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
    case $c in *"1000.$N"*) [ "$(cut -d' ' -f3 $p/stat 2>/dev/null)" = Z ] || echo ${p#/proc/} ;; esac
done; }
nothing_left() { wait_until 10 '[ -z "$(tagged)" ]'; }
kill_tagged() { for p in $(tagged); do kill -9 $p 2>/dev/null; done; }
rmcg() { for d in $(find "$1" -depth -type d 2>/dev/null); do
    echo 1 > $d/cgroup.kill 2>/dev/null; wait_until 5 "! grep -q 'populated 1' $d/cgroup.events 2>/dev/null"; rmdir $d 2>/dev/null
done; }

# The guest's own tools must work, or a scenario could pass for the wrong reason.
for t in "setpriv --version" "unshare --version" "nsenter --version" "$G --version"; do
    $t >/dev/null 2>$W/tool.err || fail setup "$t does not run: $(cat $W/tool.err)"
done

# ---- memory.max: an OOM kill gives exit 137 and the kill count in `released`
D=$(deleg mem); mkdir $D/g; chown 65534 $D/g/cgroup.procs
$in_cg $D/g $NOBODY $G --events-fd 3 --cgroup $D --memory-max 16M -- dd if=/dev/zero of=/dev/null bs=64M count=1 3>$W/mem.ev 2>$W/mem.err
rc=$?
expect memory_max_oom '[ $rc = 137 ]' "exit $rc, want 137 ($(cat $W/mem.err))"
expect memory_max_oom '[ "$(ev $W/mem.ev released oom_kill)" -ge 1 ] 2>/dev/null' "released.oom_kill: $(ev $W/mem.ev released oom_kill)"
expect memory_max_oom '[ "$(ev $W/mem.ev released status)" = 137 ]' "released.status $(ev $W/mem.ev released status)"
expect memory_max_oom '! ls -d $D/guardian-* 2>/dev/null' "leaf left: $(ls -d $D/guardian-* 2>/dev/null)"
done_ memory_max_oom
rmcg $D

# ---- pids.max: a fork refused in the leaf; the provider's status and a full teardown
D=$(deleg pids); mkdir $D/g; chown 65534 $D/g/cgroup.procs
$in_cg $D/g $NOBODY $G --events-fd 3 --cgroup $D --pids-max 4 -- sh -c \
    "sh -c 'for i in 1 2 3 4 5 6; do sleep 1000.$N & done; wait' 2>/dev/null; echo inner=\$?; exit 7" 3>$W/pids.ev >$W/pids.out 2>$W/pids.err
rc=$?
expect pids_max_fork_refused '[ $rc = 7 ]' "exit $rc, want 7 ($(cat $W/pids.err))"
expect pids_max_fork_refused 'grep -q "inner=[1-9]" $W/pids.out' "the inner shell's fork was not refused: $(cat $W/pids.out)"
expect pids_max_fork_refused 'nothing_left' "left running: $(tagged)"
expect pids_max_fork_refused '[ "$(ev $W/pids.ev released signalled)" -ge 1 ] 2>/dev/null' "released: $(grep released $W/pids.ev)"
expect pids_max_fork_refused '! ls -d $D/guardian-* 2>/dev/null' "leaf left"
done_ pids_max_fork_refused
kill_tagged; rmcg $D

# ---- cpu.max: written and read back (CPUs and QUOTA PERIOD)
D=$(deleg cpu); mkdir $D/g; chown 65534 $D/g/cgroup.procs
for spec in "0.25=25000 100000" "50000 200000=50000 200000"; do
    $in_cg $D/g $NOBODY $G --events-fd 3 --cgroup $D --cpu-max "${spec%%=*}" -- sleep 1000.$N 3>$W/cpu.ev 2>$W/cpu.err &
    gp=$!
    wait_until 30 '[ -n "$(ev $W/cpu.ev spawned cgroup)" ]'
    leaf=$(ev $W/cpu.ev spawned cgroup)
    got=$(cat "$leaf/cpu.max" 2>&1)
    expect cpu_max_read_back '[ "$got" = "${spec#*=}" ]' "--cpu-max ${spec%%=*}: cpu.max reads '$got', want '${spec#*=}' ($(cat $W/cpu.err))"
    kill -TERM $gp; wait $gp; rc=$?
    expect cpu_max_read_back '[ $rc = 143 ]' "exit $rc after TERM"
done
done_ cpu_max_read_back
kill_tagged; rmcg $D

# ---- --cgroup auto from a delegated cgroup of guardian's own, with the .self self-move
D=$(deleg auto)
$in_cg $D $NOBODY $G --events-fd 3 --cgroup auto --memory-max 32M --pids-max 50 -- sleep 1000.$N 3>$W/auto.ev 2>$W/auto.err &
gp=$!
if wait_until 30 '[ -n "$(ev $W/auto.ev spawned cgroup)" ]'; then
    leaf=$(ev $W/auto.ev spawned cgroup); gpid=$(ev $W/auto.ev spawned guardian_pid)
    expect auto_self_move '[ "$(dirname $leaf)" = $D ]' "leaf $leaf not in $D"
    # Both of guardian's processes: the sentinel (the pid the host started, guardian_pid) and
    # guardian itself (the pid in the leaf's name).
    inner=$(basename $leaf | cut -d- -f2)
    expect auto_self_move '[ "$inner" != "$gpid" ]' "guardian ran without its sentinel (leaf $leaf, guardian_pid $gpid)"
    expect auto_self_move 'grep -qx "$gpid" $leaf.self/cgroup.procs' "the sentinel $gpid is not in $leaf.self: $(cat /proc/$gpid/cgroup)"
    expect auto_self_move 'grep -qx "$inner" $leaf.self/cgroup.procs' "guardian $inner is not in $leaf.self: $(cat /proc/$inner/cgroup)"
    expect auto_self_move '[ "$(cat $leaf/memory.max)" = 33554432 ] && [ "$(cat $leaf/pids.max)" = 50 ]' "limits: $(cat $leaf/memory.max) $(cat $leaf/pids.max)"
    expect auto_self_move 'grep -q memory $D/cgroup.subtree_control && grep -q pids $D/cgroup.subtree_control' "subtree_control: $(cat $D/cgroup.subtree_control)"
else
    fail auto_self_move "no spawned event: $(cat $W/auto.err)"; ok=1
fi
kill -TERM $gp; wait $gp; rc=$?
expect auto_self_move '[ $rc = 143 ]' "exit $rc after TERM"
expect auto_self_move '[ ! -d "$leaf" ]' "the leaf stays: $(ls $D) $(cat $W/auto.err)"
# $D now enables controllers, so no process may join it: sweep runs as root from the root.
$G sweep --cgroup $D > $W/auto.sweep 2>&1
expect auto_self_move '[ ! -d "$leaf.self" ]' "sweep left $leaf.self: $(cat $W/auto.sweep)"
done_ auto_self_move
kill_tagged; rmcg $D

# ---- nsdelegate + cgroup namespace: no move out of the leaf (root guardian, root provider
# without CAP_SYS_ADMIN... and with it, which the contract and doctor name)
D=$(deleg nsd)
$G --cgroup $D -- sh -c "echo \$\$ > $D/cgroup.procs && echo escaped-parent || echo refused-parent; echo \$\$ > $CG/cgroup.procs && echo escaped-root || echo refused-root" > $W/nsd.out 2>&1
rc=$?
expect nsdelegate_no_move '[ $rc = 0 ]' "exit $rc: $(cat $W/nsd.out)"
expect nsdelegate_no_move 'grep -q refused-parent $W/nsd.out && grep -q refused-root $W/nsd.out' "the kernel allowed a move: $(cat $W/nsd.out)"
done_ nsdelegate_no_move
# A root provider *with* CAP_SYS_ADMIN can setns into PID 1's cgroup namespace and leave (the
# contract says so): while guardian lives, teardown still finds and kills it (a descendant).
$G --events-fd 3 --cgroup $D -- sh -c "nsenter --cgroup=/proc/1/ns/cgroup sh -c 'echo \$\$ > $CG/cgroup.procs && echo moved=\$(sed -n s/^0:://p /proc/self/cgroup) && exec sleep 1000.$N' & sleep 2; exit 0" 3>$W/esc.ev > $W/esc.out 2>&1
rc=$?
expect privileged_escape_still_killed '[ $rc = 0 ]' "exit $rc: $(cat $W/esc.out)"
expect privileged_escape_still_killed 'grep -qx "moved=/" $W/esc.out' "the privileged escape did not happen: $(cat $W/esc.out)"
expect privileged_escape_still_killed 'nothing_left' "the escapee lives on: $(tagged)"
done_ privileged_escape_still_killed
# The same escape, then a SIGKILL of the sentinel (the pid the host started, issue 29.9): the
# teardown that death starts is guardian's ordinary one, so the escapee, a descendant, ends too.
rm -f $W/esc3.ready
$G --events-fd 3 --grace 1s --cgroup $D -- sh -c "nsenter --cgroup=/proc/1/ns/cgroup sh -c 'echo \$\$ > $CG/cgroup.procs && echo moved=\$(sed -n s/^0:://p /proc/self/cgroup) && exec sleep 1000.$N' & touch $W/esc3.ready; exec sleep 1000.$N" 3>$W/esc3.ev > $W/esc3.out 2>&1 &
gp=$!
wait_until 10 "[ -e $W/esc3.ready ] && grep -q moved= $W/esc3.out"
kill -9 $gp; wait $gp; rc=$?
expect sentinel_kill_escape_still_killed '[ $rc = 137 ]' "exit $rc: $(cat $W/esc3.out)"
expect sentinel_kill_escape_still_killed 'grep -qx "moved=/" $W/esc3.out' "the privileged escape did not happen: $(cat $W/esc3.out)"
expect sentinel_kill_escape_still_killed 'nothing_left' "the escapee lives on after the sentinel's SIGKILL: $(tagged) $(cat $W/esc3.ev)"
done_ sentinel_kill_escape_still_killed
# The contract's remedy: without CAP_SYS_ADMIN (dropped from the bounding set) the setns is
# refused and the leaf holds.
$G --cgroup $D -- setpriv --bounding-set -sys_admin --inh-caps -sys_admin -- sh -c "nsenter --cgroup=/proc/1/ns/cgroup true && echo outcome=escaped || echo outcome=refused; echo \$\$ > $CG/cgroup.procs 2>/dev/null && echo moved || echo stayed" > $W/esc2.out 2>&1
rc=$?
expect no_escape_without_cap_sys_admin '[ $rc = 0 ] && grep -q outcome=refused $W/esc2.out && grep -q stayed $W/esc2.out' "exit $rc: $(cat $W/esc2.out)"
expect no_escape_without_cap_sys_admin 'grep -q "Operation not permitted" $W/esc2.out' "nsenter failed for another reason: $(cat $W/esc2.out)"
done_ no_escape_without_cap_sys_admin
kill_tagged; rmcg $D

# ---- sweep after a SIGKILLed guardian (and --leaf with a bare leaf name, from its parent)
D=$(deleg sweep)
# One process (--no-sentinel): the SIGKILL below must hit guardian itself, not its sentinel.
$in_cg $D $NOBODY $G --no-sentinel --events-fd 3 --cgroup auto -- sh -c "setsid sleep 1000.$N & exec sleep 1000.$N" 3>$W/sweep.ev 2>/dev/null &
gp=$!
wait_until 30 '[ -n "$(ev $W/sweep.ev spawned cgroup)" ] && [ "$(tagged | wc -l)" -ge 2 ]'
leaf=$(ev $W/sweep.ev spawned cgroup)
kill -KILL $(ev $W/sweep.ev spawned guardian_pid); wait $gp
expect sweep_after_sigkill '[ "$(tagged | wc -l)" -ge 2 ]' "the tree died with guardian: nothing for sweep to do"
( cd $D && $in_cg $D $NOBODY $G sweep --leaf "$(basename $leaf)" ) > $W/sweep.out 2>&1
rc=$?
expect sweep_after_sigkill '[ $rc = 0 ]' "sweep --leaf $(basename $leaf) exit $rc: $(cat $W/sweep.out)"
expect sweep_after_sigkill 'nothing_left' "left running: $(tagged)"
expect sweep_after_sigkill '[ ! -d $leaf ]' "leaf left: $(cat $W/sweep.out)"
done_ sweep_after_sigkill
kill_tagged; rmcg $D

# ---- doctor: every guarantee holds (uid 65534 in a delegated cgroup; exit 0, no degradation)
D=$(deleg doc)
$in_cg $D $NOBODY $G doctor --json --cgroup auto > $W/doc.json 2>&1
rc=$?
expect doctor_every_guarantee '[ $rc = 0 ]' "exit $rc: $(cat $W/doc.json)"
expect doctor_every_guarantee 'grep -q "\"degraded\":\[\]" $W/doc.json' "degraded: $(cat $W/doc.json)"
expect doctor_every_guarantee 'grep -q "\"mode\":\"cgroup\"" $W/doc.json && grep -q "\"nsdelegate\":true" $W/doc.json' "$(cat $W/doc.json)"
# Every check holds; PIDFD_GET_INFO (Linux 6.13+) is absent on 6.1, so its fallback runs for
# real; uid 65534 has no CAP_SYS_ADMIN for a cgroup namespace (both notes, not problems).
for c in subreaper signalfd clone3_pidfd pidfd_open pidfd_send_signal waitid_pidfd clone_into_cgroup \
    cgroup_kill cgroup_delegated proc_children_file pidfd_fdinfo parent_watch; do
    expect doctor_every_guarantee 'grep -q "\"$c\":{\"ok\":true" $W/doc.json' "check $c does not hold"
done
expect doctor_every_guarantee 'grep -q "\"pidfd_get_info\":{\"ok\":false" $W/doc.json' "PIDFD_GET_INFO on Linux 6.1?"
expect doctor_every_guarantee 'grep -q "\"move_out_refused\":\"never\"" $W/doc.json' "uid 65534 has no cgroup namespace: $(cat $W/doc.json)"
done_ doctor_every_guarantee
# As root, the leaf guarantee is conditional on the provider lacking CAP_SYS_ADMIN: doctor says so.
$in_cg $D $G doctor --cgroup auto > $W/docroot.txt 2>&1
expect doctor_names_cap_sys_admin 'grep -q CAP_SYS_ADMIN $W/docroot.txt' "$(cat $W/docroot.txt)"
$in_cg $D $G doctor --json --cgroup auto > $W/docroot.json 2>&1
expect doctor_names_cap_sys_admin 'grep -q "\"move_out_refused\":\"without-cap-sys-admin\"" $W/docroot.json' "$(cat $W/docroot.json)"
done_ doctor_names_cap_sys_admin
rmcg $D

# ---- item 4: nested --cgroup auto with a limit (the inner guardian at its namespace's root)
D=$(deleg nest)
echo "+cpu +memory +pids" > $D/cgroup.subtree_control   # the outer leaf gets them available
for lim in "--memory-max 32M" "--pids-max 20" "--cpu-max 0.5"; do
    $G --cgroup $D -- $G --cgroup auto $lim -- sh -c "exit 3" > $W/nest.out 2>&1
    rc=$?
    expect nested_auto_with_limit '[ $rc = 3 ]' "$lim: exit $rc: $(cat $W/nest.out)"
done
expect nested_auto_with_limit '[ -z "$(ls -d $D/guardian-* 2>/dev/null)" ]' "left: $(ls -d $D/guardian-*)"
# A guardian alone at the root of a container's private cgroup namespace (uid 65534, its
# namespace rooted at a cgroup delegated to it).
D2=$(deleg container)
$in_cg $D2 unshare --cgroup $NOBODY $G --cgroup auto --pids-max 20 --memory-max 64M -- sh -c "exit 4" > $W/nest.out 2>&1
rc=$?
expect nested_auto_with_limit '[ $rc = 4 ]' "alone at a namespace root as uid 65534: exit $rc: $(cat $W/nest.out)"
expect nested_auto_with_limit '[ -z "$(ls -d $D2/guardian-*[0-9] 2>/dev/null)" ]' "leaf left: $(ls -d $D2/guardian-*)"
rmcg $D2
done_ nested_auto_with_limit
rmcg $D

# ---- item 4: an explicit --cgroup PATH that holds a process; threaded and domain controllers.
# guardian refuses (125) with the no-internal-process explanation and leaves PATH as found.
D=$(deleg busy); mkdir $D/g; chown 65534 $D/g/cgroup.procs
$in_cg $D sleep 1000.$N &
wait_until 10 '[ -s $D/cgroup.procs ]'
for lim in "--pids-max 10" "--cpu-max 0.5" "--memory-max 32M"; do
    $in_cg $D/g $NOBODY $G --cgroup $D $lim -- true > $W/busy.out 2>&1
    rc=$?
    expect busy_parent_left_as_found '[ $rc = 125 ]' "$lim: exit $rc: $(cat $W/busy.out)"
    expect busy_parent_left_as_found 'grep -qi "internal\|holds\|process" $W/busy.out && ! grep -q "delegated to this user" $W/busy.out' "$lim: message: $(cat $W/busy.out)"
    expect busy_parent_left_as_found '[ -z "$(cat $D/cgroup.subtree_control)" ] && [ "$(cat $D/cgroup.type)" = domain ]' "$lim: left $D as subtree_control='$(cat $D/cgroup.subtree_control)' type=$(cat $D/cgroup.type)"
    expect busy_parent_left_as_found '[ -z "$(ls -d $D/guardian-* 2>/dev/null)" ]' "$lim: left $(ls -d $D/guardian-*)"
done
# guardian itself in PATH with another process: it moves itself back and says why.
$in_cg $D $NOBODY $G --cgroup auto --pids-max 10 -- true > $W/busy.out 2>&1
rc=$?
expect busy_parent_left_as_found '[ $rc = 125 ]' "auto with a neighbour: exit $rc: $(cat $W/busy.out)"
expect busy_parent_left_as_found '[ -z "$(cat $D/cgroup.subtree_control)" ] && [ -z "$(ls -d $D/guardian-* 2>/dev/null)" ]' "auto with a neighbour left $(cat $D/cgroup.subtree_control) $(ls -d $D/guardian-* 2>/dev/null)"
done_ busy_parent_left_as_found
kill_tagged; rmcg $D

# ---- item 4: --cpu-max below the kernel's 1000 µs minimum is refused, naming it
$G --cpu-max 0.001 -- true > $W/cpumin.out 2>&1
rc=$?
expect cpu_max_minimum '[ $rc = 125 ] && grep -q "1000" $W/cpumin.out' "exit $rc: $(cat $W/cpumin.out)"
done_ cpu_max_minimum
