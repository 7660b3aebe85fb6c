// Checks that a file is a static ELF executable for a given machine:
//   node check-elf.mjs FILE x86_64|aarch64
// Prints one line and exits 0, or names what is wrong and exits 1. Used by
// build-packages.sh and test/platforms.test.js (the arm64 binary cannot run
// here, so its header is what can be checked).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const MACHINES = { x86_64: 62, aarch64: 183 };
const PT_INTERP = 3;
const PT_DYNAMIC = 2;

/** {machine, type, interp, dynamic} of a 64-bit little-endian ELF file; throws when it is not one. */
export function elfInfo(file) {
  const b = readFileSync(file);
  if (b.length < 64 || b.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${file} is not an ELF file`);
  if (b[4] !== 2 || b[5] !== 1) throw new Error(`${file} is not a 64-bit little-endian ELF file`);
  const type = b.readUInt16LE(16);
  const machine = b.readUInt16LE(18);
  const phoff = Number(b.readBigUInt64LE(32));
  const phentsize = b.readUInt16LE(54);
  const phnum = b.readUInt16LE(56);
  let interp = false;
  let dynamic = false;
  for (let i = 0; i < phnum; i++) {
    const t = b.readUInt32LE(phoff + i * phentsize);
    if (t === PT_INTERP) interp = true;
    if (t === PT_DYNAMIC) dynamic = true;
  }
  return { machine, type, interp, dynamic };
}

/** Throws unless `file` is a static (no interpreter) executable for `machineName`. */
export function checkStaticElf(file, machineName) {
  const want = MACHINES[machineName];
  if (want === undefined) throw new Error(`unknown machine ${machineName}`);
  const info = elfInfo(file);
  if (info.machine !== want) throw new Error(`${file}: ELF machine ${info.machine}, expected ${want} (${machineName})`);
  if (info.type !== 2 && info.type !== 3) throw new Error(`${file}: ELF type ${info.type} is not an executable`);
  if (info.interp) throw new Error(`${file}: has a program interpreter (dynamically linked)`);
  return `${file}: ELF ${machineName}, ${info.type === 3 ? 'static-pie' : 'static'} executable, no interpreter`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    console.log(checkStaticElf(process.argv[2], process.argv[3]));
  } catch (e) {
    console.error(`check-elf: ${e.message}`);
    process.exit(1);
  }
}
