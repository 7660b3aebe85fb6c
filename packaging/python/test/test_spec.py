"""The generated ``treeguardian/_spec.py`` is current (``gen_spec.py`` renders it from spec/),
and the duration rule of spec/driver.json holds: rounded up to whole nanoseconds, a tiny
positive value never 0, bad values refused with the accepted form."""

from __future__ import annotations

import decimal
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "packaging/python"))
import gen_spec  # noqa: E402

import treeguardian  # noqa: E402
from treeguardian._options import duration_ns, to_args  # noqa: E402


def test_the_generated_spec_is_current() -> None:
    generated = (ROOT / "packaging/python/treeguardian/_spec.py").read_text()
    assert generated == gen_spec.render(ROOT), "treeguardian/_spec.py is stale: run python3 packaging/python/gen_spec.py"


def test_the_installed_package_has_the_generated_spec() -> None:
    # (run.sh runs this against the installed wheel: it must carry the current file)
    import treeguardian._spec as spec

    assert spec.BINARY_VARIABLE == "GUARDIAN_BIN" and spec.KILL_SIGNAL_NUMBER == 64
    assert open(spec.__file__).read() == gen_spec.render(ROOT)


@pytest.mark.parametrize(
    "value,ns",
    [(1.5, 1_500_000_000), (0.1, 100_000_000), (0.0004, 400_000), (1e-12, 1), ("500ms", 500_000_000),
     ("1.5s", 1_500_000_000), ("0", 0), (0, 0), (3, 3_000_000_000), ("10ns", 10), ("0.0000000001s", 1),
     ("2m", 120_000_000_000), (decimal.Decimal("0.25"), 250_000_000)],
)
def test_durations_round_up_to_nanoseconds(value: object, ns: int) -> None:
    assert duration_ns(value) == ns


@pytest.mark.parametrize("value", ["abc", "1.", ".5", "5x", "", -1, -0.5, float("nan"), float("inf"), 2e10, "99999999999999999999s"])
def test_bad_durations_raise_value_error_naming_the_form(value: object) -> None:
    with pytest.raises(ValueError) as info:
        duration_ns(value)
    msg = str(info.value)
    assert "500ms" in msg or "maximum" in msg, msg


@pytest.mark.parametrize("value", [True, None, [1], object()])
def test_durations_of_another_type_raise_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="seconds as a number"):
        duration_ns(value)


def test_bad_options_fail_before_anything_starts(tag: object) -> None:
    with pytest.raises(ValueError, match="500ms"):
        treeguardian.Popen(["true"], grace="abc")
    with pytest.raises(TypeError, match="'graec'"):
        treeguardian.Popen(["true"], graec=1)
    with pytest.raises(ValueError, match="provider, group"):
        to_args({"forward_to": "nowhere"})
    with pytest.raises(TypeError, match="unknown guardian option 'events_fd'"):
        to_args({"events_fd": 3})
    assert to_args({"grace": 0.0004, "verbose": 2, "wait_descendants": True}) == [
        "--grace=400000ns", "--verbose", "--verbose", "--wait-descendants"]
