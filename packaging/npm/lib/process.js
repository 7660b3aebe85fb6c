//! One guarded process's state (GuardedProcess): its phase as guardian's events tell it, the
//! promises `spawned`, `exit` and `released`, the signals it sends guardian (held until guardian
//! is ready for them: spec/driver.json's ready rule), the kill request and the stop request, the
//! version check of `spawned`, and the clean-up of a leaf a killed guardian left behind.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { GuardianError } from './errors.js';
import { EVENTS_FD, LineSplitter, Phase, monotonicNow, parseEventLine, phaseAfter, termBlocked } from './events.js';
import { debug, describeEvent } from './log.js';
import { DRIVER } from './spec.js';
import { versionProblem } from './version.js';

function noop() {}

/** A promise with its settlement at hand; never an unhandled rejection. */
export function deferred() {
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
export class GuardedProcess {
  phase = Phase.STARTING;
  /** every parsed event, in arrival order */
  events = [];
  /** wake-ups for events() iterators */
  waiters = new Set();
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
  /** the child is the provider's failed spawn (ENOENT/EACCES), not guardian */
  passThrough = false;
  /** the child's 'close' arguments, once it closed */
  closed = null;
  closeEmitted = false;
  /** the handle emitted 'exit' */
  exitEmitted = false;
  /** the kill request was sent */
  killing = false;
  /** signals asked for before guardian was ready for them (see send()) */
  pendingSignals = [];
  /** the timer that checks whether guardian is ready for them */
  pendingTimer = null;

  /** what the driver did about a leaf guardian left behind (for the error message) */
  leafNote = '';
  spawned = deferred();
  exit = deferred();
  released = deferred();

  /** Sends the held signals now (in order). */
  flushSignals() {
    if (this.pendingTimer) clearTimeout(this.pendingTimer);
    this.pendingTimer = null;
    const pending = this.pendingSignals;
    this.pendingSignals = [];
    for (const sig of pending) {
      if (!this.running()) break;
      try {
        this.signal(sig);
      } catch (err) {
        if (err && err.code !== 'ESRCH') throw err;
      }
    }
  }
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

  /** Settles `d` once; `value` may be a function making it (an error is made only when used:
   * its stack trace costs ~0.1 ms on every spawn otherwise). */
  settle(d, ok, make) {
    if (d.settled) return;
    d.settled = true;
    const value = typeof make === 'function' ? make() : make;
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
    const line = describeEvent(ev);
    if (line !== null) debug('%s (guardian pid %d)', line, this.child.pid);
    // guardian's first event: its signals are set up; what was asked before goes now.
    if (this.pendingSignals.length) this.flushSignals();
    this.phase = phaseAfter(this.phase, ev) ?? this.phase;
    switch (ev.event) {
      case 'spawned': {
        if (Number.isInteger(ev.pid)) this.providerPid = ev.pid;
        const old = versionProblem(ev, this.guardianPath);
        if (old !== null) {
          this.refuse(old);
          break;
        }
        this.settle(this.spawned, true, ev);
        break;
      }
      case 'exit':
        this.settle(this.exit, true, ev);
        break;
      case 'released':
        // `exit` always precedes `released`; should guardian ever skip it,
        // do not leave `exit` pending forever.
        this.settle(this.exit, false,
          () => new GuardianError('guardian released without an exit event', { status: ev.status, code: 'NO_RELEASE' }));
        this.settle(this.spawned, false,
          () => new GuardianError('guardian released without a spawned event', { status: ev.status, code: 'NO_RELEASE' }));
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
    let made = null;
    const base = () => this.failure ?? (made ??= new GuardianError(
      (signal
        ? `guardian was killed by ${signal} before it released the tree`
        : `guardian exited with status ${code} without releasing the tree`) + this.leafNote,
      { status: code, exitCode: code, signal, event: this.errorEvent, code: 'NO_RELEASE' },
    ));
    if (this.phase !== Phase.RELEASED) this.phase = Phase.FAILED;
    this.settle(this.spawned, false, base);
    this.settle(this.exit, false, base);
    this.settle(this.released, false, base);
    this.wake();
    if (this.guardianExit && !this.exitEmitted) {
      this.exitEmitted = true;
      this.handle.onExit(code, signal);
    }
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
    this.closeWhenDone();
  }

  /** Emits the child's 'close' on the handle once the events stream ended too. */
  closeWhenDone() {
    if (this.closed === null || !this.streamEnded || this.closeEmitted) return;
    this.closeEmitted = true;
    this.finish();
    this.handle.onClose(...this.closed);
  }

  /** Spawn failures (ENOENT, EACCES, ...) carry syscall 'spawn <file>'; a failed
   * kill() also lands here and changes nothing. */
  onChildError(err) {
    if (!(this.child.pid === undefined || /spawn/.test(String(err && err.syscall)))) return;
    if (!this.failure && this.passThrough) {
      // the provider's command could not run: child_process's own error, as it emits it
      this.failure = err;
      this.reported = true;
      this.handle.exitCode = this.child.exitCode;
      this.handle.emit('error', err);
    } else if (!this.failure) {
      this.failure = this.before ?? new GuardianError(
        `could not start guardian (${this.guardianPath}, from ${this.located.source}): ${err.message}`,
        { status: 125, code: 'SPAWN_FAILED' },
      );
      if (this.failure.cause === undefined) this.failure.cause = err;
      debug('%s', this.failure.message);
      this.reported = true;
      this.handle.startFailed(this.failure);
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

  /** One signal to guardian: ChildProcess.kill for a name, process.kill for a number (Node's
   * kill refuses real-time numbers such as the kill request's 64). */
  signal(sig) {
    if (typeof sig === 'number') {
      process.kill(this.child.pid, sig);
      return true;
    }
    return this.child.kill(sig);
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
   * stream, or after DRIVER.readyWaitMs (5 s) at the latest. */
  send(signal) {
    if (!this.running()) return false;
    if (this.pendingSignals.length || (this.events.length === 0 && !this.streamEnded && termBlocked(this.child.pid) !== true)) {
      this.pendingSignals.push(signal);
      if (!this.pendingTimer) {
        const deadline = Date.now() + DRIVER.readyWaitMs;
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
      return this.signal(signal);
    } catch (err) {
      // already gone: `released` settles from the exit path
      if (err && err.code !== 'ESRCH') throw err;
      return false;
    }
  }

  /** The kill request (spec/driver.json kill_request): signal 64 to guardian, which SIGKILLs the
   * provider and its whole tree at once and ends with the provider's status (SIGKILL). Held like
   * any signal until guardian is ready for it. Returns whether it was sent (or held). */
  killRequest() {
    if (!this.running()) return false;
    if (!this.killing) debug('kill request: signal %d to guardian pid %d', DRIVER.killRequest.number, this.child.pid);
    this.killing = true;
    const sent = this.send(DRIVER.killRequest.number);
    if (sent) this.handle.killed = true;
    return sent;
  }

  /** The stop request: SIGTERM once (the stop signal, guardian's grace, then SIGKILL). With
   * `graceMs`, the kill request follows when `released` has not come that long after; with an
   * AbortSignal, when it aborts. Returns `released`. */
  stop(graceMs, signal) {
    const kill = () => this.killRequest();
    if (signal?.aborted) {
      kill();
      return this.released.promise;
    }
    if (this.send(DRIVER.stopRequest.number)) this.handle.killed = true;
    const cleanups = [];
    if (graceMs !== undefined && graceMs !== Infinity) {
      const timer = setTimeout(kill, graceMs);
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

  /** A guardian too old for this driver: its tree is stopped (the stop request: an old guardian
   * has no kill request) and every promise rejects with `err`, which is emitted as 'error'. */
  refuse(err) {
    debug('%s', err.message);
    this.send(DRIVER.stopRequest.number);
    this.failure = err;
    this.reported = true;
    this.handle.startFailed(err);
    this.settle(this.spawned, false, err);
    this.settle(this.exit, false, err);
    this.settle(this.released, false, err);
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
    // 'close' may come before the events stream's own 'end' reached this module (Bun emits it
    // before the stream's last data): it is emitted once the stream ended, so that 'exit' and
    // `released` come before 'close'.
    child.on('close', (code, signal) => {
      this.closed = [code, signal];
      this.closeWhenDone();
    });
  }
}

