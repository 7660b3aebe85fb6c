"""End to end: a host's config file, ``treeguardian-mcp wrap`` (``python -m treeguardian.mcp``),
then the real MCP Python SDK (``stdio_client``; run.sh runs this under mcp 2.x and 1.30) reads
the server entry from the wrapped file, starts it, calls a tool and closes. The server ignores
SIGTERM and stays after stdin EOF, with a ``setsid`` helper that ignores SIGTERM too
(servers/helper_server.py stubborn): wrapped, nothing is left when ``stdio_client`` returns;
unwrapped, the same run leaves the helper (the leak), which the test then kills itself. Every
process carries the test's nonce, found by scanning /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import treeguardian

from conftest import Tag, describe, kill_tagged

SERVER = str(Path(__file__).resolve().parent / "servers/helper_server.py")


def guardian() -> str:
    return os.environ.get("GUARDIAN_BIN") or treeguardian.binary()


def config(tag: Tag, wrap: bool) -> Dict[str, Any]:
    """A Claude Desktop config naming the stubborn server; wrapped by the tool when ``wrap``."""
    f = tag.tmp / "claude_desktop_config.json"
    f.write_text(json.dumps({"mcpServers": {"helper": {"command": sys.executable, "args": [SERVER, "stubborn", tag.nonce]}}}, indent=2) + "\n")
    if wrap:
        p = subprocess.run(
            [sys.executable, "-m", "treeguardian.mcp", "--guardian", guardian(), "wrap", str(f)],
            capture_output=True, text=True, timeout=60,
        )
        assert p.returncode == 0 and "helper: wrapped: " in p.stdout, p.stdout + p.stderr
    entry: Dict[str, Any] = json.loads(f.read_text())["mcpServers"]["helper"]
    return entry


async def use(entry: Dict[str, Any]) -> str:
    params = StdioServerParameters(command=entry["command"], args=entry["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("helpers", {})
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


def test_wrapped_config_leaves_nothing(tag: Tag) -> None:
    entry = config(tag, wrap=True)
    assert entry["command"] == guardian()
    assert entry["args"][:4] == ["--grace", "1s", "--", sys.executable]
    anyio.run(use, entry)
    tag.assert_nothing_left()


def test_unwrapped_config_leaks_the_setsid_helper(tag: Tag) -> None:
    entry = config(tag, wrap=False)
    helper_pid = int(anyio.run(use, entry))
    left: List[int] = tag.live()
    try:
        assert helper_pid in left, f"the setsid helper {helper_pid} did not survive the unwrapped close: {describe(left)}"
    finally:
        kill_tagged(tag.nonce)
        tag.wait_nothing_left()
