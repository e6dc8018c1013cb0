// An MCP client session whose tool calls go through the retry gate.
import { ReconcilerClient, ToolEffects } from "@effect-reconciler/client";
import { reconciledClient } from "@effect-reconciler/client/mcp";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";

export async function chargeOverMcp(client: Client, runId: string) {
  const effects = new ToolEffects({
    provider: "stripe", backend: new ReconcilerClient(), // $RECONCILER_URL
    actions: { charge: "payment_intents.create" },
    // The server's charge tool attaches _meta["io.reconciler/operation_id"] to the provider's
    // metadata: say so, or no probe's zero counts.
    tagged: ["charge"],
  });
  const tools = reconciledClient(client, effects, { scope: runId });
  return await tools.callTool({ name: "charge", arguments: { order: "A-17", amount: 1200 } });
}
