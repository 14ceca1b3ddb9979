// Serves the reference server over stdio, so plangate can reach it as a
// stdio upstream, at either protocol revision:
//
// * 2025-11-25 (the first message is `initialize`): the same MCP server
//   factory its HTTP endpoint uses per session, on the SDK's stdio
//   transport.
// * 2026-07-28 (the first message is anything else, e.g. `server/discover`):
//   the reference server implements this revision only in the stateless
//   handler of its HTTP endpoint, so each message read from stdin is posted
//   to that endpoint (on a private loopback port) and every message of the
//   answer — a JSON body, JSON lines or an SSE stream — is written to
//   stdout as one line. `notifications/cancelled` aborts the named request's
//   POST, as closing its stream would over HTTP.
//
// stdout carries MCP only: the example's console.log lines go to stderr.
import { connect, createServer } from 'node:net';
import { PassThrough } from 'node:stream';
import { createInterface } from 'node:readline';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';

console.log = (...args: unknown[]) => console.error(...args);

/** A free loopback port for the HTTP endpoint the 2026-07-28 path posts to. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

process.env.PORT = String(await freePort());
const endpoint = `http://127.0.0.1:${process.env.PORT}/mcp`;
const { createMcpServer } = await import('./everything-server.ts');

/** Resolves once the HTTP endpoint accepts connections (at most 10 s). */
async function listening(port: number) {
  for (let i = 0; i < 200; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (up) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}
await listening(Number(process.env.PORT));

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
let legacy: PassThrough | undefined;
let modern = false;
const inFlight = new Map<string, AbortController>();

function write(message: unknown) {
  process.stdout.write(JSON.stringify(message) + '\n');
}

/** Every JSON-RPC message in an answer body, as it arrives. */
async function relay(response: Response) {
  const kind = response.headers.get('content-type') ?? '';
  if (!response.body) return;
  const decoder = new TextDecoder();
  let buffer = '';
  const sse = kind.startsWith('text/event-stream');
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk as Uint8Array, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end).trim();
      buffer = buffer.slice(end + 1);
      const data = sse ? (line.startsWith('data:') ? line.slice(5).trim() : '') : line;
      if (data) write(JSON.parse(data));
    }
  }
  const rest = buffer.trim();
  if (rest && !sse) write(JSON.parse(rest));
}

async function post(message: any) {
  const key = message.id === undefined ? undefined : JSON.stringify(message.id);
  const abort = new AbortController();
  if (key) inFlight.set(key, abort);
  try {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version':
        message.params?._meta?.['io.modelcontextprotocol/protocolVersion'] ?? '2026-07-28'
    };
    if (message.method) headers['mcp-method'] = message.method;
    const name = message.params?.name ?? message.params?.uri;
    if (typeof name === 'string') headers['mcp-name'] = name;
    const response = await fetch(endpoint, {
      method: 'POST',
      headers,
      body: JSON.stringify(message),
      signal: abort.signal
    });
    await relay(response);
  } catch (e) {
    if (!abort.signal.aborted && key) {
      write({ jsonrpc: '2.0', id: message.id, error: { code: -32603, message: String(e) } });
    }
  } finally {
    if (key) inFlight.delete(key);
  }
}

lines.on('line', (line) => {
  if (legacy) {
    legacy.write(line + '\n');
    return;
  }
  if (!line.trim()) return;
  const message = JSON.parse(line);
  if (!modern && message.method === 'initialize') {
    legacy = new PassThrough();
    legacy.write(line + '\n');
    const server = createMcpServer();
    void server.connect(new StdioServerTransport(legacy, process.stdout));
    return;
  }
  modern = true;
  if (message.method === 'notifications/cancelled') {
    inFlight.get(JSON.stringify(message.params?.requestId))?.abort();
    return;
  }
  void post(message);
});
lines.on('close', () => {
  legacy?.end();
  for (const abort of inFlight.values()) abort.abort();
  process.exit(0);
});
