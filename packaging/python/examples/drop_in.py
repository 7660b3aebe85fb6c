"""A host written for the standard library's process types, given treeguardian's: CI
type-checks this file with ``mypy --strict`` (the drivers' types are the standard ones')."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Tuple

import anyio.abc

import treeguardian
import treeguardian.aio
import treeguardian.anyio


def stdlib_host(p: "subprocess.Popen[bytes]") -> int:
    p.terminate()
    p.kill()
    p.send_signal(2)
    return p.wait(10)


async def asyncio_host(p: asyncio.subprocess.Process) -> Tuple[bytes, bytes]:
    p.kill()
    p.terminate()
    return await p.communicate(b"")


async def anyio_host(p: anyio.abc.Process) -> int:
    p.kill()
    return await p.wait()


async def main() -> None:
    stdlib_host(treeguardian.Popen(["sleep", "60"], stdout=subprocess.PIPE))
    await asyncio_host(await treeguardian.aio.create_subprocess_exec("sleep", "60"))
    await asyncio_host(await treeguardian.aio.create_subprocess_shell("sleep 60"))
    await anyio_host(await treeguardian.anyio.open_process(["sleep", "60"]))
    done: "subprocess.CompletedProcess[bytes]" = await treeguardian.anyio.run_process(["true"])
    ran: "subprocess.CompletedProcess[bytes]" = treeguardian.run(["true"], capture_output=True)
    out: bytes = treeguardian.check_output(["echo"])
    assert done.returncode == ran.returncode == 0 and out == b"\n"
