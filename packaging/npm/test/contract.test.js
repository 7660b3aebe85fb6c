// index.d.ts against the one event schema guardian documents: the event
// table of docs/contract.md. Every event there must have an interface with
// `event: '<name>'`, every field listed must be declared on it, and where the
// declaration is a union of string literals, every value the table names in
// backticks must be one of them. Skipped outside the guardian repository.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const contractPath = fileURLToPath(new URL('../../../docs/contract.md', import.meta.url));
const dtsPath = fileURLToPath(new URL('../index.d.ts', import.meta.url));
const skip = existsSync(contractPath) ? false : 'docs/contract.md is not here (not a guardian checkout)';

/** [{event, fields: [{name, values: [..]}]}] from the `## Events` table. */
function contractEvents(md) {
  const section = md.slice(md.indexOf('## Events'));
  const rows = section.split('\n').filter((l) => /^\| `[a-z-]+` \|/.test(l));
  return rows.map((row) => {
    const [, name, rest] = row.match(/^\| `([a-z-]+)` \| (.*) \|\s*$/);
    const fields = [];
    let depth = 0;
    let piece = '';
    const pieces = [];
    for (const ch of rest) {
      if (ch === '(') depth++;
      if (ch === ')') depth--;
      if (ch === ',' && depth === 0) {
        pieces.push(piece);
        piece = '';
      } else piece += ch;
    }
    pieces.push(piece);
    for (const p of pieces) {
      const m = p.trim().match(/^`([a-z_]+)`(.*)$/s);
      if (!m) continue;
      const paren = m[2].match(/\((.*)\)/s);
      const values = paren ? [...paren[1].matchAll(/`([^`]+)`/g)].map((x) => x[1]) : [];
      fields.push({ name: m[1], values });
    }
    return { event: name, fields };
  });
}

/** The body of the interface declaring `event: 'name'`, or null. */
function interfaceFor(dts, name) {
  const re = /export interface (\w+)[^{]*\{([\s\S]*?)\n\}/g;
  for (const m of dts.matchAll(re)) {
    if (m[2].includes(`event: '${name}';`)) return m[2];
  }
  return null;
}

test('index.d.ts declares every event and field of docs/contract.md', { skip }, () => {
  const events = contractEvents(readFileSync(contractPath, 'utf8'));
  const dts = readFileSync(dtsPath, 'utf8');
  assert.ok(events.length >= 7, `parsed only ${events.length} events from the table`);
  const problems = [];
  for (const { event, fields } of events) {
    const body = interfaceFor(dts, event);
    if (body === null) {
      problems.push(`no interface with event: '${event}'`);
      continue;
    }
    const union = `| ${readFileSync(dtsPath, 'utf8').match(/export type KnownEvent =([\s\S]*?);/)[1]}`;
    const iface = dts.match(new RegExp(`export interface (\\w+)[^{]*\\{[^}]*event: '${event}';`))[1];
    if (!new RegExp(`\\|\\s*${iface}\\b`).test(union)) problems.push(`${iface} is not in KnownEvent`);
    for (const { name, values } of fields) {
      const decl = body.match(new RegExp(`\\n\\s*${name}\\??: ([^;]*);`));
      if (!decl) {
        problems.push(`${event}.${name} is not declared`);
        continue;
      }
      const literals = [...decl[1].matchAll(/'([^']+)'/g)].map((x) => x[1]);
      if (literals.length === 0 || /\bstring\b/.test(decl[1])) continue;
      for (const v of values) {
        if (!literals.includes(v)) problems.push(`${event}.${name}: '${v}' is missing from ${decl[1]}`);
      }
    }
  }
  assert.deepEqual(problems, []);
});

test('index.d.ts declares every event and field of spec/events.json (through the generated lib/spec.js)', async () => {
  const { EVENTS } = await import('../lib/spec.js');
  const dts = readFileSync(dtsPath, 'utf8');
  const problems = [];
  for (const [name, { fields }] of Object.entries(EVENTS)) {
    const body = interfaceFor(dts, name);
    if (body === null) {
      problems.push(`no interface with event: '${name}'`);
      continue;
    }
    for (const f of fields) {
      const decl = body.match(new RegExp(`\\n\\s*${f.name}(\\??): ([^;]*);`));
      if (!decl) problems.push(`${name}.${f.name} is not declared`);
      else if (f.presence === 'nullable' && !/\bnull\b/.test(decl[2])) problems.push(`${name}.${f.name} is nullable in the spec`);
      else if (f.presence === 'optional' && decl[1] !== '?') problems.push(`${name}.${f.name} is optional in the spec`);
    }
  }
  assert.deepEqual(problems, []);
});
