"""Typed events of guardian's JSON Lines stream (``--events-fd`` / ``--events-file``).

One dataclass per event, generated from ``spec/events.json`` into :mod:`._spec` (fields in
wire order). A field guardian always writes is required; one written as ``null`` without a
value is ``Optional[...]``; one that is absent without a value defaults to ``None``. Unknown
fields are ignored (the contract lets guardian add fields); an unknown event becomes
:class:`UnknownEvent`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any, Dict, Union

from ._spec import EVENT_TYPES, LAST_EVENTS, KnownEvent, Continued, Error, Exit, Fallback, Released, Signal, Spawned, Stopped, Stopping


@dataclass(frozen=True)
class UnknownEvent:
    """An event this version of the driver does not know (kept whole in ``data``)."""

    ts: float
    event: str
    data: Dict[str, Any]


Event = Union[KnownEvent, UnknownEvent]

__all__ = ["EVENT_TYPES", "Continued", "Error", "Event", "Exit", "Fallback", "Released", "Signal", "Spawned", "Stopped", "Stopping", "UnknownEvent", "is_last", "log_event", "parse_event"]


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
    return isinstance(ev, LAST_EVENTS)


#: The package's logger: guardian's fallbacks (refused interfaces) as warnings, its errors
#: (refusals: bad input, a command that cannot run, an abandoned teardown) as errors, teardowns
#: at INFO and the rest at DEBUG.
log = logging.getLogger("treeguardian")


def log_event(ev: Event) -> None:
    """Logs one event read from guardian to the ``treeguardian`` logger."""
    if isinstance(ev, Fallback):
        log.warning("guardian fallback: %s refused (%s): %s", ev.what, ev.errno, ev.detail)
    elif isinstance(ev, Error):
        log.error("guardian error (status %d): %s", ev.status, ev.message)
    elif isinstance(ev, Stopping):
        log.info("guardian stopping the tree: %s (grace %d ms)", ev.reason, ev.grace_ms)
    elif isinstance(ev, Released):
        log.info("guardian released the tree: status %d, %s stopped, %d killed, %d reaped", ev.status, ev.signalled, ev.killed, ev.reaped)
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("guardian event: %s", ev)
