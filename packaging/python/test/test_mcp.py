"""The MCP Python SDK (whichever ``mcp`` this venv has: run.sh runs this file under the
current 2.x and under 1.30.0) through ``treeguardian.mcp.guarded``: nothing may be left in any
case. Every server and helper carries the test's nonce (argv, or the environment for the
PyPI servers), found by scanning /proc.

Cases where the SDK SIGKILLs the process it started (mcp 1.x: anyio's ``Process.aclose()`` on
cancellation) rely on guardian's sentinel (issue 24): the SIGKILL ends only the sentinel, and
guardian, seeing its parent die, tears the tree down as for any other parent death."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import treeguardian
from treeguardian.mcp import GuardedServer, check_grace, guarded, sdk_kill_window

from conftest import Tag, wait_for

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "servers/helper_server.py")


def helper_params(tag: Tag, mode: str = "child") -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[SERVER, mode, tag.nonce])


async def use(params: StdioServerParameters) -> None:
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("helpers", {})


def test_grace_is_checked_against_the_sdks_window() -> None:
    assert sdk_kill_window() == 2.0
    assert check_grace(1.0) == 1.0 and check_grace("1500ms") == 1.5
    with pytest.raises(ValueError, match="does not fit"):
        guarded(StdioServerParameters(command="x"), grace=1.6)
    p = guarded(StdioServerParameters(command="sh", args=["a", "b"], env={"K": "v"}))
    assert p.command == treeguardian.binary() and p.args[-3:] == ["sh", "a", "b"]
    assert p.env == {"K": "v", "GUARDIAN_KILL_SIGNAL": "RTMAX"}


@pytest.mark.parametrize("what", ["missing", "plain-file"])
def test_guarded_raises_the_spawn_error_of_a_command_that_cannot_start(tag: Tag, what: str) -> None:
    # subprocess's form, from guarded(): not "Connection closed" from the SDK later.
    if what == "missing":
        with pytest.raises(FileNotFoundError) as info:
            guarded(StdioServerParameters(command=f"no-such-server-{tag.nonce}"))
        assert info.value.filename == f"no-such-server-{tag.nonce}"
    else:
        (tag.tmp / "server").write_text("x\n")
        with pytest.raises(PermissionError):
            GuardedServer(StdioServerParameters(command=str(tag.tmp / "server")))
    with pytest.raises(FileNotFoundError):
        guarded(StdioServerParameters(command="sh", env={"PATH": "/nonexistent"}))


def test_normal_close_leaves_nothing(tag: Tag) -> None:
    with GuardedServer(helper_params(tag)) as g:
        anyio.run(use, g.params)
        rel = g.wait_released(30)
        tag.assert_nothing_left()
        assert rel is not None and rel.status == 0 and rel.signalled == 1, g.events
        assert g.spawned is not None
    # released stays reachable after the GuardedServer is closed (its file removed)
    assert not g.events_path.exists() and g.released == rel


def test_released_after_closing_the_guarded_server_first(tag: Tag) -> None:
    # Leaving the GuardedServer block while the SDK's connection is still open: close() stops
    # the tree (the stop request, then the kill request) and keeps released.
    async def main() -> None:
        g = GuardedServer(helper_params(tag, "stubborn"), grace=0.5)
        async with stdio_client(g.params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("helpers", {})
                await anyio.to_thread.run_sync(g.close)
                assert g.released is not None, g.events
        assert await g.wait_released_async(1) == g.released

    try:
        anyio.run(main)
    except Exception as e:  # the session may see its server go mid-request
        print(f"session ended with {e!r}")
    tag.assert_nothing_left()


def test_term_ignoring_server_with_a_setsid_child(tag: Tag) -> None:
    # The SDK: stdin EOF, 2 s, killpg(SIGTERM) (guardian's stop request), then guardian's 1 s
    # grace ends in SIGKILL to the tree, before the SDK's own SIGKILL 2 s later.
    with GuardedServer(helper_params(tag, "stubborn")) as g:
        start = time.monotonic()
        anyio.run(use, g.params)
        took = time.monotonic() - start
        tag.assert_nothing_left()
        rel = g.released
        assert rel is not None and rel.killed >= 1, g.events
        stopping = [e for e in g.events if isinstance(e, treeguardian.Stopping)]
        assert stopping and stopping[0].reason == "signal", g.events
        print(f"stubborn server closed in {took:.2f}s")


def test_host_sigkill_leaves_nothing(tag: Tag) -> None:
    events = tag.tmp / "events.jsonl"
    host = subprocess.Popen(
        [sys.executable, str(HERE / "host.py"), "stubborn", tag.nonce, str(events)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None and host.stdout.readline().strip() == "ready"
        os.kill(host.pid, signal.SIGKILL)
        host.wait(30)
        tag.wait_nothing_left(15)
        text = events.read_text()
        assert '"reason":"parent-died"' in text and text.rstrip().endswith("}") and '"released"' in text.splitlines()[-1]
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_twenty_reconnects_leave_nothing(tag: Tag) -> None:
    async def main() -> None:
        for _ in range(20):
            await use(guarded(helper_params(tag)))

    anyio.run(main)
    tag.assert_nothing_left()


async def _cancel_after_ready(tag: Tag, params: StdioServerParameters, how: str) -> None:
    ready = asyncio.Event()

    async def client() -> None:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.call_tool("helpers", {})
                ready.set()
                await asyncio.sleep(3600)

    task = asyncio.ensure_future(client())
    await asyncio.wait_for(ready.wait(), 60)
    task.cancel()
    if how == "double":
        await asyncio.sleep(0.05)  # inside the SDK's shutdown
        task.cancel()
    start = time.monotonic()
    try:
        await asyncio.wait_for(task, 30)
    except asyncio.CancelledError:
        pass
    print(f"{how} cancel: host finished in {(time.monotonic() - start) * 1000:.0f} ms")


def test_anyio_cancel_scope_leaves_nothing(tag: Tag) -> None:
    async def main() -> None:
        with anyio.move_on_after(60) as scope:
            async with stdio_client(guarded(helper_params(tag))) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await session.call_tool("helpers", {})
                    scope.cancel()
                    await anyio.sleep(3600)

    anyio.run(main)
    tag.wait_nothing_left(10)


def test_task_cancel_leaves_nothing(tag: Tag) -> None:
    asyncio.run(_cancel_after_ready(tag, guarded(helper_params(tag)), "single"))
    tag.wait_nothing_left(10)


def test_double_cancel_leaves_nothing_and_does_not_hang(tag: Tag) -> None:
    asyncio.run(_cancel_after_ready(tag, guarded(helper_params(tag)), "double"))
    tag.wait_nothing_left(10)


def _pypi_server(name: str) -> str:
    bindir = os.environ.get("TREEGUARDIAN_TEST_SERVERS_BIN")
    if not bindir:
        pytest.fail("TREEGUARDIAN_TEST_SERVERS_BIN is not set: run.sh installs the PyPI servers and sets it")
    return os.path.join(bindir, name)


def test_real_server_mcp_server_time(tag: Tag) -> None:
    params = StdioServerParameters(command=_pypi_server("mcp-server-time"), args=["--local-timezone", "UTC"], env=tag.env())

    async def main() -> Any:
        async with stdio_client(guarded(params)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                wait_for("the tagged server", lambda: tag.live() or None)
                return await session.call_tool("get_current_time", {"timezone": "UTC"})

    result = anyio.run(main)
    assert "UTC" in str(result)
    tag.assert_nothing_left()


def test_real_server_mcp_server_git(tag: Tag) -> None:
    repo = tag.tmp / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    params = StdioServerParameters(command=_pypi_server("mcp-server-git"), args=["--repository", str(repo)], env=tag.env())

    async def main() -> Any:
        async with stdio_client(guarded(params)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                wait_for("the tagged server", lambda: tag.live() or None)
                return await session.call_tool("git_status", {"repo_path": str(repo)})

    result = anyio.run(main)
    assert "branch" in str(result).lower() or "commit" in str(result).lower(), result
    tag.assert_nothing_left()


def test_guarded_server_stop_and_kill(tag: Tag) -> None:
    # The SDK owns the process; GuardedServer reaches guardian through a pidfd checked against
    # its events file. A TERM-ignoring server: stop() starts the grace, kill() ends it.
    with GuardedServer(helper_params(tag, "stubborn"), grace=1.5) as g:

        async def main() -> None:
            async with stdio_client(g.params) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await session.call_tool("helpers", {})
                    assert g.stop()
                    await anyio.to_thread.run_sync(
                        lambda: wait_for("stopping", lambda: True if any(isinstance(e, treeguardian.Stopping) for e in g.events) else None)
                    )
                    assert g.kill()
                    await anyio.to_thread.run_sync(lambda: wait_for("released", lambda: g.released))

        try:
            anyio.run(main)
        except Exception as e:  # the session may see its server go mid-request
            print(f"session ended with {e!r}")
        tag.assert_nothing_left()
        reasons = [e.reason for e in g.events if isinstance(e, treeguardian.Stopping)]
        assert reasons == ["signal", "kill-request"], g.events
        assert not g.stop() and not g.kill(), "guardian released: nothing to signal"
