"""guardian's events reach the ``treeguardian`` logger as the driver reads them: fallbacks as
warnings, errors (refusals) as errors, teardowns at INFO; each event once."""

from __future__ import annotations

import logging
import os

import pytest

import treeguardian
from treeguardian._stream import EventStream

from conftest import Tag

FALLBACK = b'{"event":"fallback","ts":1.0,"what":"cgroup","errno":"EACCES","detail":"a subreaper without a cgroup"}\n'
ERROR = b'{"event":"error","ts":2.0,"status":125,"message":"cannot stop the tree"}\n'


def test_fallbacks_and_errors_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    os.write(w, FALLBACK + ERROR)
    os.close(w)
    stream = EventStream(r)
    with caplog.at_level(logging.INFO, logger="treeguardian"):
        assert len(stream.events) == 2
        assert len(stream.events) == 2  # read again: not logged again
    got = [(rec.name, rec.levelno, rec.getMessage()) for rec in caplog.records]
    assert got == [
        ("treeguardian", logging.WARNING, "guardian fallback: cgroup refused (EACCES): a subreaper without a cgroup"),
        ("treeguardian", logging.ERROR, "guardian error (status 125): cannot stop the tree"),
    ], got


def test_a_real_teardown_is_logged(tag: Tag, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="treeguardian"):
        with treeguardian.Popen(["sh", "-c", f"setsid sleep {tag.sleep()} & exit 0", tag.nonce]) as p:
            assert p.wait(30) == 0
    tag.assert_nothing_left()
    messages = [rec.getMessage() for rec in caplog.records if rec.name == "treeguardian"]
    assert any(m.startswith("guardian released the tree: status 0") for m in messages), messages
