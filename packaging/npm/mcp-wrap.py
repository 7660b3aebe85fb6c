"""``treeguardian-mcp``: put guardian in front of every stdio MCP server in a host's config.

    treeguardian-mcp wrap [--dry-run] [--host ID] [--grace D] [FILE...]
    treeguardian-mcp unwrap [--dry-run] [--host ID] [FILE...]
    treeguardian-mcp check [--host ID] [FILE...]

One implementation, shipped twice: this file is the Python package's module and, byte for byte,
the npm package's ``mcp-wrap.py`` (its ``treeguardian-mcp`` bin runs it with python3). It uses the
standard library only, so either package runs it without installing anything. Where each host
keeps its servers comes from spec/mcp-hosts.json (the HOSTS table below is generated from it by
packaging/mcp/sync.py; both test suites fail when it is stale).

Editing never re-serialises a file. A small parser (JSONC: comments and trailing commas; TOML:
the subset config files use, checked by ``tomllib`` where Python has it) gives each value's byte
span, and a wrap is a few insertions and one replacement at those spans:

- ``command`` becomes the guardian the package ships, by absolute path;
- the original command's text (its exact bytes) and ``--grace G --`` are inserted before the
  first argument, with the separator the array already uses (or ``args`` is added after
  ``command`` when there was none).

``unwrap`` removes exactly what was inserted, so wrap followed by unwrap gives the original
bytes. A file that does not parse is refused, untouched. Writes are atomic (a temporary file in
the same directory, the original's mode, then rename) after a backup ``FILE.treeguardian.bak``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# BEGIN HOSTS (generated from spec/mcp-hosts.json by packaging/mcp/sync.py; do not edit)
HOSTS: Dict[str, Any] = {'binary_variable': 'GUARDIAN_BIN',
 'wrap': {'options_before_separator': ['--grace', '{grace}'],
          'options_when_args_added': ['--grace={grace}'],
          'args_added_rule': 'an entry without args gets an args member after command; its options are '
                             'written as one word (--grace=G) so that unwrap can tell the args it added '
                             '(removed again) from an args: [] the file had (emptied again): both would '
                             'otherwise read the same',
          'separator': '--',
          'guardian_basename': 'guardian',
          'teardown_margin_seconds': 0.5,
          'default_grace': '1s'},
 'hosts': [{'id': 'claude-desktop',
            'name': 'Claude Desktop',
            'format': 'json',
            'files': {'linux': [{'path': '$XDG_CONFIG_HOME/Claude/claude_desktop_config.json',
                                 'scope': 'user'}],
                      'macos': [{'path': '~/Library/Application Support/Claude/claude_desktop_config.json',
                                 'scope': 'user'}]},
            'match': [{'basename': 'claude_desktop_config.json'}],
            'servers': [['mcpServers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url', 'serverUrl', 'httpUrl'],
            'grace': '1s'},
           {'id': 'claude-code',
            'name': 'Claude Code (project .mcp.json)',
            'format': 'json',
            'files': {'linux': [{'path': '.mcp.json', 'scope': 'project'}],
                      'macos': [{'path': '.mcp.json', 'scope': 'project'}]},
            'match': [{'basename': '.mcp.json'}],
            'servers': [['mcpServers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '1s'},
           {'id': 'claude-code-user',
            'name': 'Claude Code (user and local scopes, ~/.claude.json)',
            'format': 'json',
            'files': {'linux': [{'path': '~/.claude.json', 'scope': 'user'}],
                      'macos': [{'path': '~/.claude.json', 'scope': 'user'}]},
            'match': [{'basename': '.claude.json'}],
            'servers': [['mcpServers'], ['projects', '*', 'mcpServers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '1s'},
           {'id': 'cursor',
            'name': 'Cursor',
            'format': 'json',
            'files': {'linux': [{'path': '~/.cursor/mcp.json', 'scope': 'user'},
                                {'path': '.cursor/mcp.json', 'scope': 'project'}],
                      'macos': [{'path': '~/.cursor/mcp.json', 'scope': 'user'},
                                {'path': '.cursor/mcp.json', 'scope': 'project'}]},
            'match': [{'basename': 'mcp.json', 'parent': '.cursor'}],
            'servers': [['mcpServers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '1s'},
           {'id': 'vscode',
            'name': 'VS Code (mcp.json)',
            'format': 'jsonc',
            'files': {'linux': [{'path': '.vscode/mcp.json', 'scope': 'project'},
                                {'path': '$XDG_CONFIG_HOME/Code/User/mcp.json', 'scope': 'user'}],
                      'macos': [{'path': '.vscode/mcp.json', 'scope': 'project'},
                                {'path': '~/Library/Application Support/Code/User/mcp.json',
                                 'scope': 'user'}]},
            'match': [{'basename': 'mcp.json', 'parent': '.vscode'},
                      {'basename': 'mcp.json', 'parent': 'User'}],
            'servers': [['servers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '5s'},
           {'id': 'vscode-settings',
            'name': 'VS Code (user settings.json, older "mcp" section)',
            'format': 'jsonc',
            'files': {'linux': [{'path': '$XDG_CONFIG_HOME/Code/User/settings.json', 'scope': 'user'}],
                      'macos': [{'path': '~/Library/Application Support/Code/User/settings.json',
                                 'scope': 'user'}]},
            'match': [{'basename': 'settings.json', 'parent': 'User'}],
            'servers': [['mcp', 'servers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '5s'},
           {'id': 'windsurf',
            'name': 'Windsurf',
            'format': 'json',
            'files': {'linux': [{'path': '~/.codeium/windsurf/mcp_config.json', 'scope': 'user'}],
                      'macos': [{'path': '~/.codeium/windsurf/mcp_config.json', 'scope': 'user'}]},
            'match': [{'basename': 'mcp_config.json'}],
            'servers': [['mcpServers']],
            'stdio_types': ['stdio'],
            'url_keys': ['serverUrl', 'url'],
            'grace': '1s'},
           {'id': 'zed',
            'name': 'Zed',
            'format': 'jsonc',
            'files': {'linux': [{'path': '$XDG_CONFIG_HOME/zed/settings.json', 'scope': 'user'},
                                {'path': '.zed/settings.json', 'scope': 'project'}],
                      'macos': [{'path': '~/.config/zed/settings.json', 'scope': 'user'},
                                {'path': '.zed/settings.json', 'scope': 'project'}]},
            'match': [{'basename': 'settings.json', 'parent': 'zed'},
                      {'basename': 'settings.json', 'parent': '.zed'}],
            'servers': [['context_servers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '1s'},
           {'id': 'codex',
            'name': 'Codex CLI',
            'format': 'toml',
            'files': {'linux': [{'path': '$CODEX_HOME/config.toml', 'scope': 'user'},
                                {'path': '.codex/config.toml', 'scope': 'project'}],
                      'macos': [{'path': '$CODEX_HOME/config.toml', 'scope': 'user'},
                                {'path': '.codex/config.toml', 'scope': 'project'}]},
            'match': [{'basename': 'config.toml', 'parent': '.codex'}],
            'servers': [['mcp_servers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url'],
            'grace': '1s'},
           {'id': 'gemini',
            'name': 'Gemini CLI',
            'format': 'jsonc',
            'files': {'linux': [{'path': '~/.gemini/settings.json', 'scope': 'user'},
                                {'path': '.gemini/settings.json', 'scope': 'project'}],
                      'macos': [{'path': '~/.gemini/settings.json', 'scope': 'user'},
                                {'path': '.gemini/settings.json', 'scope': 'project'}]},
            'match': [{'basename': 'settings.json', 'parent': '.gemini'}],
            'servers': [['mcpServers']],
            'stdio_types': ['stdio'],
            'url_keys': ['url', 'httpUrl'],
            'grace': '1s'}]}
# END HOSTS


class ParseError(Exception):
    """The file is not valid for its format: refused, left untouched."""


# ---------------------------------------------------------------------------------------------
# Spans: what the editors need from a parsed file.


class Str:
    """A string value: its decoded text and its exact source span."""

    def __init__(self, value: str, start: int, end: int) -> None:
        self.value, self.start, self.end = value, start, end


class Arr:
    """An array: its ``[`` offset, its ``]`` offset and its items (``Str`` or ``Other``)."""

    def __init__(self, open_: int, close: int, items: List[Any]) -> None:
        self.open, self.close, self.items = open_, close, items
        self.start, self.end = open_, close + 1


class Other:
    """Any other value (number, boolean, nested table...) by span."""

    def __init__(self, start: int, end: int, value: Any = None) -> None:
        self.start, self.end, self.value = start, end, value


class Table:
    """An object / table: ordered members. Each member is (key, key_start, value) where
    key_start is where the member's key text begins (for TOML, the line's key path)."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.members: List[Tuple[str, int, Any]] = []
        self.inline = True  # TOML: a { } table (members on one line)

    def get(self, key: str) -> Any:
        for k, _, v in self.members:
            if k == key:
                return v
        return None

    def index(self, key: str) -> int:
        for i, (k, _, _) in enumerate(self.members):
            if k == key:
                return i
        return -1


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


# ---------------------------------------------------------------------------------------------
# JSON with comments and trailing commas (VS Code, Zed, Gemini CLI; plain JSON elsewhere).


class _Json:
    def __init__(self, text: str) -> None:
        self.t = text
        self.i = 0

    def fail(self, what: str) -> ParseError:
        return ParseError(f"{what} at {_line_col(self.t, self.i)}")

    def ws(self) -> None:
        t, n = self.t, len(self.t)
        while self.i < n:
            c = t[self.i]
            if c in " \t\r\n\ufeff":
                self.i += 1
            elif t.startswith("//", self.i):
                j = t.find("\n", self.i)
                self.i = n if j < 0 else j
            elif t.startswith("/*", self.i):
                j = t.find("*/", self.i + 2)
                if j < 0:
                    raise self.fail("unterminated /* comment")
                self.i = j + 2
            else:
                return

    def value(self) -> Any:
        self.ws()
        t = self.t
        if self.i >= len(t):
            raise self.fail("unexpected end of file")
        c = t[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            return self.string()
        m = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?|true|false|null").match(t, self.i)
        if not m:
            raise self.fail(f"unexpected {t[self.i]!r}")
        self.i = m.end()
        return Other(m.start(), m.end(), json.loads(m.group(0)))

    def string(self) -> Str:
        m = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"').match(self.t, self.i)
        if not m:
            raise self.fail("bad string")
        self.i = m.end()
        return Str(json.loads(m.group(0)), m.start(), m.end())

    def obj(self) -> Table:
        tab = Table(self.i, self.i)
        self.i += 1
        while True:
            self.ws()
            if self.i < len(self.t) and self.t[self.i] == "}":
                self.i += 1
                tab.end = self.i
                return tab
            if self.i >= len(self.t) or self.t[self.i] != '"':
                raise self.fail("expected a key or '}'")
            key = self.string()
            self.ws()
            if self.i >= len(self.t) or self.t[self.i] != ":":
                raise self.fail("expected ':'")
            self.i += 1
            tab.members.append((key.value, key.start, self.value()))
            self.ws()
            if self.i < len(self.t) and self.t[self.i] == ",":
                self.i += 1
            elif self.i < len(self.t) and self.t[self.i] == "}":
                continue
            else:
                raise self.fail("expected ',' or '}'")

    def arr(self) -> Arr:
        open_ = self.i
        items: List[Any] = []
        self.i += 1
        while True:
            self.ws()
            if self.i < len(self.t) and self.t[self.i] == "]":
                a = Arr(open_, self.i, items)
                self.i += 1
                return a
            items.append(self.value())
            self.ws()
            if self.i < len(self.t) and self.t[self.i] == ",":
                self.i += 1
            elif self.i < len(self.t) and self.t[self.i] == "]":
                continue
            else:
                raise self.fail("expected ',' or ']'")


def parse_json(text: str) -> Table:
    p = _Json(text)
    root = p.value()
    p.ws()
    if p.i != len(text):
        raise p.fail("unexpected text after the end")
    if not isinstance(root, Table):
        raise ParseError("the top level is not an object")
    return root


# ---------------------------------------------------------------------------------------------
# TOML (Codex): tables, dotted keys, strings, arrays, inline tables; scalars kept opaque.

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_TOML_ESC = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}


class _Toml:
    def __init__(self, text: str) -> None:
        self.t = text
        self.i = 0
        self.root = Table(0, len(text))
        self.root.inline = False

    def fail(self, what: str) -> ParseError:
        return ParseError(f"{what} at {_line_col(self.t, self.i)}")

    def sp(self) -> None:
        while self.i < len(self.t) and self.t[self.i] in " \t":
            self.i += 1

    def ws_nl(self) -> None:
        """Spaces, newlines and comments (inside arrays)."""
        while self.i < len(self.t):
            c = self.t[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                j = self.t.find("\n", self.i)
                self.i = len(self.t) if j < 0 else j
            else:
                return

    def eol(self) -> None:
        self.sp()
        if self.i < len(self.t) and self.t[self.i] == "#":
            j = self.t.find("\n", self.i)
            self.i = len(self.t) if j < 0 else j
        if self.t.startswith("\r\n", self.i):
            self.i += 2
        elif self.i < len(self.t) and self.t[self.i] == "\n":
            self.i += 1
        elif self.i < len(self.t):
            raise self.fail("expected the end of the line")

    def key(self) -> List[str]:
        parts = []
        while True:
            self.sp()
            c = self.t[self.i : self.i + 1]
            if c == '"' or c == "'":
                s = self.string()
                parts.append(s.value)
            else:
                m = _BARE.match(self.t, self.i)
                if not m:
                    raise self.fail("expected a key")
                parts.append(m.group(0))
                self.i = m.end()
            self.sp()
            if self.t[self.i : self.i + 1] == ".":
                self.i += 1
                continue
            return parts

    def string(self) -> Str:
        t, s = self.t, self.i
        if t.startswith('"""', s) or t.startswith("'''", s):
            q = t[s : s + 3]
            j = t.find(q, s + 3)
            if j < 0:
                raise self.fail("unterminated multi-line string")
            while t.startswith(q[0], j + 3):  # up to two quotes may end the content
                j += 1
            body = t[s + 3 : j]
            self.i = j + 3
            if body.startswith("\r\n"):
                body = body[2:]
            elif body.startswith("\n"):
                body = body[1:]
            if q == '"""':
                body = re.sub(r"\\[ \t]*\r?\n[ \t\r\n]*", "", body)
                body = self._unescape(body, s)
            return Str(body, s, self.i)
        q = t[s]
        j = s + 1
        while True:
            if j >= len(t) or t[j] == "\n":
                raise self.fail("unterminated string")
            if q == '"' and t[j] == "\\":
                j += 2
                continue
            if t[j] == q:
                break
            j += 1
        body = t[s + 1 : j]
        self.i = j + 1
        return Str(self._unescape(body, s) if q == '"' else body, s, self.i)

    def _unescape(self, body: str, at: int) -> str:
        out = []
        k = 0
        while k < len(body):
            c = body[k]
            if c != "\\":
                out.append(c)
                k += 1
                continue
            e = body[k + 1 : k + 2]
            if e in _TOML_ESC:
                out.append(_TOML_ESC[e])
                k += 2
            elif e in ("u", "U"):
                n = 4 if e == "u" else 8
                hx = body[k + 2 : k + 2 + n]
                if len(hx) != n or not re.fullmatch(r"[0-9a-fA-F]+", hx):
                    self.i = at
                    raise self.fail("bad unicode escape")
                out.append(chr(int(hx, 16)))
                k += 2 + n
            else:
                self.i = at
                raise self.fail("bad escape")
        return "".join(out)

    def value(self) -> Any:
        t, s = self.t, self.i
        c = t[s : s + 1]
        if c in ('"', "'"):
            return self.string()
        if c == "[":
            items: List[Any] = []
            self.i += 1
            while True:
                self.ws_nl()
                if t[self.i : self.i + 1] == "]":
                    a = Arr(s, self.i, items)
                    self.i += 1
                    return a
                if self.i >= len(t):
                    raise self.fail("unterminated array")
                items.append(self.value())
                self.ws_nl()
                if t[self.i : self.i + 1] == ",":
                    self.i += 1
                elif t[self.i : self.i + 1] != "]":
                    raise self.fail("expected ',' or ']'")
        if c == "{":
            tab = Table(s, s)
            self.i += 1
            self.sp()
            if t[self.i : self.i + 1] == "}":
                self.i += 1
                tab.end = self.i
                return tab
            while True:
                kstart = self.i
                path = self.key()
                if t[self.i : self.i + 1] != "=":
                    raise self.fail("expected '='")
                self.i += 1
                self.sp()
                self._put(tab, path, kstart, self.value(), inline=True)
                self.sp()
                if t[self.i : self.i + 1] == ",":
                    self.i += 1
                    self.sp()
                elif t[self.i : self.i + 1] == "}":
                    self.i += 1
                    tab.end = self.i
                    return tab
                else:
                    raise self.fail("expected ',' or '}'")
        m = re.compile(r"[^\s,\]\}#]+(?:[ T][0-9][^\s,\]\}#]*)?").match(t, s)
        if not m:
            raise self.fail("expected a value")
        self.i = m.end()
        return Other(s, m.end(), m.group(0))

    def _put(self, tab: Table, path: List[str], kstart: int, value: Any, inline: bool) -> None:
        for part in path[:-1]:
            sub = tab.get(part)
            if sub is None:
                sub = Table(kstart, kstart)
                sub.inline = inline
                tab.members.append((part, kstart, sub))
            elif not isinstance(sub, Table):
                raise self.fail(f"key {part!r} is already a value")
            tab = sub
        if tab.get(path[-1]) is not None:
            raise self.fail(f"duplicate key {path[-1]!r}")
        tab.members.append((path[-1], kstart, value))

    def table_at(self, path: List[str], at: int) -> Table:
        tab = self.root
        for part in path:
            sub = tab.get(part)
            if sub is None:
                sub = Table(at, at)
                sub.inline = False
                tab.members.append((part, at, sub))
            elif isinstance(sub, list):  # array of tables: the last one
                sub = sub[-1]
            elif not isinstance(sub, Table):
                raise self.fail(f"{part!r} is a value, not a table")
            tab = sub
        return tab

    def parse(self) -> Table:
        t = self.t
        if t.startswith("\ufeff"):
            self.i = 1
        current = self.root
        while self.i < len(t):
            self.sp()
            c = t[self.i : self.i + 1]
            if c in ("\n", "\r", "#", ""):
                self.eol()
                continue
            if c == "[":
                start = self.i
                aot = t.startswith("[[", self.i)
                self.i += 2 if aot else 1
                path = self.key()
                if not t.startswith("]]" if aot else "]", self.i):
                    raise self.fail("expected ']'")
                self.i += 2 if aot else 1
                if aot:
                    parent = self.table_at(path[:-1], start)
                    lst = parent.get(path[-1])
                    new = Table(start, start)
                    new.inline = False
                    if lst is None:
                        parent.members.append((path[-1], start, [new]))
                    elif isinstance(lst, list):
                        lst.append(new)
                    else:
                        raise self.fail("array of tables over a value")
                    current = new
                else:
                    current = self.table_at(path, start)
                self.eol()
                continue
            kstart = self.i
            path = self.key()
            if t[self.i : self.i + 1] != "=":
                raise self.fail("expected '='")
            self.i += 1
            self.sp()
            self._put(current, path, kstart, self.value(), inline=False)
            self.eol()
        return self.root


def parse_toml(text: str) -> Table:
    import importlib

    try:
        tomllib: Any = importlib.import_module("tomllib")
    except ImportError:  # Python < 3.11: this parser's own checks only
        tomllib = None
    if tomllib is not None:
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ParseError(str(e)) from None
    return _Toml(text).parse()


# ---------------------------------------------------------------------------------------------
# Servers: where they are, what they run, and the edits that wrap or unwrap one.


class Server:
    def __init__(self, name: str, entry: Table) -> None:
        self.name = name
        self.entry = entry
        command = entry.get("command")
        self.command: Optional[Str] = command if isinstance(command, Str) else None
        args = entry.get("args")
        self.args: Optional[Arr] = args if isinstance(args, Arr) else None
        self.bad_args = args is not None and (not isinstance(args, Arr) or not all(isinstance(a, Str) for a in args.items))

    def arg_values(self) -> List[str]:
        return [a.value for a in self.args.items] if self.args else []


def _find_servers(root: Table, host: Dict[str, Any]) -> List[Tuple[Server, str]]:
    """(server, why it is left alone or '') for every entry of the host's servers tables."""
    found: List[Tuple[Server, str]] = []

    def walk(node: Any, path: Sequence[str]) -> None:
        if not path:
            if isinstance(node, Table):
                for name, _, entry in node.members:
                    if isinstance(entry, Table):
                        found.append((Server(name, entry), _not_stdio(entry, host)))
            return
        if not isinstance(node, Table):
            return
        if path[0] == "*":
            for _, _, sub in node.members:
                walk(sub, path[1:])
        else:
            walk(node.get(path[0]), path[1:])

    for path in host["servers"]:
        walk(root, path)
    return found


def _not_stdio(entry: Table, host: Dict[str, Any]) -> str:
    for k in host["url_keys"]:
        if entry.get(k) is not None:
            return f"a remote server ({k}); left alone"
    typ = entry.get("type")
    if isinstance(typ, Str) and typ.value not in host["stdio_types"]:
        return f"type {typ.value!r}, not stdio; left alone"
    command = entry.get("command")
    if command is None:
        return "no command; left alone"
    if not isinstance(command, Str):
        return "command is not a string (an older form this tool does not edit); left alone"
    return ""


def is_wrapped(server: Server) -> bool:
    return (
        server.command is not None
        and os.path.basename(server.command.value) == HOSTS["wrap"]["guardian_basename"]
        and HOSTS["wrap"]["separator"] in server.arg_values()
    )


class Editor:
    """Edits by span on one text, in one format."""

    def __init__(self, text: str, fmt: str) -> None:
        self.text, self.fmt = text, fmt
        self.edits: List[Tuple[int, int, str]] = []
        self.nl = "\r\n" if "\r\n" in text else "\n"

    def enc(self, s: str) -> str:
        return json.dumps(s, ensure_ascii=False)

    def apply(self) -> str:
        out, last = [], 0
        for start, end, new in sorted(self.edits, key=lambda e: (e[0], e[1])):
            if start < last:
                raise ParseError("overlapping edits (a server entry defined twice?)")
            out.append(self.text[last:start])
            out.append(new)
            last = end
        out.append(self.text[last:])
        return "".join(out)

    def _sep(self, arr: Arr) -> str:
        """The text between two items of ``arr`` as the file writes it."""
        t = self.text
        if len(arr.items) >= 2:
            between = t[arr.items[0].end : arr.items[1].start]
            if between.strip() == ",":
                return between
        else:  # one item: lay the new ones out as the text before it is
            between = t[arr.open + 1 : arr.items[0].start] if arr.items else ""
        # Comments stay where they are, once: the separator is the comma and the layout only.
        if "\n" in between:
            last = between[between.rfind("\n") + 1 :]
            return "," + self.nl + last[: len(last) - len(last.lstrip(" \t"))]
        return ", "

    def _args_member(self, server: Server) -> str:
        """The text that adds ``args`` after ``command`` when the entry had none."""
        assert server.command is not None
        entry, t = server.entry, self.text
        i = entry.index("command")
        key_start = entry.members[i][1]
        if self.fmt == "toml" and not entry.inline:
            line_start = t.rfind("\n", 0, key_start) + 1
            indent = t[line_start:key_start]
            key_text = t[key_start : t.index("=", key_start)].rstrip()
            prefix = key_text[: len(key_text) - len("command")] if key_text.endswith("command") else ""
            return self.nl + indent + prefix + "args = "
        if self.fmt == "toml":
            return ", args = "
        before = t[entry.start + 1 : key_start] if i == 0 else t[entry.members[i - 1][2].end : key_start]
        before = before.lstrip(",")
        if "\n" in before:
            ws = self.nl + before[before.rfind("\n") + 1 :]
        else:
            ws = " "
        return "," + ws + '"args": '

    def _args_member_at(self, server: Server) -> int:
        assert server.command is not None
        if self.fmt == "toml" and not server.entry.inline:
            j = self.text.find("\n", server.command.end)
            if j < 0:
                return len(self.text)
            return j - 1 if self.text[j - 1 : j] == "\r" else j
        return server.command.end

    def wrap(self, server: Server, guardian: str, options: List[str]) -> None:
        assert server.command is not None
        t = self.text
        cmd_raw = t[server.command.start : server.command.end]
        new = [self.enc(o) for o in options] + [self.enc(HOSTS["wrap"]["separator"]), cmd_raw]
        self.edits.append((server.command.start, server.command.end, self.enc(guardian)))
        arr = server.args
        if arr is None:
            grace = options[1] if len(options) > 1 else ""
            added = [self.enc(o.replace("{grace}", grace)) for o in HOSTS["wrap"]["options_when_args_added"]]
            new = added + new[len(options) :]
            at = self._args_member_at(server)
            self.edits.append((at, at, self._args_member(server) + "[" + ", ".join(new) + "]"))
        elif not arr.items:
            self.edits.append((arr.open + 1, arr.open + 1, ", ".join(new)))
        else:
            sep = self._sep(arr)
            self.edits.append((arr.items[0].start, arr.items[0].start, "".join(x + sep for x in new)))

    def unwrap(self, server: Server) -> None:
        assert server.command is not None and server.args is not None
        t, arr = self.text, server.args
        k = server.arg_values().index(HOSTS["wrap"]["separator"])
        if k + 1 >= len(arr.items):
            raise ParseError(f"server {server.name!r}: nothing follows {HOSTS['wrap']['separator']!r} in args")
        original = arr.items[k + 1]
        self.edits.append((server.command.start, server.command.end, t[original.start : original.end]))
        if k + 2 < len(arr.items):
            self.edits.append((arr.items[0].start, arr.items[k + 2].start, ""))
            return
        # No original arguments: was args added by wrap (right after command, in wrap's layout,
        # with the one-word options)? Then it goes; else the file had args: [] and it empties.
        inserted_at = self._args_member_at(server)
        expected = self._args_member(server) + "[" + ", ".join(t[a.start : a.end] for a in arr.items) + "]"
        one_word = HOSTS["wrap"]["options_when_args_added"][0].split("{grace}")[0]
        if k == len(HOSTS["wrap"]["options_when_args_added"]) and arr.items[0].value.startswith(one_word) and t[inserted_at : arr.end] == expected:
            self.edits.append((inserted_at, arr.end, ""))
        else:
            self.edits.append((arr.items[0].start, arr.items[-1].end, ""))


# ---------------------------------------------------------------------------------------------
# Files: which host a file belongs to, where the known files are.


def _platform() -> str:
    return "macos" if sys.platform == "darwin" else "linux"


def expand(path: str, cwd: str) -> str:
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    codex = os.environ.get("CODEX_HOME") or os.path.join(home, ".codex")
    p = path.replace("$XDG_CONFIG_HOME", xdg).replace("$CODEX_HOME", codex)
    p = os.path.expanduser(p)
    return p if os.path.isabs(p) else os.path.join(cwd, p)


def known_files(cwd: str) -> List[Tuple[str, Dict[str, Any]]]:
    out: List[Tuple[str, Dict[str, Any]]] = []
    seen = set()
    for host in HOSTS["hosts"]:
        for f in host["files"][_platform()]:
            p = expand(f["path"], cwd)
            real = os.path.realpath(p)
            if os.path.isfile(p) and real not in seen:
                seen.add(real)
                out.append((p, host))
    return out


def host_by_id(ident: str) -> Dict[str, Any]:
    for host in HOSTS["hosts"]:
        if host["id"] == ident:
            return dict(host)
    raise KeyError(ident)


def host_for(path: str) -> Optional[Dict[str, Any]]:
    base = os.path.basename(path)
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    for host in HOSTS["hosts"]:
        for m in host["match"]:
            if m["basename"] == base and m.get("parent", parent) == parent:
                return dict(host)
    return None


# ---------------------------------------------------------------------------------------------
# Commands.


class Outcome:
    def __init__(self) -> None:
        self.refused = 0
        self.unwrapped = 0
        self.unresolved = 0


def _read(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"not UTF-8 ({e})") from None


def parse(text: str, fmt: str) -> Table:
    return parse_toml(text) if fmt == "toml" else parse_json(text)


def write_atomic(path: str, text: str, backup: bool) -> Optional[str]:
    """Writes ``text`` to ``path`` (through a symlink, to its target) by rename, with the
    original's mode and owner; returns the backup's path."""
    real = os.path.realpath(path)
    st = os.stat(real)
    saved = None
    if backup:
        saved = real + ".treeguardian.bak"
        fd = os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, stat.S_IMODE(st.st_mode))
        with os.fdopen(fd, "wb") as f, open(real, "rb") as src:
            shutil.copyfileobj(src, f)
        os.chmod(saved, stat.S_IMODE(st.st_mode))
        try:
            os.chown(saved, st.st_uid, st.st_gid)
        except PermissionError:
            pass
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(real) + ".", suffix=".tmp", dir=os.path.dirname(real))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
            try:
                os.fchown(f.fileno(), st.st_uid, st.st_gid)
            except PermissionError:
                pass
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return saved


def resolves(command: str, env_path: Optional[str] = None) -> bool:
    if os.sep in command:
        return os.path.isfile(command) and os.access(command, os.X_OK)
    return shutil.which(command, path=env_path) is not None


def _describe(server: Server) -> str:
    assert server.command is not None
    return " ".join([server.command.value, *server.arg_values()])


def process(
    action: str,
    path: str,
    host: Dict[str, Any],
    guardian: Optional[str],
    grace: Optional[str],
    dry_run: bool,
    backup: bool,
    out: Callable[[str], None],
    outcome: Outcome,
) -> None:
    try:
        text = _read(path)
        root = parse(text, host["format"])
    except (ParseError, OSError) as e:
        out(f"{path}: refused, left as it was: cannot read it as {host['format'].upper()} ({host['name']}): {e}")
        outcome.refused += 1
        return
    servers = _find_servers(root, host)
    if not servers:
        out(f"{path}: no MCP servers ({host['name']})")
        return
    out(f"{path} ({host['name']}):")
    ed = Editor(text, host["format"])
    changed = 0
    for server, skip in servers:
        label = f"  {server.name}:"
        if skip:
            out(f"{label} {skip}")
            continue
        if server.bad_args:
            out(f"{label} args is not a list of strings; left alone")
            continue
        wrapped = is_wrapped(server)
        if action == "check":
            inner = server.arg_values()
            if wrapped:
                assert server.command is not None
                k = inner.index(HOSTS["wrap"]["separator"])
                run = inner[k + 1] if k + 1 < len(inner) else ""
                g_ok = resolves(server.command.value)
                r_ok = bool(run) and resolves(run)
                if not g_ok:
                    outcome.unresolved += 1
                out(
                    f"{label} wrapped; guardian {server.command.value} "
                    + ("found" if g_ok else "NOT FOUND (run treeguardian-mcp unwrap, then wrap, to point at an installed one)")
                    + f"; command {run!r} " + ("resolves" if r_ok else "does not resolve on this PATH")
                )
            else:
                outcome.unwrapped += 1
                assert server.command is not None
                r_ok = resolves(server.command.value)
                out(f"{label} NOT WRAPPED: {_describe(server)}; command " + ("resolves" if r_ok else "does not resolve on this PATH"))
            continue
        if action == "wrap":
            if wrapped:
                out(f"{label} already wrapped; left as is")
                continue
            assert guardian is not None
            ed.wrap(server, guardian, [o.replace("{grace}", grace or host["grace"]) for o in HOSTS["wrap"]["options_before_separator"]])
            out(f"{label} wrapped: {_describe(server)}")
            changed += 1
        else:
            if not wrapped:
                out(f"{label} not wrapped; left as is")
                continue
            try:
                ed.unwrap(server)
            except ParseError as e:
                out(f"{label} cannot unwrap: {e}; left as is")
                continue
            out(f"{label} unwrapped")
            changed += 1
    if action == "check" or not changed:
        return
    try:
        new = ed.apply()
        parse(new, host["format"])  # never write what does not parse back
    except ParseError as e:
        out(f"{path}: refused, left as it was: the edit would not parse ({e}); please report this")
        outcome.refused += 1
        return
    if dry_run:
        diff = difflib.unified_diff(
            text.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=path, tofile=path + " (" + action + ")"
        )
        for line in diff:
            out(line.rstrip("\r\n"))
        return
    try:
        saved = write_atomic(path, new, backup)
    except OSError as e:
        out(f"{path}: not written: {e}")
        outcome.refused += 1
        return
    out(f"{path}: written ({changed} server{'s' if changed != 1 else ''})" + (f"; the previous file is {saved}" if saved else ""))


def default_guardian() -> Optional[str]:
    """The Python package's guardian (None when this file runs outside the package)."""
    if __package__:
        try:
            from ._binary import binary  # the package's own search (its environment's bin/)

            return binary()
        except (ImportError, FileNotFoundError):
            return None
    return None


def main(argv: Optional[Sequence[str]] = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(
        prog="treeguardian-mcp",
        description="Put guardian in front of every stdio MCP server in your editor's or agent's config, take it away, or check.",
    )
    ap.add_argument("--guardian", help="the guardian binary to write, by absolute path (default: the one this package ships)")
    sub = ap.add_subparsers(dest="action", required=True)
    for name, what in (
        ("wrap", "wrap every stdio server (known config files when none are named)"),
        ("unwrap", "undo wrap exactly"),
        ("check", "list every stdio server, wrapped or not; exit 1 if one is not wrapped or its guardian is missing"),
    ):
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument("files", nargs="*", metavar="FILE")
        p.add_argument("--host", choices=[h["id"] for h in HOSTS["hosts"]], help="the host whose rules apply (default: from the file's name)")
        if name != "check":
            p.add_argument("--dry-run", action="store_true", help="show the change as a unified diff; write nothing")
            p.add_argument("--no-backup", action="store_true", help="do not keep FILE.treeguardian.bak")
        if name == "wrap":
            p.add_argument("--grace", help="guardian's --grace for every server (default: the host's, from spec/mcp-hosts.json)")
    a = ap.parse_args(argv)
    # spec/driver.json's binary variable overrides the package's own guardian, as in every driver.
    guardian = a.guardian or os.environ.get(HOSTS["binary_variable"]) or default_guardian()
    if a.action == "wrap":
        if not guardian:
            out("treeguardian-mcp: no guardian binary found: reinstall treeguardian for this platform, or pass --guardian /abs/path/guardian")
            return 2
        if not os.path.isabs(guardian) or not resolves(guardian):
            out(f"treeguardian-mcp: --guardian {guardian!r} is not an absolute path to an executable file")
            return 2
    grace = getattr(a, "grace", None)
    if grace is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)?", grace):
        out(f"treeguardian-mcp: --grace {grace!r} is not a duration guardian takes (e.g. 500ms, 1s, 1.5s, 2m; a bare number is seconds)")
        return 2
    cwd = os.getcwd()
    if a.files:
        targets: List[Tuple[str, Dict[str, Any]]] = []
        for f in a.files:
            host = host_by_id(a.host) if a.host else host_for(f)
            if host is None:
                out(f"treeguardian-mcp: {f}: which host's file is it? name it with --host ({', '.join(h['id'] for h in HOSTS['hosts'])})")
                return 2
            targets.append((f, host))
    else:
        targets = [(p, h) for p, h in known_files(cwd) if not a.host or h["id"] == a.host]
        if not targets:
            out("treeguardian-mcp: no known MCP config file here or in your home directory; name one: treeguardian-mcp " + a.action + " FILE")
            return 0 if a.action == "check" else 2
    outcome = Outcome()
    for path, host in targets:
        process(
            a.action, path, host, guardian, getattr(a, "grace", None), getattr(a, "dry_run", False),
            not getattr(a, "no_backup", False), out, outcome,
        )
    if outcome.refused:
        return 2
    if a.action == "check" and (outcome.unwrapped or outcome.unresolved):
        out(
            f"treeguardian-mcp: {outcome.unwrapped} server(s) not wrapped, {outcome.unresolved} with a missing guardian: "
            "run treeguardian-mcp wrap"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
