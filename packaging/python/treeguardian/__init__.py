"""treeguardian: run a provider under guardian, which stops and reaps every process the
provider leaves behind before it exits with the provider's status.

* :func:`binary` — the bundled ``guardian`` binary's absolute path.
* :class:`Popen` — ``subprocess.Popen`` of a provider under guardian, with ``provider_pid``,
  ``events``, ``released``, ``stop()``; ``kill()`` is the kill request; a context manager.
  :func:`run`, :func:`call`, :func:`check_call`, :func:`check_output` as in ``subprocess``.
* :mod:`treeguardian.aio` — ``create_subprocess_exec`` / ``_shell`` for asyncio;
  :mod:`treeguardian.anyio` — ``open_process`` / ``run_process`` for anyio (asyncio or trio).
* Logging: the ``treeguardian`` logger (guardian's fallbacks, refusals and errors).
* :mod:`treeguardian.mcp` — ``guarded(StdioServerParameters(...))`` for the MCP Python SDK.
* Events are dataclasses (:class:`Spawned`, :class:`Exit`, :class:`Released`, ...);
  exit statuses are named by :class:`Status` and :func:`describe`.
"""

from ._binary import binary
from ._events import (
    EVENT_TYPES,
    Continued,
    Error,
    Event,
    Exit,
    Fallback,
    Released,
    Signal,
    Spawned,
    Stopped,
    Stopping,
    UnknownEvent,
    parse_event,
)
from ._options import OPTIONS
from ._popen import Popen, guardian_argv
from ._run import call, check_call, check_output, run
from ._status import SIGNAL_BASE, Outcome, Status, describe
from ._versions import DRIVER_VERSION, GuardianVersionError

__version__ = "0.2.0"

__all__ = [
    "EVENT_TYPES",
    "OPTIONS",
    "SIGNAL_BASE",
    "Continued",
    "Error",
    "Event",
    "Exit",
    "Fallback",
    "GuardianVersionError",
    "Outcome",
    "Popen",
    "Released",
    "Signal",
    "Spawned",
    "Status",
    "Stopped",
    "Stopping",
    "UnknownEvent",
    "binary",
    "call",
    "check_call",
    "check_output",
    "describe",
    "guardian_argv",
    "parse_event",
    "run",
]
