/**
 * An MCP client session of `@modelcontextprotocol/sdk`, gated: a worker SIGKILLed between the
 * charge and its attempt's record, restarted with the same run, makes exactly one charge, and
 * the restarted worker's tool result names it; an upstream's own error result is recorded and
 * handed back unchanged.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, it } from "node:test";

import { reconciledClient } from "../src/adapters/mcp.js";
import { ReconcilerClient, toolOperation, ToolEffects } from "../src/index.js";
import { ARGS, Payments } from "./charges.js";
import { PACKAGE_DIR, startStack, stripeFor, type Stack } from "./harness.js";
import { connectedClient } from "./mcp-server.js";

const WORKER = join(PACKAGE_DIR, "dist/test/kill-worker.js");
const WORKER_TIMEOUT_MS = 30_000;

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => stack.close());

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function worker(runId: string, kill: boolean): Promise<Exit> {
  const child = spawn(process.execPath, [WORKER, stack.sidecar, stack.sandbox.url, runId,
    ...(kill ? ["kill"] : [])], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => { stdout += chunk.toString(); });
  child.stderr.on("data", (chunk: Buffer) => { stderr += chunk.toString(); });
  const timer = setTimeout(() => child.kill("SIGKILL"), WORKER_TIMEOUT_MS);
  return new Promise((done) => child.on("close", (code, signal) => {
    clearTimeout(timer);
    done({ code, signal, stdout, stderr });
  }));
}

it("a worker killed between the send and its record, restarted with the same run, charges once",
  async () => {
    const runId = "run-mcp-kill";
    const killed = await worker(runId, true);
    assert.equal(killed.signal, "SIGKILL", killed.stderr);
    const operationId = toolOperation(runId, "charge", ARGS);
    const before = await stack.sandbox.charges(operationId);
    assert.equal(before.length, 1, "the killed worker's charge was made");

    const restarted = await worker(runId, false);
    assert.equal(restarted.code, 0, restarted.stderr);
    const result = JSON.parse(restarted.stdout) as { content: { text: string }[]; isError: boolean };
    assert.match(result.content[0]?.text ?? "", new RegExp(`charge: done \\(${before[0]?.ref}\\)`));
    assert.equal((await stack.sandbox.charges(operationId)).length, 1, "exactly one effect");
  });

it("an upstream's isError result is recorded as its answer (502) and handed back unchanged",
  async () => {
    const sidecar = new ReconcilerClient({ baseUrl: stack.sidecar });
    const effects = new ToolEffects({ provider: "stripe", backend: sidecar, tagged: ["charge_declined"] });
    const client = await connectedClient(new Payments(stripeFor(stack.sandbox.url)));
    const result = await reconciledClient(client, effects, { scope: "run-mcp-declined" })
      .callTool({ name: "charge_declined", arguments: ARGS });
    await client.close();
    assert.deepEqual(result, { content: [{ type: "text", text: "card_declined" }], isError: true });
    const operation = await sidecar.get(toolOperation("run-mcp-declined", "charge_declined", ARGS));
    assert.deepEqual(operation.attempts.map((a) => [a.outcome, a.status]), [["response", 502]]);
  });
