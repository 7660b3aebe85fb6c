"""``subprocess.run``, ``call``, ``check_call`` and ``check_output`` over :class:`Popen`: the
standard library's semantics (``timeout`` is the host's: on expiry the tree is killed, with
the kill request, and ``TimeoutExpired`` raised), with guardian's options as keywords beside
them. guardian's own ``--timeout`` is ``guardian_timeout=`` here (``timeout`` is taken)."""

from __future__ import annotations

import subprocess
from typing import Any, Optional

from ._popen import Args, Popen


def _options(kwargs: Any) -> Any:
    if "guardian_timeout" in kwargs:
        kwargs["timeout"] = kwargs.pop("guardian_timeout")
    return kwargs


def run(
    args: Args,
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: Optional[float] = None,
    check: bool = False,
    **kwargs: Any,
) -> "subprocess.CompletedProcess[Any]":
    """``subprocess.run`` of ``args`` under guardian."""
    if input is not None:
        if kwargs.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        if kwargs.get("stdout") is not None or kwargs.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = subprocess.PIPE
        kwargs["stderr"] = subprocess.PIPE
    with Popen(args, **_options(kwargs)) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
        retcode = process.poll()
        assert retcode is not None
        if check and retcode:
            raise subprocess.CalledProcessError(retcode, args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(args, retcode, stdout, stderr)


def call(args: Args, *, timeout: Optional[float] = None, **kwargs: Any) -> int:
    """``subprocess.call`` of ``args`` under guardian."""
    with Popen(args, **_options(kwargs)) as p:
        try:
            return p.wait(timeout=timeout)
        except BaseException:
            p.kill()
            raise


def check_call(args: Args, *, timeout: Optional[float] = None, **kwargs: Any) -> int:
    """``subprocess.check_call`` of ``args`` under guardian."""
    retcode = call(args, timeout=timeout, **kwargs)
    if retcode:
        raise subprocess.CalledProcessError(retcode, args)
    return 0


def check_output(args: Args, *, timeout: Optional[float] = None, **kwargs: Any) -> Any:
    """``subprocess.check_output`` of ``args`` under guardian."""
    for kw in ("stdout", "check"):
        if kw in kwargs:
            raise ValueError(f"{kw} argument not allowed, it will be overridden.")
    if "input" in kwargs and kwargs["input"] is None:
        kwargs["input"] = "" if kwargs.get("universal_newlines") or kwargs.get("text") or kwargs.get("encoding") or kwargs.get("errors") else b""
    return run(args, stdout=subprocess.PIPE, timeout=timeout, check=True, **kwargs).stdout
