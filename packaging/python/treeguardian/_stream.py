"""The events reader shared by the drivers: one thread reads every driver's events pipe,
parses the JSON lines, keeps them, and wakes whoever waits for one."""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Callable, Dict, List, Optional, Type, TypeVar

from ._events import Error, Event, Exit, Released, Spawned, Stopping, is_last, parse_event

E = TypeVar("E")


class _Hub:
    """One daemon thread reads every driver's events pipe (epoll): starting a thread per
    process cost ~0.1 ms of each spawn. Pipes are added from any thread (epoll_ctl is
    thread-safe, and the waiting epoll_wait sees them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: Dict[int, "EventStream"] = {}
        self._ep: Optional[select.epoll] = None
        self._pid = -1

    def add(self, fd: int, stream: "EventStream") -> None:
        with self._lock:
            if self._ep is None or self._pid != os.getpid():
                # first use, or a forked child (the thread is not there): a hub of its own
                self._ep = select.epoll()
                self._pid = os.getpid()
                self._streams = {}
                threading.Thread(target=self._run, args=(self._ep,), name="treeguardian-events", daemon=True).start()
            self._streams[fd] = stream
            self._ep.register(fd, select.EPOLLIN)

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


class EventStream:
    """Events as guardian writes them. Thread-safe; every method may be called from any thread."""

    def __init__(self) -> None:
        self._events: List[Event] = []
        self._cond = threading.Condition(threading.RLock())
        self._closed = False
        self._listeners: List[Callable[[], None]] = []
        self._pending = b""
        self._raw: List[bytes] = []

    # ---- feeding ----

    def read_fd(self, fd: int) -> None:
        """Reads the pipe ``fd`` (owned, closed at end of file) on the shared reader thread."""
        _HUB.add(fd, self)

    def _data(self, chunk: bytes) -> None:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self._feed(line)

    def _feed(self, line: bytes) -> None:
        # Parsed when asked for, not here: the reader thread holding the GIL to parse
        # `spawned` delayed the caller's first read of the provider's output.
        if not line.strip():
            return
        with self._cond:
            self._raw.append(line)
            listeners = list(self._listeners)
            self._cond.notify_all()
        for cb in listeners:
            cb()

    def _parsed(self) -> List[Event]:
        """The events so far (call with the lock held)."""
        if self._raw:
            for line in self._raw:
                try:
                    self._events.append(parse_event(line))
                except ValueError:
                    pass
            self._raw.clear()
        return self._events

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            listeners = list(self._listeners)
            self._cond.notify_all()
        for cb in listeners:
            cb()

    def join(self, timeout: Optional[float] = None) -> None:
        """Waits until the stream ended (guardian closed its end), at most ``timeout``."""
        self.wait_until(lambda: False, timeout)

    # ---- reading ----

    def listen(self, cb: Callable[[], None]) -> None:
        """``cb()`` at each new event and at the end (on the reader thread: keep it short)."""
        with self._cond:
            self._listeners.append(cb)
            closed = self._closed
        if closed:
            cb()

    def unlisten(self, cb: Callable[[], None]) -> None:
        with self._cond:
            if cb in self._listeners:
                self._listeners.remove(cb)

    @property
    def events(self) -> List[Event]:
        with self._cond:
            return list(self._parsed())

    def has_events(self) -> bool:
        """Whether guardian wrote anything yet (a predicate for :meth:`wait_until`; also safe
        without the lock)."""
        return bool(self._raw or self._events)

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def first(self, cls: Type[E]) -> Optional[E]:
        with self._cond:
            for ev in self._parsed():
                if isinstance(ev, cls):
                    return ev
        return None

    def wait_for(self, cls: Type[E], timeout: Optional[float] = None) -> Optional[E]:
        """The first event of type ``cls``, waiting up to ``timeout`` (``None``: until the
        stream ends). ``None`` if the stream ended or the time ran out without one."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self._parsed():
                    if isinstance(ev, cls):
                        return ev
                if self._closed:
                    return None
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)

    def wait_until(self, pred: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Waits until ``pred()`` holds (checked at each event) or the stream ends or the time
        runs out; returns ``pred()``. ``pred`` must not call back into this stream's waits."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if pred():
                    return True
                if self._closed:
                    return False
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)

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
        with self._cond:
            return any(isinstance(e, (Stopping, Exit)) or is_last(e) for e in self._parsed())
