// Idiomatic use of treeguardian; must compile with `tsc --strict`
// (test/types.sh). Lines marked @ts-expect-error must stay errors: they prove
// the types are narrow, not merely permissive. Never run, only type-checked.
import { spawnGuarded, guardedCommand, monotonicNow, GuardianError, type GuardianEvent, type ReleasedEvent } from 'treeguardian';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';

export async function defaults(): Promise<number> {
  const g = spawnGuarded('my-server', ['--port', '0'], { grace: '2s' });
  // default stdio is 'pipe': the streams are not null
  g.stdin.write('hello\n');
  g.stdout.setEncoding('utf8');
  g.stderr.pipe(process.stderr);
  const spawned = await g.spawned;
  const pids: number[] = [spawned.pid, spawned.guardian_pid];
  const provider: number | undefined = g.providerPid;
  const guardian: number | undefined = g.guardianPid;
  void provider; void guardian;
  for await (const ev of g.events()) {
    if (ev.event === 'released') {
      const status: number = ev.status; // narrowed to ReleasedEvent
      void status;
    } else if (ev.event === 'signal') {
      const target: 'provider' | 'group' | 'descendants' | 'namespace' | 'cgroup' = ev.target;
      const pid: number | undefined = ev.pid;
      void target; void pid;
    } else if (ev.event === 'stopping' && ev.reason === 'kill-request') {
      const grace: number = ev.grace_ms;
      void grace;
    } else if (ev.event === 'exit') {
      const code: number | null = ev.code;
      void code;
    } else if (ev.event === 'malformed') {
      const line: string = ev.line;
      void line;
    }
    // wall-clock time of an event
    const at = new Date(Date.now() - (monotonicNow() - ev.ts) * 1000);
    void at;
  }
  g.on('event', (ev: GuardianEvent) => { if (ev.event === 'spawned') void ev.mode; });
  g.on('error', (err) => { if (err instanceof GuardianError) void err.code; });
  const rel: ReleasedEvent = await g.stop({ timeout: 5000, signal: AbortSignal.timeout(10000) });
  const sent: boolean = g.kill();
  void sent;
  // @ts-expect-error a typo is not an option
  spawnGuarded('x', [], { graec: '1s' });
  const asChild: import('node:child_process').ChildProcess = g;
  void asChild;
  await g.stop('SIGINT');
  return rel.status + pids.length;
}

export function explicitStdio(): void {
  const a = spawnGuarded('x', [], { stdio: ['ignore', 'pipe', 'inherit'] });
  a.stdout.on('data', () => {});
  // @ts-expect-error stdin is 'ignore': null
  a.stdin.write('x');
  // @ts-expect-error stderr is 'inherit': null
  a.stderr.on('data', () => {});
  const b = spawnGuarded('x', { stdio: 'ignore' });
  // @ts-expect-error every stream is null with 'ignore'
  b.stdout.on('data', () => {});
  const c = spawnGuarded('x', ['a'], { stdio: ['pipe'] });
  c.stdin.end(); c.stdout.resume(); c.stderr.resume();
}

export function narrowing(ev: GuardianEvent): void {
  // @ts-expect-error `status` exists on released and error events only
  void ev.status;
  if (ev.event === 'error') void ev.status;
  // @ts-expect-error not a reason guardian documents
  if (ev.event === 'stopping' && ev.reason === 'bored') return;
}

// The MCP recipe (README): guardian as the transport's command prefix.
export async function mcp(): Promise<void> {
  const transport = new StdioClientTransport({
    ...guardedCommand('npx', ['-y', '@modelcontextprotocol/server-everything'], { grace: '1s' }),
    stderr: 'inherit',
  });
  const client = new Client({ name: 'host', version: '1.0.0' });
  await client.connect(transport);
  await client.listTools();
  await client.close();
}

// The one-line change (README): the host's own parameters object, wrapped.
export async function mcpDropIn(): Promise<number> {
  const server = guardedCommand({ command: 'npx', args: ['-y', '@modelcontextprotocol/server-everything'], stderr: 'inherit' as const });
  const transport = new StdioClientTransport(server);
  const client = new Client({ name: 'host', version: '1.0.0' });
  await client.connect(transport);
  await client.close();
  const released: ReleasedEvent = await server.released;
  // @ts-expect-error a typo is not an option of guardedCommand either
  guardedCommand('x', [], { graec: 1 });
  return released.teardown_ms;
}

// Node's own options, as Node means them; guardian's timeout has its own name.
export function nodeOptions(): boolean {
  const ac = new AbortController();
  const c = spawnGuarded('sleep', ['1'], { timeout: 100, killSignal: 'SIGINT', signal: ac.signal, guardianTimeout: '5s' });
  c.on('exit', (code: number | null, signal: NodeJS.Signals | null) => { void code; void signal; });
  const status: [number | null, NodeJS.Signals | null, boolean] = [c.exitCode, c.signalCode, c.killed];
  void status;
  return c.kill('SIGTERM');
}
