#!/usr/bin/env node
// treeguardian-mcp: wrap / unwrap / check the stdio MCP servers in a host's config files.
//
//   npx -p treeguardian treeguardian-mcp wrap [--dry-run] [FILE...]
//
// One implementation serves both packages: mcp-wrap.py (the same bytes as the Python package's
// treeguardian/_mcp_wrap.py; packaging/mcp/sync.py keeps them equal and both test suites check
// it). It needs only python3's standard library (3.9 or later), which Linux distributions ship;
// this bin finds the guardian this package ships (locateGuardian: $GUARDIAN_BIN, else the
// platform package) and passes its absolute path, then runs the tool with this process's
// arguments, stdio and exit status.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { locateGuardian } from './index.js';

const script = fileURLToPath(new URL('./mcp-wrap.py', import.meta.url));
const argv = process.argv.slice(2);
const extra = [];
if (!argv.some((a) => a === '--guardian' || a.startsWith('--guardian='))) {
  try {
    extra.push('--guardian', locateGuardian({}, process.env).path);
  } catch {
    // No guardian here: wrap says so (with the fix); unwrap and check do not need one.
  }
}
const python = process.env.TREEGUARDIAN_PYTHON || 'python3';
const r = spawnSync(python, [script, ...extra, ...argv], { stdio: 'inherit' });
if (r.error) {
  console.error(
    `treeguardian-mcp: cannot run ${python} (${r.error.code ?? r.error.message}): this command needs Python 3.9 or later `
      + "(its standard library only); install python3, or run the Python package's copy: uvx --from treeguardian treeguardian-mcp",
  );
  process.exit(127);
}
process.exit(r.status ?? 128 + 9);
