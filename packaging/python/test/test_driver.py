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
    if "TREEGUARDIAN_BINARY" not in os.environ:
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


def test_stop_and_kill_now(tag: Tag) -> None:
    # A TERM-ignoring provider with a TERM-ignoring setsid child and a long grace: stop()
    # starts the grace, kill_now() ends it at once.
    script = f"trap '' TERM; setsid sh -c \"trap '' TERM; sleep {tag.sleep()}\" & sleep {tag.sleep()}; wait"
    with treeguardian.Popen(["sh", "-c", script, tag.nonce], grace=60) as p:
        p.wait_spawned(10)
        wait_for("two tagged sleeps", lambda: True if len([x for x in tag.live() if x != p.pid]) >= 4 else None)
        p.stop()
        wait_for("stopping", lambda: True if any(isinstance(e, treeguardian.Stopping) for e in p.events) else None)
        assert p.poll() is None and len(tag.live()) >= 4, "the 60 s grace is running"
        p.kill_now()
        rc = p.wait(30)
    tag.assert_nothing_left()
    assert rc in (-signal.SIGKILL, 128 + signal.SIGKILL), rc
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


def test_a_grace_from_the_environment_is_waited_for(tag: Tag) -> None:
    # GUARDIAN_GRACE=5s and no grace=: leaving the block must wait guardian's 5 s grace (which
    # ends with guardian's own SIGKILL), not the default 1 s and then ask to kill now.
    env = {**os.environ, "GUARDIAN_GRACE": "5s"}
    script = f"trap '' TERM; sleep {tag.sleep()}; wait"
    with treeguardian.Popen(["sh", "-c", script, tag.nonce], env=env) as p:
        p.wait_spawned(10)
        # the tagged sleep runs: the provider has set its trap (a SIGTERM before would end it)
        sleeping = lambda: any(_read(f"/proc/{x}/cmdline").startswith(b"sleep\0") for x in tag.live())  # noqa: E731
        wait_for("the tagged sleep", lambda: True if sleeping() else None)
    tag.assert_nothing_left()
    reasons = [e.reason for e in p.events if isinstance(e, treeguardian.Stopping)]
    assert reasons == ["signal"], (reasons, p.events)
    stopping = next(e for e in p.events if isinstance(e, treeguardian.Stopping))
    assert stopping.grace_ms == 5000, stopping


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


@pytest.mark.parametrize("what,kind,status", [("missing", "not-found", 127), ("plain-file", "not-executable", 126)])
def test_start_failures_are_named(tag: Tag, what: str, kind: str, status: int) -> None:
    path = tag.tmp / what
    if what == "plain-file":
        path.write_text("not a program\n")
        path.chmod(0o644)
    p = treeguardian.Popen([str(path)], stderr=subprocess.PIPE)
    p.communicate(timeout=30)
    assert p.returncode == status and p.outcome is not None and p.outcome.kind == kind
    err = p.events[-1]
    assert isinstance(err, treeguardian.Error) and err.status == status and p.released is None


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
            await proc.kill_now()
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
