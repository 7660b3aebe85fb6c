"""anyio (asyncio or trio backend): ``open_process`` of a provider under guardian.

``async with await treeguardian.anyio.open_process(["server"]) as proc:`` gives a
:class:`Process` wrapping ``anyio.abc.Process`` (``stdin``, ``stdout``, ``wait()``,
``returncode``) with ``guardian_pid``, ``provider_pid``, ``events``, ``released``,
``wait_spawned()``, ``wait_released()``, ``stop()``, ``kill_now()``. Leaving the block stops
the tree and waits for the release, shielded from cancellation (bounded by the grace), so a
cancelled task still leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import threading
from types import TracebackType
from typing import Any, Callable, List, Optional, Sequence, Type, TypeVar, Union

import anyio
import anyio.abc
import anyio.to_thread

from ._events import Event, Released, Spawned
from ._options import DRIVER_OWNED, OPTIONS, Duration, duration_seconds
from ._popen import guardian_argv
from ._status import Outcome, describe
from ._stream import EventStream

T = TypeVar("T")
_KEYWORDS = frozenset(OPTIONS) - frozenset(DRIVER_OWNED)


async def _until(stream: EventStream, pred: Callable[[], Optional[T]], timeout: Optional[float]) -> Optional[T]:
    """Awaits ``pred()`` in a worker thread (re-checked at each event); cancellable."""
    got: List[Optional[T]] = [None]

    def check() -> bool:
        got[0] = pred()
        return got[0] is not None

    await anyio.to_thread.run_sync(stream.wait_until, check, timeout, abandon_on_cancel=True)
    return got[0]


class Process:
    """An anyio process of guardian, with the provider's tree's verbs."""

    def __init__(self, proc: anyio.abc.Process, stream: EventStream, grace: float) -> None:
        self._proc = proc
        self._stream = stream
        self._stop_sent = False
        self._grace = grace
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._proc.pid

    guardian_pid = pid

    @property
    def stdin(self) -> Optional[anyio.abc.ByteSendStream]:
        return self._proc.stdin

    @property
    def stdout(self) -> Optional[anyio.abc.ByteReceiveStream]:
        return self._proc.stdout

    @property
    def stderr(self) -> Optional[anyio.abc.ByteReceiveStream]:
        return self._proc.stderr

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode

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

    async def wait(self) -> int:
        rc = await self._proc.wait()
        await anyio.to_thread.run_sync(self._stream.join, 5.0, abandon_on_cancel=True)
        return rc

    async def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        return await _until(self._stream, lambda: self._stream.spawned, timeout)

    async def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        return await _until(self._stream, lambda: self._stream.released, timeout)

    def _signal(self, sig: int) -> None:
        if self._proc.returncode is None:
            try:
                self._proc.send_signal(signal.Signals(sig))
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

    async def aclose(self) -> None:
        """Stops the tree and waits for guardian, shielded from cancellation: the grace, then
        a kill request, bounded. Closes the pipes."""
        with anyio.CancelScope(shield=True):
            if self._proc.returncode is None:
                self.stop()
                with anyio.move_on_after(self._grace + 2.0):
                    await self._proc.wait()
                if self._proc.returncode is None:
                    await self.kill_now()
                    with anyio.move_on_after(10.0):
                        await self._proc.wait()
            for s in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                if s is not None:
                    await s.aclose()
            await anyio.to_thread.run_sync(self._stream.join, 5.0)

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()


async def open_process(
    command: Sequence[Union[str, "os.PathLike[str]"]], *, grace: Optional[Duration] = None, **kwds: Any
) -> Process:
    """``anyio.open_process`` of ``command`` (a sequence; no shell) under guardian. guardian's
    options are keywords (``grace=1.5``, ``timeout="10m"``); the rest goes to anyio."""
    options = {k: kwds.pop(k) for k in list(kwds) if k in _KEYWORDS}
    if grace is not None:
        options["grace"] = grace
    stream = EventStream()
    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    pass_fds = tuple(kwds.pop("pass_fds", ())) + (wfd,)
    argv = guardian_argv(list(command), events_fd=wfd, **options)
    try:
        proc = await anyio.open_process(argv, pass_fds=pass_fds, **kwds)
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    stream.read_fd(rfd)
    return Process(proc, stream, duration_seconds(grace) if grace is not None else 1.0)
