"""Every ```python block of packaging/python/README.md runs as written (issue 31: README
examples are tested), in a fresh interpreter whose processes carry the test's nonce (in the
environment, inherited by everything they start). The MCP example needs a real server: it runs
with ``mcp-server-time`` from TREEGUARDIAN_TEST_SERVERS_BIN (run.sh installs it) in place of
``uvx``, and is skipped, saying so, without it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List

import pytest

from conftest import ENV_TAG, ROOT, Tag

README = ROOT / "packaging/python/README.md"


def blocks() -> List[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_its_examples() -> None:
    assert len(blocks()) >= 4


@pytest.mark.parametrize("index", range(len(blocks())))
def test_readme_example_runs(tag: Tag, index: int) -> None:
    code = blocks()[index]
    if "mcp-server-time" in code:
        servers = os.environ.get("TREEGUARDIAN_TEST_SERVERS_BIN")
        if not servers:
            pytest.skip("SKIPPED: the MCP example needs mcp-server-time (TREEGUARDIAN_TEST_SERVERS_BIN, set by run.sh)")
        code = code.replace('command="uvx", args=["mcp-server-time", ', f'command="{servers}/mcp-server-time", args=[')
    env = {**os.environ, ENV_TAG: tag.nonce}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, cwd=str(tag.tmp))
    assert out.returncode == 0, (out.stdout, out.stderr)
    tag.wait_nothing_left()
