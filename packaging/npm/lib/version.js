//! The version check (COMMON 3 / spec/driver.json version_field): guardian's `spawned` event
//! carries its version; a missing or lower one is refused, naming both versions and how to get
//! a matching binary. No extra process start: the event is read anyway.
import { readFileSync } from 'node:fs';

import { GuardianError } from './errors.js';
import { platformPackage } from './locate.js';
import { DRIVER } from './spec.js';

let driverVersion;
/** This package's version (package.json), read once. */
export function packageVersion() {
  if (driverVersion === undefined) {
    try {
      driverVersion = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;
    } catch {
      driverVersion = 'unknown';
    }
  }
  return driverVersion;
}

/** -1, 0 or 1 as dotted version `a` is below, equal to or above `b` (numeric parts; a
 * pre-release suffix is ignored). */
export function compareVersions(a, b) {
  const parts = (v) => String(v).split(/[-+]/)[0].split('.').map((x) => Number.parseInt(x, 10) || 0);
  const x = parts(a);
  const y = parts(b);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

/** null when `spawned` comes from a guardian this driver accepts, else the GuardianError. */
export function versionProblem(spawned, guardianPath) {
  const min = DRIVER.minGuardianVersion;
  const theirs = spawned[DRIVER.versionField.field];
  if (typeof theirs === 'string' && compareVersions(theirs, min) >= 0) return null;
  const pkg = platformPackage() ?? 'the platform package';
  const got = typeof theirs === 'string' ? `guardian ${theirs}` : 'a guardian older than 0.2.0 (its spawned event has no version)';
  return new GuardianError(
    `${guardianPath} is ${got}; treeguardian ${packageVersion()} needs guardian ${min} or newer. `
      + `Fix: npm install ${pkg}@${packageVersion()}, or set ${DRIVER.binaryVariable} to a guardian ${min} or newer`,
    { status: 125, code: 'GUARDIAN_TOO_OLD' },
  );
}
