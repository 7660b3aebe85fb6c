// The driver's own behaviour, against canned event lines and a fake guardian
// (support/fake-guardian.sh). Needs no real guardian binary.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, chmodSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  spawnGuarded, parseEventLine, LineSplitter, guardianArgs, resolveGuardianPath, locateGuardian, platformPackage,
  guardedCommand, GuardianError,
} from '../index.js';
import { fakeGuardian, within } from '../support/helpers.js';

const T = { timeout: 30000 };
const isBun = typeof globalThis.Bun !== 'undefined';

test('parseEventLine reads the contract example lines and keeps unknown fields', () => {
  const lines = [
    '{"event":"spawned","ts":81234.500112,"pid":4242,"pgid":4242,"guardian_pid":4241,"mode":"subreaper","cgroup":null}',
    '{"event":"exit","ts":81235.100871,"pid":4242,"code":0,"signal":null,"core_dumped":false}',
    '{"event":"signal","ts":81235.101020,"signal":"SIGTERM","target":"descendants","pids":[4250],"reason":"stop"}',
    '{"event":"released","ts":81235.103377,"status":0,"signalled":1,"killed":0,"reaped":1,"teardown_ms":2.506,"extra":{"a":1}}',
  ];
  const evs = lines.map(parseEventLine);
  assert.deepEqual(evs.map((e) => e.event), ['spawned', 'exit', 'signal', 'released']);
  assert.equal(evs[0].guardian_pid, 4241);
  assert.equal(evs[0].cgroup, null);
  assert.deepEqual(evs[2].pids, [4250]);
  assert.equal(evs[3].teardown_ms, 2.506);
  assert.deepEqual(evs[3].extra, { a: 1 });
  assert.equal(parseEventLine('{"event":"exit","ts":1}\r').event, 'exit');
});

test('parseEventLine: blank is null, non-objects and event-less objects throw', () => {
  assert.equal(parseEventLine(''), null);
  assert.equal(parseEventLine('   '), null);
  assert.throws(() => parseEventLine('not json'), SyntaxError);
  assert.throws(() => parseEventLine('[1,2]'), TypeError);
  assert.throws(() => parseEventLine('null'), TypeError);
  assert.throws(() => parseEventLine('{"ts":1}'), TypeError);
});

test('LineSplitter joins lines split across chunks, including inside a UTF-8 character', () => {
  const s = new LineSplitter();
  const full = Buffer.from('{"event":"error","message":"caf\u00e9 \u2603"}\n{"event":"x"}\n{"event":"tail"}');
  const out = [];
  for (let i = 0; i < full.length; i += 3) out.push(...s.push(full.subarray(i, i + 3)));
  out.push(...s.end());
  assert.deepEqual(out, ['{"event":"error","message":"caf\u00e9 \u2603"}', '{"event":"x"}', '{"event":"tail"}']);
  assert.equal(parseEventLine(out[0]).message, 'caf\u00e9 \u2603');
  assert.deepEqual(new LineSplitter().end(), []);
});

test('guardianArgs maps camelCase options onto the contract command line', () => {
  assert.deepEqual(guardianArgs(), ['--events-fd', '3']);
  assert.deepEqual(
    guardianArgs({
      grace: 1500, stopSignal: 'INT', forwardTo: 'group', timeout: '10s', waitDescendants: true,
      cgroup: true, noParentWatch: true, verbose: 2,
    }),
    ['--events-fd', '3', '--grace', '1500ms', '--stop-signal', 'INT', '--forward-to', 'group',
      '--timeout', '10s', '--wait-descendants', '--cgroup', 'auto', '--no-parent-watch', '--verbose', '--verbose'],
  );
  assert.deepEqual(guardianArgs({ grace: '2s', stopSignal: 15, cgroup: '/sys/fs/cgroup/x', verbose: true }),
    ['--events-fd', '3', '--grace', '2s', '--stop-signal', '15', '--cgroup', '/sys/fs/cgroup/x', '--verbose']);
  assert.deepEqual(guardianArgs({ grace: 0, waitDescendants: false, noParentWatch: false, cgroup: false }),
    ['--events-fd', '3', '--grace', '0ms']);
  assert.throws(() => guardianArgs({ forwardTo: 'everyone' }), TypeError);
  assert.throws(() => guardianArgs({ grace: -1 }), TypeError);
  assert.throws(() => guardianArgs({ timeout: '' }), TypeError);
  assert.throws(() => guardianArgs({ verbose: 1.5 }), TypeError);
});

test('resolveGuardianPath: option, then GUARDIAN_BIN, then (platform package,) then PATH', () => {
  const dir = mkdtempSync(join(tmpdir(), 'guardian-path-'));
  try {
    const onPath = join(dir, 'guardian');
    writeFileSync(onPath, '#!/bin/sh\n');
    chmodSync(onPath, 0o755);
    assert.equal(resolveGuardianPath({ guardianPath: '/a/g' }, { GUARDIAN_BIN: '/b/g', PATH: dir }), '/a/g');
    assert.equal(resolveGuardianPath({}, { GUARDIAN_BIN: '/b/g', PATH: dir }), '/b/g');
    // In this checkout no platform package is installed, so PATH comes next.
    assert.equal(resolveGuardianPath({}, { PATH: `/nonexistent:${dir}` }), onPath);
    assert.deepEqual(locateGuardian({}, { PATH: dir }), { path: onPath, source: 'PATH' });
    // options.env's PATH is the one spawn() would search
    assert.equal(resolveGuardianPath({ env: { PATH: dir } }, { PATH: '/nonexistent' }), onPath);
    // a non-executable file on PATH does not count
    chmodSync(onPath, 0o644);
    assert.throws(() => resolveGuardianPath({}, { PATH: dir }), GuardianError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('no guardian anywhere: the error names all four places and the fix', () => {
  assert.throws(() => resolveGuardianPath({}, { PATH: '/nonexistent' }), (e) => {
    assert.ok(e instanceof GuardianError);
    assert.equal(e.code, 'GUARDIAN_NOT_FOUND');
    assert.equal(e.status, 125);
    assert.match(e.message, /guardianPath/);
    assert.match(e.message, /GUARDIAN_BIN/);
    assert.match(e.message, /treeguardian-linux-(x64|arm64)|no platform package/);
    assert.match(e.message, /PATH \(\/nonexistent\)/);
    return true;
  });
  assert.equal(platformPackage('linux', 'x64'), 'treeguardian-linux-x64');
  assert.equal(platformPackage('linux', 'arm64'), 'treeguardian-linux-arm64');
  assert.equal(platformPackage('darwin', 'arm64'), null);
});

test('spawnGuarded with no guardian anywhere rejects with that error, nothing thrown', T, async () => {
  const saved = { PATH: process.env.PATH, GUARDIAN_BIN: process.env.GUARDIAN_BIN };
  let h;
  try {
    process.env.PATH = '/nonexistent';
    delete process.env.GUARDIAN_BIN;
    h = spawnGuarded('true', [], { stdio: 'ignore' });
  } finally {
    process.env.PATH = saved.PATH;
    if (saved.GUARDIAN_BIN !== undefined) process.env.GUARDIAN_BIN = saved.GUARDIAN_BIN;
  }
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => e.code === 'GUARDIAN_NOT_FOUND' && /GUARDIAN_BIN/.test(e.message));
});

test('guardedCommand: a command prefix without an events fd, for launchers like StdioClientTransport', () => {
  assert.deepEqual(guardedCommand('npx', ['-y', 'server'], { guardianPath: '/g', grace: '1s' }),
    { command: '/g', args: ['--grace', '1s', '--', 'npx', '-y', 'server'] });
  assert.deepEqual(guardedCommand('srv', [], { guardianPath: '/g' }), { command: '/g', args: ['--', 'srv'] });
  assert.throws(() => guardedCommand('', [], { guardianPath: '/g' }), TypeError);
});

async function waitForEvent(h, pred) {
  for (let i = 0; i < 400; i++) {
    if (h.received.some(pred)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`event never came: ${JSON.stringify(h.received)}`);
}

const fake = (mode, extra = {}) => ({
  guardianPath: fakeGuardian,
  env: { ...process.env, FAKE_GUARDIAN_MODE: mode },
  stdio: ['ignore', 'ignore', 'inherit'],
  ...extra,
});

test('promises and events() follow the event lines; exit settles before released', T, async () => {
  const h = spawnGuarded('provider', ['a', 'b c'], fake('ok'));
  assert.equal(typeof h.guardianPid, 'number');
  assert.equal(h.pid, h.guardianPid, 'pid stays as an alias of guardianPid');
  assert.equal(h.providerPid, undefined, 'no provider pid before spawned');
  const seenLive = [];
  h.on('event', (ev) => seenLive.push(ev.event));
  const order = [];
  h.released.then(() => order.push('released'));
  h.exit.then(() => order.push('exit'));
  h.spawned.then(() => order.push('spawned'));
  const rel = await within(h.released, 20000, 'released');
  assert.deepEqual(order, ['spawned', 'exit', 'released']);
  assert.equal(rel.status, 3);
  assert.equal((await h.spawned).guardian_pid, h.guardianPid);
  assert.equal(h.providerPid, (await h.spawned).pid);
  assert.equal((await h.exit).code, 3);
  const seen = [];
  for await (const ev of h.events()) seen.push(ev.event);
  assert.deepEqual(seen, ['fallback', 'spawned', 'exit', 'signal', 'future-thing', 'released']);
  // a second iterator replays from the start
  const again = [];
  for await (const ev of h) again.push(ev.event);
  assert.deepEqual(again, seen);
  assert.deepEqual(seenLive, seen, "the 'event' emitter saw every line");
});

test('events() delivers lines live, before guardian has finished', T, async () => {
  const h = spawnGuarded('provider', [], fake('stop'));
  const it = h.events();
  const first = await within(it.next(), 20000, 'first event');
  assert.equal(first.value.event, 'spawned');
  const rel = await within(h.stop(), 20000, 'released after stop()');
  assert.equal(rel.status, 143);
  assert.equal((await h.exit).signal, 'SIGTERM');
  const rest = [];
  for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value.event);
  assert.deepEqual(rest, ['exit', 'released']);
});

test('the command line: options before --, then the provider argv untouched', T, async () => {
  const h = spawnGuarded('--looks-like-an-option', ['x', '--grace', '1'], fake('args', { grace: 250, waitDescendants: true }));
  await within(h.released, 20000, 'released');
  const args = h.received.find((e) => e.event === 'args');
  assert.deepEqual(args.argv, ['--events-fd', '3', '--grace', '250ms', '--wait-descendants', '--',
    '--looks-like-an-option', 'x', '--grace', '1']);
});

test('an error event rejects spawned, exit and released with its status', T, async () => {
  const h = spawnGuarded('nosuch', [], fake('error'));
  for (const p of [h.released, h.spawned, h.exit]) {
    await assert.rejects(within(p, 20000, 'rejection'), (e) => {
      assert.ok(e instanceof GuardianError);
      assert.equal(e.status, 127);
      assert.equal(e.event.event, 'error');
      assert.match(e.message, /command not found/);
      return true;
    });
  }
});

test('guardian ending without released rejects released with how it ended', T, async () => {
  const h = spawnGuarded('p', [], fake('die'));
  assert.equal((await within(h.spawned, 20000, 'spawned')).event, 'spawned');
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => {
    assert.ok(e instanceof GuardianError);
    assert.equal(e.signal, 'SIGKILL');
    return true;
  });
  await assert.rejects(h.exit, GuardianError);

  const h2 = spawnGuarded('p', [], fake('noevents'));
  await assert.rejects(within(h2.released, 20000, 'rejection'), (e) => e.exitCode === 9 && e.status === 9);
  await assert.rejects(h2.spawned, GuardianError);
});

test('a malformed line is surfaced, an unterminated last line still counts', T, async () => {
  const h = spawnGuarded('p', [], fake('garbage'));
  const rel = await within(h.released, 20000, 'released');
  assert.equal(rel.event, 'released');
  const names = h.received.map((e) => e.event);
  assert.deepEqual(names, ['malformed', 'spawned', 'exit', 'released']);
  assert.equal(h.received[0].line, 'not json');
});

test('a guardian binary that does not exist rejects everything, nothing unhandled', T, async () => {
  const h = spawnGuarded('true', [], { guardianPath: '/nonexistent/guardian', stdio: 'ignore' });
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => e instanceof GuardianError && e.status === 125 && /ENOENT/.test(String(e.cause?.code ?? e.message)));
  await assert.rejects(h.spawned, GuardianError);
  await assert.rejects(h.exit, GuardianError);
  await assert.rejects(async () => { for await (const _ of h.events()) { /* none */ } }, GuardianError);
  // stop() after failure does not throw, it returns the rejected released
  await assert.rejects(h.stop(), GuardianError);
});

test('spawnGuarded validates its inputs', () => {
  assert.throws(() => spawnGuarded('', []), TypeError);
  assert.throws(() => spawnGuarded('x', [], { stdio: ['pipe', 'pipe', 'pipe', 'pipe'], guardianPath: fakeGuardian }), TypeError);
});

// --- kill now, stop() options, never SIGKILL guardian -------------------------
// The fake follows guardian's kill-now rule: the first SIGTERM starts a stop
// with a 60 s grace, a second one kills at once. A SIGKILL would end it
// without `released`, so a resolved `released` proves none was sent.

const terms = (h) => h.received.filter((e) => e.event === 'term').length;
const stopReasons = (h) => h.received.filter((e) => e.event === 'stopping').map((e) => e.reason);

test("kill(): SIGTERM, then SIGTERM again on 'stopping signal'; released without SIGKILL", T, async () => {
  const h = spawnGuarded('p', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  const rel = await within(h.kill(), 20000, 'released after kill()');
  assert.equal(rel.status, 137);
  assert.equal(terms(h), 2);
  assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);
  assert.equal(h.child.signalCode, null, 'guardian was not killed by a signal');
  assert.equal(h.kill(), h.released, 'kill() after the end returns released');
});

test("stop('SIGKILL') and stop(9) never deliver SIGKILL to guardian: they are kill()", T, async () => {
  for (const sig of ['SIGKILL', 9, 'KILL']) {
    const h = spawnGuarded('p', [], fake('killnow'));
    await within(h.spawned, 20000, 'spawned');
    const rel = await within(h.stop(sig), 20000, `released after stop(${sig})`);
    assert.equal(rel.status, 137);
    assert.deepEqual(stopReasons(h), ['signal', 'kill-request'], String(sig));
    assert.equal(h.child.signalCode, null);
  }
  const h = spawnGuarded('p', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  assert.throws(() => h.stop('SIGSTOP'), TypeError);
  await within(h.kill(), 20000, 'released');
});

test('kill() while guardian is already stopping sends one SIGTERM', T, async () => {
  const h = spawnGuarded('p', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  const p = h.stop();
  await waitForEvent(h, (e) => e.event === 'stopping');
  assert.equal(terms(h), 1);
  await within(h.kill(), 20000, 'released after kill()');
  await p;
  assert.equal(terms(h), 2);
  assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);
});

test('stop({timeout}) ends the grace through kill() when released is late', T, async () => {
  const h = spawnGuarded('p', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  const rel = await within(h.stop({ timeout: 300 }), 20000, 'released after stop({timeout})');
  assert.equal(rel.status, 137);
  assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);
});

test('stop({signal}) ends the grace when the AbortSignal fires, also when already aborted', T, async () => {
  const ac = new AbortController();
  const h = spawnGuarded('p', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  const p = h.stop({ signal: ac.signal });
  await waitForEvent(h, (e) => e.event === 'stopping');
  assert.equal(terms(h), 1);
  ac.abort();
  assert.equal((await within(p, 20000, 'released after abort')).status, 137);
  assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);

  const h2 = spawnGuarded('p', [], fake('killnow'));
  await within(h2.spawned, 20000, 'spawned');
  assert.equal((await within(h2.stop({ signal: AbortSignal.abort() }), 20000, 'released')).status, 137);
  assert.throws(() => h2.stop({ timeout: -1 }), TypeError);
  assert.throws(() => h2.stop({ signal: 'soon' }), TypeError);
});

test('a cwd that does not exist is named; the binary is not blamed', T, async () => {
  const dir = `/nonexistent/guardian-cwd-${process.pid}`;
  const h = spawnGuarded('p', [], fake('ok', { cwd: dir }));
  let emitted = null;
  h.on('error', (e) => { emitted = e; });
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => {
    assert.ok(e instanceof GuardianError);
    assert.equal(e.code, 'BAD_CWD');
    assert.equal(e.status, 125);
    assert.ok(e.message.includes(dir), e.message);
    assert.match(e.message, /does not exist/);
    assert.ok(!e.message.includes('fake-guardian'), e.message);
    return true;
  });
  assert.equal(emitted?.code, 'BAD_CWD', "the failure was also an 'error' event");
  const file = fakeGuardian; // a file, not a directory
  const h2 = spawnGuarded('p', [], fake('ok', { cwd: file }));
  await assert.rejects(within(h2.released, 20000, 'rejection'), (e) => e.code === 'BAD_CWD' && /is not a directory/.test(e.message));
});

test("writing to stdin of a guardian that is gone: no unhandled EPIPE, an 'error' event if listened", T, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'guardian-epipe-'));
  try {
    for (const listen of [true, false]) {
      const release = join(dir, `release-${listen}`);
      const h = spawnGuarded('nosuch', [], fake('epipe', {
        stdio: ['pipe', 'ignore', 'inherit'],
        env: { ...process.env, FAKE_GUARDIAN_MODE: 'epipe', FAKE_GUARDIAN_RELEASE: release },
      }));
      const errors = [];
      if (listen) h.on('error', (e) => errors.push(e));
      await assert.rejects(within(h.released, 20000, 'rejection'), (e) => e.status === 127);
      // guardian still runs, the reading end is closed: the write fails with
      // EPIPE. Unhandled, that would be an uncaught exception here.
      // (Bun may accept a few writes into its own buffer first.)
      let writeErr = null;
      for (let i = 0; i < 50 && !writeErr; i++) {
        writeErr = await within(new Promise((resolve) => h.stdin.write('{"jsonrpc":"2.0"}\n', resolve)), 20000, 'a write');
      }
      if (!isBun) assert.equal(writeErr?.code, 'EPIPE', String(writeErr));
      writeFileSync(release, '');
      await within(new Promise((r) => (h.child.exitCode !== null ? r() : h.child.once('exit', r))), 20000, 'guardian to exit');
      await new Promise((r) => setTimeout(r, 100)); // let a late stream error surface (and fail the test if unhandled)
      if (listen && writeErr) {
        assert.ok(errors.some((e) => e.code === writeErr.code), `no ${writeErr.code} error event: ${errors.map(String)}`);
        assert.ok(errors.some((e) => e instanceof GuardianError && e.status === 127), 'the failure itself was emitted too');
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
