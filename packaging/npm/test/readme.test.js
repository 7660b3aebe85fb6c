// The README's examples, extracted and run (issue 31.4): every ```js run block, and the MCP
// example (marked <!-- readme-test: mcp -->) with the npx server replaced by the local one in
// support/mcp-server.js. Each runs as its own program importing 'treeguardian' (the package's
// self-reference), against $GUARDIAN_BIN; its `sleep 30` carries a nonce, and nothing may be
// left running.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

import { skipNoGuardian, waitGone, within } from '../support/helpers.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const blocks = [...readme.matchAll(/(<!-- readme-test: (\w+) -->\n)?```js( run)?\n([\s\S]*?)```/g)]
  .filter((m) => m[2] || m[3])
  .map((m) => ({ kind: m[2] ?? 'run', code: m[4] }));

let sdk = true;
try {
  createRequire(import.meta.url).resolve('@modelcontextprotocol/sdk/package.json');
} catch {
  sdk = false;
}

const serverScript = fileURLToPath(new URL('../support/mcp-server.js', import.meta.url));

/** Runs `code` as a module inside the package (so 'treeguardian' resolves to it): {status, out}. */
function runSnippet(code, name) {
  const file = fileURLToPath(new URL(`../support/.readme-${name}-${process.pid}.mjs`, import.meta.url));
  writeFileSync(file, code);
  return new Promise((resolve) => {
    // the runtime running this test (node or bun) runs the example too
    const cp = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    cp.stdout.on('data', (d) => { out += d; });
    cp.stderr.on('data', (d) => { out += d; });
    cp.on('close', (status) => {
      rmSync(file, { force: true });
      resolve({ status, out });
    });
  });
}

test('the README has the examples this test runs', () => {
  assert.ok(blocks.filter((b) => b.kind === 'run').length >= 2, 'fewer than two ```js run blocks');
  assert.equal(blocks.filter((b) => b.kind === 'mcp').length, 1, 'no MCP example marked for the test');
  const mcp = blocks.find((b) => b.kind === 'mcp').code;
  assert.match(mcp, /new StdioClientTransport\(server\)/, 'the MCP example is not the drop-in form');
});

blocks.forEach((b, i) => {
  const skip = skipNoGuardian || (b.kind === 'mcp' && !sdk ? '@modelcontextprotocol/sdk is not installed (test/run.sh installs it)' : false);
  test(`README example ${i + 1} (${b.kind}) runs and leaves nothing behind`, { timeout: 90000, skip }, async () => {
    const nonce = `${process.pid}${Math.floor(Math.random() * 1e9)}`;
    let code = b.code.replaceAll('sleep 30', `sleep 30.${nonce}`);
    if (b.kind === 'mcp') {
      code = code.replace("command: 'npx', args: ['-y', '@modelcontextprotocol/server-everything']",
        `command: process.execPath, args: [${JSON.stringify(serverScript)}, 'cooperative', 'readme-${nonce}']`);
      assert.ok(code.includes(serverScript), 'the MCP example no longer names the npx server this test replaces');
    }
    const r = await within(runSnippet(code, i), 80000, 'the example to end');
    assert.equal(r.status, 0, r.out);
    if (b.kind === 'mcp') assert.match(r.out, /released: \d+ killed/);
    await waitGone(nonce, 20000);
  });
});
