//! The driver's log: util.debuglog('treeguardian'), on with NODE_DEBUG=treeguardian. Every
//! `fallback` and `error` event guardian sends, and every decision the driver takes in the
//! host's stead (a command resolved, a kill request, a refusal), is written here.
import { debuglog } from 'node:util';

let log = debuglog('treeguardian', (fn) => { log = fn; });

/** Log one line (printf-style, as util.format); free when NODE_DEBUG does not name treeguardian. */
export function debug(...args) {
  log(...args);
}

/** Whether the log is on (to skip building costly messages). */
export function debugEnabled() {
  return typeof log.enabled === 'boolean' ? log.enabled : /\btreeguardian\b/i.test(process.env.NODE_DEBUG ?? '');
}

/** The log line for one guardian event, or null when it is not one the log shows. */
export function describeEvent(ev) {
  switch (ev.event) {
    case 'fallback': return `guardian fell back: ${ev.what} refused (${ev.errno}): ${ev.detail}`;
    case 'error': return `guardian refused or failed (status ${ev.status}): ${ev.message}`;
    case 'stopping': return `guardian stopping: reason ${ev.reason}, grace ${ev.grace_ms} ms`;
    case 'released': return `guardian released the tree: status ${ev.status}, killed ${ev.killed}, reaped ${ev.reaped}`;
    case 'malformed': return `malformed event line: ${ev.message}`;
    default: return null;
  }
}
