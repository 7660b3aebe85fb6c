// Type declarations for @guardian/driver (hand-written; see index.js).
import type { ChildProcess, IOType } from 'node:child_process';
import type { Readable, Writable, Stream } from 'node:stream';

/** The fd guardian writes its events to in the child (stdio[3]). */
export declare const EVENTS_FD: 3;

/** A duration: a guardian duration string ('2s', '500ms', '1.5s', '1m', '0') or milliseconds. */
export type Duration = string | number;

/** One stdio entry for fds 0-2 of guardian (and so of the provider). */
export type StdioEntry = IOType | 'ipc' | Stream | number | null | undefined;

export interface GuardedOptions {
  /** Path of the guardian binary; default $GUARDIAN_BIN, else `guardian` on PATH. */
  guardianPath?: string;
  /** --grace: time between the stop signal and SIGKILL (default 1s). */
  grace?: Duration;
  /** --stop-signal: signal that starts a teardown ('TERM', 'SIGTERM', 15, 'RTMIN+2'). */
  stopSignal?: string | number;
  /** --forward-to: where forwarded signals go. */
  forwardTo?: 'provider' | 'group';
  /** --timeout: then a bounded stop; guardian exits 124. */
  timeout?: Duration;
  /** --wait-descendants: after the provider exits, let descendants finish. */
  waitDescendants?: boolean;
  /** --cgroup: `true` or 'auto' for auto, or a parent cgroup path. */
  cgroup?: boolean | 'auto' | string;
  /** --no-parent-watch: do not tear down when guardian's parent dies. */
  noParentWatch?: boolean;
  /** --verbose, repeated `n` times (true = once). */
  verbose?: boolean | number;
  /** --quiet. */
  quiet?: boolean;
  /** Extra guardian options placed before `--` (for options this module does not know yet). */
  guardianArgs?: string[];
  /** stdio of fds 0-2 (guardian passes them to the provider); default 'pipe'. fd 3 is the events pipe. */
  stdio?: IOType | [StdioEntry?, StdioEntry?, StdioEntry?];
  /** Environment of guardian and the provider. */
  env?: NodeJS.ProcessEnv;
  /** Working directory of guardian and the provider. */
  cwd?: string | URL;
}

interface EventBase {
  event: string;
  /** CLOCK_MONOTONIC seconds. */
  ts: number;
  /** Readers must ignore unknown fields. */
  [field: string]: unknown;
}

export interface FallbackEvent extends EventBase {
  event: 'fallback';
  what: string;
  errno: string;
  detail: string;
}
export interface SpawnedEvent extends EventBase {
  event: 'spawned';
  pid: number;
  pgid: number;
  guardian_pid: number;
  mode: 'subreaper' | 'pid1' | 'cgroup';
  cgroup: string | null;
}
export interface StoppingEvent extends EventBase {
  event: 'stopping';
  /** `kill-request`: a further stop request (SIGTERM or the stop signal) ended the grace at once; `grace_ms` is 0. */
  reason: 'signal' | 'timeout' | 'parent-died' | 'kill-request';
  grace_ms: number;
}
export interface SignalEvent extends EventBase {
  event: 'signal';
  signal: string;
  target: 'provider' | 'group' | 'descendants' | 'namespace' | 'cgroup';
  /** The processes the signal was delivered to (descendants, cgroup; namespace when guardian as PID 1 reads the namespace's /proc). */
  pids?: number[];
  reason: 'forwarded' | 'stop' | 'kill' | 'parent-died' | 'timeout';
}
/** The provider stopped (`waitid(WSTOPPED)`); see docs/contract.md, Job control. */
export interface StoppedEvent extends EventBase {
  event: 'stopped';
  pid: number;
  signal: 'SIGSTOP' | 'SIGTSTP' | 'SIGTTIN' | 'SIGTTOU' | string;
}
/** The provider was continued (`waitid(WCONTINUED)`). */
export interface ContinuedEvent extends EventBase {
  event: 'continued';
  pid: number;
}
export interface ExitEvent extends EventBase {
  event: 'exit';
  pid: number;
  code: number | null;
  signal: string | null;
  core_dumped: boolean;
}
export interface ReleasedEvent extends EventBase {
  event: 'released';
  status: number;
  signalled: number;
  killed: number;
  reaped: number;
  teardown_ms: number;
}
export interface ErrorEvent extends EventBase {
  event: 'error';
  status: 125 | 126 | 127 | number;
  message: string;
  /** An abandoned teardown: the pids guardian was not permitted to signal (the provider included). */
  unkillable?: number[];
  /** An abandoned teardown: the processes of the tree still visible in /proc. */
  remaining?: number[];
}
/** A line that was not a JSON object with an `event` field (produced by this module, not guardian). */
export interface MalformedEvent extends EventBase {
  event: 'malformed';
  line: string;
  message: string;
}

export type GuardianEvent =
  | FallbackEvent | SpawnedEvent | StoppingEvent | SignalEvent | StoppedEvent | ContinuedEvent | ExitEvent
  | ReleasedEvent | ErrorEvent | MalformedEvent | EventBase;

/** Rejection reason of spawned/exit/released when guardian fails or ends without `released`. */
export declare class GuardianError extends Error {
  constructor(message: string, details?: {
    status?: number | null; exitCode?: number | null; signal?: NodeJS.Signals | null;
    event?: ErrorEvent | null; cause?: unknown;
  });
  name: 'GuardianError';
  /** status of guardian's `error` event (125/126/127), else guardian's exit code (125 if it could not be started). */
  status: number | null;
  /** guardian's own exit code, when it exited. */
  exitCode: number | null;
  /** the signal that killed guardian, if any. */
  signal: NodeJS.Signals | null;
  /** the `error` event, when guardian sent one. */
  event: ErrorEvent | null;
  cause?: unknown;
}

export interface Guarded extends AsyncIterable<GuardianEvent> {
  /** guardian's ChildProcess. */
  readonly child: ChildProcess;
  /** guardian's pid (undefined when it could not be started). */
  readonly pid: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** Resolves with `spawned`; rejects with GuardianError on `error` or if guardian ends first. */
  readonly spawned: Promise<SpawnedEvent>;
  /** Resolves with the provider's `exit`; rejects with GuardianError likewise. Settles before `released`. */
  readonly exit: Promise<ExitEvent>;
  /** Resolves with `released` (the tree is gone); rejects with GuardianError on `error` or if guardian ends without it. */
  readonly released: Promise<ReleasedEvent>;
  /** Every event line, from the first, until guardian closes the fd. Each call starts a new replay. */
  events(): AsyncIterableIterator<GuardianEvent>;
  /** Events received so far. */
  readonly received: GuardianEvent[];
  /** Signal guardian (it forwards, or for its stop signal arms its bounded stop); returns `released`. */
  stop(signal?: NodeJS.Signals | number): Promise<ReleasedEvent>;
  /** Let the event loop exit while guardian runs (guardian then sees its parent die and stops the tree). */
  unref(): Guarded;
  ref(): Guarded;
}

/** Start `command args...` under guardian with `--events-fd 3`. */
export declare function spawnGuarded(command: string, args?: readonly string[], options?: GuardedOptions): Guarded;
export declare function spawnGuarded(command: string, options?: GuardedOptions): Guarded;
export default spawnGuarded;

/** guardian's command-line options for `options` (everything before `--`). */
export declare function guardianArgs(options?: GuardedOptions): string[];
/** options.guardianPath, else env.GUARDIAN_BIN, else 'guardian'. */
export declare function resolveGuardianPath(options?: GuardedOptions, env?: NodeJS.ProcessEnv): string;
/** Parse one event line: null for a blank line; throws for anything but a JSON object with an `event` string. */
export declare function parseEventLine(line: string): GuardianEvent | null;

/** Incremental splitter of a byte/character stream into lines. */
export declare class LineSplitter {
  push(chunk: Uint8Array | string): string[];
  end(): string[];
}
