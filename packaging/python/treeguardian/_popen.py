"""``treeguardian.Popen``: ``subprocess.Popen`` of a provider under guardian; and what the
three process APIs (``Popen``, :mod:`treeguardian.aio`, :mod:`treeguardian.anyio`) share:
guardian's command line and events pipe (:func:`spawning`), the tree's verbs and the decisions
of ``kill_now`` and of leaving a ``with`` block (:class:`TreeVerbs`, :class:`AsyncTreeVerbs`).
Each API keeps only how it signals, waits and sleeps."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import warnings
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Mapping,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from ._binary import ENVIRON, _found, binary, cached_binary, forget_binary, _ENV_OVERRIDE_KEY
from ._command import check_command
from ._events import Event, Released, Spawned
from ._options import DRIVER_OWNED, OPTIONS, Duration, duration_seconds, to_args
from ._spec import KILL_SIGNAL, KILL_SIGNAL_NUMBER, KILL_VARIABLE, READY_WAIT_SECONDS, STOP_SIGNAL_NUMBER
from ._status import Outcome, describe
from ._stream import EventStream
from ._versions import GuardianVersionError, check as check_version

log = logging.getLogger("treeguardian")

Args = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]", Sequence[Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]]]

T = TypeVar("T")

#: guardian's options as keywords of the three APIs (``timeout=`` is guardian's --timeout:
#: Popen's constructor has no timeout of its own; ``grace=`` is a parameter of each).
GUARDIAN_KEYWORDS = frozenset(OPTIONS) - frozenset(DRIVER_OWNED)

#: How long a stop request right after the start waits at most for guardian to be ready for it
#: (in practice it waits for one read of /proc; more only when guardian is slow to reach its
#: first instruction: a cold cache, a throttled cgroup, an emulator).
READY_WAIT = READY_WAIT_SECONDS
#: Leaving a ``with`` block waits the grace and this long for guardian before the kill request.
EXIT_SLACK = 2.0
#: The bound on the wait for guardian after that kill request.
KILLED_WAIT = 10.0
#: guardian's grace when none is given (its default, from spec/options.json).
DEFAULT_GRACE = duration_seconds(OPTIONS["grace"].default or "1s")


def guardian_argv(
    args: Args, *, shell: bool = False, events_fd: Optional[int] = None, **options: Any
) -> List[str]:
    """The full command line: the bundled guardian, its options, ``--``, the provider."""
    return _argv(args, shell, to_args(options), events_fd)


def _argv(args: Args, shell: bool, flags: List[str], events_fd: Optional[int]) -> List[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        provider = ["/bin/sh", "-c", os.fsdecode(args)] if shell else [os.fsdecode(args)]
    else:
        provider = [a if type(a) is str else os.fsdecode(a) for a in args]
        if shell:
            provider = ["/bin/sh", "-c", *provider]
    if not provider:
        raise ValueError("no provider command given")
    if events_fd is not None:
        flags = [*flags, f"--events-fd={events_fd}"]
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


_KILL_KEY = KILL_VARIABLE.encode()
_KILL_VALUE = KILL_SIGNAL.encode()
_ENV_DATA = getattr(os.environ, "_data", None)


def guardian_env(env: Optional[Mapping[Any, Any]]) -> Dict[Any, Any]:
    """guardian's environment: ``env`` (else this process's) with the kill request
    (``GUARDIAN_KILL_SIGNAL=RTMAX``, spec/driver.json; guardian removes it from the provider's).
    From ``os.environ``'s own bytes table when there is one: one dict copy on the spawn's path."""
    if env is None:
        out: Dict[Any, Any] = dict(_ENV_DATA) if isinstance(_ENV_DATA, dict) else {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    else:
        out = dict(env)
        out.pop(KILL_VARIABLE, None)
    out[_KILL_KEY] = _KILL_VALUE
    return out


#: The events pipe: non-blocking, for the stream reads what is there when asked (guardian
#: never blocks on its end whatever the flags: RWF_NOWAIT, or its own reopened description).
_PIPE_FLAGS = os.O_CLOEXEC | os.O_NONBLOCK
#: ``Popen`` keywords that take it off its shortest path (:meth:`Popen.__init__`).
_NOT_PLAIN = GUARDIAN_KEYWORDS | {"shell", "pass_fds", "env", "executable", "cwd"}


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

    __slots__ = ("argv", "pass_fds", "env", "grace", "env_grace", "_rfd", "_wfd")
    #: ``grace=``, else ``GUARDIAN_GRACE`` as guardian gets it (parsed when needed).
    env_grace: Union[str, bytes, None]

    def __init__(self, args: Args, kwds: Dict[str, Any], grace: Optional[Duration], *, shell: bool = False) -> None:
        self.grace = grace
        self.env_grace = env_grace_text(kwds.get("env")) if grace is None else None
        options = {} if GUARDIAN_KEYWORDS.isdisjoint(kwds) else {k: kwds.pop(k) for k in list(kwds) if k in GUARDIAN_KEYWORDS}
        if grace is not None:
            duration_seconds(grace)  # a bad grace raises before anything starts
            options["grace"] = grace
        flags = to_args(options)  # bad options raise before anything starts
        given_env = kwds.pop("env", None)
        if not shell:
            first = args if isinstance(args, (str, bytes, os.PathLike)) else next(iter(args), "")
            check_command(os.fsdecode(first), given_env, kwds.get("cwd"))
        self.env = guardian_env(given_env)
        self._rfd, self._wfd = os.pipe2(_PIPE_FLAGS)
        try:
            self.argv = _argv(args, shell, flags, self._wfd)
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
    stream, the stop request (:meth:`stop`, also ``terminate()``), the kill request
    (:meth:`kill`), signals, the version check. A subclass says what guardian's status is and
    how it is signalled (:meth:`_returncode`, :meth:`_signal`)."""

    _stream: EventStream
    #: guardian's path (named by the version check)
    _path = "guardian"
    #: ``grace=``; else ``GUARDIAN_GRACE`` as guardian got it (see :class:`spawning`).
    _given_grace: Optional[Duration] = None
    _env_grace: Union[str, bytes, None] = None
    #: the version check's verdict, once made
    _version_checked = False
    _version_error: Optional[GuardianVersionError] = None

    def _tree_init(self, start: spawning) -> None:
        self._stream = start.started()
        self._given_grace = start.grace
        self._env_grace = start.env_grace
        self._path = start.argv[0]

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
        """The named exit status, once guardian was reaped (guardian's events decide: a
        provider's own exit 124, 125 or 127 is ``exited``)."""
        rc = self._returncode()
        return None if rc is None else describe(rc, self._stream.exit, events=self._stream.events)

    # ---- the version check (spec/driver.json) ----

    def _check_version(self) -> Optional[GuardianVersionError]:
        """The version check's error, once ``spawned`` was read (``None`` before, or when
        guardian is recent enough). The first time it finds one, it stops the tree."""
        if not self._version_checked:
            spawned = self._stream.spawned
            if spawned is None:
                return None
            self._version_checked = True
            self._version_error = check_version(spawned, self._path)
            if self._version_error is not None:
                log.error("%s", self._version_error)
                # an older guardian knows no kill request: the stop request, with its grace
                self._until_ready()
                self._signal(STOP_SIGNAL_NUMBER)
        return self._version_error

    # ---- stopping ----

    def stop(self, grace: Optional[Duration] = None) -> None:
        """A stop request: the provider gets the stop signal, the tree SIGKILL after the grace
        (guardian's, given at the start). ``grace`` shortens it for this stop: the kill request
        follows after ``grace`` seconds if guardian has not ended by then (a timer thread;
        guardian's own grace still ends it if that is shorter). Returns at once.

        Right after the start it first waits (:meth:`_until_ready`, the instants of guardian's
        exec) until guardian takes SIGTERM as a request."""
        seconds = None if grace is None else duration_seconds(grace)  # a bad grace raises first
        self._until_ready()
        self._signal(STOP_SIGNAL_NUMBER)
        if seconds is not None and seconds < self._grace:
            timer = threading.Timer(seconds, self.kill)
            timer.daemon = True
            timer.name = "treeguardian-stop-grace"
            timer.start()

    def terminate(self) -> None:
        """``stop()``: the stop request (SIGTERM to guardian, which stops the tree with its grace)."""
        self.stop()

    def kill(self) -> None:
        """The kill request: the provider and its whole tree get SIGKILL now, guardian reaps
        them and ends as the provider did (``returncode`` -9, as ``subprocess`` gives). Never
        SIGKILLs guardian itself, which would orphan the tree. A no-op once guardian was reaped."""
        if self._reaped():
            return
        self._until_ready()
        self._signal(KILL_SIGNAL_NUMBER)

    def send_signal(self, sig: int) -> None:
        """``SIGKILL`` is :meth:`kill`, ``SIGTERM`` :meth:`stop`; any other signal goes to
        guardian, which forwards it to the provider (``--forward-to``)."""
        if sig == signal.SIGKILL:
            self.kill()
        elif sig == signal.SIGTERM:
            self.stop()
        else:
            self._until_ready()
            self._signal(sig)

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


def _deprecated_kill_now() -> None:
    warnings.warn("kill_now() is kill() (the kill request); kill_now will be removed", DeprecationWarning, stacklevel=3)


class AsyncTreeVerbs(TreeVerbs):
    """:class:`TreeVerbs` for an event loop's process; a subclass says how to wait
    (:meth:`_until`, :meth:`_wait_exited`) without blocking the loop."""

    async def _until(self, pred: Callable[[], Optional[T]], timeout: Optional[float]) -> Optional[T]:
        """``pred()``'s first non-``None`` value (re-checked at each event), or ``None`` once
        the stream ended or ``timeout`` ran out."""
        raise NotImplementedError

    async def _wait_exited(self, timeout: float) -> bool:
        """Waits at most ``timeout`` for guardian to exit; whether it did."""
        raise NotImplementedError

    async def _gate(self) -> None:
        """The version check, once guardian wrote ``spawned`` (or ended): raises
        :class:`GuardianVersionError` after stopping the tree."""
        await self._until(lambda: True if self._stream.spawned is not None else None, None)
        err = self._check_version()
        if err is not None:
            await self._wait_exited(self._grace + EXIT_SLACK)
            raise err

    async def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        got = await self._until(lambda: self._stream.spawned, timeout)
        if got is not None:
            await self._gate()
        return got

    async def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        return await self._until(lambda: self._stream.released, timeout)

    async def kill_now(self) -> None:
        """Deprecated: :meth:`kill` (sync, as the event loops' ``kill()``)."""
        _deprecated_kill_now()
        self.kill()

    async def _stop_and_wait(self) -> None:
        """Leaving ``async with``: the stop request, the grace (and :data:`EXIT_SLACK`) for
        guardian to exit, then the kill request and at most :data:`KILLED_WAIT` more."""
        self._stream.attach()  # read while guardian exits (see Popen.wait)
        if self._returncode() is None:
            self.stop()
            if not await self._wait_exited(self._grace + EXIT_SLACK):
                self.kill()
                await self._wait_exited(KILLED_WAIT)


class Popen(TreeVerbs, subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` whose process is guardian running ``args`` as its provider.

    Everything ``subprocess.Popen`` takes works (stdin/stdout/stderr, env, cwd, pass_fds,
    start_new_session, ...). guardian's options are keyword arguments (``grace=1.5``,
    ``timeout="10m"`` (guardian's), ``stop_signal="INT"``, see ``treeguardian.OPTIONS``). A
    command that cannot be started raises ``FileNotFoundError`` / ``PermissionError`` here.
    Events arrive on a private pipe (``--events-fd``), read when asked for and, from the first
    wait on, by a shared thread (:class:`~treeguardian._stream.EventStream`).

    * ``pid`` / ``guardian_pid``: guardian's pid; ``provider_pid``: the provider's (after
      ``spawned``; :meth:`wait_spawned` waits for it).
    * ``events``: every event so far; ``released``: the ``released`` event once the tree is
      gone; :meth:`wait_released`.
    * :meth:`stop` (also ``terminate()``): a stop request (the provider gets the stop signal,
      the tree SIGKILL after the grace). :meth:`kill`: the kill request (SIGKILL to the whole
      tree now; ``returncode`` -9). Neither ever SIGKILLs guardian itself.
    * ``with treeguardian.Popen(...) as p:`` stops the tree on exit from the block and waits
      for the release.
    """

    def __init__(self, args: Args, *, grace: Optional[Duration] = None, **kwargs: Any) -> None:
        if grace is None and type(args) is list and args and _NOT_PLAIN.isdisjoint(kwargs):
            # The common start (a list; no guardian option, shell, fds, cwd or environment of
            # the caller's): spawning's steps inline, for each call costs ~1 us on this cold
            # path, which guardian's start waits for (issue 20.5). guardian_argv's result (tested).
            self._env_grace = ENVIRON.get(_GRACE_ENV_KEY)
            path = _found.get(ENVIRON.get(_ENV_OVERRIDE_KEY) or b"") or binary()
            provider = [a if type(a) is str else os.fsdecode(a) for a in args]
            check_command(provider[0])
            env = dict(_ENV_DATA) if isinstance(_ENV_DATA, dict) else guardian_env(None)
            env[_KILL_KEY] = _KILL_VALUE
            rfd, wfd = os.pipe2(_PIPE_FLAGS)
            try:
                super().__init__([path, f"--events-fd={wfd}", "--", *provider], pass_fds=(wfd,), env=env, **kwargs)
            except BaseException as e:
                _start_failed(e, path, rfd, wfd)
                raise
            os.close(wfd)
            self._stream = EventStream(rfd)
            self._path = path
            return
        if "executable" in kwargs:
            raise TypeError("treeguardian.Popen runs guardian; give the provider as args[0], not executable=")
        s = spawning(args, kwargs, grace, shell=bool(kwargs.pop("shell", False)))
        try:
            super().__init__(s.argv, pass_fds=s.pass_fds, env=s.env, **kwargs)
        except BaseException as e:
            s.failed(e)
            raise
        self._tree_init(s)

    # ---- pids and events ----

    @property
    def guardian_pid(self) -> int:
        return self.pid

    def wait_spawned(self, timeout: Optional[float] = None) -> Optional[Spawned]:
        """The ``spawned`` event; ``None`` if guardian failed to start the provider. Raises
        :class:`~treeguardian.GuardianVersionError` (after stopping the tree) for a guardian
        older than this driver needs."""
        got = self._stream.wait_for(Spawned, timeout)
        if got is not None:
            self._gate(None)
        return got

    def wait_released(self, timeout: Optional[float] = None) -> Optional[Released]:
        """The ``released`` event (``None``: guardian failed, see ``events``, or the time ran out)."""
        return self._stream.wait_for(Released, timeout)

    def _gate(self, timeout: Optional[float]) -> None:
        """The version check once ``spawned`` is there (waiting for it or the stream's end at
        most ``timeout``): raises :class:`GuardianVersionError` after the tree stopped."""
        if self._version_checked and self._version_error is None:
            return
        self._stream.wait_until(lambda: self._stream.spawned is not None, timeout)
        err = self._check_version()
        if err is not None:
            try:
                subprocess.Popen.wait(self, self._grace + EXIT_SLACK)
            except subprocess.TimeoutExpired:
                pass
            raise err

    # ---- stopping ----

    def _returncode(self) -> Optional[int]:
        return self.returncode

    def _reaped(self) -> bool:
        return self.poll() is not None

    def _signal(self, sig: int) -> None:
        # Popen.send_signal signals only while guardian is unreaped (its pid cannot be reused).
        subprocess.Popen.send_signal(self, sig)

    def kill_now(self) -> None:
        """Deprecated: :meth:`kill`."""
        _deprecated_kill_now()
        self.kill()

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
        self._gate(timeout)
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
                    subprocess.Popen.wait(self, self._grace + EXIT_SLACK)
                except subprocess.TimeoutExpired:
                    self.kill()
                    try:
                        subprocess.Popen.wait(self, KILLED_WAIT)
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            super().__exit__(exc_type, exc, tb)
            self._stream.join(5.0)
