#!/usr/bin/env python3
"""Fails when a package manifest disagrees with packaging/names.json (issue 22.9).

Every manifest the record names must exist and carry that name; npm's optionalDependencies
must name the platform packages; the Python import package must exist under its recorded name.
Exit 0 with one line per manifest checked, else exit 1 naming each disagreement."""
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

for line in ok:
    print("check-names: ok", line.split(":")[0])
for line in bad:
    print("check-names:", line, file=sys.stderr)
sys.exit(1 if bad else 0)
