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

from conftest import Tag, wait_for

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


KILLABLE = r"""#!/bin/sh
# A stand-in for guardian 0.2.0's kill request: records its environment's GUARDIAN_KILL_SIGNAL
# and the signal it gets, SIGKILLs the provider and dies of SIGKILL (as guardian ends).
fd=
while [ $# -gt 0 ]; do
  case $1 in --events-fd=*) fd=${1#--events-fd=} ;; --) shift; break ;; esac
  shift
done
echo "${GUARDIAN_KILL_SIGNAL:-unset}" > "$RECORD.env"
"$@" &
child=$!
trap 'echo 64 >> "$RECORD.signal"; kill -9 $child; kill -9 $$' 64
trap 'echo 15 >> "$RECORD.signal"' TERM
printf '{"event":"spawned","ts":1.0,"pid":%s,"pgid":%s,"guardian_pid":%s,"mode":"subreaper","cgroup":null,"version":"0.2.0"}\n' $child $child $$ >/proc/self/fd/$fd
while kill -0 $child 2>/dev/null; do wait $child; done
"""


@pytest.mark.parametrize("api", ["Popen", "aio"])
def test_kill_sends_the_kill_request_with_its_variable(tag: Tag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    # The driver's half of the kill request (spec/driver.json): guardian started with
    # GUARDIAN_KILL_SIGNAL=RTMAX in its environment, kill() sends it signal 64 once guardian is
    # ready, and guardian's death by SIGKILL is returncode -9. (The real binary's half:
    # test_stdlib_parity.py's kill tests.)
    path = tmp_path / "guardian"
    path.write_text(KILLABLE)
    path.chmod(0o755)
    record = tmp_path / "record"
    monkeypatch.setenv("GUARDIAN_BIN", str(path))
    monkeypatch.setenv("RECORD", str(record))
    monkeypatch.setenv("GUARDIAN_KILL_SIGNAL", "TERM")  # the host's own value does not reach guardian
    if api == "Popen":
        p = treeguardian.Popen(["sleep", tag.sleep()])
        assert p.wait_spawned(30) is not None
        p.kill()
        rc = p.wait(30)
    else:

        async def main() -> int:
            proc = await treeguardian.aio.create_subprocess_exec("sleep", tag.sleep())
            assert await proc.wait_spawned(30) is not None
            proc.kill()
            return await asyncio.wait_for(proc.wait(), 30)

        rc = asyncio.run(main())
    assert rc == -signal.SIGKILL
    assert (tmp_path / "record.env").read_text().strip() == "RTMAX"
    assert (tmp_path / "record.signal").read_text().split() == ["64"]
    tag.wait_nothing_left()


def test_stop_with_a_shorter_grace_sends_the_kill_request_after_it(tag: Tag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # stop(grace=0.3) with guardian's grace 5 s: SIGTERM now, signal 64 0.3 s later.
    path = tmp_path / "guardian"
    path.write_text(KILLABLE)
    path.chmod(0o755)
    monkeypatch.setenv("GUARDIAN_BIN", str(path))
    monkeypatch.setenv("RECORD", str(tmp_path / "record"))
    p = treeguardian.Popen(["sleep", tag.sleep()], grace=5)
    assert p.wait_spawned(30) is not None
    p.stop(grace=0.3)
    assert p.wait(30) == -signal.SIGKILL
    assert (tmp_path / "record.signal").read_text().split() == ["15", "64"]
    tag.wait_nothing_left()


def test_guarded_server_refuses_an_older_guardian(tag: Tag, fake_guardian: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GuardedServer reads spawned from its events file: an older guardian is stopped and
    # wait_released() / close() raise naming both versions. (The stand-in writes its events to
    # --events-file here: run it by hand as the SDK would.)
    pytest.importorskip("mcp")
    import subprocess

    from mcp import StdioServerParameters

    from treeguardian.mcp import GuardedServer

    monkeypatch.setenv("FAKE_VERSION", "0.1.5")
    fake_guardian.write_text(FAKE.replace("--events-fd=*) fd=${1#--events-fd=}", "--events-file=*) fd=${1#--events-file=}").replace(">/proc/self/fd/$fd", '>>"$fd"'))
    g = GuardedServer(StdioServerParameters(command="sleep", args=[tag.sleep()]))
    p = subprocess.Popen([g.params.command, *g.params.args], env={**os.environ, **(g.params.env or {})})
    try:
        wait_for("spawned in the events file", lambda: g.spawned)  # (reading it checks it)
        with pytest.raises(treeguardian.GuardianVersionError, match="0.1.5"):
            g.wait_released(30)
        assert p.wait(30) == -signal.SIGTERM  # the stand-in (exec'd into sleep) got the stop request
        with pytest.raises(treeguardian.GuardianVersionError):
            g.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    tag.assert_nothing_left()
