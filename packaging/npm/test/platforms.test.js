// The platform packages (esbuild/biome/swc convention): each declares its
// os/cpu, ships bin/guardian, has the driver's version, and is listed in the
// driver's optionalDependencies; a built binary is a static ELF executable
// for its machine (the arm64 one cannot run here: its header is checked).
// Binaries are built by `make npm-packages`; unbuilt ones are skipped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { checkStaticElf } from '../support/check-elf.mjs';
import { platformPackage } from '../index.js';

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const driver = JSON.parse(readFileSync(here('../package.json'), 'utf8'));
const PLATFORMS = [
  { dir: 'linux-x64', cpu: 'x64', machine: 'x86_64' },
  { dir: 'linux-arm64', cpu: 'arm64', machine: 'aarch64' },
];

for (const p of PLATFORMS) {
  test(`platform package ${p.dir}: manifest`, () => {
    const m = JSON.parse(readFileSync(here(`../platforms/${p.dir}/package.json`), 'utf8'));
    assert.equal(m.name, `treeguardian-${p.dir}`);
    assert.equal(m.name, platformPackage('linux', p.cpu));
    assert.equal(m.version, driver.version);
    assert.deepEqual(m.os, ['linux']);
    assert.deepEqual(m.cpu, [p.cpu]);
    assert.ok(m.files.includes('bin/guardian'));
    assert.equal(driver.optionalDependencies[m.name], driver.version);
  });

  const bin = here(`../platforms/${p.dir}/bin/guardian`);
  const skip = existsSync(bin) ? false : `${p.dir}/bin/guardian is not built (make npm-packages)`;
  test(`platform package ${p.dir}: bin/guardian is a static ${p.machine} ELF executable`, { skip }, () => {
    assert.match(checkStaticElf(bin, p.machine), /no interpreter/);
    assert.throws(() => checkStaticElf(bin, p.machine === 'x86_64' ? 'aarch64' : 'x86_64'), /ELF machine/);
  });
}
