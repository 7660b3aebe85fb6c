// Node's own child_process expectations, run side by side: each case runs once against
// child_process.spawn and once against the driver's spawn, with the same assertions (kill
// status, spawn errors, exitCode/signalCode/killed, Node's timeout, the AbortSignal). A host
// that changes only its import keeps this behaviour.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn as nodeSpawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { spawn as guardedSpawn } from '../index.js';
import { makeNonce, procsWith, skipNoGuardian, waitGone, within } from '../support/helpers.js';

const T = { timeout: 60000, skip: skipNoGuardian };
function hasKillRequest() {
  try {
    return execFileSync(process.env.GUARDIAN_BIN, ['--help'], { encoding: 'utf8' }).includes('kill-signal');
  } catch {
    return false;
  }
}
const KILL_TODO = skipNoGuardian || hasKillRequest() ? false
  : "this guardian lacks the kill request (--kill-signal, the stop helper's change): kill() cannot give SIGKILL";

const SPAWNS = [['child_process', nodeSpawn], ['treeguardian', guardedSpawn]];

/** [code, signal] of 'exit', and the 'error' events seen until 'close'. */
function outcome(cp) {
  return new Promise((resolve) => {
    const errors = [];
    let exit = null;
    cp.on('error', (e) => errors.push(e));
    cp.on('exit', (code, signal) => { exit = [code, signal]; });
    cp.on('close', (code, signal) => resolve({ exit, close: [code, signal], errors }));
  });
}

const spawnedOnce = (cp) => new Promise((resolve) => cp.once('spawn', resolve));

for (const [name, spawn] of SPAWNS) {
  const todo = name === 'treeguardian' ? KILL_TODO : false;

  test(`[${name}] kill() ends the process with SIGKILL: signalCode, killed, true at once`, { ...T, todo }, async () => {
    const nonce = makeNonce();
    const cp = spawn('sh', ['-c', `trap '' TERM; sleep 30; : ${nonce}`], { stdio: 'ignore' });
    const done = outcome(cp);
    await within(spawnedOnce(cp), 20000, 'spawn');
    assert.equal(cp.killed, false);
    assert.equal(cp.kill('SIGKILL'), true);
    assert.equal(cp.killed, true);
    const r = await within(done, 20000, 'close');
    assert.deepEqual(r.exit, [null, 'SIGKILL']);
    assert.deepEqual(r.close, [null, 'SIGKILL']);
    assert.equal(cp.exitCode, null);
    assert.equal(cp.signalCode, 'SIGKILL');
    assert.equal(cp.kill(), false, 'kill() after the end');
    await waitGone(nonce);
  });

  test(`[${name}] kill('SIGTERM'): signalCode SIGTERM`, T, async () => {
    const cp = spawn('sleep', ['30'], { stdio: 'ignore' });
    const done = outcome(cp);
    await within(spawnedOnce(cp), 20000, 'spawn');
    assert.equal(cp.kill('SIGTERM'), true);
    const r = await within(done, 20000, 'close');
    assert.deepEqual(r.exit, [null, 'SIGTERM']);
    assert.equal(cp.signalCode, 'SIGTERM');
    assert.equal(cp.killed, true);
  });

  test(`[${name}] a normal exit: exitCode, no signal, stdout read`, T, async () => {
    const cp = spawn('sh', ['-c', 'echo out; exit 3']);
    let out = '';
    cp.stdout.on('data', (d) => { out += d; });
    const r = await within(outcome(cp), 20000, 'close');
    assert.deepEqual(r.exit, [3, null]);
    assert.deepEqual(r.close, [3, null]);
    assert.equal(cp.exitCode, 3);
    assert.equal(cp.signalCode, null);
    assert.equal(cp.killed, false);
    assert.equal(out, 'out\n');
    assert.equal(typeof cp.pid, 'number');
    assert.deepEqual(cp.spawnargs, ['sh', '-c', 'echo out; exit 3']);
    assert.equal(cp.spawnfile, 'sh');
  });

  test(`[${name}] a missing command: an ENOENT 'error' event, no 'exit', pid undefined`, T, async () => {
    const cmd = `no-such-command-${makeNonce()}`;
    const cp = spawn(cmd, ['a']);
    assert.equal(cp.pid, undefined);
    const r = await within(outcome(cp), 20000, 'close');
    assert.equal(r.errors.length, 1);
    const [e] = r.errors;
    assert.equal(e.code, 'ENOENT');
    assert.equal(e.errno, -2);
    assert.equal(e.syscall, `spawn ${cmd}`);
    assert.equal(e.path, cmd);
    assert.deepEqual(e.spawnargs, ['a']);
    // Bun's own child_process words it otherwise ('Executable not found in $PATH'): the driver
    // gives whatever the runtime's child_process gives
    if (typeof globalThis.Bun === 'undefined') assert.equal(e.message, `spawn ${cmd} ENOENT`);
    assert.equal(r.exit, null);
    assert.deepEqual([r.close[0], r.close[1] ?? null], [-2, null]); // Bun's close gives undefined for null
    if (typeof globalThis.Bun === 'undefined') assert.equal(cp.exitCode, -2); // Bun's own is null
  });

  test(`[${name}] a command that is not executable: an EACCES 'error' event`, T, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'guardian-eacces-'));
    try {
      const file = join(dir, 'not-executable');
      writeFileSync(file, '#!/bin/sh\n');
      chmodSync(file, 0o644);
      const r = await within(outcome(spawn(file, [])), 20000, 'close');
      assert.equal(r.errors[0]?.code, 'EACCES');
      assert.equal(r.errors[0]?.syscall, `spawn ${file}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test(`[${name}] shell: the command line runs through /bin/sh -c`, T, async () => {
    const cp = spawn('echo "$0" hi && exit 4', [], { shell: true });
    let out = '';
    cp.stdout.on('data', (d) => { out += d; });
    const r = await within(outcome(cp), 20000, 'close');
    assert.deepEqual(r.exit, [4, null]);
    assert.equal(out, '/bin/sh hi\n');
    assert.equal(cp.spawnfile, '/bin/sh');
    assert.deepEqual(cp.spawnargs, ['/bin/sh', '-c', 'echo "$0" hi && exit 4']);
  });

  test(`[${name}] timeout: killSignal after that many ms`, T, async () => {
    const cp = spawn('sleep', ['30'], { stdio: 'ignore', timeout: 200, killSignal: 'SIGINT' });
    const r = await within(outcome(cp), 20000, 'close');
    assert.deepEqual(r.exit, [null, 'SIGINT']);
    assert.equal(cp.killed, true);
  });

  test(`[${name}] signal: an AbortSignal kills with SIGTERM and emits an AbortError`, T, async () => {
    const ac = new AbortController();
    const nonce = makeNonce();
    const cp = spawn('sh', ['-c', `sleep 30; : ${nonce}`], { stdio: 'ignore', signal: ac.signal });
    const done = outcome(cp);
    await within(spawnedOnce(cp), 20000, 'spawn');
    ac.abort();
    const r = await within(done, 20000, 'close');
    assert.equal(r.errors[0]?.name, 'AbortError');
    assert.equal(r.errors[0]?.code, 'ABORT_ERR');
    assert.deepEqual(r.exit, [null, 'SIGTERM']);
    await waitGone(nonce);
  });

  test(`[${name}] an already aborted signal`, T, async () => {
    const cp = spawn('sleep', ['30'], { stdio: 'ignore', signal: AbortSignal.abort() });
    const r = await within(outcome(cp), 20000, 'close');
    assert.equal(r.errors[0]?.name, 'AbortError');
    assert.deepEqual(r.exit, [null, 'SIGTERM']);
    assert.deepEqual(procsWith('sleep 30').filter((p) => p.pid === cp.pid), []);
  });
}

test('the driver refuses an unknown option, where child_process ignores it', () => {
  assert.throws(() => guardedSpawn('true', [], { graec: '1s' }), (e) => e.code === 'ERR_INVALID_ARG_VALUE' && /did you mean 'grace'/.test(e.message));
});
