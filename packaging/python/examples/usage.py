"""treeguardian's API as a host uses it; CI type-checks this file with ``mypy --strict``."""

from __future__ import annotations

import asyncio
import subprocess
from typing import List, Optional

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import treeguardian
from treeguardian import Event, Exit, Outcome, Released, Spawned, Status, describe
from treeguardian.aio import create_subprocess_exec
from treeguardian.anyio import open_process
from treeguardian.mcp import GuardedServer, guarded


def sync_host() -> Optional[Outcome]:
    path: str = treeguardian.binary()
    assert path
    with treeguardian.Popen(["sh", "-c", "setsid sleep 60 & echo ok"], stdout=subprocess.PIPE, grace=1.5) as p:
        spawned: Optional[Spawned] = p.wait_spawned(10)
        provider: Optional[int] = p.provider_pid
        guardian: int = p.guardian_pid
        assert spawned is None or spawned.pid == provider != guardian
        p.wait(30)
    released: Optional[Released] = p.released
    events: List[Event] = p.events
    exits = [e for e in events if isinstance(e, Exit)]
    if released is not None and released.status == Status.TIMEOUT:
        return None
    return describe(p.returncode, exits[0] if exits else None)


async def asyncio_host() -> int:
    proc = await create_subprocess_exec("sleep", "60", grace="500ms", timeout="10m")
    async with proc:
        await proc.wait_spawned(10)
        proc.stop()
        proc.kill()
        return await proc.wait()


async def anyio_host() -> Optional[Released]:
    async with await open_process(["sleep", "60"]) as proc:
        await proc.wait_spawned(10)
        proc.stop()
        return await proc.wait_released(10)


async def mcp_host() -> None:
    params = guarded(StdioServerParameters(command="uvx", args=["mcp-server-time"]))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
    with GuardedServer(StdioServerParameters(command="uvx", args=["mcp-server-git"])) as g:
        async with stdio_client(g.params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                g.stop()
        rel: Optional[Released] = g.released
        print(rel)


if __name__ == "__main__":
    print(sync_host())
    print(asyncio.run(asyncio_host()))
    print(anyio.run(anyio_host))
