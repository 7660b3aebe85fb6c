// The driver's option table (OPTIONS in index.js) against guardian's own:
// spec/options.json, generated from crates/spec/src/options.rs. Every option the
// driver passes must exist with the same kind (and words, and maximum); every
// option guardian has must be passed or listed in NOT_PASSED with a reason; and
// guardianArgs must use the table. Skipped outside the guardian repository.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { OPTIONS, NOT_PASSED, guardianArgs } from '../index.js';
import { generate } from '../scripts/gen-spec.mjs';

const specPath = fileURLToPath(new URL('../../../spec/options.json', import.meta.url));
const skip = existsSync(specPath) ? false : 'spec/options.json is not here (not a guardian checkout)';

function guardianOptions() {
  const spec = JSON.parse(readFileSync(specPath, 'utf8'));
  return spec.options.filter((o) => o.commands.includes('guardian'));
}

test('every option the driver passes is guardian option of the same kind', { skip }, () => {
  const theirs = new Map(guardianOptions().map((o) => [o.long, o]));
  for (const o of OPTIONS) {
    const g = theirs.get(o.long);
    assert.ok(g, `--${o.long} (${o.key}) is not an option of guardian (spec/options.json)`);
    assert.equal(o.kind, g.kind, `--${o.long}: the driver passes a ${o.kind}, guardian takes a ${g.kind}`);
    if (g.kind === 'choice') assert.deepEqual(o.extra, g.choices, `--${o.long}: words`);
    if (g.kind === 'count') assert.equal(o.extra, g.max, `--${o.long}: maximum`);
  }
});

test('every option of guardian is passed or listed as not passed', { skip }, () => {
  const passed = new Set(OPTIONS.map((o) => o.long));
  for (const g of guardianOptions()) {
    assert.ok(passed.has(g.long) !== (g.long in NOT_PASSED),
      `--${g.long}: add it to OPTIONS in index.js, or to NOT_PASSED with the reason (exactly one of them)`);
  }
  const known = new Set(guardianOptions().map((o) => o.long));
  // kill-signal: the kill request, which guardian 0.2.0 adds (the driver sets it by environment)
  for (const long of Object.keys(NOT_PASSED)) {
    assert.ok(known.has(long) || long === 'kill-signal', `NOT_PASSED names --${long}, which guardian lacks`);
  }
});

test('guardianArgs passes each option of the table', () => {
  const sample = { duration: '2s', signal: 'INT', path: '/x', flag: true, count: 2, size: '512M', limit: 64, cpus: 0.5 };
  for (const o of OPTIONS) {
    const value = o.kind === 'choice' ? o.extra[o.extra.length - 1] : sample[o.kind];
    assert.ok(value !== undefined, `no sample value for kind ${o.kind}`);
    const argv = guardianArgs({ [o.key]: value });
    assert.ok(argv.includes(`--${o.long}`), `${o.key}: ${JSON.stringify(argv)}`);
  }
});

test('lib/spec.js and lib/spec.d.ts are what scripts/gen-spec.mjs makes of spec/ (not stale)', { skip }, () => {
  for (const [rel, text] of Object.entries(generate())) {
    const file = fileURLToPath(new URL(`../${rel}`, import.meta.url));
    assert.equal(readFileSync(file, 'utf8'), text, `${rel} is stale: run node packaging/npm/scripts/gen-spec.mjs`);
  }
});

test("durations: guardian's own messages are the ones the driver gives (spec/driver.json)", { skip: skip || (process.env.GUARDIAN_BIN ? false : 'no GUARDIAN_BIN') }, async () => {
  const { spawnSync } = await import('node:child_process');
  for (const bad of ['abc', '18446744074']) {
    const r = spawnSync(process.env.GUARDIAN_BIN, ['--grace', bad, '--', 'true'], { encoding: 'utf8' });
    let ours = '';
    try { guardianArgs({ grace: bad }); } catch (e) { ours = e.message.replace(/^grace: /, ''); }
    assert.ok(ours !== '' && r.stderr.includes(ours), `guardian said ${JSON.stringify(r.stderr)}, the driver ${JSON.stringify(ours)}`);
  }
});
