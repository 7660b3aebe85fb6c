//! treeguardian: start a provider under guardian and follow its JSON events. The public API;
//! each part lives in lib/ (see each module's header):
//!   lib/child.js    spawn(): the ChildProcess-compatible handle
//!   lib/process.js  one guarded process's state, signals, kill and stop requests
//!   lib/command.js  guardedCommand() for launchers that spawn the process themselves
//!   lib/options.js  camelCase options -> guardian's command line, durations, unknown keys
//!   lib/locate.js   finding the guardian binary and the provider's command
//!   lib/events.js   event lines, the events' clock, phases, the ready check
//!   lib/version.js  the version check of `spawned`
//!   lib/log.js      util.debuglog('treeguardian') (NODE_DEBUG=treeguardian)
//!   lib/spec.js     GENERATED from spec/ by scripts/gen-spec.mjs
//!
//! guardian's contract (docs/contract.md in the guardian repository) fixes the command line, the
//! exit codes and the event lines this module relies on. Only node: built-ins are used, so the
//! module runs unchanged in Node (>= 20) and Bun. The driver never sends SIGKILL to guardian: a
//! SIGKILLed guardian cannot finish the teardown. kill() sends guardian the kill request instead.

import { spawnGuarded } from './lib/child.js';

export { GuardedChildProcess, spawnGuarded } from './lib/child.js';
export { guardedCommand } from './lib/command.js';
export { AbortError, GuardianError } from './lib/errors.js';
export { EVENTS_FD, LineSplitter, monotonicNow, parseEventLine } from './lib/events.js';
export { locateGuardian, platformPackage, resolveCommand, resolveGuardianPath } from './lib/locate.js';
export { NOT_PASSED, OPTIONS, guardianArgs, parseDuration } from './lib/options.js';
export { DRIVER, EVENTS, GUARDIAN_OPTIONS } from './lib/spec.js';
export { compareVersions } from './lib/version.js';

/** child_process.spawn's drop-in: `import { spawn } from 'treeguardian'`. */
export const spawn = spawnGuarded;

export default spawnGuarded;
