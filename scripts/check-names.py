#!/usr/bin/env python3
"""Fails when a package manifest disagrees with packaging/names.json (issue 22.9), with the one
version, or lacks the metadata a registry shows (issue 31.2).

Every manifest the record names must exist and carry that name; npm's optionalDependencies
must name the platform packages; the Python import package must exist under its recorded name.
Every package carries the version of the top-level Cargo.toml (the crates, their dependencies on
each other, the npm packages and optionalDependencies, pyproject.toml and __version__), which is
at least spec/driver.json's min_guardian_version. Each manifest has its license, repository,
description and keywords; crates their rust-version, npm its engines, Python requires-python and
classifiers. Exit 0 with one line per manifest checked, else exit 1 naming each disagreement."""
import json, os, re, sys, tomllib

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
names = json.load(open(os.path.join(root, "packaging/names.json")))
bad, ok = [], []

def check(path, got, want):
    (ok if got == want else bad).append(f"{path}: name {got!r}, packaging/names.json says {want!r}")

for path, want in names["cargo"].items():
    full = os.path.join(root, path)
    if not os.path.exists(full):
        bad.append(f"{path}: missing (packaging/names.json names it)"); continue
    check(path, tomllib.load(open(full, "rb")).get("package", {}).get("name"), want)
    bins = tomllib.load(open(full, "rb")).get("bin", [])
    if path == "Cargo.toml" and not any(b.get("name") == names["binary"] for b in bins):
        bad.append(f"{path}: no [[bin]] named {names['binary']!r}")

for path, want in names["npm"].items():
    full = os.path.join(root, path)
    if not os.path.exists(full):
        bad.append(f"{path}: missing (packaging/names.json names it)"); continue
    check(path, json.load(open(full)).get("name"), want)
driver = json.load(open(os.path.join(root, "packaging/npm/package.json")))
platforms = sorted(v for k, v in names["npm"].items() if "/platforms/" in k)
if sorted(driver.get("optionalDependencies", {})) != platforms:
    bad.append(f"packaging/npm/package.json: optionalDependencies {sorted(driver.get('optionalDependencies', {}))}, want {platforms}")

for path, want in names.get("deb", {}).items():
    meta = tomllib.load(open(os.path.join(root, path), "rb")).get("package", {}).get("metadata", {})
    check(f"{path} [package.metadata.deb]", meta.get("deb", {}).get("name"), want)

py = names["python"]
for path, want in py.items():
    if path == "import":
        continue
    full = os.path.join(root, path)
    if not os.path.exists(full):
        bad.append(f"{path}: missing (packaging/names.json names it)"); continue
    check(path, tomllib.load(open(full, "rb")).get("project", {}).get("name"), want)
    pkgdir = os.path.dirname(full)
    if not any(os.path.isfile(os.path.join(d, py["import"], "__init__.py"))
               for d in (pkgdir, os.path.join(pkgdir, "python"), os.path.join(pkgdir, "src"))):
        bad.append(f"{path}: no import package {py['import']!r} beside it (python/, src/ or the same folder)")

# ---- one version (issue 31.2) ----
def toml(path):
    return tomllib.load(open(os.path.join(root, path), "rb"))

version = toml("Cargo.toml")["package"]["version"]

def same(path, what, got):
    (ok if got == version else bad).append(
        f"{path}: {what} {got!r}, the one version (Cargo.toml) is {version!r}; change every package together")

def need(path, what, value):
    if not value:
        bad.append(f"{path}: no {what} (registries show it; add it)")

for path in names["cargo"]:
    m = toml(path)
    pkg = m["package"]
    same(path, "version", pkg.get("version"))
    for dep, spec in {**m.get("dependencies", {}), **m.get("build-dependencies", {})}.items():
        if dep in names["cargo"].values() and isinstance(spec, dict) and "path" in spec:
            same(path, f"dependency {dep} version", spec.get("version", "").lstrip("=^"))
    for key in ("description", "license", "repository", "rust-version", "keywords"):
        need(path, key, pkg.get(key))
for path in names["npm"]:
    m = json.load(open(os.path.join(root, path)))
    same(path, "version", m.get("version"))
    for key in ("description", "license", "repository"):
        need(path, key, m.get(key))
for dep, v in driver.get("optionalDependencies", {}).items():
    same("packaging/npm/package.json", f"optionalDependencies {dep}", v)
need("packaging/npm/package.json", "keywords", driver.get("keywords"))
need("packaging/npm/package.json", "engines.node", driver.get("engines", {}).get("node"))
for path in (p for p in py if p != "import"):
    proj = toml(path)["project"]
    same(path, "version", proj.get("version"))
    for key in ("description", "license", "keywords", "classifiers", "requires-python"):
        need(path, key, proj.get(key))
    need(path, "urls.Repository", proj.get("urls", {}).get("Repository"))
    init = os.path.join(os.path.dirname(os.path.join(root, path)), py["import"], "__init__.py")
    m = re.search(r'^__version__ = "([^"]*)"', open(init).read(), re.M)
    same(os.path.relpath(init, root), "__version__", m and m.group(1))
    # The driver's own version, which its version-check messages name.
    versions = os.path.join(os.path.dirname(init), "_versions.py")
    m = re.search(r'^DRIVER_VERSION = "([^"]*)"', open(versions).read(), re.M)
    same(os.path.relpath(versions, root), "DRIVER_VERSION", m and m.group(1))
want_min = json.load(open(os.path.join(root, "spec/driver.json"))).get("min_guardian_version", "")
if tuple(map(int, want_min.split("."))) > tuple(map(int, version.split("."))):
    bad.append(f"spec/driver.json: min_guardian_version {want_min} is above the version {version}")

for line in ok:
    print("check-names: ok", line.split(":")[0], line.split(":", 1)[1].split(",")[0].strip())
for line in bad:
    print("check-names:", line, file=sys.stderr)
sys.exit(1 if bad else 0)
