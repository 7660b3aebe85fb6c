"""The event dataclasses against the one schema: ``spec/events.json`` once it exists (the
rustclient helper generates it), until then guardian's own ``Event::fields`` in
``src/events.rs`` (which src/events/schema_test.rs holds docs/contract.md to). Each event, each
field, in wire order, and how it appears: always, ``null`` without a value, or absent."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from typing import Dict, List, Tuple

from conftest import ROOT

import treeguardian
from treeguardian import EVENT_TYPES

Fields = Dict[str, List[Tuple[str, str]]]


def from_rust() -> Fields:
    src = (ROOT / "src/events.rs").read_text()
    names = dict(re.findall(r'Event::(\w+)(?:\s*\{\s*\.\.\s*\}|\(_\))\s*=>\s*"([\w-]+)"', src))
    body = src[src.index("fn fields(") : src.index("pub fn to_line(")]
    arms = re.split(r"\n\s*Event::(\w+)", body)[1:]
    out: Fields = {}
    for variant, text in zip(arms[0::2], arms[1::2]):
        name = names[variant]
        if name == "test-pause":
            continue
        kinds = {"put": "always", "nullable": "nullable", "optional": "optional"}
        out[name] = [(f, kinds[k]) for k, f in re.findall(r'out\.(put|nullable|optional)\("(\w+)"', text)]
    return out


def from_spec(path: str) -> Fields:
    data = json.loads((ROOT / path).read_text())
    events = data.get("events", data)
    out: Fields = {}
    for ev in events if isinstance(events, list) else [dict(name=k, **v) for k, v in events.items()]:
        out[ev["name"]] = [(f["name"], f.get("presence", "always").lower()) for f in ev["fields"]]
    return out


def schema() -> Fields:
    return from_spec("spec/events.json") if (ROOT / "spec/events.json").exists() else from_rust()


def from_python() -> Fields:
    out: Fields = {}
    for name, cls in EVENT_TYPES.items():
        hints = typing.get_type_hints(cls)
        fields = []
        for f in dataclasses.fields(cls):
            if f.name in ("ts", "event"):
                continue
            nullable = type(None) in typing.get_args(hints[f.name])
            has_default = f.default is not dataclasses.MISSING
            fields.append((f.name, "optional" if has_default else "nullable" if nullable else "always"))
        out[name] = fields
    return out


def test_every_event_and_field_matches_the_schema() -> None:
    want = schema()
    # spec/driver.json's version field (spawned.version) is optional to the driver, whatever
    # the schema says: an older guardian omits it, and the driver must read that spawned to
    # refuse the guardian by name.
    vf = json.loads((ROOT / "spec/driver.json").read_text())["version_field"]
    want[vf["event"]] = [(f, k) for f, k in want[vf["event"]] if f != vf["field"]] + [(vf["field"], "optional")]
    assert len(want) >= 9, want
    got = from_python()
    assert sorted(got) == sorted(want)
    for name in want:
        # wire order for required fields; optional ones (absent without a value) come last in
        # a dataclass, so compare them as a set.
        assert [f for f in got[name] if f[1] != "optional"] == [f for f in want[name] if f[1] != "optional"], name
        assert {f for f in got[name] if f[1] == "optional"} == {f for f in want[name] if f[1] == "optional"}, name


def test_lines_parse_to_their_classes_and_unknown_ones_are_kept() -> None:
    line = '{"event":"exit","ts":1.5,"pid":4,"code":null,"signal":"SIGTERM","core_dumped":false,"new":1}'
    ev = treeguardian.parse_event(line)
    assert ev == treeguardian.Exit(ts=1.5, pid=4, code=None, signal="SIGTERM", core_dumped=False)
    other = treeguardian.parse_event('{"event":"later","ts":2}')
    assert isinstance(other, treeguardian.UnknownEvent) and other.event == "later"
