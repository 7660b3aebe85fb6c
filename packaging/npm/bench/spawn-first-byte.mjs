#!/usr/bin/env node
//! Spawn-to-first-byte (issue 30.3, as issue 20.5 for Python): a provider started through the
//! driver's spawn, through guardian directly (child_process.spawn of `guardian -- CMD`, with and
//! without an events pipe nobody reads: guardian's own start-up) and with plain
//! child_process.spawn, side by side in interleaved rounds in a shuffled order.
//!
//!   GUARDIAN_BIN=... node bench/spawn-first-byte.mjs [-n ROUNDS] [--seed N]
//!
//! The time is from just before the spawn call to the first byte on the provider's stdout. The
//! goal: the driver costs no more than guardian's own start-up plus 10 %:
//! (driver - plain) <= 1.1 * (guardian --events-fd - plain), on the medians.
import { spawn as nodeSpawn } from 'node:child_process';

import { spawn } from '../index.js';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const rounds = opt('-n', 300);
let seed = opt('--seed', 7);
const rand = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
const guardian = process.env.GUARDIAN_BIN;
if (!guardian) {
  console.error('set GUARDIAN_BIN');
  process.exit(2);
}
const CMD = ['/bin/echo', 'x'];

function firstByte(start) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const cp = start();
    let t1 = null;
    cp.stdout.once('data', () => { t1 = process.hrtime.bigint(); });
    cp.stdout.resume();
    cp.on('error', reject);
    cp.on('close', () => (t1 === null ? reject(new Error('no output')) : resolve(Number(t1 - t0) / 1e6)));
  });
}

const WAYS = {
  plain: () => nodeSpawn(CMD[0], CMD.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] }),
  guardian: () => nodeSpawn(guardian, ['--', ...CMD], { stdio: ['ignore', 'pipe', 'inherit'] }),
  'guardian --events-fd': () => nodeSpawn(guardian, ['--events-fd', '3', '--', ...CMD], { stdio: ['ignore', 'pipe', 'inherit', 'pipe'] }),
  driver: () => spawn(CMD[0], CMD.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] }),
};

const times = Object.fromEntries(Object.keys(WAYS).map((k) => [k, []]));
for (let w = 0; w < 20; w++) for (const k of Object.keys(WAYS)) await firstByte(WAYS[k]); // warm-up
for (let r = 0; r < rounds; r++) {
  const order = Object.keys(WAYS).sort(() => rand() - 0.5);
  for (const k of order) times[k].push(await firstByte(WAYS[k]));
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
console.log(`${rounds} rounds, /bin/echo x, guardian ${guardian}, node ${process.version}`);
console.log('how                          median ms');
const m = {};
for (const k of Object.keys(WAYS)) {
  m[k] = median(times[k]);
  console.log(`${k.padEnd(28)} ${m[k].toFixed(3)}`);
}
const own = m['guardian --events-fd'] - m.plain;
const drv = m.driver - m.plain;
console.log(`guardian's own start-up ${own.toFixed(3)} ms; through the driver ${drv.toFixed(3)} ms: `
  + `${Math.round((drv / own) * 100)} % of guardian's own (goal <= 110 %)`);
