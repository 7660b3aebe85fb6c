"""The MCP Python SDK (``mcp`` on PyPI, 1.x and 2.x): guarded ``StdioServerParameters``.

The three-line change a host makes::

    from treeguardian.mcp import guarded
    params = guarded(StdioServerParameters(command="uvx", args=["mcp-server-time"]))
    async with stdio_client(params) as (read, write): ...

The SDK then starts guardian (by absolute path: it passes only HOME, LOGNAME, PATH, SHELL,
TERM, USER) as its own session and group leader, with the server as guardian's provider.
Every way the SDK ends the server becomes a teardown of the server's whole tree: stdin EOF
(the server exits, guardian stops and reaps what it left), ``killpg(SIGTERM)`` (a stop
request), and the host's death (guardian's parent watch).

The SDK passes no fds, so events go to a file (``--events-file``): :class:`GuardedServer`
makes a private one and reads it, stops or kills the tree through guardian's pidfd, and keeps
``released`` readable after it is closed. A server command that cannot be started raises
``FileNotFoundError`` / ``PermissionError`` from :func:`guarded` (resolved as ``execvp``
would, with the PATH the SDK gives the server), not "Connection closed" later.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, List, Optional, Type, Union

from ._binary import binary
from ._command import check_command
from ._events import Event, Released, Spawned, is_last, log_event, parse_event
from ._options import DRIVER_OWNED, Duration, duration_seconds, to_args
from ._popen import EXIT_SLACK, KILLED_WAIT
from ._spec import KILL_SIGNAL, KILL_SIGNAL_NUMBER, KILL_VARIABLE, STOP_SIGNAL_NUMBER
from ._versions import GuardianVersionError, check as check_version

log = logging.getLogger("treeguardian")

if TYPE_CHECKING:
    from mcp import StdioServerParameters

#: What guardian needs between the end of its grace and a SIGKILL for the kill and the reap.
MARGIN = 0.5


def sdk_kill_window() -> float:
    """Seconds the installed SDK waits between its SIGTERM to the group and its SIGKILL
    (``FORCE_KILL_TIMEOUT`` in 2.x; 1.x's ``_terminate_process_tree`` default, 2 s)."""
    import inspect

    from mcp.client import stdio

    window = getattr(stdio, "FORCE_KILL_TIMEOUT", None)
    if isinstance(window, (int, float)):
        return float(window)
    terminate = getattr(stdio, "_terminate_process_tree", None)
    if terminate is not None:
        default = inspect.signature(terminate).parameters.get("timeout_seconds")
        if default is not None and isinstance(default.default, (int, float)):
            return float(default.default)
    return 2.0


def check_grace(grace: Duration) -> float:
    """The grace in seconds, if it fits the SDK's window with :data:`MARGIN` to spare; else
    ``ValueError`` naming both: the SDK should see guardian finish (its SIGKILL reaches only
    guardian's sentinel, and the tree is then torn down after the SDK stopped waiting)."""
    seconds = duration_seconds(grace)
    window = sdk_kill_window()
    if seconds + MARGIN > window:
        raise ValueError(
            f"grace {seconds:g}s does not fit the MCP SDK's {window:g}s between SIGTERM and SIGKILL "
            f"(guardian needs grace + {MARGIN:g}s); use grace <= {window - MARGIN:g}"
        )
    return seconds


def guarded(
    server: "StdioServerParameters",
    *,
    grace: Duration = 1.0,
    events_file: Union[str, "os.PathLike[str]", None] = None,
    **options: Any,
) -> "StdioServerParameters":
    """A copy of ``server`` that runs it under the bundled guardian.

    ``grace`` (seconds, or guardian's text) is checked against the SDK's kill window;
    ``events_file`` appends guardian's events to that path; other keywords are guardian's
    options (``timeout="30m"``, ``cgroup="auto"``, ...)."""
    check_grace(grace)
    for k in DRIVER_OWNED:
        if k in options:
            raise TypeError(f"{k} is set by guarded() itself (events_file=PATH)")
    flags = to_args({"grace": grace, **options})
    if events_file is not None:
        flags.append(f"--events-file={os.fspath(events_file)}")
    # The SDK gives the server its default environment (PATH among it) updated by server.env.
    env = dict(server.env or {})
    cwd = getattr(server, "cwd", None)  # (an mcp without cwd runs the server in the host's)
    check_command(server.command, env if "PATH" in env else None, None if cwd is None else os.fspath(cwd))
    env[KILL_VARIABLE] = KILL_SIGNAL  # the kill request (guardian drops it from the server's)
    update = {"command": binary(), "args": [*flags, "--", server.command, *server.args], "env": env}
    copy: StdioServerParameters = server.model_copy(update=update)
    return copy


class GuardedServer:
    """One guarded connection's parameters, with its events and its stop verbs.

    ``params`` goes to ``stdio_client``; ``events``, ``spawned``, ``released`` read the private
    events file; :meth:`stop` and :meth:`kill` signal guardian through a pidfd opened while
    the file shows it has not released (its pid cannot have been reused then). Use one per
    connection (a reconnect makes a new one). ``close()`` (or leaving ``with``) waits for the
    release (the grace and 2 s; then a stop request, then the kill request), keeps the events
    (``released`` stays readable) and removes the file.
    """

    def __init__(self, server: "StdioServerParameters", *, grace: Duration = 1.0, **options: Any) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="treeguardian-"))
        self.events_path = self._dir / "events.jsonl"
        self.params = guarded(server, grace=grace, events_file=self.events_path, **options)
        self._grace = duration_seconds(grace)
        self._kept: Optional[List[Event]] = None
        self._logged = 0
        self._version_error: Optional[GuardianVersionError] = None

    @property
    def events(self) -> List[Event]:
        if self._kept is not None:
            return list(self._kept)
        try:
            data = self.events_path.read_bytes()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        events = [parse_event(line) for line in complete.splitlines() if line.strip()]
        new = events[self._logged :]
        self._logged = max(self._logged, len(events))
        for ev in new:
            log_event(ev)
            if isinstance(ev, Spawned) and self._version_error is None:
                self._version_error = check_version(ev, self.params.command)
                if self._version_error is not None:
                    log.error("%s", self._version_error)
                    self._signal_while_running(ev, STOP_SIGNAL_NUMBER, events)
        return events

    def _raise_version(self) -> None:
        if self._version_error is not None:
            raise self._version_error

    @property
    def spawned(self) -> Optional[Spawned]:
        return next((e for e in self.events if isinstance(e, Spawned)), None)

    @property
    def released(self) -> Optional[Released]:
        return next((e for e in self.events if isinstance(e, Released)), None)

    def _ended(self) -> bool:
        """guardian wrote its last event, or is gone (or never ran)."""
        events = self.events
        if any(is_last(e) for e in events):
            return True
        spawned = next((e for e in events if isinstance(e, Spawned)), None)
        if spawned is None:
            return True
        try:
            pidfd = os.pidfd_open(spawned.guardian_pid)
        except ProcessLookupError:
            return True
        try:
            # readable once guardian exited (also while the SDK has not reaped it yet)
            return bool(select.select([pidfd], [], [], 0)[0])
        finally:
            os.close(pidfd)

    def _wait_ended(self, timeout: Optional[float]) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self._ended():
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.01)
        return True

    def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        """Waits (at most ``timeout``) until guardian wrote its last event or is gone; the
        ``released`` event, or ``None`` (guardian failed, never ran, or the time ran out).
        Raises :class:`~treeguardian.GuardianVersionError` for a guardian older than this
        driver (whose tree it stopped)."""
        self._wait_ended(timeout)
        self._raise_version()
        return self.released

    async def wait_released_async(self, timeout: Optional[float] = None) -> Optional[Released]:
        """:meth:`wait_released` for async code (anyio: asyncio or trio)."""
        import anyio

        with anyio.move_on_after(timeout):
            while not self._ended():
                await anyio.sleep(0.01)
        self._raise_version()
        return self.released

    def _signal(self, sig: int) -> bool:
        """Signals guardian if it is still there; ``False`` if it has released (or never ran)."""
        events = self.events
        spawned = next((e for e in events if isinstance(e, Spawned)), None)
        return spawned is not None and self._signal_while_running(spawned, sig, None)

    def _signal_while_running(self, spawned: Spawned, sig: int, events: Optional[List[Event]]) -> bool:
        try:
            pidfd = os.pidfd_open(spawned.guardian_pid)
        except ProcessLookupError:
            return False
        try:
            # released is written before guardian exits: not in the file now (read after the
            # pidfd was opened) means the pidfd names our guardian, not a reuse of its pid.
            if any(is_last(e) for e in (self.events if events is None else events)):
                return False
            signal.pidfd_send_signal(pidfd, sig)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)

    def stop(self) -> bool:
        """A stop request to guardian (SIGTERM); ``False`` if it already released."""
        return self._signal(STOP_SIGNAL_NUMBER)

    def kill(self) -> bool:
        """The kill request: SIGKILL to the whole tree now; ``False`` if it already released."""
        return self._signal(KILL_SIGNAL_NUMBER)

    def kill_now(self) -> bool:
        """Deprecated: :meth:`kill`."""
        import warnings

        warnings.warn("kill_now() is kill() (the kill request); kill_now will be removed", DeprecationWarning, stacklevel=2)
        return self.kill()

    def close(self) -> None:
        """Waits for the release (see the class), keeps the events, removes the file."""
        if self._kept is not None:
            return
        try:
            if not self._wait_ended(self._grace + EXIT_SLACK):
                self.stop()
                if not self._wait_ended(self._grace + EXIT_SLACK):
                    self.kill()
                    self._wait_ended(KILLED_WAIT)
        finally:
            self._kept = self.events
            shutil.rmtree(self._dir, ignore_errors=True)
        self._raise_version()

    def __enter__(self) -> "GuardedServer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()


def main() -> None:
    """``treeguardian-mcp`` and ``python -m treeguardian.mcp``: wrap, unwrap or check the stdio
    MCP servers in a host's config files (see :mod:`treeguardian._mcp_wrap`)."""
    from ._mcp_wrap import main as run

    raise SystemExit(run())


if __name__ == "__main__":
    main()
