#!/bin/sh
# A stand-in for guardian used by the driver's own tests: it writes canned
# event lines to fd 3 according to $FAKE_GUARDIAN_MODE.
mode=${FAKE_GUARDIAN_MODE:-ok}
case $mode in
ok)
  # one line split across two writes, an unknown event and unknown fields
  printf '{"event":"fallback","ts":1.0,"what":"pidfd_open","errno":"ENOSYS","detail":"x"}\n' >&3
  printf '{"event":"spawned","ts":1.1,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","version":"0.2.0","cgroup":null}\n' $$ $$ $$ >&3
  printf '{"event":"exit","ts":1.2,"pid":%s,"code":3,"signal":null,"core_dumped":false,"new_field":[1]}\n{"event":"sig' $$ >&3
  sleep 0.05
  printf 'nal","ts":1.3,"signal":"SIGTERM","target":"descendants","pids":[1,2],"reason":"stop"}\n' >&3
  printf '{"event":"future-thing","ts":1.4}\n' >&3
  printf '{"event":"released","ts":1.5,"status":3,"signalled":2,"killed":0,"reaped":2,"teardown_ms":0.5}\n' >&3
  exec 3>&-
  exit 3 ;;
args)
  # report the command line as an event
  printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","version":"0.2.0","cgroup":null}\n' $$ $$ $$ >&3
  printf '{"event":"args","ts":1.1,"argv":[' >&3
  sep=
  for a in "$@"; do printf '%s"%s"' "$sep" "$a" >&3; sep=,; done
  printf ']}\n{"event":"exit","ts":1.2,"pid":1,"code":0,"signal":null,"core_dumped":false}\n' >&3
  printf '{"event":"released","ts":1.3,"status":0,"signalled":0,"killed":0,"reaped":0,"teardown_ms":0}\n' >&3
  exit 0 ;;
error)
  printf '{"event":"error","ts":1.0,"status":127,"message":"nosuch: command not found"}\n' >&3
  exit 127 ;;
die)
  # killed before it could release the tree
  printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","version":"0.2.0","cgroup":null}\n' $$ $$ $$ >&3
  kill -KILL $$ ;;
epipe)
  # the provider is gone and its end of stdin closed, guardian not yet exited:
  # a write from the driver now fails with EPIPE
  exec 0<&-
  printf '{"event":"error","ts":1.0,"status":127,"message":"nosuch: command not found"}\n' >&3
  exec 3>&-
  i=0
  while [ $i -lt 100 ] && [ ! -e "$FAKE_GUARDIAN_RELEASE" ]; do sleep 0.05; i=$((i + 1)); done
  exit 127 ;;
noevents)
  exit 9 ;;
stop)
  # wait for SIGTERM, then report the stop sequence
  trap 'printf "{\"event\":\"exit\",\"ts\":2.0,\"pid\":1,\"code\":null,\"signal\":\"SIGTERM\",\"core_dumped\":false}\n{\"event\":\"released\",\"ts\":2.1,\"status\":143,\"signalled\":0,\"killed\":0,\"reaped\":0,\"teardown_ms\":0}\n" >&3; exit 143' TERM
  printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","version":"0.2.0","cgroup":null}\n' $$ $$ $$ >&3
  while :; do sleep 0.05; done ;;
killnow)
  # guardian's two requests: SIGTERM is a stop request (stopping, reason signal, then a long
  # grace); the kill request (signal 64, RTMAX, when GUARDIAN_KILL_SIGNAL=RTMAX) kills at once
  # (stopping, reason kill-request) and guardian ends as the provider did: killed by SIGKILL.
  # A SIGKILL from the driver would end this script without released. Each SIGTERM is
  # counted in a `term` event, each kill request in a `killreq` event.
  n=0
  on_term() {
    n=$((n + 1))
    printf '{"event":"term","ts":2.0,"n":%s}\n' $n >&3
    [ $n = 1 ] && printf '{"event":"stopping","ts":2.1,"reason":"signal","grace_ms":60000}\n' >&3
  }
  on_kill() {
    printf '{"event":"killreq","ts":2.1}\n' >&3
    printf '{"event":"stopping","ts":2.2,"reason":"kill-request","grace_ms":0}\n' >&3
    printf '{"event":"exit","ts":2.3,"pid":1,"code":null,"signal":"SIGKILL","core_dumped":false}\n' >&3
    printf '{"event":"released","ts":2.4,"status":137,"signalled":0,"killed":1,"reaped":0,"teardown_ms":0}\n' >&3
    exec 3>&-
    trap - TERM
    kill -KILL $$
  }
  trap on_term TERM
  [ "${GUARDIAN_KILL_SIGNAL:-}" = RTMAX ] && trap on_kill 64
  printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","version":"%s","cgroup":null}\n' $$ $$ $$ "${FAKE_GUARDIAN_VERSION:-0.2.0}" >&3
  i=0
  while [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
  printf '{"event":"released","ts":9.0,"status":143,"signalled":0,"killed":0,"reaped":0,"teardown_ms":0}\n' >&3
  exit 143 ;;
old)
  # a guardian before 0.2.0: no version in spawned; counts SIGTERMs like killnow
  trap 'printf "{\"event\":\"term\",\"ts\":2.0,\"n\":1}\n{\"event\":\"exit\",\"ts\":2.1,\"pid\":1,\"code\":null,\"signal\":\"SIGTERM\",\"core_dumped\":false}\n{\"event\":\"released\",\"ts\":2.2,\"status\":143,\"signalled\":0,\"killed\":0,\"reaped\":0,\"teardown_ms\":0}\n" >&3; exit 143' TERM
  printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","cgroup":null}\n' $$ $$ $$ >&3
  i=0
  while [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
  exit 1 ;;
garbage)
  printf 'not json\n{"event":"spawned","ts":1.0,"pid":1,"pgid":1,"guardian_pid":1,"mode":"subreaper","version":"0.2.0","cgroup":null}\n' >&3
  printf '{"event":"exit","ts":1.2,"pid":1,"code":0,"signal":null,"core_dumped":false}\n' >&3
  printf '{"event":"released","ts":1.3,"status":0,"signalled":0,"killed":0,"reaped":0,"teardown_ms":0}' >&3
  exit 0 ;;
esac
