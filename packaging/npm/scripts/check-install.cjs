#!/usr/bin/env node
//! The install check (npm's postinstall, as esbuild's install.js): installing treeguardian
//! without the platform package that holds this system's guardian binary fails at `npm install`,
//! naming the package to add, instead of at the first spawn. Passes when $GUARDIAN_BIN names an
//! executable guardian (the escape hatch for hosts that bring their own), and in treeguardian's
//! own source tree (its development install has no platform package).
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const PACKAGES = { x64: 'treeguardian-linux-x64', arm64: 'treeguardian-linux-arm64' };

function executable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function problem() {
  const bin = process.env.GUARDIAN_BIN;
  if (bin) return executable(bin) ? null : `GUARDIAN_BIN=${bin} is not an executable file`;
  if (!__dirname.split(path.sep).includes('node_modules')) return null; // the source tree
  const pkg = process.platform === 'linux' ? PACKAGES[process.arch] : undefined;
  if (!pkg) {
    return `no guardian binary is published for ${process.platform}-${process.arch} (linux-x64 and linux-arm64 are); `
      + 'build guardian and set GUARDIAN_BIN to it';
  }
  let manifest;
  try {
    manifest = require.resolve(`${pkg}/package.json`, { paths: [path.join(__dirname, '..')] });
  } catch {
    const { version } = require('../package.json');
    return `${pkg} is not installed (it holds the guardian binary; npm skips it with --omit=optional, `
      + `--no-optional or a lockfile made on another platform). Fix: npm install ${pkg}@${version}, `
      + 'or set GUARDIAN_BIN to a guardian binary';
  }
  const file = path.join(path.dirname(manifest), 'bin', 'guardian');
  return executable(file) ? null : `${pkg} is installed but ${file} is not an executable file; reinstall ${pkg}`;
}

const why = problem();
if (why !== null) {
  console.error(`treeguardian: ${why}`);
  process.exit(1);
}
