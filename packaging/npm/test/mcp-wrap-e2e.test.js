// End to end: a host's config file, `treeguardian-mcp wrap`, then the real MCP TypeScript SDK
// (StdioClientTransport) reads the server entry from the wrapped file, starts it, calls a tool
// and closes. The server ignores SIGTERM and the end of stdin and has a setsid child that
// ignores SIGTERM too (support/mcp-server.js stubborn): with the wrap nothing is left right
// after close(); without it the same run leaves the setsid child (the leak), which this test
// then kills itself. Every process carries a nonce, found by scanning /proc.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { guardianBin, skipNoMcpSdk, runtime, Tracker, procsWith, waitFor, within } from '../support/helpers.js';

const T = { timeout: 120000, skip: skipNoMcpSdk };
const bin = fileURLToPath(new URL('../mcp-wrap.js', import.meta.url));
const serverScript = fileURLToPath(new URL('../support/mcp-server.js', import.meta.url));

const tracker = new Tracker();
after(() => tracker.cleanup());

/** A Claude Code .mcp.json naming the stubborn server; wrapped by the bin when `wrap`. */
function config(dir, nonce, wrap) {
  const file = join(dir, '.mcp.json');
  writeFileSync(file, `${JSON.stringify({
    mcpServers: { helper: { command: process.execPath, args: [serverScript, 'stubborn', nonce] } },
  }, null, 2)}\n`);
  if (wrap) {
    const r = spawnSync(process.execPath, [bin, '--guardian', guardianBin, 'wrap', file], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /helper: wrapped: /);
  }
  return JSON.parse(readFileSync(file, 'utf8')).mcpServers.helper;
}

async function useServer(entry, nonce) {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  const transport = new StdioClientTransport({ command: entry.command, args: entry.args, stderr: 'ignore' });
  const client = new Client({ name: 'treeguardian-mcp-e2e', version: '1.0.0' });
  await within(client.connect(transport), 30000, 'connect');
  if (transport._process) tracker.child(transport._process);
  const res = await within(client.callTool({ name: 'child', arguments: {} }), 30000, 'the child tool');
  const childPid = Number(res.content[0].text);
  await waitFor(() => procsWith(nonce).some((p) => p.pid === childPid), { what: 'the setsid child to run' });
  await within(client.close(), 30000, 'close()');
  return childPid;
}

test(`[${runtime}] wrapped config: the TypeScript SDK starts the server from it, and close() leaves nothing`, T, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'treeguardian-mcp-e2e-'));
  try {
    const nonce = tracker.nonce();
    const entry = config(dir, nonce, true);
    assert.equal(entry.command, guardianBin);
    assert.deepEqual(entry.args.slice(0, 4), ['--grace', '1s', '--', process.execPath]);
    await useServer(entry, nonce);
    assert.deepEqual(procsWith(nonce), [], 'close() left processes running');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test(`[${runtime}] the same config unwrapped: close() leaves the setsid child (the leak the wrap prevents)`, T, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'treeguardian-mcp-e2e-'));
  try {
    const nonce = tracker.nonce();
    const entry = config(dir, nonce, false);
    const childPid = await useServer(entry, nonce);
    const left = procsWith(nonce);
    assert.ok(left.some((p) => p.pid === childPid), `expected the setsid child ${childPid} to survive: ${JSON.stringify(left)}`);
  } finally {
    await tracker.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
