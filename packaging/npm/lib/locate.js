//! Finding programs: the guardian binary (options.guardianPath, $GUARDIAN_BIN, the platform
//! package, PATH) and the provider's command, resolved as execvp would before the spawn so that
//! a missing or non-executable command fails at spawn time in child_process's own form.
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { GuardianError } from './errors.js';
import { DRIVER } from './spec.js';

const require = createRequire(import.meta.url);

/** The platform package holding the static guardian binary for this system, or null. */
export function platformPackage(platform = process.platform, arch = process.arch) {
  if (platform !== 'linux') return null;
  return PLATFORM_PACKAGES[arch] ?? null;
}

const PLATFORM_PACKAGES = {
  x64: 'treeguardian-linux-x64',
  arm64: 'treeguardian-linux-arm64',
};

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
  const fromEnv = env[DRIVER.binaryVariable];
  if (fromEnv) return { path: fromEnv, source: `$${DRIVER.binaryVariable}` };
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

/** The working directory's problem, named, or null when it is usable. */
export function cwdProblem(cwd) {
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


/** execvp's search path when PATH is unset (glibc's confstr(_CS_PATH)). */
const DEFAULT_PATH = '/bin:/usr/bin';

/** The error code execve would give for `file`: null when it can be run, else 'ENOENT' or 'EACCES'.
 * No exception for a missing file (a PATH search meets many; a thrown one costs ~30 us). */
function runnable(file) {
  let st;
  try {
    st = statSync(file, { throwIfNoEntry: false });
  } catch (err) {
    return err.code === 'EACCES' ? 'EACCES' : 'ENOENT'; // ENOTDIR, ELOOP, ...
  }
  if (st === undefined) return 'ENOENT';
  if (st.isDirectory()) return 'EACCES';
  try {
    accessSync(file, fsConstants.X_OK);
    return null;
  } catch {
    return 'EACCES';
  }
}

/**
 * Resolve `command` as execvp would (a name with a slash as it is, relative to `cwd`; else
 * each PATH entry in turn, EACCES when only non-executable files were found): returns
 * `{ file, code }` with `code` null when it can run, else 'ENOENT' or 'EACCES'. A few stat
 * calls, no process start and no wait.
 */
export function resolveCommand(command, pathVar, cwd) {
  const base = cwd === undefined || cwd === null ? process.cwd() : (cwd instanceof URL ? fileURLToPath(cwd) : String(cwd));
  if (command.includes('/')) {
    return { file: command, code: runnable(isAbsolute(command) ? command : resolve(base, command)) };
  }
  let denied = false;
  for (const dir of (pathVar ?? DEFAULT_PATH).split(':')) {
    const file = join(dir === '' ? base : (isAbsolute(dir) ? dir : resolve(base, dir)), command);
    const code = runnable(file);
    if (code === null) return { file, code: null };
    if (code === 'EACCES') denied = true;
  }
  return { file: command, code: denied ? 'EACCES' : 'ENOENT' };
}
