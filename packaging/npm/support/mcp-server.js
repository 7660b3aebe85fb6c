// A real MCP server (the SDK's McpServer over stdio) for test/mcp.test.js.
//
//   mcp-server.js cooperative NONCE   exits when stdin closes or on SIGTERM
//   mcp-server.js stubborn NONCE      ignores SIGTERM and the end of stdin
//
// Either way it first starts a grandchild that calls setsid and is tagged
// `NONCE-child` (the stubborn one ignores SIGTERM too), the way language
// servers and MCP servers leave helpers behind. The tool `child` answers with
// the grandchild's pid once it runs. Every process carries NONCE in its argv.
import { spawn } from 'node:child_process';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

const [mode, nonce] = process.argv.slice(2);
if (!['cooperative', 'stubborn'].includes(mode) || !nonce) {
  console.error('usage: mcp-server.js cooperative|stubborn NONCE');
  process.exit(2);
}
const stubborn = mode === 'stubborn';
if (stubborn) {
  process.on('SIGTERM', () => {});
  setInterval(() => {}, 1 << 30);
} else {
  process.on('SIGTERM', () => process.exit(143));
  process.stdin.on('end', () => process.exit(0));
}

const trap = stubborn ? "trap '' TERM; " : '';
// Not `detached`: setsid(1) forks when its caller already leads a group, and
// the pid reported would then be gone.
const child = spawn('setsid', ['bash', '-c', `${trap}exec -a "$0-child" sleep 300`, nonce], {
  stdio: 'ignore',
});
child.unref();

const server = new McpServer({ name: `guardian-test-${mode}`, version: '1.0.0' });
server.registerTool('child', { description: "the setsid grandchild's pid" }, async () => ({
  content: [{ type: 'text', text: String(child.pid) }],
}));
await server.connect(new StdioServerTransport());
