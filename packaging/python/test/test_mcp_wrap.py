"""treeguardian-mcp (wrap / unwrap / check) against the golden files in packaging/mcp/golden,
the same bytes the npm package's test (test/mcp-wrap.test.js) holds its copy of the tool to.

Every run goes through ``python -m treeguardian.mcp`` (the entry point users run), on copies in
a temporary directory. The guardian written is this test's (GUARDIAN_BIN, else the package's);
the golden files say ``@GUARDIAN@`` in its place. TREEGUARDIAN_GOLDEN_REGEN=1 rewrites the
golden outputs from the tool (review the diff before committing them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import treeguardian

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "packaging/mcp/golden"
CASES: Dict[str, Any] = json.loads((GOLDEN / "cases.json").read_text())
REGEN = os.environ.get("TREEGUARDIAN_GOLDEN_REGEN") == "1"


def guardian() -> str:
    return os.environ.get("GUARDIAN_BIN") or treeguardian.binary()


def tool(*args: str, cwd: Path | None = None, env: Dict[str, str] | None = None) -> Tuple[int, str]:
    p = subprocess.run(
        [sys.executable, "-m", "treeguardian.mcp", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=60,
    )
    return p.returncode, p.stdout + p.stderr


def wrapped_name(name: str) -> str:
    stem, ext = name.rsplit(".", 1)
    return f"{stem}.wrapped.{ext}"


def golden_wrapped(name: str) -> bytes:
    return (GOLDEN / wrapped_name(name)).read_bytes().replace(b"@GUARDIAN@", json.dumps(guardian()).strip('"').encode())


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["file"] for c in CASES["cases"]])
def test_golden_wrap_rewrap_unwrap(case: Dict[str, Any], tmp_path: Path) -> None:
    src = GOLDEN / case["file"]
    f = tmp_path / case["file"]
    shutil.copyfile(src, f)
    os.chmod(f, 0o640)
    rc, out = tool("--guardian", guardian(), "wrap", "--host", case["host"], str(f))
    assert rc == 0, out
    assert out.count(": wrapped: ") == case["wrapped"], out
    assert out.count("left alone") == case["left"], out
    if REGEN:
        (GOLDEN / wrapped_name(case["file"])).write_bytes(f.read_bytes().replace(json.dumps(guardian()).strip('"').encode(), b"@GUARDIAN@"))
    assert f.read_bytes() == golden_wrapped(case["file"])
    # the backup is the file as it was, with its mode; the file keeps its mode
    backup = Path(str(f) + ".treeguardian.bak")
    assert backup.read_bytes() == src.read_bytes()
    assert os.stat(f).st_mode & 0o777 == 0o640 and os.stat(backup).st_mode & 0o777 == 0o640
    # wrap again: nothing changes, every server says so
    before = f.read_bytes()
    rc, out = tool("--guardian", guardian(), "wrap", "--host", case["host"], str(f))
    assert rc == 0 and f.read_bytes() == before, out
    assert out.count("already wrapped") == case["wrapped"], out
    # check passes on the wrapped file
    rc, out = tool("check", "--host", case["host"], str(f))
    assert rc == 0, out
    assert out.count(": wrapped; guardian ") == case["wrapped"], out
    # unwrap: the original, byte for byte
    rc, out = tool("unwrap", "--host", case["host"], "--no-backup", str(f))
    assert rc == 0, out
    assert out.count(": unwrapped") == case["wrapped"], out
    assert f.read_bytes() == src.read_bytes()
    # check fails on the unwrapped file, naming each server
    rc, out = tool("check", "--host", case["host"], str(f))
    assert rc == 1 and out.count("NOT WRAPPED") == case["wrapped"], out


@pytest.mark.parametrize("case", CASES["broken"], ids=[c["file"] for c in CASES["broken"]])
def test_broken_file_is_refused_and_untouched(case: Dict[str, Any], tmp_path: Path) -> None:
    f = tmp_path / case["file"]
    shutil.copyfile(GOLDEN / case["file"], f)
    for action in ("wrap", "unwrap", "check"):
        rc, out = tool("--guardian", guardian(), action, "--host", case["host"], str(f))
        assert rc == 2, out
        assert "refused, left as it was" in out and "line " in out, out
        assert f.read_bytes() == (GOLDEN / case["file"]).read_bytes()
    assert sorted(os.listdir(tmp_path)) == [case["file"]], "no backup or temporary file left"


def test_dry_run_shows_a_diff_and_writes_nothing(tmp_path: Path) -> None:
    f = tmp_path / "claude_desktop_config.json"
    shutil.copyfile(GOLDEN / "claude-desktop.json", f)
    rc, out = tool("--guardian", guardian(), "wrap", "--dry-run", str(f))
    assert rc == 0, out
    assert f"--- {f}" in out and '-      "command": "npx",' in out and f'+      "command": {json.dumps(guardian())},' in out, out
    assert f.read_bytes() == (GOLDEN / "claude-desktop.json").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["claude_desktop_config.json"]


def test_finds_the_known_files_when_none_are_named(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    files = {
        home / ".config/Claude/claude_desktop_config.json": "claude-desktop.json",
        home / ".claude.json": "claude-code-user.json",
        home / ".codex/config.toml": "codex.toml",
        home / ".config/zed/settings.json": "zed.jsonc",
        project / ".vscode/mcp.json": "vscode.jsonc",
        project / ".mcp.json": "claude-code.json",
        project / ".gemini/settings.json": "gemini.jsonc",
    }
    for path, name in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GOLDEN / name, path)
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "CODEX_HOME")}
    env["HOME"] = str(home)
    rc, out = tool("--guardian", guardian(), "wrap", cwd=project, env=env)
    assert rc == 0, out
    for path, name in files.items():
        assert path.read_bytes() == golden_wrapped(name), (path, out)
    rc, out = tool("check", cwd=project, env=env)
    assert rc == 0, out
    rc, out = tool("unwrap", cwd=project, env=env)
    assert rc == 0, out
    for path, name in files.items():
        assert path.read_bytes() == (GOLDEN / name).read_bytes(), path


def test_symlinked_config_is_written_through_the_link(tmp_path: Path) -> None:
    (tmp_path / "dotfiles").mkdir()
    real = tmp_path / "dotfiles/mcp.json"
    shutil.copyfile(GOLDEN / "cursor.json", real)
    (tmp_path / ".cursor").mkdir()
    link = tmp_path / ".cursor/mcp.json"
    link.symlink_to(real)
    rc, out = tool("--guardian", guardian(), "wrap", str(link))
    assert rc == 0, out
    assert link.is_symlink() and real.read_bytes() == golden_wrapped("cursor.json")


def test_a_server_wrapped_by_another_guardian_is_left_and_checked(tmp_path: Path) -> None:
    f = tmp_path / ".mcp.json"
    f.write_text('{"mcpServers": {"a": {"command": "/gone/bin/guardian", "args": ["--", "true"]}}}\n')
    before = f.read_bytes()
    rc, out = tool("--guardian", guardian(), "wrap", str(f))
    assert rc == 0 and "already wrapped" in out and f.read_bytes() == before, out
    rc, out = tool("check", str(f))
    assert rc == 1 and "NOT FOUND" in out, out


def test_bad_usage_is_one_clear_line(tmp_path: Path) -> None:
    f = tmp_path / "unknown.json"
    f.write_text("{}")
    rc, out = tool("--guardian", guardian(), "wrap", str(f))
    assert rc == 2 and "--host" in out, out
    rc, out = tool("--guardian", "relative/guardian", "wrap", "--host", "cursor", str(f))
    assert rc == 2 and "absolute path" in out, out
    rc, out = tool("--guardian", guardian(), "wrap", "--grace", "abc", "--host", "cursor", str(f))
    assert rc == 2 and "not a duration" in out and f.read_text() == "{}", out


def test_grace_option_overrides_the_hosts(tmp_path: Path) -> None:
    f = tmp_path / ".mcp.json"
    shutil.copyfile(GOLDEN / "claude-code.json", f)
    rc, out = tool("--guardian", guardian(), "wrap", "--grace", "300ms", str(f))
    assert rc == 0, out
    text = f.read_text()
    assert '"args": ["--grace", "300ms", "--", "uvx"' in text and '"args": ["--grace=300ms", "--", "mcp-server-memory"]' in text, text
    rc, out = tool("unwrap", str(f))
    assert rc == 0 and f.read_bytes() == (GOLDEN / "claude-code.json").read_bytes(), out


def test_the_generated_parts_are_fresh() -> None:
    sync = ROOT / "packaging/mcp/sync.py"
    if not sync.exists():
        pytest.skip("not in a source tree")
    p = subprocess.run([sys.executable, str(sync), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


README_PATH = "/home/you/.local/bin/guardian"
SNIPPET = re.compile(r"<!-- treeguardian-mcp wrap --host (\S+) -->\n```\w*\n(.*?)```\n", re.S)


def test_readme_snippets_are_what_wrap_writes(tmp_path: Path) -> None:
    """Each snippet of the README's "In your editor or agent" is the tool's output: unwrapped,
    then wrapped again, it comes back byte for byte (with this test's guardian for the path)."""
    readme = ROOT / "README.md"
    if not readme.exists():
        pytest.skip("not in a source tree")
    snippets = SNIPPET.findall(readme.read_text())
    hosts = {h for h, _ in snippets}
    assert hosts >= {"claude-desktop", "claude-code", "claude-code-user", "cursor", "vscode", "windsurf", "zed", "codex", "gemini"}, hosts
    for i, (host, text) in enumerate(snippets):
        wrapped = text.replace(README_PATH, guardian())
        f = tmp_path / f"snippet{i}"
        f.write_text(wrapped)
        rc, out = tool("unwrap", "--host", host, "--no-backup", str(f))
        assert rc == 0 and ": unwrapped" in out, (host, out)
        assert "/guardian" not in f.read_text(), (host, f.read_text())
        rc, out = tool("--guardian", guardian(), "wrap", "--host", host, "--no-backup", str(f))
        assert rc == 0, (host, out)
        assert f.read_text() == wrapped, f"README snippet for {host} is not what wrap writes:\n{f.read_text()}"


def test_the_console_script_is_installed_with_the_wheel(tmp_path: Path) -> None:
    """pip makes ``treeguardian-mcp`` from the wheel's entry_points.txt, next to the interpreter
    (run.sh installs the wheel into each venv; from a source checkout there is no script)."""
    script = Path(sys.executable).parent / "treeguardian-mcp"
    if not script.exists():
        pytest.skip(f"no {script}: treeguardian is not installed from a wheel in this environment")
    f = tmp_path / ".mcp.json"
    shutil.copyfile(GOLDEN / "claude-code.json", f)
    p = subprocess.run([str(script), "--guardian", guardian(), "wrap", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f.read_bytes() == golden_wrapped("claude-code.json")
    # With no --guardian and no variable: the guardian the wheel installed, by absolute path.
    shutil.copyfile(GOLDEN / "claude-code.json", f)
    env = {k: v for k, v in os.environ.items() if k not in ("GUARDIAN_BIN", "TREEGUARDIAN_BINARY")}
    p = subprocess.run([str(script), "wrap", str(f)], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    shipped = str(Path(sys.executable).parent / "guardian")
    assert f.read_text() == (GOLDEN / "claude-code.wrapped.json").read_text().replace("@GUARDIAN@", shipped)


def test_owner_and_mode_are_kept(tmp_path: Path) -> None:
    """Run as root on a user's file (sudo, a provisioning script): the file and its backup stay
    the user's, with the file's mode."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    f = tmp_path / ".mcp.json"
    shutil.copyfile(GOLDEN / "claude-code.json", f)
    os.chown(f, 65534, 65534)
    os.chmod(f, 0o600)
    rc, out = tool("--guardian", guardian(), "wrap", str(f))
    assert rc == 0, out
    for p in (f, Path(str(f) + ".treeguardian.bak")):
        st = os.stat(p)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o600), (p, st)
