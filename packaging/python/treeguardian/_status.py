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
from typing import Optional

from ._events import Exit


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


def describe(returncode: int, exit: Optional[Exit] = None) -> Outcome:
    """Names a guardian ``returncode`` (``Popen.returncode`` form: negative for a signal).

    ``-N``: the provider died of signal N (guardian died of it too). 124-127: guardian's own.
    129..192 without ``exit`` is read as 128+N, the provider's signal N (guardian as PID 1, an
    older guardian, a shell's ``$?``); with the ``exit`` event (the drivers pass it) the
    provider's own report decides, so a provider that exited 130 by itself is ``exited``.
    """
    if returncode < 0:
        return Outcome(returncode, "signalled", signal=_signal_named(-returncode))
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
