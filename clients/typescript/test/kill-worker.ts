/**
 * A worker for the SIGKILL test (mcp.test.ts): an MCP client session gated by
 * `reconciledClient`, calling an MCP server's `charge` tool (in this process, over the SDK's
 * in-memory transport) that charges through Stripe's SDK.
 *
 *   node dist/test/kill-worker.js SIDECAR SANDBOX RUN_ID [kill]
 *
 * With `kill`, the worker SIGKILLs itself once the charge is sent and answered and before its
 * attempt's completion is recorded: the effect is done, the record says only "dispatching".
 * It prints the tool's result (JSON) when it lives.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";

import { KEY_META, OPERATION_META, reconciledClient } from "../src/adapters/mcp.js";
import {
  ReconcilerClient,
  ToolEffects,
  type AttemptIn,
  type IntentIn,
  type Recorder,
  type RetryIn,
} from "../src/index.js";
import { ARGS, Payments } from "./charges.js";
import { stripeFor } from "./harness.js";

const [sidecar, sandbox, runId, kill] = process.argv.slice(2) as [string, string, string,
  string | undefined];

/** The sidecar, except that the worker dies where a crash hurts most. */
class KillingRecorder implements Recorder {
  constructor(readonly inner: ReconcilerClient) {}
  recordIntent(intent: IntentIn) {
    return this.inner.recordIntent(intent);
  }
  reconcile(operationId: string) {
    return this.inner.reconcile(operationId);
  }
  askRetry(operationId: string, retry: RetryIn) {
    return this.inner.askRetry(operationId, retry);
  }
  recordAttempt(operationId: string, attempt: AttemptIn) {
    if (kill === "kill" && attempt.outcome !== "dispatching") process.kill(process.pid, "SIGKILL");
    return this.inner.recordAttempt(operationId, attempt);
  }
}

const payments = new Payments(stripeFor(sandbox));
const server = new McpServer({ name: "payments", version: "1.0.0" });
server.registerTool("charge", {
  description: "Charge an order",
  inputSchema: { order: z.string(), amount: z.number() },
}, async (args, extra) => {
  // What the gated client put in _meta: the upstream attaches it to the provider's request.
  const meta = extra._meta ?? {};
  const key = meta[KEY_META];
  const charged = await payments.charge(args, {
    operationId: String(meta[OPERATION_META]),
    idempotencyKey: typeof key === "string" ? key : null,
  });
  return { content: [{ type: "text", text: JSON.stringify(charged) }], structuredContent: charged };
});
const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
await server.connect(serverSide);
const client = new Client({ name: "worker", version: "1.0.0" });
await client.connect(clientSide);

const effects = new ToolEffects({
  provider: "stripe", backend: new KillingRecorder(new ReconcilerClient({ baseUrl: sidecar })),
  actions: { charge: "payment_intents.create" }, tagged: ["charge"],
});
const tools = reconciledClient(client, effects, { scope: runId });
const result = await tools.callTool({ name: "charge", arguments: ARGS });
process.stdout.write(JSON.stringify(result) + "\n");
await client.close();
