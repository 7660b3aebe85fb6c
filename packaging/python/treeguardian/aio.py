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
import signal
from types import TracebackType
from typing import Any, Callable, List, Optional, Type, TypeVar

from ._events import Event, Released, Spawned
from ._options import DRIVER_OWNED, OPTIONS, Duration, duration_seconds
from ._popen import guardian_argv
from ._status import Outcome, describe
from ._stream import EventStream

T = TypeVar("T")

_KEYWORDS = frozenset(OPTIONS) - frozenset(DRIVER_OWNED)


async def _until(stream: EventStream, pred: Callable[[], Optional[T]], timeout: Optional[float]) -> Optional[T]:
    """Awaits ``pred()`` (re-checked at each event) without blocking the loop."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(changed.set)

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


class Process:
    """An ``asyncio.subprocess.Process`` of guardian, with the provider's tree's verbs."""

    def __init__(self, proc: asyncio.subprocess.Process, stream: EventStream, grace: float) -> None:
        self._proc = proc
        self._stream = stream
        self._stop_sent = False
        self._grace = grace

    # asyncio.subprocess.Process's own
    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def stdin(self) -> Optional[asyncio.StreamWriter]:
        return self._proc.stdin

    @property
    def stdout(self) -> Optional[asyncio.StreamReader]:
        return self._proc.stdout

    @property
    def stderr(self) -> Optional[asyncio.StreamReader]:
        return self._proc.stderr

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode

    async def wait(self) -> int:
        rc = await self._proc.wait()
        await _until(self._stream, lambda: True if self._stream.closed else None, 5.0)
        return rc

    async def communicate(self, input: Optional[bytes] = None) -> "tuple[bytes, bytes]":
        out, err = await self._proc.communicate(input)
        await self.wait()
        return out, err

    # the tree's
    @property
    def guardian_pid(self) -> int:
        return self._proc.pid

    @property
    def provider_pid(self) -> Optional[int]:
        s = self._stream.spawned
        return s.pid if s else None

    @property
    def events(self) -> List[Event]:
        return self._stream.events

    @property
    def released(self) -> Optional[Released]:
        return self._stream.released

    @property
    def outcome(self) -> Optional[Outcome]:
        rc = self._proc.returncode
        return None if rc is None else describe(rc, self._stream.exit)

    async def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        return await _until(self._stream, lambda: self._stream.spawned, timeout)

    async def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        return await _until(self._stream, lambda: self._stream.released, timeout)

    def _signal(self, sig: int) -> None:
        # asyncio signals only a child it has not reaped yet; after that it is a no-op.
        if self._proc.returncode is None:
            try:
                self._proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """A stop request: the provider gets the stop signal, the tree SIGKILL after the grace."""
        self._stop_sent = True
        self._signal(signal.SIGTERM)

    async def kill_now(self) -> None:
        """SIGKILL the whole tree now; never SIGKILLs guardian itself."""
        if self._proc.returncode is not None:
            return
        if not self._stream.stopping:
            # Two SIGTERMs before guardian reads the first may arrive as one: the kill request
            # is sent only once guardian reports that it is stopping.
            if not self._stop_sent:
                self.stop()
            await _until(self._stream, lambda: True if self._stream.stopping else None, 5.0)
        if self._stream.released is None:
            self._signal(signal.SIGTERM)

    def terminate(self) -> None:
        self.stop()

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._proc.returncode is None:
            self.stop()
            try:
                await asyncio.wait_for(asyncio.shield(self._proc.wait()), self._grace + 2.0)
            except asyncio.TimeoutError:
                await self.kill_now()
        await self.wait()


async def create_subprocess_exec(
    program: "str | os.PathLike[str]", *args: "str | os.PathLike[str]", grace: Optional[Duration] = None, **kwds: Any
) -> Process:
    """``asyncio.create_subprocess_exec`` of ``program`` under guardian. guardian's options are
    keywords (``grace=1.5``, ``timeout="10m"``); the rest goes to asyncio (``stdin=PIPE``, ...)."""
    options = {k: kwds.pop(k) for k in list(kwds) if k in _KEYWORDS}
    if grace is not None:
        options["grace"] = grace
    stream = EventStream()
    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    pass_fds = tuple(kwds.pop("pass_fds", ())) + (wfd,)
    argv = guardian_argv([program, *args], events_fd=wfd, **options)
    try:
        proc = await asyncio.create_subprocess_exec(*argv, pass_fds=pass_fds, **kwds)
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    stream.read_fd(rfd)
    return Process(proc, stream, duration_seconds(grace) if grace is not None else 1.0)
