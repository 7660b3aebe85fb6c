// The MCP TypeScript SDK's StdioClientTransport with guardian as the command
// prefix (the README's recipe, through guardedCommand()). close() ends stdin,
// waits 2 s, sends SIGTERM, waits 2 s and sends SIGKILL: with guardian's
// default grace (1 s) guardian must release the tree and exit inside that
// window, so that close() never leaves a process, for a cooperative server and
// for one that ignores SIGTERM and has a setsid child that ignores it too.
// Every process carries a nonce; /proc is scanned right after close().
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { guardedCommand } from '../index.js';
import { guardianBin, skipNoMcpSdk, runtime, Tracker, procsWith, waitFor, within } from '../support/helpers.js';

const T = { timeout: 120000, skip: skipNoMcpSdk };
const serverScript = new URL('../support/mcp-server.js', import.meta.url).pathname;

const tracker = new Tracker();
after(() => tracker.cleanup());

async function sdk() {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  return { Client, StdioClientTransport };
}

async function connectAndClose(mode) {
  const { Client, StdioClientTransport } = await sdk();
  const nonce = tracker.nonce();
  // No grace option: guardian's default (1 s) is what must hold.
  // The drop-in form: a host's own parameters object, wrapped (a one-line change).
  const params = guardedCommand({ command: process.execPath, args: [serverScript, mode, nonce], stderr: 'inherit' }, [],
    { guardianPath: guardianBin });
  const transport = new StdioClientTransport(params);
  const client = new Client({ name: 'guardian-driver-test', version: '1.0.0' });
  await within(client.connect(transport), 30000, 'connect');
  const guardian = transport._process; // the SDK's ChildProcess of guardian
  if (guardian) tracker.child(guardian);
  const res = await within(client.callTool({ name: 'child', arguments: {} }), 30000, 'the child tool');
  const childPid = Number(res.content[0].text);
  await waitFor(() => procsWith(nonce).some((p) => p.pid === childPid && p.cmdline.startsWith(`${nonce}-child`)),
    { what: 'the setsid grandchild to run' });
  await within(client.close(), 30000, 'close()');
  // Right after close(): nothing may be left, without waiting.
  const left = procsWith(nonce);
  assert.deepEqual(left, [], `close() left processes running: ${JSON.stringify(left)}`);
  // guardian ended inside close()'s window. It ends as its provider did: a SIGKILLed
  // server makes it die of SIGKILL (after releasing the tree), so the status is a code or
  // a signal name.
  assert.ok(guardian.exitCode !== null || guardian.signalCode !== null, 'guardian had not exited when close() returned');
  // released is reachable after close(), through the events guardedCommand follows
  const released = await within(params.released, 20000, 'released of guardedCommand');
  assert.equal(typeof released.teardown_ms, 'number');
  assert.ok(params.received.some((e) => e.event === 'spawned'), JSON.stringify(params.received));
  return guardian.exitCode ?? guardian.signalCode;
}

for (const mode of ['cooperative', 'stubborn']) {
  test(`[${runtime}] MCP SDK StdioClientTransport.close() leaves no process: ${mode} server, setsid child`, T, async () => {
    for (let i = 0; i < 3; i++) {
      const status = await connectAndClose(mode);
      // cooperative: exits 0 on the end of stdin; stubborn: SIGKILLed after the grace, and
      // guardian dies of SIGKILL as its provider did
      assert.equal(status, mode === 'cooperative' ? 0 : 'SIGKILL');
    }
  });
}

test(`[${runtime}] MCP SDK with a mistyped server command: connect() rejects with ENOENT, as without guardian`, T, async () => {
  const { Client, StdioClientTransport } = await sdk();
  const nonce = tracker.nonce();
  const transport = new StdioClientTransport({
    ...guardedCommand(`no-such-mcp-server-${nonce}`, [], { guardianPath: guardianBin }),
    stderr: 'ignore',
  });
  const errors = [];
  transport.onerror = (e) => errors.push(e);
  const client = new Client({ name: 'guardian-driver-test', version: '1.0.0' });
  client.onerror = () => {};
  await assert.rejects(within(client.connect(transport), 30000, 'connect to fail'), (e) => e.code === 'ENOENT');
  await client.close().catch(() => {});
  assert.deepEqual(procsWith(nonce), []);
});
