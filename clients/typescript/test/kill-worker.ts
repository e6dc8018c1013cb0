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
import { reconciledClient } from "../src/adapters/mcp.js";
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
import { connectedClient } from "./mcp-server.js";

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

const client = await connectedClient(new Payments(stripeFor(sandbox)));

const effects = new ToolEffects({
  provider: "stripe", backend: new KillingRecorder(new ReconcilerClient({ baseUrl: sidecar })),
  actions: { charge: "payment_intents.create" }, tagged: ["charge"],
});
const tools = reconciledClient(client, effects, { scope: runId });
const result = await tools.callTool({ name: "charge", arguments: ARGS });
process.stdout.write(JSON.stringify(result) + "\n");
await client.close();
