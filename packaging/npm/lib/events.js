//! guardian's event stream: parsing lines (parseEventLine, LineSplitter), the clock of the
//! events' `ts` (monotonicNow), the phases the events move a guarded process through, and
//! the ready check (SigBlk) that tells when guardian can take a signal.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { StringDecoder } from 'node:string_decoder';

const require = createRequire(import.meta.url);

/** The fd guardian writes its events to, in the child. Node maps stdio[3] to fd 3. */
export const EVENTS_FD = 3;

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

/**
 * The phases of a guarded process, in guardian's own vocabulary
 * (src/supervise/state.rs), as far as its events have told: `spawned` starts
 * it running, `stopping` begins the stop, `exit` (the provider was reaped)
 * starts draining the tree, `released` ends it; an `error` event, or a
 * guardian that could not run or ended without `released`, ends it failed.
 */
export const Phase = Object.freeze({
  STARTING: 'starting',
  RUNNING: 'running',
  STOPPING: 'stopping',
  DRAINING: 'draining',
  RELEASED: 'released',
  FAILED: 'failed',
});

/** The phase an event moves a guarded process to (unchanged: null). */
export function phaseAfter(phase, ev) {
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

/** Whether process `pid` blocks SIGTERM (SigBlk of /proc/<pid>/status); null when that cannot
 * be read. */
export function termBlocked(pid) {
  try {
    const m = /^SigBlk:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m ? (BigInt(`0x${m[1]}`) & (1n << 14n)) !== 0n : null;
  } catch {
    return null;
  }
}

