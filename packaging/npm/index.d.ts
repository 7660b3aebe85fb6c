// Type declarations for treeguardian (hand-written; see index.js; lib/spec.d.ts is generated).
// The event interfaces follow the event table of docs/contract.md in the
// guardian repository; test/contract.test.js checks them against it.
import type { ChildProcess, IOType } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import type { Readable, Writable, Stream } from 'node:stream';

/** The fd guardian writes its events to in the child (stdio[3]). */
export declare const EVENTS_FD: 3;

/** A duration: a guardian duration string ('2s', '500ms', '1.5s', '1m', '0') or milliseconds. */
export type Duration = string | number;

/** One stdio entry for fds 0-2 of guardian (and so of the provider). */
export type StdioEntry = IOType | 'ipc' | Stream | number | null | undefined;

/** The `stdio` option: one value for fds 0-2, or up to three entries (missing ones are 'pipe'). */
export type StdioOption = IOType | readonly [StdioEntry?, StdioEntry?, StdioEntry?];

export interface GuardedOptions<S extends StdioOption = StdioOption> {
  /** Path of the guardian binary; default $GUARDIAN_BIN, else the platform package, else `guardian` on PATH. */
  guardianPath?: string;
  /** --grace: time between the stop signal and SIGKILL (guardian's default 1s). */
  grace?: Duration;
  /** --stop-signal: signal that starts a teardown ('TERM', 'SIGTERM', 15, 'RTMIN+2'). */
  stopSignal?: string | number;
  /** --forward-to: where forwarded signals go. */
  forwardTo?: 'provider' | 'group';
  /** guardian's --timeout: then a bounded stop; guardian exits 124. (Node's `timeout` is Node's.) */
  guardianTimeout?: Duration;
  /** Node's: after this many ms, kill(killSignal) (default 'SIGTERM': the stop request). */
  timeout?: number;
  /** Node's: the signal of `timeout` and `signal` (default 'SIGTERM'). */
  killSignal?: NodeJS.Signals | number;
  /** Node's: when it aborts, kill(killSignal) and an AbortError 'error' event. */
  signal?: AbortSignal;
  /** Node's: run the command through /bin/sh -c (or the given shell). */
  shell?: boolean | string;
  detached?: boolean;
  uid?: number;
  gid?: number;
  /** accepted and ignored (Linux) */
  windowsHide?: boolean;
  windowsVerbatimArguments?: boolean;
  /** --no-sentinel */
  noSentinel?: boolean;
  /** --memory-max ('512M', bytes, 'max'); cgroup mode */
  memoryMax?: string | number;
  /** --pids-max; cgroup mode */
  pidsMax?: string | number;
  /** --cpu-max (0.5, 'max'); cgroup mode */
  cpuMax?: string | number;
  /** --wait-descendants: after the provider exits, let descendants finish. */
  waitDescendants?: boolean;
  /** --cgroup: `true` or 'auto' for auto, or a parent cgroup path. */
  cgroup?: boolean | 'auto' | (string & {});
  /** --no-parent-watch: do not tear down when guardian's parent dies. */
  noParentWatch?: boolean;
  /** --verbose, repeated `n` times (true = once). */
  verbose?: boolean | number;
  /** --quiet. */
  quiet?: boolean;
  /** Extra guardian options placed before `--` (for options this module does not know yet). */
  guardianArgs?: readonly string[];
  /** stdio of fds 0-2 (guardian passes them to the provider); default 'pipe'. fd 3 is the events pipe. */
  stdio?: S;
  /** Environment of guardian and the provider. */
  env?: NodeJS.ProcessEnv;
  /** Working directory of guardian and the provider; checked before the spawn. */
  cwd?: string | URL;
}

// --- events: a union discriminated by `event` -------------------------------

interface EventBase {
  /**
   * CLOCK_MONOTONIC, seconds (float, microseconds). Not wall time. In Node on
   * Linux, `Number(process.hrtime.bigint()) / 1e9` reads the same clock (see
   * monotonicNow()); Bun's `process.hrtime` does not (see the README).
   */
  ts: number;
}

export interface FallbackEvent extends EventBase {
  event: 'fallback';
  /** the interface that was refused: 'pidfd_open', 'clone3', 'cgroup', 'cgroup.kill', ... */
  what: string;
  /** 'ENOSYS', 'EPERM', ... */
  errno: string;
  detail: string;
}
export interface SpawnedEvent extends EventBase {
  event: 'spawned';
  /** the provider's pid */
  pid: number;
  pgid: number;
  guardian_pid: number;
  mode: 'subreaper' | 'pid1' | 'cgroup';
  /** the leaf cgroup's path, or null */
  cgroup: string | null;
  /** guardian's version, e.g. '0.2.0' (checked against spec/driver.json's min_guardian_version);
   * optional to the driver: a guardian older than 0.2.0 omits it, and is refused by name. */
  version?: string;
}
export interface StoppingEvent extends EventBase {
  event: 'stopping';
  /** 'kill-request': the kill request (the driver's kill()) SIGKILLed the tree at once. */
  reason: 'signal' | 'timeout' | 'parent-died' | 'kill-request';
  /** 0 for 'kill-request' */
  grace_ms: number;
}
export interface SignalEvent extends EventBase {
  event: 'signal';
  /** the signal's name, e.g. 'SIGTERM' */
  signal: string;
  target: 'provider' | 'group' | 'descendants' | 'namespace' | 'cgroup';
  /** the provider's pid, for targets 'provider' and 'group' */
  pid?: number;
  /** The processes the signal was delivered to (descendants, cgroup; namespace when guardian as PID 1 reads the namespace's /proc). */
  pids?: number[];
  /** the leaf, for target 'cgroup' */
  cgroup?: string;
  reason: 'forwarded' | 'stop' | 'kill' | 'parent-died' | 'timeout';
}
export interface StoppedEvent extends EventBase {
  event: 'stopped';
  /** the provider */
  pid: number;
  signal: 'SIGSTOP' | 'SIGTSTP' | 'SIGTTIN' | 'SIGTTOU' | (string & {});
}
export interface ContinuedEvent extends EventBase {
  event: 'continued';
  /** the provider */
  pid: number;
}
export interface ExitEvent extends EventBase {
  event: 'exit';
  /** the provider's pid */
  pid: number;
  code: number | null;
  signal: string | null;
  core_dumped: boolean;
}
export interface ReleasedEvent extends EventBase {
  event: 'released';
  /** guardian's exit status */
  status: number;
  /** descendants sent the stop signal (null where guardian could not count them) */
  signalled: number | null;
  /** descendants that needed SIGKILL */
  killed: number;
  /** descendants guardian reaped */
  reaped: number;
  /** provider exit to release, milliseconds */
  teardown_ms: number;
  /** the removed leaf, or null (absent from older guardians) */
  cgroup?: string | null;
  /** the leaf's oom_kill count when --memory-max is set, else null */
  oom_kill?: number | null;
  /** The provider's user CPU time, ms, with the children it reaped (wait4; what /usr/bin/time reports). Absent from older guardians. */
  provider_user_ms?: number;
  /** The provider's system CPU time, ms, with the children it reaped. Absent from older guardians. */
  provider_system_ms?: number;
  /** The largest peak RSS, kB, of the provider and the children it reaped (one process's, not a sum). Absent from older guardians. */
  provider_max_rss_kb?: number;
  /** The whole reaped tree's user CPU time, ms (getrusage(RUSAGE_CHILDREN) after the last reap). Absent from older guardians. */
  tree_user_ms?: number;
  /** The whole reaped tree's system CPU time, ms. Absent from older guardians. */
  tree_system_ms?: number;
  /** The largest peak RSS, kB, of any process of the reaped tree. Absent from older guardians. */
  tree_max_rss_kb?: number;
}
export interface ErrorEvent extends EventBase {
  event: 'error';
  /** 125 (guardian's failure), 126 (not executable), 127 (not found) */
  status: number;
  message: string;
  /** An abandoned teardown: the pids guardian was not permitted to signal (the provider included). */
  unkillable?: number[];
  /** An abandoned teardown: the processes of the tree still visible in /proc. */
  remaining?: number[];
}
/** A line that was not a JSON object with an `event` field (produced by this module, not guardian; `ts` is when it was read). */
export interface MalformedEvent extends EventBase {
  event: 'malformed';
  line: string;
  message: string;
}

/** Every event guardian documents, discriminated by `event`. */
export type KnownEvent =
  | FallbackEvent | SpawnedEvent | StoppingEvent | SignalEvent | StoppedEvent | ContinuedEvent
  | ExitEvent | ReleasedEvent | ErrorEvent;

/**
 * What events() yields: a known event, a malformed line, or an event a newer
 * guardian added (readers must ignore what they do not know). Check
 * `ev.event === 'released'` and the type narrows to ReleasedEvent.
 */
export type GuardianEvent = KnownEvent | MalformedEvent;

// --- errors -----------------------------------------------------------------

export type GuardianErrorCode = 'GUARDIAN_NOT_FOUND' | 'BAD_CWD' | 'SPAWN_FAILED' | 'ERROR_EVENT' | 'NO_RELEASE' | 'GUARDIAN_TOO_OLD';

/** Rejection reason of spawned/exit/released (and the 'error' event) when guardian fails or ends without `released`. */
export declare class GuardianError extends Error {
  constructor(message: string, details?: {
    status?: number | null; exitCode?: number | null; signal?: NodeJS.Signals | null;
    event?: ErrorEvent | null; cause?: unknown; code?: GuardianErrorCode | null;
  });
  name: 'GuardianError';
  /** status of guardian's `error` event (125/126/127), else guardian's exit code (125 if it could not be started). */
  status: number | null;
  /** guardian's own exit code, when it exited. */
  exitCode: number | null;
  /** the signal that killed guardian, if any (the driver never sends SIGKILL itself). */
  signal: NodeJS.Signals | null;
  /** the `error` event, when guardian sent one. */
  event: ErrorEvent | null;
  /** what went wrong, for programs. */
  code: GuardianErrorCode | null;
  cause?: unknown;
}

// --- the handle -------------------------------------------------------------

/** Is fd `I` of `S` a pipe (so that the stream exists)? */
type PipedAt<S, I extends 0 | 1 | 2> =
  S extends 'pipe' | 'overlapped' ? true
    : S extends readonly unknown[] ? (S[I] extends 'pipe' | 'overlapped' | null | undefined ? true : false)
      : false;
type StreamAt<S, I extends 0 | 1 | 2, T> = PipedAt<S, I> extends true ? T : null;

export interface StopOptions {
  /** Milliseconds (or a duration string) to wait for `released` before the kill request. */
  grace?: Duration;
  /** Alias of grace. */
  timeout?: Duration;
  /** When it aborts, the kill request. The promise still resolves with `released`. */
  signal?: AbortSignal;
}

/** The handle: a ChildProcess (same members, events and statuses) with guardian's surface beside it. */
export interface Guarded<S extends StdioOption = 'pipe'> extends ChildProcess, AsyncIterable<GuardianEvent> {
  /** guardian's ChildProcess. */
  readonly child: ChildProcess;
  /** guardian's pid (undefined when it could not be started). Not the provider's: see providerPid. */
  readonly guardianPid: number | undefined;
  /** the provider's pid, from `spawned` (undefined before it). */
  readonly providerPid: number | undefined;
  /** the guardian binary that was run. */
  readonly guardianPath: string;
  readonly stdin: StreamAt<S, 0, Writable>;
  readonly stdout: StreamAt<S, 1, Readable>;
  readonly stderr: StreamAt<S, 2, Readable>;
  /** Resolves with `spawned`; rejects with GuardianError (or the ENOENT/EACCES spawn error). */
  readonly spawned: Promise<SpawnedEvent>;
  /** Resolves with the provider's `exit`; rejects likewise. Settles before `released`. */
  readonly exit: Promise<ExitEvent>;
  /** Resolves with `released` (the tree is gone) before 'exit' is emitted; rejects likewise. */
  readonly released: Promise<ReleasedEvent>;
  /** Every event line, from the first, until guardian closes the fd. Each call starts a new replay. */
  events(): AsyncIterableIterator<GuardianEvent>;
  /** Events received so far. */
  readonly received: GuardianEvent[];
  /**
   * ChildProcess.kill, returning whether the signal was sent. kill() and kill('SIGKILL') are the
   * kill request (the provider and its tree SIGKILLed now; signalCode 'SIGKILL'); 'SIGTERM' is
   * the stop request; other signals go to guardian, which forwards them. 'SIGSTOP' throws.
   */
  kill(signal?: NodeJS.Signals | number): boolean;
  /**
   * Stop the tree: SIGTERM to guardian (the stop signal, guardian's grace, then SIGKILL). With
   * a grace (ms or a duration) or {grace, signal}, the kill request follows when `released`
   * is that late or the signal aborts. A signal name sends that signal (legacy form).
   */
  stop(grace?: Duration | StopOptions): Promise<ReleasedEvent>;
  stop(signal: NodeJS.Signals): Promise<ReleasedEvent>;

  /** Every event line as it arrives. */
  on(event: 'event', listener: (event: GuardianEvent) => void): this;
  on(event: string, listener: (...args: any[]) => void): this;
  once(event: 'event', listener: (event: GuardianEvent) => void): this;
  once(event: string, listener: (...args: any[]) => void): this;
}

/** Start `command args...` under guardian with `--events-fd 3`. */
export declare function spawnGuarded<const S extends StdioOption = 'pipe'>(
  command: string, args?: readonly string[], options?: GuardedOptions<S>): Guarded<S>;
export declare function spawnGuarded<const S extends StdioOption = 'pipe'>(
  command: string, options?: GuardedOptions<S>): Guarded<S>;
export default spawnGuarded;

/** guardian's command-line options for `options` (everything before `--`), with `--events-fd 3`. */
export declare function guardianArgs(options?: GuardedOptions): string[];

/** The guardian options the driver passes (checked against guardian's spec/options.json). */
export declare const OPTIONS: ReadonlyArray<{
  readonly key: string;
  readonly long: string;
  readonly kind: 'duration' | 'signal' | 'choice' | 'path' | 'flag' | 'count';
  readonly extra?: readonly string[] | number;
}>;

/** guardian options the driver does not take as camelCase options, with the reason. */
export declare const NOT_PASSED: Readonly<Record<string, string>>;
/**
 * `{command, args}` running `command args...` under guardian without an
 * events fd: a command prefix for launchers that spawn it themselves, e.g.
 * `new StdioClientTransport({...guardedCommand('npx', ['-y', 'server'])})`.
 */
export declare function guardedCommand(command: string, args?: readonly string[], options?: CommandOptions): GuardedCommand<{}>;
export declare function guardedCommand<P extends { command: string; args?: string[] }>(params: P, args?: readonly string[], options?: CommandOptions):
  GuardedCommand<Omit<P, 'command' | 'args'>>;
/** guardedCommand's options: guardian's, and where the events go. */
export type CommandOptions = Omit<GuardedOptions, 'stdio' | 'timeout' | 'killSignal' | 'signal' | 'shell' | 'detached' | 'uid' | 'gid' | 'windowsHide' | 'windowsVerbatimArguments'>
  & { eventsFile?: string };
/** What guardedCommand returns: the launcher's parameters, with guardian's events beside them. */
export type GuardedCommand<P> = P & {
  command: string;
  args: string[];
  readonly spawned: Promise<SpawnedEvent>;
  readonly exit: Promise<ExitEvent>;
  readonly released: Promise<ReleasedEvent>;
  readonly received: GuardianEvent[];
  on(event: 'event', listener: (event: GuardianEvent) => void): GuardedCommand<P>;
  off(event: 'event', listener: (event: GuardianEvent) => void): GuardedCommand<P>;
};
/** child_process.spawn's drop-in. */
export declare const spawn: typeof spawnGuarded;
/** The ChildProcess-compatible handle class. */
export declare const GuardedChildProcess: new (...args: never[]) => Guarded;
/** Node's AbortError, as the `signal` option emits it. */
export declare class AbortError extends Error { code: 'ABORT_ERR'; }
/** guardian's duration rule: nanoseconds, or guardian's message as a TypeError/RangeError. */
export declare function parseDuration(text: string): bigint;
/** execvp's resolution: {file, code: null | 'ENOENT' | 'EACCES'}. */
export declare function resolveCommand(command: string, pathVar?: string, cwd?: string | URL): { file: string; code: null | 'ENOENT' | 'EACCES' };
export declare function compareVersions(a: string, b: string): -1 | 0 | 1;
export { DRIVER, EVENTS, GUARDIAN_OPTIONS } from './lib/spec.js';

/** Which rule found the binary: 'options.guardianPath', '$GUARDIAN_BIN', the platform package's name, or 'PATH'. */
export type GuardianSource = 'options.guardianPath' | '$GUARDIAN_BIN' | 'PATH' | (string & {});
/** Where the binary is and which rule found it; throws GuardianError (code 'GUARDIAN_NOT_FOUND') naming all four. */
export declare function locateGuardian(options?: GuardedOptions, env?: NodeJS.ProcessEnv):
  { path: string; source: GuardianSource };
/** locateGuardian(...).path */
export declare function resolveGuardianPath(options?: GuardedOptions, env?: NodeJS.ProcessEnv): string;
/** 'treeguardian-linux-x64' or '-arm64' for this system, else null. */
export declare function platformPackage(platform?: string, arch?: string): string | null;
/** Now on CLOCK_MONOTONIC in seconds: the clock of the events' `ts`. */
export declare function monotonicNow(): number;
/** Parse one event line: null for a blank line; throws for anything but a JSON object with an `event` string. */
export declare function parseEventLine(line: string): GuardianEvent | null;

/** Incremental splitter of a byte/character stream into lines. */
export declare class LineSplitter {
  push(chunk: Uint8Array | string): string[];
  end(): string[];
}
