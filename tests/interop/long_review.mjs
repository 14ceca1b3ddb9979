// A person who takes their time, in a client built on the official
// TypeScript SDK: it connects to plangate over streamable HTTP with an API
// key, begins a plan-mode session, plans one write and calls
// exit_plan_mode with a request timeout of TIMEOUT_MS that the SDK
// restarts on progress (resetTimeoutOnProgress); its elicitation handler
// answers "approve" only after DELAY_MS (longer than the timeout). It
// prints one JSON line: the answer (or the error), every progress
// notification heard (value and message), and the seconds it took.
// With --ask MODE it begins a session in MODE (a mode that asks before a
// write) instead, and the long call is the write itself: the person is
// asked about that one call.
//
// usage: node long_review.mjs NODE_MODULES URL TOKEN TOOL ARGS_JSON DELAY_MS TIMEOUT_MS [--no-progress | --ask MODE]
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, url, token, tool, argsJson, delayMs, timeoutMs, flag, askMode] = process.argv.slice(2);
if (!nodeModules || !timeoutMs || (flag === "--ask" && !askMode)) {
  process.stderr.write("usage: node long_review.mjs NODE_MODULES URL TOKEN TOOL ARGS_JSON DELAY_MS TIMEOUT_MS [--no-progress | --ask MODE]\n");
  process.exit(2);
}
const load = (rel) => import(pathToFileURL(join(nodeModules, "@modelcontextprotocol/sdk/dist/esm", rel)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { ElicitRequestSchema } = await load("types.js");

const withProgress = flag !== "--no-progress";
const client = new Client(
  { name: "long-review", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler(ElicitRequestSchema, async () => {
  await new Promise((resolve) => setTimeout(resolve, Number(delayMs)));
  return { action: "accept", content: { decision: "approve" } };
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const asking = flag === "--ask";
await client.callTool({ name: "plangate_begin_session", arguments: { mode: asking ? askMode : "plan" } });
const long = asking
  ? { name: tool, arguments: JSON.parse(argsJson) }
  : { name: "plangate_exit_plan_mode", arguments: { plan: "retitle the page" } };
if (!asking) {
  await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
}
const progress = [];
const started = Date.now();
const out = { progress };
try {
  const options = { timeout: Number(timeoutMs) };
  if (withProgress) {
    options.resetTimeoutOnProgress = true;
    options.onprogress = (p) => progress.push({ progress: p.progress, message: p.message ?? "" });
  }
  out.result = await client.callTool(long, undefined, options);
} catch (e) {
  out.error = String(e && e.message ? e.message : e);
}
out.seconds = (Date.now() - started) / 1000;
process.stdout.write(JSON.stringify(out) + "\n");
await client.close();
process.exit(0);
