"""Typed events of guardian's JSON Lines stream (``--events-fd`` / ``--events-file``).

One dataclass per event of docs/contract.md's table, fields in wire order. A field guardian
always writes is required; one written as ``null`` without a value is ``Optional[...]``; one
that is absent without a value (``signal``'s ``pid``/``pids``/``cgroup``, ``error``'s
``unkillable``/``remaining``) defaults to ``None``. Unknown fields are ignored (the contract
lets guardian add fields); an unknown event becomes :class:`UnknownEvent`.
``tests/test_schema.py`` checks these classes against the Rust schema (``src/events.rs``, or
``spec/events.json`` once it exists).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, Union


@dataclass(frozen=True)
class Fallback:
    """An interface was refused and guardian does without it."""

    ts: float
    what: str
    errno: str
    detail: str
    event: str = field(default="fallback", init=False)


@dataclass(frozen=True)
class Spawned:
    """The provider started."""

    ts: float
    pid: int
    pgid: int
    guardian_pid: int
    mode: str
    cgroup: Optional[str]
    event: str = field(default="spawned", init=False)


@dataclass(frozen=True)
class Stopping:
    """A teardown started (reason ``signal``, ``timeout``, ``parent-died``), or a kill request
    ended its grace (``kill-request``, ``grace_ms`` 0)."""

    ts: float
    reason: str
    grace_ms: int
    event: str = field(default="stopping", init=False)


@dataclass(frozen=True)
class Signal:
    """A signal was delivered."""

    ts: float
    signal: str
    target: str
    reason: str
    pid: Optional[int] = None
    cgroup: Optional[str] = None
    pids: Optional[List[int]] = None
    event: str = field(default="signal", init=False)


@dataclass(frozen=True)
class Stopped:
    """The provider stopped (job control)."""

    ts: float
    pid: int
    signal: str
    event: str = field(default="stopped", init=False)


@dataclass(frozen=True)
class Continued:
    """The provider was continued."""

    ts: float
    pid: int
    event: str = field(default="continued", init=False)


@dataclass(frozen=True)
class Exit:
    """The provider was reaped: ``code`` or ``signal`` (a name such as ``SIGTERM``)."""

    ts: float
    pid: int
    code: Optional[int]
    signal: Optional[str]
    core_dumped: bool
    event: str = field(default="exit", init=False)


@dataclass(frozen=True)
class Released:
    """The tree is gone; the last line. ``status`` is guardian's exit status."""

    ts: float
    status: int
    signalled: Optional[int]
    killed: int
    reaped: int
    teardown_ms: float
    cgroup: Optional[str]
    oom_kill: Optional[int]
    provider_user_ms: float
    provider_system_ms: float
    provider_max_rss_kb: int
    tree_user_ms: float
    tree_system_ms: float
    tree_max_rss_kb: int
    event: str = field(default="released", init=False)


@dataclass(frozen=True)
class Error:
    """guardian failed (125/126/127); the last line."""

    ts: float
    status: int
    message: str
    unkillable: Optional[List[int]] = None
    remaining: Optional[List[int]] = None
    event: str = field(default="error", init=False)


@dataclass(frozen=True)
class UnknownEvent:
    """An event this version of the driver does not know (kept whole in ``data``)."""

    ts: float
    event: str
    data: Dict[str, Any]


Event = Union[Fallback, Spawned, Stopping, Signal, Stopped, Continued, Exit, Released, Error, UnknownEvent]

#: Event name -> class, for every event of the contract.
EVENT_TYPES: Dict[str, Type[Any]] = {
    "fallback": Fallback,
    "spawned": Spawned,
    "stopping": Stopping,
    "signal": Signal,
    "stopped": Stopped,
    "continued": Continued,
    "exit": Exit,
    "released": Released,
    "error": Error,
}


def parse_event(line: Union[str, bytes]) -> Event:
    """One JSON line -> its event. Raises ``ValueError`` on a line that is not an event."""
    obj = json.loads(line)
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise ValueError(f"not a guardian event: {line!r}")
    name: str = obj["event"]
    ts = float(obj.get("ts", 0.0))
    cls = EVENT_TYPES.get(name)
    if cls is None:
        return UnknownEvent(ts=ts, event=name, data=obj)
    kwargs: Dict[str, Any] = {"ts": ts}
    for f in dataclasses.fields(cls):
        if f.name in ("ts", "event") or not f.init:
            continue
        if f.name in obj:
            kwargs[f.name] = obj[f.name]
        elif f.default is dataclasses.MISSING:
            raise ValueError(f"guardian event {name!r} without its field {f.name!r}: {line!r}")
    ev: Event = cls(**kwargs)
    return ev


def is_last(ev: Event) -> bool:
    """``released`` or ``error``: guardian writes nothing after it."""
    return isinstance(ev, (Released, Error))
