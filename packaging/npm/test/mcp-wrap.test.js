// treeguardian-mcp (the npm bin, mcp-wrap.js running mcp-wrap.py) against the golden files
// in packaging/mcp/golden: the same bytes the Python package's test
// (packaging/python/test/test_mcp_wrap.py) holds the same tool to, run here through the bin
// npm installs. The guardian written is $GUARDIAN_BIN; the golden files say @GUARDIAN@.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { guardianBin, runtime } from '../support/helpers.js';

const npmdir = fileURLToPath(new URL('..', import.meta.url));
const golden = join(npmdir, '..', 'mcp', 'golden');
const bin = join(npmdir, 'mcp-wrap.js');
const inTree = existsSync(join(golden, 'cases.json'));
const cases = inTree ? JSON.parse(readFileSync(join(golden, 'cases.json'), 'utf8')) : { cases: [], broken: [] };
const T = { timeout: 120000, skip: !guardianBin ? 'GUARDIAN_BIN is not set' : !inTree ? 'not in a source tree (no golden files)' : false };

function tool(...args) {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 60000 });
  return { rc: r.status, out: `${r.stdout}${r.stderr}` };
}
const wrappedName = (name) => name.replace(/\.([a-z]+)$/, '.wrapped.$1');
const goldenWrapped = (name) => readFileSync(join(golden, wrappedName(name)), 'utf8')
  .replaceAll('@GUARDIAN@', JSON.stringify(guardianBin).slice(1, -1));
const count = (text, what) => text.split(what).length - 1;

function scratch() {
  return mkdtempSync(join(tmpdir(), 'treeguardian-mcp-'));
}

for (const c of cases.cases) {
  test(`[${runtime}] treeguardian-mcp golden ${c.file}: wrap, wrap again, check, unwrap byte for byte`, T, () => {
    const dir = scratch();
    try {
      const f = join(dir, c.file);
      copyFileSync(join(golden, c.file), f);
      chmodSync(f, 0o640);
      let r = tool('--guardian', guardianBin, 'wrap', '--host', c.host, f);
      assert.equal(r.rc, 0, r.out);
      assert.equal(count(r.out, ': wrapped: '), c.wrapped, r.out);
      assert.equal(count(r.out, 'left alone'), c.left, r.out);
      assert.equal(readFileSync(f, 'utf8'), goldenWrapped(c.file));
      assert.equal(readFileSync(`${f}.treeguardian.bak`, 'utf8'), readFileSync(join(golden, c.file), 'utf8'));
      assert.equal(statSync(f).mode & 0o777, 0o640);
      r = tool('--guardian', guardianBin, 'wrap', '--host', c.host, f);
      assert.equal(r.rc, 0, r.out);
      assert.equal(count(r.out, 'already wrapped'), c.wrapped, r.out);
      assert.equal(readFileSync(f, 'utf8'), goldenWrapped(c.file));
      r = tool('check', '--host', c.host, f);
      assert.equal(r.rc, 0, r.out);
      r = tool('unwrap', '--host', c.host, '--no-backup', f);
      assert.equal(r.rc, 0, r.out);
      assert.deepEqual(readFileSync(f), readFileSync(join(golden, c.file)));
      r = tool('check', '--host', c.host, f);
      assert.equal(r.rc, 1, r.out);
      assert.equal(count(r.out, 'NOT WRAPPED'), c.wrapped, r.out);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

for (const c of cases.broken) {
  test(`[${runtime}] treeguardian-mcp refuses the broken ${c.file} and leaves it byte-identical`, T, () => {
    const dir = scratch();
    try {
      const f = join(dir, c.file);
      copyFileSync(join(golden, c.file), f);
      for (const action of ['wrap', 'unwrap', 'check']) {
        const r = tool('--guardian', guardianBin, action, '--host', c.host, f);
        assert.equal(r.rc, 2, r.out);
        assert.match(r.out, /refused, left as it was: .*line \d+/);
        assert.deepEqual(readFileSync(f), readFileSync(join(golden, c.file)));
      }
      assert.deepEqual(readdirSync(dir), [c.file]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test(`[${runtime}] treeguardian-mcp --dry-run prints a unified diff and writes nothing`, T, () => {
  const dir = scratch();
  try {
    const f = join(dir, 'claude_desktop_config.json');
    copyFileSync(join(golden, 'claude-desktop.json'), f);
    const r = tool('--guardian', guardianBin, 'wrap', '--dry-run', f);
    assert.equal(r.rc, 0, r.out);
    assert.ok(r.out.includes(`--- ${f}`) && r.out.includes('-      "command": "npx",'), r.out);
    assert.ok(r.out.includes(`+      "command": ${JSON.stringify(guardianBin)},`), r.out);
    assert.deepEqual(readFileSync(f), readFileSync(join(golden, 'claude-desktop.json')));
    assert.deepEqual(readdirSync(dir), ['claude_desktop_config.json']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test(`[${runtime}] treeguardian-mcp without --guardian writes the guardian the package finds ($GUARDIAN_BIN)`, T, () => {
  const dir = scratch();
  try {
    const f = join(dir, '.mcp.json');
    copyFileSync(join(golden, 'claude-code.json'), f);
    const r = spawnSync(process.execPath, [bin, 'wrap', f], { encoding: 'utf8', env: { ...process.env, GUARDIAN_BIN: guardianBin } });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.equal(readFileSync(f, 'utf8'), goldenWrapped('claude-code.json'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test(`[${runtime}] treeguardian-mcp without python3 says what it needs (exit 127)`, T, () => {
  const r = spawnSync(process.execPath, [bin, 'check'], {
    encoding: 'utf8', env: { ...process.env, TREEGUARDIAN_PYTHON: '/nonexistent/python3' },
  });
  assert.equal(r.status, 127);
  assert.match(r.stderr, /needs Python 3\.9 or later.*uvx --from treeguardian treeguardian-mcp/);
});

test(`[${runtime}] the README's "In your editor or agent" snippets are what the bin writes`, T, () => {
  const readme = join(npmdir, '..', '..', 'README.md');
  const text = readFileSync(readme, 'utf8');
  const snippets = [...text.matchAll(/<!-- treeguardian-mcp wrap --host (\S+) -->\n```\w*\n([\s\S]*?)```\n/g)];
  assert.ok(snippets.length >= 9, `found ${snippets.length} snippets`);
  const dir = scratch();
  try {
    for (const [, host, body] of snippets) {
      const wrapped = body.replaceAll('/home/you/.local/bin/guardian', guardianBin);
      const f = join(dir, `${host}.snippet`);
      writeFileSync(f, wrapped);
      let r = tool('unwrap', '--host', host, '--no-backup', f);
      assert.equal(r.rc, 0, r.out);
      assert.ok(!readFileSync(f, 'utf8').includes(guardianBin), `${host}: unwrap left guardian in`);
      r = tool('--guardian', guardianBin, 'wrap', '--host', host, '--no-backup', f);
      assert.equal(r.rc, 0, r.out);
      assert.equal(readFileSync(f, 'utf8'), wrapped, `the README snippet for ${host} is not what wrap writes`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('mcp-wrap.py is the Python package\'s treeguardian/_mcp_wrap.py, byte for byte (packaging/mcp/sync.py)', T, () => {
  const python = join(npmdir, '..', 'python', 'treeguardian', '_mcp_wrap.py');
  assert.deepEqual(readFileSync(join(npmdir, 'mcp-wrap.py')), readFileSync(python), 'stale: run python3 packaging/mcp/sync.py');
});

test('package.json ships the bin and both of its files', () => {
  const pkg = JSON.parse(readFileSync(join(npmdir, 'package.json'), 'utf8'));
  assert.equal(pkg.bin['treeguardian-mcp'], './mcp-wrap.js');
  assert.ok(pkg.files.includes('mcp-wrap.js') && pkg.files.includes('mcp-wrap.py'));
  assert.ok(readFileSync(bin, 'utf8').startsWith('#!/usr/bin/env node\n'));
});
