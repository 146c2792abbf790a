// One MCP client from the TypeScript SDK calls one tool of mcp-listen over stdio and prints
// the outcome as one JSON line: {"tools": [...], "result": <CallToolResult>} when callTool
// resolved, {"thrown": "<message>"} when it threw (e.g. a 1.x output-schema complaint).
//
// usage: node call_tool.mjs <flavour: sdk1|sdk2> <node_modules parent dir> <spec.json>
// spec: {"command", "args", "env", "tool", "arguments", "timeoutMs"}
// The SDK is loaded from the given install (tests/assets/node/<name>), not from a global one.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

const [flavour, installDir, specPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, "utf8"));
const require = createRequire(resolve(installDir, "package.json"));

const modules = {
  sdk1: ["@modelcontextprotocol/sdk/client/index.js", "@modelcontextprotocol/sdk/client/stdio.js"],
  sdk2: ["@modelcontextprotocol/client", "@modelcontextprotocol/client/stdio"],
}[flavour];
const { Client } = require(modules[0]);
const { StdioClientTransport } = require(modules[1]);

const transport = new StdioClientTransport({
  command: spec.command, args: spec.args, env: spec.env, stderr: "inherit",
});
const client = new Client({ name: `mcp-listen-tests-${flavour}`, version: "0" });
const out = {};
try {
  await client.connect(transport);
  // Real clients list the tools first; the 1.x client caches each outputSchema's validator here.
  out.tools = (await client.listTools()).tools.map((tool) => tool.name);
  out.result = await client.callTool(
    { name: spec.tool, arguments: spec.arguments },
    undefined,
    { timeout: spec.timeoutMs ?? 120000 },
  );
} catch (err) {
  out.thrown = String(err && err.message ? err.message : err);
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
