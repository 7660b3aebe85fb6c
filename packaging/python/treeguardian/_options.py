"""guardian's options as the drivers pass them: the one table (``tests/test_options.py``
checks it against ``spec/options.json`` once that exists, and against ``guardian --help``).

Keyword arguments of :class:`treeguardian.Popen`, :func:`treeguardian.aio.create_subprocess_exec`,
:func:`treeguardian.mcp.guarded` map to flags through :data:`OPTIONS`. ``events_fd`` and
``events_file`` are the drivers' own business (``Popen`` passes a pipe, ``guarded`` a file) and
are not keyword arguments.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, NamedTuple, Optional, Union

Duration = Union[int, float, str]


class Option(NamedTuple):
    flag: str
    env: Optional[str]
    #: ``duration`` (seconds as a number, or guardian's text: ``500ms``), ``str``, ``int``, ``flag``.
    kind: str


#: keyword -> option. The one list of guardian's options in this package.
OPTIONS: Dict[str, Option] = {
    "grace": Option("--grace", "GUARDIAN_GRACE", "duration"),
    "stop_signal": Option("--stop-signal", "GUARDIAN_STOP_SIGNAL", "str"),
    "forward_to": Option("--forward-to", "GUARDIAN_FORWARD_TO", "str"),
    "events_fd": Option("--events-fd", "GUARDIAN_EVENTS_FD", "int"),
    "events_file": Option("--events-file", "GUARDIAN_EVENTS_FILE", "str"),
    "timeout": Option("--timeout", "GUARDIAN_TIMEOUT", "duration"),
    "wait_descendants": Option("--wait-descendants", "GUARDIAN_WAIT_DESCENDANTS", "flag"),
    "no_parent_watch": Option("--no-parent-watch", "GUARDIAN_NO_PARENT_WATCH", "flag"),
    "no_sentinel": Option("--no-sentinel", "GUARDIAN_NO_SENTINEL", "flag"),
    "cgroup": Option("--cgroup", "GUARDIAN_CGROUP", "str"),
    "memory_max": Option("--memory-max", "GUARDIAN_MEMORY_MAX", "str"),
    "pids_max": Option("--pids-max", "GUARDIAN_PIDS_MAX", "int"),
    "cpu_max": Option("--cpu-max", "GUARDIAN_CPU_MAX", "str"),
    "verbose": Option("--verbose", "GUARDIAN_VERBOSE", "count"),
    "quiet": Option("--quiet", None, "flag"),
}

#: Set by the drivers themselves, not by callers.
DRIVER_OWNED = ("events_fd", "events_file")


def duration_text(value: Duration) -> str:
    """Seconds (``1.5``) or guardian's own text (``"500ms"``) -> guardian's text."""
    if isinstance(value, bool):
        raise TypeError("a duration is seconds (int or float) or text such as '500ms'")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        ms = round(value * 1000)
        return f"{ms}ms"
    return str(value)


def duration_seconds(value: Duration) -> float:
    """guardian's duration text (``0``, ``500ms``, ``1.5s``, ``2m``, ``250000000ns``, bare
    seconds) -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    for suffix, scale in (("ns", 1e-9), ("us", 1e-6), ("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * scale
    return float(text)


def to_args(options: Mapping[str, object]) -> List[str]:
    """Keyword options -> guardian's flags (``None`` and ``False`` leave an option out)."""
    out: List[str] = []
    for name, value in options.items():
        opt = OPTIONS.get(name)
        if opt is None:
            raise TypeError(f"unknown guardian option {name!r}; known: {', '.join(sorted(OPTIONS))}")
        if value is None or value is False:
            continue
        if opt.kind == "flag":
            out.append(opt.flag)
        elif opt.kind == "count":
            out.extend([opt.flag] * int(value))  # type: ignore[call-overload]
        elif opt.kind == "duration":
            out.append(f"{opt.flag}={duration_text(value)}")  # type: ignore[arg-type]
        else:
            out.append(f"{opt.flag}={value}")
    return out
