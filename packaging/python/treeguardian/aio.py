"""asyncio: ``create_subprocess_exec`` / ``create_subprocess_shell`` of a provider under guardian.

``proc = await treeguardian.aio.create_subprocess_exec("server", "--flag", stdout=PIPE)``
gives a :class:`Process`, a subclass of ``asyncio.subprocess.Process`` (so a host typed for
it type-checks unchanged): ``stdin``, ``stdout``, ``wait()``, ``communicate()``,
``returncode``, ``pid`` (guardian's), and ``send_signal()``, ``terminate()``, ``kill()`` sync as
in asyncio (``kill()`` is the kill request: SIGKILL to the whole tree, ``returncode`` -9);
beside them ``guardian_pid``, ``provider_pid``, ``events``, ``released``, ``wait_spawned()``,
``wait_released()``, ``stop()`` and ``async with`` (stop on exit, wait for the release). Works
under anyio's asyncio backend; for anyio code on any backend see :mod:`treeguardian.anyio`.
"""

from __future__ import annotations

import asyncio
import os
from types import TracebackType
from typing import Any, Callable, Optional, Tuple, Type, TypeVar, Union

from ._options import Duration
from ._popen import AsyncTreeVerbs, spawning

T = TypeVar("T")

#: asyncio's default buffer limit of its stream readers (``asyncio.streams._DEFAULT_LIMIT``).
_DEFAULT_LIMIT = 2**16


class Process(AsyncTreeVerbs, asyncio.subprocess.Process):
    """An ``asyncio.subprocess.Process`` of guardian, with the provider's tree's verbs."""

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: Any, loop: asyncio.AbstractEventLoop, start: spawning) -> None:
        asyncio.subprocess.Process.__init__(self, transport, protocol, loop)
        self._tree_init(start)
        # Read from the start: an event loop's start costs far more than this, and a host
        # that awaits something else while guardian exits loses nothing.
        self._stream.attach()

    @property
    def guardian_pid(self) -> int:
        return self.pid

    def _returncode(self) -> Optional[int]:
        return self.returncode

    def _signal(self, sig: int) -> None:
        # asyncio signals only a child it has not reaped yet; after that, nothing.
        if self.returncode is None:
            try:
                asyncio.subprocess.Process.send_signal(self, sig)
            except ProcessLookupError:
                pass

    async def wait(self) -> int:
        """Waits for guardian to exit (after the tree is gone) and returns its status. Raises
        :class:`~treeguardian.GuardianVersionError` for a guardian older than this driver."""
        self._stream.attach()  # read while guardian exits (see treeguardian.Popen.wait)
        await self._gate()
        rc = await asyncio.subprocess.Process.wait(self)
        await self._until(lambda: True if self._stream.closed else None, 5.0)
        return rc

    async def communicate(self, input: Union[bytes, bytearray, memoryview, None] = None) -> Tuple[bytes, bytes]:
        self._stream.attach()  # read while guardian exits (see treeguardian.Popen.wait)
        return await asyncio.subprocess.Process.communicate(self, input)

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
            await asyncio.wait_for(asyncio.shield(asyncio.subprocess.Process.wait(self)), timeout)
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


async def _start(start: spawning, stdin: Any, stdout: Any, stderr: Any, limit: int, kwds: Any) -> Process:
    loop = asyncio.get_running_loop()

    def protocol() -> asyncio.subprocess.SubprocessStreamProtocol:
        return asyncio.subprocess.SubprocessStreamProtocol(limit=limit, loop=loop)

    try:
        transport, proto = await loop.subprocess_exec(
            protocol, *start.argv, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=start.pass_fds, env=start.env, **kwds
        )
    except BaseException as e:
        start.failed(e)
        raise
    return Process(transport, proto, loop, start)


async def create_subprocess_exec(
    program: Union[str, bytes, "os.PathLike[str]"],
    *args: Union[str, bytes, "os.PathLike[str]"],
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    limit: int = _DEFAULT_LIMIT,
    grace: Optional[Duration] = None,
    **kwds: Any,
) -> Process:
    """``asyncio.create_subprocess_exec`` of ``program`` under guardian. guardian's options are
    keywords (``grace=1.5``, ``timeout="10m"``); the rest goes to asyncio (``stdin=PIPE``, ...).
    A program that cannot be started raises ``FileNotFoundError`` / ``PermissionError``."""
    s = spawning([program, *args], kwds, grace)
    return await _start(s, stdin, stdout, stderr, limit, kwds)


async def create_subprocess_shell(
    cmd: Union[str, bytes],
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    limit: int = _DEFAULT_LIMIT,
    *,
    grace: Optional[Duration] = None,
    **kwds: Any,
) -> Process:
    """``asyncio.create_subprocess_shell``: ``/bin/sh -c cmd`` as guardian's provider."""
    if kwds.get("shell", True) is not True:
        raise ValueError("shell must be True")
    kwds.pop("shell", None)
    s = spawning(os.fsdecode(cmd), kwds, grace, shell=True)
    return await _start(s, stdin, stdout, stderr, limit, kwds)
