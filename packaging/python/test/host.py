"""A host process for the host-SIGKILL case: connects to a guarded server, calls a tool,
prints ``ready`` and waits to be killed.

    python host.py MODE NONCE EVENTS_FILE
"""

import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from treeguardian.mcp import guarded

HERE = os.path.dirname(os.path.abspath(__file__))


async def main() -> None:
    mode, nonce, events = sys.argv[1:4]
    params = guarded(
        StdioServerParameters(command=sys.executable, args=[os.path.join(HERE, "servers/helper_server.py"), mode, nonce]),
        events_file=events,
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("helpers", {})
            print("ready", flush=True)
            await anyio.sleep(3600)


anyio.run(main)
