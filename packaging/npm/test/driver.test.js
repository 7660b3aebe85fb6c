// The driver's own behaviour, against canned event lines and a fake guardian
// (support/fake-guardian.sh). Needs no real guardian binary.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  spawnGuarded, parseEventLine, LineSplitter, guardianArgs, resolveGuardianPath, GuardianError,
} from '../index.js';
import { fakeGuardian, within } from '../support/helpers.js';

const T = { timeout: 30000 };

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

test('resolveGuardianPath: option, then GUARDIAN_BIN, then PATH', () => {
  assert.equal(resolveGuardianPath({ guardianPath: '/a/g' }, { GUARDIAN_BIN: '/b/g' }), '/a/g');
  assert.equal(resolveGuardianPath({}, { GUARDIAN_BIN: '/b/g' }), '/b/g');
  assert.equal(resolveGuardianPath({}, {}), 'guardian');
});

const fake = (mode, extra = {}) => ({
  guardianPath: fakeGuardian,
  env: { ...process.env, FAKE_GUARDIAN_MODE: mode },
  stdio: ['ignore', 'ignore', 'inherit'],
  ...extra,
});

test('promises and events() follow the event lines; exit settles before released', T, async () => {
  const h = spawnGuarded('provider', ['a', 'b c'], fake('ok'));
  assert.equal(typeof h.pid, 'number');
  const order = [];
  h.released.then(() => order.push('released'));
  h.exit.then(() => order.push('exit'));
  h.spawned.then(() => order.push('spawned'));
  const rel = await within(h.released, 20000, 'released');
  assert.deepEqual(order, ['spawned', 'exit', 'released']);
  assert.equal(rel.status, 3);
  assert.equal((await h.spawned).guardian_pid, h.pid);
  assert.equal((await h.exit).code, 3);
  const seen = [];
  for await (const ev of h.events()) seen.push(ev.event);
  assert.deepEqual(seen, ['fallback', 'spawned', 'exit', 'signal', 'future-thing', 'released']);
  // a second iterator replays from the start
  const again = [];
  for await (const ev of h) again.push(ev.event);
  assert.deepEqual(again, seen);
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
