"""``treeguardian.Popen``: ``subprocess.Popen`` of a provider under guardian; and what the
three process APIs (``Popen``, :mod:`treeguardian.aio`, :mod:`treeguardian.anyio`) share:
guardian's command line and events pipe (:func:`spawning`), the tree's verbs and the decisions
of ``kill_now`` and of leaving a ``with`` block (:class:`TreeVerbs`, :class:`AsyncTreeVerbs`).
Each API keeps only how it signals, waits and sleeps."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Mapping,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from ._binary import ENVIRON, _found, binary, cached_binary, forget_binary, _ENV_OVERRIDE_KEY
from ._events import Event, Released, Spawned
from ._options import DRIVER_OWNED, OPTIONS, Duration, duration_seconds, to_args
from ._status import Outcome, describe
from ._stream import EventStream

Args = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]

T = TypeVar("T")

#: guardian's options as keywords of the three APIs (``timeout=`` is guardian's --timeout:
#: Popen's constructor has no timeout of its own; ``grace=`` is a parameter of each).
GUARDIAN_KEYWORDS = frozenset(OPTIONS) - frozenset(DRIVER_OWNED)

#: How long a stop request right after the start waits at most for guardian to be ready for it
#: (in practice it waits for one read of /proc; more only when guardian is slow to reach its
#: first instruction: a cold cache, a throttled cgroup, an emulator).
READY_WAIT = 5.0
#: How long ``kill_now`` waits for guardian to take the first stop request.
STOPPING_WAIT = 5.0
#: Leaving a ``with`` block waits the grace and this long for guardian before the kill request.
EXIT_SLACK = 2.0
#: The async APIs' bound on the wait for guardian after that kill request.
KILLED_WAIT = 10.0
#: guardian's grace when none is given.
DEFAULT_GRACE = 1.0


def guardian_argv(
    args: Args, *, shell: bool = False, events_fd: Optional[int] = None, **options: Any
) -> List[str]:
    """The full command line: the bundled guardian, its options, ``--``, the provider."""
    if isinstance(args, (str, bytes, os.PathLike)):
        provider = ["/bin/sh", "-c", os.fsdecode(args)] if shell else [os.fsdecode(args)]
    else:
        provider = [a if type(a) is str else os.fsdecode(a) for a in args]
        if shell:
            provider = ["/bin/sh", "-c", *provider]
    if not provider:
        raise ValueError("no provider command given")
    flags = to_args(options)
    if events_fd is not None:
        flags.append(f"--events-fd={events_fd}")
    return [cached_binary(), *flags, "--", *provider]


def term_blocked(pid: int) -> Optional[bool]:
    """Whether process ``pid`` blocks SIGTERM (``SigBlk`` of ``/proc/<pid>/status``); ``None``
    when that cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"SigBlk:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return None


#: ``GUARDIAN_GRACE``: guardian's grace, when no ``grace=`` is given.
GRACE_ENV = OPTIONS["grace"].env or "GUARDIAN_GRACE"
_GRACE_ENV_KEY = GRACE_ENV.encode()


def env_grace_text(env: Optional[Mapping[Any, Any]]) -> Union[str, bytes, None]:
    """``GUARDIAN_GRACE`` of the environment guardian gets (``env=``, else this process's),
    as given. Taken at the start (one dictionary lookup), read by :func:`env_grace` later."""
    if env is None:
        return ENVIRON.get(_GRACE_ENV_KEY)
    value = env.get(GRACE_ENV)
    return env.get(_GRACE_ENV_KEY) if value is None else value


def env_grace(text: Union[str, bytes, None]) -> float:
    """The grace guardian uses when no ``grace=`` is given: its ``GUARDIAN_GRACE``
    (:func:`env_grace_text`), else its default. The drivers wait that long (plus a margin)
    before they ask guardian to kill the tree now, so a grace set through the environment must
    not be cut short by the default's second."""
    if text is None:
        return DEFAULT_GRACE
    try:
        return duration_seconds(os.fsdecode(text))
    except ValueError:
        return DEFAULT_GRACE  # guardian itself refuses it (status 125, naming the variable)


#: The events pipe: non-blocking, for the stream reads what is there when asked (guardian
#: never blocks on its end whatever the flags: RWF_NOWAIT, or its own reopened description).
_PIPE_FLAGS = os.O_CLOEXEC | os.O_NONBLOCK
#: ``Popen`` keywords that take it off its shortest path (:meth:`Popen.__init__`).
_NOT_PLAIN = GUARDIAN_KEYWORDS | {"shell", "pass_fds", "env", "executable"}


class spawning:
    """One start of guardian, around the call that starts it: takes guardian's options
    (:data:`GUARDIAN_KEYWORDS`), ``shell`` and ``pass_fds`` out of ``kwds``, makes the events
    pipe and gives ``argv`` and ``pass_fds`` (the pipe's write end among them). Once the call
    returned, :meth:`started` closes the write end and gives the stream; if it raised,
    :meth:`failed` closes both ends.

    Everything here runs on the spawn's critical path (issue 20.5): while a host works right
    after the spawn, guardian starts as much later (measured 1:1 on a 2-core host), so nothing
    is done before or after the start that can wait. The binary's path is the cached one (a
    binary that vanished since is named when the start fails); the stream reads nothing until
    asked (:class:`EventStream`); the grace from the environment is parsed when needed.
    :class:`Popen`'s common start does the same inline."""

    __slots__ = ("argv", "pass_fds", "grace", "env_grace", "_rfd", "_wfd")
    #: ``grace=``, else ``GUARDIAN_GRACE`` as guardian gets it (parsed when needed).
    env_grace: Union[str, bytes, None]

    def __init__(self, args: Args, kwds: Dict[str, Any], grace: Optional[Duration], *, shell: bool = False) -> None:
        self.grace = grace
        self.env_grace = env_grace_text(kwds.get("env")) if grace is None else None
        options = {} if GUARDIAN_KEYWORDS.isdisjoint(kwds) else {k: kwds.pop(k) for k in list(kwds) if k in GUARDIAN_KEYWORDS}
        if grace is not None:
            duration_seconds(grace)  # a bad grace raises before anything starts
            options["grace"] = grace
        self._rfd, self._wfd = os.pipe2(_PIPE_FLAGS)
        try:
            self.argv = guardian_argv(args, shell=shell, events_fd=self._wfd, **options)
            given = kwds.pop("pass_fds", None)
            self.pass_fds = (*given, self._wfd) if given else (self._wfd,)
        except BaseException:
            os.close(self._rfd)
            os.close(self._wfd)
            raise

    def started(self) -> EventStream:
        """guardian runs: the write end is its alone; the events to read."""
        os.close(self._wfd)
        return EventStream(self._rfd)

    def failed(self, exc: BaseException) -> None:
        """The start raised ``exc``: both ends closed (see :func:`_start_failed`)."""
        _start_failed(exc, self.argv[0], self._rfd, self._wfd)


def _start_failed(exc: BaseException, path: str, rfd: int, wfd: int) -> None:
    """The start of guardian at ``path`` raised ``exc``: the events pipe's ends closed. A cached
    binary that is gone is searched again, raising the error that names where."""
    os.close(wfd)
    os.close(rfd)
    if isinstance(exc, FileNotFoundError) and exc.filename == path:
        forget_binary()
        binary()


class TreeVerbs:
    """The provider's tree's verbs, the same for every process API: pids and events from the
    stream, the stop request, and ``kill_now``'s decisions. A subclass says what guardian's
    status is and how it is signalled (:meth:`_returncode`, :meth:`_signal`)."""

    _stream: EventStream
    _stop_sent = False
    #: ``grace=``; else ``GUARDIAN_GRACE`` as guardian got it (see :class:`spawning`).
    _given_grace: Optional[Duration] = None
    _env_grace: Union[str, bytes, None] = None

    def _tree_init(self, start: spawning) -> None:
        self._stream = start.started()
        self._given_grace = start.grace
        self._env_grace = start.env_grace

    @property
    def _grace(self) -> float:
        """The grace in seconds: ``grace=``, else guardian's from its environment (parsed now,
        off the start's critical path)."""
        if self._given_grace is None:
            return env_grace(self._env_grace)
        return duration_seconds(self._given_grace)

    def _returncode(self) -> Optional[int]:
        """guardian's exit status once it was reaped (no side effect), else ``None``."""
        raise NotImplementedError

    @property
    def guardian_pid(self) -> int:
        """guardian's pid (each process API says where it is)."""
        raise NotImplementedError

    def _reaped(self) -> bool:
        """Whether guardian was reaped (a subclass may reap it here if it exited)."""
        return self._returncode() is not None

    def _signal(self, sig: int) -> None:
        """Sends ``sig`` to guardian while it is unreaped (its pid cannot have been reused);
        a no-op once it was reaped."""
        raise NotImplementedError

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
        """The named exit status, once guardian was reaped."""
        rc = self._returncode()
        return None if rc is None else describe(rc, self._stream.exit)

    def stop(self) -> None:
        """A stop request: the provider gets the stop signal, the tree SIGKILL after the grace.

        Right after the start it first waits (:meth:`_until_ready`, the instants of guardian's
        exec) until guardian takes SIGTERM as a request."""
        self._until_ready()
        self._stop_sent = True
        self._signal(signal.SIGTERM)

    def _until_ready(self) -> None:
        """Waits, at most :data:`READY_WAIT`, until guardian blocks SIGTERM (its first act, read
        from ``/proc/<pid>/status``), wrote an event, or exited. Sent in the kernel's tail of
        guardian's exec, right after the spawn returned, a SIGTERM would end guardian by the
        default action (nothing started yet, but no ``released``). Blocking, also in the async
        APIs, but in practice for one read of /proc: by the time a caller stops, guardian
        runs. Where /proc cannot be read it waits for the first event."""
        end = time.monotonic() + READY_WAIT
        while not self._stream.has_events() and not self._stream.closed and not self._reaped():
            blocked = term_blocked(self.guardian_pid)
            left = end - time.monotonic()
            if blocked or left <= 0:
                return
            if blocked is None:
                self._stream.wait_until(self._stream.has_events, min(left, 0.005))
            else:
                time.sleep(0.0001)

    def terminate(self) -> None:
        self.stop()

    def _kill_first(self) -> bool:
        """``kill_now``'s first step: the first stop request, unless one was sent. ``True``
        when the caller must wait (at most :data:`STOPPING_WAIT`) for guardian to report that
        it is stopping before :meth:`_kill_second`."""
        if self._reaped() or self._stream.stopping:
            return False
        # Two SIGTERMs before guardian reads the first may arrive as one: the kill request
        # is sent only once guardian reports that it is stopping.
        if not self._stop_sent:
            self.stop()
        return True

    def _kill_second(self) -> None:
        """``kill_now``'s kill request: a second stop request, which ends the grace with
        SIGKILL to the tree at once, unless the tree is released or guardian reaped."""
        if self._stream.released is None:
            self._signal(signal.SIGTERM)


class _LoopProcess(Protocol):
    """What :class:`AsyncTreeVerbs` uses of ``asyncio.subprocess.Process`` and
    ``anyio.abc.Process``."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> Optional[int]: ...

    def send_signal(self, signal: signal.Signals) -> None: ...


class AsyncTreeVerbs(TreeVerbs):
    """:class:`TreeVerbs` for an event loop's process (``_proc``); a subclass says how to wait
    (:meth:`_until`, :meth:`_wait_exited`) without blocking the loop."""

    _proc: _LoopProcess

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
        # The event loop signals only a child it has not reaped yet; after that, nothing.
        if self._proc.returncode is None:
            try:
                self._proc.send_signal(signal.Signals(sig))
            except ProcessLookupError:
                pass

    async def _until(self, pred: Callable[[], Optional[T]], timeout: Optional[float]) -> Optional[T]:
        """``pred()``'s first non-``None`` value (re-checked at each event), or ``None`` once
        the stream ended or ``timeout`` ran out."""
        raise NotImplementedError

    async def _wait_exited(self, timeout: float) -> bool:
        """Waits at most ``timeout`` for guardian to exit; whether it did."""
        raise NotImplementedError

    async def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        return await self._until(lambda: self._stream.spawned, timeout)

    async def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        return await self._until(lambda: self._stream.released, timeout)

    async def kill_now(self) -> None:
        """SIGKILL the whole tree now; never SIGKILLs guardian itself."""
        if self._kill_first():
            await self._until(lambda: True if self._stream.stopping else None, STOPPING_WAIT)
        self._kill_second()

    async def _stop_and_wait(self) -> None:
        """Leaving ``async with``: the stop request, the grace (and :data:`EXIT_SLACK`) for
        guardian to exit, then the kill request and at most :data:`KILLED_WAIT` more."""
        self._stream.attach()  # read while guardian exits (see Popen.wait)
        if self._returncode() is None:
            self.stop()
            if not await self._wait_exited(self._grace + EXIT_SLACK):
                await self.kill_now()
                await self._wait_exited(KILLED_WAIT)


class Popen(TreeVerbs, subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` whose process is guardian running ``args`` as its provider.

    Everything ``subprocess.Popen`` takes works (stdin/stdout/stderr, env, cwd, pass_fds,
    start_new_session, ...). guardian's options are keyword arguments (``grace=1.5``,
    ``timeout="10m"``, ``stop_signal="INT"``, see ``treeguardian.OPTIONS``). Events arrive on
    a private pipe (``--events-fd``), read when asked for and, from the first wait on, by
    a shared thread (:class:`~treeguardian._stream.EventStream`).

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
        if grace is None and type(args) is list and args and _NOT_PLAIN.isdisjoint(kwargs):
            # The common start (a list; no guardian option, shell, fds or environment of the
            # caller's): spawning's steps inline, for each call costs ~1 us on this cold path,
            # which guardian's start waits for (issue 20.5). guardian_argv's result (tested).
            self._env_grace = ENVIRON.get(_GRACE_ENV_KEY)
            path = _found.get(ENVIRON.get(_ENV_OVERRIDE_KEY) or b"") or binary()
            provider = [a if type(a) is str else os.fsdecode(a) for a in args]
            rfd, wfd = os.pipe2(_PIPE_FLAGS)
            try:
                super().__init__([path, f"--events-fd={wfd}", "--", *provider], pass_fds=(wfd,), **kwargs)
            except BaseException as e:
                _start_failed(e, path, rfd, wfd)
                raise
            os.close(wfd)
            self._stream = EventStream(rfd)
            return
        if "executable" in kwargs:
            raise TypeError("treeguardian.Popen runs guardian; give the provider as args[0], not executable=")
        s = spawning(args, kwargs, grace, shell=bool(kwargs.pop("shell", False)))
        try:
            super().__init__(s.argv, pass_fds=s.pass_fds, **kwargs)
        except BaseException as e:
            s.failed(e)
            raise
        self._tree_init(s)

    # ---- pids and events ----

    @property
    def guardian_pid(self) -> int:
        return self.pid

    def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        """The ``spawned`` event; ``None`` if guardian failed to start the provider."""
        return self._stream.wait_for(Spawned, timeout)

    def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        """The ``released`` event (``None``: guardian failed, see ``events``, or the time ran out)."""
        return self._stream.wait_for(Released, timeout)

    # ---- stopping ----

    def _returncode(self) -> Optional[int]:
        return self.returncode

    def _reaped(self) -> bool:
        return self.poll() is not None

    def _signal(self, sig: int) -> None:
        # Popen.send_signal signals only while guardian is unreaped (its pid cannot be reused).
        self.send_signal(sig)

    def kill_now(self) -> None:
        """SIGKILL the whole tree now (a second stop request, once guardian is stopping)."""
        if self._kill_first():
            self._stream.wait_until(lambda: self._stream.stopping, STOPPING_WAIT)
        self._kill_second()

    def kill(self) -> None:
        """``kill_now()``: the tree gets SIGKILL; guardian itself reaps it and exits."""
        self.kill_now()

    def _read_events(self) -> None:
        # (no stream yet while subprocess.Popen.__init__ runs)
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.attach()

    def poll(self) -> Optional[int]:
        # A host that polls reads the events from then on (see wait).
        self._read_events()
        return super().poll()

    def communicate(self, input: Any = None, timeout: Optional[float] = None) -> Tuple[Any, Any]:
        self._read_events()  # (see wait)
        return super().communicate(input, timeout)

    def wait(self, timeout: Optional[float] = None) -> int:
        # The events are read while guardian exits: it waits (1 s) for a reader to take what
        # its last events do not fit in the pipe, and then drops them.
        self._read_events()
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
                    self.wait(self._grace + EXIT_SLACK)
                except subprocess.TimeoutExpired:
                    self.kill_now()
        finally:
            super().__exit__(exc_type, exc, tb)
            self._stream.join(5.0)
