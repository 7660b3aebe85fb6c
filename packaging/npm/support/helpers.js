// Test helpers shared by the Node and Bun runs. Kept outside test/ because
// `node --test test/` runs every .js file below test/ as a test file.

import { existsSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

export const guardianBin = process.env.GUARDIAN_BIN || null;
export const skipNoGuardian = guardianBin ? false : 'GUARDIAN_BIN is not set (no guardian binary to test against)';
/** Why the MCP SDK tests skip (no guardian, or the SDK not installed outside CI), or false.
 * Under CI=true a missing SDK is not a skip: the tests run and fail. */
export const skipNoMcpSdk = (() => {
  if (!guardianBin) return 'GUARDIAN_BIN is not set';
  if (process.env.CI === 'true') return false;
  try {
    createRequire(import.meta.url).resolve('@modelcontextprotocol/sdk/package.json');
    return false;
  } catch {
    return '@modelcontextprotocol/sdk is not installed (test/run.sh installs it)';
  }
})();
export const runtime = typeof globalThis.Bun !== 'undefined' ? `bun ${globalThis.Bun.version}` : `node ${process.version}`;
export const driverScript = fileURLToPath(new URL('./driver.js', import.meta.url));
export const fakeGuardian = fileURLToPath(new URL('./fake-guardian.sh', import.meta.url));

/** A unique tag to put in the argv of every process a test starts. */
export function makeNonce() {
  return `guardian-test-${process.pid}-${randomBytes(6).toString('hex')}`;
}

function readCmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1');
  } catch {
    return null;
  }
}

/** Live (non-zombie) processes whose argv contains `nonce`: [{pid, cmdline}]. */
export function procsWith(nonce) {
  const found = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    const cmd = readCmdline(pid);
    // A zombie's cmdline reads as empty, so it never matches.
    if (cmd && cmd.includes(nonce)) found.push({ pid, cmdline: cmd.split('\0').filter(Boolean).join(' ') });
  }
  return found;
}

/** True while `pid` exists and is not a zombie. */
export function isAlive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `check` until it returns a truthy value; throw after `timeoutMs`. */
export async function waitFor(check, { timeoutMs = 20000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/** Wait until no process carries `nonce`; the error lists the survivors. */
export async function waitGone(nonce, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = procsWith(nonce);
    if (left.length === 0) return;
    if (Date.now() > deadline) {
      throw new Error(`processes still running ${timeoutMs} ms later: ${JSON.stringify(left)}`);
    }
    await sleep(50);
  }
}

/** Check repeatedly for `ms` that every pid stays alive (a test of survival, not a wait). */
export async function assertStaysAlive(pids, ms, what) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    for (const pid of pids) {
      if (!isAlive(pid)) throw new Error(`${what}: pid ${pid} died; survivors ${JSON.stringify(pids.filter(isAlive))}`);
    }
    await sleep(100);
  }
}

/** Settle `promise` within `ms` or reject naming `what`. */
export function within(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Bookkeeping for cleanup: every nonce and child a test starts is recorded,
 * and cleanup() SIGKILLs, by pid, whatever still carries a recorded nonce and
 * every recorded child that has not exited.
 */
export class Tracker {
  nonces = new Set();
  children = new Set();
  leaves = new Set();

  nonce() {
    const n = makeNonce();
    this.nonces.add(n);
    return n;
  }

  child(cp) {
    this.children.add(cp);
    return cp;
  }

  /** A cgroup leaf to kill and remove at cleanup if it is still there (its guardian was killed). */
  leaf(path) {
    this.leaves.add(path);
  }

  async cleanup() {
    for (const cp of this.children) {
      if (cp.exitCode === null && cp.signalCode === null) {
        try { cp.kill('SIGKILL'); } catch { /* gone */ }
      }
    }
    const deadline = Date.now() + 5000;
    for (;;) {
      let left = 0;
      for (const nonce of this.nonces) {
        for (const { pid } of procsWith(nonce)) {
          left++;
          try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
        }
      }
      if (left === 0 || Date.now() > deadline) break;
      await sleep(50);
    }
    for (const leaf of this.leaves) {
      if (!existsSync(leaf)) continue;
      try { writeFileSync(`${leaf}/cgroup.kill`, '1'); } catch { /* gone or old kernel */ }
      const until = Date.now() + 5000;
      while (Date.now() < until) {
        try {
          rmdirSync(leaf);
          break;
        } catch (e) {
          if (e.code === 'ENOENT') break;
          await sleep(50);
        }
      }
    }
  }
}

/**
 * The argv of a provider whose every process carries `nonce`:
 *   `<nonce>-prov`: the provider itself (bash exec -a),
 *   `<nonce>-esc`:  a child that cleared its environment and called setsid.
 * providerExits: the provider exits at once after forking the escaper.
 */
export function escapingProvider(nonce, { providerExits = true, ignoreTerm = false } = {}) {
  const escaper = 'exec -a "$0" sleep 300';
  const trap = ignoreTerm ? "trap '' TERM; " : '';
  const tail = providerExits ? 'exit 0' : `${trap}exec -a "$0-prov" sleep 300`;
  // $0 = nonce, $1 = escaper script. env -i clears the environment: the inner
  // bash runs with its built-in default PATH.
  const script = `${trap}setsid env -i "$BASH" -c "$1" "$0-esc" & ${tail}`;
  return { command: 'bash', args: ['-c', script, nonce, escaper] };
}

/** Spawn a driver script (with this very runtime) and read its first stdout line as JSON. */
export function startDriver(tracker, mode, nonce, extraEnv = {}) {
  const { command, args } = escapingProvider(nonce, { providerExits: false });
  const cp = tracker.child(
    spawn(process.execPath, [driverScript, mode], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: {
        ...process.env,
        ...extraEnv,
        GUARDIAN_TEST_PROVIDER: JSON.stringify([command, ...args]),
      },
    }),
  );
  const lines = [];
  let buf = '';
  const waiters = [];
  cp.stdout.setEncoding('utf8');
  cp.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
      for (const w of waiters.splice(0)) w();
    }
  });
  const exited = new Promise((resolve) => cp.on('exit', (code, signal) => {
    for (const w of waiters.splice(0)) w();
    resolve({ code, signal });
  }));
  let exitedFlag = false;
  exited.then(() => { exitedFlag = true; });
  async function nextLine(ms, what) {
    const idx = lines.length ? 0 : -1;
    if (idx === 0) return JSON.parse(lines.shift());
    await within(new Promise((r) => waiters.push(r)), ms, what);
    if (lines.length) return JSON.parse(lines.shift());
    if (exitedFlag || cp.exitCode !== null || cp.signalCode !== null) {
      throw new Error(`driver exited (${cp.exitCode ?? cp.signalCode}) before ${what}`);
    }
    return nextLine(ms, what);
  }
  return { cp, nextLine, exited };
}
