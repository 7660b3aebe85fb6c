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
makes a private one and reads it, and stops the tree through guardian's pidfd.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, List, Optional, Type, Union

from ._binary import binary
from ._events import Event, Released, Spawned, is_last, parse_event
from ._options import DRIVER_OWNED, Duration, duration_seconds, to_args

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
    update = {"command": binary(), "args": [*flags, "--", server.command, *server.args]}
    copy: StdioServerParameters = server.model_copy(update=update)
    return copy


class GuardedServer:
    """One guarded connection's parameters, with its events and its stop verbs.

    ``params`` goes to ``stdio_client``; ``events``, ``spawned``, ``released`` read the private
    events file; :meth:`stop` and :meth:`kill_now` signal guardian through a pidfd opened while
    the file shows it has not released (its pid cannot have been reused then). Use one per
    connection (a reconnect makes a new one); ``close()`` (or ``with``) removes the file.
    """

    def __init__(self, server: "StdioServerParameters", *, grace: Duration = 1.0, **options: Any) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="treeguardian-"))
        self.events_path = self._dir / "events.jsonl"
        self.params = guarded(server, grace=grace, events_file=self.events_path, **options)
        self._stop_sent = False

    @property
    def events(self) -> List[Event]:
        try:
            data = self.events_path.read_bytes()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        return [parse_event(line) for line in complete.splitlines() if line.strip()]

    @property
    def spawned(self) -> Optional[Spawned]:
        return next((e for e in self.events if isinstance(e, Spawned)), None)

    @property
    def released(self) -> Optional[Released]:
        return next((e for e in self.events if isinstance(e, Released)), None)

    def _signal(self, sig: int) -> bool:
        """Signals guardian if it is still there; ``False`` if it has released (or never ran)."""
        spawned = self.spawned
        if spawned is None:
            return False
        try:
            pidfd = os.pidfd_open(spawned.guardian_pid)
        except ProcessLookupError:
            return False
        try:
            # released is written before guardian exits: not in the file now means the pidfd
            # names our guardian, not a reuse of its pid.
            if any(is_last(e) for e in self.events):
                return False
            signal.pidfd_send_signal(pidfd, sig)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)

    def stop(self) -> bool:
        """A stop request to guardian (SIGTERM); ``False`` if it already released."""
        sent = self._signal(signal.SIGTERM)
        self._stop_sent = self._stop_sent or sent
        return sent

    def kill_now(self) -> bool:
        """SIGKILL the tree now (a second stop request once guardian is stopping)."""
        from ._events import Exit, Stopping

        if not any(isinstance(e, (Stopping, Exit)) for e in self.events):
            # A second SIGTERM before guardian read the first may merge with it: wait for
            # guardian to report the first stop request before sending the kill request.
            if not self._stop_sent and not self.stop():
                return False
            import time

            end = time.monotonic() + 5.0
            while time.monotonic() < end and not any(isinstance(e, (Stopping, Exit)) for e in self.events):
                time.sleep(0.005)
        return self._signal(signal.SIGTERM)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

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
