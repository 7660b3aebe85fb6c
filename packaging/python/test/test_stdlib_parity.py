"""The standard library's own process-API expectations, run side by side: each test runs once
against ``subprocess`` / ``asyncio`` / ``anyio`` and once against treeguardian's drop-in
(``impl``), with the same assertions: the kill status, spawn errors, ``poll``,
``communicate``, timeouts, ``run`` / ``check_output``. Every process carries the test's nonce.

Against a guardian older than 0.2.0 (no kill request) the treeguardian side of the kill tests
fails: that is the point of them."""

from __future__ import annotations

import asyncio
import errno
import inspect
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

import treeguardian
import treeguardian.aio

from conftest import Tag

SYNC = {"subprocess": subprocess, "treeguardian": treeguardian}
ASYNC = {"asyncio": asyncio, "treeguardian": treeguardian.aio}
IMPLS = ["stdlib", "treeguardian"]


def sync_api(impl: str) -> Any:
    return subprocess if impl == "stdlib" else treeguardian


def async_api(impl: str) -> Any:
    return asyncio if impl == "stdlib" else treeguardian.aio


# ---- subprocess ----


@pytest.mark.parametrize("impl", IMPLS)
def test_kill_gives_the_sigkill_status(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    p = api.Popen(["sleep", tag.sleep()])
    assert p.poll() is None
    assert p.kill() is None
    assert p.wait(30) == -signal.SIGKILL
    assert p.returncode == -signal.SIGKILL and p.poll() == -signal.SIGKILL
    p.kill()  # a reaped process: nothing, no error
    tag.assert_nothing_left()


@pytest.mark.parametrize("impl", IMPLS)
def test_send_signal_sigkill_and_terminate(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    p = api.Popen(["sleep", tag.sleep()])
    p.send_signal(signal.SIGKILL)
    assert p.wait(30) == -signal.SIGKILL
    q = api.Popen(["sleep", tag.sleep()])
    q.terminate()
    assert q.wait(30) == -signal.SIGTERM
    tag.assert_nothing_left()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("what", ["missing", "plain-file", "directory", "not-on-path", "missing-relative"])
def test_a_command_that_cannot_start_raises_at_spawn(tag: Tag, impl: str, what: str) -> None:
    api = sync_api(impl)
    expect: Any = FileNotFoundError
    if what == "missing":
        cmd = str(tag.tmp / "missing")
    elif what == "plain-file":
        (tag.tmp / "plain").write_text("not a program\n")
        (tag.tmp / "plain").chmod(0o644)
        cmd, expect = str(tag.tmp / "plain"), PermissionError
    elif what == "directory":
        cmd, expect = str(tag.tmp), PermissionError
    elif what == "not-on-path":
        cmd = f"no-such-command-{tag.nonce}"
    else:
        cmd = "./missing-" + tag.nonce
    with pytest.raises(expect) as info:
        api.Popen([cmd, tag.nonce])
    assert info.value.errno == (errno.EACCES if expect is PermissionError else errno.ENOENT)
    assert info.value.filename == cmd
    tag.assert_nothing_left()


@pytest.mark.parametrize("impl", IMPLS)
def test_env_path_and_cwd_decide_as_for_the_stdlib(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    prog = tag.tmp / "prog"
    prog.write_text("#!/bin/sh\nexit 5\n")
    prog.chmod(0o755)
    with api.Popen(["prog", tag.nonce], env={**os.environ, "PATH": str(tag.tmp)}) as p:
        assert p.wait(30) == 5
    with api.Popen(["./prog", tag.nonce], cwd=str(tag.tmp)) as p:
        assert p.wait(30) == 5
    with pytest.raises(FileNotFoundError):
        api.Popen(["prog", tag.nonce], env={**os.environ, "PATH": "/nonexistent"})


@pytest.mark.parametrize("impl", IMPLS)
def test_poll_and_wait(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    p = api.Popen(["sh", "-c", "read x; exit 4", tag.nonce], stdin=subprocess.PIPE)
    assert p.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    p.stdin.close()
    assert p.wait(30) == 4 and p.poll() == 4 and p.returncode == 4


@pytest.mark.parametrize("impl", IMPLS)
def test_communicate(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    with api.Popen(["sh", "-c", "cat; echo err >&2", tag.nonce], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        out, err = p.communicate(b"hello", timeout=30)
    assert (out, err, p.returncode) == (b"hello", b"err\n", 0)
    with api.Popen(["sh", "-c", "cat", tag.nonce], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as p:
        assert p.communicate("text", timeout=30) == ("text", None)


@pytest.mark.parametrize("impl", IMPLS)
def test_communicate_timeout_then_kill(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    p = api.Popen(["sh", "-c", f"echo early; exec sleep {tag.sleep()}", tag.nonce], stdout=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        p.communicate(timeout=0.3)
    p.kill()
    out, _ = p.communicate(timeout=30)
    assert out == b"early\n" and p.returncode == -signal.SIGKILL
    tag.assert_nothing_left()


@pytest.mark.parametrize("impl", IMPLS)
def test_run_check_output_call(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    done = api.run(["sh", "-c", "echo out; echo err >&2; exit 3", tag.nonce], capture_output=True)
    assert isinstance(done, subprocess.CompletedProcess)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
    assert api.run(["sh", "-c", "cat", tag.nonce], input="x", capture_output=True, text=True).stdout == "x"
    assert api.check_output(["sh", "-c", "echo hi", tag.nonce]) == b"hi\n"
    with pytest.raises(subprocess.CalledProcessError) as info:
        api.check_output(["sh", "-c", "echo partial; exit 2", tag.nonce])
    assert info.value.returncode == 2 and info.value.output == b"partial\n"
    assert api.call(["sh", "-c", "exit 6", tag.nonce]) == 6
    with pytest.raises(subprocess.CalledProcessError):
        api.check_call(["sh", "-c", "exit 1", tag.nonce])
    with pytest.raises(FileNotFoundError):
        api.run([f"no-such-command-{tag.nonce}"])


@pytest.mark.parametrize("impl", IMPLS)
def test_run_timeout_kills(tag: Tag, impl: str) -> None:
    api = sync_api(impl)
    with pytest.raises(subprocess.TimeoutExpired) as info:
        api.run(["sh", "-c", f"echo started; exec sleep {tag.sleep()}", tag.nonce], stdout=subprocess.PIPE, timeout=0.5)
    assert info.value.timeout == 0.5
    tag.assert_nothing_left()


# ---- asyncio ----


@pytest.mark.parametrize("impl", IMPLS)
def test_asyncio_kill_terminate_are_sync_and_give_the_statuses(tag: Tag, impl: str) -> None:
    api = async_api(impl)

    async def main() -> None:
        proc = await api.create_subprocess_exec("sleep", tag.sleep())
        assert isinstance(proc, asyncio.subprocess.Process)
        assert not inspect.iscoroutinefunction(proc.kill) and not inspect.iscoroutinefunction(proc.terminate)
        assert not inspect.iscoroutinefunction(proc.send_signal)
        assert proc.kill() is None
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
        proc = await api.create_subprocess_exec("sleep", tag.sleep())
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGTERM
        proc = await api.create_subprocess_exec("sleep", tag.sleep())
        proc.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL and proc.returncode == -signal.SIGKILL

    asyncio.run(main())
    tag.assert_nothing_left()


@pytest.mark.parametrize("impl", IMPLS)
def test_asyncio_spawn_errors_shell_and_communicate(tag: Tag, impl: str) -> None:
    api = async_api(impl)

    async def main() -> None:
        with pytest.raises(FileNotFoundError) as info:
            await api.create_subprocess_exec(f"no-such-command-{tag.nonce}")
        assert info.value.errno == errno.ENOENT
        (tag.tmp / "plain").write_text("x\n")
        with pytest.raises(PermissionError):
            await api.create_subprocess_exec(str(tag.tmp / "plain"))
        proc = await api.create_subprocess_shell(f"cat; echo {tag.nonce} >/dev/null; exit 3", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(b"in"), 30)
        assert (out, err, proc.returncode) == (b"in", None, 3)
        proc = await api.create_subprocess_exec("sleep", tag.sleep())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.2)
        proc.kill()
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL

    asyncio.run(main())
    tag.assert_nothing_left()


# ---- anyio ----


@pytest.mark.parametrize("impl", IMPLS)
def test_anyio_run_process_and_open_process(tag: Tag, impl: str) -> None:
    import anyio
    import anyio.abc

    import treeguardian.anyio as tg_anyio

    api: Any = anyio if impl == "stdlib" else tg_anyio

    async def main() -> None:
        done = await api.run_process(["sh", "-c", "cat; echo e >&2", tag.nonce], input=b"x")
        assert (done.returncode, done.stdout, done.stderr) == (0, b"x", b"e\n")
        with pytest.raises(subprocess.CalledProcessError):
            await api.run_process(["sh", "-c", "exit 2", tag.nonce])
        assert (await api.run_process(["sh", "-c", "exit 2", tag.nonce], check=False)).returncode == 2
        assert (await api.run_process(f"echo hi; : {tag.nonce}")).stdout == b"hi\n"  # a string is a shell command
        with pytest.raises(FileNotFoundError):
            await api.open_process([f"no-such-command-{tag.nonce}"])
        async with await api.open_process(["sleep", tag.sleep()]) as proc:
            assert isinstance(proc, anyio.abc.Process)
            proc.kill()
            assert await proc.wait() == -signal.SIGKILL

    anyio.run(main)
    tag.assert_nothing_left()
