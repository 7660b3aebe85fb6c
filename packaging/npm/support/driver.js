// A driver process for the abrupt-termination tests. It starts the provider
// given in $GUARDIAN_TEST_PROVIDER (a JSON argv) under guardian, prints one
// JSON line {guardianPid, providerPid, ...} once guardian reports `spawned`,
// and then idles until it is killed.
//
//   driver.js main    spawnGuarded from the main thread
//   driver.js worker  spawnGuarded from a worker_thread; the worker then exits
//                     while this process lives on; the line is printed after
//                     the worker's exit, with workerExited: true.
//   driver.js exit    spawnGuarded from the main thread, print, unref() the
//                     handle and let the process end on its own, exit code 0.
import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import { spawnGuarded } from '../index.js';

let handle = null;

async function start() {
  const [command, ...args] = JSON.parse(process.env.GUARDIAN_TEST_PROVIDER);
  const h = spawnGuarded(command, args, {
    stdio: ['ignore', 'ignore', 'inherit'],
    grace: process.env.GUARDIAN_TEST_GRACE || '500ms',
  });
  handle = h;
  const ev = await h.spawned;
  return { guardianPid: h.guardianPid, providerPid: h.providerPid ?? ev.pid, mode: ev.mode };
}

const idle = () => setInterval(() => {}, 1 << 30);

if (!isMainThread) {
  const info = await start();
  parentPort.postMessage(info);
  // End this thread while the process lives on. process.exit() in a worker
  // stops only the worker.
  process.exit(0);
} else if (process.argv[2] === 'worker') {
  idle();
  const worker = new Worker(new URL(import.meta.url));
  let info = null;
  worker.on('message', (m) => { info = m; });
  worker.on('error', (e) => { console.error('driver worker failed:', e); process.exit(3); });
  worker.on('exit', () => {
    if (!info) { console.error('driver worker exited without starting guardian'); process.exit(3); }
    process.stdout.write(JSON.stringify({ ...info, workerExited: true }) + '\n');
  });
} else if (process.argv[2] === 'exit') {
  try {
    process.stdout.write(JSON.stringify(await start()) + '\n');
    handle.unref();
  } catch (e) {
    console.error('driver failed:', e);
    process.exit(3);
  }
} else {
  idle();
  try {
    process.stdout.write(JSON.stringify(await start()) + '\n');
  } catch (e) {
    console.error('driver failed:', e);
    process.exit(3);
  }
}
