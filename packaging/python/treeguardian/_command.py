"""The provider's command resolved as ``execvp`` would, before the spawn: a command that cannot
be started raises ``FileNotFoundError`` / ``PermissionError`` (the standard library's own form:
errno, strerror, the command as ``filename``) from the call that would start it, instead of a
guardian that starts and ends with 127 / 126. No wait: a few ``access()`` calls, cached by
(command, PATH, cwd) and re-checked with one."""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ._binary import ENVIRON

#: (command, PATH, cwd) -> the path execvp would run.
_cache: Dict[Tuple[str, Optional[bytes], Optional[str]], str] = {}


def _refuse(code: int, cmd: str) -> OSError:
    cls = FileNotFoundError if code == errno.ENOENT else PermissionError if code == errno.EACCES else OSError
    return cls(code, os.strerror(code), cmd)


def _runnable(path: str) -> int:
    """0 if execve could run ``path``, else the errno it would give."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return errno.ENOENT
    except NotADirectoryError:
        return errno.ENOTDIR
    except PermissionError:
        return errno.EACCES
    except OSError as e:
        return e.errno or errno.ENOENT
    if stat.S_ISDIR(st.st_mode) or not os.access(path, os.X_OK):
        return errno.EACCES
    return 0


def _path_value(env: Optional[Mapping[Any, Any]]) -> Optional[bytes]:
    if env is None:
        return ENVIRON.get(b"PATH")
    value = env.get("PATH", env.get(b"PATH"))
    return None if value is None else os.fsencode(value)


def _remember(key: Tuple[str, Optional[bytes], Optional[str]], full: str) -> None:
    if len(_cache) > 256:
        _cache.clear()
    _cache[key] = full


def check_command(cmd: Union[str, bytes], env: Optional[Mapping[Any, Any]] = None, cwd: Optional[str] = None) -> None:
    """Raises ``FileNotFoundError`` / ``PermissionError`` if ``execvp(cmd)`` with ``env``'s PATH
    (else this process's) in ``cwd`` would fail for want of the file or of its execute
    permission. A script without ``#!`` passes (execvp runs it with ``/bin/sh``)."""
    name = os.fsdecode(cmd)
    if not name:
        raise _refuse(errno.ENOENT, name)
    slash = "/" in name
    path = None if slash else _path_value(env)
    key = (name, path, cwd)
    cached = _cache.get(key)
    # A command found before: one access() (the spawn's path: issue 20.5).
    if cached is not None and os.access(cached, os.X_OK):
        return
    if slash:
        full = name if cwd is None or os.path.isabs(name) else os.path.join(cwd, name)
        code = _runnable(full)
        if code:
            raise _refuse(errno.ENOENT if code == errno.ENOTDIR else code, name)
        _remember(key, full)
        return
    dirs = os.fsdecode(path).split(os.pathsep) if path is not None else os.defpath.split(os.pathsep)
    denied = False
    for d in dirs:
        full = os.path.join(d, name) if d else name
        if cwd is not None and not os.path.isabs(full):
            full = os.path.join(cwd, full)
        code = _runnable(full)
        if code == 0:
            _remember(key, full)
            return
        denied = denied or code == errno.EACCES
    raise _refuse(errno.EACCES if denied else errno.ENOENT, name)
