"""asyncio: ``create_subprocess_exec`` of a provider under guardian.

``proc = await treeguardian.aio.create_subprocess_exec("server", "--flag", stdout=PIPE)``
gives a :class:`Process`: ``asyncio.subprocess.Process``'s API (``stdin``, ``stdout``,
``wait()``, ``communicate()``, ``returncode``) plus ``guardian_pid``, ``provider_pid``,
``events``, ``released``, ``wait_spawned()``, ``wait_released()``, ``stop()``, ``kill_now()``,
and ``async with`` (stop on exit, wait for the release). Works under anyio's asyncio backend;
for anyio code on any backend see :mod:`treeguardian.anyio`.
"""

from __future__ import annotations

import asyncio
import os
from types import TracebackType
from typing import Any, Callable, Optional, Type, TypeVar

from ._options import Duration
from ._popen import AsyncTreeVerbs, spawning

T = TypeVar("T")


class Process(AsyncTreeVerbs):
    """An ``asyncio.subprocess.Process`` of guardian, with the provider's tree's verbs."""

    _proc: asyncio.subprocess.Process

    def __init__(self, proc: asyncio.subprocess.Process, start: spawning) -> None:
        self._proc = proc
        self._tree_init(start)
        # Read from the start: an event loop's start costs far more than this, and a host
        # that awaits something else while guardian exits loses nothing.
        self._stream.attach()

    # asyncio.subprocess.Process's own
    @property
    def stdin(self) -> Optional[asyncio.StreamWriter]:
        return self._proc.stdin

    @property
    def stdout(self) -> Optional[asyncio.StreamReader]:
        return self._proc.stdout

    @property
    def stderr(self) -> Optional[asyncio.StreamReader]:
        return self._proc.stderr

    async def wait(self) -> int:
        self._stream.attach()  # read while guardian exits (see treeguardian.Popen.wait)
        rc = await self._proc.wait()
        await self._until(lambda: True if self._stream.closed else None, 5.0)
        return rc

    async def communicate(self, input: Optional[bytes] = None) -> "tuple[bytes, bytes]":
        self._stream.attach()  # read while guardian exits (see treeguardian.Popen.wait)
        out, err = await self._proc.communicate(input)
        await self.wait()
        return out, err

    # the tree's verbs are AsyncTreeVerbs'; here only how asyncio waits
    async def _until(self, pred: Callable[[], Optional[T]], timeout: Optional[float]) -> Optional[T]:
        """Awaits ``pred()`` (re-checked at each event) without blocking the loop."""
        stream = self._stream
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(changed.set)
            except RuntimeError:
                pass  # the loop was closed with this wait pending: nobody to wake

        stream.listen(wake)
        try:

            async def run() -> Optional[T]:
                while True:
                    changed.clear()
                    got = pred()
                    if got is not None or stream.closed:
                        return got
                    await changed.wait()

            return await asyncio.wait_for(run(), timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            stream.unlisten(wake)

    async def _wait_exited(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self._proc.wait()), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self._stop_and_wait()
        await self.wait()


async def create_subprocess_exec(
    program: "str | os.PathLike[str]", *args: "str | os.PathLike[str]", grace: Optional[Duration] = None, **kwds: Any
) -> Process:
    """``asyncio.create_subprocess_exec`` of ``program`` under guardian. guardian's options are
    keywords (``grace=1.5``, ``timeout="10m"``); the rest goes to asyncio (``stdin=PIPE``, ...)."""
    s = spawning([program, *args], kwds, grace)
    try:
        proc = await asyncio.create_subprocess_exec(*s.argv, pass_fds=s.pass_fds, **kwds)
    except BaseException as e:
        s.failed(e)
        raise
    return Process(proc, s)
