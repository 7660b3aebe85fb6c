//! Options: guardian's options as camelCase keys (the table is derived from the generated
//! lib/spec.js, never written by hand), the conversion of each kind to guardian's command line,
//! durations as guardian reads them, and the check that rejects an unknown option key.
import { DRIVER, GUARDIAN_OPTIONS } from './spec.js';
import { EVENTS_FD } from './events.js';

/** guardian options the driver does not take as camelCase options, and why. */
export const NOT_PASSED = Object.freeze({
  'events-fd': 'the driver sets it: the events reach it on fd 3',
  'events-file': 'guardedCommand() sets it (a launcher passes no fd); spawn() reads fd 3',
  'kill-signal': 'the driver sets it (GUARDIAN_KILL_SIGNAL=RTMAX in guardian\'s environment): kill() is the kill request',
  help: 'prints text; not for a driver',
  version: 'prints text; not for a driver',
});

/** camelCase keys that differ from guardian's long name: Node's own `timeout` means something else. */
const RENAMED = Object.freeze({ timeout: 'guardianTimeout' });

const camel = (long) => RENAMED[long] ?? long.replace(/-([a-z])/g, (_, c) => c.toUpperCase());

/**
 * guardian's options the driver passes, in command-line order: the camelCase key, guardian's
 * long option, its kind (spec/options.json's word) and, for a choice, its words; for a
 * count, its maximum. Derived from the generated spec, so a new guardian option is a new key.
 */
export const OPTIONS = Object.freeze(GUARDIAN_OPTIONS
  .filter((o) => !(o.long in NOT_PASSED))
  .map((o) => Object.freeze({ key: camel(o.long), long: o.long, kind: o.kind, extra: o.choices ?? o.max ?? undefined })));

const BY_KEY = new Map(OPTIONS.map((o) => [o.key, o]));

/**
 * The driver's own option keys beside guardian's: child_process.spawn's (as Node means them,
 * `timeout` and `killSignal` and `signal` included) and the driver's.
 */
export const SPAWN_KEYS = Object.freeze([
  'cwd', 'env', 'stdio', 'timeout', 'killSignal', 'signal', 'shell', 'detached', 'uid', 'gid',
  'windowsHide', 'argv0', 'serialization', 'windowsVerbatimArguments',
  'guardianPath', 'guardianArgs',
]);

/** The keys guardedCommand() takes: no stdio (the launcher owns it), no Node process options. */
export const COMMAND_KEYS = Object.freeze(['cwd', 'env', 'guardianPath', 'guardianArgs', 'eventsFile', 'stderr']);

function distance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
  }
  return d[a.length][b.length];
}

/**
 * Throws a TypeError (code ERR_INVALID_ARG_VALUE) naming an unknown key of `options` and the
 * nearest known one: a typo (`graec`) must not silently mean "no grace".
 */
export function checkOptions(options, own, where, guardians = true) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    const err = new TypeError(`${where}: options must be an object, got ${options === null ? 'null' : typeof options}`);
    err.code = 'ERR_INVALID_ARG_TYPE';
    throw err;
  }
  const known = guardians ? [...own, ...BY_KEY.keys()] : [...own];
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const near = known.map((k) => [distance(key.toLowerCase(), k.toLowerCase()), k]).sort((x, y) => x[0] - y[0])[0];
    const hint = near && near[0] <= Math.max(2, key.length / 3) ? ` (did you mean '${near[1]}'?)` : '';
    const err = new TypeError(`${where}: unknown option '${key}'${hint}; the options are ${known.join(', ')}`);
    err.code = 'ERR_INVALID_ARG_VALUE';
    throw err;
  }
}

const D = DRIVER.duration;
const durationMessage = (which, text) => D.messages[which].replace('{text}', text).replace('{max_seconds}', String(D.maxSeconds));
const MAX_NS = BigInt(D.maxSeconds) * 1000000000n + 709551615n; // u64::MAX nanoseconds

/** A decimal string's value times `unitNs`, rounded up to whole nanoseconds, or null for a bad form. */
function decimalNs(num, unitNs) {
  if (!/^[0-9]+(\.[0-9]+)?$/.test(num)) return null;
  const [int, frac = ''] = num.split('.');
  const scale = 10n ** BigInt(frac.length);
  const exact = BigInt(int + frac) * BigInt(unitNs);
  return (exact + scale - 1n) / scale;
}

/** A non-negative finite number's shortest decimal (String(v)) without an exponent: 1e-7 -> '0.0000001'. */
function plainDecimal(v) {
  const [mant, exp = '0'] = String(v).split('e');
  const [int, frac = ''] = mant.split('.');
  const e = Number(exp);
  const digits = int + frac;
  const point = int.length + e;
  if (point <= 0) return `0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return digits + '0'.repeat(point - digits.length);
  return `${digits.slice(0, point)}.${digits.slice(point)}`;
}

/**
 * guardian's duration rule (spec/driver.json `duration`): `text` in guardian's form ('500ms',
 * '1.5s', '2' = seconds) as nanoseconds; throws a RangeError/TypeError with guardian's own
 * message where guardian would refuse it. guardian truncates below a nanosecond; the driver
 * rounds up, so a tiny grace never becomes none.
 */
export function parseDuration(text) {
  const t = String(text).trim();
  const m = /^([0-9.]*)([a-z]*)$/.exec(t);
  const unit = m ? D.unitsNs[m[2]] : undefined;
  const ns = m && unit !== undefined && !m[1].startsWith('.') ? decimalNs(m[1], unit) : null;
  if (ns === null) throw new TypeError(durationMessage('invalid', text));
  if (ns > MAX_NS) throw new RangeError(durationMessage('too_large', text));
  return ns;
}

/** A duration option in milliseconds (number) or guardian's form (string) as guardian's argument. */
export function durationArg(name, value) {
  if (typeof value === 'number') {
    if (Number.isNaN(value) || value < 0) {
      throw new RangeError(`${name}: ${durationMessage('invalid', String(value))} (milliseconds as a number)`);
    }
    if (!Number.isFinite(value)) throw new RangeError(`${name}: ${durationMessage('too_large', String(value))}`);
    // the shortest decimal that reads back as `value`, exactly, in ns, rounded up
    const ns = decimalNs(plainDecimal(value), 1000000);
    if (ns > MAX_NS) throw new RangeError(`${name}: ${durationMessage('too_large', `${value}ms`)}`);
    return `${ns}ns`;
  }
  if (typeof value === 'string' && value.trim() !== '') {
    try {
      parseDuration(value);
    } catch (err) {
      err.message = `${name}: ${err.message}`;
      throw err;
    }
    return value.trim();
  }
  throw new TypeError(`${name} must be milliseconds (a number) or a duration string such as '2s' or '500ms', got ${value}`);
}

const stringArg = (what) => (o, v) => {
  if (!(typeof v === 'string' && v !== '') && !(typeof v === 'number' && Number.isFinite(v))) {
    throw new TypeError(`${o.key} must be ${what}, got ${v}`);
  }
  return [`--${o.long}`, String(v)];
};

/** One option's value as guardian's arguments (none when it is off), by its kind. */
const BY_KIND = {
  duration: (o, v) => [`--${o.long}`, durationArg(o.key, v)],
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
  size: stringArg("a size such as '512M' or bytes"),
  limit: stringArg('a number'),
  cpus: stringArg("a CPU share such as 0.5 or 'max'"),
};

/** guardian's options for `options`, without the events fd (everything before `--`). */
export function optionArgs(options) {
  const argv = [];
  for (const o of OPTIONS) {
    const v = options[o.key];
    if (v === undefined || v === null) continue;
    const kind = BY_KIND[o.kind];
    if (!kind) throw new TypeError(`${o.key}: guardian's option kind '${o.kind}' is new to this driver; pass it in guardianArgs`);
    argv.push(...kind(o, v));
  }
  if (options.guardianArgs !== undefined) {
    if (!Array.isArray(options.guardianArgs)) throw new TypeError('guardianArgs must be an array of strings');
    argv.push(...options.guardianArgs.map(String));
  }
  return argv;
}

/**
 * Translate the camelCase options into guardian's command-line options (everything before
 * `--`), with the events fd. Exported for tests and for callers that build their own command
 * line.
 */
export function guardianArgs(options = {}) {
  return ['--events-fd', String(EVENTS_FD), ...optionArgs(options)];
}
