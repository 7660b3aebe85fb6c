//! guardedCommand(): `{command, args}` that run a command under guardian for launchers that spawn
//! the process themselves (the MCP SDK's StdioClientTransport). guardian writes its events to a
//! file in a private directory (--events-file), which this module follows, so `spawned`, `exit`,
//! `released` and the 'event' listeners are reachable here too. A command that cannot run is
//! handed to the launcher as it is, so the launcher's own spawn fails with ENOENT/EACCES.
import { closeSync, existsSync, mkdtempSync, openSync, readSync, rmSync, watch } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { GuardianError, spawnError } from './errors.js';
import { LineSplitter, parseEventLine } from './events.js';
import { resolveCommand, resolveGuardianPath } from './locate.js';
import { debug, describeEvent } from './log.js';
import { COMMAND_KEYS, checkOptions, optionArgs } from './options.js';
import { deferred } from './process.js';
import { DRIVER } from './spec.js';
import { versionProblem } from './version.js';

/** How often the file is looked for until guardian creates it. */
const POLL_MS = 20;
/** Once it exists, inotify (fs.watch) wakes the reader; this slower poll only checks that
 * guardian still runs (and covers a file system without inotify). */
const ALIVE_MS = 250;

/** Followers still open: their private directories go when the host exits (a command that
 * was never launched, or a guardian still running, leaves no directory behind). */
const following = new Set();
let exitHook = false;
function removeAtExit(follower) {
  following.add(follower);
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => { for (const f of following) rmSync(f.dir, { recursive: true, force: true }); });
  }
}

/** Follows one events file until `released`/`error`, or until guardian is gone without them. */
class EventsFile {
  events = [];
  listeners = new Set();
  spawned = deferred();
  exit = deferred();
  released = deferred();
  splitter = new LineSplitter();
  fd = null;
  guardianPid = null;
  watcher = null;
  closed = false;

  constructor(dir, guardianPath) {
    this.dir = dir;
    this.path = join(dir, 'events.jsonl');
    this.guardianPath = guardianPath;
    this.timer = setInterval(() => this.poll(), POLL_MS);
    this.timer.unref?.();
    removeAtExit(this);
  }

  settle(d, ok, v) {
    if (d.settled) return;
    d.settled = true;
    if (ok) d.resolve(v); else d.reject(v);
  }

  fail(err) {
    for (const d of [this.spawned, this.exit, this.released]) this.settle(d, false, err);
    this.close();
  }

  onEvent(ev) {
    this.events.push(ev);
    const line = describeEvent(ev);
    if (line !== null) debug('%s (guardedCommand)', line);
    for (const l of [...this.listeners]) l(ev);
    if (ev.event === 'spawned') {
      this.guardianPid = ev.guardian_pid;
      const old = versionProblem(ev, this.guardianPath);
      if (old) {
        debug('%s', old.message);
        try { process.kill(ev.guardian_pid, 'SIGTERM'); } catch { /* gone */ }
        this.fail(old);
      } else this.settle(this.spawned, true, ev);
    } else if (ev.event === 'exit') this.settle(this.exit, true, ev);
    else if (ev.event === 'released') {
      this.settle(this.released, true, ev);
      this.fail(new GuardianError('guardian released without exit/spawned events', { code: 'NO_RELEASE' }));
    } else if (ev.event === 'error') {
      this.fail(new GuardianError(`guardian: ${ev.message} (status ${ev.status})`, { status: ev.status, event: ev, code: 'ERROR_EVENT' }));
    }
  }

  /** Reads what guardian appended since the last call. */
  poll() {
    if (this.closed) return;
    if (this.fd === null) {
      try { this.fd = openSync(this.path, 'r'); } catch { return; }
      // guardian runs: hold the host's event loop until its end is read (a host awaiting
      // `released` after the launcher closed must see it), but not for a guardian that never
      // names its pid within the ready wait.
      this.opened = Date.now();
      clearInterval(this.timer);
      this.timer = setInterval(() => this.poll(), ALIVE_MS);
      try {
        this.watcher = watch(this.path, () => this.poll());
        this.watcher.on('error', () => {});
      } catch {
        this.watcher = null; // polled at ALIVE_MS only
      }
    }
    if (this.guardianPid === null && Date.now() - this.opened > DRIVER.readyWaitMs) {
      this.timer?.unref?.();
      this.watcher?.unref?.();
    }
    const buf = Buffer.allocUnsafe(65536);
    for (;;) {
      const n = readSync(this.fd, buf, 0, buf.length, null);
      if (n <= 0) break;
      for (const text of this.splitter.push(buf.subarray(0, n))) this.line(text);
      if (this.fd === null) return;
    }
    if (this.guardianPid !== null && !existsSync(`/proc/${this.guardianPid}`)) {
      for (const text of this.splitter.end()) this.line(text);
      this.fail(new GuardianError(`guardian (pid ${this.guardianPid}) ended without releasing the tree`, { code: 'NO_RELEASE' }));
    }
  }

  line(text) {
    let ev;
    try {
      ev = parseEventLine(text);
    } catch (err) {
      ev = { event: 'malformed', ts: 0, line: text, message: err.message };
    }
    if (ev) this.onEvent(ev);
  }

  close() {
    this.closed = true;
    following.delete(this);
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.watcher?.close();
    this.watcher = null;
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function attach(result, follower, failure) {
  const pick = (d) => (failure ? rejected(failure) : d.promise);
  Object.defineProperties(result, {
    spawned: { value: pick(follower?.spawned) },
    exit: { value: pick(follower?.exit) },
    released: { value: pick(follower?.released) },
    received: { get: () => (follower ? follower.events.slice() : []) },
    on: {
      value(name, fn) {
        if (name === 'event' && follower) follower.listeners.add(fn);
        return result;
      },
    },
    off: {
      value(name, fn) {
        follower?.listeners.delete(fn);
        return result;
      },
    },
  });
  return result;
}

function rejected(err) {
  const p = Promise.reject(err);
  p.catch(() => {});
  return p;
}

/**
 * `{command, args}` that run `command args...` under guardian without an events fd: a command
 * prefix for launchers that spawn the process themselves. Takes (command, args, options) or a
 * launcher's parameters object ({command, args, env, cwd, ...}: returned with command and args
 * replaced), so a StdioClientTransport host changes one line:
 *
 *   new StdioClientTransport(guardedCommand({ command: 'npx', args: ['-y', 'some-mcp-server'] }))
 *
 * The result also has `spawned`, `exit` and `released` promises and on('event', fn).
 */
export function guardedCommand(command, args = [], options = {}) {
  let params = null;
  if (command !== null && typeof command === 'object') {
    params = command;
    ({ command } = params);
    args = params.args ?? [];
    options = { ...options };
  }
  if (typeof command !== 'string' || command === '') {
    throw new TypeError('command must be a non-empty string');
  }
  if (!Array.isArray(args)) throw new TypeError('args must be an array of strings');
  checkOptions(options, COMMAND_KEYS, 'guardedCommand()');
  const env = params?.env ?? options.env ?? process.env;
  const cwd = params?.cwd ?? options.cwd;
  const found = resolveCommand(command, env.PATH ?? process.env.PATH, cwd);
  if (found.code !== null) {
    // the launcher's spawn fails with its own ENOENT/EACCES: no guardian in between
    debug('guardedCommand %s: %s; the launcher gets the command as it is', command, found.code);
    return attach({ ...(params ?? {}), command, args: args.map(String) }, null, spawnError(found.code, command, args.map(String)));
  }
  const guardianPath = resolveGuardianPath(options);
  const dir = mkdtempSync(join(tmpdir(), 'treeguardian-'));
  const follower = new EventsFile(dir, guardianPath);
  const eventsFile = options.eventsFile ?? follower.path;
  const out = {
    ...(params ?? {}),
    command: guardianPath,
    args: [...optionArgs(options), '--events-file', eventsFile, '--', command, ...args.map(String)],
  };
  if (options.eventsFile !== undefined) follower.path = options.eventsFile;
  return attach(out, follower, null);
}
