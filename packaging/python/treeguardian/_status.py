"""guardian's exit statuses, named.

guardian exits with the provider's code; 124 when ``--timeout`` fired; 125 for its own failure;
126 when COMMAND is not executable; 127 when it is not found. When the provider died of
signal N, a guardian that is not PID 1 dies of the same signal N (so ``returncode`` is ``-N``,
as for the provider itself), and guardian as PID 1 exits 128+N; older guardians exit 128+N
everywhere. :func:`describe` names both forms.
"""

from __future__ import annotations

import enum
import signal as _signal
from dataclasses import dataclass
from typing import Optional, Sequence

from ._events import Error, Event, Exit, Stopping


class Status(enum.IntEnum):
    """The statuses guardian gives a meaning of its own."""

    TIMEOUT = 124
    GUARDIAN_FAILURE = 125
    NOT_EXECUTABLE = 126
    NOT_FOUND = 127


#: 128+N: the provider died of signal N (guardian as PID 1, or a shell's ``$?``).
SIGNAL_BASE = 128


@dataclass(frozen=True)
class Outcome:
    """What a returncode says. ``kind`` is one of ``exited``, ``signalled``, ``timeout``,
    ``guardian-failure``, ``not-executable``, ``not-found``."""

    returncode: int
    kind: str
    code: Optional[int] = None
    signal: Optional[_signal.Signals] = None

    @property
    def ok(self) -> bool:
        return self.kind == "exited" and self.code == 0


def _signal_named(n: int) -> Optional[_signal.Signals]:
    try:
        return _signal.Signals(n)
    except ValueError:
        return None


_ERROR_KINDS = {125: "guardian-failure", 126: "not-executable", 127: "not-found"}


def describe(returncode: int, exit: Optional[Exit] = None, *, events: Optional[Sequence[Event]] = None) -> Outcome:
    """Names a guardian ``returncode`` (``Popen.returncode`` form: negative for a signal).

    ``-N``: the provider died of signal N (guardian died of it too). 124-127: guardian's own.
    129..192 without ``exit`` is read as 128+N, the provider's signal N (guardian as PID 1, an
    older guardian, a shell's ``$?``); with the ``exit`` event (the drivers pass it) the
    provider's own report decides, so a provider that exited 130 by itself is ``exited``.

    With ``events`` (the drivers pass guardian's events), guardian's own statuses are read from
    them, not from the number: 124 is ``timeout`` only after a ``stopping`` with reason
    ``timeout``, 125-127 only with guardian's ``error`` event; a provider that exited 124, 125
    or 127 by itself is ``exited``.
    """
    if returncode < 0:
        return Outcome(returncode, "signalled", signal=_signal_named(-returncode))
    if events is not None:
        error = next((e for e in events if isinstance(e, Error)), None)
        if error is not None and error.status == returncode and returncode in _ERROR_KINDS:
            return Outcome(returncode, _ERROR_KINDS[returncode])
        timed_out = any(isinstance(e, Stopping) and e.reason == "timeout" for e in events)
        if timed_out and returncode == Status.TIMEOUT:
            return Outcome(returncode, "timeout")
        exit = exit or next((e for e in events if isinstance(e, Exit)), None)
        if exit is not None and exit.code == returncode:
            return Outcome(returncode, "exited", code=returncode)
    if returncode == Status.TIMEOUT:
        return Outcome(returncode, "timeout")
    if returncode == Status.GUARDIAN_FAILURE:
        return Outcome(returncode, "guardian-failure")
    if returncode == Status.NOT_EXECUTABLE:
        return Outcome(returncode, "not-executable")
    if returncode == Status.NOT_FOUND:
        return Outcome(returncode, "not-found")
    if SIGNAL_BASE < returncode <= SIGNAL_BASE + 64 and (exit is None or exit.signal is not None):
        sig = _signal_named(returncode - SIGNAL_BASE)
        if sig is not None:
            return Outcome(returncode, "signalled", signal=sig)
    return Outcome(returncode, "exited", code=returncode)
