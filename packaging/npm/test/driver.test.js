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
      grace: 1500, stopSignal: 'INT', forwardTo: 'group', guardianTimeout: '10s', waitDescendants: true,
      cgroup: true, noParentWatch: true, verbose: 2,
    }),
    ['--events-fd', '3', '--grace', '1500000000ns', '--stop-signal', 'INT', '--forward-to', 'group',
      '--timeout', '10s', '--wait-descendants', '--no-parent-watch', '--cgroup', 'auto', '--verbose', '--verbose'],
  );
  assert.deepEqual(guardianArgs({ grace: '2s', stopSignal: 15, cgroup: '/sys/fs/cgroup/x', verbose: true }),
    ['--events-fd', '3', '--grace', '2s', '--stop-signal', '15', '--cgroup', '/sys/fs/cgroup/x', '--verbose']);
  assert.deepEqual(guardianArgs({ grace: 0, waitDescendants: false, noParentWatch: false, cgroup: false }),
    ['--events-fd', '3', '--grace', '0ns']);
  // durations round up to whole nanoseconds, never down to no grace
  assert.deepEqual(guardianArgs({ grace: 0.0004 }), ['--events-fd', '3', '--grace', '400ns']);
  assert.deepEqual(guardianArgs({ grace: 1e-7 }), ['--events-fd', '3', '--grace', '1ns']);
  assert.throws(() => guardianArgs({ forwardTo: 'everyone' }), TypeError);
  assert.throws(() => guardianArgs({ grace: -1 }), RangeError);
  assert.throws(() => guardianArgs({ grace: NaN }), RangeError);
  assert.throws(() => guardianArgs({ grace: Infinity }), /too large: the maximum is 18446744073s/);
  assert.throws(() => guardianArgs({ grace: 'abc' }), /invalid duration 'abc': use a number with a unit/);
  assert.throws(() => guardianArgs({ guardianTimeout: '' }), TypeError);
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
    h.on('error', () => {});
  } finally {
    process.env.PATH = saved.PATH;
    if (saved.GUARDIAN_BIN !== undefined) process.env.GUARDIAN_BIN = saved.GUARDIAN_BIN;
  }
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => e.code === 'GUARDIAN_NOT_FOUND' && /GUARDIAN_BIN/.test(e.message));
});

test('guardedCommand: a command prefix without an events fd, for launchers like StdioClientTransport', () => {
  const a = guardedCommand('sh', ['-c', 'server'], { guardianPath: '/g', grace: '1s' });
  assert.equal(a.command, '/g');
  assert.deepEqual(a.args.slice(0, 3), ['--grace', '1s', '--events-file']);
  assert.deepEqual(a.args.slice(4), ['--', 'sh', '-c', 'server']);
  // a launcher's parameters object: returned with command and args replaced (one-line change)
  const b = guardedCommand({ command: 'sh', args: ['x'], env: { PATH: process.env.PATH }, stderr: 'pipe' }, [], { guardianPath: '/g' });
  assert.equal(b.command, '/g');
  assert.equal(b.stderr, 'pipe');
  assert.deepEqual(b.args.slice(-3), ['--', 'sh', 'x']);
  // a command that cannot run is handed over as it is: the launcher's spawn fails with ENOENT
  const c = guardedCommand('nosuch-command-xyz', ['a'], { guardianPath: '/g' });
  assert.deepEqual({ ...c }, { command: 'nosuch-command-xyz', args: ['a'] });
  assert.throws(() => guardedCommand('sh', [], { guardianPath: '/g', graec: 1 }), /unknown option 'graec' \(did you mean 'grace'\?\)/);
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
  const h = spawnGuarded('true', ['a', 'b c'], fake('ok'));
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
  const h = spawnGuarded('true', [], fake('stop'));
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
  const h = spawnGuarded('true', ['--looks-like-an-option', 'x', '--grace', '1'], fake('args', { grace: 250, waitDescendants: true }));
  await within(h.released, 20000, 'released');
  const args = h.received.find((e) => e.event === 'args');
  assert.deepEqual(args.argv, ['--events-fd', '3', '--grace', '250000000ns', '--wait-descendants', '--',
    'true', '--looks-like-an-option', 'x', '--grace', '1']);
});

test('an error event rejects spawned, exit and released with its status', T, async () => {
  const h = spawnGuarded('true', [], fake('error'));
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
  const h = spawnGuarded('true', [], fake('die'));
  assert.equal((await within(h.spawned, 20000, 'spawned')).event, 'spawned');
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => {
    assert.ok(e instanceof GuardianError);
    assert.equal(e.signal, 'SIGKILL');
    return true;
  });
  await assert.rejects(h.exit, GuardianError);

  const h2 = spawnGuarded('true', [], fake('noevents'));
  await assert.rejects(within(h2.released, 20000, 'rejection'), (e) => e.exitCode === 9 && e.status === 9);
  await assert.rejects(h2.spawned, GuardianError);
});

test('a malformed line is surfaced, an unterminated last line still counts', T, async () => {
  const h = spawnGuarded('true', [], fake('garbage'));
  const rel = await within(h.released, 20000, 'released');
  assert.equal(rel.event, 'released');
  const names = h.received.map((e) => e.event);
  assert.deepEqual(names, ['malformed', 'spawned', 'exit', 'released']);
  assert.equal(h.received[0].line, 'not json');
});

test('a guardian binary that does not exist rejects everything, nothing unhandled', T, async () => {
  const h = spawnGuarded('true', [], { guardianPath: '/nonexistent/guardian', stdio: 'ignore' });
  let emitted = null;
  h.on('error', (e) => { emitted = e; });
  await assert.rejects(within(h.released, 20000, 'rejection'), (e) => e instanceof GuardianError && e.status === 125 && /ENOENT/.test(String(e.cause?.code ?? e.message)));
  await assert.rejects(h.spawned, GuardianError);
  await assert.rejects(h.exit, GuardianError);
  await assert.rejects(async () => { for await (const _ of h.events()) { /* none */ } }, GuardianError);
  // stop() after failure does not throw, it returns the rejected released
  await assert.rejects(h.stop(), GuardianError);
  assert.equal(emitted?.code, 'SPAWN_FAILED', "a failure to start is an 'error' event, as in child_process");
});

test('spawnGuarded validates its inputs', () => {
  assert.throws(() => spawnGuarded('', []), TypeError);
  assert.throws(() => spawnGuarded('x', [], { stdio: ['pipe', 'pipe', 'pipe', 'pipe'], guardianPath: fakeGuardian }), TypeError);
});

// --- kill(), the kill request, stop(grace), the version check ------------------------
// The fake follows guardian's two requests: SIGTERM starts a stop with a 60 s grace; signal 64
// (the kill request, armed by GUARDIAN_KILL_SIGNAL=RTMAX) kills at once, and the fake then ends
// killed by SIGKILL, as guardian ends with its provider's status. A SIGKILL from the driver
// would end it without `released`, so a resolved `released` proves none was sent.

const count = (h, name) => h.received.filter((e) => e.event === name).length;
const stopReasons = (h) => h.received.filter((e) => e.event === 'stopping').map((e) => e.reason);
const exitOf = (h) => new Promise((r) => (h.exitCode !== null || h.signalCode !== null ? r([h.exitCode, h.signalCode]) : h.once('exit', (c, s) => r([c, s]))));

test('kill() is the kill request: true at once, signalCode SIGKILL, never SIGKILL to guardian', T, async () => {
  for (const sig of [undefined, 'SIGKILL', 9]) {
    const h = spawnGuarded('true', [], fake('killnow'));
    await within(h.spawned, 20000, 'spawned');
    assert.equal(h.killed, false);
    assert.equal(sig === undefined ? h.kill() : h.kill(sig), true, 'kill() returns a boolean at once');
    assert.equal(h.killed, true);
    const [code, signal] = await within(exitOf(h), 20000, `exit after kill(${sig})`);
    assert.deepEqual([code, signal, h.exitCode, h.signalCode], [null, 'SIGKILL', null, 'SIGKILL']);
    const rel = await h.released;
    assert.equal(rel.status, 137);
    assert.equal(count(h, 'killreq'), 1);
    assert.equal(count(h, 'term'), 0, 'no SIGTERM before the kill');
    assert.deepEqual(stopReasons(h), ['kill-request']);
    assert.equal(h.kill(), false, 'kill() after the end returns false, as ChildProcess.kill does');
  }
});

test("kill('SIGTERM') is the stop request; SIGSTOP and unknown signals throw", T, async () => {
  const h = spawnGuarded('true', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  assert.throws(() => h.kill('SIGSTOP'), TypeError);
  assert.throws(() => h.kill('SIGNOPE'), (e) => e.code === 'ERR_UNKNOWN_SIGNAL');
  assert.equal(h.kill('SIGTERM'), true);
  await waitForEvent(h, (e) => e.event === 'stopping');
  assert.deepEqual(stopReasons(h), ['signal']);
  h.kill();
  await within(h.released, 20000, 'released');
  assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);
  assert.equal(count(h, 'term'), 1, 'one SIGTERM: a driver never relies on two');
});

test('stop(grace) sends SIGTERM, then the kill request when the grace passes', T, async () => {
  for (const grace of [300, '300ms', { grace: 300 }]) {
    const h = spawnGuarded('true', [], fake('killnow'));
    await within(h.spawned, 20000, 'spawned');
    const rel = await within(h.stop(grace), 20000, `released after stop(${JSON.stringify(grace)})`);
    assert.equal(rel.status, 137);
    assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);
    assert.equal(count(h, 'term'), 1);
  }
  const h = spawnGuarded('true', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  assert.throws(() => h.stop(-1), RangeError);
  assert.throws(() => h.stop('abc'), /invalid duration 'abc'/);
  assert.throws(() => h.stop({ graec: 1 }), /did you mean 'grace'/);
  assert.throws(() => h.stop({ stopSignal: 'INT' }), /unknown option 'stopSignal'/, "guardian's options are spawn()'s, not stop()'s");
  assert.throws(() => h.stop({ signal: 'soon' }), TypeError);
  h.kill();
  await within(h.released, 20000, 'released');
});

test('stop({signal}) sends the kill request when the AbortSignal fires, also when already aborted', T, async () => {
  const ac = new AbortController();
  const h = spawnGuarded('true', [], fake('killnow'));
  await within(h.spawned, 20000, 'spawned');
  const p = h.stop({ signal: ac.signal });
  await waitForEvent(h, (e) => e.event === 'stopping');
  ac.abort();
  assert.equal((await within(p, 20000, 'released after abort')).status, 137);
  assert.deepEqual(stopReasons(h), ['signal', 'kill-request']);
  const h2 = spawnGuarded('true', [], fake('killnow'));
  await within(h2.spawned, 20000, 'spawned');
  assert.equal((await within(h2.stop({ signal: AbortSignal.abort() }), 20000, 'released')).status, 137);
});

test('a guardian older than spec/driver.json min_guardian_version is refused naming both versions', T, async () => {
  for (const [mode, env, named] of [['old', {}, /older than 0\.2\.0/], ['killnow', { FAKE_GUARDIAN_VERSION: '0.1.9' }, /guardian 0\.1\.9/]]) {
    const h = spawnGuarded('true', [], fake(mode, { env: { ...process.env, FAKE_GUARDIAN_MODE: mode, ...env } }));
    const err = await within(new Promise((r) => h.once('error', r)), 20000, "the 'error' event");
    assert.ok(err instanceof GuardianError);
    assert.equal(err.code, 'GUARDIAN_TOO_OLD');
    assert.match(err.message, named);
    assert.match(err.message, /needs guardian 0\.2\.0 or newer/);
    assert.match(err.message, /GUARDIAN_BIN|npm install treeguardian-linux/);
    await assert.rejects(h.released, (e) => e === err);
    await waitForEvent(h, (e) => e.event === 'term');
    assert.equal(count(h, 'term'), 1, 'the tree was stopped (the stop request: an old guardian lacks the kill request)');
    if (mode !== 'old') process.kill(h.pid, 64);
    await within(exitOf(h), 20000, 'guardian exited');
  }
  // a newer guardian is accepted
  const h = spawnGuarded('true', [], fake('killnow', { env: { ...process.env, FAKE_GUARDIAN_MODE: 'killnow', FAKE_GUARDIAN_VERSION: '0.10.0' } }));
  assert.equal((await within(h.spawned, 20000, 'spawned')).version, '0.10.0');
  h.kill();
  await within(h.released, 20000, 'released');
});

test('a cwd that does not exist is named; the binary is not blamed', T, async () => {
  const dir = `/nonexistent/guardian-cwd-${process.pid}`;
  const h = spawnGuarded('true', [], fake('ok', { cwd: dir }));
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
  const h2 = spawnGuarded('true', [], fake('ok', { cwd: file }));
  h2.on('error', () => {});
  await assert.rejects(within(h2.released, 20000, 'rejection'), (e) => e.code === 'BAD_CWD' && /is not a directory/.test(e.message));
});

test("writing to stdin of a guardian that is gone: no unhandled EPIPE, an 'error' event if listened", T, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'guardian-epipe-'));
  try {
    for (const listen of [true, false]) {
      const release = join(dir, `release-${listen}`);
      const h = spawnGuarded('true', [], fake('epipe', {
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

test("released is settled when 'exit' is emitted, however the process ended", T, async () => {
  const settledAtExit = (h) => new Promise((resolve) => h.once('exit', () => {
    // already settled: it wins against the next turn of the event loop
    const marker = {};
    Promise.race([h.released, new Promise((r) => setImmediate(() => r(marker)))])
      .then((v) => resolve(v !== marker ? v : null), (e) => resolve(e));
  }));
  // natural end, the stop request, the kill request, Node's timeout option
  const cases = [
    ['ok', (h) => h],
    ['stop', (h) => h.stop()],
    ['killnow', (h) => h.kill()],
    ['killnow', (h) => h, { timeout: 200, killSignal: 'SIGKILL' }],
  ];
  for (const [mode, how, extra = {}] of cases) {
    const h = spawnGuarded('true', [], fake(mode, extra));
    const seen = settledAtExit(h);
    await within(h.spawned, 20000, 'spawned');
    how(h);
    const rel = await within(seen, 20000, `exit of ${mode}`);
    assert.equal(rel?.event, 'released', `${mode}: released was not settled at 'exit'`);
  }
});

test('NODE_DEBUG=treeguardian logs guardian\'s fallbacks and the driver\'s refusals', T, async () => {
  const { spawnSync } = await import('node:child_process');
  const script = `
    import { spawn } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
    const h = spawn('true', [], { guardianPath: ${JSON.stringify(fakeGuardian)}, stdio: 'ignore' });
    await h.released;
    const o = spawn('true', [], { guardianPath: ${JSON.stringify(fakeGuardian)}, stdio: 'ignore',
      env: { ...process.env, FAKE_GUARDIAN_MODE: 'old' } });
    o.on('error', () => {});
    await o.released.catch(() => {});
    spawn('no-such-command-for-the-log', []).on('error', () => {});`;
  const run = (debug) => spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    encoding: 'utf8', env: { ...process.env, FAKE_GUARDIAN_MODE: 'ok', NODE_DEBUG: debug }, timeout: 30000,
  });
  const on = run('treeguardian');
  assert.match(on.stderr, /TREEGUARDIAN \d+: guardian fell back: pidfd_open refused \(ENOSYS\)/);
  assert.match(on.stderr, /TREEGUARDIAN \d+: .*needs guardian 0\.2\.0 or newer/);
  assert.match(on.stderr, /TREEGUARDIAN \d+: spawn no-such-command-for-the-log: ENOENT/);
  assert.doesNotMatch(run('').stderr, /TREEGUARDIAN/);
});

test("guardedCommand's private events directory goes when the host exits, launched or not", T, async () => {
  const { spawnSync } = await import('node:child_process');
  const { existsSync } = await import('node:fs');
  const { dirname } = await import('node:path');
  const script = `
    import { guardedCommand } from ${JSON.stringify(new URL('../index.js', import.meta.url).href)};
    const c = guardedCommand('sh', [], { guardianPath: '/nonexistent/g' });
    console.log(c.args[c.args.indexOf('--events-file') + 1]);`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30000 });
  const file = r.stdout.trim();
  assert.match(file, /treeguardian-.*events\.jsonl$/, r.stderr);
  assert.equal(existsSync(dirname(file)), false, `${dirname(file)} is left behind`);
});
