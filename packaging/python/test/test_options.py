"""The driver's one option table (``treeguardian.OPTIONS``) against guardian's: ``spec/options.json``
once it exists (the cli helper generates it), until then the options ``guardian --help`` lists."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Dict, Optional

from conftest import ROOT

import treeguardian

NOT_OPTIONS = {"--help", "--version"}


def guardian_options() -> Dict[str, Optional[str]]:
    """flag -> env variable."""
    spec = ROOT / "spec/options.json"
    if spec.exists():
        data = json.loads(spec.read_text())
        opts = data.get("options", data)
        items = opts if isinstance(opts, list) else [dict(long=k, **v) for k, v in opts.items()]
        out = {}
        for o in items:
            long = o.get("long") or o.get("name")
            flag = long if long.startswith("--") else f"--{long}"
            if flag not in NOT_OPTIONS and o.get("command", "guardian") in ("guardian", None, ""):
                out[flag] = o.get("env")
        return out
    text = subprocess.run([treeguardian.binary(), "--help"], capture_output=True, text=True, check=True).stdout
    out: Dict[str, Optional[str]] = {}
    current = None
    for line in text[text.index("Options:") :].splitlines():
        m = re.match(r"^\s+(?:-\w, )?(--[\w-]+)", line)
        if m:
            current = m.group(1)
            if current not in NOT_OPTIONS:
                out[current] = None
            continue
        env = re.search(r"\[env: (\w+)=", line)
        if env and current in out:
            out[current] = env.group(1)
    return out


def test_the_option_table_is_guardians() -> None:
    want = guardian_options()
    got = {o.flag: o.env for o in treeguardian.OPTIONS.values()}
    assert sorted(got) == sorted(want)
    for flag, env in want.items():
        if env is not None and flag != "--verbose":
            assert got[flag] == env, flag
