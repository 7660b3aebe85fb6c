// The driver against the real guardian binary ($GUARDIAN_BIN). Every process a
// test starts carries a unique nonce in its argv; "gone" means no process in
// /proc has that nonce any more. Waits poll with generous deadlines; cleanup
// kills leftovers by pid even when a test fails.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { spawnGuarded, GuardianError, monotonicNow } from '../index.js';
import {
  guardianBin, skipNoGuardian, runtime, Tracker, procsWith, isAlive, waitFor, waitGone,
  assertStaysAlive, within, escapingProvider, startDriver,
} from '../support/helpers.js';

const tracker = new Tracker();
after(() => tracker.cleanup());

const T = { timeout: 90000, skip: skipNoGuardian };
// The kill request (GUARDIAN_KILL_SIGNAL, guardian 0.2.0): against a guardian without it, the
// kill tests run as todo (reported, not counted) and name why.
const helpText = guardianBinHelp();
const KILL = helpText.includes('kill-signal') ? T
  : { ...T, todo: "this guardian lacks the kill request (--kill-signal, the stop helper's change)" };
function guardianBinHelp() {
  try {
    return execFileSync(process.env.GUARDIAN_BIN, ['--help'], { encoding: 'utf8' });
  } catch (err) {
    return String(err.stdout ?? '');
  }
}
const EVENT_MS = 20000;

function guarded(command, args, options = {}) {
  const h = spawnGuarded(command, args, { stdio: ['ignore', 'ignore', 'inherit'], ...options });
  tracker.child(h.child);
  h.spawned.then((ev) => ev.cgroup && tracker.leaf(ev.cgroup), () => {});
  return h;
}

// guardian's own argv carries the nonce too; it may still be exiting when
// `released` arrives (released is written, then guardian exits), so the tree
// check leaves guardian out and its exit is awaited separately.
// guardian is two processes outside PID 1 (issue 24): the one the driver started (h.pid, the
// sentinel) and guardian itself, its child running the same command line. Neither is part of
// the tree.
const cmdlineOf = (pid) => {
  try { return readFileSync(`/proc/${pid}/cmdline`, 'latin1'); } catch { return null; }
};
const guardianPids = (h) => {
  const own = cmdlineOf(h.pid);
  let children = [];
  try {
    children = readFileSync(`/proc/${h.pid}/task/${h.pid}/children`, 'latin1').split(' ').filter(Boolean).map(Number);
  } catch { /* the sentinel is gone, and guardian with it */ }
  return [h.pid, ...children.filter((c) => own !== null && cmdlineOf(c) === own)];
};
const treeOf = (nonce, h) => {
  const own = guardianPids(h);
  return procsWith(nonce).filter((p) => !own.includes(p.pid));
};
const guardianExit = (h) => within(new Promise((r) => (h.child.exitCode !== null || h.child.signalCode !== null
  ? r(h.child.exitCode ?? h.child.signalCode) : h.child.on('exit', (c, s) => r(c ?? s)))), EVENT_MS, 'guardian to exit');

const hasNonce = (nonce, suffix) => procsWith(nonce).some((p) => p.cmdline.startsWith(`${nonce}${suffix} `));

test(`[${runtime}] a setsid, env-clearing child of a fast-exiting provider is gone at released`, T, async () => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: true });
  const h = guarded(command, args);
  const spawned = await within(h.spawned, EVENT_MS, 'spawned');
  assert.equal(spawned.guardian_pid, h.pid);
  assert.ok(Number.isInteger(spawned.pid) && spawned.pid !== h.pid, `provider pid ${spawned.pid}`);
  const exit = await within(h.exit, EVENT_MS, 'exit');
  assert.equal(exit.code, 0);
  assert.equal(exit.signal, null);
  const rel = await within(h.released, EVENT_MS, 'released');
  assert.deepEqual(treeOf(nonce, h), [], 'no process of the tree may outlive released');
  assert.equal(rel.status, 0);
  // The escaper existed (it was forked before the provider exited), so
  // guardian must have stopped it.
  assert.ok(rel.signalled + rel.killed >= 1, `released counts no stopped descendant: ${JSON.stringify(rel)}`);
  assert.ok(rel.reaped >= 1, `released counts no reaped descendant: ${JSON.stringify(rel)}`);
  assert.equal(await guardianExit(h), 0);
  await waitGone(nonce, EVENT_MS);
});

test(`[${runtime}] exit arrives before released, released is the last event`, T, async () => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: true });
  const h = guarded(command, args);
  const order = [];
  h.released.then(() => order.push('released'), () => order.push('released-rejected'));
  h.exit.then(() => order.push('exit'), () => order.push('exit-rejected'));
  await within(h.released, EVENT_MS, 'released');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(order, ['exit', 'released']);
  const names = [];
  for await (const ev of h.events()) {
    assert.equal(typeof ev.ts, 'number', `event without numeric ts: ${JSON.stringify(ev)}`);
    names.push(ev.event);
  }
  assert.ok(names.includes('spawned'), names.join(','));
  assert.ok(names.indexOf('spawned') < names.indexOf('exit'), names.join(','));
  assert.ok(names.indexOf('exit') < names.indexOf('released'), names.join(','));
  assert.equal(names.at(-1), 'released', names.join(','));
  assert.equal(names.filter((n) => n === 'released').length, 1);
  const tss = h.received.map((e) => e.ts);
  assert.deepEqual(tss, [...tss].sort((a, b) => a - b), 'ts is monotonic');
});

test(`[${runtime}] stop() tears a running tree down; the provider dies of SIGTERM`, T, async () => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: false });
  const h = guarded(command, args, { grace: '5s' });
  await within(h.spawned, EVENT_MS, 'spawned');
  await waitFor(() => hasNonce(nonce, '-esc') && hasNonce(nonce, '-prov'), { what: 'provider and escaper to run' });
  const rel = await within(h.stop(), EVENT_MS, 'released after stop()');
  assert.deepEqual(treeOf(nonce, h), [], 'no process of the tree may outlive released');
  const exit = await h.exit;
  assert.equal(exit.signal, 'SIGTERM');
  assert.equal(exit.code, null);
  assert.equal(rel.status, 143);
  assert.equal(await guardianExit(h), 'SIGTERM', 'guardian ends as the provider did (released.status 143)');
  assert.ok(rel.signalled + rel.killed >= 1, JSON.stringify(rel));
});

test(`[${runtime}] stop() right after spawnGuarded is a stop request: released every time, nothing left`, T, async () => {
  // Sent at once, the SIGTERM would reach guardian in the instants after its exec, before it
  // reads signals as requests, and end it with no released; the driver holds it until
  // guardian's first event.
  for (let round = 0; round < 10; round++) {
    const nonce = tracker.nonce();
    const { command, args } = escapingProvider(nonce, { providerExits: false });
    const h = guarded(command, args, { grace: '5s' });
    const rel = await within(h.stop(), EVENT_MS, `released after an immediate stop() (round ${round})`);
    assert.equal(typeof rel.status, 'number', JSON.stringify(rel));
    await guardianExit(h);
    await waitGone(nonce);
    assert.deepEqual(procsWith(nonce), [], `round ${round}: nothing of the tree may be left`);
  }
});

test(`[${runtime}] the stop is bounded: a tree that ignores SIGTERM is killed after the grace`, T, async () => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: false, ignoreTerm: true });
  const h = guarded(command, args, { grace: 300 });
  await within(h.spawned, EVENT_MS, 'spawned');
  await waitFor(() => hasNonce(nonce, '-esc') && hasNonce(nonce, '-prov'), { what: 'provider and escaper to run' });
  const t0 = Date.now();
  const rel = await within(h.stop(), EVENT_MS, 'released after stop()');
  assert.deepEqual(treeOf(nonce, h), [], 'no process of the tree may outlive released');
  const exit = await h.exit;
  assert.equal(exit.signal, 'SIGKILL', JSON.stringify(exit));
  assert.equal(rel.status, 137);
  assert.equal(await guardianExit(h), 'SIGKILL', 'guardian ends as the provider did (released.status 137)');
  assert.ok(rel.killed >= 1, `expected SIGKILLed descendants: ${JSON.stringify(rel)}`);
  assert.ok(Date.now() - t0 >= 250, 'grace was honoured before SIGKILL');
  const names = h.received.map((e) => e.event);
  assert.ok(names.includes('stopping'), names.join(','));
});

test(`[${runtime}] concurrent trees are isolated: stopping one leaves the other running`, T, async () => {
  const a = tracker.nonce();
  const b = tracker.nonce();
  const ha = guarded(...Object.values(escapingProvider(a, { providerExits: false })));
  const hb = guarded(...Object.values(escapingProvider(b, { providerExits: false })));
  await within(Promise.all([ha.spawned, hb.spawned]), EVENT_MS, 'both spawned');
  await waitFor(() => hasNonce(a, '-esc') && hasNonce(a, '-prov') && hasNonce(b, '-esc') && hasNonce(b, '-prov'),
    { what: 'both trees to run' });
  const treeB = procsWith(b).map((p) => p.pid);
  await within(ha.stop(), EVENT_MS, 'released of the first tree');
  assert.deepEqual(treeOf(a, ha), []);
  assert.ok(treeB.every(isAlive), `the second tree lost processes: ${JSON.stringify(procsWith(b))}`);
  assert.ok(!hb.received.some((e) => e.event === 'exit' || e.event === 'stopping'), JSON.stringify(hb.received));
  await within(hb.stop(), EVENT_MS, 'released of the second tree');
  assert.deepEqual(treeOf(b, hb), []);
});

test(`[${runtime}] timeout stops the tree and guardian exits 124`, T, async () => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: false });
  const h = guarded(command, args, { guardianTimeout: 500, grace: '1s' });
  const rel = await within(h.released, EVENT_MS, 'released after the timeout');
  assert.deepEqual(treeOf(nonce, h), [], 'no process of the tree may outlive released');
  assert.equal(rel.status, 124);
  assert.equal(await guardianExit(h), 124, "guardian's exit status is released.status");
  const stopping = h.received.find((e) => e.event === 'stopping');
  assert.equal(stopping?.reason, 'timeout', JSON.stringify(h.received));
});

test(`[${runtime}] a provider that does not exist: ENOENT at spawn, as child_process gives it; nothing started`, T, async () => {
  const nonce = tracker.nonce();
  const h = guarded(`/nonexistent/${nonce}`, []);
  const err = await within(new Promise((r) => h.once('error', r)), EVENT_MS, "the 'error' event");
  assert.equal(err.code, 'ENOENT');
  assert.equal(err.syscall, `spawn /nonexistent/${nonce}`);
  assert.equal(h.pid, undefined, 'guardian was not started');
  await assert.rejects(h.released, (e) => e === err);
  await assert.rejects(h.spawned, (e) => e === err);
  assert.deepEqual(procsWith(nonce), []);
});

test(`[${runtime}] SIGKILL of the driver process: the tree goes`, T, async () => {
  const nonce = tracker.nonce();
  const d = startDriver(tracker, 'main', nonce);
  const info = await d.nextLine(EVENT_MS, 'the driver to report spawned');
  await waitFor(() => hasNonce(nonce, '-esc') && hasNonce(nonce, '-prov'), { what: 'provider and escaper to run' });
  assert.ok(isAlive(info.guardianPid));
  d.cp.kill('SIGKILL');
  await within(d.exited, EVENT_MS, 'the driver to die');
  await waitGone(nonce, 20000);
  // guardian's argv carries the nonce, but while it is exiting its cmdline
  // already reads empty: wait for the pid itself too.
  await waitFor(() => !isAlive(info.guardianPid), { timeoutMs: 20000, what: `guardian ${info.guardianPid} to exit after its tree` });
});

test(`[${runtime}] a driver that just ends (handle unref'd) takes the tree with it`, T, async () => {
  const nonce = tracker.nonce();
  const d = startDriver(tracker, 'exit', nonce);
  const info = await d.nextLine(EVENT_MS, 'the driver to report spawned');
  const end = await within(d.exited, EVENT_MS, 'the driver to end by itself after unref()');
  assert.deepEqual(end, { code: 0, signal: null });
  await waitGone(nonce, 20000);
  // guardian's argv carries the nonce, but while it is exiting its cmdline
  // already reads empty: wait for the pid itself too.
  await waitFor(() => !isAlive(info.guardianPid), { timeoutMs: 20000, what: `guardian ${info.guardianPid} to exit after its tree` });
});

test(`[${runtime}] guardian spawned from a worker_thread survives the worker, goes with the process`, T, async () => {
  const nonce = tracker.nonce();
  const d = startDriver(tracker, 'worker', nonce);
  const info = await d.nextLine(EVENT_MS, 'the driver to report the worker exited');
  assert.equal(info.workerExited, true);
  const tree = await waitFor(() => {
    const esc = procsWith(nonce).find((p) => p.cmdline.startsWith(`${nonce}-esc `));
    const prov = procsWith(nonce).find((p) => p.cmdline.startsWith(`${nonce}-prov `));
    return esc && prov ? [esc.pid, prov.pid] : null;
  }, { what: 'provider and escaper to run' });
  // The thread that forked guardian is gone but the process lives: a
  // PR_SET_PDEATHSIG-only parent watch would tear the tree down here.
  await assertStaysAlive([info.guardianPid, info.providerPid, ...tree], 2000, 'after the worker exited');
  d.cp.kill('SIGKILL');
  await within(d.exited, EVENT_MS, 'the driver to die');
  await waitGone(nonce, 20000);
  // guardian's argv carries the nonce, but while it is exiting its cmdline
  // already reads empty: wait for the pid itself too.
  await waitFor(() => !isAlive(info.guardianPid), { timeoutMs: 20000, what: `guardian ${info.guardianPid} to exit after its tree` });
});

// --- kill now (guardian's kill-now rule, docs/contract.md) ------------------
// A tree that ignores SIGTERM under a 60 s grace: only the kill-now path can
// end it within the test's deadline, and the driver must do it without ever
// signalling guardian with SIGKILL (guardian exits on its own, status 137).

async function killNowCase(t, how, options = {}) {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: false, ignoreTerm: true });
  const h = guarded(command, args, { grace: '60s', ...options });
  const spawned = await within(h.spawned, EVENT_MS, 'spawned');
  if (options.cgroup && spawned.mode !== 'cgroup') {
    h.kill();
    await within(h.released, 90000, 'released');
    return { skipped: `cgroup mode is not available here (mode ${spawned.mode})` };
  }
  await waitFor(() => hasNonce(nonce, '-esc') && hasNonce(nonce, '-prov'), { what: 'provider and escaper to run' });
  const sent = how(h);
  const rel = await within(sent === true ? h.released : sent, EVENT_MS, 'released after the kill (a 60 s grace must not be waited for)');
  assert.deepEqual(treeOf(nonce, h), [], 'no process of the tree may outlive released');
  const reasons = h.received.filter((e) => e.event === 'stopping').map((e) => e.reason);
  assert.ok(reasons.includes('kill-request'), `no stopping/kill-request: ${JSON.stringify(h.received)}`);
  // guardian released the tree (a guardian SIGKILLed by someone sends no `released`), then
  // ended as its provider did: by SIGKILL.
  assert.equal(await guardianExit(h), 'SIGKILL', 'guardian ended as its SIGKILLed provider did, after released');
  await within(new Promise((r) => (h.signalCode !== null ? r() : h.once('exit', r))), EVENT_MS, "the handle's 'exit'");
  assert.equal(h.signalCode, 'SIGKILL', "the driver's status is SIGKILL, as child_process's after kill()");
  assert.equal(h.killed, true);
  assert.equal(rel.status, 137);
  return { h, rel, spawned };
}

test(`[${runtime}] kill() kills a SIGTERM-ignoring tree now, through guardian (needs the kill request)`, KILL, async (t) => {
  await killNowCase(t, (h) => h.kill());
});

test(`[${runtime}] stop('SIGKILL') never SIGKILLs guardian: the tree goes (needs the kill request)`, KILL, async (t) => {
  await killNowCase(t, (h) => h.stop('SIGKILL'));
});

test(`[${runtime}] stop({timeout}) ends a long grace when the timeout passes (needs the kill request)`, KILL, async (t) => {
  await killNowCase(t, (h) => h.stop({ timeout: 500 }));
});

test(`[${runtime}] cgroup: true, kill(): the leaf is emptied and removed (needs the kill request)`, KILL, async (t) => {
  const r = await killNowCase(t, (h) => h.kill(), { cgroup: true });
  if (r.skipped) {
    t.diagnostic?.(r.skipped);
    return;
  }
  assert.equal(r.spawned.mode, 'cgroup');
  assert.equal(typeof r.spawned.cgroup, 'string');
  assert.ok(!existsSync(r.spawned.cgroup), `the leaf ${r.spawned.cgroup} is still there`);
  assert.equal(r.rel.cgroup, r.spawned.cgroup);
});

// --- the host never crashes -------------------------------------------------

test(`[${runtime}] a mistyped command: ENOENT at spawn, writes to stdin never crash the host`, T, async () => {
  const nonce = tracker.nonce();
  const h = guarded(`no-such-command-${nonce}`, [], { stdio: ['pipe', 'pipe', 'ignore'] });
  const errors = [];
  h.on('error', (e) => errors.push(e));
  // An MCP client writes its initialize request at once, and keeps writing.
  const line = `${JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { nonce } })}\n`;
  const writes = [];
  const pump = setInterval(() => writes.push(new Promise((r) => h.stdin.write(line, r))), 1);
  try {
    await assert.rejects(within(h.released, EVENT_MS, 'released rejection'), (e) => e.code === 'ENOENT');
  } finally {
    clearInterval(pump);
  }
  await within(Promise.all(writes), EVENT_MS, 'every write callback');
  assert.ok(errors.some((e) => e.code === 'ENOENT' && e.syscall === `spawn no-such-command-${nonce}`), "ENOENT was an 'error' event");
});

test(`[${runtime}] a cwd that does not exist is named, guardian is not blamed`, T, async () => {
  const dir = `/nonexistent/${tracker.nonce()}`;
  const h = guarded('true', [], { cwd: dir });
  h.on('error', () => {});
  await assert.rejects(within(h.released, EVENT_MS, 'released rejection'), (e) => {
    assert.ok(e.message.includes(dir), e.message);
    assert.ok(!/spawn .*guardian ENOENT/.test(e.message), e.message);
    assert.equal(e.code, 'BAD_CWD');
    return true;
  });
});

test(`[${runtime}] guardianPid is guardian's, providerPid the provider's`, T, async () => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: false });
  const h = guarded(command, args);
  const spawned = await within(h.spawned, EVENT_MS, 'spawned');
  assert.equal(h.guardianPid, spawned.guardian_pid);
  assert.equal(h.providerPid, spawned.pid);
  assert.notEqual(h.providerPid, h.guardianPid);
  await waitFor(() => procsWith(nonce).some((p) => p.pid === h.providerPid), { what: 'the provider to carry the nonce' });
  await within(h.stop(), EVENT_MS, 'released');
});

test(`[${runtime}] monotonicNow() reads the clock of the events' ts`, T, async () => {
  const before = monotonicNow();
  const h = guarded('true', []);
  const spawned = await within(h.spawned, EVENT_MS, 'spawned');
  const after = monotonicNow();
  await within(h.released, EVENT_MS, 'released');
  // ts has microseconds; allow for that rounding only.
  assert.ok(before - 1e-5 <= spawned.ts && spawned.ts <= after + 1e-5, `${before} <= ${spawned.ts} <= ${after}`);
});

test(`[${runtime}] cgroup: true, guardian killed from outside: the driver kills the leaf`, T, async (t) => {
  const nonce = tracker.nonce();
  const { command, args } = escapingProvider(nonce, { providerExits: false, ignoreTerm: true });
  const h = guarded(command, args, { grace: '60s', cgroup: true });
  const spawned = await within(h.spawned, EVENT_MS, 'spawned');
  if (spawned.mode !== 'cgroup') {
    h.kill();
    await within(h.released, 90000, 'released');
    t.diagnostic?.(`cgroup mode is not available here (mode ${spawned.mode})`);
    return;
  }
  await waitFor(() => hasNonce(nonce, '-esc') && hasNonce(nonce, '-prov'), { what: 'provider and escaper to run' });
  // The test plays the OOM killer, which kills every process of the address space guardian
  // and its sentinel share: guardian dies without a teardown (its own process first, so the
  // sentinel's death is never taken for a parent death).
  for (const pid of guardianPids(h).reverse()) process.kill(pid, 'SIGKILL');
  await assert.rejects(within(h.released, EVENT_MS, 'released rejection'), (e) => {
    assert.equal(e.signal, 'SIGKILL');
    assert.ok(e.message.includes(`${spawned.cgroup}/cgroup.kill`), e.message);
    return true;
  });
  await waitGone(nonce, EVENT_MS);
  // the driver's `guardian sweep --leaf` empties and removes the leaf
  await waitFor(() => !existsSync(spawned.cgroup), { what: 'guardian sweep --leaf to remove the leaf' });
});
