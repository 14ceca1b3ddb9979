// Serves the reference server's MCP server (the same factory its HTTP
// endpoint uses per session) over stdio, so plangate can reach it as a
// stdio upstream. stdout carries MCP only: the example's console.log lines
// go to stderr. Its HTTP listener still starts (on a free loopback port,
// unused).
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

console.log = (...args: unknown[]) => console.error(...args);
process.env.PORT = '0';
const { createMcpServer } = await import('./everything-server.ts');
const server = createMcpServer();
await server.connect(new StdioServerTransport());
