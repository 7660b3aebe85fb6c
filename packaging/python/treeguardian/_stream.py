"""The events reader shared by the drivers: one thread reads JSON lines from a pipe (or
follows a file), parses them, keeps them, and wakes whoever waits for one."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, List, Optional, Type, TypeVar

from ._events import Error, Event, Exit, Released, Spawned, Stopping, is_last, parse_event

E = TypeVar("E")


class EventStream:
    """Events as guardian writes them. Thread-safe; every method may be called from any thread."""

    def __init__(self) -> None:
        self._events: List[Event] = []
        self._cond = threading.Condition(threading.RLock())
        self._closed = False
        self._listeners: List[Callable[[Optional[Event]], None]] = []
        self._thread: Optional[threading.Thread] = None

    # ---- feeding ----

    def read_fd(self, fd: int) -> None:
        """Starts the thread that reads the pipe ``fd`` (owned, closed at end of file)."""
        self._thread = threading.Thread(target=self._read_fd, args=(fd,), name="treeguardian-events", daemon=True)
        self._thread.start()

    def _read_fd(self, fd: int) -> None:
        pending = b""
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._feed(line)
        except OSError:
            pass
        finally:
            os.close(fd)
            self._close()

    def _feed(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            ev = parse_event(line)
        except ValueError:
            return
        with self._cond:
            self._events.append(ev)
            listeners = list(self._listeners)
            self._cond.notify_all()
        for cb in listeners:
            cb(ev)

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            listeners = list(self._listeners)
            self._cond.notify_all()
        for cb in listeners:
            cb(None)

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- reading ----

    def listen(self, cb: Callable[[Optional[Event]], None]) -> None:
        """``cb(event)`` for each new event, ``cb(None)`` at the end (from the reader thread)."""
        with self._cond:
            self._listeners.append(cb)
            closed = self._closed
        if closed:
            cb(None)

    def unlisten(self, cb: Callable[[Optional[Event]], None]) -> None:
        with self._cond:
            if cb in self._listeners:
                self._listeners.remove(cb)

    @property
    def events(self) -> List[Event]:
        with self._cond:
            return list(self._events)

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def first(self, cls: Type[E]) -> Optional[E]:
        with self._cond:
            for ev in self._events:
                if isinstance(ev, cls):
                    return ev
        return None

    def wait_for(self, cls: Type[E], timeout: Optional[float] = None) -> Optional[E]:
        """The first event of type ``cls``, waiting up to ``timeout`` (``None``: until the
        stream ends). ``None`` if the stream ended or the time ran out without one."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self._events:
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
            return any(isinstance(e, (Stopping, Exit)) or is_last(e) for e in self._events)
