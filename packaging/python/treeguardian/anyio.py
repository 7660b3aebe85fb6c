"""anyio (asyncio or trio backend): ``open_process`` of a provider under guardian.

``async with await treeguardian.anyio.open_process(["server"]) as proc:`` gives a
:class:`Process`, an ``anyio.abc.Process`` (``stdin``, ``stdout``, ``wait()``, ``returncode``,
``pid``, sync ``terminate()``/``kill()``/``send_signal()``; ``kill()`` is the kill request)
with ``guardian_pid``, ``provider_pid``, ``events``, ``released``, ``wait_spawned()``,
``wait_released()``, ``stop()``. Leaving the block stops the tree and waits for the release,
shielded from cancellation (bounded by the grace), so a cancelled task still leaves nothing
behind. :func:`run_process` is ``anyio.run_process``.
"""

from __future__ import annotations

import os
import subprocess
from types import TracebackType
from typing import Any, Callable, List, Optional, Sequence, Type, TypeVar, Union

import anyio
import anyio.abc
import anyio.to_thread

from ._options import Duration
from ._popen import AsyncTreeVerbs, spawning

T = TypeVar("T")

class Process(AsyncTreeVerbs, anyio.abc.Process):
    """An ``anyio.abc.Process`` of guardian, with the provider's tree's verbs."""

    _proc: anyio.abc.Process

    def __init__(self, proc: anyio.abc.Process, start: spawning) -> None:
        self._proc = proc
        self._tree_init(start)
        # Read from the start: an event loop's start costs far more than this, and a host
        # that awaits something else while guardian exits loses nothing.
        self._stream.attach()

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def guardian_pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return self._proc.returncode

    def _returncode(self) -> Optional[int]:
        return self._proc.returncode

    def _signal(self, sig: int) -> None:
        # anyio signals only a child it has not reaped yet; after that, nothing.
        if self._proc.returncode is None:
            try:
                self._proc.send_signal(sig)  # type: ignore[arg-type]
            except ProcessLookupError:
                pass

    @property
    def stdin(self) -> Optional[anyio.abc.ByteSendStream]:
        return self._proc.stdin

    @property
    def stdout(self) -> Optional[anyio.abc.ByteReceiveStream]:
        return self._proc.stdout

    @property
    def stderr(self) -> Optional[anyio.abc.ByteReceiveStream]:
        return self._proc.stderr

    async def wait(self) -> int:
        self._stream.attach()  # read while guardian exits (see treeguardian.Popen.wait)
        await self._gate()
        rc = await self._proc.wait()
        await anyio.to_thread.run_sync(self._stream.join, 5.0, abandon_on_cancel=True)
        return rc

    # the tree's verbs are AsyncTreeVerbs'; here only how anyio waits

    async def _until(self, pred: Callable[[], Optional[T]], timeout: Optional[float]) -> Optional[T]:
        """Awaits ``pred()`` in a worker thread (re-checked at each event); cancellable."""
        got: List[Optional[T]] = [None]

        def check() -> bool:
            got[0] = pred()
            return got[0] is not None

        await anyio.to_thread.run_sync(self._stream.wait_until, check, timeout, abandon_on_cancel=True)
        return got[0]

    async def _wait_exited(self, timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            await self._proc.wait()
        return self._proc.returncode is not None

    async def aclose(self) -> None:
        """Stops the tree and waits for guardian, shielded from cancellation: the grace, then
        a kill request, bounded. Closes the pipes."""
        with anyio.CancelScope(shield=True):
            await self._stop_and_wait()
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
    command: Union[str, bytes, Sequence[Union[str, bytes, "os.PathLike[str]"]]], *, grace: Optional[Duration] = None, **kwds: Any
) -> Process:
    """``anyio.open_process`` of ``command`` under guardian: a sequence is the program and its
    arguments, a string a shell command (``/bin/sh -c``), as in anyio. guardian's options are
    keywords (``grace=1.5``, ``timeout="10m"``); the rest goes to anyio."""
    if isinstance(command, (str, bytes)):
        s = spawning(os.fsdecode(command), kwds, grace, shell=True)
    else:
        s = spawning(list(command), kwds, grace)
    try:
        proc = await anyio.open_process(s.argv, pass_fds=s.pass_fds, env=s.env, **kwds)
    except BaseException as e:
        s.failed(e)
        raise
    return Process(proc, s)


async def run_process(
    command: Union[str, bytes, Sequence[Union[str, bytes, "os.PathLike[str]"]]],
    *,
    input: Optional[bytes] = None,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    check: bool = True,
    grace: Optional[Duration] = None,
    **kwds: Any,
) -> "subprocess.CompletedProcess[bytes]":
    """``anyio.run_process`` of ``command`` under guardian: its output, its status, and
    ``CalledProcessError`` when ``check`` and the status is not 0. Cancelled, it stops the tree
    (shielded, bounded by the grace)."""
    if "stdin" not in kwds:
        kwds["stdin"] = subprocess.PIPE if input else subprocess.DEVNULL
    output: List[Optional[bytes]] = [None, None]

    async def drain(stream: anyio.abc.ByteReceiveStream, index: int) -> None:
        buf = bytearray()
        async for chunk in stream:
            buf += chunk
        output[index] = bytes(buf)

    async with await open_process(command, stdout=stdout, stderr=stderr, grace=grace, **kwds) as process:
        async with anyio.create_task_group() as tg:
            if process.stdout is not None:
                tg.start_soon(drain, process.stdout, 0)
            if process.stderr is not None:
                tg.start_soon(drain, process.stderr, 1)
            if process.stdin is not None and input:
                await process.stdin.send(input)
                await process.stdin.aclose()
            await process.wait()
    rc = process.returncode
    assert rc is not None
    if check and rc != 0:
        raise subprocess.CalledProcessError(rc, command, output[0], output[1])
    return subprocess.CompletedProcess(command, rc, output[0], output[1])
