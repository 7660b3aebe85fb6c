"""guardian's options as the drivers pass them, from the generated table
(:data:`treeguardian._spec.OPTION_SPECS`, from ``spec/options.json``), and the duration rule of
``spec/driver.json``: seconds (a number) or guardian's text, rounded up to whole nanoseconds,
checked here as guardian checks it (so ``grace='abc'`` is a ``ValueError`` naming the accepted
form before anything starts, and ``grace=0.0004`` stays 400 us, never 0).

Keyword arguments of :class:`treeguardian.Popen`, :func:`treeguardian.aio.create_subprocess_exec`,
:func:`treeguardian.mcp.guarded` map to flags through :data:`OPTIONS`. ``events_fd``,
``events_file`` and ``kill_signal`` are the drivers' own business (``Popen`` passes a pipe,
``guarded`` a file; the kill request is set in guardian's environment) and are not keywords.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction
from typing import Dict, List, Mapping, Union

from ._spec import DURATION_MAX_SECONDS, DURATION_RESOLUTION_NS, KIND_FORMS, OPTION_SPECS, OptionSpec

Duration = Union[int, float, str]

#: The option type (kept under its old name).
Option = OptionSpec

#: keyword -> option. The one list of guardian's options in this package (generated).
OPTIONS: Dict[str, OptionSpec] = OPTION_SPECS

#: Set by the drivers themselves, not by callers.
DRIVER_OWNED = ("events_fd", "events_file", "kill_signal")

_NS_PER_S = 1_000_000_000
_MAX_NS = 2**64 - 1
_UNITS = {"": _NS_PER_S, "s": _NS_PER_S, "ms": 1_000_000, "us": 1_000, "ns": 1, "m": 60 * _NS_PER_S, "h": 3600 * _NS_PER_S}
#: What a duration may be, in the errors' words.
DURATION_FORM = f"seconds as a number (1.5) or guardian's text ({KIND_FORMS['duration']})"


def _too_large(value: object) -> ValueError:
    # guardian's message for it (src/cli/values.rs)
    return ValueError(
        f"duration '{value}' is too large: the maximum is {DURATION_MAX_SECONDS}s "
        "(about 584 years; as nanoseconds it must fit in 64 bits)"
    )


def _text_ns(text: str) -> int:
    """guardian's duration text -> nanoseconds (rounded up), as guardian parses it."""
    t = text.strip()
    split = next((i for i, c in enumerate(t) if not (c.isdigit() and c.isascii() or c == ".")), len(t))
    num, unit = t[:split], t[split:]
    if not num or num.startswith(".") or num.endswith(".") or num.count(".") > 1 or unit not in _UNITS:
        raise ValueError(
            f"invalid duration {text!r}: use a number with a unit such as 500ms, 10s or 1m "
            f"(a bare number is seconds); accepted: {DURATION_FORM}"
        )
    return _round_ns(Fraction(num) * _UNITS[unit], text)


def _round_ns(ns: Fraction, shown: object) -> int:
    whole = math.ceil(ns / DURATION_RESOLUTION_NS) * DURATION_RESOLUTION_NS
    if whole > _MAX_NS:
        raise _too_large(shown)
    return whole


def duration_ns(value: object) -> int:
    """A duration (seconds as ``int``/``float``/``Decimal``/``Fraction``, or guardian's text
    such as ``"500ms"``) -> whole nanoseconds, rounded up (a tiny positive value never becomes
    0). ``TypeError`` for another type; ``ValueError`` for what guardian would refuse, naming
    the accepted form."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, decimal.Decimal, Fraction)):
        raise TypeError(f"a duration is {DURATION_FORM}, not {type(value).__name__} {value!r}")
    if isinstance(value, str):
        return _text_ns(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a duration must be finite, not {value!r}: use {DURATION_FORM}")
        # the decimal the caller wrote (repr: 0.1 is 0.1, not its binary neighbour)
        exact = Fraction(decimal.Decimal(repr(value)))
    elif isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"a duration must be finite, not {value!r}: use {DURATION_FORM}")
        exact = Fraction(value)
    else:
        exact = Fraction(value)
    if exact < 0:
        raise ValueError(f"a duration cannot be negative: {value!r} (use {DURATION_FORM})")
    return _round_ns(exact * _NS_PER_S, value)


def duration_text(value: Duration) -> str:
    """A duration -> guardian's text: whole nanoseconds (``1500000000ns``)."""
    return f"{duration_ns(value)}ns"


def duration_seconds(value: Duration) -> float:
    """A duration (seconds, or guardian's text: ``0``, ``500ms``, ``1.5s``, ``2m``) -> seconds."""
    return duration_ns(value) / _NS_PER_S


def _value(name: str, opt: OptionSpec, value: object) -> List[str]:
    if opt.kind == "flag":
        if not isinstance(value, bool):
            raise TypeError(f"guardian option {name}= is a flag: True or False, not {value!r}")
        return [opt.flag]
    if opt.kind == "count":
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int) or value < 0 or (opt.max is not None and value > opt.max):
            raise ValueError(f"guardian option {name}= is a count from 0 to {opt.max}, not {value!r}")
        return [opt.flag] * value
    if opt.kind == "duration":
        return [f"{opt.flag}={duration_text(value)}"]  # type: ignore[arg-type]
    if isinstance(value, bool):
        raise TypeError(f"guardian option {name}= takes {KIND_FORMS.get(opt.kind, opt.kind)}, not {value!r}")
    if opt.kind == "choice" and opt.choices is not None and str(value) not in opt.choices:
        raise ValueError(f"guardian option {name}= is one of {', '.join(opt.choices)}, not {value!r}")
    return [f"{opt.flag}={value}"]


def to_args(options: Mapping[str, object]) -> List[str]:
    """Keyword options -> guardian's flags (``None`` and ``False`` leave an option out)."""
    out: List[str] = []
    for name, value in options.items():
        opt = OPTIONS.get(name)
        if opt is None or name in DRIVER_OWNED:
            raise TypeError(f"unknown guardian option {name!r}; known: {', '.join(sorted(set(OPTIONS) - set(DRIVER_OWNED)))}")
        if value is None or value is False:
            continue
        out.extend(_value(name, opt, value))
    return out
