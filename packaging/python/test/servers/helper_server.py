"""A FastMCP/MCPServer test server with helpers, tagged with the nonce in argv.

    python helper_server.py MODE NONCE

MODE ``child``: one plain child in the server's group (the SDK without guardian never signals
it: the server exits on stdin EOF). MODE ``stubborn``: the server ignores SIGTERM and stays up
after stdin EOF, with a ``setsid`` helper that ignores SIGTERM too (only SIGKILL of the whole
tree ends it). The tool ``helpers`` returns the helpers' pids once they run."""

import os
import signal
import subprocess
import sys
import time

try:
    from mcp.server.mcpserver import MCPServer as Server  # mcp 2.x
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server  # mcp 1.x

mode, nonce = sys.argv[1], sys.argv[2]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    helper = subprocess.Popen(
        ["setsid", "sh", "-c", f"trap '' TERM; sleep 1000.{nonce}; :", nonce],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
else:
    helper = subprocess.Popen(["sleep", f"1000.{nonce}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

server = Server("helper-server")


@server.tool()
def helpers() -> str:
    """The helpers' pids."""
    return str(helper.pid)


server.run()
if mode == "stubborn":
    while True:  # stdin closed: stay, as a hung server would
        time.sleep(1000)
