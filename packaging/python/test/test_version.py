"""The version check of spec/driver.json: a guardian whose ``spawned`` says an older version
(or none) is refused with an error naming both versions and how to get a matching binary, and
the tree is stopped. A stand-in guardian (a shell script named by GUARDIAN_BIN) writes the
``spawned`` event and runs the provider in its place."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

import treeguardian
import treeguardian.aio
from treeguardian._versions import ACCEPT_VARIABLE

from conftest import Tag

FAKE = r"""#!/bin/sh
fd=
while [ $# -gt 0 ]; do
  case $1 in --events-fd=*) fd=${1#--events-fd=} ;; --) shift; break ;; esac
  shift
done
v=
[ -n "$FAKE_VERSION" ] && v=",\"version\":\"$FAKE_VERSION\""
printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","cgroup":null%s}\n' $$ $$ $$ "$v" >/proc/self/fd/$fd
exec "$@"
"""


@pytest.fixture
def fake_guardian(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "guardian"
    path.write_text(FAKE)
    path.chmod(0o755)
    monkeypatch.setenv("GUARDIAN_BIN", str(path))
    monkeypatch.delenv(ACCEPT_VARIABLE, raising=False)
    return path


@pytest.mark.parametrize("version", ["0.1.9", ""])
def test_an_older_guardian_is_refused_naming_both_versions(tag: Tag, fake_guardian: Path, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VERSION", version)
    p = treeguardian.Popen(["sleep", tag.sleep()])
    with pytest.raises(treeguardian.GuardianVersionError) as info:
        p.wait_spawned(30)
    msg = str(info.value)
    assert "0.2.0" in msg and str(fake_guardian) in msg and "GUARDIAN_BIN" in msg, msg
    assert (version or "older than 0.2.0") in msg, msg
    assert p.poll() is not None  # the tree was stopped
    tag.assert_nothing_left()


def test_a_newer_guardian_is_accepted(tag: Tag, fake_guardian: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VERSION", "0.3.1")
    p = treeguardian.Popen(["sh", "-c", "exit 3", tag.nonce])
    assert p.wait_spawned(30) is not None
    assert p.wait(30) == 3


def test_asyncio_wait_refuses_an_older_guardian(tag: Tag, fake_guardian: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VERSION", "0.1.0")

    async def main() -> None:
        proc = await treeguardian.aio.create_subprocess_exec("sleep", tag.sleep())
        with pytest.raises(treeguardian.GuardianVersionError, match="0.1.0"):
            await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode is not None

    asyncio.run(main())
    tag.assert_nothing_left()
