// A transparent stdio tap for the interop suite: runs an MCP server as its
// child, passes every line between its own stdin/stdout and the child's
// unchanged, and appends each JSON-RPC message to LOGFILE as one JSON line
// {"t": ms, "dir": "to_server"|"from_server", "msg": …}. The tests read the
// log to see what really reached the upstream (e.g. notifications/cancelled)
// and what it answered. The child's stderr passes through to ours.
//
// usage: node tap.mjs LOGFILE -- COMMAND [ARGS…]
import { spawn } from "node:child_process";
import { openSync, writeSync } from "node:fs";
import readline from "node:readline";

const [logPath, sep, command, ...args] = process.argv.slice(2);
if (!logPath || sep !== "--" || !command) {
  process.stderr.write("usage: node tap.mjs LOGFILE -- COMMAND [ARGS...]\n");
  process.exit(2);
}
const log = openSync(logPath, "a");
const record = (dir, line) => {
  let msg;
  try {
    msg = JSON.parse(line);
  } catch {
    msg = { unparsed: line };
  }
  writeSync(log, JSON.stringify({ t: Date.now(), dir, msg }) + "\n");
};

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  record("to_server", line);
  child.stdin.write(line + "\n");
});
process.stdin.on("end", () => child.stdin.end());
readline.createInterface({ input: child.stdout }).on("line", (line) => {
  record("from_server", line);
  process.stdout.write(line + "\n");
});
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    child.kill(sig);
    process.exit(0);
  });
}
