// @guardian/driver: start a provider under guardian and follow its JSON events.
//
// guardian's contract (docs/contract.md in the guardian repository) fixes the
// command line, the exit codes and the event lines this module relies on:
// guardian writes one JSON object per line to the fd given by --events-fd;
// `exit` always precedes `released`; `released` (or `error`) is the last line,
// then the fd is closed.
//
// Only node:child_process and node:string_decoder are used, so the module runs
// unchanged in Node (>= 20) and Bun.

import { spawn } from 'node:child_process';
import { StringDecoder } from 'node:string_decoder';

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
    /** signal that ended guardian, when it was killed. */
    this.signal = details.signal ?? null;
    /** the `error` event guardian emitted, if any. */
    this.event = details.event ?? null;
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
  const argv = ['--events-fd', String(EVENTS_FD)];
  if (options.grace !== undefined && options.grace !== null) {
    argv.push('--grace', duration('grace', options.grace));
  }
  if (options.stopSignal !== undefined && options.stopSignal !== null) {
    const sig = options.stopSignal;
    if (!(typeof sig === 'string' && sig !== '') && !Number.isInteger(sig)) {
      throw new TypeError(`stopSignal must be a signal name or number, got ${sig}`);
    }
    argv.push('--stop-signal', String(sig));
  }
  if (options.forwardTo !== undefined && options.forwardTo !== null) {
    if (options.forwardTo !== 'provider' && options.forwardTo !== 'group') {
      throw new TypeError(`forwardTo must be 'provider' or 'group', got ${options.forwardTo}`);
    }
    argv.push('--forward-to', options.forwardTo);
  }
  if (options.timeout !== undefined && options.timeout !== null) {
    argv.push('--timeout', duration('timeout', options.timeout));
  }
  if (options.waitDescendants) argv.push('--wait-descendants');
  if (options.cgroup !== undefined && options.cgroup !== null && options.cgroup !== false) {
    const cg = options.cgroup === true ? 'auto' : options.cgroup;
    if (typeof cg !== 'string' || cg === '') {
      throw new TypeError(`cgroup must be true, 'auto' or a path, got ${options.cgroup}`);
    }
    argv.push('--cgroup', cg);
  }
  if (options.noParentWatch) argv.push('--no-parent-watch');
  if (options.verbose) {
    const n = options.verbose === true ? 1 : Number(options.verbose);
    if (!Number.isInteger(n) || n < 0) {
      throw new TypeError(`verbose must be a boolean or a count, got ${options.verbose}`);
    }
    for (let i = 0; i < n; i++) argv.push('--verbose');
  }
  if (options.quiet) argv.push('--quiet');
  if (options.guardianArgs !== undefined) {
    if (!Array.isArray(options.guardianArgs)) throw new TypeError('guardianArgs must be an array of strings');
    argv.push(...options.guardianArgs.map(String));
  }
  return argv;
}

/** Where the guardian binary is: options.guardianPath, else $GUARDIAN_BIN, else `guardian` on PATH. */
export function resolveGuardianPath(options = {}, env = process.env) {
  if (options.guardianPath) return options.guardianPath;
  if (env.GUARDIAN_BIN) return env.GUARDIAN_BIN;
  return 'guardian';
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

/**
 * Start `command args...` under guardian.
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

  const guardianPath = resolveGuardianPath(options);
  const child = spawn(guardianPath, argv, spawnOptions);

  // --- event bookkeeping -------------------------------------------------
  const events = [];          // every parsed event, in arrival order
  const waiters = new Set();  // wake-ups for events() iterators
  let ended = false;          // the events stream ended (or could not be read)
  let failure = null;         // GuardianError when guardian could not be run at all
  let errorEvent = null;      // guardian's `error` event, if any
  let exited = false;         // guardian itself exited
  let exitInfo = { code: null, signal: null };

  const deferred = () => {
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
  };
  const spawned = deferred();
  const exit = deferred();
  const released = deferred();

  const settle = (d, ok, value) => {
    if (d.settled) return;
    d.settled = true;
    if (ok) d.resolve(value);
    else d.reject(value);
  };

  const wake = () => {
    for (const w of waiters) w();
    waiters.clear();
  };

  const onEvent = (ev) => {
    events.push(ev);
    switch (ev.event) {
      case 'spawned':
        settle(spawned, true, ev);
        break;
      case 'exit':
        settle(exit, true, ev);
        break;
      case 'released':
        // `exit` always precedes `released`; should guardian ever skip it,
        // do not leave `exit` pending forever.
        settle(exit, false, new GuardianError('guardian released without an exit event', { status: ev.status }));
        settle(spawned, false, new GuardianError('guardian released without a spawned event', { status: ev.status }));
        settle(released, true, ev);
        break;
      case 'error': {
        errorEvent = ev;
        const err = new GuardianError(
          `guardian: ${ev.message ?? 'error'} (status ${ev.status ?? 'unknown'})`,
          { status: ev.status, event: ev },
        );
        settle(spawned, false, err);
        settle(exit, false, err);
        settle(released, false, err);
        break;
      }
      default:
        break;
    }
    wake();
  };

  const malformed = (line, err) => {
    // The contract says every line is a JSON object; surface anything else as
    // an event so it is visible to events() readers instead of vanishing.
    onEvent({ event: 'malformed', line, message: String(err && err.message ? err.message : err) });
  };

  const handleLine = (line) => {
    let ev;
    try {
      ev = parseEventLine(line);
    } catch (err) {
      malformed(line, err);
      return;
    }
    if (ev !== null) onEvent(ev);
  };

  // Settle whatever is still pending once both the events stream ended and
  // guardian exited (or could not be started).
  const finish = () => {
    if (!(failure || (ended && exited))) return;
    const base = failure ?? new GuardianError(
      exitInfo.signal
        ? `guardian was killed by ${exitInfo.signal} before it released the tree`
        : `guardian exited with status ${exitInfo.code} without releasing the tree`,
      { status: exitInfo.code, exitCode: exitInfo.code, signal: exitInfo.signal, event: errorEvent },
    );
    settle(spawned, false, base);
    settle(exit, false, base);
    settle(released, false, base);
    wake();
  };

  const splitter = new LineSplitter();
  const stream = child.stdio[EVENTS_FD];
  if (stream) {
    stream.on('data', (chunk) => {
      for (const line of splitter.push(chunk)) handleLine(line);
    });
    const onEnd = () => {
      if (ended) return;
      for (const line of splitter.end()) handleLine(line);
      ended = true;
      wake();
      finish();
    };
    stream.on('end', onEnd);
    stream.on('close', onEnd);
    stream.on('error', onEnd);
  } else {
    ended = true;
  }

  child.on('error', (err) => {
    // Spawn failures (ENOENT, EACCES, ...) carry syscall 'spawn <file>'; a
    // failed kill() also lands here and changes nothing.
    if (!(child.pid === undefined || /spawn/.test(String(err && err.syscall)))) return;
    if (!failure) {
      failure = new GuardianError(`could not start guardian (${guardianPath}): ${err.message}`, {
        status: 125,
        cause: err,
      });
    }
    ended = true;
    finish();
  });
  child.on('exit', (code, signal) => {
    exited = true;
    exitInfo = { code, signal };
    finish();
  });

  // --- the handle ---------------------------------------------------------
  async function* iterate() {
    let i = 0;
    for (;;) {
      while (i < events.length) yield events[i++];
      if (ended || failure) break;
      await new Promise((resolve) => waiters.add(resolve));
    }
    if (failure && events.length === 0) throw failure;
  }

  const handle = {
    child,
    pid: child.pid,
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    spawned: spawned.promise,
    exit: exit.promise,
    released: released.promise,
    /** Async iterator over every event line, from the first one, until the fd closes. */
    events: iterate,
    /** Events received so far (a copy). */
    get received() {
      return events.slice();
    },
    /**
     * Ask guardian to stop the tree: guardian forwards the signal or, for its
     * stop signal, arms its bounded stop (grace, then SIGKILL). Resolves like
     * `released`.
     */
    stop(signal = 'SIGTERM') {
      if (!exited && !failure && child.exitCode === null && child.signalCode === null) {
        try {
          child.kill(signal);
        } catch (err) {
          // already gone: `released` settles from the exit path
          if (err && err.code !== 'ESRCH') throw err;
        }
      }
      return released.promise;
    },
    /** Let the event loop exit while guardian runs (guardian then sees its parent die). */
    unref() {
      child.unref();
      for (const s of child.stdio) if (s && typeof s.unref === 'function') s.unref();
      return handle;
    },
    ref() {
      child.ref();
      for (const s of child.stdio) if (s && typeof s.ref === 'function') s.ref();
      return handle;
    },
    [Symbol.asyncIterator]: iterate,
  };
  return handle;
}

export default spawnGuarded;
