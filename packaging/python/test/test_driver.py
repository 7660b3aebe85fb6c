"""The driver's verbs: binary(), Popen, the asyncio and anyio APIs, the events and the named
exit statuses, against the guardian binary the wheel installed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

import treeguardian
from treeguardian import Exit, Released, Spawned, Status, describe
from treeguardian.aio import create_subprocess_exec

from conftest import Tag, _read, wait_for


def test_binary_is_the_installed_one() -> None:
    path = treeguardian.binary()
    assert os.path.isabs(path) and os.access(path, os.X_OK)
    if "GUARDIAN_BIN" not in os.environ:
        # the wheel put it in this environment's scripts directory
        assert os.path.dirname(path) == os.path.dirname(sys.executable), path
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("guardian ")


def test_popen_reports_pids_events_and_cleans_the_setsid_orphan(tag: Tag) -> None:
    script = f"setsid sleep {tag.sleep()} & echo $! > {tag.tmp}/orphan; exit 3"
    with treeguardian.Popen(["sh", "-c", script, tag.nonce], stdout=subprocess.PIPE) as p:
        spawned = p.wait_spawned(10)
        assert isinstance(spawned, Spawned) and spawned.guardian_pid == p.pid == p.guardian_pid
        assert p.provider_pid == spawned.pid != p.pid
        assert p.wait(30) == 3
    tag.assert_nothing_left()
    rel = p.released
    assert isinstance(rel, Released) and rel.status == 3 and rel.signalled == 1
    names = [e.event for e in p.events]
    assert names[0] == "spawned" and names[-1] == "released" and names.index("exit") < len(names) - 1
    assert p.outcome is not None and p.outcome.kind == "exited" and p.outcome.code == 3


def test_stop_then_kill(tag: Tag) -> None:
    # A TERM-ignoring provider with a TERM-ignoring setsid child and a long grace: stop()
    # starts the grace, kill() (the kill request) ends it at once.
    script = f"trap '' TERM; setsid sh -c \"trap '' TERM; sleep {tag.sleep()}\" & sleep {tag.sleep()}; wait"
    with treeguardian.Popen(["sh", "-c", script, tag.nonce], grace=60) as p:
        p.wait_spawned(10)
        wait_for("two tagged sleeps", lambda: True if len([x for x in tag.live() if x != p.pid]) >= 4 else None)
        p.stop()
        wait_for("stopping", lambda: True if any(isinstance(e, treeguardian.Stopping) for e in p.events) else None)
        assert p.poll() is None and len(tag.live()) >= 4, "the 60 s grace is running"
        p.kill()
        rc = p.wait(30)
    tag.assert_nothing_left()
    assert rc == -signal.SIGKILL, rc
    reasons = [e.reason for e in p.events if isinstance(e, treeguardian.Stopping)]
    assert reasons == ["signal", "kill-request"], reasons
    out = p.outcome
    assert out is not None and out.kind == "signalled" and out.signal == signal.SIGKILL


def test_stop_right_after_the_start_is_a_stop_request(tag: Tag) -> None:
    # Sent at once, the SIGTERM would reach guardian in the instants after its exec, before it
    # reads signals as requests, and end it with no released: stop() waits for its first event.
    for _ in range(10):
        p = treeguardian.Popen(["sh", "-c", f"setsid sleep {tag.sleep()} & sleep {tag.sleep()}", tag.nonce])
        p.stop()
        p.wait(30)
        assert isinstance(p.released, Released), p.events
        tag.assert_nothing_left()


@pytest.mark.parametrize("where", ["env=", "os.environ, unset after the start"])
def test_a_grace_from_the_environment_is_waited_for(tag: Tag, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GUARDIAN_GRACE=5s and no grace=: leaving the block must wait guardian's 5 s grace (which
    # ends with guardian's own SIGKILL), not the default 1 s and then ask to kill now. The
    # driver takes the value guardian got at the start (this process's environment may change
    # after it).
    script = f"trap '' TERM; sleep {tag.sleep()}; wait"
    if where == "env=":
        p = treeguardian.Popen(["sh", "-c", script, tag.nonce], env={**os.environ, "GUARDIAN_GRACE": "5s"})
    else:
        monkeypatch.setenv("GUARDIAN_GRACE", "5s")
        p = treeguardian.Popen(["sh", "-c", script, tag.nonce])
        monkeypatch.delenv("GUARDIAN_GRACE")
    with p:
        p.wait_spawned(10)
        # the tagged sleep runs: the provider has set its trap (a SIGTERM before would end it)
        sleeping = lambda: any(_read(f"/proc/{x}/cmdline").startswith(b"sleep\0") for x in tag.live())  # noqa: E731
        wait_for("the tagged sleep", lambda: True if sleeping() else None)
    tag.assert_nothing_left()
    reasons = [e.reason for e in p.events if isinstance(e, treeguardian.Stopping)]
    assert reasons == ["signal"], (reasons, p.events)
    stopping = next(e for e in p.events if isinstance(e, treeguardian.Stopping))
    assert stopping.grace_ms == 5000, stopping


def test_events_are_read_when_asked_and_nothing_runs_for_them_until_a_wait(tag: Tag) -> None:
    # A fresh interpreter: a Popen nobody waits on starts no reader thread (one woken by
    # `spawned` competed with guardian's start-up, issue 20.5), yet every event is there when
    # asked; a process reaped with its events unread closes its end of the pipe when dropped.
    code = r"""
import gc, os, subprocess, sys, threading
import treeguardian
def fds(): return sorted(os.listdir("/proc/self/fd"))
def readers(): return [t for t in threading.enumerate() if t.name == "treeguardian-events"]
before = fds()
p = treeguardian.Popen(["sh", "-c", "echo x", sys.argv[1]], stdout=subprocess.PIPE)
assert p.stdout.read() == b"x\n"
subprocess.Popen.wait(p, 30)  # reaped, the events not touched
assert not readers(), readers()
p.stdout.close()
del p
gc.collect()
assert fds() == before, (before, fds())
q = treeguardian.Popen(["sh", "-c", "echo y", sys.argv[1]], stdout=subprocess.PIPE)
assert q.stdout.read() == b"y\n"
subprocess.Popen.wait(q, 30)
names = [e.event for e in q.events]
assert names[0] == "spawned" and names[-1] == "released", names
assert not readers(), readers()
r = treeguardian.Popen(["sh", "-c", "echo z", sys.argv[1]], stdout=subprocess.PIPE)
assert r.stdout.read() == b"z\n"
subprocess.Popen.wait(r, 30)
child = os.fork()
if child == 0:  # a forked child asking reads nothing of the parent's pipe, and waits not
    os._exit(0 if r.events == [] and r.wait_released(None) is None else 1)
assert os.waitpid(child, 0)[1] == 0
assert [e.event for e in r.events][-1] == "released", r.events
# A reader thread that cannot start: a wait for an event raises, poll() does not, and once
# threads start again a wait made while the provider runs gets its events from the thread.
start = threading.Thread.start
def refuse(self): raise RuntimeError("no thread")
threading.Thread.start = refuse
s = treeguardian.Popen(["sh", "-c", "read x; echo w", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
try:
    s.wait_spawned(30)
    raise AssertionError("the wait did not raise")
except RuntimeError:
    pass
assert s.poll() is None
threading.Thread.start = start
assert s.wait_spawned(30) is not None
assert readers(), "the reader thread runs"
s.stdin.close()
assert s.wait_released(30) is not None, s.events
assert s.stdout.read() == b"w\n" and s.wait(30) == 0
assert q.wait(30) == 0 and q.released is not None
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code, tag.nonce], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.stdout, out.stderr)
    tag.assert_nothing_left()


def test_events_beyond_the_pipe_before_the_first_wait_are_all_read(tag: Tag) -> None:
    # ~1000 forwarded signals (~100 KiB of `signal` events, beyond a pipe's 64 KiB) while
    # nothing reads, then the provider exits and the host waits: wait() reads them while
    # guardian exits, which otherwise waits for a reader and then drops the rest, `released`
    # among them.
    script = f"trap '' USR1; read line; echo {tag.nonce} >/dev/null"
    p = treeguardian.Popen(["sh", "-c", script, tag.nonce], stdin=subprocess.PIPE)
    assert p.stdin is not None
    try:
        wait_for("the provider's trap", lambda: True if _ignores_usr1(tag) else None)
        for _ in range(1000):
            os.kill(p.pid, signal.SIGUSR1)
            # mostly one event each: the next is sent once guardian took this one
            wait_for("guardian to take SIGUSR1", lambda: True if not _pending(p.pid, signal.SIGUSR1) else None)
        p.stdin.close()
        assert p.wait(30) == 0
    finally:
        if p.returncode is None:
            p.kill_now()
            p.wait(30)
    tag.assert_nothing_left()
    signals = len([e for e in p.events if isinstance(e, treeguardian.Signal)])
    assert isinstance(p.released, Released), (signals, p.events[-3:])
    # (~108 bytes a line: 700 are beyond the pipe; a few of the 1000 may merge while pending)
    assert signals >= 700, signals


def _ignores_usr1(tag: Tag) -> bool:
    """The tagged provider (``sh -c SCRIPT NONCE``) has set its trap: SIGUSR1 is in SigIgn."""
    for pid in tag.live():
        if b"read line" in _read(f"/proc/{pid}/cmdline"):
            for line in _read(f"/proc/{pid}/status").splitlines():
                if line.startswith(b"SigIgn:") and int(line.split()[1], 16) & (1 << (signal.SIGUSR1 - 1)):
                    return True
    return False


def _pending(pid: int, sig: int) -> bool:
    """Whether ``sig`` is pending for the process (ShdPnd) or its main thread (SigPnd)."""
    mask = 0
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith((b"ShdPnd:", b"SigPnd:")):
            mask |= int(line.split()[1], 16)
    return bool(mask & (1 << (sig - 1)))


def test_the_common_start_runs_what_guardian_argv_gives(tag: Tag) -> None:
    # Popen's shortest path builds the command line inline: it must be guardian_argv's.
    from pathlib import Path

    args = ["sh", b"-c", Path("exit 0"), tag.nonce]
    p = treeguardian.Popen(args)
    assert p.wait(30) == 0
    fd = int(p.args[1].split("=")[1])
    assert p.args == treeguardian.guardian_argv(args, events_fd=fd), p.args
    assert [e.event for e in p.events][-1] == "released"


def test_a_wait_left_pending_on_a_closed_event_loop_does_not_stop_the_reader(tag: Tag) -> None:
    # The reader thread is shared by every stream of the process: an asyncio wait whose loop
    # was closed under it must not end the thread, or no later stream is read.
    code = r"""
import asyncio, os, signal, subprocess, sys, threading, time
import treeguardian
from treeguardian.aio import create_subprocess_exec
loop = asyncio.new_event_loop()
async def start():
    proc = await create_subprocess_exec("sh", "-c", "read x", sys.argv[1], stdin=subprocess.PIPE)
    waiting = asyncio.ensure_future(proc.wait_released())
    await asyncio.sleep(0)
    return proc
proc = loop.run_until_complete(start())
loop.close()  # the wait_released task is left pending: its listener will find the loop closed
proc._until_ready()
os.kill(proc.pid, signal.SIGTERM)  # guardian stops the tree: events, and the listener runs
hub = [t for t in threading.enumerate() if t.name == "treeguardian-events"][0]
end = time.monotonic() + 30
while not proc._stream.closed and hub.is_alive() and time.monotonic() < end:
    time.sleep(0.01)
p = treeguardian.Popen(["sh", "-c", "read x", sys.argv[1]], stdin=subprocess.PIPE)
assert p.wait_spawned(30) is not None
p.stdin.close()
assert p.wait_released(30) is not None, p.events
assert [t for t in threading.enumerate() if t.name == "treeguardian-events"]
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code, tag.nonce], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.stdout, out.stderr)
    tag.assert_nothing_left()


def test_asyncio_refuses_shell_as_it_does_without_guardian() -> None:
    async def main() -> None:
        with pytest.raises(ValueError):
            await create_subprocess_exec("echo", "hi", shell=True)

    asyncio.run(main())


def test_the_environment_is_read_as_a_child_gets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The spawn path reads os.environ through its bytes table (one C call): it must follow
    # every change of os.environ.
    from treeguardian._binary import ENVIRON

    monkeypatch.setenv("TREEGUARDIAN_TEST_ENVIRON", "a b")
    assert ENVIRON.get(b"TREEGUARDIAN_TEST_ENVIRON") == b"a b"
    os.environ["TREEGUARDIAN_TEST_ENVIRON"] = "c"
    assert ENVIRON.get(b"TREEGUARDIAN_TEST_ENVIRON") == b"c"
    monkeypatch.delenv("TREEGUARDIAN_TEST_ENVIRON")
    assert ENVIRON.get(b"TREEGUARDIAN_TEST_ENVIRON") is None


def test_context_manager_stops_a_running_tree(tag: Tag) -> None:
    with treeguardian.Popen(["sh", "-c", f"sleep {tag.sleep()} & sleep {tag.sleep()}", tag.nonce]) as p:
        p.wait_spawned(10)
        wait_for("the sleeps", lambda: True if len(tag.live()) >= 3 else None)
    tag.assert_nothing_left()
    assert p.released is not None
    assert p.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)


def test_named_statuses() -> None:
    assert [int(s) for s in Status] == [124, 125, 126, 127]
    assert describe(-15).signal == signal.SIGTERM and describe(-15).kind == "signalled"
    assert describe(143).signal == signal.SIGTERM
    assert describe(130, Exit(ts=0, pid=1, code=130, signal=None, core_dumped=False)).kind == "exited"
    assert describe(124).kind == "timeout" and describe(125).kind == "guardian-failure"
    assert describe(126).kind == "not-executable" and describe(127).kind == "not-found"
    assert describe(0).ok


@pytest.mark.parametrize("code", [124, 125, 126, 127])
def test_a_providers_own_exit_124_to_127_is_its_exit(tag: Tag, code: int) -> None:
    # guardian's events say whose status it is: the provider's own exit is "exited".
    with treeguardian.Popen(["sh", "-c", f"exit {code}", tag.nonce]) as p:
        assert p.wait(30) == code
    assert p.outcome is not None and p.outcome.kind == "exited" and p.outcome.code == code, p.events


def test_kill_now_is_a_deprecated_kill(tag: Tag) -> None:
    p = treeguardian.Popen(["sleep", tag.sleep()])
    with pytest.warns(DeprecationWarning):
        p.kill_now()
    assert p.wait(30) == -signal.SIGKILL
    tag.assert_nothing_left()


def test_guardian_timeout_keyword(tag: Tag) -> None:
    with treeguardian.Popen(["sleep", tag.sleep()], timeout="200ms") as p:
        assert p.wait(30) == Status.TIMEOUT
    assert p.outcome is not None and p.outcome.kind == "timeout"
    tag.assert_nothing_left()


def test_asyncio_api(tag: Tag) -> None:
    async def main() -> None:
        proc = await create_subprocess_exec(
            "sh", "-c", f"setsid sleep {tag.sleep()} & echo hello", tag.nonce, stdout=asyncio.subprocess.PIPE
        )
        async with proc:
            spawned = await proc.wait_spawned(10)
            assert spawned is not None and proc.provider_pid == spawned.pid
            out, _ = await proc.communicate()
            assert out == b"hello\n"
            rel = await proc.wait_released(10)
            assert rel is not None and rel.status == 0 and rel.signalled == 1
        assert proc.returncode == 0
        tag.assert_nothing_left()
        # stop / kill_now on a TERM-ignoring tree
        proc = await create_subprocess_exec("sh", "-c", f"trap '' TERM; sleep {tag.sleep()}; wait", tag.nonce, grace=60)
        async with proc:
            await proc.wait_spawned(10)
            # the sleep runs: the shell's trap is set (a TERM before it would just end the shell)
            await asyncio.to_thread(wait_for, "the sleep", lambda: True if any(
                b"sleep" in _read(f"/proc/{p}/cmdline") for p in tag.live()) else None)
            proc.stop()
            proc.kill()
            await asyncio.wait_for(proc.wait(), 30)
        tag.assert_nothing_left()
        assert [e.reason for e in proc.events if isinstance(e, treeguardian.Stopping)] == ["signal", "kill-request"]

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_anyio_api_and_cancellation(tag: Tag, backend: str) -> None:
    import anyio  # run.sh installs anyio and trio into every venv: no skip

    from treeguardian.anyio import open_process

    async def main() -> None:
        async with await open_process(["sh", "-c", f"setsid sleep {tag.sleep()} & exit 0", tag.nonce]) as proc:
            rel = await proc.wait_released(10)
            assert rel is not None and rel.status == 0
        tag.assert_nothing_left()
        # A cancel scope around a running tree: leaving it stops the tree (shielded).
        with anyio.move_on_after(0.5):
            async with await open_process(["sh", "-c", f"sleep {tag.sleep()} & sleep {tag.sleep()}", tag.nonce]) as p2:
                await p2.wait_spawned(10)
                await anyio.sleep(60)
        tag.assert_nothing_left()
        assert p2.released is not None

    anyio.run(main, backend=backend)


def test_stop_with_a_shorter_grace_ends_in_the_kill_request(tag: Tag) -> None:
    # guardian's grace is 60 s; stop(grace=0.3) sends the kill request 0.3 s after the stop.
    script = f"trap '' TERM; sleep {tag.sleep()}; wait"
    with treeguardian.Popen(["sh", "-c", script, tag.nonce], grace=60) as p:
        p.wait_spawned(10)
        wait_for("the tagged sleep", lambda: True if any(_read(f"/proc/{x}/cmdline").startswith(b"sleep\0") for x in tag.live()) else None)
        with pytest.raises(ValueError, match="500ms"):
            p.stop(grace="soon")
        p.stop(grace=0.3)
        assert p.wait(30) == -signal.SIGKILL
    tag.assert_nothing_left()
    reasons = [e.reason for e in p.events if isinstance(e, treeguardian.Stopping)]
    assert reasons == ["signal", "kill-request"], reasons
