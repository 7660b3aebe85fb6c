// Run inside an empty project where only the packed tarballs were installed
// (test/pack.sh): no guardian on PATH, no GUARDIAN_BIN. The driver must find
// the binary in its platform package and run a provider whose setsid child is
// gone at `released`. Prints one line; exits non-zero on any failure.
import { readdirSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { spawnGuarded, locateGuardian, platformPackage } from 'treeguardian';

const fail = (msg) => { console.error(`pack-smoke: ${msg}`); process.exit(1); };
if (process.env.GUARDIAN_BIN) fail('GUARDIAN_BIN is set');
const where = locateGuardian();
if (where.source !== platformPackage()) fail(`binary found through ${where.source} (${where.path}), not ${platformPackage()}`);
if (!where.path.includes('/node_modules/treeguardian-linux-')) fail(`unexpected binary path ${where.path}`);

const nonce = `guardian-pack-${process.pid}-${randomBytes(4).toString('hex')}`;
const procsWith = () => readdirSync('/proc').filter((n) => /^\d+$/.test(n)).filter((n) => {
  try { return readFileSync(`/proc/${n}/cmdline`, 'latin1').includes(nonce); } catch { return false; }
});
// The provider prints, leaves a setsid grandchild behind and exits 7.
const script = 'setsid bash -c \'exec -a "$0-esc" sleep 300\' "$0" & echo hello; exit 7';
const g = spawnGuarded('bash', ['-c', script, nonce], { stdio: ['ignore', 'pipe', 'inherit'], grace: 2000 });
let out = '';
g.stdout.setEncoding('utf8');
g.stdout.on('data', (d) => { out += d; });
// The output is judged once the pipe is closed: `released` (on the events fd) can arrive in the
// same turn of the event loop before the stdout pipe's data is read.
const stdoutEnded = new Promise((resolve) => g.stdout.on('close', resolve));
const timer = setTimeout(() => fail(`no released within 30 s: ${JSON.stringify(g.received)}`), 30000);
const rel = await g.released;
clearTimeout(timer);
if (rel.status !== 7) fail(`released.status ${rel.status}, expected 7`);
const left = procsWith();
if (left.length !== 0) fail(`processes left at released: ${left.join(' ')}`);
const outTimer = setTimeout(() => fail(`stdout not closed within 30 s; output so far ${JSON.stringify(out)}`), 30000);
await stdoutEnded;
clearTimeout(outTimer);
if (out.trim() !== 'hello') fail(`provider output ${JSON.stringify(out)}`);
console.log(`provider ran under ${where.path.replace(/^.*node_modules\//, '')}: status 7, tree gone`);
