#!/usr/bin/env python3
"""Regenerates treeguardian-mcp's generated parts from spec/, or checks them (--check).

- the HOSTS table of packaging/python/treeguardian/_mcp_wrap.py, from spec/mcp-hosts.json
  (plus the binary variable of spec/driver.json);
- packaging/npm/mcp-wrap.py, a byte-for-byte copy of that module (the npm package runs it with
  python3: one implementation, shipped by both packages).

    python3 packaging/mcp/sync.py          # rewrite both
    python3 packaging/mcp/sync.py --check  # exit 1, naming the stale file, when either differs
"""

import json
import pprint
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "packaging/python/treeguardian/_mcp_wrap.py"
NPM_COPY = ROOT / "packaging/npm/mcp-wrap.py"
BEGIN = "# BEGIN HOSTS (generated from spec/mcp-hosts.json by packaging/mcp/sync.py; do not edit)\n"
END = "# END HOSTS\n"


def hosts_table() -> dict:
    spec = json.loads((ROOT / "spec/mcp-hosts.json").read_text())
    driver = json.loads((ROOT / "spec/driver.json").read_text())
    return {
        "binary_variable": driver["binary_variable"],
        "wrap": spec["wrap"],
        "hosts": [
            {k: h[k] for k in ("id", "name", "format", "files", "match", "servers", "stdio_types", "url_keys", "grace")}
            for h in spec["hosts"]
        ],
    }


def generated_module() -> str:
    text = MODULE.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "HOSTS: Dict[str, Any] = " + pprint.pformat(hosts_table(), width=110, sort_dicts=False) + "\n"
    return head + BEGIN + body + END + tail


def main(argv: list) -> int:
    module = generated_module()
    stale = []
    if MODULE.read_text() != module:
        stale.append(MODULE)
    if not NPM_COPY.exists() or NPM_COPY.read_text() != module:
        stale.append(NPM_COPY)
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run python3 packaging/mcp/sync.py", file=sys.stderr)
        return 1 if stale else 0
    MODULE.write_text(module)
    NPM_COPY.write_text(module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
