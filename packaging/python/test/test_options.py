"""The driver's one option table (``treeguardian.OPTIONS``) against guardian's one option table,
as ``spec/options.json`` renders it (``make options``; ``make check-generated`` keeps it current)."""

from __future__ import annotations

import json
from typing import Dict, Optional

from conftest import ROOT

import treeguardian

NOT_OPTIONS = {"--help", "--version"}


def guardian_options() -> Dict[str, Optional[str]]:
    """flag -> env variable, for every option of the main command in ``spec/options.json``."""
    data = json.loads((ROOT / "spec/options.json").read_text())
    return {
        f"--{o['long']}": o["env"]
        for o in data["options"]
        if "guardian" in o["commands"] and f"--{o['long']}" not in NOT_OPTIONS
    }


def test_the_option_table_is_guardians() -> None:
    want = guardian_options()
    got = {o.flag: o.env for o in treeguardian.OPTIONS.values()}
    assert sorted(got) == sorted(want)
    for flag, env in want.items():
        if env is not None:
            assert got[flag] == env, flag
