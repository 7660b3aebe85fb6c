"""The events reader shared by the drivers: a driver's events pipe, read when asked (a
non-blocking read of what guardian wrote so far) and, from the first wait or listener on, by
one thread that reads every such pipe; the JSON lines parsed when asked, kept, and whoever waits
for one woken."""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Callable, Dict, List, Optional, Type, TypeVar

from ._events import Error, Event, Exit, Released, Spawned, Stopping, is_last, log_event, parse_event

E = TypeVar("E")


class _Hub:
    """One daemon thread reads every attached events pipe (epoll): starting a thread per
    process cost ~0.1 ms of each spawn. Pipes are added from any thread (epoll_ctl is
    thread-safe, and the waiting epoll_wait sees them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: Dict[int, "EventStream"] = {}
        self._ep: Optional[select.epoll] = None
        self._thread: Optional[threading.Thread] = None
        self._pid = -1

    def add(self, fd: int, stream: "EventStream") -> None:
        with self._lock:
            mine = self._pid == os.getpid()
            if self._ep is None or not mine or self._thread is None or not self._thread.is_alive():
                # First use, a forked child (the thread is not there), or a thread that died
                # (it should not: see _run): a hub of its own, kept only once its thread runs (a
                # start that raised is tried again by the next add). The pipes of a dead thread
                # are read by the new one.
                ep = select.epoll()
                thread = threading.Thread(target=self._run, args=(ep,), name="treeguardian-events", daemon=True)
                try:
                    streams = self._streams if mine else {}
                    for old in streams:
                        ep.register(old, select.EPOLLIN)
                    thread.start()
                except BaseException:
                    ep.close()
                    raise
                if mine and self._ep is not None:
                    self._ep.close()  # the dead thread's
                self._ep, self._thread, self._pid, self._streams = ep, thread, os.getpid(), streams
            self._streams[fd] = stream
            self._ep.register(fd, select.EPOLLIN)

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by the parent's reader thread, which the child lacks.
        self._lock = threading.Lock()

    def _run(self, ep: select.epoll) -> None:
        while True:
            try:
                ready = ep.poll()
            except InterruptedError:
                continue
            for fd, _ in ready:
                with self._lock:
                    stream = self._streams.get(fd)
                if stream is None:
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    stream._data(chunk)
                    continue
                with self._lock:
                    # unregistered and forgotten before the number is closed (and reused)
                    ep.unregister(fd)
                    del self._streams[fd]
                    os.close(fd)
                stream._close()


_HUB = _Hub()

#: Counts forks: a stream made in another process (a forked child holds a copy of the parent's
#: read end) reads nothing, so the child cannot take the parent's events.
_generation = 0


def _forked() -> None:
    global _generation
    _generation += 1
    _HUB._after_fork_in_child()


os.register_at_fork(after_in_child=_forked)


def _call(listeners: List[Callable[[], None]]) -> None:
    """Calls each listener; one that raises (an event loop closed under it) is its own
    business: the reader thread, shared by every stream, goes on."""
    for cb in listeners:
        try:
            cb()
        except Exception:
            pass


class EventStream:
    """Events as guardian writes them on the pipe ``fd`` (owned: a non-blocking read end).
    Thread-safe; every method may be called from any thread.

    Nothing runs for the stream until it is asked: each accessor first takes what guardian
    wrote so far (:meth:`_pull`, a non-blocking read), and :meth:`attach` (the first wait or
    listener, and the drivers' waits for guardian's exit) hands the pipe to the shared reader
    thread, which reads it to its end. A reader woken by ``spawned`` during the provider's
    start-up, or a stream set up right after the spawn, competed with guardian's start-up for
    the host's CPUs (issue 20.5). Lines not asked for wait in the pipe (64 KiB) and, beyond it,
    in guardian's own buffer (8 MiB), which guardian flushes at its exit for at most 1 s: hence
    the attach before a wait for that exit. A stream dropped unattached closes its end; one
    made before a fork reads nothing in the child."""

    # Defaults on the class: a new stream sets only what it must (it is made on the spawn's
    # critical path).
    _fd = -1
    _cond: Optional[threading.Condition] = None
    _attached = False
    _closed = False
    _pending = b""

    def __init__(self, fd: int) -> None:
        self._lock = threading.RLock()
        self._events: List[Event] = []
        self._raw: List[bytes] = []
        self._listeners: List[Callable[[], None]] = []
        self._fd = fd
        self._generation = _generation

    def __del__(self) -> None:
        # Unattached and never read to its end: nobody else has the number.
        if not self._attached and self._fd >= 0:
            try:
                os.close(self._fd)
            except Exception:  # also at interpreter exit, whatever is left of `os`
                pass
            self._fd = -1

    # ---- feeding ----

    def _pull(self) -> None:
        """Takes what guardian wrote so far (call with the lock held). Once attached, the reader
        thread does; in a forked child, nobody."""
        if self._attached or self._fd < 0:
            return
        if self._generation != _generation:
            self._closed = True  # a forked child: the pipe is the parent's
            return
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                os.close(self._fd)
                self._fd = -1
                self._closed = True
                return
            self._data(chunk)

    def attach(self) -> None:
        """From now on the reader thread reads the pipe as guardian writes: before waiting for
        guardian to exit (which waits, at most 1 s, for a reader to take what its last events
        do not fit in the pipe), and by every wait or listener. Where the thread cannot start
        (no threads left, no fds for epoll), the stream stays read when asked and the next
        attach tries again; only the waits for an event raise."""
        with self._lock:
            try:
                self._attach()
            except (RuntimeError, OSError):
                pass

    def _attach(self) -> threading.Condition:
        """The stream's condition, once the reader thread reads the pipe (call with the lock
        held): what a wait or a listener needs."""
        if self._cond is None:
            self._cond = threading.Condition(self._lock)
        if self._generation != _generation:
            self._closed = True  # a forked child: nothing more comes to it
        elif not self._attached:
            self._pull()
            if self._fd >= 0:
                _HUB.add(self._fd, self)
                self._attached = True
        return self._cond

    def _data(self, chunk: bytes) -> None:
        """Bytes read from the pipe: complete lines are kept, waiters woken, listeners called
        (outside the lock). The lines are parsed when asked for (:meth:`_parsed`): the reader
        thread holding the GIL to parse ``spawned`` delayed the caller's first read of the
        provider's output."""
        with self._lock:
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            lines = [line for line in lines if line.strip()]
            if not lines:
                return
            self._raw.extend(lines)
            if b'"fallback"' in chunk or b'"error"' in chunk:
                self._parse_raw()  # logged as they come (see _events.log_event)
            if self._cond is not None:
                self._cond.notify_all()
            listeners = list(self._listeners)
        _call(listeners)

    def _parsed(self) -> List[Event]:
        """The events so far (call with the lock held)."""
        self._pull()
        return self._parse_raw()

    def _parse_raw(self, until: Optional[type] = None) -> List[Event]:
        """Parses (and logs) the lines taken so far, without reading (call with the lock held);
        with ``until``, only up to the first event of that type (the rest stay lines: a host
        asking for ``spawned`` does not parse, under the lock the reader thread needs, the
        hundreds of events that may follow it)."""
        done = 0
        for line in self._raw:
            done += 1
            try:
                ev = parse_event(line)
            except ValueError:
                continue
            self._events.append(ev)
            log_event(ev)
            if until is not None and isinstance(ev, until):
                break
        del self._raw[:done]
        return self._events

    def _close(self) -> None:
        """The reader thread read the end (and closed the number)."""
        with self._lock:
            self._fd = -1
            self._closed = True
            self._parse_raw()  # every event logged by the end (nothing else waits for it now)
            if self._cond is not None:
                self._cond.notify_all()
            listeners = list(self._listeners)
        _call(listeners)

    def join(self, timeout: Optional[float] = None) -> None:
        """Waits until the stream ended (guardian closed its end), at most ``timeout``."""
        self.wait_until(lambda: False, timeout)

    # ---- reading ----

    def listen(self, cb: Callable[[], None]) -> None:
        """``cb()`` at each new event and at the end (on the reader thread: keep it short)."""
        with self._lock:
            self._attach()
            self._listeners.append(cb)
            closed = self._closed
        if closed:
            _call([cb])

    def unlisten(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if cb in self._listeners:
                self._listeners.remove(cb)

    @property
    def events(self) -> List[Event]:
        with self._lock:
            return list(self._parsed())

    def has_events(self) -> bool:
        """Whether guardian wrote anything yet (a predicate for :meth:`wait_until`)."""
        with self._lock:
            self._pull()
            return bool(self._raw or self._events)

    @property
    def closed(self) -> bool:
        with self._lock:
            self._pull()
            return self._closed

    def first(self, cls: Type[E]) -> Optional[E]:
        with self._lock:
            for ev in self._events:
                if isinstance(ev, cls):
                    return ev
            self._pull()
            events = self._parse_raw(until=cls)
            if events and isinstance(events[-1], cls):
                return events[-1]
        return None

    def wait_for(self, cls: Type[E], timeout: Optional[float] = None) -> Optional[E]:
        """The first event of type ``cls``, waiting up to ``timeout`` (``None``: until the
        stream ends). ``None`` if the stream ended or the time ran out without one."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            cond = self._attach()
            while True:
                for ev in self._parsed():
                    if isinstance(ev, cls):
                        return ev
                if self._closed:
                    return None
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                cond.wait(left)

    def wait_until(self, pred: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Waits until ``pred()`` holds (checked at each event) or the stream ends or the time
        runs out; returns ``pred()``. ``pred`` must not call back into this stream's waits."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            cond = self._attach()
            while True:
                if pred():
                    return True
                if self._closed:
                    return False
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                cond.wait(left)

    # ---- what the drivers ask ----

    @property
    def spawned(self) -> Optional[Spawned]:
        return self.first(Spawned)

    @property
    def exit(self) -> Optional[Exit]:
        return self.first(Exit)

    @property
    def released(self) -> Optional[Released]:
        return self.first(Released)

    @property
    def error(self) -> Optional[Error]:
        return self.first(Error)

    @property
    def stopping(self) -> bool:
        """guardian is tearing the tree down (a stop request, a timeout, parent death, or the
        provider exited): a further stop request kills the tree at once."""
        with self._lock:
            return any(isinstance(e, (Stopping, Exit)) or is_last(e) for e in self._parsed())
