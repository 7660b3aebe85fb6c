"""Builds treeguardian's wheels and sdist (the ruff/uv convention: a platform wheel carries
the static guardian binary as a script, so pip puts ``guardian`` on the environment's PATH).

It is also the sdist's PEP 517 backend: a source build has no Rust toolchain to rely on and no
platform to promise, so ``build_wheel`` from the sdist fails with one clear message instead of
building something that pretends (pip only gets there when no wheel fits the platform).

    python3 build_backend/treeguardian_build.py wheel --binary PATH --arch x86_64 --out DIR
    python3 build_backend/treeguardian_build.py sdist --out DIR

Wheels are tagged for both glibc and musl distributions (the binary is static: it needs
neither): ``py3-none-manylinux_2_17_<arch>.manylinux2014_<arch>.musllinux_1_1_<arch>``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import platform
import struct
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

try:
    import tomllib
except ImportError:  # Python < 3.11: the backend only needs the version
    tomllib = None  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent.parent  # packaging/python (or the unpacked sdist)
NAME = "treeguardian"
#: arch -> (ELF e_machine, the wheel's platform tags)
ARCHES: Dict[str, Tuple[int, List[str]]] = {
    "x86_64": (62, ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "musllinux_1_1_x86_64"]),
    "aarch64": (183, ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "musllinux_1_1_aarch64"]),
}
EPOCH = (1980, 1, 1, 0, 0, 0)
#: pyproject.toml's [project.scripts], for pip to make the console scripts from.
ENTRY_POINTS = "[console_scripts]\ntreeguardian-mcp = treeguardian.mcp:main\n"


def version() -> str:
    text = (HERE / "pyproject.toml").read_text()
    if tomllib is not None:
        return str(tomllib.loads(text)["project"]["version"])
    for line in text.splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    raise RuntimeError("no version in pyproject.toml")


def metadata() -> str:
    readme = (HERE / "README.md").read_text()
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version()}\n"
        "Summary: Run a command; when it exits, stop and reap every process it left behind (guardian, with drivers for subprocess, asyncio, anyio and the MCP SDK)\n"
        "License: MIT OR Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Typing :: Typed\n"
        "Provides-Extra: mcp\n"
        "Requires-Dist: mcp>=1.30; extra == \"mcp\"\n"
        "Provides-Extra: anyio\n"
        "Requires-Dist: anyio>=4.1; extra == \"anyio\"\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )


def check_elf(binary: Path, arch: str) -> None:
    """The binary is an ELF executable for ``arch`` with no interpreter (static)."""
    data = binary.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SystemExit(f"{binary}: not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != ARCHES[arch][0]:
        raise SystemExit(f"{binary}: ELF machine {machine}, not {arch} ({ARCHES[arch][0]})")
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        ptype, = struct.unpack_from("<I", data, phoff + i * phentsize)
        if ptype == 3:  # PT_INTERP
            raise SystemExit(f"{binary}: dynamically linked (has an interpreter); build the static musl binary")


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _package_files() -> List[Tuple[str, bytes, int]]:
    out = []
    for p in sorted((HERE / NAME).iterdir()):
        if p.suffix in (".py", ".typed") or p.name == "py.typed":
            out.append((f"{NAME}/{p.name}", p.read_bytes(), 0o644))
    return out


def write_wheel(binary: Path, arch: str, out: Path) -> Path:
    check_elf(binary, arch)
    v = version()
    tags = ARCHES[arch][1]
    wheel_name = f"{NAME}-{v}-py3-none-{'.'.join(tags)}.whl"
    dist_info = f"{NAME}-{v}.dist-info"
    files = _package_files()
    files.append((f"{NAME}-{v}.data/scripts/guardian", binary.read_bytes(), 0o755))
    wheel_meta = "Wheel-Version: 1.0\nGenerator: treeguardian_build\nRoot-Is-Purelib: false\n" + "".join(
        f"Tag: py3-none-{t}\n" for t in tags
    )
    files.append((f"{dist_info}/METADATA", metadata().encode(), 0o644))
    files.append((f"{dist_info}/entry_points.txt", ENTRY_POINTS.encode(), 0o644))
    files.append((f"{dist_info}/WHEEL", wheel_meta.encode(), 0o644))
    for lic in ("LICENSE",):
        src = HERE / lic if (HERE / lic).exists() else HERE.parent.parent / lic
        if src.exists():
            files.append((f"{dist_info}/licenses/{lic}", src.read_bytes(), 0o644))
    record = "".join(f"{name},{_digest(data)},{len(data)}\n" for name, data, _ in files) + f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode(), 0o644))
    out.mkdir(parents=True, exist_ok=True)
    path = out / wheel_name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, EPOCH)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return path


def write_sdist(out: Path) -> Path:
    v = version()
    base = f"{NAME}-{v}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{base}.tar.gz"
    pkg_info = metadata().encode()
    members: List[Tuple[str, bytes, int]] = [("PKG-INFO", pkg_info, 0o644)]
    for rel in ("pyproject.toml", "README.md", "build_backend/treeguardian_build.py"):
        members.append((rel, (HERE / rel).read_bytes(), 0o644))
    members += _package_files()
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in members:
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mode, info.mtime = len(data), mode, 315532800
            t.addfile(info, io.BytesIO(data))
    return path


NO_WHEEL = (
    "treeguardian: no wheel fits this platform ({plat}), so pip tried to build the source "
    "distribution, which cannot work: treeguardian ships guardian, a static Linux binary, as "
    "wheels for Linux x86_64 and aarch64 (any glibc or musl distribution, Python 3.9+). "
    "On such a machine, upgrade pip (wheels with musllinux/manylinux_2_17 tags need pip >= 20.3) "
    "and retry; elsewhere guardian does not run. To package a binary you built yourself "
    "(make release), set TREEGUARDIAN_BINARY to it and build again."
)


# ---- PEP 517 ----

def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    return write_sdist(Path(sdist_directory)).name


def build_wheel(
    wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None
) -> str:
    machine = platform.machine()
    given = os.environ.get("TREEGUARDIAN_BINARY")
    if sys.platform.startswith("linux") and machine in ARCHES and given:
        return write_wheel(Path(given), machine, Path(wheel_directory)).name
    message = NO_WHEEL.format(plat=f"{sys.platform} {machine}")
    print(message, file=sys.stderr)
    raise RuntimeError(message)


def main(argv: List[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="build treeguardian's wheels and sdist")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wheel")
    w.add_argument("--binary", required=True, type=Path)
    w.add_argument("--arch", required=True, choices=sorted(ARCHES))
    w.add_argument("--out", required=True, type=Path)
    s = sub.add_parser("sdist")
    s.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    path = write_wheel(a.binary, a.arch, a.out) if a.cmd == "wheel" else write_sdist(a.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
