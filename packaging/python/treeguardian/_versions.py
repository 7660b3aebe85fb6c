"""The version check of spec/driver.json: guardian's ``spawned`` event carries its version;
a driver refuses a guardian older than :data:`~treeguardian._spec.MIN_GUARDIAN_VERSION` (or one
whose ``spawned`` has no version: before 0.2.0), naming both versions and how to get a matching
binary. No extra process start: the check reads the ``spawned`` event the driver reads anyway."""

from __future__ import annotations

import os
import re
from typing import Optional, Tuple

from ._spec import BINARY_VARIABLE, MIN_GUARDIAN_VERSION, Spawned

#: The package's own version (pyproject.toml says the same; test_packaging checks it).
DRIVER_VERSION = "0.2.0"

#: Test-only: accept an older guardian when this variable names its version (``none`` for one
#: without a version). The driver's suite sets it when run against a development binary that
#: predates the check; nothing else should.
ACCEPT_VARIABLE = "TREEGUARDIAN_TEST_ACCEPT_GUARDIAN_VERSION"


class GuardianVersionError(RuntimeError):
    """The guardian binary is older than this driver needs. The tree was stopped."""

    def __init__(self, found: Optional[str], path: str) -> None:
        self.found = found
        self.path = path
        shown = f"guardian {found}" if found else "a guardian older than 0.2.0 (its spawned event has no version)"
        super().__init__(
            f"treeguardian {DRIVER_VERSION} needs guardian >= {MIN_GUARDIAN_VERSION}, but {path} is {shown}: "
            f"install the matching wheel (pip install --force-reinstall treeguardian=={DRIVER_VERSION}) "
            f"or set {BINARY_VARIABLE} to a guardian >= {MIN_GUARDIAN_VERSION} (make release builds one)"
        )


def _parse(text: str) -> Tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(x) for x in m.groups()) if m else (0,)


def check(spawned: Spawned, path: str) -> Optional[GuardianVersionError]:
    """The error to raise for this ``spawned`` event, or ``None`` when guardian is recent enough."""
    found = spawned.version
    if found is not None and _parse(found) >= _parse(MIN_GUARDIAN_VERSION):
        return None
    if os.environ.get(ACCEPT_VARIABLE) == (found or "none"):
        return None
    return GuardianVersionError(found, path)
