//! The driver's errors: GuardianError (guardian failed or ended without `released`, or is too
//! old) and spawnError (a command that cannot be started, in child_process's own form).
import { constants } from 'node:os';

/** Error raised (as a promise rejection) when guardian fails or ends without `released`. */
export class GuardianError extends Error {
  constructor(message, details = {}) {
    super(message);
    this.name = 'GuardianError';
    /** guardian's status from an `error` event (125/126/127), else its exit code, else null. */
    this.status = details.status ?? null;
    /** guardian's own exit code, when it exited. */
    this.exitCode = details.exitCode ?? null;
    /** signal that ended guardian: it was killed, or it died of the provider's signal. */
    this.signal = details.signal ?? null;
    /** the `error` event guardian emitted, if any. */
    this.event = details.event ?? null;
    /** a short machine-readable code: 'GUARDIAN_NOT_FOUND', 'BAD_CWD', 'SPAWN_FAILED', 'ERROR_EVENT',
     * 'NO_RELEASE', 'GUARDIAN_TOO_OLD'. */
    this.code = details.code ?? null;
    if (details.cause !== undefined) this.cause = details.cause;
  }
}

/**
 * The error child_process gives for a command it cannot start ('ENOENT', 'EACCES'): message
 * `spawn FILE CODE`, errno, code, syscall `spawn FILE`, path and spawnargs.
 */
export function spawnError(code, file, args) {
  const err = new Error(`spawn ${file} ${code}`);
  err.errno = -(constants.errno[code] ?? 0);
  err.code = code;
  err.syscall = `spawn ${file}`;
  err.path = file;
  err.spawnargs = args;
  return err;
}

/** Node's AbortError, as child_process emits it when its `signal` aborts. */
export class AbortError extends Error {
  constructor(message = 'The operation was aborted', options = undefined) {
    super(message, options);
    this.code = 'ABORT_ERR';
    this.name = 'AbortError';
  }
}
