"""Where the guardian binary this package installed is."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Iterator, Optional, Protocol

from ._spec import BINARY_VARIABLE

#: Overrides the search (a development build, a system guardian): an absolute path. The one
#: binary variable of every driver (``GUARDIAN_BIN``, spec/driver.json).
ENV_OVERRIDE = BINARY_VARIABLE
_ENV_OVERRIDE_KEY = ENV_OVERRIDE.encode()


class _BytesLookup(Protocol):
    def get(self, name: bytes, /) -> Optional[bytes]: ...


class _EnvironB:
    """``os.environ`` looked up by a bytes name, where it keeps no bytes table of its own."""

    def get(self, name: bytes, /) -> Optional[bytes]:
        value = os.environ.get(name.decode())
        return None if value is None else os.fsencode(value)


_data = getattr(os.environ, "_data", None)
#: The environment a child gets, by bytes name: ``os.environ``'s own bytes -> bytes table on
#: CPython's POSIX (every change of ``os.environ`` goes through it), where a lookup is one C
#: call. ``os.environ.get`` of a missing name runs three Python frames and an exception: ~4 us
#: on a spawn's cold path, which guardian's start-up waits for (issue 20.5).
ENVIRON: _BytesLookup = _data if isinstance(_data, dict) else _EnvironB()
del _data


def _candidates() -> Iterator[Path]:
    here = Path(__file__).resolve().parent
    # The scheme this interpreter installs into (a venv's bin/), then the user scheme.
    yield Path(sysconfig.get_path("scripts")) / "guardian"
    for scheme in ("posix_user", "posix_prefix"):
        try:
            yield Path(sysconfig.get_path("scripts", scheme)) / "guardian"
        except KeyError:
            pass
    # pip install --target DIR / --prefix P: the scripts land in DIR/bin, P/bin.
    yield here.parent / "bin" / "guardian"
    for up in here.parents:
        if up.name == "lib" or up.name.startswith("python"):
            yield up.parent / "bin" / "guardian"


#: The path found, by the override's value (b"" without one).
_found: "dict[bytes, str]" = {}


def binary() -> str:
    """The absolute path of the guardian binary installed with this package (the wheel puts
    it in the environment's scripts directory, e.g. ``.venv/bin/guardian``).

    ``GUARDIAN_BIN`` overrides it. Raises ``FileNotFoundError`` naming the places
    searched when there is none (an sdist install, which refuses to build, or a damaged
    environment). Never falls back to ``PATH``: the bundled binary is the tested one.
    """
    override = ENVIRON.get(_ENV_OVERRIDE_KEY) or b""
    # The search costs ~0.5 ms (sysconfig): done once per override value, re-checked cheaply.
    cached = _found.get(override)
    if cached is not None and os.access(cached, os.X_OK):
        return cached
    path = _search(os.fsdecode(override))
    _found[override] = path
    return path


def cached_binary() -> str:
    """:func:`binary` without re-checking a path found before (a spawn's fast path: the start
    itself fails if the file is gone, and then :func:`forget_binary` and :func:`binary` name
    what is missing)."""
    cached = _found.get(ENVIRON.get(_ENV_OVERRIDE_KEY) or b"")
    return cached if cached is not None else binary()


def forget_binary() -> None:
    """Drops the paths found so far: the next :func:`binary` searches again."""
    _found.clear()


def _search(override: "str | None") -> str:
    if override:
        if not os.path.isabs(override) or not os.access(override, os.X_OK):
            raise FileNotFoundError(f"{ENV_OVERRIDE}={override!r} is not an absolute path to an executable")
        return override
    seen = []
    for c in _candidates():
        if c in seen:
            continue
        seen.append(c)
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise FileNotFoundError(
        "treeguardian: the guardian binary is not installed in this environment (looked in "
        + ", ".join(str(s) for s in seen)
        + f"); reinstall the wheel for this platform (pip install --force-reinstall treeguardian) or set {ENV_OVERRIDE}"
        + f" (python {sys.version_info.major}.{sys.version_info.minor}, {sys.platform})"
    )
