// treeguardian: start a provider under guardian and follow its JSON events.
//
// guardian's contract (docs/contract.md in the guardian repository) fixes the
// command line, the exit codes and the event lines this module relies on:
// guardian writes one JSON object per line to the fd given by --events-fd;
// `exit` always precedes `released`; `released` (or `error`) is the last line,
// then the fd is closed.
//
// Only node: built-ins are used, so the module runs unchanged in Node (>= 20)
// and Bun. The driver never sends SIGKILL to guardian: a SIGKILLed guardian
// cannot finish the teardown. kill() asks guardian to kill the tree instead.

import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { accessSync, constants as fsConstants, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { fileURLToPath } from 'node:url';

/** The fd guardian writes its events to, in the child. Node maps stdio[3] to fd 3. */
export const EVENTS_FD = 3;

/** Error raised (as a promise rejection) when guardian fails or ends without `released`. */
export class GuardianError extends Error {
  constructor(message, details = {}) {
    super(message);
    this.name = 'GuardianError';
    /** guardian's status from an `error` event (125/126/127), else its exit code, else null. */
    this.status = details.status ?? null;
    /** guardian's own exit code, when it exited. */
    this.exitCode = details.exitCode ?? null;
    /** signal that ended guardian: it was killed, or it died of the provider's signal. */
    this.signal = details.signal ?? null;
    /** the `error` event guardian emitted, if any. */
    this.event = details.event ?? null;
    /** a short machine-readable code: 'GUARDIAN_NOT_FOUND', 'BAD_CWD', 'SPAWN_FAILED', 'ERROR_EVENT', 'NO_RELEASE'. */
    this.code = details.code ?? null;
    if (details.cause !== undefined) this.cause = details.cause;
  }
}

/**
 * Parse one event line. Returns the event object, or null for a blank line.
 * Throws a SyntaxError/TypeError for a line that is not a JSON object with a
 * string `event` field.
 */
export function parseEventLine(line) {
  const text = line.endsWith('\r') ? line.slice(0, -1) : line;
  if (text.trim() === '') return null;
  const value = JSON.parse(text);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(`guardian event line is not a JSON object: ${text}`);
  }
  if (typeof value.event !== 'string') {
    throw new TypeError(`guardian event line has no "event" field: ${text}`);
  }
  return value;
}

/**
 * Incremental line splitter: feed it chunks (Buffer or string), get complete
 * lines back. Multi-byte UTF-8 sequences split across chunks are kept intact.
 */
export class LineSplitter {
  #decoder = new StringDecoder('utf8');
  #rest = '';

  /** Feed a chunk; returns the complete lines it finished (without '\n'). */
  push(chunk) {
    const text = this.#rest + (typeof chunk === 'string' ? chunk : this.#decoder.write(chunk));
    const lines = text.split('\n');
    this.#rest = lines.pop();
    return lines;
  }

  /** End of input; returns the unterminated last line, if any. */
  end() {
    const text = this.#rest + this.#decoder.end();
    this.#rest = '';
    return text === '' ? [] : [text];
  }
}

function duration(name, value) {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) {
      throw new TypeError(`${name} must be a non-negative number of milliseconds, got ${value}`);
    }
    return `${Math.ceil(value)}ms`;
  }
  if (typeof value === 'string' && value.trim() !== '') return value.trim();
  throw new TypeError(`${name} must be a duration string ('2s', '500ms') or milliseconds, got ${value}`);
}

/**
 * Translate the camelCase options into guardian's command-line options
 * (everything before `--`). Exported for tests and for callers that build
 * their own command line.
 */
export function guardianArgs(options = {}) {
  return ['--events-fd', String(EVENTS_FD), ...optionArgs(options)];
}

/**
 * guardian's options this driver passes, in command-line order: the camelCase
 * name, guardian's long option, its kind (as spec/options.json names kinds) and,
 * for a choice, its words; for a count, its maximum. test/options.test.js checks
 * this table against spec/options.json (generated from guardian's one option
 * table), and that every guardian option is here or in NOT_PASSED.
 */
export const OPTIONS = Object.freeze([
  ['grace', 'grace', 'duration'],
  ['stopSignal', 'stop-signal', 'signal'],
  ['forwardTo', 'forward-to', 'choice', ['provider', 'group']],
  ['timeout', 'timeout', 'duration'],
  ['waitDescendants', 'wait-descendants', 'flag'],
  ['cgroup', 'cgroup', 'path'],
  ['noParentWatch', 'no-parent-watch', 'flag'],
  ['verbose', 'verbose', 'count', 3],
  ['quiet', 'quiet', 'flag'],
].map(([key, long, kind, extra]) => Object.freeze({ key, long, kind, extra })));

/** guardian options the driver does not take as camelCase options, and why (pass them in guardianArgs). */
export const NOT_PASSED = Object.freeze({
  'events-fd': 'the driver sets it: the events reach it on fd 3',
  'no-sentinel': 'the driver relies on the sentinel (a SIGKILL of the guardian it started still tears the tree down); pass it in guardianArgs to give that up',
  'events-file': 'the driver reads events on fd 3, which the events fd option gives it; a file is for hosts that cannot pass an fd',
  'memory-max': 'a cgroup limit: pass it in guardianArgs',
  'pids-max': 'a cgroup limit: pass it in guardianArgs',
  'cpu-max': 'a cgroup limit: pass it in guardianArgs',
  help: 'prints text; not for a driver',
  version: 'prints text; not for a driver',
});

/** One option's value as guardian's arguments (none when it is off), by its kind. */
const BY_KIND = {
  duration: (o, v) => [`--${o.long}`, duration(o.key, v)],
  signal: (o, v) => {
    if (!(typeof v === 'string' && v !== '') && !Number.isInteger(v)) {
      throw new TypeError(`${o.key} must be a signal name or number, got ${v}`);
    }
    return [`--${o.long}`, String(v)];
  },
  choice: (o, v) => {
    if (!o.extra.includes(v)) {
      throw new TypeError(`${o.key} must be ${o.extra.map((w) => `'${w}'`).join(' or ')}, got ${v}`);
    }
    return [`--${o.long}`, v];
  },
  path: (o, v) => {
    if (v === false) return [];
    const p = v === true ? 'auto' : v;
    if (typeof p !== 'string' || p === '') {
      throw new TypeError(`${o.key} must be true, 'auto' or a path, got ${v}`);
    }
    return [`--${o.long}`, p];
  },
  flag: (o, v) => (v ? [`--${o.long}`] : []),
  count: (o, v) => {
    if (v === false) return [];
    const n = v === true ? 1 : Number(v);
    if (!Number.isInteger(n) || n < 0 || n > o.extra) {
      throw new TypeError(`${o.key} must be a boolean or a count from 0 to ${o.extra}, got ${v}`);
    }
    return Array(n).fill(`--${o.long}`);
  },
};

function optionArgs(options) {
  const argv = [];
  for (const o of OPTIONS) {
    const v = options[o.key];
    if (v === undefined || v === null) continue;
    argv.push(...BY_KIND[o.kind](o, v));
  }
  if (options.guardianArgs !== undefined) {
    if (!Array.isArray(options.guardianArgs)) throw new TypeError('guardianArgs must be an array of strings');
    argv.push(...options.guardianArgs.map(String));
  }
  return argv;
}

// --- clocks ---------------------------------------------------------------
// Event `ts` is CLOCK_MONOTONIC in seconds. Node's process.hrtime reads
// CLOCK_MONOTONIC on Linux (libuv's uv_hrtime). Bun's process.hrtime and
// Bun.nanoseconds() count from the process's start instead, so under Bun the
// clock is read through bun:ffi (clock_gettime from libc), and where that is
// not possible from /proc/uptime (CLOCK_BOOTTIME: equal unless the machine
// was suspended, 10 ms steps).

const CLOCK_MONOTONIC = 1;
let bunClock; // undefined: not tried yet; null: not available

function loadBunClock() {
  try {
    const { dlopen, FFIType, ptr } = require('bun:ffi');
    const names = ['libc.so.6', `libc.musl-${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}.so.1`, 'libc.so'];
    for (const name of names) {
      try {
        const lib = dlopen(name, { clock_gettime: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 } });
        const buf = new BigInt64Array(2);
        const p = ptr(buf);
        return () => {
          if (lib.symbols.clock_gettime(CLOCK_MONOTONIC, p) !== 0) return null;
          return Number(buf[0]) + Number(buf[1]) / 1e9;
        };
      } catch {
        // try the next name
      }
    }
  } catch {
    // no bun:ffi
  }
  return null;
}

/**
 * Now on CLOCK_MONOTONIC, in seconds: the clock of every event's `ts`. The
 * wall-clock time of an event is `Date.now() - (monotonicNow() - ev.ts) * 1000`.
 */
export function monotonicNow() {
  if (typeof globalThis.Bun === 'undefined') return Number(process.hrtime.bigint()) / 1e9;
  if (bunClock === undefined) bunClock = loadBunClock();
  const t = bunClock ? bunClock() : null;
  if (t !== null) return t;
  return Number(readFileSync('/proc/uptime', 'latin1').split(' ')[0]);
}

/** The platform package holding the static guardian binary for this system, or null. */
export function platformPackage(platform = process.platform, arch = process.arch) {
  if (platform !== 'linux') return null;
  return PLATFORM_PACKAGES[arch] ?? null;
}

const PLATFORM_PACKAGES = {
  x64: 'treeguardian-linux-x64',
  arm64: 'treeguardian-linux-arm64',
};

/** Whether process `pid` blocks SIGTERM (SigBlk of /proc/<pid>/status); null when that cannot
 * be read. */
function termBlocked(pid) {
  try {
    const m = /^SigBlk:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? (BigInt(`0x${m[1]}`) & (1n << 14n)) !== 0n : null;
  } catch {
    return null;
  }
}

const require = createRequire(import.meta.url);

function executable(file) {
  try {
    if (!statSync(file).isFile()) return false;
    accessSync(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The binary shipped in the platform package, or a reason it is not there. */
function fromPlatformPackage(pkg) {
  if (pkg === null) {
    return { path: null, why: `no platform package exists for ${process.platform}-${process.arch} (linux-x64 and linux-arm64 have one)` };
  }
  let manifest;
  try {
    manifest = require.resolve(`${pkg}/package.json`);
  } catch {
    return { path: null, why: `${pkg} is not installed (npm installs it as an optional dependency of treeguardian; it is missing after --omit=optional, --no-optional or a lockfile made on another platform)` };
  }
  const file = join(dirname(manifest), 'bin', 'guardian');
  if (!executable(file)) return { path: null, why: `${pkg} is installed but ${file} is not an executable file` };
  return { path: file, why: null };
}

function fromPath(pathVar) {
  for (const dir of (pathVar ?? '').split(':')) {
    if (dir === '') continue;
    const file = join(dir, 'guardian');
    if (executable(file)) return file;
  }
  return null;
}

/**
 * Where the guardian binary is, and which rule found it: options.guardianPath,
 * else $GUARDIAN_BIN, else the platform package (treeguardian-linux-x64 or
 * -arm64), else `guardian` on PATH. Throws a GuardianError (status 125) naming
 * all four when none applies.
 */
export function locateGuardian(options = {}, env = process.env) {
  if (options.guardianPath) return { path: String(options.guardianPath), source: 'options.guardianPath' };
  if (env.GUARDIAN_BIN) return { path: env.GUARDIAN_BIN, source: '$GUARDIAN_BIN' };
  const pkg = platformPackage();
  const shipped = fromPlatformPackage(pkg);
  if (shipped.path) return { path: shipped.path, source: pkg };
  const pathVar = options.env?.PATH ?? env.PATH;
  const onPath = fromPath(pathVar);
  if (onPath) return { path: onPath, source: 'PATH' };
  throw new GuardianError(
    'guardian binary not found: options.guardianPath is not set; $GUARDIAN_BIN is not set; '
      + `platform package: ${shipped.why}; no executable "guardian" on PATH (${pathVar ?? 'unset'}). `
      + 'Fix: reinstall treeguardian with optional dependencies, or pass guardianPath, or set GUARDIAN_BIN, '
      + 'or put guardian on PATH.',
    { status: 125, code: 'GUARDIAN_NOT_FOUND' },
  );
}

/** The path locateGuardian() finds (throws the same GuardianError when there is none). */
export function resolveGuardianPath(options = {}, env = process.env) {
  return locateGuardian(options, env).path;
}

/**
 * `{command, args}` that run `command args...` under guardian without an
 * events fd: a command prefix for launchers that spawn the process themselves,
 * such as the MCP SDK's StdioClientTransport:
 *
 *   new StdioClientTransport(guardedCommand('npx', ['-y', 'some-mcp-server']))
 */
export function guardedCommand(command, args = [], options = {}) {
  if (typeof command !== 'string' || command === '') {
    throw new TypeError('command must be a non-empty string');
  }
  if (!Array.isArray(args)) throw new TypeError('args must be an array of strings');
  return {
    command: resolveGuardianPath(options),
    args: [...optionArgs(options), '--', command, ...args.map(String)],
  };
}

/** The working directory's problem, named, or null when it is usable. */
function cwdProblem(cwd) {
  if (cwd === undefined || cwd === null) return null;
  let dir;
  try {
    dir = cwd instanceof URL ? fileURLToPath(cwd) : String(cwd);
  } catch (err) {
    return `the working directory ${String(cwd)} is not a file: URL (${err.message})`;
  }
  try {
    if (!statSync(dir).isDirectory()) return `the working directory ${dir} is not a directory (options.cwd)`;
    accessSync(dir, fsConstants.X_OK);
    return null;
  } catch (err) {
    const why = err.code === 'ENOENT' ? 'does not exist' : `cannot be entered (${err.code ?? err.message})`;
    return `the working directory ${dir} ${why} (options.cwd)`;
  }
}

function stdioFor(stdio) {
  let first;
  if (stdio === undefined || stdio === null) {
    first = ['pipe', 'pipe', 'pipe'];
  } else if (typeof stdio === 'string') {
    first = [stdio, stdio, stdio];
  } else if (Array.isArray(stdio)) {
    if (stdio.length > EVENTS_FD) {
      throw new TypeError(`stdio may name fds 0-2 only; fd ${EVENTS_FD} carries guardian's events`);
    }
    first = [0, 1, 2].map((i) => (stdio[i] === undefined || stdio[i] === null ? 'pipe' : stdio[i]));
  } else {
    throw new TypeError('stdio must be a string or an array of at most 3 entries');
  }
  return [...first, 'pipe'];
}

function noop() {}

/** A path that cannot be executed: what is spawned when guardian must not be. */
const NOT_STARTED = '/nonexistent/guardian-not-started';

const SIGNAL_NUMBERS = { SIGKILL: 9, KILL: 9, SIGSTOP: 19, STOP: 19 };
const signalNumber = (sig) => (typeof sig === 'number' ? sig : SIGNAL_NUMBERS[String(sig).toUpperCase()] ?? null);

/**
 * The phases of a guarded process, in guardian's own vocabulary
 * (src/supervise/state.rs), as far as its events have told: `spawned` starts
 * it running, `stopping` begins the stop, `exit` (the provider was reaped)
 * starts draining the tree, `released` ends it; an `error` event, or a
 * guardian that could not run or ended without `released`, ends it failed.
 */
const Phase = Object.freeze({
  STARTING: 'starting',
  RUNNING: 'running',
  STOPPING: 'stopping',
  DRAINING: 'draining',
  RELEASED: 'released',
  FAILED: 'failed',
});

/** The phase an event moves a guarded process to (unchanged: null). */
function phaseAfter(phase, ev) {
  if (phase === Phase.RELEASED || phase === Phase.FAILED) return null;
  switch (ev.event) {
    case 'spawned': return phase === Phase.STARTING ? Phase.RUNNING : null;
    case 'stopping': return phase === Phase.STARTING || phase === Phase.RUNNING ? Phase.STOPPING : null;
    case 'exit': return Phase.DRAINING;
    case 'released': return Phase.RELEASED;
    case 'error': return Phase.FAILED;
    default: return null;
  }
}

/** A promise with its settlement at hand; never an unhandled rejection. */
function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // A caller that never awaits one of these must not get an unhandled
  // rejection; a caller that does still sees the rejection.
  promise.catch(noop);
  return { promise, resolve, reject, settled: false };
}

/**
 * One guarded process: the handle's state and everything that moves it. Its
 * phase follows the events; two facts about guardian's own process are kept
 * apart from it, because the end needs both: the events stream ended, and
 * guardian exited (or could not be started: `failure`).
 */
class GuardedProcess {
  phase = Phase.STARTING;
  /** every parsed event, in arrival order */
  events = [];
  /** wake-ups for events() iterators */
  waiters = new Set();
  /** internal per-event callbacks (kill()) */
  watchers = new Set();
  /** the events stream ended (or could not be read) */
  streamEnded = false;
  /** guardian's own exit ({code, signal}) once it exited */
  guardianExit = null;
  /** GuardianError when guardian could not be run at all */
  failure = null;
  /** guardian's `error` event, if any */
  errorEvent = null;
  /** from `spawned` */
  providerPid = undefined;
  /** the end's rejection was emitted as 'error' */
  reported = false;
  /** kill() asked guardian to kill the tree */
  killing = false;
  /** signals asked for before guardian was ready for them (see send()) */
  pendingSignals = [];
  /** the timer that checks whether guardian is ready for them */
  pendingTimer = null;

  /** Sends the held signals now (in order). */
  flushSignals() {
    if (this.pendingTimer) clearTimeout(this.pendingTimer);
    this.pendingTimer = null;
    const pending = this.pendingSignals;
    this.pendingSignals = [];
    for (const sig of pending) {
      if (!this.running()) break;
      try {
        this.child.kill(sig);
      } catch (err) {
        if (err && err.code !== 'ESRCH') throw err;
      }
    }
  }
  /** what the driver did about a leaf guardian left behind (for the error message) */
  leafNote = '';
  spawned = deferred();
  exit = deferred();
  released = deferred();

  constructor(handle, child, guardianPath, located, before) {
    this.handle = handle;
    this.child = child;
    this.guardianPath = guardianPath;
    this.located = located;
    this.before = before;
  }

  emitError(err) {
    if (this.handle.listenerCount('error') > 0) this.handle.emit('error', err);
  }

  settle(d, ok, value) {
    if (d.settled) return;
    d.settled = true;
    if (ok) d.resolve(value);
    else {
      d.reject(value);
      if (d === this.released && !this.reported) {
        this.reported = true;
        this.emitError(value);
      }
    }
  }

  wake() {
    for (const w of this.waiters) w();
    this.waiters.clear();
  }

  onEvent(ev) {
    this.events.push(ev);
    // guardian's first event: its signals are set up; what was asked before goes now.
    if (this.pendingSignals.length) this.flushSignals();
    this.phase = phaseAfter(this.phase, ev) ?? this.phase;
    switch (ev.event) {
      case 'spawned':
        if (Number.isInteger(ev.pid)) this.providerPid = ev.pid;
        this.settle(this.spawned, true, ev);
        break;
      case 'exit':
        this.settle(this.exit, true, ev);
        break;
      case 'released':
        // `exit` always precedes `released`; should guardian ever skip it,
        // do not leave `exit` pending forever.
        this.settle(this.exit, false,
          new GuardianError('guardian released without an exit event', { status: ev.status, code: 'NO_RELEASE' }));
        this.settle(this.spawned, false,
          new GuardianError('guardian released without a spawned event', { status: ev.status, code: 'NO_RELEASE' }));
        this.settle(this.released, true, ev);
        break;
      case 'error': {
        this.errorEvent = ev;
        const err = new GuardianError(
          `guardian: ${ev.message ?? 'error'} (status ${ev.status ?? 'unknown'})`,
          { status: ev.status, event: ev, code: 'ERROR_EVENT' },
        );
        this.settle(this.spawned, false, err);
        this.settle(this.exit, false, err);
        this.settle(this.released, false, err);
        break;
      }
      default:
        break;
    }
    for (const w of [...this.watchers]) w(ev);
    if (this.handle.listenerCount('event') > 0) {
      try {
        this.handle.emit('event', ev);
      } catch (err) {
        // A throwing listener is the caller's bug; it must not stop the
        // bookkeeping. Report it on the next tick like an unhandled error.
        queueMicrotask(() => { throw err; });
      }
    }
    this.wake();
  }

  handleLine(line) {
    let ev;
    try {
      ev = parseEventLine(line);
    } catch (err) {
      // The contract says every line is a JSON object; surface anything else as
      // an event so it is visible to events() readers instead of vanishing.
      this.onEvent({ event: 'malformed', ts: monotonicNow(), line, message: String(err && err.message ? err.message : err) });
      return;
    }
    if (ev !== null) this.onEvent(ev);
  }

  /** Settles whatever is still pending once both the events stream ended and
   * guardian exited (or could not be started). */
  finish() {
    if (!(this.failure || (this.streamEnded && this.guardianExit))) return;
    const { code, signal } = this.guardianExit ?? { code: null, signal: null };
    // guardian dies of the provider's signal N *after* `released` (it ends the way the
    // provider ended; 128+N only as PID 1): a signal leaves a leaf behind only when no
    // `released` came. Judged once the events stream ended ('exit' may come before its
    // last lines).
    if (signal !== null && !this.ended()) this.killOrphanedLeaf();
    const base = this.failure ?? new GuardianError(
      (signal
        ? `guardian was killed by ${signal} before it released the tree`
        : `guardian exited with status ${code} without releasing the tree`) + this.leafNote,
      { status: code, exitCode: code, signal, event: this.errorEvent, code: 'NO_RELEASE' },
    );
    if (this.phase !== Phase.RELEASED) this.phase = Phase.FAILED;
    this.settle(this.spawned, false, base);
    this.settle(this.exit, false, base);
    this.settle(this.released, false, base);
    this.watchers.clear();
    this.wake();
  }

  /** Whether the tree's end is settled (released, or failed). */
  ended() {
    return this.phase === Phase.RELEASED || this.phase === Phase.FAILED;
  }

  streamEnd() {
    this.streamEnded = true;
    // No first event will come: a held signal goes now, to a guardian that may still run.
    this.flushSignals();
    this.wake();
    this.finish();
  }

  /** Spawn failures (ENOENT, EACCES, ...) carry syscall 'spawn <file>'; a failed
   * kill() also lands here and changes nothing. */
  onChildError(err) {
    if (!(this.child.pid === undefined || /spawn/.test(String(err && err.syscall)))) return;
    if (!this.failure) {
      this.failure = this.before ?? new GuardianError(
        `could not start guardian (${this.guardianPath}, from ${this.located.source}): ${err.message}`,
        { status: 125, code: 'SPAWN_FAILED' },
      );
      if (this.failure.cause === undefined) this.failure.cause = err;
    }
    this.streamEnded = true;
    this.finish();
  }

  onChildExit(code, signal) {
    this.guardianExit = { code, signal };
    // guardian is gone: nothing held can be sent any more.
    if (this.pendingTimer) clearTimeout(this.pendingTimer);
    this.pendingTimer = null;
    this.pendingSignals = [];
    this.finish();
  }

  /** guardian was killed (by someone else: the driver never SIGKILLs it) before
   * it released the tree. In cgroup mode the tree is still in its leaf: kill it
   * there, as `guardian sweep` would, so no process outlives this handle. (In
   * subreaper mode the orphans cannot be named reliably.) */
  killOrphanedLeaf() {
    const leaf = this.events.find((e) => e.event === 'spawned')?.cgroup;
    if (typeof leaf !== 'string' || leaf === '') return;
    try {
      writeFileSync(join(leaf, 'cgroup.kill'), '1');
      this.leafNote = `; the driver wrote 1 to ${leaf}/cgroup.kill and runs 'guardian sweep --leaf ${leaf}'`;
    } catch (err) {
      this.leafNote = `; its leaf ${leaf} could not be killed (${err.code ?? err.message}): run 'guardian sweep --leaf ${leaf}'`;
    }
    // cgroup.kill alone misses a member whose main thread exited while another thread runs
    // (docs/contract.md, cgroup mode); `guardian sweep --leaf` SIGKILLs those through pidfds,
    // waits for the leaf to empty and removes it. In the background: it may take seconds.
    try {
      const sweep = spawn(this.guardianPath, ['sweep', '--leaf', leaf], { stdio: 'ignore' });
      sweep.on('error', () => {});
      sweep.unref();
    } catch {
      // the binary vanished since the start: the note above still names the fix
    }
  }

  /** guardian's own process is running (it can be asked to stop). */
  running() {
    const c = this.child;
    return !this.guardianExit && !this.failure && c.exitCode === null && c.signalCode === null && c.pid !== undefined;
  }

  /** Signals guardian. Sent in the kernel's tail of guardian's exec (right after the spawn),
   * a SIGTERM would end guardian by the default action, before it started anything and with
   * no `released`; guardian blocks every catchable signal as its first act. So until guardian
   * wrote an event, a signal is sent only once /proc/<pid>/status shows SIGTERM blocked (in
   * practice at once); meanwhile it is held (with any signal asked for after it, so the
   * order is kept), checked every millisecond, and sent at the first event, the end of the
   * stream, or after 5 s at the latest. */
  send(signal) {
    if (!this.running()) return false;
    if (this.pendingSignals.length || (this.events.length === 0 && !this.streamEnded && termBlocked(this.child.pid) !== true)) {
      this.pendingSignals.push(signal);
      if (!this.pendingTimer) {
        const deadline = Date.now() + 5000;
        const check = () => {
          this.pendingTimer = null;
          if (!this.pendingSignals.length) return;
          if (termBlocked(this.child.pid) === true || Date.now() >= deadline) this.flushSignals();
          else this.pendingTimer = later(check);
        };
        // (unref'd: a pending stop must not keep a host alive that would otherwise end; its
        // end is a parent death for guardian, which stops the tree all the same)
        const later = (f) => {
          const t = setTimeout(f, 1);
          t.unref?.();
          return t;
        };
        this.pendingTimer = later(check);
      }
      return true;
    }
    try {
      return this.child.kill(signal);
    } catch (err) {
      // already gone: `released` settles from the exit path
      if (err && err.code !== 'ESRCH') throw err;
      return false;
    }
  }

  /** Kill the tree now. guardian's kill-now rule (docs/contract.md): while it is
   * stopping the tree, a further stop request ends the grace at once (SIGKILL to
   * the whole tree, cgroup.kill in cgroup mode) and guardian answers `stopping`
   * with reason `kill-request`. So: SIGTERM; if the answer is a first stop
   * (`stopping` with another reason), SIGTERM again; done at `kill-request` or
   * `released`. */
  kill() {
    if (this.killing || !this.running()) return this.released.promise;
    this.killing = true;
    let sends = 0;
    const again = () => {
      if (sends >= 4) return;
      sends++;
      this.send('SIGTERM');
    };
    const watcher = (ev) => {
      if (ev.event === 'stopping' && ev.reason !== 'kill-request') again();
      else if (ev.event === 'stopping' || ev.event === 'released' || ev.event === 'error') this.watchers.delete(watcher);
    };
    this.watchers.add(watcher);
    again();
    return this.released.promise;
  }

  /** Invalid arguments throw a TypeError at the call (a rejected promise that
   * nobody awaits would end the host as an unhandled rejection). */
  stop(arg) {
    if (typeof arg === 'string' || typeof arg === 'number') {
      const n = signalNumber(arg);
      // SIGKILL (and SIGSTOP) cannot be caught: delivered to guardian they
      // would end (or freeze) guardian itself and leave the tree running.
      if (n === 9) return this.kill();
      if (n === 19) {
        throw new TypeError('stop(): SIGSTOP would freeze guardian itself, not the tree; use stop() or kill()');
      }
      this.send(arg);
      return this.released.promise;
    }
    const opts = arg ?? {};
    if (typeof opts !== 'object') throw new TypeError('stop() takes a signal or {timeout, signal}');
    const { timeout, signal } = opts;
    if (timeout !== undefined && (typeof timeout !== 'number' || !(timeout >= 0))) {
      throw new TypeError(`stop(): timeout must be a non-negative number of milliseconds, got ${timeout}`);
    }
    if (signal !== undefined && (signal === null || typeof signal.addEventListener !== 'function')) {
      throw new TypeError('stop(): signal must be an AbortSignal');
    }
    const kill = () => this.kill();
    if (signal?.aborted) return kill();
    this.send('SIGTERM');
    const cleanups = [];
    if (timeout !== undefined && timeout !== Infinity) {
      const timer = setTimeout(kill, timeout);
      cleanups.push(() => clearTimeout(timer));
    }
    if (signal !== undefined) {
      signal.addEventListener('abort', kill, { once: true });
      cleanups.push(() => signal.removeEventListener('abort', kill));
    }
    if (cleanups.length) {
      const done = () => { for (const c of cleanups) c(); };
      this.released.promise.then(done, done);
    }
    return this.released.promise;
  }

  async* iterate() {
    let i = 0;
    for (;;) {
      while (i < this.events.length) yield this.events[i++];
      if (this.streamEnded || this.failure) break;
      await new Promise((resolve) => this.waiters.add(resolve));
    }
    if (this.failure && this.events.length === 0) throw this.failure;
  }

  /** Reads the events stream and follows guardian's process. */
  attach() {
    const { child } = this;
    const splitter = new LineSplitter();
    const stream = child.stdio[EVENTS_FD];
    if (stream) {
      stream.on('data', (chunk) => {
        for (const line of splitter.push(chunk)) this.handleLine(line);
      });
      const onEnd = () => {
        if (this.streamEnded) return;
        for (const line of splitter.end()) this.handleLine(line);
        this.streamEnd();
      };
      stream.on('end', onEnd);
      stream.on('close', onEnd);
      stream.on('error', onEnd);
    } else {
      this.streamEnded = true;
    }
    // stdin/stdout/stderr: writing to a provider that is gone (a mistyped
    // command: guardian exits 127) fails with EPIPE. Without a listener that
    // error would crash the host; here it becomes an 'error' event of the
    // handle when someone listens, and `released` reports why guardian ended.
    for (const s of [child.stdin, child.stdout, child.stderr]) {
      if (s && typeof s.on === 'function') s.on('error', (err) => this.emitError(err));
    }
    child.on('error', (err) => this.onChildError(err));
    child.on('exit', (code, signal) => this.onChildExit(code, signal));
  }
}

/**
 * Start `command args...` under guardian.
 *
 * The handle is an EventEmitter: 'event' for every event line, 'error' for a
 * failure (only when you listen: an unlistened failure never throws, it
 * rejects `spawned`/`exit`/`released`).
 *
 * @param {string} command
 * @param {string[]} [args]
 * @param {object} [options]
 */
export function spawnGuarded(command, args, options) {
  if (!Array.isArray(args)) {
    if (options === undefined && args !== null && typeof args === 'object') {
      options = args;
    }
    args = [];
  }
  options = options ?? {};
  if (typeof command !== 'string' || command === '') {
    throw new TypeError('command must be a non-empty string');
  }

  const argv = [...guardianArgs(options), '--', command, ...args.map(String)];
  const spawnOptions = { stdio: stdioFor(options.stdio) };
  if (options.env !== undefined) spawnOptions.env = options.env;
  if (options.cwd !== undefined) spawnOptions.cwd = options.cwd;

  // Problems found before the spawn replace the spawn's own error message,
  // which would blame the binary (`spawn .../guardian ENOENT`).
  let located;
  let before = null;
  try {
    located = locateGuardian(options);
  } catch (err) {
    located = { path: 'guardian', source: 'PATH' };
    before = err;
  }
  const badCwd = cwdProblem(options.cwd);
  if (badCwd !== null && before === null) {
    before = new GuardianError(`could not start guardian: ${badCwd}`, { status: 125, code: 'BAD_CWD' });
  }
  const guardianPath = located.path;
  let child;
  if (before === null) {
    try {
      child = spawn(guardianPath, argv, spawnOptions);
    } catch (err) {
      // Some failures throw (ENOTDIR, E2BIG, ...) where others are 'error'
      // events: turn them into the same rejected promises.
      before = new GuardianError(`could not start guardian (${guardianPath}, from ${located.source}): ${err.message}`,
        { status: 125, code: 'SPAWN_FAILED', cause: err });
    }
  }
  if (child === undefined) {
    // Not started. A spawn that cannot succeed gives the handle a real child
    // and real streams that fail the way a failed spawn's do.
    child = spawn(NOT_STARTED, [], { stdio: spawnOptions.stdio });
  }
  const handle = new EventEmitter();
  const g = new GuardedProcess(handle, child, guardianPath, located, before);
  g.attach();

  const iterate = () => g.iterate();
  Object.defineProperties(handle, {
    child: { value: child, enumerable: true },
    guardianPid: { value: child.pid, enumerable: true },
    /** Deprecated alias of guardianPid (guardian's pid, not the provider's). */
    pid: { value: child.pid, enumerable: false },
    providerPid: { get: () => g.providerPid, enumerable: true },
    guardianPath: { value: guardianPath, enumerable: true },
    stdin: { value: child.stdin, enumerable: true },
    stdout: { value: child.stdout, enumerable: true },
    stderr: { value: child.stderr, enumerable: true },
    spawned: { value: g.spawned.promise, enumerable: true },
    exit: { value: g.exit.promise, enumerable: true },
    released: { value: g.released.promise, enumerable: true },
    received: { get: () => g.events.slice(), enumerable: true },
    events: { value: iterate },
    stop: { value: (arg) => g.stop(arg) },
    kill: { value: () => g.kill() },
    unref: {
      value() {
        child.unref();
        for (const s of child.stdio) if (s && typeof s.unref === 'function') s.unref();
        return handle;
      },
    },
    ref: {
      value() {
        child.ref();
        for (const s of child.stdio) if (s && typeof s.ref === 'function') s.ref();
        return handle;
      },
    },
    [Symbol.asyncIterator]: { value: iterate },
  });
  return handle;
}

export default spawnGuarded;
