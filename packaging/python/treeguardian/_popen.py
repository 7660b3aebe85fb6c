"""``treeguardian.Popen``: ``subprocess.Popen`` of a provider under guardian."""

from __future__ import annotations

import os
import signal
import subprocess
from types import TracebackType
from typing import Any, List, Optional, Sequence, Tuple, Type, Union

from ._binary import binary
from ._events import Event, Released, Spawned
from ._options import DRIVER_OWNED, OPTIONS, Duration, duration_seconds, to_args
from ._status import Outcome, describe
from ._stream import EventStream

Args = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]

#: How long :meth:`Popen.kill_now` waits for guardian to take the first stop request.
_STOPPING_WAIT = 5.0


def guardian_argv(
    args: Args, *, shell: bool = False, events_fd: Optional[int] = None, **options: Any
) -> List[str]:
    """The full command line: the bundled guardian, its options, ``--``, the provider."""
    if isinstance(args, (str, bytes, os.PathLike)):
        provider = ["/bin/sh", "-c", os.fsdecode(args)] if shell else [os.fsdecode(args)]
    else:
        provider = [os.fsdecode(a) for a in args]
        if shell:
            provider = ["/bin/sh", "-c", *provider]
    if not provider:
        raise ValueError("no provider command given")
    flags = to_args(options)
    if events_fd is not None:
        flags.append(f"--events-fd={events_fd}")
    return [binary(), *flags, "--", *provider]


class Popen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` whose process is guardian running ``args`` as its provider.

    Everything ``subprocess.Popen`` takes works (stdin/stdout/stderr, env, cwd, pass_fds,
    start_new_session, ...). guardian's options are keyword arguments (``grace=1.5``,
    ``timeout="10m"``, ``stop_signal="INT"``, see ``treeguardian.OPTIONS``). Events arrive on
    a private pipe (``--events-fd``), read by a thread.

    * ``pid`` / ``guardian_pid``: guardian's pid; ``provider_pid``: the provider's (after
      ``spawned``; :meth:`wait_spawned` waits for it).
    * ``events``: every event so far; ``released``: the ``released`` event once the tree is
      gone; :meth:`wait_released`.
    * :meth:`stop` (also ``terminate()``): a stop request (the provider gets the stop signal,
      the tree SIGKILL after the grace). :meth:`kill_now` (also ``kill()``): SIGKILL the whole
      tree now. Neither ever SIGKILLs guardian itself, which would orphan the tree.
    * ``with treeguardian.Popen(...) as p:`` stops the tree on exit from the block and waits
      for the release.
    """

    def __init__(self, args: Args, *, grace: Optional[Duration] = None, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _GUARDIAN_KEYWORDS}
        if grace is not None:
            options["grace"] = grace
        if "executable" in kwargs:
            raise TypeError("treeguardian.Popen runs guardian; give the provider as args[0], not executable=")
        self._grace = duration_seconds(grace) if grace is not None else 1.0
        self._stream = EventStream()
        self._stop_sent = False
        rfd, wfd = os.pipe2(os.O_CLOEXEC)
        pass_fds: Tuple[int, ...] = tuple(kwargs.pop("pass_fds", ())) + (wfd,)
        argv = guardian_argv(args, shell=bool(kwargs.pop("shell", False)), events_fd=wfd, **options)
        try:
            super().__init__(argv, pass_fds=pass_fds, **kwargs)
        except BaseException:
            os.close(rfd)
            raise
        finally:
            os.close(wfd)
        self._stream.read_fd(rfd)

    # ---- pids and events ----

    @property
    def guardian_pid(self) -> int:
        return self.pid

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

    def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        """The ``spawned`` event; ``None`` if guardian failed to start the provider."""
        return self._stream.wait_for(Spawned, timeout)

    def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        """The ``released`` event (``None``: guardian failed, see ``events``, or the time ran out)."""
        return self._stream.wait_for(Released, timeout)

    @property
    def outcome(self) -> Optional[Outcome]:
        """The named exit status, once guardian was reaped."""
        if self.returncode is None:
            return None
        return describe(self.returncode, self._stream.exit)

    # ---- stopping ----

    def _signal_guardian(self, sig: int) -> None:
        # Popen.send_signal signals only while guardian is unreaped (its pid cannot be reused).
        super().send_signal(sig)

    def stop(self) -> None:
        """A stop request: the provider gets the stop signal, the tree SIGKILL after the grace."""
        self._stop_sent = True
        self._signal_guardian(signal.SIGTERM)

    def kill_now(self) -> None:
        """SIGKILL the whole tree now (a second stop request, once guardian is stopping)."""
        if self.poll() is not None:
            return
        if not self._stream.stopping:
            # Two SIGTERMs before guardian reads the first may arrive as one: the kill request
            # is sent only once guardian reports that it is stopping.
            if not self._stop_sent:
                self.stop()
            self._stream.wait_until(lambda: self._stream.stopping, _STOPPING_WAIT)
        if self.poll() is None and self._stream.released is None:
            self._signal_guardian(signal.SIGTERM)

    def terminate(self) -> None:
        self.stop()

    def kill(self) -> None:
        """``kill_now()``: the tree gets SIGKILL; guardian itself reaps it and exits."""
        self.kill_now()

    def wait(self, timeout: Optional[float] = None) -> int:
        rc = super().wait(timeout)
        # guardian wrote its last line before exiting: let the reader take it.
        self._stream.join(5.0)
        return rc

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            if self.poll() is None:
                self.stop()
                try:
                    self.wait(self._grace + 2.0)
                except subprocess.TimeoutExpired:
                    self.kill_now()
        finally:
            super().__exit__(exc_type, exc, tb)
            self._stream.join(5.0)


#: guardian's options as Popen keywords (``timeout=`` is guardian's --timeout: Popen's
#: constructor has no timeout of its own).
_GUARDIAN_KEYWORDS = frozenset(OPTIONS) - frozenset(DRIVER_OWNED) - {"grace"}
