//! The handle spawn() returns: a superset of Node's ChildProcess (pid, exitCode, signalCode,
//! killed, stdio, 'spawn'/'exit'/'close'/'error', kill(signal) -> boolean, the `timeout`,
//! `killSignal` and `signal` options as Node means them) with guardian's surface beside it
//! (stop(grace), spawned/exit/released, events()). Where it must differ from ChildProcess, the
//! README's table "standard API -> driver" says why.
import { spawn as nodeSpawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { constants as osConstants } from 'node:os';

import { AbortError, GuardianError } from './errors.js';
import { EVENTS_FD } from './events.js';
import { cwdProblem, locateGuardian, resolveCommand } from './locate.js';
import { debug } from './log.js';
import { SPAWN_KEYS, checkOptions, durationArg, guardianArgs, parseDuration } from './options.js';
import { GuardedProcess } from './process.js';
import { DRIVER } from './spec.js';

/** A path that cannot be executed: what is spawned when guardian must not be. */
const NOT_STARTED = '/nonexistent/guardian-not-started';

const SIGNALS = osConstants.signals;

/** A signal's name ('SIGTERM') from a name or number, or a TypeError as ChildProcess.kill throws. */
function signalName(sig) {
  if (typeof sig === 'number') {
    if (sig === 0) return 0; // existence check, as process.kill(pid, 0)
    const name = Object.keys(SIGNALS).find((k) => SIGNALS[k] === sig);
    if (name) return name;
    if (sig === DRIVER.killRequest.number || (sig >= SIGNALS.SIGSYS + 2 && sig <= 64)) return sig;
  } else if (typeof sig === 'string' && Object.hasOwn(SIGNALS, sig)) return sig;
  const err = new TypeError(`Unknown signal: ${sig}`);
  err.code = 'ERR_UNKNOWN_SIGNAL';
  throw err;
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
  if (first.includes('ipc')) throw new TypeError("stdio 'ipc' is not supported: guardian stands between the host and the provider");
  return [...first, 'pipe'];
}

/** A ChildProcess's own options the driver cannot honour: refused rather than ignored. */
const REFUSED = {
  argv0: 'guardian starts the provider with argv[0] as given; put the name in the command',
  serialization: "there is no IPC channel through guardian (stdio 'ipc' is refused)",
};

/** The handle: see the module header. */
export class GuardedChildProcess extends EventEmitter {
  /** guardian's pid: the process this handle started (undefined when nothing was started). */
  pid = undefined;
  exitCode = null;
  signalCode = null;
  killed = false;
  connected = false;
  spawnfile;
  spawnargs;
  stdin = null;
  stdout = null;
  stderr = null;
  stdio = [null, null, null];
  #g;
  #child;

  constructor(file, args, child, setup) {
    super();
    this.spawnfile = file;
    this.spawnargs = [file, ...args];
    this.#child = child;
    this.pid = child.pid;
    this.stdin = child.stdin ?? null;
    this.stdout = child.stdout ?? null;
    this.stderr = child.stderr ?? null;
    this.stdio = [this.stdin, this.stdout, this.stderr];
    this.#g = setup(this);
  }

  /** guardian's ChildProcess (or the failed spawn's, when nothing could start). */
  get child() { return this.#child; }
  /** guardian's pid. Not the provider's: see providerPid. */
  get guardianPid() { return this.#child.pid; }
  /** the provider's pid, from `spawned` (undefined before it). */
  get providerPid() { return this.#g.providerPid; }
  get guardianPath() { return this.#g.guardianPath; }
  /** Resolves with `spawned`; rejects when guardian or the provider could not start. */
  get spawned() { return this.#g.spawned.promise; }
  /** Resolves with the provider's `exit` event. */
  get exit() { return this.#g.exit.promise; }
  /** Resolves with `released` (the tree is gone), before 'exit' is emitted. */
  get released() { return this.#g.released.promise; }
  /** Events received so far. */
  get received() { return this.#g.events.slice(); }
  /** Every event line, from the first, until guardian closes the fd. */
  events() { return this.#g.iterate(); }
  [Symbol.asyncIterator]() { return this.#g.iterate(); }

  /**
   * ChildProcess.kill: returns whether the signal was sent. kill() and kill('SIGKILL') are the
   * kill request (guardian SIGKILLs the provider and its tree now; the status is SIGKILL);
   * 'SIGTERM' is the stop request (the stop signal, the grace, then SIGKILL); another signal is
   * sent to guardian, which forwards it to the provider.
   */
  kill(signal = 'SIGKILL') {
    const name = signalName(signal);
    if (name === 'SIGSTOP') {
      throw new TypeError("kill('SIGSTOP') would freeze guardian itself, not the provider: send 'SIGTSTP'");
    }
    let sent;
    if (name === 'SIGKILL') sent = this.#g.killRequest();
    else sent = this.#g.send(name);
    if (sent) this.killed = true;
    return sent;
  }

  /**
   * Stop the tree (guardian's verb): SIGTERM, guardian's grace, then SIGKILL. With `grace`
   * (milliseconds or a duration string) or {grace, signal}, the kill request follows when the
   * tree is not released that long after, or when the AbortSignal aborts. Resolves with
   * `released`. A signal name ('SIGINT') sends that signal instead (legacy form).
   */
  stop(arg) {
    if (typeof arg === 'string' && /^SIG[A-Z0-9+-]+$/.test(arg)) {
      if (arg === 'SIGKILL') this.kill();
      else this.kill(arg);
      return this.released;
    }
    const opts = arg === undefined || typeof arg === 'number' || typeof arg === 'string' ? { grace: arg } : arg;
    if (opts === null || typeof opts !== 'object') throw new TypeError('stop() takes a grace (ms or a duration) or {grace, signal}');
    checkOptions(opts, ['grace', 'timeout', 'signal'], 'stop()', false);
    const grace = opts.grace ?? opts.timeout;
    let ms;
    if (typeof grace === 'number') {
      durationArg('stop(): grace', grace);
      ms = grace;
    } else if (grace !== undefined) ms = Number(parseDuration(grace)) / 1e6;
    const { signal } = opts;
    if (signal !== undefined && (signal === null || typeof signal.addEventListener !== 'function')) {
      throw new TypeError('stop(): signal must be an AbortSignal');
    }
    return this.#g.stop(ms, signal);
  }

  ref() {
    this.#child.ref();
    for (const s of this.#child.stdio) if (s && typeof s.ref === 'function') s.ref();
    return this;
  }

  unref() {
    this.#child.unref();
    for (const s of this.#child.stdio) if (s && typeof s.unref === 'function') s.unref();
    return this;
  }

  [Symbol.dispose]() {
    if (!this.killed) this.kill();
  }

  /** A failure to start (guardian, the provider's command, a too-old guardian): emitted as
   * 'error' whether or not anyone listens, as ChildProcess does. */
  startFailed(err) {
    process.nextTick(() => this.emit('error', err));
  }

  /** guardian ended (after `released`): its status is the provider's. */
  onExit(code, signal) {
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
  }

  onClose(code, signal) {
    if (this.#child.pid === undefined) this.exitCode = this.#child.exitCode;
    this.emit('close', code, signal);
  }
}

/** Node's `timeout`/`killSignal`/`signal` options, as child_process applies them. */
function nodeTimers(h, options) {
  const killSignal = options.killSignal ?? 'SIGTERM';
  signalName(killSignal);
  if (options.timeout !== undefined && options.timeout !== null) {
    if (!Number.isInteger(options.timeout) || options.timeout < 0) {
      const err = new RangeError(`The value of "options.timeout" is out of range. It must be an unsigned integer. Received ${options.timeout}`);
      err.code = 'ERR_OUT_OF_RANGE';
      throw err;
    }
    if (options.timeout > 0) {
      let timer = setTimeout(() => {
        timer = null;
        try { h.kill(killSignal); } catch (err) { h.emit('error', err); }
      }, options.timeout);
      h.once('exit', () => { if (timer) clearTimeout(timer); });
    }
  }
  const { signal } = options;
  if (signal !== undefined) {
    if (signal === null || typeof signal.addEventListener !== 'function') {
      const err = new TypeError('The "options.signal" property must be an instance of AbortSignal');
      err.code = 'ERR_INVALID_ARG_TYPE';
      throw err;
    }
    const onAbort = () => {
      try {
        if (h.kill(killSignal)) h.emit('error', new AbortError(undefined, { cause: signal.reason }));
      } catch (err) {
        h.emit('error', err);
      }
    };
    if (signal.aborted) process.nextTick(onAbort);
    else {
      signal.addEventListener('abort', onAbort, { once: true });
      h.once('exit', () => signal.removeEventListener('abort', onAbort));
    }
  }
}

/** [command, args] as child_process's `shell` option runs them. */
function withShell(command, args, shell) {
  if (!shell) return [command, args];
  const sh = typeof shell === 'string' ? shell : '/bin/sh';
  return [sh, ['-c', [command, ...args].join(' ')]];
}

/**
 * Start `command args...` under guardian, as child_process.spawn starts it alone (same
 * arguments, same handle, same events); guardian's options go beside Node's.
 */
export function spawnGuarded(command, args, options) {
  if (!Array.isArray(args)) {
    if (options === undefined && args !== null && typeof args === 'object') options = args;
    args = [];
  }
  options = options ?? {};
  if (typeof command !== 'string' || command === '') {
    throw new TypeError('command must be a non-empty string');
  }
  checkOptions(options, SPAWN_KEYS, 'spawn()');
  for (const [key, why] of Object.entries(REFUSED)) {
    if (options[key] !== undefined) throw new TypeError(`option ${key} is not supported: ${why}`);
  }
  const [file, argList] = withShell(command, args.map(String), options.shell);
  const argv = [...guardianArgs(options), '--', file, ...argList];
  // guardian's environment: the caller's, and the kill request's variable. Over process.env it
  // is an object whose prototype is process.env (child_process reads inherited keys too):
  // copying process.env costs ~0.2 ms per spawn, which delayed the provider's first byte.
  const env = options.env ? { ...options.env } : Object.create(process.env);
  env[DRIVER.killRequest.variable] = DRIVER.killRequest.signal;
  const spawnOptions = { stdio: stdioFor(options.stdio), env };
  for (const key of ['cwd', 'detached', 'uid', 'gid']) if (options[key] !== undefined) spawnOptions[key] = options[key];

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
  let child;
  let providerError = false;
  if (before === null) {
    // The command is resolved as execvp would: one that cannot run is spawned by
    // child_process itself, which fails with its own ENOENT/EACCES error and events.
    const found = resolveCommand(file, env.PATH, options.cwd);
    if (found.code !== null) {
      debug('spawn %s: %s; not starting guardian', file, found.code);
      child = nodeSpawn(file, argList, { ...spawnOptions, stdio: spawnOptions.stdio.slice(0, 3) });
      providerError = true;
    }
  }
  if (before === null && child === undefined) {
    try {
      child = nodeSpawn(located.path, argv, spawnOptions);
    } catch (err) {
      before = new GuardianError(`could not start guardian (${located.path}, from ${located.source}): ${err.message}`,
        { status: 125, code: 'SPAWN_FAILED', cause: err });
    }
  }
  if (child === undefined) {
    // Not started. A spawn that cannot succeed gives the handle a real child
    // and real streams that fail the way a failed spawn's do.
    child = nodeSpawn(NOT_STARTED, [], { stdio: spawnOptions.stdio });
  }
  const h = new GuardedChildProcess(file, argList, child, (handle) => {
    const g = new GuardedProcess(handle, child, located.path, located, before);
    g.passThrough = providerError;
    g.attach();
    return g;
  });
  child.on('spawn', () => h.emit('spawn'));
  nodeTimers(h, options);
  return h;
}
